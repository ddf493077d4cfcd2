"""Store reads (jobs, tasks, workers, logs, endpoints) and the slice records the autoscaler keeps.

Reads render rows through `render.py` under the store's lock; slice writes go through the
mutation path like every other state change.
"""

from __future__ import annotations

import json
import logging
import sqlite3
import threading
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from iris.cluster.controller import render
from iris.cluster.controller.store_positions import JUMP_ORDERS, count_in_blocks, seek_offset, seek_state_order
from iris.cluster.controller.store_base import (
    ACTIVE_SQL,
    TERMINAL_JOB_SQL,
    JobExistsError,
    NotFoundError,
    StoreBase,
)
from iris.cluster.controller.transitions import (
    SliceState,
    state_label,
)
from iris.cluster.types import (
    TERMINAL_JOB_STATES,
    TERMINAL_TASK_STATES,
)
from iris.rpc import cluster_pb2 as pb

logger = logging.getLogger(__name__)


# Each order's sort key, (column, descending) from most to least significant. Each is served by an
# index, so pages need no sort, and a page after a given row seeks to it instead of skipping rows.
JOB_ORDER_KEYS: dict[int, tuple[tuple[str, bool], ...]] = {
    pb.JOB_ORDER_NEWEST: (("submitted_at_ms", True), ("job_id", False)),
    pb.JOB_ORDER_OLDEST: (("submitted_at_ms", False), ("job_id", True)),
    pb.JOB_ORDER_NAME: (("job_id", False),),
    pb.JOB_ORDER_NAME_DESC: (("job_id", True),),
    pb.JOB_ORDER_STATE: (("state", False), ("submitted_at_ms", True), ("job_id", False)),
}
JOB_ORDER_SQL: dict[int, str] = {
    order: ", ".join(f"{column} {'DESC' if descending else 'ASC'}" for column, descending in key)
    for order, key in JOB_ORDER_KEYS.items()
}
# Each order backwards: the same index walked from its other end.
JOB_ORDER_BACKWARDS_SQL: dict[int, str] = {
    order: ", ".join(f"{column} {'ASC' if descending else 'DESC'}" for column, descending in key)
    for order, key in JOB_ORDER_KEYS.items()
}
_KEY_TYPES = {"submitted_at_ms": int, "state": int, "job_id": str}
# A name prefix as a range of the primary key; the same range written so that SQLite cannot
# use the primary key for it (`+job_id`) and walks the listing order's index instead.
PREFIX_SQL = "job_id >= ? AND job_id < ?"
PREFIX_WALK_SQL = "+job_id >= ? AND +job_id < ?"
# Selections whose job count ListJobs keeps between job changes.
JOB_COUNTS_KEPT = 256


def job_order_key_types(order: int) -> tuple[type, ...]:
    return tuple(_KEY_TYPES[column] for column, _ in JOB_ORDER_KEYS[order])


def job_order_key(order: int, job: pb.JobStatus) -> tuple[int | str, ...]:
    """The sort key of a listed job, as a page token carries it."""
    values = {"submitted_at_ms": job.submitted_at.epoch_ms, "state": job.state, "job_id": job.job_id}
    return tuple(values[column] for column, _ in JOB_ORDER_KEYS[order])


def _after_sql(order: int, after: tuple[int | str, ...]) -> tuple[str, list[object]]:
    """Rows that come after the one whose sort key is `after`. The first column's bound alone
    lets SQLite seek in the order's index; the disjunction then settles ties."""
    key = JOB_ORDER_KEYS[order]
    disjuncts, params = [], []
    for i, (column, descending) in enumerate(key):
        equal = [f"{c} = ?" for c, _ in key[:i]]
        disjuncts.append("(" + " AND ".join([*equal, f"{column} {'<' if descending else '>'} ?"]) + ")")
        params += [*after[:i], after[i]]
    first, descending = key[0]
    return f"{first} {'<=' if descending else '>='} ? AND ({' OR '.join(disjuncts)})", [after[0], *params]


@dataclass(frozen=True)
class JobFilters:
    """ListJobs' narrower selections, beside its state and name-prefix filters."""

    name_contains: str = ""
    roots_only: bool = False
    parent_job_id: str = ""
    order: int = pb.JOB_ORDER_NEWEST

    def sql(self) -> tuple[list[str], list[object]]:
        where: list[str] = []
        params: list[object] = []
        if self.name_contains:
            # instr() rather than LIKE, so that % and _ in the user's text are plain characters.
            where.append("instr(lower(job_id), ?) > 0")
            params.append(self.name_contains.lower())
        if self.roots_only:
            where.append("parent_job_id IS NULL")
        if self.parent_job_id:
            where.append("parent_job_id = ?")
            params.append(self.parent_job_id)
        return where, params


class StoreReads(StoreBase):
    def __init__(self, path: Path | str, durable: bool = True):
        super().__init__(path, durable)
        # ListJobs and GetJobStatus read on a connection of their own, in snapshots (WAL lets them
        # read while the store's connection writes), so that they never wait for the store's lock
        # while a scheduling pass or a heartbeat round holds it for a long read or write.
        self._committed_lock = threading.Lock()
        self._committed_conn = sqlite3.connect(self._path, check_same_thread=False, isolation_level=None)
        self._committed_conn.row_factory = sqlite3.Row
        self._committed_conn.execute("PRAGMA query_only=ON")
        # Selection -> (job_changes.n, count): counting a million rows costs more than a page.
        self._job_counts: dict[tuple[str, tuple], tuple[int, int]] = {}

    @contextmanager
    def _committed(self) -> Iterator[sqlite3.Connection]:
        """One read transaction: what had been committed when it began, and nothing written since."""
        with self._committed_lock:
            self._committed_conn.execute("BEGIN")
            try:
                yield self._committed_conn
            finally:
                self._committed_conn.execute("COMMIT")

    def close(self) -> None:
        with self._committed_lock:
            self._committed_conn.close()
        super().close()

    # ------------------------------------------------------------ jobs

    def job_for_request(self, request_id: str) -> str | None:
        """The job a LaunchJob with this request id created, if it still exists."""
        with self._read() as db:
            row = db.execute("SELECT job_id FROM jobs WHERE request_id=?", (request_id,)).fetchone()
        return row["job_id"] if row else None

    def job_exists(self, job_id: str) -> bool:
        with self._read() as db:
            return db.execute("SELECT 1 FROM jobs WHERE job_id=?", (job_id,)).fetchone() is not None

    def job_owner(self, job_id: str) -> str:
        """Who launched the job; empty for a job launched while auth was off."""
        with self._read() as db:
            row = db.execute("SELECT owner FROM jobs WHERE job_id=?", (job_id,)).fetchone()
        if row is None:
            raise NotFoundError(f"job {job_id} not found")
        return row["owner"]

    # ------------------------------------------------------------ slices

    def record_slice(
        self,
        slice_id: str,
        scale_group: str,
        zone: str,
        reason: str,
        now_ms: int,
        labels: dict[str, str] | None = None,
        created_at_ms: int | None = None,
    ) -> None:
        """Remember a slice the autoscaler just asked for, or one it found already running."""
        with self._write("record_slice", slice_id) as db:
            db.execute(
                "INSERT INTO slices(slice_id, scale_group, zone, state, created_at_ms, updated_at_ms, labels)"
                " VALUES (?,?,?,?,?,?,?)",
                (
                    slice_id, scale_group, zone, SliceState.UNSPECIFIED, created_at_ms or now_ms, now_ms,
                    json.dumps(labels or {}),
                ),
            )  # fmt: skip
            self._set_state("slice", slice_id, SliceState.UNSPECIFIED, SliceState.CREATING, reason, now_ms)

    def update_slice(
        self,
        slice_id: str,
        state: SliceState,
        reason: str,
        now_ms: int,
        error: str = "",
        worker_ids: list[str] | None = None,
    ) -> None:
        with self._write("update_slice", slice_id) as db:
            row = db.execute("SELECT state, worker_ids FROM slices WHERE slice_id=?", (slice_id,)).fetchone()
            if row is None:
                raise NotFoundError(f"slice {slice_id} not found")
            columns: dict[str, object] = {"updated_at_ms": now_ms}
            if error:
                columns["error"] = error
            if worker_ids is not None:
                columns["worker_ids"] = json.dumps(worker_ids)
            if state == SliceState.READY and row["state"] != SliceState.READY:
                columns["ready_at_ms"] = now_ms
            if state != SliceState.READY:
                columns["idle_since_ms"] = None
            self._set_state("slice", slice_id, row["state"], state, reason, now_ms, **columns)

    def slices(self, include_deleted: bool = False) -> list[sqlite3.Row]:
        with self._read() as db:
            clause = "" if include_deleted else f"WHERE state != '{SliceState.DELETED}'"
            return db.execute(f"SELECT * FROM slices {clause} ORDER BY created_at_ms, slice_id").fetchall()

    def slice_members(self) -> dict[str, list[sqlite3.Row]]:
        """Each slice's workers, joined on the slice id they registered with: worker_id, state
        and whether it runs anything (`busy`)."""
        members: dict[str, list[sqlite3.Row]] = {}
        with self._read() as db:
            for row in db.execute(
                f"SELECT w.slice_id, w.worker_id, w.state, EXISTS(SELECT 1 FROM attempts a "
                f"WHERE a.worker_id = w.worker_id AND a.state IN ({ACTIVE_SQL})) AS busy "
                f"FROM workers w WHERE w.slice_id != '' ORDER BY w.worker_id"
            ):
                members.setdefault(row["slice_id"], []).append(row)
        return members

    def update_slice_bookkeeping(self, slice_id: str, **columns: int | None) -> None:
        """The autoscaler's notes on a slice that are not state: since when it has been idle
        (`idle_since_ms`), and since when it has waited for its workers (`ready_at_ms`)."""
        assert set(columns) <= {"idle_since_ms", "ready_at_ms"}, columns
        assignments = ", ".join(f"{c}=?" for c in columns)
        with self._write("slice_bookkeeping", slice_id) as db:
            db.execute(f"UPDATE slices SET {assignments} WHERE slice_id=?", (*columns.values(), slice_id))

    def slice_history(self, slice_id: str) -> list[pb.StateTransition]:
        with self._read() as db:
            return render.history(db, "slice", slice_id)

    def load_scale_groups(self) -> dict[str, sqlite3.Row]:
        with self._read() as db:
            return {row["name"]: row for row in db.execute("SELECT * FROM scale_groups")}

    def save_scale_group(self, name: str, **bookkeeping) -> None:
        """Persist a scale group's autoscaler bookkeeping (backoff, blocked zones, demand since)."""
        columns = ", ".join(bookkeeping)
        placeholders = ", ".join("?" for _ in bookkeeping)
        updates = ", ".join(f"{c}=excluded.{c}" for c in bookkeeping)
        with self._write("scale_group", name) as db:
            db.execute(
                f"INSERT INTO scale_groups(name, {columns}) VALUES (?, {placeholders}) "
                f"ON CONFLICT(name) DO UPDATE SET {updates}",
                (name, *bookkeeping.values()),
            )

    # ------------------------------------------------------------ reads

    def job_status(self, job_id: str, include_tasks: bool = False) -> pb.JobStatus:
        """The job's status once any write in progress has finished: a caller woken by a job's
        change (inside the write that makes it) reads the change."""
        with self._read() as db:
            job = db.execute("SELECT * FROM jobs WHERE job_id=?", (job_id,)).fetchone()
            if job is None:
                raise NotFoundError(f"job {job_id} not found")
            return render.job_status(db, job, self.request_for(job_id), include_tasks)

    def committed_job_status(self, job_id: str, include_tasks: bool = False) -> pb.JobStatus:
        """The job's status as last committed, without waiting for a write in progress."""
        with self._committed() as db:
            job = db.execute("SELECT * FROM jobs WHERE job_id=?", (job_id,)).fetchone()
            if job is None:
                raise NotFoundError(f"job {job_id} not found")
            return render.job_status(db, job, pb.LaunchJobRequest.FromString(job["request"]), include_tasks)

    def task_status(self, task_id: str) -> pb.TaskStatus:
        with self._read() as db:
            task = db.execute("SELECT * FROM tasks WHERE task_id=?", (task_id,)).fetchone()
            if task is None:
                raise NotFoundError(f"task {task_id} not found")
            return render.task_status(db, task)

    def list_tasks(self, job_id: str) -> list[pb.TaskStatus]:
        with self._read() as db:
            if db.execute("SELECT 1 FROM jobs WHERE job_id=?", (job_id,)).fetchone() is None:
                raise NotFoundError(f"job {job_id} not found")
            rows = db.execute("SELECT * FROM tasks WHERE job_id=? ORDER BY task_index", (job_id,)).fetchall()
            return [render.task_status(db, t) for t in rows]

    def list_jobs(
        self,
        states: Iterable[int],
        name_prefix: str,
        limit: int,
        offset: int,
        filters: JobFilters | None = None,
        after: tuple[int | str, ...] = (),
    ) -> tuple[list[pb.JobStatus], int]:
        """A page of jobs and how many the selection holds, as last committed. With `after` (a sort
        key from `job_order_key`), the page starts just after that row and `offset` is not skipped."""
        where, params = [], []
        state_list = list(states)
        if state_list:
            where.append(f"state IN ({','.join('?' * len(state_list))})")
            params += state_list
        prefix_at = None
        if name_prefix:
            prefix_at = len(where)
            where.append(PREFIX_SQL)
            params += [name_prefix, name_prefix + "\U0010ffff"]
        filters = filters or JobFilters()
        extra_where, extra_params = filters.sql()
        where += extra_where
        params += extra_params
        clause = f"WHERE {' AND '.join(where)}" if where else ""
        page_where, page_params = list(where), list(params)
        if after:
            after_sql, after_params = _after_sql(filters.order, after)
            page_where.append(after_sql)
            page_params += after_params
            offset = 0
        # A selection by state and root flag alone is counted, and in a time order its offsets
        # found, from the counts the store's triggers keep.
        by_blocks = not name_prefix and not filters.name_contains and not filters.parent_job_id
        with self._committed() as db:
            if not by_blocks:
                total = self._count_jobs(db, clause, params)
            elif filters.roots_only:
                total = count_in_blocks(db, state_list, roots_only=True)
            else:
                total = self._count_in_states(db, state_list)
            if by_blocks and 0 < offset < total and filters.order in JUMP_ORDERS:
                rows = self._jump_rows(db, filters, state_list, page_where, page_params, limit, offset)
            else:
                rows = self._walk_rows(db, filters.order, page_where, page_params, prefix_at, total, limit, offset)
            ids = [r["job_id"] for r in rows]
            # One query for the page's task counts, and each request from its row, instead of two
            # queries per listed job. (Not the store's request cache: that takes the store's lock.)
            task_counts = render.task_counts_by_job(db, ids)
            jobs = [
                render.job_status(db, r, pb.LaunchJobRequest.FromString(r["request"]), False, task_counts[r["job_id"]])
                for r in rows
            ]
            _count_children(db, jobs)
            return jobs, total

    def _jump_rows(
        self,
        db: sqlite3.Connection,
        filters: JobFilters,
        states: list[int],
        where: list[str],
        params: list[object],
        limit: int,
        offset: int,
    ) -> list[sqlite3.Row]:
        """The page `offset` rows into a selection by state and root flag, in a time order or the
        state order: from the edge of the time block that holds its first row, skipping only that
        block's rows before it. In the state order a page that runs past its first state's jobs
        continues from the start of the states after it."""
        order = filters.order
        if order != pb.JOB_ORDER_STATE:
            seek = seek_offset(db, order, states, filters.roots_only, offset)
            if seek is None:
                return []
            return self._rows_from(db, order, [*where, seek.condition], [*params, seek.bound], limit, seek.skip)
        found = seek_state_order(db, states, filters.roots_only, offset)
        if found is None:
            return []
        state, seek = found
        rows = self._rows_from(
            db, order, [*where, "state = ?", seek.condition], [*params, state, seek.bound], limit, seek.skip
        )
        if len(rows) < limit:
            rows += self._rows_from(db, order, [*where, "state > ?"], [*params, state], limit - len(rows), 0)
        return rows

    def _rows_from(
        self, db: sqlite3.Connection, order: int, where: list[str], params: list[object], limit: int, skip: int
    ) -> list[sqlite3.Row]:
        return db.execute(self._page_sql(db, order, False, where, None, 0, 0), [*params, limit, skip]).fetchall()

    def _walk_rows(
        self,
        db: sqlite3.Connection,
        order: int,
        where: list[str],
        params: list[object],
        prefix_at: int | None,
        total: int,
        limit: int,
        offset: int,
    ) -> list[sqlite3.Row]:
        """The page `offset` rows into the selection, walking the order's index to it. A page past
        the middle of the selection is fewer rows from its other end, so it is read walking the
        order backwards: no page skips more than half of the selection."""
        backwards = total // 2 < offset < total
        if backwards:
            end = total - offset  # where the page ends, counted from the other end
            offset = max(0, end - limit)
            limit = end - offset
        page_sql = self._page_sql(db, order, backwards, where, prefix_at, total, offset + limit)
        rows = db.execute(page_sql, [*params, limit, offset]).fetchall()
        if backwards:
            rows.reverse()
        return rows

    def _page_sql(
        self,
        db: sqlite3.Connection,
        order: int,
        backwards: bool,
        where: list[str],
        prefix_at: int | None,
        total: int,
        rows_needed: int,
    ) -> str:
        """The SELECT of one page (parameters: the conditions', then LIMIT and OFFSET), in the order
        or, `backwards`, in its reverse. The page's keys come from an index that holds them, so the
        rows an offset skips are index entries only, never table rows; then the page's rows are read
        by key. With a name prefix (`where[prefix_at]`) and an order not led by the name, the keys
        come from the cheaper of two plans: walking the order's index past the jobs without the
        prefix, about rows_needed * all / total index entries, or sorting the keys of the `total`
        jobs with it."""
        order_sql = (JOB_ORDER_BACKWARDS_SQL if backwards else JOB_ORDER_SQL)[order]
        if prefix_at is not None and JOB_ORDER_KEYS[order][0][0] != "job_id":
            if total * total >= rows_needed * self._count_in_states(db, []):
                where = [*where]
                where[prefix_at] = PREFIX_WALK_SQL
        clause = f"WHERE {' AND '.join(where)}" if where else ""
        return (
            f"SELECT * FROM jobs WHERE job_id IN (SELECT job_id FROM jobs {clause}"
            f" ORDER BY {order_sql} LIMIT ? OFFSET ?) ORDER BY {order_sql}"
        )

    def _count_jobs(self, db: sqlite3.Connection, clause: str, params: list[object]) -> int:
        """The selection's size, counted again only after a job was created, deleted or moved (as
        the snapshot `db` sees it: the change counter is read in the same snapshot as the count)."""
        key = (clause, tuple(params))
        changes = db.execute("SELECT n FROM job_changes").fetchone()[0]
        cached = self._job_counts.get(key)
        if cached is not None and cached[0] == changes:
            return cached[1]
        total = db.execute(f"SELECT COUNT(*) FROM jobs {clause}", params).fetchone()[0]
        if len(self._job_counts) >= JOB_COUNTS_KEPT:
            self._job_counts.clear()
        self._job_counts[key] = (changes, total)
        return total

    def job_request(self, job_id: str) -> pb.LaunchJobRequest:
        """The job's LaunchJobRequest as stored (a copy the caller may change)."""
        request = pb.LaunchJobRequest()
        request.CopyFrom(self.request_for(job_id))
        return request

    def _count_in_states(self, db: sqlite3.Connection, states: list[int]) -> int:
        """Jobs in any of `states` (all jobs when empty), from the counts the store's triggers keep."""
        if not states:
            return db.execute("SELECT COALESCE(SUM(n), 0) FROM job_state_counts").fetchone()[0]
        return db.execute(
            f"SELECT COALESCE(SUM(n), 0) FROM job_state_counts WHERE state IN ({','.join('?' * len(states))})", states
        ).fetchone()[0]

    def count_by_state(self) -> tuple[dict[int, int], dict[int, int]]:
        """(jobs per state, workers per state), for /metrics."""
        with self._read() as db:
            jobs = {r[0]: r[1] for r in db.execute("SELECT state, n FROM job_state_counts WHERE n > 0")}
            workers = {r[0]: r[1] for r in db.execute("SELECT state, COUNT(*) FROM workers GROUP BY state")}
        return jobs, workers

    def list_workers(self) -> list[pb.WorkerInfo]:
        with self._read() as db:
            return render.worker_infos(db)

    # ------------------------------------------------------------ logs

    def read_logs(
        self, entity_id: str, cursor: int, max_lines: int, tail_lines: int | None = None, since_ms: int | None = None
    ) -> tuple[list[pb.TaskLogLine], int, bool]:
        """Lines after `cursor` for a job (all its tasks) or one task, and whether more can arrive.

        `tail_lines` keeps only the last N of those lines, `since_ms` only those written at or after
        that time: either moves the start forward (the later wins), so a long log is never read
        whole to show its end."""
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
            start = _log_start(db, column, entity_id, cursor, tail_lines, since_ms)
            rows = db.execute(
                f"SELECT * FROM task_logs WHERE {column}=? AND id>? ORDER BY id LIMIT ?",
                (entity_id, start, max_lines),
            ).fetchall()
        next_cursor = rows[-1]["id"] if rows else start
        finished = terminal and open_attempts == 0 and len(rows) < max_lines
        return [render.log_line(r) for r in rows], next_cursor, finished

    # ------------------------------------------------------------ endpoints

    def register_endpoint(
        self, endpoint_id: str, name: str, address: str, job_id: str, metadata: dict[str, str], now_ms: int
    ) -> None:
        with self._write("register_endpoint", endpoint_id) as db:
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
        with self._write("unregister_endpoint", endpoint_id) as db:
            if db.execute("DELETE FROM endpoints WHERE endpoint_id=?", (endpoint_id,)).rowcount == 0:
                raise NotFoundError(f"endpoint {endpoint_id} not found")

    def list_endpoints(self, prefix: str) -> list[pb.Endpoint]:
        """Endpoints of jobs that have not finished: a task may register one before its job shows
        RUNNING, and a finished job's endpoints point at nothing."""
        with self._read() as db:
            rows = db.execute(
                f"SELECT e.* FROM endpoints e JOIN jobs j ON j.job_id=e.job_id "
                f"WHERE j.state NOT IN ({TERMINAL_JOB_SQL}) AND e.name >= ? AND e.name < ? ORDER BY e.name",
                (prefix, prefix + "\U0010ffff"),
            ).fetchall()
        return [render.endpoint(r) for r in rows]


def _count_children(db: sqlite3.Connection, jobs: list[pb.JobStatus]) -> None:
    """Each listed job's number of child jobs, in one query."""
    ids = [job.job_id for job in jobs]
    if not ids:
        return
    children = dict(
        db.execute(
            f"SELECT parent_job_id, COUNT(*) FROM jobs WHERE parent_job_id IN ({','.join('?' * len(ids))})"
            " GROUP BY parent_job_id",
            ids,
        ).fetchall()
    )
    for job in jobs:
        job.num_children = children.get(job.job_id, 0)


def _log_start(
    db: sqlite3.Connection, column: str, entity_id: str, cursor: int, tail_lines: int | None, since_ms: int | None
) -> int:
    """The cursor after which the lines `tail_lines` and `since_ms` ask for begin."""
    start = cursor
    if tail_lines is not None:
        # The line just before the last N: what follows it is exactly the last N.
        before = db.execute(
            f"SELECT id FROM task_logs WHERE {column}=? AND id>? ORDER BY id DESC LIMIT 1 OFFSET ?",
            (entity_id, cursor, tail_lines),
        ).fetchone()
        if before is not None:
            start = max(start, before["id"])
    if since_ms is not None:
        first, last = db.execute(
            f"SELECT MIN(CASE WHEN ts_ms>=? THEN id END), MAX(id) FROM task_logs WHERE {column}=? AND id>?",
            (since_ms, entity_id, cursor),
        ).fetchone()
        if first is not None:
            start = max(start, first - 1)
        elif last is not None:
            start = max(start, last)  # nothing that recent: start after the end
    return start
