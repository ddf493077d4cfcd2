"""The dashboard's time series: bounded rings of cluster and task samples."""

from __future__ import annotations

from iris.cluster.controller.samples import ClusterSamples, scale_group_samples
from iris.rpc import cluster_pb2 as pb


def _running(task_id: str, cpu: float, memory: int, attempt: int = 0) -> pb.WorkerTaskStatus:
    return pb.WorkerTaskStatus(
        task_id=task_id,
        attempt_id=attempt,
        state=pb.TASK_STATE_RUNNING,
        usage=pb.ResourceUsage(cpu_percent=cpu, memory_bytes=memory),
    )


def test_samples_job_states_keep_the_newest_window_with_state_names() -> None:
    samples = ClusterSamples(interval_ms=1000, cluster_samples=3)
    for i in range(5):
        samples.record_cluster(i, {pb.JOB_STATE_RUNNING: i, pb.JOB_STATE_PENDING: 1}, None)

    series = samples.series()

    assert [s.at_ms for s in series.job_states] == [2, 3, 4]
    assert dict(series.job_states[-1].counts) == {"running": 4, "pending": 1}
    assert series.interval_ms == 1000
    assert list(series.scale_groups) == []


def test_scale_group_samples_count_ready_and_booting_slices_beside_demand() -> None:
    status = pb.GetAutoscalerStatusResponse(
        enabled=True,
        groups=[
            pb.ScaleGroupStatus(
                name="v5e",
                max_slices=4,
                demand=3,
                slices=[
                    pb.SliceInfo(slice_id="a", state="READY"),
                    pb.SliceInfo(slice_id="b", state="BOOTSTRAPPING"),
                    pb.SliceInfo(slice_id="c", state="CREATING"),
                    pb.SliceInfo(slice_id="d", state="FAILED"),
                ],
            )
        ],
    )

    [sample] = scale_group_samples(7, status)

    assert (sample.at_ms, sample.scale_group, sample.ready_slices, sample.booting_slices) == (7, "v5e", 1, 2)
    assert (sample.demand, sample.max_slices) == (3, 4)


def test_samples_task_usage_comes_from_running_reports_only() -> None:
    samples = ClusterSamples(interval_ms=1000)
    response = pb.HeartbeatResponse(
        running_tasks=[_running("/a/0", 50.0, 100), pb.WorkerTaskStatus(task_id="/b/0", state=pb.TASK_STATE_BUILDING)],
        completed_tasks=[_running("/c/0", 1.0, 1)],
    )
    samples.record_usage(10, response)
    samples.record_usage(20, pb.HeartbeatResponse(running_tasks=[_running("/a/0", 75.0, 200, attempt=1)]))

    usage = samples.series("/a/0").task_usage

    assert [(u.at_ms, u.attempt_id, u.cpu_percent, u.memory_bytes) for u in usage] == [(10, 0, 50.0, 100), (20, 1, 75.0, 200)]
    assert list(samples.series("/b/0").task_usage) == []
    assert list(samples.series("/c/0").task_usage) == []
    assert list(samples.series().task_usage) == []


def test_samples_forget_the_task_reported_longest_ago_and_bound_each_ring() -> None:
    samples = ClusterSamples(interval_ms=1000, task_samples=2, tracked_tasks=2)
    samples.record_usage(1, pb.HeartbeatResponse(running_tasks=[_running("/old/0", 1, 1)]))
    samples.record_usage(2, pb.HeartbeatResponse(running_tasks=[_running("/kept/0", 1, 1)]))
    samples.record_usage(3, pb.HeartbeatResponse(running_tasks=[_running("/old/0", 1, 1)]))
    samples.record_usage(4, pb.HeartbeatResponse(running_tasks=[_running("/new/0", 1, 1)]))
    samples.record_usage(5, pb.HeartbeatResponse(running_tasks=[_running("/new/0", 1, 1)]))
    samples.record_usage(6, pb.HeartbeatResponse(running_tasks=[_running("/new/0", 1, 1)]))

    assert list(samples.series("/kept/0").task_usage) == []
    assert [u.at_ms for u in samples.series("/old/0").task_usage] == [1, 3]
    assert [u.at_ms for u in samples.series("/new/0").task_usage] == [5, 6]
