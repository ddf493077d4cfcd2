"""Schema migrations: a database written by an older controller opens with its data carried over."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from iris.cluster.controller.schema import MIGRATIONS
from iris.cluster.controller.store import ControllerStore
from iris.cluster.controller.store_reads import JobFilters
from iris.cluster.types import attribute_to_proto
from iris.rpc import cluster_pb2 as pb


def _old_database(path: Path, version: int) -> sqlite3.Connection:
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("CREATE TABLE schema_version (version INTEGER NOT NULL)")
    for script in MIGRATIONS[:version]:
        if callable(script):
            script(conn)
            continue
        for statement in filter(str.strip, script.split(";")):
            conn.execute(statement)
    conn.execute("INSERT INTO schema_version VALUES (?)", (version,))
    return conn


def test_schema_migration_joins_existing_workers_to_the_slice_they_reported(tmp_path):
    path = tmp_path / "controller.sqlite3"
    conn = _old_database(path, 4)
    member = pb.WorkerMetadata(hostname="h1")
    member.attributes["slice-id"].CopyFrom(attribute_to_proto("s-1"))
    for worker_id, metadata in (("10.0.0.1:10001", member), ("standalone", pb.WorkerMetadata(hostname="h2"))):
        conn.execute(
            "INSERT INTO workers(worker_id, address, metadata, state, registered_at_ms, last_heartbeat_ms)"
            " VALUES (?,?,?,?,?,?)",
            (worker_id, "http://x:1", metadata.SerializeToString(), pb.WORKER_STATE_HEALTHY, 1, 1),
        )
    conn.close()

    store = ControllerStore(path)
    try:
        members = store.slice_members()
        assert list(members) == ["s-1"]
        assert [row["worker_id"] for row in members["s-1"]] == ["10.0.0.1:10001"]
        assert store.load_scale_groups() == {}
    finally:
        store.close()


@pytest.mark.parametrize("version", range(4, len(MIGRATIONS)))
def test_schema_migration_keeps_job_counts_of_existing_jobs_and_follows_later_changes(tmp_path, version):
    path = tmp_path / "controller.sqlite3"
    conn = _old_database(path, version)
    for i, state in enumerate([pb.JOB_STATE_RUNNING, pb.JOB_STATE_SUCCEEDED, pb.JOB_STATE_RUNNING]):
        conn.execute(
            "INSERT INTO jobs(job_id, state, request, num_tasks, submitted_at_ms, root_submitted_at_ms)"
            " VALUES (?,?,?,?,?,?)",
            (f"/old-{i}", state, pb.LaunchJobRequest(name=f"/old-{i}").SerializeToString(), 0, 1000 + i, 1000 + i),
        )
    conn.close()

    store = ControllerStore(path)
    try:
        running = store.list_jobs([pb.JOB_STATE_RUNNING], "/old-", 10, 0)
        store.terminate_job("/old-2", "stop", 2000)
        running_after = store.list_jobs([pb.JOB_STATE_RUNNING], "/old-", 10, 0)

        assert ([j.job_id for j in running[0]], running[1]) == (["/old-2", "/old-0"], 2)
        assert ([j.job_id for j in running_after[0]], running_after[1]) == (["/old-0"], 1)
        assert store.count_by_state()[0] == {pb.JOB_STATE_RUNNING: 1, pb.JOB_STATE_SUCCEEDED: 1, pb.JOB_STATE_KILLED: 1}
    finally:
        store.close()


def test_schema_migration_lets_offset_pages_of_existing_jobs_land_on_their_rows(tmp_path):
    path = tmp_path / "controller.sqlite3"
    conn = _old_database(path, 12)
    for i in range(40):
        parent = f"/old-{i - 1:02d}" if i % 4 == 3 else None
        job_id = f"{parent}/child-{i:02d}" if parent else f"/old-{i:02d}"
        submitted = 1_700_000_000_000 + i * i * 3_000_000
        conn.execute(
            "INSERT INTO jobs(job_id, parent_job_id, state, request, num_tasks, submitted_at_ms, root_submitted_at_ms)"
            " VALUES (?,?,?,?,?,?,?)",
            (job_id, parent, pb.JOB_STATE_RUNNING if i % 3 else pb.JOB_STATE_SUCCEEDED,
             pb.LaunchJobRequest(name=job_id).SerializeToString(), 0, submitted, submitted),
        )  # fmt: skip
    conn.close()

    store = ControllerStore(path)
    try:
        # 26 jobs are running, 20 of them roots.
        for filters, running in ((JobFilters(), 26), (JobFilters(roots_only=True, order=pb.JOB_ORDER_OLDEST), 20)):
            whole, total = store.list_jobs([pb.JOB_STATE_RUNNING], "", 100, 0, filters)
            pages = [store.list_jobs([pb.JOB_STATE_RUNNING], "", 3, offset, filters) for offset in range(total)]

            assert total == len(whole) == running
            assert [([j.job_id for j in jobs], n) for jobs, n in pages] == [
                ([j.job_id for j in whole[offset : offset + 3]], total) for offset in range(total)
            ]
    finally:
        store.close()
