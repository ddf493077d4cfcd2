"""The store's foundation: the SQLite connection and its transactions, the one mutation path,
the launch-request cache, and the persistence of the pure layers' decisions: reconcile's (attempts
and tasks) and job_tree's (a job's derived state, the kills its end or termination cascades to).

Every state change goes through `_set_state()`, which checks the entity's transition table,
records the move (time, reason, the event that caused it) in the history table and writes the row
with its companion columns, in the caller's transaction. Nothing else writes a state column.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import sqlite3
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from iris import chaos
from iris.cluster.controller import job_tree, reconcile, render
from iris.cluster.controller.pending_order import PendingOrder
from iris.cluster.controller.reconcile import (
    ACTIVE_ATTEMPT_STATES,
    AttemptChange,
    AttemptKey,
    AttemptRecord,
    Budget,
    Decisions,
    Snapshot,
    TaskChange,
    TaskDetail,
    TaskRecord,
)
from iris.cluster.controller.scheduling_types import (
    Device,
    Resources,
    TaskDemand,
    WorkerCapacity,
)
from iris.cluster.controller.schema import migrate
from iris.cluster.controller.transitions import (
    InvalidTransitionError,
    check_transition,
    state_label,
)
from iris.cluster.types import (
    TERMINAL_JOB_STATES,
    TERMINAL_TASK_STATES,
    AttributeValue,
)
from iris.rpc import cluster_pb2 as pb

logger = logging.getLogger(__name__)

ACTIVE_SQL = render.ACTIVE_ATTEMPT_SQL
TERMINAL_TASK_SQL = ",".join(str(s) for s in TERMINAL_TASK_STATES)
TERMINAL_JOB_SQL = ",".join(str(s) for s in TERMINAL_JOB_STATES)
LIVE_WORKER_SQL = f"{pb.WORKER_STATE_HEALTHY},{pb.WORKER_STATE_UNHEALTHY}"
# Launch requests kept parsed in memory; older ones are read again from the jobs table.
REQUEST_CACHE_SIZE = 10_000

# Ids per `IN (...)` query: well under SQLite's limit on bound parameters.
IN_CHUNK = 500

# kind -> (table, key columns) for the mutation path.
_ENTITIES = {
    "job": ("jobs", ("job_id",)),
    "task": ("tasks", ("task_id",)),
    "attempt": ("attempts", ("task_id", "attempt_id")),
    "worker": ("workers", ("worker_id",)),
    "slice": ("slices", ("slice_id",)),
}


class JobExistsError(ValueError):
    pass


class RequestAlreadyServedError(Exception):
    """A LaunchJob whose request id already created a job: the retry gets that job."""

    def __init__(self, job_id: str):
        super().__init__(job_id)
        self.job_id = job_id


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
    # The bearer token the worker asked for when it registered; empty when auth is off.
    callback_token: str = ""


@dataclass(frozen=True)
class Sql:
    """A column value computed by SQLite from the row, e.g. `Sql("COALESCE(started_at_ms, ?)", (ms,))`."""

    expression: str
    params: tuple = ()


class StoreBase:
    def __init__(self, path: Path | str, durable: bool = True):
        """`durable=False` is for a store thrown away with its cluster: SQLite never waits for the
        disk (a crash of this process still leaves it whole; one of the machine may not), which
        spares the sync of switching a new file to WAL on the way to the controller serving."""
        self._path = str(path)
        self._lock = threading.RLock()
        self._conn = sqlite3.connect(self._path, check_same_thread=False, isolation_level=None)
        self._conn.row_factory = sqlite3.Row
        self._conn.execute("PRAGMA synchronous=NORMAL" if durable else "PRAGMA synchronous=OFF")
        self._conn.execute("PRAGMA journal_mode=WAL")
        self._conn.execute("PRAGMA foreign_keys=ON")
        # A write inside a savepoint (every event) copies each page it dirties to a sub-journal,
        # which SQLite spills to a temporary file past 64 KiB: in a large store a job's creation
        # dirties about that many pages, and the spill's file writes made it up to twice as slow.
        self._conn.execute("PRAGMA temp_store=MEMORY")
        self._requests: OrderedDict[str, pb.LaunchJobRequest] = OrderedDict()
        # Scheduling shapes of unfinished jobs, dropped when a job ends.
        self._demand_templates: dict[str, TaskDemand] = {}
        self._task_demands_by_job: dict[str, list[TaskDemand]] = {}
        self._scheduling_timeouts: dict[str, int] = {}
        self._pending_order = PendingOrder()
        # (resources, device, constraints) -> the one set of those objects jobs of that shape share
        self._shared_shapes: dict[tuple, tuple] = {}
        # Bumped whenever tasks that did not fit before may fit now (an attempt ended, a worker
        # came, went or changed, a task went back to pending, a job was deleted): while it stays
        # the same, a scheduling pass need only try the tasks submitted since the last one.
        self.capacity_epoch = 0
        # Pending reasons as the scheduler last wrote them; a task's entry goes when it changes state.
        self._written_reasons: dict[str, str] = {}
        # worker id -> (registered_at_ms, (capacity, attributes, device)), dropped when a worker leaves
        self._worker_offers: dict[
            str, tuple[int, tuple[Resources, dict[str, AttributeValue], Device | None]]
        ] = {}
        # Healthy workers' capacities for the submit-time feasibility check; dropped when a
        # worker changes state or registers again (its offer may have changed).
        self._idle_capacities: list[WorkerCapacity] | None = None
        # Called with a job's id and new state (None: deleted), on the writing thread and inside
        # its transaction, when the job changes state or is deleted; the controller wakes the
        # callers waiting for that.
        self.on_job_state_change: Callable[[str, int | None], None] = lambda job_id, state: None
        self._event: tuple[str, str] | None = None
        self._event_id: int | None = None
        # History rows of the event being written, inserted together when it ends (or before
        # anything reads the history): one statement per event rather than one per state change.
        self._transition_rows: list[tuple] = []
        # (log_offset, logs_complete) of attempts a heartbeat answer moved on, written with the
        # attempt's end when the same answer ends it, else on their own once it is applied.
        self._log_positions: dict[AttemptKey, tuple[int, int]] = {}
        # Tree kills written so far: a job's end that kills other jobs makes rows read before stale.
        self._tree_kills = 0
        with self._write("migrate", self._path):
            migrate(self._conn)

    # ------------------------------------------------------------ plumbing

    @contextmanager
    def _write(self, event: str, subject: str) -> Iterator[sqlite3.Connection]:
        """One transaction for one event; the transitions it causes carry the event's id."""
        with self._lock:
            self._conn.execute("BEGIN IMMEDIATE")
            self._event, self._event_id = (event, subject), None
            try:
                if event != "migrate":  # a store that cannot migrate stops the daemon: no recovery to test
                    chaos.maybe_fail(chaos.CONTROLLER_STORE_WRITE, sqlite3.OperationalError)
                yield self._conn
                self._flush_transitions()
            except BaseException:
                self._transition_rows.clear()
                self._pending_order.lose()
                self._conn.execute("ROLLBACK")
                raise
            finally:
                self._event = self._event_id = None
            try:
                self._conn.execute("COMMIT")
            except BaseException:
                self._pending_order.lose()
                raise

    @contextmanager
    def _event_within(self, event: str, subject: str) -> Iterator[sqlite3.Connection]:
        """One event of a batch that shares a `_write()` transaction: its transitions carry its own
        event id, and a failure rolls back this event alone (a savepoint) before it propagates.
        One commit for many events is what makes a heartbeat round over thousands of workers cheap."""
        self._flush_transitions()
        self._event, self._event_id = (event, subject), None
        self._conn.execute("SAVEPOINT event")
        try:
            yield self._conn
            self._flush_transitions()
        except BaseException:
            self._transition_rows.clear()
            self._pending_order.lose()
            self._conn.execute("ROLLBACK TO event")
            raise
        finally:
            self._conn.execute("RELEASE event")

    @contextmanager
    def _read(self) -> Iterator[sqlite3.Connection]:
        with self._lock:
            yield self._conn

    def close(self) -> None:
        with self._lock:
            self._conn.close()

    def _cause(self, now_ms: int) -> int:
        """The id of the event being written, recorded the first time a transition needs it."""
        if self._event_id is None:
            assert self._event is not None, "state changes happen inside _write()"
            self._event_id = self._conn.execute(
                "INSERT INTO events(kind, subject, at_ms) VALUES (?,?,?)", (*self._event, now_ms)
            ).lastrowid
        return self._event_id

    def _flush_transitions(self) -> None:
        if self._transition_rows:
            self._conn.executemany(
                "INSERT INTO transitions(kind, entity_id, from_state, to_state, reason, at_ms, event_id)"
                " VALUES (?,?,?,?,?,?,?)",
                self._transition_rows,
            )
            self._transition_rows.clear()

    def _story(self, kind: str, entity_id: str) -> str:
        """An entity's recorded moves, for errors about it."""
        self._flush_transitions()
        story = [
            f"{state_label(kind, r['from_state'])}->{state_label(kind, r['to_state'])} ({r['reason']})"
            for r in self._conn.execute(
                "SELECT * FROM transitions WHERE kind=? AND entity_id=? ORDER BY id", (kind, entity_id)
            )
        ]
        return "; ".join(story) or "none"

    def _set_state(
        self, kind: str, key: str | tuple, old: int | str, new: int | str, reason: str, now_ms: int, **columns
    ) -> None:
        """The one way a state column changes: check the move against the kind's table, record it
        with its reason and cause, and write the row with its companion columns."""
        keys = (key,) if isinstance(key, str) else tuple(key)
        entity_id = "#".join(str(k) for k in keys)
        if kind == "worker" and (old != new or "metadata" in columns):
            self._idle_capacities = None
            self.capacity_epoch += 1
        elif old != new and (
            (kind == "attempt" and new not in ACTIVE_ATTEMPT_STATES) or (kind == "task" and new == pb.TASK_STATE_PENDING)
        ):
            self.capacity_epoch += 1
        if old != new:
            try:
                check_transition(kind, entity_id, old, new)
            except InvalidTransitionError as exc:
                raise InvalidTransitionError(
                    f"{exc}; story: {self._story(kind, entity_id)}", kind, entity_id
                ) from None
            self._transition_rows.append((kind, entity_id, old, new, reason, now_ms, self._cause(now_ms)))
        if kind == "task":
            self._written_reasons.pop(entity_id, None)
            if old != new and old == pb.TASK_STATE_PENDING:
                self._pending_order.left_pending(entity_id)
            elif old != new and new == pb.TASK_STATE_PENDING:
                self._pending_order.lose()  # a retry's place may be anywhere in the order
        if kind == "job" and old != new:
            self.on_job_state_change(entity_id, new)
        table, key_columns = _ENTITIES[kind]
        assignments, params = ["state=?"], [new]
        for column, value in columns.items():
            if isinstance(value, Sql):
                assignments.append(f"{column}={value.expression}")
                params.extend(value.params)
            else:
                assignments.append(f"{column}=?")
                params.append(value)
        where = " AND ".join(f"{c}=?" for c in key_columns)
        self._conn.execute(f"UPDATE {table} SET {', '.join(assignments)} WHERE {where}", (*params, *keys))

    def _scheduling_timeout(self, job_id: str) -> int:
        """The job's scheduling timeout in ms (0: none), cached like its demand template."""
        timeout_ms = self._scheduling_timeouts.get(job_id)
        if timeout_ms is None:
            timeout_ms = self.request_for(job_id).scheduling_timeout.milliseconds
            self._scheduling_timeouts[job_id] = timeout_ms
        return timeout_ms

    def _forget_job_shape(self, job_id: str) -> None:
        self._demand_templates.pop(job_id, None)
        self._task_demands_by_job.pop(job_id, None)
        self._scheduling_timeouts.pop(job_id, None)

    def request_for(self, job_id: str) -> pb.LaunchJobRequest:
        with self._lock:
            request = self._requests.get(job_id)
            if request is None:
                row = self._conn.execute("SELECT request FROM jobs WHERE job_id=?", (job_id,)).fetchone()
                if row is None:
                    raise NotFoundError(f"job {job_id} not found")
                request = pb.LaunchJobRequest.FromString(row["request"])
                self._remember_request(job_id, request)
            return request

    def _remember_request(self, job_id: str, request: pb.LaunchJobRequest) -> None:
        self._requests[job_id] = request
        if len(self._requests) > REQUEST_CACHE_SIZE:
            self._requests.popitem(last=False)

    def _budget(self, job_id: str) -> Budget:
        request = self.request_for(job_id)
        return Budget(
            request.max_retries_failure, request.max_retries_preemption, bool(request.coscheduling.group_by)
        )

    def _kill_job_tree(self, job_id: str, reason: str, now_ms: int, effects: Effects) -> list[str]:
        """Kill a job and its live descendants; the ids of the jobs that changed."""
        states, children = self._job_tree(job_id)
        return self._persist_tree_kill(job_tree.plan_tree_kill([job_id], reason, states, children), now_ms, effects)

    def _job_tree(self, job_id: str) -> tuple[dict[str, int], dict[str, list[str]]]:
        """The states of a job and its descendants, and each one's children (in submission order)."""
        rows = self._conn.execute(
            "SELECT job_id, state, parent_job_id FROM jobs WHERE job_id=? OR (job_id>? AND job_id<?)"
            " ORDER BY submitted_at_ms, job_id",
            (job_id, job_id + "/", job_id + "/\U0010ffff"),
        ).fetchall()
        states = {row["job_id"]: row["state"] for row in rows}
        children: dict[str, list[str]] = {}
        for row in rows:
            if row["parent_job_id"] in states:
                children.setdefault(row["parent_job_id"], []).append(row["job_id"])
        return states, children

    def _persist_tree_kill(self, kills: list[job_tree.JobKill], now_ms: int, effects: Effects) -> list[str]:
        self._tree_kills += bool(kills)
        for kill in kills:
            self._kill_tasks(kill.job_id, kill.reason, now_ms, effects)
            self._set_state(
                "job", kill.job_id, kill.old, pb.JOB_STATE_KILLED, kill.reason, now_ms,
                finished_at_ms=now_ms, error=Sql("CASE WHEN error='' THEN ? ELSE error END", (kill.reason,)),
            )  # fmt: skip
            self._forget_job_shape(kill.job_id)
        return [kill.job_id for kill in kills]

    def _kill_tasks(self, job_id: str, reason: str, now_ms: int, effects: Effects) -> None:
        tasks = [
            task_record(row)
            for row in self._conn.execute(
                f"SELECT * FROM tasks WHERE job_id=? AND state NOT IN ({TERMINAL_TASK_SQL})", (job_id,)
            ).fetchall()
        ]
        if tasks:
            snapshot = self._snapshot(
                [(t.task_id, t.current_attempt) for t in tasks if t.current_attempt >= 0]
            )
            self._persist(reconcile.on_kill(tasks, reason, snapshot), now_ms, effects)

    def _refresh_jobs(self, job_ids: list[str], now_ms: int, effects: Effects) -> None:
        """`_refresh_job` of each job, in order, from rows read for all of them in two queries per
        chunk. A job's end may kill its children's tree, so after any such kill the rest are read
        again one by one."""
        kills_before = self._tree_kills
        rows: dict[str, sqlite3.Row] = {}
        tasks: dict[str, list[sqlite3.Row]] = {}
        for chunk in chunks(job_ids):
            marks = ",".join("?" * len(chunk))
            rows.update((row["job_id"], row) for row in self._conn.execute(
                f"SELECT job_id, state, started_at_ms FROM jobs WHERE job_id IN ({marks})", chunk
            ))  # fmt: skip
            for task in self._conn.execute(
                f"SELECT job_id, task_id, state, exit_code, error, started_at_ms FROM tasks"
                f" WHERE job_id IN ({marks}) ORDER BY job_id, task_index",
                chunk,
            ):
                tasks.setdefault(task["job_id"], []).append(task)
        for job_id in job_ids:
            if self._tree_kills == kills_before:
                self._refresh_job(job_id, now_ms, effects, (rows[job_id], tasks.get(job_id, [])))
            else:
                self._refresh_job(job_id, now_ms, effects)

    def _refresh_job(
        self,
        job_id: str,
        now_ms: int,
        effects: Effects,
        rows: tuple[sqlite3.Row, list[sqlite3.Row]] | None = None,
    ) -> None:
        """Derive the job's state from its tasks (their `rows` when already read) and persist it
        with what its end implies."""
        if rows is None:
            row = self._conn.execute("SELECT state, started_at_ms FROM jobs WHERE job_id=?", (job_id,)).fetchone()
            task_rows = self._conn.execute(
                "SELECT task_id, state, exit_code, error, started_at_ms FROM tasks WHERE job_id=? ORDER BY task_index",
                (job_id,),
            )
        else:
            row, task_rows = rows
        if row["state"] in TERMINAL_JOB_STATES:
            return
        request = self.request_for(job_id)
        job = job_tree.JobRecord(
            job_id,
            row["state"],
            row["started_at_ms"],
            0 if request.coscheduling.group_by else request.max_task_failures,
        )
        tasks = [
            job_tree.TaskOutcomeRecord(t["task_id"], t["state"], t["exit_code"], t["error"], t["started_at_ms"])
            for t in task_rows
        ]
        update = job_tree.decide_job_update(job, tasks, now_ms)
        if update is not None:
            self._persist_job_update(update, now_ms, effects)

    def _persist_job_update(self, update: job_tree.JobUpdate, now_ms: int, effects: Effects) -> None:
        if not update.finished:
            self._set_state(
                "job", update.job_id, update.old, update.new, update.reason, now_ms, started_at_ms=update.started_at_ms
            )
            return
        self._set_state(
            "job", update.job_id, update.old, update.new, update.reason, now_ms,
            started_at_ms=update.started_at_ms, finished_at_ms=now_ms, error=update.error, exit_code=update.exit_code,
        )  # fmt: skip
        self._forget_job_shape(update.job_id)
        if update.kill_tasks_reason:
            self._kill_tasks(update.job_id, update.kill_tasks_reason, now_ms, effects)
        states, children = self._job_tree(update.job_id)
        kills = job_tree.plan_tree_kill(children.get(update.job_id, []), update.kill_children_reason, states, children)
        self._persist_tree_kill(kills, now_ms, effects)

    # ------------------------------------------------------------ applying decisions

    def _rows(self, keys: Iterable[AttemptKey]) -> tuple[dict[AttemptKey, sqlite3.Row], dict[str, sqlite3.Row]]:
        """The attempts rows behind `keys` and their tasks' rows: two queries per chunk of tasks,
        however many attempts a heartbeat answer reports."""
        wanted = set(keys)
        attempts: dict[AttemptKey, sqlite3.Row] = {}
        tasks: dict[str, sqlite3.Row] = {}
        for chunk in chunks(list(dict.fromkeys(task_id for task_id, _ in wanted))):
            marks = ",".join("?" * len(chunk))
            tasks.update((row["task_id"], row) for row in self._conn.execute(
                f"SELECT * FROM tasks WHERE task_id IN ({marks})", chunk
            ))  # fmt: skip
            # By task: SQLite's index serves `task_id IN`, not a list of (task_id, attempt_id) pairs.
            for row in self._conn.execute(f"SELECT * FROM attempts WHERE task_id IN ({marks})", chunk):
                if (key := (row["task_id"], row["attempt_id"])) in wanted:
                    attempts[key] = row
        return attempts, tasks

    def _snapshot(
        self,
        keys: Iterable[AttemptKey],
        rows: tuple[dict[AttemptKey, sqlite3.Row], dict[str, sqlite3.Row]] | None = None,
    ) -> Snapshot:
        """The tasks and attempts behind `keys` (their `rows` when already read), with their jobs'
        budgets; for gang jobs, every member and its current attempt, so a restart can reach them."""
        db = self._conn
        attempt_rows, task_rows = rows if rows is not None else self._rows(keys)
        attempts = {key: attempt_record(row) for key, row in attempt_rows.items()}
        tasks = {task_id: task_record(row) for task_id, row in task_rows.items()}

        def load_attempt(key: AttemptKey) -> None:
            if key not in attempts:
                row = db.execute("SELECT * FROM attempts WHERE task_id=? AND attempt_id=?", key).fetchone()
                if row is not None:
                    attempts[key] = attempt_record(row)

        budgets = {job_id: self._budget(job_id) for job_id in {t.job_id for t in tasks.values()}}
        gang_tasks: dict[str, list[str]] = {}
        for job_id in [j for j, b in budgets.items() if b.gang]:
            rows = db.execute("SELECT * FROM tasks WHERE job_id=? ORDER BY task_index", (job_id,)).fetchall()
            gang_tasks[job_id] = [row["task_id"] for row in rows]
            for row in rows:
                tasks.setdefault(row["task_id"], task_record(row))
                if row["current_attempt"] >= 0:
                    load_attempt((row["task_id"], row["current_attempt"]))
        return Snapshot(tasks, attempts, budgets, gang_tasks)

    def _persist(self, decisions: Decisions, now_ms: int, effects: Effects) -> None:
        """Write reconcile's decisions, in order, through the mutation path; then derive the
        touched jobs' states."""
        db = self._conn
        for key in decisions.logs_complete:
            db.execute("UPDATE attempts SET logs_complete=1 WHERE task_id=? AND attempt_id=?", key)
        for change in fold_start_times(decisions.changes):
            if isinstance(change, AttemptChange):
                self._persist_attempt(change, now_ms)
            elif isinstance(change, TaskChange):
                self._persist_task(change, now_ms)
            else:
                self._persist_detail(change)
        for worker_id, task_id, attempt_id in decisions.kills:
            effects.kills.append((worker_id, task_id, attempt_id))
            effects.heartbeat_workers.add(worker_id)
        if decisions.touched_jobs:
            self._refresh_jobs(sorted(decisions.touched_jobs), now_ms, effects)
            effects.wake_scheduler = True

    def _persist_attempt(self, change: AttemptChange, now_ms: int) -> None:
        key = (change.task_id, change.attempt_id)
        if change.ended:
            # An attempt the worker never received has no logs to wait for.
            columns: dict[str, object] = {"logs_complete": Sql("MAX(logs_complete, 1 - delivered)")}
            if key in self._log_positions:
                log_offset, logs_complete = self._log_positions.pop(key)
                columns = {"log_offset": log_offset, "logs_complete": Sql("MAX(?, 1 - delivered)", (logs_complete,))}
            if change.started_at_ms:
                columns["started_at_ms"] = Sql("COALESCE(started_at_ms, ?)", (change.started_at_ms,))
            self._set_state(
                "attempt", key, change.old, change.new, change.reason, now_ms,
                exit_code=change.exit_code, error=change.error, finished_at_ms=now_ms, **columns,
            )  # fmt: skip
        else:
            started = Sql("COALESCE(started_at_ms, ?)", (change.started_at_ms or now_ms,))
            self._set_state(
                "attempt", key, change.old, change.new, change.reason, now_ms, started_at_ms=started
            )

    def _persist_task(self, change: TaskChange, now_ms: int) -> None:
        columns: dict[str, object] = {}
        if change.failure_count is not None:
            # The end of the task's current attempt: retried, or the task's own end.
            columns = {
                "failure_count": change.failure_count,
                "preemption_count": change.preemption_count,
                "exit_code": change.exit_code,
                "error": change.error,
                "finished_at_ms": now_ms if change.finished else None,
                "pending_reason": change.pending_reason,
                "pending_since_ms": now_ms,
            }
        elif change.new == pb.TASK_STATE_PENDING:
            columns = {"pending_reason": change.pending_reason, "pending_since_ms": now_ms}
        elif change.finished:
            columns = {"error": change.error, "finished_at_ms": now_ms, "pending_reason": ""}
        else:
            columns = {"started_at_ms": Sql("COALESCE(started_at_ms, ?)", (change.started_at_ms or now_ms,))}
        if change.started_at_ms and "started_at_ms" not in columns:  # a report's start, folded into its end
            columns["started_at_ms"] = Sql("COALESCE(started_at_ms, ?)", (change.started_at_ms,))
        self._set_state("task", change.task_id, change.old, change.new, change.reason, now_ms, **columns)

    def _persist_detail(self, detail: TaskDetail) -> None:
        db = self._conn
        if detail.ports is not None:
            db.execute(
                "UPDATE tasks SET ports=? WHERE task_id=?", (json.dumps(dict(detail.ports)), detail.task_id)
            )
        if detail.started_at_ms:
            db.execute(
                "UPDATE attempts SET started_at_ms=COALESCE(started_at_ms, ?) WHERE task_id=? AND attempt_id=?",
                (detail.started_at_ms, detail.task_id, detail.attempt_id),
            )
            db.execute(
                "UPDATE tasks SET started_at_ms=COALESCE(started_at_ms, ?) WHERE task_id=?",
                (detail.started_at_ms, detail.task_id),
            )
        if detail.result:
            db.execute("UPDATE tasks SET result=? WHERE task_id=?", (detail.result, detail.task_id))


def fold_start_times(
    changes: Sequence[AttemptChange | TaskChange | TaskDetail],
) -> list[AttemptChange | TaskChange | TaskDetail]:
    """The changes with a finished attempt's reported start time moved from its `TaskDetail` into
    the attempt's and the task's end changes that follow it, so that each row is written once.
    Both are written as COALESCE(started_at_ms, ?) either way, so the rows end up the same."""
    folded = list(changes)
    for i, detail in enumerate(folded):
        if not isinstance(detail, TaskDetail) or not detail.started_at_ms:
            continue
        ends = folded[i + 1 : i + 3]
        if (
            len(ends) == 2
            and isinstance(ends[0], AttemptChange)
            and ends[0].ended
            and (ends[0].task_id, ends[0].attempt_id) == (detail.task_id, detail.attempt_id)
            and isinstance(ends[1], TaskChange)
            and ends[1].task_id == detail.task_id
            and not ends[1].started_at_ms
        ):
            folded[i + 1 : i + 3] = [dataclasses.replace(end, started_at_ms=detail.started_at_ms) for end in ends]
            folded[i] = dataclasses.replace(detail, started_at_ms=0)
    return folded


def chunks(ids: list[str]) -> list[list[str]]:
    return [ids[i : i + IN_CHUNK] for i in range(0, len(ids), IN_CHUNK)]


def task_record(row: sqlite3.Row) -> TaskRecord:
    return TaskRecord(
        row["task_id"],
        row["job_id"],
        row["state"],
        row["current_attempt"],
        row["worker_id"] or "",
        row["failure_count"],
        row["preemption_count"],
    )


def attempt_record(row: sqlite3.Row) -> AttemptRecord:
    return AttemptRecord(
        row["task_id"], row["attempt_id"], row["worker_id"], row["state"], bool(row["delivered"])
    )


def worker_metadata(worker: sqlite3.Row) -> pb.WorkerMetadata:
    return pb.WorkerMetadata.FromString(worker["metadata"])
