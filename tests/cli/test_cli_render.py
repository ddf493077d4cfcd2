"""Pure rendering helpers of the CLI: which workers `cluster status` shows, what a waiting job says."""

from __future__ import annotations

from iris.cli.progress import describe_wait
from iris.cli.render import GONE_WORKER_SHOWN_MS, recent_workers
from iris.rpc import cluster_pb2 as pb
from iris.rpc import time_pb2

NOW_MS = 1_800_000_000_000


def worker(worker_id: str, state: int, seconds_ago: float) -> pb.WorkerInfo:
    heartbeat = time_pb2.Timestamp(epoch_ms=int(NOW_MS - seconds_ago * 1000))
    return pb.WorkerInfo(worker_id=worker_id, state=state, last_heartbeat=heartbeat)


def test_recent_workers_hides_long_gone_workers_only() -> None:
    long_ago = GONE_WORKER_SHOWN_MS / 1000 + 60
    workers = [
        worker("live", pb.WORKER_STATE_HEALTHY, long_ago),
        worker("just-terminated", pb.WORKER_STATE_TERMINATED, 30),
        worker("old-terminated", pb.WORKER_STATE_TERMINATED, long_ago),
        worker("old-failed", pb.WORKER_STATE_FAILED, long_ago),
    ]

    shown = [w.worker_id for w in recent_workers(workers, NOW_MS)]

    assert shown == ["live", "just-terminated"]


def test_describe_wait_names_reason_and_booting_slice() -> None:
    status = pb.JobStatus(
        job_id="/train",
        state=pb.JOB_STATE_PENDING,
        pending_reason="no worker has 2 cpu free",
        submitted_at=time_pb2.Timestamp(epoch_ms=NOW_MS - 12_000),
    )
    booting = pb.SliceInfo(slice_id="s-1", state="BOOTSTRAPPING", created_at=time_pb2.Timestamp(epoch_ms=NOW_MS - 4_000))
    autoscaler = pb.GetAutoscalerStatusResponse(
        enabled=True, groups=[pb.ScaleGroupStatus(name="local-cpu", demand=1, slices=[booting])]
    )

    line = describe_wait(status, autoscaler, NOW_MS)

    assert line == (
        "/train pending (12 s): no worker has 2 cpu free; waiting for a slice of local-cpu (bootstrapping, 4 s)"
    )


def test_describe_wait_of_a_stockout_everywhere_stays_one_line_naming_each_zone() -> None:
    status = pb.JobStatus(
        job_id="/train",
        state=pb.JOB_STATE_PENDING,
        pending_reason=(
            "no worker has a v5litepod-16 TPU\n"
            "tpu can add no slice: every zone refused\n"
            "  europe-west4-a: stockout\n"
            "  us-central2-b: quota exhausted"
        ),
        submitted_at=time_pb2.Timestamp(epoch_ms=NOW_MS - 30_000),
    )
    autoscaler = pb.GetAutoscalerStatusResponse(
        enabled=True,
        groups=[
            pb.ScaleGroupStatus(
                name="tpu",
                demand=1,
                unmet_reason="tpu has no zone with quota: europe-west4-a (stockout), us-central2-b (quota exhausted)",
            )
        ],
    )

    line = describe_wait(status, autoscaler, NOW_MS)

    assert "\n" not in line
    assert line == (
        "/train pending (30 s): no worker has a v5litepod-16 TPU; tpu: tpu has no zone with quota: "
        "europe-west4-a (stockout), us-central2-b (quota exhausted)"
    )
