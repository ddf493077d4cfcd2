"""Bounded in-memory time series for the dashboard's plots.

The controller samples jobs per state and each scale group's capacity and demand on its tick,
and keeps the CPU and memory each running task reported in its heartbeats. Everything is held in
fixed-size rings (a restart starts afresh); the oldest samples and the least recently reported
tasks fall off first.
"""

from __future__ import annotations

from collections import OrderedDict, deque

from iris.cluster.types import job_state_name
from iris.rpc import cluster_pb2 as pb

# At the default 5 s tick, an hour of cluster history.
CLUSTER_SAMPLES = 720
TASK_SAMPLES = 360
TRACKED_TASKS = 2000

READY_SLICE_STATES = frozenset({"READY"})
BOOTING_SLICE_STATES = frozenset({"CREATING", "BOOTSTRAPPING"})


def scale_group_samples(at_ms: int, status: pb.GetAutoscalerStatusResponse) -> list[pb.ScaleGroupSample]:
    """One sample per group: slices able to run tasks, slices on their way, and demand."""
    return [
        pb.ScaleGroupSample(
            at_ms=at_ms,
            scale_group=group.name,
            ready_slices=sum(1 for s in group.slices if s.state in READY_SLICE_STATES),
            booting_slices=sum(1 for s in group.slices if s.state in BOOTING_SLICE_STATES),
            demand=group.demand,
            max_slices=group.max_slices,
        )
        for group in status.groups
    ]


class ClusterSamples:
    def __init__(
        self,
        interval_ms: int,
        cluster_samples: int = CLUSTER_SAMPLES,
        task_samples: int = TASK_SAMPLES,
        tracked_tasks: int = TRACKED_TASKS,
    ):
        self.interval_ms = interval_ms
        self._job_states: deque[pb.JobStateSample] = deque(maxlen=cluster_samples)
        self._scale_groups: deque[list[pb.ScaleGroupSample]] = deque(maxlen=cluster_samples)
        self._task_samples = task_samples
        self._tracked_tasks = tracked_tasks
        self._task_usage: OrderedDict[str, deque[pb.TaskUsageSample]] = OrderedDict()

    def record_cluster(
        self, at_ms: int, jobs_per_state: dict[int, int], autoscaler: pb.GetAutoscalerStatusResponse | None
    ) -> None:
        counts = {job_state_name(state): n for state, n in jobs_per_state.items()}
        self._job_states.append(pb.JobStateSample(at_ms=at_ms, counts=counts))
        if autoscaler is not None:
            self._scale_groups.append(scale_group_samples(at_ms, autoscaler))

    def record_usage(self, at_ms: int, response: pb.HeartbeatResponse) -> None:
        for status in response.running_tasks:
            if not status.HasField("usage"):
                continue
            ring = self._task_usage.pop(status.task_id, None) or deque(maxlen=self._task_samples)
            ring.append(
                pb.TaskUsageSample(
                    at_ms=at_ms,
                    attempt_id=status.attempt_id,
                    cpu_percent=status.usage.cpu_percent,
                    memory_bytes=status.usage.memory_bytes,
                )
            )
            # Re-inserted at the end, so the tasks reported longest ago are the ones dropped.
            self._task_usage[status.task_id] = ring
            while len(self._task_usage) > self._tracked_tasks:
                self._task_usage.popitem(last=False)

    def series(self, task_id: str = "") -> pb.GetTimeSeriesResponse:
        response = pb.GetTimeSeriesResponse(interval_ms=self.interval_ms, job_states=list(self._job_states))
        for samples in self._scale_groups:
            response.scale_groups.extend(samples)
        if task_id:
            response.task_usage.extend(self._task_usage.get(task_id, ()))
        return response
