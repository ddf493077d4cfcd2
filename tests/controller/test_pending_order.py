"""The pending tasks a full scheduling pass gets, kept between passes, against the order read
from SQLite itself after every kind of change a pending task can go through."""

from __future__ import annotations

from controller_support import job_request
from test_store import Cluster

from iris.rpc import cluster_pb2 as pb


def _order_in_sqlite(cluster: Cluster) -> list[str]:
    return [
        row[0]
        for row in cluster.store._conn.execute(
            f"SELECT t.task_id FROM tasks t JOIN jobs j ON j.job_id = t.job_id WHERE t.state = {pb.TASK_STATE_PENDING}"
            " ORDER BY j.priority DESC, j.root_submitted_at_ms, j.submitted_at_ms, t.job_id, t.task_index"
        )
    ]


def _assert_pass_sees_sqlite_order(cluster: Cluster) -> None:
    demands, _ = cluster.store.scheduling_inputs()
    assert [d.task_id for d in demands] == _order_in_sqlite(cluster)
    assert [d.task_id for d in cluster.store.pending_demands()] == _order_in_sqlite(cluster)


def _submit(cluster: Cluster, job_id: str, priority: int = 0, **kwargs) -> None:
    request = job_request(job_id, **kwargs)
    request.priority = priority
    cluster.apply(cluster.store.create_job(job_id, request, cluster.tick()))


def test_pending_order_kept_between_passes_matches_sqlite_through_every_change(tmp_path):
    cluster = Cluster(tmp_path / "controller.sqlite3")
    worker = cluster.worker("w1", cpu=2000)
    _submit(cluster, "/a", replicas=3)
    _submit(cluster, "/b", priority=5)
    _submit(cluster, "/c", replicas=2)
    _assert_pass_sees_sqlite_order(cluster)

    cluster.schedule()  # places /b/0 and /a/0
    assert cluster.task("/b/0").state == pb.TASK_STATE_ASSIGNED
    _assert_pass_sees_sqlite_order(cluster)

    # New tasks land before, between and after the kept ones: a child goes with its root.
    _submit(cluster, "/d")
    _submit(cluster, "/a/kid", parent_job_id="/a", replicas=2)
    _submit(cluster, "/e", priority=5)
    _assert_pass_sees_sqlite_order(cluster)

    cluster.store.terminate_job("/c", "stop", cluster.tick())
    _assert_pass_sees_sqlite_order(cluster)

    # The worker's attempts are retried: their tasks go back to pending in their old places.
    cluster.apply(cluster.store.record_heartbeat_failure("w1", "gone", cluster.tick(), 0))
    assert cluster.task("/b/0").state == pb.TASK_STATE_PENDING
    _assert_pass_sees_sqlite_order(cluster)

    cluster.store.terminate_job("/d", "replaced", cluster.tick())
    cluster.store.delete_job_tree("/d")
    _assert_pass_sees_sqlite_order(cluster)

    # A launch refused inside a batch rolls back its own rows alone.
    results = cluster.store.create_jobs([("/e", job_request("/e"), ""), ("/f", job_request("/f"), "")], cluster.tick())
    assert type(results[0]).__name__ == "JobExistsError"
    _assert_pass_sees_sqlite_order(cluster)

    worker = cluster.worker("w2", cpu=3000)
    cluster.schedule()
    assert worker.worker_id == "w2" and cluster.task("/b/0").state == pb.TASK_STATE_ASSIGNED
    _assert_pass_sees_sqlite_order(cluster)
    cluster.store.close()
