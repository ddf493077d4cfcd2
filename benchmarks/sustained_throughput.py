"""Sustained throughput: 5,000 trivial command jobs (`true`) from 8 concurrent clients on a warm
local Iris cluster; beside it, in the same run, Ray Jobs and Ray tasks.

Run: uv run --group bench python -m benchmarks.sustained_throughput [--jobs N] [--clients K]
     [--ray-jobs M] [--ray-tasks T] [--no-ray]

- Iris: a local cluster of one worker (`IrisClient.local`'s) in a process of its own
  (`benchmarks.local_cluster_host`), as a running cluster is; each client thread of this process
  (its own IrisClient) submits its share back to back, then waits for each of its jobs. The
  rate is the jobs divided by the time from the first submit to the last job's end as the
  controller recorded it (its finished_at); submit-to-done of each job is its finished_at minus
  its submitted_at, both stamped by the controller.
- Ray Jobs: the same through `JobSubmissionClient` on a warm `ray start --head`, with fewer jobs:
  at under one job per second here, 5,000 would take hours. Its rate is per job the same.
- Ray tasks: `ray.get` of T trivial `@ray.remote` tasks from a driver attached to that head, for
  honesty about what a task-level system does: a task is a function call in a warm worker
  process, not a command in a process of its own. Submit-to-done per task is the driver's
  submit to the moment `ray.wait` hands the result back.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import psutil

from benchmarks.common import Row, Target, become_subreaper, percentile
from benchmarks.local_cluster_host import start_local_cluster
from benchmarks.submit_latency import TRIVIAL
from benchmarks.throughput import ROUND_TIMEOUT_S, ray_round, shares
from iris.client import IrisClient
from iris.cluster.types import Entrypoint
from iris.rpc import cluster_pb2 as pb

TARGET_JOBS_PER_S = 500.0
JOB_TIMEOUT_S = 600.0
# Job.wait has the controller answer on each change of the job's state; against a controller that
# cannot wait it polls this often. The rate itself comes from the controller's stamps.
POLL_S = 0.05


def iris_run(url: str, workspace: Path, jobs: int, clients: int) -> tuple[float, list[float]]:
    """(jobs per second, submit-to-done of each job in ms)."""

    def client_thread(index: int, count: int) -> list[pb.JobStatus]:
        with IrisClient.remote(url, workspace) as client:
            submitted = [
                client.submit(Entrypoint.from_command("true"), name=f"sustained-{index}-{i}", resources=TRIVIAL)
                for i in range(count)
            ]
            statuses = []
            for job in submitted:
                status = job.wait(timeout=JOB_TIMEOUT_S, poll_interval=POLL_S)
                if status.state != pb.JOB_STATE_SUCCEEDED:
                    raise RuntimeError(f"benchmark job {job.job_id} ended {status.state}: {status.error}")
                statuses.append(status)
            return statuses

    began_ms = time.time() * 1000
    with ThreadPoolExecutor(clients) as pool:
        futures = [pool.submit(client_thread, i, n) for i, n in enumerate(shares(jobs, clients))]
        statuses = [s for future in futures for s in future.result(timeout=JOB_TIMEOUT_S + ROUND_TIMEOUT_S)]
    last_end = max(s.finished_at.epoch_ms for s in statuses)
    latencies = [float(s.finished_at.epoch_ms - s.submitted_at.epoch_ms) for s in statuses]
    return jobs / ((last_end - began_ms) / 1000), latencies


def ray_tasks_run(address: str, tasks: int) -> tuple[float, list[float]]:
    """(tasks per second, submit-to-done of each task in ms) from a driver on the running head."""
    import ray

    ray.init(address=address, logging_level="ERROR", log_to_driver=False)
    try:

        @ray.remote
        def trivial() -> None:
            return None

        ray.get([trivial.remote() for _ in range(20)])  # warm the workers
        began = time.perf_counter()
        submitted = {}
        for _ in range(tasks):
            ref = trivial.remote()
            submitted[ref] = time.perf_counter()
        latencies = []
        pending = list(submitted)
        while pending:
            done, pending = ray.wait(pending, num_returns=min(len(pending), 50), timeout=ROUND_TIMEOUT_S)
            if not done:
                raise TimeoutError(f"{len(pending)} Ray tasks still pending after {ROUND_TIMEOUT_S:.0f}s")
            now = time.perf_counter()
            ray.get(done)
            latencies += [(now - submitted[ref]) * 1000 for ref in done]
        return tasks / (time.perf_counter() - began), latencies
    finally:
        ray.shutdown()


def _cpu_ms(process: psutil.Process) -> tuple[float, float]:
    """CPU ms of the process itself and of its reaped children (a worker's task processes)."""
    times = process.cpu_times()
    return (times.user + times.system) * 1000, (times.children_user + times.children_system) * 1000


def measure(jobs: int, clients: int, ray_jobs: int, ray_tasks: int, with_ray: bool) -> dict:
    result: dict = {}
    # The clients' workspace stays empty (no bundle to ship): the cluster's log goes elsewhere.
    with tempfile.TemporaryDirectory() as workspace, tempfile.TemporaryDirectory() as log_dir:
        # The cluster runs as a running cluster's does, in processes of its own: the controller
        # shares its GIL with none of the clients, which are this process's threads.
        cluster = start_local_cluster(workers=1, log_dir=Path(log_dir))
        try:
            url = cluster.hello["url"]
            # Warm: the worker has started a process and the controller has placed a job.
            iris_run(url, Path(workspace), 8, 1)
            processes = {
                "controller": psutil.Process(cluster.hello["pid"]),
                "worker": psutil.Process(cluster.hello["workers"][0]),
            }
            # The clients' own CPU is read to the nanosecond: a short run's share of it is a few of
            # the 10 ms clock ticks that another process's CPU is counted in.
            clients_before = time.process_time()
            before = {name: _cpu_ms(process) for name, process in processes.items()}
            result["iris_rate"], result["iris_latency"] = iris_run(url, Path(workspace), jobs, clients)
            after = {name: _cpu_ms(process) for name, process in processes.items()}
            clients_ms = (time.process_time() - clients_before) * 1000
        finally:
            cluster.close()
        result["cpu_per_job_ms"] = {
            "clients": clients_ms / jobs,
            **{name: (after[name][0] - before[name][0]) / jobs for name in processes},
            "task processes": (after["worker"][1] - before["worker"][1]) / jobs,
        }
    if with_ray:
        from benchmarks.ray_local import RayHead, apply_ray_env

        apply_ray_env()
        with RayHead() as head:
            result["ray_jobs_rate"] = ray_round(head.dashboard_url, ray_jobs, clients)
            result["ray_tasks_rate"], result["ray_tasks_latency"] = ray_tasks_run(f"127.0.0.1:{head.gcs_port}", ray_tasks)
    return result


def _describe_cpu(per_job_ms: dict[str, float]) -> str:
    return ", ".join(f"{name} {ms:.1f} ms" for name, ms in per_job_ms.items())


def rows(quick: bool, with_ray: bool) -> list[Row]:
    jobs, clients, ray_jobs, ray_tasks = (200, 8, 8, 500) if quick else (5000, 8, 16, 5000)
    m = measure(jobs, clients, ray_jobs, ray_tasks, with_ray)
    ray_note = "" if with_ray else "not installed"
    latency = m["iris_latency"]
    return [
        Row(
            "sustained.jobs",
            f"sustained throughput, {jobs:,} trivial jobs from {clients} concurrent clients (Ray: Ray Jobs, {ray_jobs} jobs)",
            "jobs/s",
            [m["iris_rate"]],
            [m["ray_jobs_rate"]] if "ray_jobs_rate" in m else None,
            ray_note,
            [Target(f">= {TARGET_JOBS_PER_S:.0f} jobs/s", "min", TARGET_JOBS_PER_S)],
            higher_is_better=True,
            note=(
                f"submit-to-done during the run: p50 {statistics.median(latency):,.0f} ms, "
                f"p99 {percentile(latency, 99):,.0f} ms; CPU per job: {_describe_cpu(m['cpu_per_job_ms'])}"
            ),
        ),
        Row(
            "sustained.tasks",
            f"Iris jobs/s above vs Ray tasks/s: `ray.get` of {ray_tasks:,} trivial `@ray.remote` tasks",
            "per s",
            [m["iris_rate"]],
            [m["ray_tasks_rate"]] if "ray_tasks_rate" in m else None,
            ray_note,
            higher_is_better=True,
            note=(
                f"Ray tasks' submit-to-done: p50 {statistics.median(m['ray_tasks_latency']):,.0f} ms, "
                f"p99 {percentile(m['ray_tasks_latency'], 99):,.0f} ms"
            )
            if "ray_tasks_latency" in m
            else "",
        ),
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=5000)
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--ray-jobs", type=int, default=16)
    parser.add_argument("--ray-tasks", type=int, default=5000)
    parser.add_argument("--no-ray", action="store_true")
    args = parser.parse_args()
    become_subreaper()
    m = measure(args.jobs, args.clients, args.ray_jobs, args.ray_tasks, not args.no_ray)
    latency = m["iris_latency"]
    print(
        f"Iris: {m['iris_rate']:.1f} jobs/s; submit-to-done p50 {statistics.median(latency):.0f} ms, "
        f"p99 {percentile(latency, 99):.0f} ms; CPU per job: {_describe_cpu(m['cpu_per_job_ms'])}"
    )
    if "ray_jobs_rate" in m:
        tasks = m["ray_tasks_latency"]
        print(f"Ray Jobs: {m['ray_jobs_rate']:.2f} jobs/s ({args.ray_jobs} jobs)")
        print(
            f"Ray tasks: {m['ray_tasks_rate']:.0f} tasks/s; submit-to-done p50 {statistics.median(tasks):.0f} ms, "
            f"p99 {percentile(tasks, 99):.0f} ms"
        )


if __name__ == "__main__":
    main()
