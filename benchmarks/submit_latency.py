"""Submit-to-running and submit-to-done latency of a trivial command job on a warm local cluster,
against Ray Jobs on a warm local Ray head.

Run: uv run python -m benchmarks.submit_latency [--jobs N] [--workers W] [--ray-jobs M]

Iris: "running" is when the worker started the job's process (the task's started_at, recorded by
the worker); "done" is when the controller recorded the job as finished. Both are measured from
the moment before the client called submit, on the same clock (everything runs on this machine).

Ray: `JobSubmissionClient.submit_job(entrypoint="true")` on a head started with `ray start --head`.
Ray records no time for the switch to RUNNING, so "running" is the first status poll (every 10 ms)
that sees RUNNING or later, capped by the job's end_time; "done" is the job's end_time as Ray
recorded it. Jobs run one after the other, after one warm-up job on each side.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

from benchmarks.common import become_subreaper, percentile
from iris.client import IrisClient
from iris.cluster.types import Entrypoint, ResourceSpec
from iris.rpc import cluster_pb2 as pb

JOB_TIMEOUT_S = 60.0
RAY_POLL_S = 0.01
TRIVIAL = ResourceSpec(cpu=0.1, memory="10MB")


def measure_iris(client: IrisClient, jobs: int) -> dict[str, list[float]]:
    warmup = client.submit(Entrypoint.from_command("true"), name="latency-warmup", resources=TRIVIAL)
    warmup.wait(timeout=JOB_TIMEOUT_S)
    to_running, to_done = [], []
    for i in range(jobs):
        submitted_ms = time.time() * 1000
        job = client.submit(Entrypoint.from_command("true"), name=f"latency-{i}", resources=TRIVIAL)
        job.wait(timeout=JOB_TIMEOUT_S, poll_interval=0.005)
        status = job.status(include_tasks=True)
        if status.state != pb.JOB_STATE_SUCCEEDED:
            raise RuntimeError(f"benchmark job {job.job_id} ended {status.state}: {status.error}")
        to_running.append(status.tasks[0].started_at.epoch_ms - submitted_ms)
        to_done.append(status.finished_at.epoch_ms - submitted_ms)
    return {"submit-to-running": to_running, "submit-to-done": to_done}


def measure(jobs: int, workers: int) -> dict[str, list[float]]:
    with tempfile.TemporaryDirectory() as workspace, IrisClient.local(workers=workers, workspace=Path(workspace)) as client:
        return measure_iris(client, jobs)


def ray_job_once(client) -> tuple[float, float]:
    """(submit-to-running, submit-to-done) in ms for one `true` job."""
    from ray.job_submission import JobStatus

    submitted_ms = time.time() * 1000
    job_id = client.submit_job(entrypoint="true")
    deadline = time.monotonic() + JOB_TIMEOUT_S
    running_ms = None
    while True:
        status = client.get_job_status(job_id)
        if running_ms is None and status != JobStatus.PENDING:
            running_ms = time.time() * 1000
        if status.is_terminal():
            break
        if time.monotonic() > deadline:
            client.stop_job(job_id)
            raise TimeoutError(f"Ray job {job_id} still {status} after {JOB_TIMEOUT_S}s")
        time.sleep(RAY_POLL_S)
    info = client.get_job_info(job_id)
    if status != JobStatus.SUCCEEDED:
        raise RuntimeError(f"Ray job {job_id} ended {status}: {info.message}")
    assert running_ms is not None
    return min(running_ms, info.end_time) - submitted_ms, info.end_time - submitted_ms


def measure_ray(client, jobs: int) -> dict[str, list[float]]:
    ray_job_once(client)
    samples = [ray_job_once(client) for _ in range(jobs)]
    return {"submit-to-running": [s[0] for s in samples], "submit-to-done": [s[1] for s in samples]}


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
    parser.add_argument("--ray-jobs", type=int, default=0, help="also time this many Ray Jobs (needs ray)")
    args = parser.parse_args()
    print(table(measure(args.jobs, args.workers)))
    if args.ray_jobs:
        from benchmarks.ray_local import RayHead, apply_ray_env

        become_subreaper()
        apply_ray_env()
        with RayHead() as head:
            print("\nRay Jobs:\n" + table(measure_ray(head.job_client(), args.ray_jobs)))


if __name__ == "__main__":
    main()
