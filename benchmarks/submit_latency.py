"""Submit-to-running and submit-to-done latency of a trivial command job on a warm local cluster.

Run: uv run python -m benchmarks.submit_latency [--jobs N] [--workers W]

"Running" is when the worker started the job's process (the task's started_at, recorded by the
worker); "done" is when the controller recorded the job as finished. Both are measured from the
moment before the client called submit, on the same clock (everything runs on this machine).
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

from iris.client import IrisClient
from iris.cluster.types import Entrypoint, ResourceSpec
from iris.rpc import cluster_pb2 as pb


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, round(q / 100 * (len(ordered) - 1))))
    return ordered[index]


def measure(jobs: int, workers: int) -> dict[str, list[float]]:
    with tempfile.TemporaryDirectory() as workspace, IrisClient.local(workers=workers, workspace=Path(workspace)) as client:
        warmup = client.submit(Entrypoint.from_command("true"), name="warmup", resources=ResourceSpec(cpu=0.1, memory="10MB"))
        warmup.wait(timeout=60)
        to_running, to_done = [], []
        for i in range(jobs):
            submitted_ms = time.time() * 1000
            job = client.submit(
                Entrypoint.from_command("true"), name=f"bench-{i}", resources=ResourceSpec(cpu=0.1, memory="10MB")
            )
            job.wait(timeout=60, poll_interval=0.005)
            status = job.status(include_tasks=True)
            if status.state != pb.JOB_STATE_SUCCEEDED:
                raise RuntimeError(f"benchmark job {job.job_id} ended {status.state}: {status.error}")
            to_running.append(status.tasks[0].started_at.epoch_ms - submitted_ms)
            to_done.append(status.finished_at.epoch_ms - submitted_ms)
    return {"submit-to-running": to_running, "submit-to-done": to_done}


def table(results: dict[str, list[float]]) -> str:
    rows = ["| measurement | n | p50 (ms) | p99 (ms) | mean (ms) |", "|---|---|---|---|---|"]
    for name, values in results.items():
        rows.append(
            f"| {name} | {len(values)} | {percentile(values, 50):.1f} | {percentile(values, 99):.1f} | "
            f"{statistics.fmean(values):.1f} |"
        )
    return "\n".join(rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=100)
    parser.add_argument("--workers", type=int, default=1)
    args = parser.parse_args()
    print(table(measure(args.jobs, args.workers)))


if __name__ == "__main__":
    main()
