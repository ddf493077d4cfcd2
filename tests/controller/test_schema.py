"""Schema migrations: a database written by an older controller opens with its data carried over."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from iris.cluster.controller.schema import MIGRATIONS
from iris.cluster.controller.store import ControllerStore
from iris.cluster.types import attribute_to_proto
from iris.rpc import cluster_pb2 as pb


def _old_database(path: Path, version: int) -> sqlite3.Connection:
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("CREATE TABLE schema_version (version INTEGER NOT NULL)")
    for script in MIGRATIONS[:version]:
        assert isinstance(script, str)
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
