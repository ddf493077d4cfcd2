"""Throughput: N trivial jobs (`true`) submitted at once by several client threads, completed per
second, on a warm local Iris cluster and on a warm local Ray head through Ray Jobs.

Run: uv run python -m benchmarks.throughput [--jobs N] [--clients K] [--rounds R] [--ray-rounds R]

Each client thread has its own connection (an IrisClient, a JobSubmissionClient), submits its
share of the N jobs back to back, then waits for them. A round's rate is N divided by the time
from the first submit to the last job's end as the orchestrator recorded it (Iris: the job's
finished_at; Ray: the job's end_time), so polling does not stretch it.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from benchmarks.common import become_subreaper
from benchmarks.submit_latency import JOB_TIMEOUT_S, TRIVIAL
from iris.client import IrisClient
from iris.cluster.types import Entrypoint
from iris.rpc import cluster_pb2 as pb

ROUND_TIMEOUT_S = 300.0


def shares(jobs: int, clients: int) -> list[int]:
    return [jobs // clients + (1 if i < jobs % clients else 0) for i in range(clients)]


def iris_round(url: str, workspace: Path, jobs: int, clients: int, tag: str) -> float:
    def client_thread(index: int, count: int) -> list[int]:
        with IrisClient.remote(url, workspace) as client:
            submitted = [
                client.submit(Entrypoint.from_command("true"), name=f"{tag}-{index}-{i}", resources=TRIVIAL)
                for i in range(count)
            ]
            finished = []
            for job in submitted:
                status = job.wait(timeout=JOB_TIMEOUT_S, poll_interval=0.05)
                if status.state != pb.JOB_STATE_SUCCEEDED:
                    raise RuntimeError(f"benchmark job {job.job_id} ended {status.state}: {status.error}")
                finished.append(status.finished_at.epoch_ms)
            return finished

    return _round(client_thread, jobs, clients)


def _round(client_thread, jobs: int, clients: int) -> float:
    began_ms = time.time() * 1000
    with ThreadPoolExecutor(clients) as pool:
        futures = [pool.submit(client_thread, i, n) for i, n in enumerate(shares(jobs, clients))]
        ends = [end for future in futures for end in future.result(timeout=ROUND_TIMEOUT_S)]
    return jobs / ((max(ends) - began_ms) / 1000)


def measure_iris(url: str, workspace: Path, jobs: int, clients: int, rounds: int) -> list[float]:
    return [iris_round(url, workspace, jobs, clients, f"throughput-{r}") for r in range(rounds)]


def ray_round(dashboard_url: str, jobs: int, clients: int) -> float:
    from ray.job_submission import JobStatus, JobSubmissionClient

    def client_thread(index: int, count: int) -> list[int]:
        client = JobSubmissionClient(dashboard_url)
        job_ids = [client.submit_job(entrypoint="true") for _ in range(count)]
        deadline = time.monotonic() + ROUND_TIMEOUT_S
        ends = []
        for job_id in job_ids:
            while not (status := client.get_job_status(job_id)).is_terminal():
                if time.monotonic() > deadline:
                    raise TimeoutError(f"Ray job {job_id} still {status} after {ROUND_TIMEOUT_S}s")
                time.sleep(0.05)
            info = client.get_job_info(job_id)
            if status != JobStatus.SUCCEEDED:
                raise RuntimeError(f"Ray job {job_id} ended {status}: {info.message}")
            ends.append(info.end_time)
        return ends

    return _round(client_thread, jobs, clients)


def measure_ray(dashboard_url: str, jobs: int, clients: int, rounds: int) -> list[float]:
    return [ray_round(dashboard_url, jobs, clients) for _ in range(rounds)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=40)
    parser.add_argument("--clients", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--ray-rounds", type=int, default=0, help="also run this many Ray rounds (needs ray)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as workspace, IrisClient.local(workers=1, workspace=Path(workspace)) as client:
        rates = measure_iris(client.url, Path(workspace), args.jobs, args.clients, args.rounds)
    print(f"Iris: {statistics.median(rates):.1f} jobs/s median over {len(rates)} rounds ({', '.join(f'{r:.1f}' for r in rates)})")
    if args.ray_rounds:
        from benchmarks.ray_local import RayHead, apply_ray_env

        become_subreaper()
        apply_ray_env()
        with RayHead() as head:
            rates = measure_ray(head.dashboard_url, args.jobs, args.clients, args.ray_rounds)
        print(f"Ray Jobs: {statistics.median(rates):.2f} jobs/s median over {len(rates)} rounds")


if __name__ == "__main__":
    main()
