"""Store rows as the protos the RPCs return: jobs, tasks, workers, slices, endpoints, log lines.

Functions of a connection and rows, called by the store's read methods under its lock; nothing
here writes.
"""

from __future__ import annotations

import json
import sqlite3

from iris.cluster.controller.scheduling_types import Resources
from iris.cluster.controller.transitions import state_label
from iris.cluster.types import task_state_name
from iris.rpc import cluster_pb2 as pb
from iris.rpc import time_pb2

ACTIVE_ATTEMPT_SQL = ",".join(
    str(s) for s in (pb.TASK_STATE_ASSIGNED, pb.TASK_STATE_BUILDING, pb.TASK_STATE_RUNNING)
)


def timestamp(ms: int | None) -> time_pb2.Timestamp | None:
    return time_pb2.Timestamp(epoch_ms=ms) if ms else None


def history(conn: sqlite3.Connection, kind: str, entity_id: str) -> list[pb.StateTransition]:
    return [
        pb.StateTransition(
            from_state=state_label(kind, r["from_state"]),
            to_state=state_label(kind, r["to_state"]),
            reason=r["reason"],
            at=time_pb2.Timestamp(epoch_ms=r["at_ms"]),
        )
        for r in conn.execute(
            "SELECT * FROM transitions WHERE kind=? AND entity_id=? ORDER BY id", (kind, entity_id)
        )
    ]


# Each job's tasks per state, with their failures, preemptions and a pending reason; `{}` is the
# placeholders of the job ids.
TASK_COUNTS_SQL = (
    "SELECT job_id, state, COUNT(*) AS n, SUM(failure_count) AS f, SUM(preemption_count) AS p, "
    "MIN(pending_reason) AS reason FROM tasks WHERE job_id IN ({}) GROUP BY job_id, state"
)


def task_counts_by_job(conn: sqlite3.Connection, job_ids: list[str]) -> dict[str, list[sqlite3.Row]]:
    """The TASK_COUNTS_SQL rows of many jobs in one query (a page of ListJobs), by job id."""
    by_job: dict[str, list[sqlite3.Row]] = {job_id: [] for job_id in job_ids}
    if job_ids:
        for row in conn.execute(TASK_COUNTS_SQL.format(",".join("?" * len(job_ids))), job_ids):
            by_job[row["job_id"]].append(row)
    return by_job


def job_status(
    conn: sqlite3.Connection,
    job: sqlite3.Row,
    request: pb.LaunchJobRequest,
    include_tasks: bool,
    task_counts: list[sqlite3.Row] | None = None,
) -> pb.JobStatus:
    """The job's status; `task_counts`, its TASK_COUNTS_SQL rows when the caller read them already."""
    status = pb.JobStatus(
        job_id=job["job_id"],
        name=request.name or job["job_id"],
        state=job["state"],
        error=job["error"],
        exit_code=job["exit_code"],
        submitted_at=timestamp(job["submitted_at_ms"]),
        started_at=timestamp(job["started_at_ms"]),
        finished_at=timestamp(job["finished_at_ms"]),
        num_tasks=job["num_tasks"],
        resources=request.resources,
        parent_job_id=job["parent_job_id"] or "",
    )
    reasons = []
    if task_counts is None:
        task_counts = conn.execute(TASK_COUNTS_SQL.format("?"), (job["job_id"],)).fetchall()
    for row in task_counts:
        status.task_state_counts[task_state_name(row["state"])] = row["n"]
        status.failure_count += row["f"] or 0
        status.preemption_count += row["p"] or 0
        if row["state"] == pb.TASK_STATE_PENDING and row["reason"]:
            reasons.append(row["reason"])
    if job["state"] == pb.JOB_STATE_PENDING or reasons:
        status.pending_reason = reasons[0] if reasons else ""
    if include_tasks:
        status.tasks.extend(
            task_status(conn, t)
            for t in conn.execute(
                "SELECT * FROM tasks WHERE job_id=? ORDER BY task_index", (job["job_id"],)
            ).fetchall()
        )
        status.history.extend(history(conn, "job", job["job_id"]))
    return status


def task_status(conn: sqlite3.Connection, task: sqlite3.Row) -> pb.TaskStatus:
    status = pb.TaskStatus(
        task_id=task["task_id"],
        job_id=task["job_id"],
        task_index=task["task_index"],
        state=task["state"],
        worker_id=task["worker_id"] or "",
        current_attempt_id=task["current_attempt"],
        exit_code=task["exit_code"],
        error=task["error"],
        started_at=timestamp(task["started_at_ms"]),
        finished_at=timestamp(task["finished_at_ms"]),
        pending_reason=task["pending_reason"] if task["state"] == pb.TASK_STATE_PENDING else "",
        failure_count=task["failure_count"],
        preemption_count=task["preemption_count"],
        result=task["result"] or b"",
        ports=json.loads(task["ports"]),
    )
    if task["worker_id"]:
        worker = conn.execute(
            "SELECT address FROM workers WHERE worker_id=?", (task["worker_id"],)
        ).fetchone()
        status.worker_address = worker["address"] if worker else ""
    for a in conn.execute("SELECT * FROM attempts WHERE task_id=? ORDER BY attempt_id", (task["task_id"],)):
        status.attempts.append(
            pb.TaskAttempt(
                attempt_id=a["attempt_id"],
                worker_id=a["worker_id"],
                state=a["state"],
                exit_code=a["exit_code"],
                error=a["error"],
                started_at=timestamp(a["started_at_ms"]),
                finished_at=timestamp(a["finished_at_ms"]),
            )
        )
    status.history.extend(history(conn, "task", task["task_id"]))
    return status


def worker_infos(conn: sqlite3.Connection) -> list[pb.WorkerInfo]:
    running: dict[str, list[str]] = {}
    committed: dict[str, Resources] = {}
    for a in conn.execute(f"SELECT * FROM attempts WHERE state IN ({ACTIVE_ATTEMPT_SQL})"):
        running.setdefault(a["worker_id"], []).append(a["task_id"])
        committed[a["worker_id"]] = committed.get(a["worker_id"], Resources()) + Resources(
            a["cpu_millicores"], a["memory_bytes"], a["disk_bytes"]
        )
    infos = []
    for w in conn.execute("SELECT * FROM workers ORDER BY worker_id"):
        used = committed.get(w["worker_id"], Resources())
        infos.append(
            pb.WorkerInfo(
                worker_id=w["worker_id"],
                address=w["address"],
                metadata=pb.WorkerMetadata.FromString(w["metadata"]),
                state=w["state"],
                registered_at=timestamp(w["registered_at_ms"]),
                last_heartbeat=timestamp(w["last_heartbeat_ms"]),
                running_task_ids=running.get(w["worker_id"], []),
                committed=pb.ResourceSpec(
                    cpu_millicores=used.cpu_millicores,
                    memory_bytes=used.memory_bytes,
                    disk_bytes=used.disk_bytes,
                ),
                error=w["error"],
            )
        )
    return infos


def slice_info(row: sqlite3.Row, slice_history: list[pb.StateTransition] | None = None) -> pb.SliceInfo:
    """A slice as ListSlices shows it, with its history when GetSlice asks for it."""
    info = pb.SliceInfo(
        slice_id=row["slice_id"],
        scale_group=row["scale_group"],
        zone=row["zone"],
        state=row["state"],
        created_at=time_pb2.Timestamp(epoch_ms=row["created_at_ms"]),
        updated_at=time_pb2.Timestamp(epoch_ms=row["updated_at_ms"]),
        error=row["error"],
        worker_ids=json.loads(row["worker_ids"]),
        labels=json.loads(row["labels"]),
        idle=row["idle_since_ms"] is not None,
    )
    info.history.extend(slice_history or [])
    return info


def endpoint(row: sqlite3.Row) -> pb.Endpoint:
    return pb.Endpoint(
        endpoint_id=row["endpoint_id"],
        name=row["name"],
        address=row["address"],
        job_id=row["job_id"],
        metadata=json.loads(row["metadata"]),
    )


def log_line(row: sqlite3.Row) -> pb.TaskLogLine:
    return pb.TaskLogLine(
        task_id=row["task_id"],
        attempt_id=row["attempt_id"],
        line=pb.LogLine(timestamp_ms=row["ts_ms"], source=row["source"], data=row["data"]),
        cursor=row["id"],
    )
