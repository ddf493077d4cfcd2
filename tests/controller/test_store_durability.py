"""A store on disk for good waits for the disk at commits; one thrown away with its cluster does not."""

from __future__ import annotations

from pathlib import Path

from iris.cluster.local_cluster import LocalCluster

SYNCHRONOUS_OFF, SYNCHRONOUS_NORMAL = 0, 1


def _store_settings(cluster: LocalCluster) -> tuple[int, str]:
    assert cluster.daemon is not None
    conn = cluster.daemon.store._conn
    return conn.execute("PRAGMA synchronous").fetchone()[0], conn.execute("PRAGMA journal_mode").fetchone()[0]


def test_local_cluster_store_in_a_given_state_dir_syncs_commits(tmp_path: Path) -> None:
    with LocalCluster(workers=[], state_dir=tmp_path / "state") as cluster:
        assert _store_settings(cluster) == (SYNCHRONOUS_NORMAL, "wal")


def test_local_cluster_store_in_its_temporary_state_dir_never_syncs() -> None:
    with LocalCluster(workers=[]) as cluster:
        assert _store_settings(cluster) == (SYNCHRONOUS_OFF, "wal")
