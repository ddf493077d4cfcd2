"""Store at scale: ListJobs and GetJobStatus through the RPC of a ControllerDaemon whose store holds
100,000 jobs.

Run: uv run python -m benchmarks.store_scale [--jobs N] [--queries Q] [--state-dir DIR]

`--state-dir` measures a store filled before (a million jobs take many minutes to fill on a
busy machine), so that two versions of the controller can be compared on copies of one store.

The store is filled in bulk, with the rows `ControllerStore.create_job` and the job's life would
have left: jobs (with their stored LaunchJobRequest), tasks, attempts and the transition history.
The mix is a busy cluster's history: most jobs finished (88% succeeded, 5% failed, 3% killed),
3% running, 0.5% pending; 10% of jobs have 4 or 16 tasks; 5% are child jobs. Job ids look like
`/<user>-<kind>-<n>` for 50 users, so a name prefix selects about 2%.

Then a real ControllerDaemon (`benchmarks.controller_host`, its own process) opens the store and
this process times each RPC from a client: ListJobs first pages of 100 (no filter, a state
filter, a name prefix) and random pages further in, GetJobStatus of random jobs without and with
tasks, and random pages by offset of the SUCCEEDED jobs and of the root jobs (the dashboard's
job tree). Every call is timed, after a few untimed warm-up calls per kind.
"""

from __future__ import annotations

import argparse
import hashlib
import random
import sqlite3
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from benchmarks.common import Row, Target, become_subreaper, owned_processes, percentile
from benchmarks.controller_scale import start_controller
from iris.cluster.controller.store import ControllerStore
from iris.cluster.controller.store_reads import JOB_ORDER_SQL
from iris.cluster.limits import position_page_token
from iris.cluster.types import Entrypoint, EnvironmentSpec, ResourceSpec
from iris.rpc import cluster_pb2 as pb
from iris.rpc.cluster_connect import ControllerServiceClientSync

TARGET_MS = 50.0
USERS = [f"user-{i:02d}" for i in range(50)]
KINDS = ["train", "eval", "sweep", "data"]
DAY_MS = 86_400_000
WARMUP_CALLS = 5

# (job state, its tasks' state, share of root jobs)
STATE_MIX = [
    (pb.JOB_STATE_SUCCEEDED, pb.TASK_STATE_SUCCEEDED, 0.885),
    (pb.JOB_STATE_FAILED, pb.TASK_STATE_FAILED, 0.05),
    (pb.JOB_STATE_KILLED, pb.TASK_STATE_KILLED, 0.03),
    (pb.JOB_STATE_RUNNING, pb.TASK_STATE_RUNNING, 0.03),
    (pb.JOB_STATE_PENDING, pb.TASK_STATE_PENDING, 0.005),
]
FINISHED = (pb.JOB_STATE_SUCCEEDED, pb.JOB_STATE_FAILED, pb.JOB_STATE_KILLED)


def launch_request(name: str, user: str, kind: str, replicas: int, index: int) -> pb.LaunchJobRequest:
    digest = hashlib.sha256(f"{user}-{index // 50}".encode()).hexdigest()
    return pb.LaunchJobRequest(
        name=name,
        entrypoint=Entrypoint.from_command("python", "-m", f"experiments.{kind}", "--config", f"configs/{kind}.yaml", "--seed", str(index)).proto,
        resources=ResourceSpec(cpu=4, memory="16GB", disk="10GB").to_proto(),
        environment=EnvironmentSpec(env_vars={"WANDB_PROJECT": user, "EXPERIMENT": kind}).to_proto(),
        bundle_sha256=digest,
        bundle_uri=f"gs://example-bucket/iris/bundles/{digest}.zip",
        replicas=replicas,
        max_retries_preemption=100,
    )


def build_store(path: Path, jobs: int, seed: int = 7) -> dict[int, int]:
    """Fill a fresh store at `path` with `jobs` jobs; returns jobs per state."""
    ControllerStore(path).close()  # creates the schema through the store's own migrations
    rng = random.Random(seed)
    now_ms = int(time.time() * 1000)
    began_ms = now_ms - 30 * DAY_MS
    states = [s for s, _, _ in STATE_MIX]
    weights = [w for _, _, w in STATE_MIX]
    task_state = {s: t for s, t, _ in STATE_MIX}
    job_rows, task_rows, attempt_rows, transition_rows = [], [], [], []
    counts: dict[int, int] = {}
    roots: list[tuple[str, int, int]] = []
    requests: dict[tuple[str, str, int], bytes] = {}
    resources = launch_request("", "", "", 1, 0).resources
    for i in range(jobs):
        submitted = began_ms + (30 * DAY_MS * i) // jobs
        if roots and rng.random() < 0.05:
            parent_id, state, root_submitted = rng.choice(roots[-200:])
            job_id = f"{parent_id}/eval-{i:06d}"
            user, kind = parent_id[1:].rsplit("-", 2)[0], "eval"
        else:
            user, kind = rng.choice(USERS), rng.choice(KINDS)
            job_id = f"/{user}-{kind}-{i:06d}"
            parent_id, root_submitted = None, submitted
            state = rng.choices(states, weights)[0]
            roots.append((job_id, state, submitted))
        counts[state] = counts.get(state, 0) + 1
        replicas = rng.choices([1, 4, 16], [0.9, 0.08, 0.02])[0]
        # One stored request per user, kind and size: building a proto per job is most of
        # the fill's time at a million jobs, and nothing read back depends on the request's name.
        template_key = (user, kind, replicas)
        request_bytes = requests.get(template_key)
        if request_bytes is None:
            request_bytes = requests[template_key] = launch_request(job_id, user, kind, replicas, i).SerializeToString()
        started = submitted + rng.randint(200, 60_000) if state != pb.JOB_STATE_PENDING else None
        finished = started + rng.randint(1_000, 4 * 3_600_000) if state in FINISHED else None
        error = "task /0 failed: exit code 1" if state == pb.JOB_STATE_FAILED else ""
        error = "terminated by user" if state == pb.JOB_STATE_KILLED else error
        job_rows.append(
            (job_id, parent_id, state, request_bytes, replicas, 0, submitted, started, finished,
             error, 1 if state == pb.JOB_STATE_FAILED else 0, root_submitted)
        )
        if state != pb.JOB_STATE_PENDING:
            transition_rows.append(("job", job_id, pb.JOB_STATE_PENDING, pb.JOB_STATE_RUNNING, "a task is running", started))
        if finished is not None:
            transition_rows.append(("job", job_id, pb.JOB_STATE_RUNNING, state, error or "all tasks succeeded", finished))
        t_state = task_state[state]
        for index in range(replicas):
            task_id = f"{job_id}/{index}"
            worker = f"worker-{rng.randrange(1000):04d}"
            attempt = -1 if state == pb.JOB_STATE_PENDING else 0
            task_rows.append(
                (task_id, job_id, index, t_state, attempt, worker if attempt >= 0 else None, 0, 0,
                 1 if t_state == pb.TASK_STATE_FAILED else 0, error, started, finished,
                 "no worker has enough cpu" if attempt < 0 else "", None, "{}", submitted)
            )
            if attempt < 0:
                continue
            attempt_rows.append(
                (task_id, 0, worker, t_state, 1, rng.randint(0, 500), 1 if finished else 0,
                 1 if t_state == pb.TASK_STATE_FAILED else 0, error, resources.cpu_millicores,
                 resources.memory_bytes, resources.disk_bytes, submitted, started, finished)
            )
            transition_rows += [
                ("task", task_id, pb.TASK_STATE_PENDING, pb.TASK_STATE_ASSIGNED, f"assigned to {worker}", submitted + 100),
                ("task", task_id, pb.TASK_STATE_ASSIGNED, pb.TASK_STATE_RUNNING, "started", started),
            ]
            if finished is not None:
                transition_rows.append(("task", task_id, pb.TASK_STATE_RUNNING, t_state, error or "exit code 0", finished))
    # Bulk-load settings for this one connection; the daemon opens the file with its own.
    db = sqlite3.connect(path, isolation_level=None)
    try:
        db.execute("PRAGMA synchronous=OFF")
        db.execute("PRAGMA cache_size=-262144")
        # Inserting in index order keeps the B-trees appending; the sort is stable, so each
        # entity's history keeps its order.
        for table in (job_rows, task_rows, attempt_rows, transition_rows):
            table.sort(key=lambda r: (r[0], r[1]))
        db.execute("BEGIN")
        db.executemany(
            "INSERT INTO jobs(job_id, parent_job_id, state, request, num_tasks, priority, submitted_at_ms, started_at_ms,"
            " finished_at_ms, error, exit_code, root_submitted_at_ms) VALUES (?,?,?,?,?,?,?,?,?,?,?,?)",
            job_rows,
        )
        db.executemany(
            "INSERT INTO tasks(task_id, job_id, task_index, state, current_attempt, worker_id, failure_count,"
            " preemption_count, exit_code, error, started_at_ms, finished_at_ms, pending_reason, result, ports,"
            " pending_since_ms) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
            task_rows,
        )
        db.executemany(
            "INSERT INTO attempts(task_id, attempt_id, worker_id, state, delivered, log_offset, logs_complete, exit_code,"
            " error, cpu_millicores, memory_bytes, disk_bytes, created_at_ms, started_at_ms, finished_at_ms)"
            " VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
            attempt_rows,
        )
        db.executemany(
            "INSERT INTO transitions(kind, entity_id, from_state, to_state, reason, at_ms) VALUES (?,?,?,?,?,?)",
            transition_rows,
        )
        db.execute("COMMIT")
        db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    finally:
        db.close()
    return counts


def time_calls(call: Callable[[int], object], count: int) -> list[float]:
    for i in range(WARMUP_CALLS):
        call(i)
    times = []
    for i in range(count):
        began = time.perf_counter()
        call(i)
        times.append((time.perf_counter() - began) * 1000)
    return times


def measure(
    jobs: int, queries: int, seed: int = 7, filled_state_dir: Path | None = None
) -> tuple[dict[str, list[float]], dict[int, int], dict[str, float]]:
    """Times per query kind in ms, jobs per state, and the seconds the bulk fill took. With
    `filled_state_dir`, the store already there is measured as it is (no fill; `jobs` unused)."""
    with tempfile.TemporaryDirectory(prefix="iris-bench-store-") as tmp, owned_processes():
        state_dir = filled_state_dir or Path(tmp) / "controller"
        store_path = state_dir / "controller.sqlite3"
        began = time.perf_counter()
        if filled_state_dir is None:
            state_dir.mkdir()
            counts = build_store(store_path, jobs, seed)
        else:
            with sqlite3.connect(store_path) as db:
                counts = dict(db.execute("SELECT state, COUNT(*) FROM jobs GROUP BY state").fetchall())
        fill_s = time.perf_counter() - began
        store_bytes = store_path.stat().st_size
        began = time.perf_counter()
        controller = start_controller(state_dir, Path(tmp))
        # A restart: the daemon opens the existing store (migrations, caches) and serves.
        restart_s = time.perf_counter() - began
        try:
            client = ControllerServiceClientSync(controller.hello["url"], timeout_ms=60_000)
            rng = random.Random(seed)
            with sqlite3.connect(store_path) as db:
                listing = db.execute(f"SELECT submitted_at_ms, job_id FROM jobs ORDER BY {JOB_ORDER_SQL[pb.JOB_ORDER_NEWEST]}").fetchall()
            job_ids = [job_id for _, job_id in listing]
            picks = [rng.choice(job_ids) for _ in range(queries + WARMUP_CALLS)]
            prefixes = [f"/{rng.choice(USERS)}-" for _ in range(queries + WARMUP_CALLS)]
            offsets = [rng.randrange(max(1, len(job_ids) - 100)) for _ in range(queries + WARMUP_CALLS)]
            # The next_page_token a client holds after paging to each of those offsets.
            positions = [
                position_page_token(pb.JOB_ORDER_NEWEST, offset, tuple(listing[offset - 1])) if offset else ""
                for offset in offsets
            ]
            root_count = sum(1 for job_id in job_ids if job_id.count("/") == 1)
            del listing
            succeeded_offsets = [
                rng.randrange(max(1, counts.get(pb.JOB_STATE_SUCCEEDED, 0) - 100)) for _ in range(queries + WARMUP_CALLS)
            ]
            root_offsets = [rng.randrange(max(1, root_count - 50)) for _ in range(queries + WARMUP_CALLS)]

            def list_jobs(**kwargs) -> Callable[[int], object]:
                return lambda i: client.list_jobs(pb.ListJobsRequest(page_size=100, **kwargs))

            kinds = {
                "ListJobs, first page of 100": list_jobs(),
                f"ListJobs, state RUNNING ({counts.get(pb.JOB_STATE_RUNNING, 0):,} jobs)": list_jobs(
                    states=[pb.JOB_STATE_RUNNING]
                ),
                f"ListJobs, state SUCCEEDED ({counts.get(pb.JOB_STATE_SUCCEEDED, 0):,} jobs)": list_jobs(
                    states=[pb.JOB_STATE_SUCCEEDED]
                ),
                "ListJobs, name prefix `/<user>-` (~2% of jobs)": lambda i: client.list_jobs(
                    pb.ListJobsRequest(page_size=100, name_prefix=prefixes[i])
                ),
                "ListJobs, a random page of 100 by next_page_token (deep pages)": lambda i: client.list_jobs(
                    pb.ListJobsRequest(page_size=100, page_token=positions[i])
                ),
                "ListJobs, a random page of 100 by offset token (the dashboard's page jumps)": lambda i: client.list_jobs(
                    pb.ListJobsRequest(page_size=100, page_token=str(offsets[i]))
                ),
                "ListJobs, state SUCCEEDED, a random page of 100 by offset token": lambda i: client.list_jobs(
                    pb.ListJobsRequest(
                        page_size=100, states=[pb.JOB_STATE_SUCCEEDED], page_token=str(succeeded_offsets[i])
                    )
                ),
                "ListJobs, root jobs (the dashboard's tree), a random page of 50 by offset token": lambda i: client.list_jobs(
                    pb.ListJobsRequest(page_size=50, roots_only=True, page_token=str(root_offsets[i]))
                ),
                "GetJobStatus, random job": lambda i: client.get_job_status(pb.GetJobStatusRequest(job_id=picks[i])),
                "GetJobStatus with tasks, random job": lambda i: client.get_job_status(
                    pb.GetJobStatusRequest(job_id=picks[-1 - i], include_tasks=True)
                ),
            }
            times = {name: time_calls(call, queries) for name, call in kinds.items()}
            client.close()
        finally:
            controller.close()
    return times, counts, {"fill_s": fill_s, "restart_s": restart_s, "store_mb": store_bytes / 1e6}


def rows(quick: bool, with_ray: bool, jobs: int = 100_000) -> list[Row]:
    queries = 100 if quick else 300
    times, _, sizes = measure(jobs, queries)
    fill_s = sizes["fill_s"]
    result = []
    for i, (name, values) in enumerate(times.items()):
        result.append(
            Row(
                f"store_scale.{i}",
                f"{name}, {jobs:,} jobs in the store",
                "ms",
                values,
                None,
                "no peer",
                [Target(f"p99 < {TARGET_MS:.0f} ms", "max", TARGET_MS, stat="p99", strict=True)],
                note=(
                    f"store filled in {fill_s:.1f} s; store file {sizes['store_mb']:,.0f} MB; "
                    f"controller restart on it (start to serving) {sizes['restart_s']:.2f} s"
                )
                if i == 0
                else "",
            )
        )
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=100_000)
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument(
        "--state-dir",
        type=Path,
        help="measure the store already in this directory (its controller.sqlite3) instead of filling one;"
        " the controller opens it in place, so its migrations apply to it",
    )
    args = parser.parse_args()
    become_subreaper()
    times, counts, sizes = measure(args.jobs, args.queries, filled_state_dir=args.state_dir)
    print(
        f"{sum(counts.values()):,} jobs (filled in {sizes['fill_s']:.1f} s); store {sizes['store_mb']:,.0f} MB; "
        f"restart {sizes['restart_s']:.2f} s; per state: {counts}\n"
    )
    print("| query | n | median (ms) | p99 (ms) |\n|---|---|---|---|")
    for name, values in times.items():
        print(f"| {name} | {len(values)} | {statistics.median(values):.1f} | {percentile(values, 99):.1f} |")


if __name__ == "__main__":
    main()
