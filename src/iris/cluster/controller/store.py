"""The controller's state in SQLite: jobs, tasks, attempts, workers, endpoints, logs, history.

Every state change goes through `_transition()`, which checks the entity's transition table and
appends (from, to, reason, time) to the history table in the same transaction. Write methods are
one short transaction each and never call out over the network; they return `Effects` telling the
controller which workers need a heartbeat and whether the scheduler should run.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import sqlite3
import threading
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from iris.cluster.controller.feasibility import demand_from_request
from iris.cluster.controller.scheduler import Device, Resources, TaskDemand, WorkerCapacity
from iris.cluster.controller.transitions import (
    JOB_TRANSITIONS,
    AttemptOutcome,
    InvalidTransitionError,
    check_transition,
    decide_attempt_outcome,
    derive_job_state,
    state_label,
)
from iris.cluster.types import (
    TERMINAL_JOB_STATES,
    TERMINAL_TASK_STATES,
    AttributeValue,
    attribute_from_proto,
    task_state_name,
)
from iris.rpc import cluster_pb2 as pb
from iris.rpc import time_pb2

MIGRATIONS: list[str] = [
    # 1: initial schema
    """
    CREATE TABLE jobs (
        job_id TEXT PRIMARY KEY,
        parent_job_id TEXT,
        state INTEGER NOT NULL,
        request BLOB NOT NULL,
        num_tasks INTEGER NOT NULL,
        priority INTEGER NOT NULL DEFAULT 0,
        submitted_at_ms INTEGER NOT NULL,
        started_at_ms INTEGER,
        finished_at_ms INTEGER,
        error TEXT NOT NULL DEFAULT '',
        exit_code INTEGER NOT NULL DEFAULT 0
    );
    CREATE INDEX jobs_state ON jobs(state, submitted_at_ms);
    CREATE INDEX jobs_parent ON jobs(parent_job_id);
    CREATE INDEX jobs_submitted ON jobs(submitted_at_ms);

    CREATE TABLE tasks (
        task_id TEXT PRIMARY KEY,
        job_id TEXT NOT NULL,
        task_index INTEGER NOT NULL,
        state INTEGER NOT NULL,
        current_attempt INTEGER NOT NULL DEFAULT -1,
        worker_id TEXT,
        failure_count INTEGER NOT NULL DEFAULT 0,
        preemption_count INTEGER NOT NULL DEFAULT 0,
        exit_code INTEGER NOT NULL DEFAULT 0,
        error TEXT NOT NULL DEFAULT '',
        started_at_ms INTEGER,
        finished_at_ms INTEGER,
        pending_reason TEXT NOT NULL DEFAULT '',
        result BLOB,
        ports TEXT NOT NULL DEFAULT '{}'
    );
    CREATE INDEX tasks_job ON tasks(job_id, task_index);
    CREATE INDEX tasks_state ON tasks(state);

    CREATE TABLE attempts (
        task_id TEXT NOT NULL,
        attempt_id INTEGER NOT NULL,
        worker_id TEXT NOT NULL,
        state INTEGER NOT NULL,
        delivered INTEGER NOT NULL DEFAULT 0,
        log_offset INTEGER NOT NULL DEFAULT 0,
        logs_complete INTEGER NOT NULL DEFAULT 0,
        exit_code INTEGER NOT NULL DEFAULT 0,
        error TEXT NOT NULL DEFAULT '',
        cpu_millicores INTEGER NOT NULL,
        memory_bytes INTEGER NOT NULL,
        disk_bytes INTEGER NOT NULL,
        created_at_ms INTEGER NOT NULL,
        started_at_ms INTEGER,
        finished_at_ms INTEGER,
        PRIMARY KEY (task_id, attempt_id)
    );
    CREATE INDEX attempts_worker ON attempts(worker_id, state);
    CREATE INDEX attempts_open ON attempts(worker_id, logs_complete);

    CREATE TABLE workers (
        worker_id TEXT PRIMARY KEY,
        address TEXT NOT NULL,
        metadata BLOB NOT NULL,
        state INTEGER NOT NULL,
        registered_at_ms INTEGER NOT NULL,
        last_heartbeat_ms INTEGER NOT NULL,
        error TEXT NOT NULL DEFAULT ''
    );

    CREATE TABLE endpoints (
        endpoint_id TEXT PRIMARY KEY,
        name TEXT NOT NULL,
        address TEXT NOT NULL,
        job_id TEXT NOT NULL,
        metadata TEXT NOT NULL DEFAULT '{}',
        registered_at_ms INTEGER NOT NULL
    );
    CREATE INDEX endpoints_name ON endpoints(name);
    CREATE INDEX endpoints_job ON endpoints(job_id);

    CREATE TABLE transitions (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        kind TEXT NOT NULL,
        entity_id TEXT NOT NULL,
        from_state INTEGER NOT NULL,
        to_state INTEGER NOT NULL,
        reason TEXT NOT NULL,
        at_ms INTEGER NOT NULL
    );
    CREATE INDEX transitions_entity ON transitions(kind, entity_id, id);

    CREATE TABLE task_logs (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        job_id TEXT NOT NULL,
        task_id TEXT NOT NULL,
        attempt_id INTEGER NOT NULL,
        ts_ms INTEGER NOT NULL,
        source TEXT NOT NULL,
        data TEXT NOT NULL
    );
    CREATE INDEX task_logs_job ON task_logs(job_id, id);
    CREATE INDEX task_logs_task ON task_logs(task_id, id);
    """,
    # 2: ordering by the root job's submission (children run before later roots), and how long a
    # task has waited since it last became pending (scheduling timeouts)
    """
    ALTER TABLE jobs ADD COLUMN root_submitted_at_ms INTEGER;
    UPDATE jobs SET root_submitted_at_ms = submitted_at_ms;
    ALTER TABLE tasks ADD COLUMN pending_since_ms INTEGER;
    UPDATE tasks SET pending_since_ms = (SELECT submitted_at_ms FROM jobs WHERE jobs.job_id = tasks.job_id);
    """,
    # 3: slices the autoscaler created or adopted
    """
    CREATE TABLE slices (
        slice_id TEXT PRIMARY KEY,
        scale_group TEXT NOT NULL,
        zone TEXT NOT NULL DEFAULT '',
        state TEXT NOT NULL,
        created_at_ms INTEGER NOT NULL,
        updated_at_ms INTEGER NOT NULL,
        error TEXT NOT NULL DEFAULT '',
        labels TEXT NOT NULL DEFAULT '{}',
        worker_ids TEXT NOT NULL DEFAULT '[]'
    );
    CREATE INDEX slices_group ON slices(scale_group, state);
    """,
    # 4: ListJobs pages in its own order without sorting (deep pages of 100k jobs stay fast)
    """
    CREATE INDEX jobs_listing ON jobs(submitted_at_ms DESC, job_id);
    DROP INDEX jobs_state;
    CREATE INDEX jobs_state_listing ON jobs(state, submitted_at_ms DESC, job_id);
    """,
    # 5: the last attempt id of each task of a deleted job; a job created again under the same
    # name continues from there, so a worker still holding an old attempt never mistakes a new
    # attempt for a repeated delivery of it
    """
    CREATE TABLE deleted_task_attempts (
        task_id TEXT PRIMARY KEY,
        last_attempt INTEGER NOT NULL
    );
    """,
]

logger = logging.getLogger(__name__)

# Lines of a failed task's output quoted in its error.
FAILURE_LOG_LINES = 5

ACTIVE_ATTEMPT_STATES = (pb.TASK_STATE_ASSIGNED, pb.TASK_STATE_BUILDING, pb.TASK_STATE_RUNNING)
_ACTIVE_SQL = ",".join(str(s) for s in ACTIVE_ATTEMPT_STATES)
_TERMINAL_TASK_SQL = ",".join(str(s) for s in TERMINAL_TASK_STATES)
_TERMINAL_JOB_SQL = ",".join(str(s) for s in TERMINAL_JOB_STATES)


class JobExistsError(ValueError):
    pass


class NotFoundError(KeyError):
    def __str__(self) -> str:
        return str(self.args[0])


@dataclass
class Effects:
    """What a write implies for the controller's loops."""

    heartbeat_workers: set[str] = field(default_factory=set)
    kills: list[tuple[str, str, int]] = field(default_factory=list)  # (worker_id, task_id, attempt_id)
    wake_scheduler: bool = False

    def merge(self, other: Effects) -> None:
        self.heartbeat_workers |= other.heartbeat_workers
        self.kills.extend(other.kills)
        self.wake_scheduler |= other.wake_scheduler


@dataclass(frozen=True)
class HeartbeatPlan:
    worker_id: str
    address: str
    to_run: list[pb.RunTaskRequest]
    expected: list[pb.ExpectedTask]


def _ts(ms: int | None) -> time_pb2.Timestamp | None:
    return time_pb2.Timestamp(epoch_ms=ms) if ms else None


class ControllerStore:
    def __init__(self, path: Path | str):
        self._path = str(path)
        self._lock = threading.RLock()
        self._conn = sqlite3.connect(self._path, check_same_thread=False, isolation_level=None)
        self._conn.row_factory = sqlite3.Row
        self._conn.execute("PRAGMA journal_mode=WAL")
        self._conn.execute("PRAGMA synchronous=NORMAL")
        self._conn.execute("PRAGMA foreign_keys=ON")
        self._requests: dict[str, pb.LaunchJobRequest] = {}
        self._demand_templates: dict[str, TaskDemand] = {}
        # worker id -> (registered_at_ms, (capacity, attributes, device))
        self._worker_offers: dict[str, tuple[int, tuple[Resources, dict[str, AttributeValue], Device | None]]] = {}
        self._migrate()

    # ------------------------------------------------------------ plumbing

    def _migrate(self) -> None:
        with self._write():
            self._conn.execute("CREATE TABLE IF NOT EXISTS schema_version (version INTEGER NOT NULL)")
            row = self._conn.execute("SELECT version FROM schema_version").fetchone()
            version = row["version"] if row else 0
            for number, script in enumerate(MIGRATIONS[version:], start=version + 1):
                for statement in filter(str.strip, script.split(";")):
                    self._conn.execute(statement)
                self._conn.execute("DELETE FROM schema_version")
                self._conn.execute("INSERT INTO schema_version VALUES (?)", (number,))

    @contextmanager
    def _write(self) -> Iterator[sqlite3.Connection]:
        with self._lock:
            self._conn.execute("BEGIN IMMEDIATE")
            try:
                yield self._conn
            except BaseException:
                self._conn.execute("ROLLBACK")
                raise
            self._conn.execute("COMMIT")

    @contextmanager
    def _read(self) -> Iterator[sqlite3.Connection]:
        with self._lock:
            yield self._conn

    def close(self) -> None:
        with self._lock:
            self._conn.close()

    def _transition(self, kind: str, entity_id: str, old: int, new: int, reason: str, now_ms: int) -> None:
        if old == new:
            return
        try:
            check_transition(kind, entity_id, old, new)
        except Exception as exc:
            story = [
                f"{state_label(kind, r['from_state'])}->{state_label(kind, r['to_state'])} ({r['reason']})"
                for r in self._conn.execute(
                    "SELECT * FROM transitions WHERE kind=? AND entity_id=? ORDER BY id", (kind, entity_id)
                )
            ]
            raise type(exc)(f"{exc}; story: {'; '.join(story) or 'none'}") from None
        self._conn.execute(
            "INSERT INTO transitions(kind, entity_id, from_state, to_state, reason, at_ms) VALUES (?,?,?,?,?,?)",
            (kind, entity_id, old, new, reason, now_ms),
        )

    def request_for(self, job_id: str) -> pb.LaunchJobRequest:
        request = self._requests.get(job_id)
        if request is None:
            row = self._conn.execute("SELECT request FROM jobs WHERE job_id=?", (job_id,)).fetchone()
            if row is None:
                raise NotFoundError(f"job {job_id} not found")
            request = pb.LaunchJobRequest.FromString(row["request"])
            self._requests[job_id] = request
        return request

    # ------------------------------------------------------------ jobs

    def create_job(self, job_id: str, request: pb.LaunchJobRequest, now_ms: int) -> Effects:
        stored = pb.LaunchJobRequest()
        stored.CopyFrom(request)
        stored.ClearField("bundle_blob")
        num_tasks = max(1, request.replicas)
        with self._write() as db:
            existing = db.execute("SELECT state FROM jobs WHERE job_id=?", (job_id,)).fetchone()
            if existing is not None:
                raise JobExistsError(
                    f"job {job_id} already exists ({state_label('job', existing['state'])}); "
                    "choose another name or kill it first"
                )
            root_submitted_ms = now_ms
            if request.parent_job_id:
                parent = db.execute(
                    "SELECT state, root_submitted_at_ms FROM jobs WHERE job_id=?", (request.parent_job_id,)
                ).fetchone()
                if parent is None:
                    raise NotFoundError(f"parent job {request.parent_job_id} not found")
                if parent["state"] in TERMINAL_JOB_STATES:
                    raise JobExistsError(
                        f"parent job {request.parent_job_id} has already finished "
                        f"({state_label('job', parent['state'])}); cannot add a child to it"
                    )
                root_submitted_ms = parent["root_submitted_at_ms"]
            db.execute(
                "INSERT INTO jobs(job_id, parent_job_id, state, request, num_tasks, priority, submitted_at_ms,"
                " root_submitted_at_ms) VALUES (?,?,?,?,?,?,?,?)",
                (
                    job_id,
                    request.parent_job_id or None,
                    pb.JOB_STATE_PENDING,
                    stored.SerializeToString(),
                    num_tasks,
                    request.priority,
                    now_ms,
                    root_submitted_ms,
                ),
            )
            previous = {
                r["task_id"]: r["last_attempt"]
                for r in db.execute(
                    "SELECT task_id, last_attempt FROM deleted_task_attempts WHERE task_id>? AND task_id<?",
                    (job_id + "/", job_id + "/\U0010ffff"),
                )
            }
            db.executemany(
                "INSERT INTO tasks(task_id, job_id, task_index, state, pending_reason, pending_since_ms,"
                " current_attempt) VALUES (?,?,?,?,?,?,?)",
                [
                    (
                        f"{job_id}/{i}",
                        job_id,
                        i,
                        pb.TASK_STATE_PENDING,
                        "waiting for the scheduler",
                        now_ms,
                        previous.get(f"{job_id}/{i}", -1),
                    )
                    for i in range(num_tasks)
                ],
            )
        self._requests[job_id] = stored
        return Effects(wake_scheduler=True)

    def job_exists(self, job_id: str) -> bool:
        with self._read() as db:
            return db.execute("SELECT 1 FROM jobs WHERE job_id=?", (job_id,)).fetchone() is not None

    def terminate_job(self, job_id: str, reason: str, now_ms: int) -> tuple[list[str], Effects]:
        """Kill a job and, recursively, its children. Returns the ids of jobs that changed."""
        effects = Effects()
        with self._write() as db:
            if db.execute("SELECT 1 FROM jobs WHERE job_id=?", (job_id,)).fetchone() is None:
                raise NotFoundError(f"job {job_id} not found")
            terminated = self._kill_job_tree(job_id, pb.JOB_STATE_KILLED, reason, now_ms, effects)
        return terminated, effects

    def delete_job_tree(self, job_id: str) -> list[str]:
        """Forget a finished job and its children (rows, history, logs, endpoints); their ids."""
        with self._write() as db:
            rows = db.execute(
                "SELECT job_id, state FROM jobs WHERE job_id=? OR (job_id>? AND job_id<?)",
                (job_id, job_id + "/", job_id + "/\U0010ffff"),
            ).fetchall()
            if not rows:
                raise NotFoundError(f"job {job_id} not found")
            for row in rows:
                if row["state"] not in TERMINAL_JOB_STATES:
                    raise JobExistsError(
                        f"job {row['job_id']} is still {state_label('job', row['state'])}; kill it before deleting it"
                    )
            tree = [row["job_id"] for row in rows]
            for member in tree:
                for task in db.execute("SELECT task_id, current_attempt FROM tasks WHERE job_id=?", (member,)).fetchall():
                    task_id = task["task_id"]
                    db.execute(
                        "INSERT OR REPLACE INTO deleted_task_attempts(task_id, last_attempt) VALUES (?,?)",
                        (task_id, task["current_attempt"]),
                    )
                    db.execute("DELETE FROM attempts WHERE task_id=?", (task_id,))
                    db.execute(
                        "DELETE FROM transitions WHERE (kind='task' AND entity_id=?)"
                        " OR (kind='attempt' AND entity_id>? AND entity_id<?)",
                        (task_id, task_id + "#", task_id + "#\U0010ffff"),
                    )
                for table in ("tasks", "task_logs", "endpoints", "jobs"):
                    db.execute(f"DELETE FROM {table} WHERE job_id=?", (member,))
                db.execute("DELETE FROM transitions WHERE kind='job' AND entity_id=?", (member,))
                self._requests.pop(member, None)
                self._demand_templates.pop(member, None)
        return tree

    def _kill_job_tree(self, job_id: str, final_state: int, reason: str, now_ms: int, effects: Effects) -> list[str]:
        changed = []
        row = self._conn.execute("SELECT state FROM jobs WHERE job_id=?", (job_id,)).fetchone()
        if row["state"] not in TERMINAL_JOB_STATES:
            changed.append(job_id)
            self._kill_tasks(job_id, reason, now_ms, effects)
            self._transition("job", job_id, row["state"], final_state, reason, now_ms)
            self._conn.execute(
                "UPDATE jobs SET state=?, finished_at_ms=?, error=CASE WHEN error='' THEN ? ELSE error END"
                " WHERE job_id=?",
                (final_state, now_ms, reason, job_id),
            )
        for child in self._conn.execute("SELECT job_id FROM jobs WHERE parent_job_id=?", (job_id,)).fetchall():
            changed += self._kill_job_tree(
                child["job_id"], pb.JOB_STATE_KILLED, f"parent job {job_id} ended: {reason}", now_ms, effects
            )
        return changed

    def _kill_tasks(self, job_id: str, reason: str, now_ms: int, effects: Effects) -> None:
        tasks = self._conn.execute(
            f"SELECT task_id, state, current_attempt, worker_id FROM tasks WHERE job_id=? "
            f"AND state NOT IN ({_TERMINAL_TASK_SQL})",
            (job_id,),
        ).fetchall()
        for task in tasks:
            self._transition("task", task["task_id"], task["state"], pb.TASK_STATE_KILLED, reason, now_ms)
            self._conn.execute(
                "UPDATE tasks SET state=?, error=?, finished_at_ms=?, pending_reason='' WHERE task_id=?",
                (pb.TASK_STATE_KILLED, reason, now_ms, task["task_id"]),
            )
            if task["state"] != pb.TASK_STATE_PENDING:
                self._finish_attempt(
                    task["task_id"], task["current_attempt"], pb.TASK_STATE_KILLED, -1, reason, now_ms
                )
                effects.kills.append((task["worker_id"], task["task_id"], task["current_attempt"]))
                effects.heartbeat_workers.add(task["worker_id"])

    def _finish_attempt(
        self, task_id: str, attempt_id: int, state: int, exit_code: int, error: str, now_ms: int
    ) -> None:
        attempt = self._conn.execute(
            "SELECT state, delivered FROM attempts WHERE task_id=? AND attempt_id=?", (task_id, attempt_id)
        ).fetchone()
        if attempt is None or attempt["state"] not in ACTIVE_ATTEMPT_STATES:
            return
        self._transition("attempt", f"{task_id}#{attempt_id}", attempt["state"], state, error or "finished", now_ms)
        # An attempt the worker never received has no logs to wait for.
        self._conn.execute(
            "UPDATE attempts SET state=?, exit_code=?, error=?, finished_at_ms=?,"
            " logs_complete=MAX(logs_complete, 1 - delivered) WHERE task_id=? AND attempt_id=?",
            (state, exit_code, error, now_ms, task_id, attempt_id),
        )

    def _refresh_job(self, job_id: str, now_ms: int, effects: Effects) -> None:
        """Derive the job's state from its tasks and apply it; a failed job kills what remains."""
        job = self._conn.execute("SELECT * FROM jobs WHERE job_id=?", (job_id,)).fetchone()
        if job["state"] in TERMINAL_JOB_STATES:
            return
        tasks = self._conn.execute(
            "SELECT task_id, state, exit_code, error FROM tasks WHERE job_id=? ORDER BY task_index", (job_id,)
        ).fetchall()
        failed = next(
            (
                t
                for t in tasks
                if t["state"]
                in (pb.TASK_STATE_FAILED, pb.TASK_STATE_WORKER_FAILED, pb.TASK_STATE_UNSCHEDULABLE)
            ),
            None,
        )
        detail = f"task {failed['task_id']} {task_state_name(failed['state'])}: {failed['error']}" if failed else ""
        request = self.request_for(job_id)
        # A gang runs as one program: one member failing for good ends it, whatever the budget says.
        tolerated = 0 if request.coscheduling.group_by else request.max_task_failures
        outcome = derive_job_state(job["state"], [t["state"] for t in tasks], tolerated, detail)
        if outcome.state == job["state"]:
            return
        reason = outcome.reason or JOB_TRANSITIONS[job["state"]][outcome.state]
        self._transition("job", job_id, job["state"], outcome.state, reason, now_ms)
        started = job["started_at_ms"]
        if started is None and outcome.state in (pb.JOB_STATE_BUILDING, pb.JOB_STATE_RUNNING):
            started = now_ms
        if outcome.state in TERMINAL_JOB_STATES:
            if started is None:
                # Tasks can finish between two heartbeats without ever being seen running.
                started = self._conn.execute(
                    "SELECT MIN(started_at_ms) FROM tasks WHERE job_id=?", (job_id,)
                ).fetchone()[0]
            succeeded = outcome.state == pb.JOB_STATE_SUCCEEDED
            error = "" if succeeded else detail
            exit_code = failed["exit_code"] if failed and not succeeded else 0
            self._conn.execute(
                "UPDATE jobs SET state=?, started_at_ms=?, finished_at_ms=?, error=?, exit_code=? WHERE job_id=?",
                (outcome.state, started, now_ms, error, exit_code, job_id),
            )
            if outcome.state != pb.JOB_STATE_SUCCEEDED:
                self._kill_tasks(job_id, f"job ended: {detail}", now_ms, effects)
            for child in self._conn.execute(
                "SELECT job_id FROM jobs WHERE parent_job_id=?", (job_id,)
            ).fetchall():
                self._kill_job_tree(
                    child["job_id"], pb.JOB_STATE_KILLED, f"parent job {job_id} finished", now_ms, effects
                )
        else:
            self._conn.execute(
                "UPDATE jobs SET state=?, started_at_ms=? WHERE job_id=?", (outcome.state, started, job_id)
            )

    # ------------------------------------------------------------ scheduling

    def _demand_template(self, job_id: str) -> TaskDemand:
        """The scheduling shape shared by every task of a job (cached: requests never change)."""
        template = self._demand_templates.get(job_id)
        if template is None:
            template = demand_from_request(job_id, self.request_for(job_id))
            self._demand_templates[job_id] = template
        return template

    def scheduling_inputs(self) -> tuple[list[TaskDemand], list[WorkerCapacity]]:
        """Pending tasks in scheduling order, and the capacity each healthy worker has left.

        Order: higher priority first; then by the submission of the job's root, so a running
        job's children go before jobs submitted after it; then FIFO by job; then task index.
        """
        with self._read() as db:
            rows = db.execute(
                f"SELECT t.task_id, t.job_id FROM tasks t JOIN jobs j ON j.job_id = t.job_id "
                f"WHERE t.state = {pb.TASK_STATE_PENDING} "
                f"ORDER BY j.priority DESC, j.root_submitted_at_ms, j.submitted_at_ms, t.job_id, t.task_index"
            ).fetchall()
            demands = [
                dataclasses.replace(self._demand_template(row["job_id"]), task_id=row["task_id"]) for row in rows
            ]
            if not demands:
                return [], []
            committed: dict[str, Resources] = {}
            devices_used: dict[str, int] = {}
            for a in db.execute(
                f"SELECT a.worker_id, a.cpu_millicores, a.memory_bytes, a.disk_bytes, t.job_id FROM attempts a "
                f"JOIN tasks t ON t.task_id = a.task_id WHERE a.state IN ({_ACTIVE_SQL})"
            ):
                worker_id = a["worker_id"]
                committed[worker_id] = committed.get(worker_id, Resources()) + Resources(
                    a["cpu_millicores"], a["memory_bytes"], a["disk_bytes"]
                )
                device = self._demand_template(a["job_id"]).device
                if device is not None:
                    # A whole-host TPU request (count 0) takes every chip: count it as "a lot".
                    devices_used[worker_id] = devices_used.get(worker_id, 0) + (device.count or 1 << 20)
            workers = []
            for w in db.execute(
                f"SELECT worker_id, metadata, registered_at_ms FROM workers "
                f"WHERE state = {pb.WORKER_STATE_HEALTHY} ORDER BY worker_id"
            ):
                total, attributes, device = self._worker_offer(w)
                workers.append(
                    WorkerCapacity(
                        w["worker_id"],
                        total,
                        total - committed.get(w["worker_id"], Resources()),
                        attributes,
                        device,
                        max(0, (device.count if device else 0) - devices_used.get(w["worker_id"], 0)),
                    )
                )
        return demands, workers

    def _worker_offer(self, row: sqlite3.Row) -> tuple[Resources, dict[str, AttributeValue], Device | None]:
        """A worker's capacity, attributes and device, parsed once per registration: every
        scheduling pass needs them for every worker."""
        cached = self._worker_offers.get(row["worker_id"])
        if cached is not None and cached[0] == row["registered_at_ms"]:
            return cached[1]
        meta = pb.WorkerMetadata.FromString(row["metadata"])
        offer = (
            Resources(meta.cpu_millicores, meta.memory_bytes, meta.disk_bytes),
            {k: attribute_from_proto(v) for k, v in meta.attributes.items()},
            _worker_device(meta),
        )
        self._worker_offers[row["worker_id"]] = (row["registered_at_ms"], offer)
        return offer

    def expire_unschedulable(self, now_ms: int) -> Effects:
        """Tasks pending past their job's scheduling timeout become UNSCHEDULABLE, with the reason
        they could not be placed."""
        effects = Effects()
        with self._write() as db:
            touched: set[str] = set()
            for task in db.execute(
                f"SELECT task_id, job_id, pending_since_ms, pending_reason FROM tasks WHERE state = {pb.TASK_STATE_PENDING}"
            ).fetchall():
                timeout_ms = self.request_for(task["job_id"]).scheduling_timeout.milliseconds
                if not timeout_ms or now_ms - task["pending_since_ms"] < timeout_ms:
                    continue
                error = (
                    f"not scheduled within {timeout_ms / 1000:g}s (scheduling_timeout): "
                    f"{task['pending_reason'] or 'no placement found'}"
                )
                self._transition("task", task["task_id"], pb.TASK_STATE_PENDING, pb.TASK_STATE_UNSCHEDULABLE, error, now_ms)
                db.execute(
                    "UPDATE tasks SET state=?, error=?, finished_at_ms=?, pending_reason='' WHERE task_id=?",
                    (pb.TASK_STATE_UNSCHEDULABLE, error, now_ms, task["task_id"]),
                )
                touched.add(task["job_id"])
            for job_id in touched:
                self._refresh_job(job_id, now_ms, effects)
        return effects

    def apply_assignments(
        self, assignments: list[tuple[str, str]], pending_reasons: dict[str, str], now_ms: int
    ) -> Effects:
        effects = Effects()
        with self._write() as db:
            for task_id, worker_id in assignments:
                task = db.execute("SELECT * FROM tasks WHERE task_id=?", (task_id,)).fetchone()
                worker = db.execute("SELECT state FROM workers WHERE worker_id=?", (worker_id,)).fetchone()
                if task is None or task["state"] != pb.TASK_STATE_PENDING:
                    continue  # killed while the scheduler was deciding
                if worker is None or worker["state"] != pb.WORKER_STATE_HEALTHY:
                    continue
                spec = self.request_for(task["job_id"]).resources
                attempt_id = task["current_attempt"] + 1
                db.execute(
                    "INSERT INTO attempts(task_id, attempt_id, worker_id, state, cpu_millicores, memory_bytes,"
                    " disk_bytes, created_at_ms) VALUES (?,?,?,?,?,?,?,?)",
                    (
                        task_id,
                        attempt_id,
                        worker_id,
                        pb.TASK_STATE_ASSIGNED,
                        spec.cpu_millicores,
                        spec.memory_bytes,
                        spec.disk_bytes,
                        now_ms,
                    ),
                )
                self._transition("task", task_id, task["state"], pb.TASK_STATE_ASSIGNED, f"assigned to {worker_id}", now_ms)
                db.execute(
                    "UPDATE tasks SET state=?, current_attempt=?, worker_id=?, pending_reason='' WHERE task_id=?",
                    (pb.TASK_STATE_ASSIGNED, attempt_id, worker_id, task_id),
                )
                effects.heartbeat_workers.add(worker_id)
            db.executemany(
                f"UPDATE tasks SET pending_reason=? WHERE task_id=? AND state={pb.TASK_STATE_PENDING}",
                [(reason, task_id) for task_id, reason in pending_reasons.items()],
            )
        return effects

    # ------------------------------------------------------------ workers

    def register_worker(self, worker_id: str, address: str, metadata: pb.WorkerMetadata, now_ms: int) -> Effects:
        with self._write() as db:
            row = db.execute("SELECT state FROM workers WHERE worker_id=?", (worker_id,)).fetchone()
            if row is None:
                db.execute(
                    "INSERT INTO workers(worker_id, address, metadata, state, registered_at_ms, last_heartbeat_ms)"
                    " VALUES (?,?,?,?,?,?)",
                    (worker_id, address, metadata.SerializeToString(), pb.WORKER_STATE_HEALTHY, now_ms, now_ms),
                )
                self._conn.execute(
                    "INSERT INTO transitions(kind, entity_id, from_state, to_state, reason, at_ms)"
                    " VALUES ('worker',?,?,?,?,?)",
                    (worker_id, pb.WORKER_STATE_UNSPECIFIED, pb.WORKER_STATE_HEALTHY, "registered", now_ms),
                )
            else:
                if row["state"] in (pb.WORKER_STATE_FAILED, pb.WORKER_STATE_STOPPED, pb.WORKER_STATE_TERMINATED):
                    self._transition("worker", worker_id, row["state"], pb.WORKER_STATE_HEALTHY, "registered again", now_ms)
                db.execute(
                    "UPDATE workers SET address=?, metadata=?, state=?, registered_at_ms=?, last_heartbeat_ms=?,"
                    " error='' WHERE worker_id=?",
                    (address, metadata.SerializeToString(), pb.WORKER_STATE_HEALTHY, now_ms, now_ms, worker_id),
                )
        return Effects(heartbeat_workers={worker_id}, wake_scheduler=True)

    def live_workers(self) -> list[sqlite3.Row]:
        with self._read() as db:
            return db.execute(
                f"SELECT * FROM workers WHERE state IN ({pb.WORKER_STATE_HEALTHY},{pb.WORKER_STATE_UNHEALTHY})"
            ).fetchall()

    def touch_live_workers(self, now_ms: int) -> None:
        """After a controller restart, give every known worker a fresh timeout window."""
        with self._write() as db:
            db.execute(
                f"UPDATE workers SET last_heartbeat_ms=? WHERE state IN "
                f"({pb.WORKER_STATE_HEALTHY},{pb.WORKER_STATE_UNHEALTHY})",
                (now_ms,),
            )

    def plan_heartbeat(self, worker_id: str, controller_address: str) -> HeartbeatPlan | None:
        with self._read() as db:
            worker = db.execute("SELECT * FROM workers WHERE worker_id=?", (worker_id,)).fetchone()
            if worker is None or worker["state"] not in (pb.WORKER_STATE_HEALTHY, pb.WORKER_STATE_UNHEALTHY):
                return None
            attempts = db.execute(
                "SELECT a.*, t.job_id, t.task_index FROM attempts a JOIN tasks t ON t.task_id = a.task_id "
                "WHERE a.worker_id=? AND a.logs_complete=0",
                (worker_id,),
            ).fetchall()
            to_run, expected = [], []
            for a in attempts:
                if a["state"] in ACTIVE_ATTEMPT_STATES and not a["delivered"]:
                    to_run.append(self._run_request(a, worker_id, controller_address))
                if a["state"] in ACTIVE_ATTEMPT_STATES or a["delivered"]:
                    expected.append(
                        pb.ExpectedTask(task_id=a["task_id"], attempt_id=a["attempt_id"], log_offset=a["log_offset"])
                    )
        return HeartbeatPlan(worker_id, worker["address"], to_run, expected)

    def _run_request(self, attempt: sqlite3.Row, worker_id: str, controller_address: str) -> pb.RunTaskRequest:
        job_id = attempt["job_id"]
        request = self.request_for(job_id)
        num_tasks = max(1, request.replicas)
        env = {
            "IRIS_JOB_ID": job_id,
            "IRIS_TASK_ID": attempt["task_id"],
            "IRIS_TASK_INDEX": str(attempt["task_index"]),
            "IRIS_NUM_TASKS": str(num_tasks),
            "IRIS_ATTEMPT_ID": str(attempt["attempt_id"]),
            "IRIS_WORKER_ID": worker_id,
            "IRIS_CONTROLLER_ADDRESS": controller_address,
        }
        if request.resources.device.HasField("tpu"):
            env.update(self._tpu_env(job_id, attempt["task_index"], worker_id))
        return pb.RunTaskRequest(
            task_id=attempt["task_id"],
            job_id=job_id,
            attempt_id=attempt["attempt_id"],
            task_index=attempt["task_index"],
            num_tasks=num_tasks,
            entrypoint=request.entrypoint,
            resources=request.resources,
            environment=request.environment,
            bundle_uri=request.bundle_uri,
            bundle_sha256=request.bundle_sha256,
            ports=request.ports,
            timeout=request.timeout,
            env=env,
        )

    def _tpu_env(self, job_id: str, task_index: int, worker_id: str) -> dict[str, str]:
        """What JAX needs to form one program over a slice's hosts: the hosts of the whole gang in
        task order, and this task's place among them."""
        env = {"JAX_PLATFORMS": "tpu,cpu", "PJRT_DEVICE": "TPU", "TPU_WORKER_ID": str(task_index)}
        hosts = []
        for row in self._conn.execute(
            # Gang members are placed in one transaction, so every task's worker is the current
            # one; some members may already have finished, which must not shrink the host list.
            "SELECT w.metadata FROM tasks t JOIN workers w ON w.worker_id = t.worker_id "
            "WHERE t.job_id=? ORDER BY t.task_index",
            (job_id,),
        ):
            meta = pb.WorkerMetadata.FromString(row["metadata"])
            hosts.append(meta.ip_address or meta.hostname)
        if hosts:
            env["TPU_WORKER_HOSTNAMES"] = ",".join(hosts)
        worker = self._conn.execute("SELECT metadata FROM workers WHERE worker_id=?", (worker_id,)).fetchone()
        if worker is not None:
            attributes = pb.WorkerMetadata.FromString(worker["metadata"]).attributes
            if "tpu-name" in attributes:
                env["TPU_NAME"] = str(attribute_from_proto(attributes["tpu-name"]))
        return env

    def apply_heartbeat(
        self, plan: HeartbeatPlan, response: pb.HeartbeatResponse, now_ms: int
    ) -> tuple[list[tuple[str, int]], Effects]:
        """Reconcile what the worker reported with what the controller expected.

        Returns the attempts the worker runs that the controller does not expect (to be killed)
        and the effects of the changes.
        """
        effects = Effects()
        reported = {(s.task_id, s.attempt_id): s for s in (*response.running_tasks, *response.completed_tasks)}
        unknown: list[tuple[str, int]] = []
        touched_jobs: set[str] = set()
        with self._write() as db:
            worker = db.execute("SELECT state FROM workers WHERE worker_id=?", (plan.worker_id,)).fetchone()
            if worker is None or worker["state"] not in (pb.WORKER_STATE_HEALTHY, pb.WORKER_STATE_UNHEALTHY):
                return [], effects
            if worker["state"] == pb.WORKER_STATE_UNHEALTHY:
                self._transition("worker", plan.worker_id, worker["state"], pb.WORKER_STATE_HEALTHY, "heartbeat ok", now_ms)
            db.execute(
                "UPDATE workers SET state=?, last_heartbeat_ms=?, error='' WHERE worker_id=?",
                (pb.WORKER_STATE_HEALTHY, now_ms, plan.worker_id),
            )
            for run in plan.to_run:
                db.execute(
                    "UPDATE attempts SET delivered=1 WHERE task_id=? AND attempt_id=?", (run.task_id, run.attempt_id)
                )
            expected_keys = {(e.task_id, e.attempt_id) for e in plan.expected}
            for key in expected_keys:
                status = reported.get(key)
                db.execute("SAVEPOINT report")
                try:
                    if status is None:
                        self._lose_attempt(key, plan.worker_id, now_ms, touched_jobs, effects)
                    else:
                        self._absorb_status(status, now_ms, touched_jobs, effects)
                except InvalidTransitionError:
                    # One inconsistent report must not stall the worker's other attempts.
                    logger.exception("ignoring report of %s#%s from %s", *key, plan.worker_id)
                    db.execute("ROLLBACK TO report")
                db.execute("RELEASE report")
            for key, status in reported.items():
                if status.state not in ACTIVE_ATTEMPT_STATES:
                    continue
                row = db.execute(
                    "SELECT state, worker_id FROM attempts WHERE task_id=? AND attempt_id=?", key
                ).fetchone()
                # Also covers attempts killed in the store whose kill was lost with a controller restart.
                wanted = row is not None and row["worker_id"] == plan.worker_id and row["state"] in ACTIVE_ATTEMPT_STATES
                if not wanted:
                    unknown.append(key)
            for job_id in touched_jobs:
                self._refresh_job(job_id, now_ms, effects)
        if touched_jobs:
            effects.wake_scheduler = True
        return unknown, effects

    def _lose_attempt(
        self, key: tuple[str, int], worker_id: str, now_ms: int, touched_jobs: set[str], effects: Effects
    ) -> None:
        task_id, attempt_id = key
        attempt = self._conn.execute(
            "SELECT state FROM attempts WHERE task_id=? AND attempt_id=?", key
        ).fetchone()
        self._conn.execute("UPDATE attempts SET logs_complete=1 WHERE task_id=? AND attempt_id=?", key)
        if attempt is None or attempt["state"] not in ACTIVE_ATTEMPT_STATES:
            return
        reason = f"worker {worker_id} no longer has attempt {attempt_id} (the worker restarted or lost it)"
        self._end_attempt(
            task_id, attempt_id, pb.TASK_STATE_WORKER_FAILED, -1, reason, now_ms, touched_jobs, effects
        )

    def _absorb_status(
        self, status: pb.WorkerTaskStatus, now_ms: int, touched_jobs: set[str], effects: Effects
    ) -> None:
        key = (status.task_id, status.attempt_id)
        attempt = self._conn.execute(
            "SELECT a.*, t.job_id FROM attempts a JOIN tasks t ON t.task_id=a.task_id "
            "WHERE a.task_id=? AND a.attempt_id=?",
            key,
        ).fetchone()
        if attempt is None:
            return
        if status.logs:
            self._conn.executemany(
                "INSERT INTO task_logs(job_id, task_id, attempt_id, ts_ms, source, data) VALUES (?,?,?,?,?,?)",
                [
                    (attempt["job_id"], status.task_id, status.attempt_id, line.timestamp_ms, line.source, line.data)
                    for line in status.logs
                ],
            )
        log_offset = attempt["log_offset"] + len(status.logs)
        finished = status.state not in ACTIVE_ATTEMPT_STATES
        logs_complete = finished and log_offset >= status.total_log_lines
        self._conn.execute(
            "UPDATE attempts SET log_offset=?, logs_complete=? WHERE task_id=? AND attempt_id=?",
            (log_offset, int(logs_complete), *key),
        )
        if attempt["state"] not in ACTIVE_ATTEMPT_STATES or status.state == attempt["state"]:
            return
        if status.ports:
            self._conn.execute(
                "UPDATE tasks SET ports=? WHERE task_id=?", (json.dumps(dict(status.ports)), status.task_id)
            )
        if not finished:
            started_ms = status.started_at.epoch_ms or now_ms
            self._transition(
                "attempt", f"{status.task_id}#{status.attempt_id}", attempt["state"], status.state, "worker report", now_ms
            )
            self._conn.execute(
                "UPDATE attempts SET state=?, started_at_ms=COALESCE(started_at_ms, ?) WHERE task_id=? AND attempt_id=?",
                (status.state, started_ms, *key),
            )
            task = self._conn.execute("SELECT state, current_attempt FROM tasks WHERE task_id=?", (status.task_id,)).fetchone()
            if task["current_attempt"] == status.attempt_id and task["state"] != status.state:
                self._transition("task", status.task_id, task["state"], status.state, "worker report", now_ms)
                self._conn.execute(
                    "UPDATE tasks SET state=?, started_at_ms=COALESCE(started_at_ms, ?) WHERE task_id=?",
                    (status.state, started_ms, status.task_id),
                )
            touched_jobs.add(attempt["job_id"])
            return
        if status.started_at.epoch_ms:
            self._conn.execute(
                "UPDATE attempts SET started_at_ms=COALESCE(started_at_ms, ?) WHERE task_id=? AND attempt_id=?",
                (status.started_at.epoch_ms, *key),
            )
            self._conn.execute(
                "UPDATE tasks SET started_at_ms=COALESCE(started_at_ms, ?) WHERE task_id=?",
                (status.started_at.epoch_ms, status.task_id),
            )
        if status.result:
            self._conn.execute("UPDATE tasks SET result=? WHERE task_id=?", (status.result, status.task_id))
        self._end_attempt(
            status.task_id, status.attempt_id, status.state, status.exit_code, status.error, now_ms, touched_jobs, effects
        )

    def _end_attempt(
        self,
        task_id: str,
        attempt_id: int,
        state: int,
        exit_code: int,
        error: str,
        now_ms: int,
        touched_jobs: set[str],
        effects: Effects,
        charge: bool = True,
    ) -> None:
        """Apply an attempt's end to its task: retry it, or finish it with a reason a user can act on.

        `charge=False` is for attempts the worker never received: losing those is nobody's fault
        and costs no retry budget.
        """
        self._finish_attempt(task_id, attempt_id, state, exit_code, error, now_ms)
        task = self._conn.execute("SELECT * FROM tasks WHERE task_id=?", (task_id,)).fetchone()
        if task["current_attempt"] != attempt_id or task["state"] in TERMINAL_TASK_STATES:
            return
        request = self.request_for(task["job_id"])
        if charge:
            outcome = decide_attempt_outcome(
                state,
                task["failure_count"],
                task["preemption_count"],
                request.max_retries_failure,
                request.max_retries_preemption,
            )
        else:
            outcome = AttemptOutcome(pb.TASK_STATE_PENDING, task["failure_count"], task["preemption_count"], retry=True)
        reason = error or ("exited 0" if state == pb.TASK_STATE_SUCCEEDED else task_state_name(state))
        if outcome.retry:
            reason = f"attempt {attempt_id} {task_state_name(state)} ({reason}); retrying"
        elif outcome.task_state == pb.TASK_STATE_FAILED:
            error = self._explain_failure(task_id, attempt_id, error, outcome.failure_count)
        elif outcome.task_state == pb.TASK_STATE_WORKER_FAILED:
            error = (
                f"{error}; its worker was lost {outcome.preemption_count} time(s), past the limit of "
                f"{request.max_retries_preemption} (max_retries_preemption)"
            )
        self._transition("task", task_id, task["state"], outcome.task_state, reason, now_ms)
        finished_at = None if outcome.retry else now_ms
        self._conn.execute(
            "UPDATE tasks SET state=?, failure_count=?, preemption_count=?, exit_code=?, error=?,"
            " finished_at_ms=?, pending_reason=?, pending_since_ms=? WHERE task_id=?",
            (
                outcome.task_state,
                outcome.failure_count,
                outcome.preemption_count,
                exit_code,
                error,
                finished_at,
                "waiting to be retried" if outcome.retry else "",
                now_ms,
                task_id,
            ),
        )
        touched_jobs.add(task["job_id"])
        if outcome.retry and request.coscheduling.group_by:
            self._restart_gang(task["job_id"], task_id, now_ms, effects)

    def _restart_gang(self, job_id: str, failed_task_id: str, now_ms: int, effects: Effects) -> None:
        """A gang runs as a unit: when one member goes back to pending, so do the others (their
        attempts are killed without spending their budgets), and the scheduler places them together."""
        reason = f"gang member {failed_task_id} is being retried; the gang restarts together"
        for sibling in self._conn.execute(
            f"SELECT * FROM tasks WHERE job_id=? AND task_id != ? AND state IN ({_ACTIVE_SQL})",
            (job_id, failed_task_id),
        ).fetchall():
            self._finish_attempt(sibling["task_id"], sibling["current_attempt"], pb.TASK_STATE_KILLED, -1, reason, now_ms)
            effects.kills.append((sibling["worker_id"], sibling["task_id"], sibling["current_attempt"]))
            effects.heartbeat_workers.add(sibling["worker_id"])
            self._transition("task", sibling["task_id"], sibling["state"], pb.TASK_STATE_PENDING, reason, now_ms)
            self._conn.execute(
                "UPDATE tasks SET state=?, pending_reason=?, pending_since_ms=? WHERE task_id=?",
                (pb.TASK_STATE_PENDING, "waiting to be retried with its gang", now_ms, sibling["task_id"]),
            )

    def _explain_failure(self, task_id: str, attempt_id: int, error: str, failures: int) -> str:
        tail = [
            r["data"]
            for r in self._conn.execute(
                "SELECT data FROM task_logs WHERE task_id=? AND attempt_id=? AND source != 'build' "
                "ORDER BY id DESC LIMIT ?",
                (task_id, attempt_id, FAILURE_LOG_LINES),
            )
        ][::-1]
        explained = error or "failed"
        if failures > 1:
            explained += f" (after {failures} attempts)"
        if tail:
            explained += "; last output: " + " | ".join(line[:200] for line in tail)
        return explained

    def record_heartbeat_failure(self, worker_id: str, error: str, now_ms: int, worker_timeout_ms: int) -> Effects:
        """A heartbeat RPC failed: mark the worker unhealthy, and failed once it is past its timeout."""
        effects = Effects()
        with self._write() as db:
            worker = db.execute("SELECT * FROM workers WHERE worker_id=?", (worker_id,)).fetchone()
            if worker is None or worker["state"] not in (pb.WORKER_STATE_HEALTHY, pb.WORKER_STATE_UNHEALTHY):
                return effects
            silent_ms = now_ms - worker["last_heartbeat_ms"]
            if silent_ms >= worker_timeout_ms:
                self._fail_worker(
                    worker, f"no successful heartbeat for {silent_ms / 1000:.0f}s (last error: {error})", now_ms, effects
                )
            else:
                if worker["state"] == pb.WORKER_STATE_HEALTHY:
                    self._transition("worker", worker_id, worker["state"], pb.WORKER_STATE_UNHEALTHY, error, now_ms)
                db.execute(
                    "UPDATE workers SET state=?, error=? WHERE worker_id=?",
                    (pb.WORKER_STATE_UNHEALTHY, error, worker_id),
                )
        return effects

    def _fail_worker(
        self, worker: sqlite3.Row, reason: str, now_ms: int, effects: Effects, final_state: int = pb.WORKER_STATE_FAILED
    ) -> None:
        worker_id = worker["worker_id"]
        self._transition("worker", worker_id, worker["state"], final_state, reason, now_ms)
        self._conn.execute("UPDATE workers SET state=?, error=? WHERE worker_id=?", (final_state, reason, worker_id))
        touched: set[str] = set()
        for a in self._conn.execute(
            "SELECT task_id, attempt_id, state, delivered FROM attempts WHERE worker_id=? AND logs_complete=0",
            (worker_id,),
        ).fetchall():
            self._conn.execute(
                "UPDATE attempts SET logs_complete=1 WHERE task_id=? AND attempt_id=?", (a["task_id"], a["attempt_id"])
            )
            if a["state"] in ACTIVE_ATTEMPT_STATES:
                self._end_attempt(
                    a["task_id"],
                    a["attempt_id"],
                    pb.TASK_STATE_WORKER_FAILED,
                    -1,
                    f"worker {worker_id} failed: {reason}",
                    now_ms,
                    touched,
                    effects,
                    charge=bool(a["delivered"]),
                )
        for job_id in touched:
            self._refresh_job(job_id, now_ms, effects)
        effects.wake_scheduler = True

    def fail_silent_workers(self, now_ms: int, worker_timeout_ms: int) -> Effects:
        effects = Effects()
        with self._write() as db:
            for worker in db.execute(
                f"SELECT * FROM workers WHERE state IN ({pb.WORKER_STATE_HEALTHY},{pb.WORKER_STATE_UNHEALTHY}) "
                "AND last_heartbeat_ms < ?",
                (now_ms - worker_timeout_ms,),
            ).fetchall():
                silent = (now_ms - worker["last_heartbeat_ms"]) / 1000
                detail = f" (last error: {worker['error']})" if worker["error"] else ""
                self._fail_worker(worker, f"no successful heartbeat for {silent:.0f}s{detail}", now_ms, effects)
        return effects

    # ------------------------------------------------------------ slices

    def record_slice(
        self,
        slice_id: str,
        scale_group: str,
        zone: str,
        state: str,
        reason: str,
        now_ms: int,
        labels: dict[str, str] | None = None,
        created_at_ms: int | None = None,
    ) -> None:
        """Remember a slice the autoscaler just asked for, or one it found already running."""
        with self._write() as db:
            db.execute(
                "INSERT INTO slices(slice_id, scale_group, zone, state, created_at_ms, updated_at_ms, labels)"
                " VALUES (?,?,?,?,?,?,?)",
                (slice_id, scale_group, zone, state, created_at_ms or now_ms, now_ms, json.dumps(labels or {})),
            )
            db.execute(
                "INSERT INTO transitions(kind, entity_id, from_state, to_state, reason, at_ms) VALUES ('slice',?,?,?,?,?)",
                (slice_id, "", state, reason, now_ms),
            )

    def update_slice(
        self,
        slice_id: str,
        state: str,
        reason: str,
        now_ms: int,
        error: str = "",
        worker_ids: list[str] | None = None,
    ) -> None:
        with self._write() as db:
            row = db.execute("SELECT state, worker_ids FROM slices WHERE slice_id=?", (slice_id,)).fetchone()
            if row is None:
                raise NotFoundError(f"slice {slice_id} not found")
            self._transition("slice", slice_id, row["state"], state, reason, now_ms)
            db.execute(
                "UPDATE slices SET state=?, updated_at_ms=?, error=CASE WHEN ?='' THEN error ELSE ? END,"
                " worker_ids=? WHERE slice_id=?",
                (
                    state,
                    now_ms,
                    error,
                    error,
                    json.dumps(worker_ids) if worker_ids is not None else row["worker_ids"],
                    slice_id,
                ),
            )

    def slices(self, include_deleted: bool = False) -> list[sqlite3.Row]:
        with self._read() as db:
            clause = "" if include_deleted else "WHERE state != 'DELETED'"
            return db.execute(f"SELECT * FROM slices {clause} ORDER BY created_at_ms, slice_id").fetchall()

    def slice_history(self, slice_id: str) -> list[pb.StateTransition]:
        with self._read():
            return self._history("slice", slice_id)

    def fail_workers(
        self, worker_ids: list[str], reason: str, now_ms: int, final_state: int = pb.WORKER_STATE_FAILED
    ) -> Effects:
        """Workers known to be gone: fail them now rather than at their timeout. A slice ended on
        purpose leaves its workers TERMINATED instead of FAILED; their tasks fail over the same way."""
        effects = Effects()
        with self._write() as db:
            for worker_id in worker_ids:
                worker = db.execute("SELECT * FROM workers WHERE worker_id=?", (worker_id,)).fetchone()
                if worker is not None and worker["state"] in (pb.WORKER_STATE_HEALTHY, pb.WORKER_STATE_UNHEALTHY):
                    self._fail_worker(worker, reason, now_ms, effects, final_state)
        return effects

    # ------------------------------------------------------------ reads

    def job_status(self, job_id: str, include_tasks: bool = False) -> pb.JobStatus:
        with self._read() as db:
            job = db.execute("SELECT * FROM jobs WHERE job_id=?", (job_id,)).fetchone()
            if job is None:
                raise NotFoundError(f"job {job_id} not found")
            return self._job_proto(job, include_tasks)

    def _job_proto(self, job: sqlite3.Row, include_tasks: bool) -> pb.JobStatus:
        db = self._conn
        request = self.request_for(job["job_id"])
        status = pb.JobStatus(
            job_id=job["job_id"],
            name=request.name or job["job_id"],
            state=job["state"],
            error=job["error"],
            exit_code=job["exit_code"],
            submitted_at=_ts(job["submitted_at_ms"]),
            started_at=_ts(job["started_at_ms"]),
            finished_at=_ts(job["finished_at_ms"]),
            num_tasks=job["num_tasks"],
            resources=request.resources,
            parent_job_id=job["parent_job_id"] or "",
        )
        reasons = []
        for row in db.execute(
            "SELECT state, COUNT(*) AS n, SUM(failure_count) AS f, SUM(preemption_count) AS p, "
            "MIN(pending_reason) AS reason FROM tasks WHERE job_id=? GROUP BY state",
            (job["job_id"],),
        ):
            status.task_state_counts[task_state_name(row["state"])] = row["n"]
            status.failure_count += row["f"] or 0
            status.preemption_count += row["p"] or 0
            if row["state"] == pb.TASK_STATE_PENDING and row["reason"]:
                reasons.append(row["reason"])
        if job["state"] == pb.JOB_STATE_PENDING or reasons:
            status.pending_reason = reasons[0] if reasons else ""
        if include_tasks:
            status.tasks.extend(
                self._task_proto(t) for t in db.execute(
                    "SELECT * FROM tasks WHERE job_id=? ORDER BY task_index", (job["job_id"],)
                ).fetchall()
            )
            status.history.extend(self._history("job", job["job_id"]))
        return status

    def _history(self, kind: str, entity_id: str) -> list[pb.StateTransition]:
        return [
            pb.StateTransition(
                from_state=state_label(kind, r["from_state"]),
                to_state=state_label(kind, r["to_state"]),
                reason=r["reason"],
                at=time_pb2.Timestamp(epoch_ms=r["at_ms"]),
            )
            for r in self._conn.execute(
                "SELECT * FROM transitions WHERE kind=? AND entity_id=? ORDER BY id", (kind, entity_id)
            )
        ]

    def _task_proto(self, task: sqlite3.Row) -> pb.TaskStatus:
        db = self._conn
        status = pb.TaskStatus(
            task_id=task["task_id"],
            job_id=task["job_id"],
            task_index=task["task_index"],
            state=task["state"],
            worker_id=task["worker_id"] or "",
            current_attempt_id=task["current_attempt"],
            exit_code=task["exit_code"],
            error=task["error"],
            started_at=_ts(task["started_at_ms"]),
            finished_at=_ts(task["finished_at_ms"]),
            pending_reason=task["pending_reason"] if task["state"] == pb.TASK_STATE_PENDING else "",
            failure_count=task["failure_count"],
            preemption_count=task["preemption_count"],
            result=task["result"] or b"",
            ports=json.loads(task["ports"]),
        )
        if task["worker_id"]:
            worker = db.execute("SELECT address FROM workers WHERE worker_id=?", (task["worker_id"],)).fetchone()
            status.worker_address = worker["address"] if worker else ""
        for a in db.execute("SELECT * FROM attempts WHERE task_id=? ORDER BY attempt_id", (task["task_id"],)):
            status.attempts.append(
                pb.TaskAttempt(
                    attempt_id=a["attempt_id"],
                    worker_id=a["worker_id"],
                    state=a["state"],
                    exit_code=a["exit_code"],
                    error=a["error"],
                    started_at=_ts(a["started_at_ms"]),
                    finished_at=_ts(a["finished_at_ms"]),
                )
            )
        status.history.extend(self._history("task", task["task_id"]))
        return status

    def task_status(self, task_id: str) -> pb.TaskStatus:
        with self._read() as db:
            task = db.execute("SELECT * FROM tasks WHERE task_id=?", (task_id,)).fetchone()
            if task is None:
                raise NotFoundError(f"task {task_id} not found")
            return self._task_proto(task)

    def list_tasks(self, job_id: str) -> list[pb.TaskStatus]:
        with self._read() as db:
            if db.execute("SELECT 1 FROM jobs WHERE job_id=?", (job_id,)).fetchone() is None:
                raise NotFoundError(f"job {job_id} not found")
            return [
                self._task_proto(t)
                for t in db.execute("SELECT * FROM tasks WHERE job_id=? ORDER BY task_index", (job_id,)).fetchall()
            ]

    def list_jobs(
        self, states: Iterable[int], name_prefix: str, limit: int, offset: int
    ) -> tuple[list[pb.JobStatus], int]:
        where, params = [], []
        state_list = list(states)
        if state_list:
            where.append(f"state IN ({','.join('?' * len(state_list))})")
            params += state_list
        if name_prefix:
            where.append("job_id >= ? AND job_id < ?")
            params += [name_prefix, name_prefix + "\U0010ffff"]
        clause = f"WHERE {' AND '.join(where)}" if where else ""
        with self._read() as db:
            total = db.execute(f"SELECT COUNT(*) FROM jobs {clause}", params).fetchone()[0]
            rows = db.execute(
                f"SELECT * FROM jobs {clause} ORDER BY submitted_at_ms DESC, job_id LIMIT ? OFFSET ?",
                [*params, limit, offset],
            ).fetchall()
            return [self._job_proto(r, include_tasks=False) for r in rows], total

    def count_by_state(self) -> tuple[dict[int, int], dict[int, int]]:
        """(jobs per state, workers per state), for /metrics."""
        with self._read() as db:
            jobs = {r[0]: r[1] for r in db.execute("SELECT state, COUNT(*) FROM jobs GROUP BY state")}
            workers = {r[0]: r[1] for r in db.execute("SELECT state, COUNT(*) FROM workers GROUP BY state")}
        return jobs, workers

    def list_workers(self) -> list[pb.WorkerInfo]:
        with self._read() as db:
            running: dict[str, list[str]] = {}
            committed: dict[str, Resources] = {}
            for a in db.execute(f"SELECT * FROM attempts WHERE state IN ({_ACTIVE_SQL})"):
                running.setdefault(a["worker_id"], []).append(a["task_id"])
                committed[a["worker_id"]] = committed.get(a["worker_id"], Resources()) + Resources(
                    a["cpu_millicores"], a["memory_bytes"], a["disk_bytes"]
                )
            infos = []
            for w in db.execute("SELECT * FROM workers ORDER BY worker_id"):
                used = committed.get(w["worker_id"], Resources())
                infos.append(
                    pb.WorkerInfo(
                        worker_id=w["worker_id"],
                        address=w["address"],
                        metadata=pb.WorkerMetadata.FromString(w["metadata"]),
                        state=w["state"],
                        registered_at=_ts(w["registered_at_ms"]),
                        last_heartbeat=_ts(w["last_heartbeat_ms"]),
                        running_task_ids=running.get(w["worker_id"], []),
                        committed=pb.ResourceSpec(
                            cpu_millicores=used.cpu_millicores, memory_bytes=used.memory_bytes, disk_bytes=used.disk_bytes
                        ),
                        error=w["error"],
                    )
                )
            return infos

    # ------------------------------------------------------------ logs

    def read_logs(self, entity_id: str, cursor: int, max_lines: int) -> tuple[list[pb.TaskLogLine], int, bool]:
        """Lines after `cursor` for a job (all its tasks) or one task, and whether more can arrive."""
        with self._read() as db:
            job = db.execute("SELECT state FROM jobs WHERE job_id=?", (entity_id,)).fetchone()
            if job is not None:
                column, terminal = "job_id", job["state"] in TERMINAL_JOB_STATES
                open_attempts = db.execute(
                    "SELECT COUNT(*) FROM attempts a JOIN tasks t ON t.task_id=a.task_id "
                    "WHERE t.job_id=? AND a.logs_complete=0",
                    (entity_id,),
                ).fetchone()[0]
            else:
                task = db.execute("SELECT state FROM tasks WHERE task_id=?", (entity_id,)).fetchone()
                if task is None:
                    raise NotFoundError(f"no job or task named {entity_id}")
                column, terminal = "task_id", task["state"] in TERMINAL_TASK_STATES
                open_attempts = db.execute(
                    "SELECT COUNT(*) FROM attempts WHERE task_id=? AND logs_complete=0", (entity_id,)
                ).fetchone()[0]
            rows = db.execute(
                f"SELECT * FROM task_logs WHERE {column}=? AND id>? ORDER BY id LIMIT ?",
                (entity_id, cursor, max_lines),
            ).fetchall()
        lines = [
            pb.TaskLogLine(
                task_id=r["task_id"],
                attempt_id=r["attempt_id"],
                line=pb.LogLine(timestamp_ms=r["ts_ms"], source=r["source"], data=r["data"]),
                cursor=r["id"],
            )
            for r in rows
        ]
        next_cursor = rows[-1]["id"] if rows else cursor
        finished = terminal and open_attempts == 0 and len(rows) < max_lines
        return lines, next_cursor, finished

    # ------------------------------------------------------------ endpoints

    def register_endpoint(
        self, endpoint_id: str, name: str, address: str, job_id: str, metadata: dict[str, str], now_ms: int
    ) -> None:
        with self._write() as db:
            job = db.execute("SELECT state FROM jobs WHERE job_id=?", (job_id,)).fetchone()
            if job is None:
                raise NotFoundError(f"job {job_id} not found")
            if job["state"] in TERMINAL_JOB_STATES:
                raise JobExistsError(
                    f"job {job_id} has finished ({state_label('job', job['state'])}); it cannot register endpoints"
                )
            db.execute(
                "INSERT INTO endpoints(endpoint_id, name, address, job_id, metadata, registered_at_ms)"
                " VALUES (?,?,?,?,?,?)",
                (endpoint_id, name, address, job_id, json.dumps(metadata), now_ms),
            )

    def unregister_endpoint(self, endpoint_id: str) -> None:
        with self._write() as db:
            if db.execute("DELETE FROM endpoints WHERE endpoint_id=?", (endpoint_id,)).rowcount == 0:
                raise NotFoundError(f"endpoint {endpoint_id} not found")

    def list_endpoints(self, prefix: str) -> list[pb.Endpoint]:
        """Endpoints of jobs that have not finished: a task may register one before its job shows
        RUNNING, and a finished job's endpoints point at nothing."""
        with self._read() as db:
            rows = db.execute(
                f"SELECT e.* FROM endpoints e JOIN jobs j ON j.job_id=e.job_id "
                f"WHERE j.state NOT IN ({_TERMINAL_JOB_SQL}) AND e.name >= ? AND e.name < ? ORDER BY e.name",
                (prefix, prefix + "\U0010ffff"),
            ).fetchall()
        return [
            pb.Endpoint(
                endpoint_id=r["endpoint_id"],
                name=r["name"],
                address=r["address"],
                job_id=r["job_id"],
                metadata=json.loads(r["metadata"]),
            )
            for r in rows
        ]


def _worker_device(meta: pb.WorkerMetadata) -> Device | None:
    kind = meta.device.WhichOneof("device")
    if kind is None:
        return None
    offered = getattr(meta.device, kind)
    return Device(kind, offered.variant, offered.count)
