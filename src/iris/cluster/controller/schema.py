"""The controller's SQLite schema as numbered migrations.

A migration is SQL (statements separated by ";") or, where rows must be rewritten from data
SQL cannot read (a serialized proto), a function of the connection. `migrate()` applies the ones a
database has not seen yet, in order, inside the caller's transaction, and records the number.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable

from iris.cluster.types import ATTR_SLICE_ID, attribute_from_proto
from iris.rpc import cluster_pb2 as pb


def _slice_membership(conn: sqlite3.Connection) -> None:
    """5: workers join their slice on the slice id they registered with (a column, not an
    attribute read back from metadata); transitions carry the id of the event that caused them;
    the autoscaler's bookkeeping moves into the store so a restarted controller continues it."""
    conn.execute("ALTER TABLE workers ADD COLUMN slice_id TEXT NOT NULL DEFAULT ''")
    for row in conn.execute("SELECT worker_id, metadata FROM workers").fetchall():
        attributes = pb.WorkerMetadata.FromString(row[1]).attributes
        if ATTR_SLICE_ID in attributes:
            slice_id = str(attribute_from_proto(attributes[ATTR_SLICE_ID]))
            conn.execute("UPDATE workers SET slice_id=? WHERE worker_id=?", (slice_id, row[0]))
    for statement in (
        "CREATE INDEX workers_slice ON workers(slice_id, state)",
        "CREATE TABLE events (id INTEGER PRIMARY KEY AUTOINCREMENT, kind TEXT NOT NULL,"
        " subject TEXT NOT NULL, at_ms INTEGER NOT NULL)",
        "ALTER TABLE transitions ADD COLUMN event_id INTEGER NOT NULL DEFAULT 0",
        "ALTER TABLE slices ADD COLUMN ready_at_ms INTEGER",
        "ALTER TABLE slices ADD COLUMN idle_since_ms INTEGER",
        "CREATE TABLE scale_groups (name TEXT PRIMARY KEY, backoff_until_ms INTEGER NOT NULL DEFAULT 0,"
        " consecutive_failures INTEGER NOT NULL DEFAULT 0, last_failure TEXT NOT NULL DEFAULT '',"
        " demand_since_ms INTEGER, last_scale_up_ms INTEGER NOT NULL DEFAULT 0,"
        " blocked_zones TEXT NOT NULL DEFAULT '{}')",
    ):
        conn.execute(statement)


def _job_state_counts(conn: sqlite3.Connection) -> None:
    """How many jobs are in each state, kept exact by triggers in the transaction that changes a
    job, so that /metrics, the dashboard's cluster samples and ListJobs' totals never count a
    million rows. (A function: the triggers' bodies hold semicolons.)"""
    conn.execute("CREATE TABLE job_state_counts (state INTEGER PRIMARY KEY, n INTEGER NOT NULL)")
    conn.execute("INSERT INTO job_state_counts(state, n) SELECT state, COUNT(*) FROM jobs GROUP BY state")
    add = (
        "INSERT INTO job_state_counts(state, n) VALUES (NEW.state, 1)"
        " ON CONFLICT(state) DO UPDATE SET n = n + 1"
    )
    remove = "UPDATE job_state_counts SET n = n - 1 WHERE state = OLD.state"
    conn.execute(f"CREATE TRIGGER jobs_counted_insert AFTER INSERT ON jobs BEGIN {add}; END")
    conn.execute(f"CREATE TRIGGER jobs_counted_delete AFTER DELETE ON jobs BEGIN {remove}; END")
    conn.execute(
        "CREATE TRIGGER jobs_counted_state AFTER UPDATE OF state ON jobs WHEN OLD.state != NEW.state"
        f" BEGIN {remove}; {add}; END"
    )


def _job_changes(conn: sqlite3.Connection) -> None:
    """12: a number that moves whenever a job is created, deleted or changes state (the only
    changes that move a job in or out of a ListJobs selection). ListJobs reads pages on a
    connection of its own, in a snapshot that may predate a write in progress; it keeps each
    selection's count with this number as read in the same snapshot, so a count is reused exactly
    while the jobs it counted are unchanged. (A function: the triggers' bodies hold semicolons.)"""
    conn.execute("CREATE TABLE job_changes (id INTEGER PRIMARY KEY CHECK (id = 0), n INTEGER NOT NULL)")
    conn.execute("INSERT INTO job_changes(id, n) VALUES (0, 0)")
    bump = "UPDATE job_changes SET n = n + 1 WHERE id = 0"
    conn.execute(f"CREATE TRIGGER jobs_changed_insert AFTER INSERT ON jobs BEGIN {bump}; END")
    conn.execute(f"CREATE TRIGGER jobs_changed_delete AFTER DELETE ON jobs BEGIN {bump}; END")
    conn.execute(
        f"CREATE TRIGGER jobs_changed_state AFTER UPDATE OF state ON jobs WHEN OLD.state != NEW.state BEGIN {bump}; END"
    )


# The time blocks of `job_blocks`, coarsest first: a block of level L holds the jobs submitted in
# one span of 2**L ms (about 12 days, 70 minutes, 16 seconds), and holds 2**8 blocks of the next.
JOB_BLOCK_LEVELS = (30, 22, 14)


def _job_blocks(conn: sqlite3.Connection) -> None:
    """13: how many jobs of each state, root or child, were submitted in each time block, kept
    exact by triggers in the transaction that changes a job. A ListJobs offset in a time order
    finds its block by adding up at most a few hundred of these per level, then skips only the
    jobs of one 16-second block, instead of walking up to half of a million index entries.
    (A function: the triggers' bodies hold semicolons.)"""
    conn.execute(
        "CREATE TABLE job_blocks (level INTEGER NOT NULL, block INTEGER NOT NULL, state INTEGER NOT NULL,"
        " is_root INTEGER NOT NULL, n INTEGER NOT NULL, PRIMARY KEY (level, block, state, is_root)) WITHOUT ROWID"
    )
    # The jobs are read once, for the finest blocks; each coarser level adds up the one below.
    finest = JOB_BLOCK_LEVELS[-1]
    conn.execute(
        "INSERT INTO job_blocks(level, block, state, is_root, n) SELECT ?, submitted_at_ms >> ?, state,"
        " parent_job_id IS NULL, COUNT(*) FROM jobs GROUP BY 2, 3, 4",
        (finest, finest),
    )
    for finer, level in zip(JOB_BLOCK_LEVELS[:0:-1], JOB_BLOCK_LEVELS[-2::-1], strict=True):
        conn.execute(
            "INSERT INTO job_blocks(level, block, state, is_root, n) SELECT ?, block >> ?, state, is_root, SUM(n)"
            " FROM job_blocks WHERE level = ? GROUP BY 2, 3, 4",
            (level, level - finer, finer),
        )

    def add(row: str) -> str:
        return "; ".join(
            f"INSERT INTO job_blocks(level, block, state, is_root, n) VALUES ({level},"
            f" {row}.submitted_at_ms >> {level}, {row}.state, {row}.parent_job_id IS NULL, 1)"
            " ON CONFLICT(level, block, state, is_root) DO UPDATE SET n = n + 1"
            for level in JOB_BLOCK_LEVELS
        )

    def remove(row: str) -> str:
        return "; ".join(
            f"UPDATE job_blocks SET n = n - 1 WHERE level = {level} AND block = {row}.submitted_at_ms >> {level}"
            f" AND state = {row}.state AND is_root = ({row}.parent_job_id IS NULL)"
            for level in JOB_BLOCK_LEVELS
        )

    moved = (
        "OLD.state != NEW.state OR OLD.submitted_at_ms != NEW.submitted_at_ms"
        " OR (OLD.parent_job_id IS NULL) != (NEW.parent_job_id IS NULL)"
    )
    conn.execute(f"CREATE TRIGGER jobs_blocked_insert AFTER INSERT ON jobs BEGIN {add('NEW')}; END")
    conn.execute(f"CREATE TRIGGER jobs_blocked_delete AFTER DELETE ON jobs BEGIN {remove('OLD')}; END")
    conn.execute(
        "CREATE TRIGGER jobs_blocked_update AFTER UPDATE OF state, submitted_at_ms, parent_job_id ON jobs"
        f" WHEN {moved} BEGIN {remove('OLD')}; {add('NEW')}; END"
    )


MIGRATIONS: list[str | Callable[[sqlite3.Connection], None]] = [
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
    _slice_membership,
    # 6: the dashboard's job tree pages through top-level jobs (parent_job_id IS NULL) and lists a
    # job's children, in each ListJobs order, without sorting or visiting the skipped rows
    """
    CREATE INDEX jobs_tree_listing ON jobs(parent_job_id, submitted_at_ms DESC, job_id);
    CREATE INDEX jobs_tree_names ON jobs(parent_job_id, job_id);
    CREATE INDEX jobs_tree_states ON jobs(parent_job_id, state, submitted_at_ms DESC, job_id);
    DROP INDEX jobs_parent;
    """,
    # 7: the last attempt id of each task of a deleted job; a job created again under the same
    # name continues from there, so a worker still holding an old attempt never mistakes a new
    # attempt for a repeated delivery of it
    """
    CREATE TABLE deleted_task_attempts (
        task_id TEXT PRIMARY KEY,
        last_attempt INTEGER NOT NULL
    );
    """,
    # 8: the client's request id of each LaunchJob, so a retried submission finds its job
    """
    ALTER TABLE jobs ADD COLUMN request_id TEXT;
    CREATE UNIQUE INDEX jobs_request_id ON jobs(request_id) WHERE request_id IS NOT NULL;
    """,
    # 9: whether an attempt went out in a heartbeat, recorded before the heartbeat is sent, so
    # that neither a controller crash nor a failed write of the answer can send its id twice
    "ALTER TABLE attempts ADD COLUMN sent INTEGER NOT NULL DEFAULT 0",
    # 10: auth: who launched each job (a user may only kill or delete their own job tree), and the
    # secret each worker asked the controller to present when calling it
    """
    ALTER TABLE jobs ADD COLUMN owner TEXT NOT NULL DEFAULT '';
    ALTER TABLE workers ADD COLUMN callback_token TEXT NOT NULL DEFAULT '';
    """,
    # 11: jobs per state, kept by triggers
    _job_state_counts,
    # 12: a job change counter, kept by triggers
    _job_changes,
    # 13: jobs per time block, state and root, kept by triggers
    _job_blocks,
]


def migrate(conn: sqlite3.Connection) -> None:
    conn.execute("CREATE TABLE IF NOT EXISTS schema_version (version INTEGER NOT NULL)")
    row = conn.execute("SELECT version FROM schema_version").fetchone()
    version = row[0] if row else 0
    for number, migration in enumerate(MIGRATIONS[version:], start=version + 1):
        if callable(migration):
            migration(conn)
        else:
            for statement in filter(str.strip, migration.split(";")):
                conn.execute(statement)
        conn.execute("DELETE FROM schema_version")
        conn.execute("INSERT INTO schema_version VALUES (?)", (number,))
