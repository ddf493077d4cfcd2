"""What the store's writes cost: statements per job when heartbeat answers are applied, with
every state change still in the history a user reads (`iris job`, the dashboard).

Statements are counted with SQLite's trace callback, one per statement SQLite runs (each row of
an `executemany` is one; a trigger's statements are not counted apart from the one firing them).
"""

from __future__ import annotations

from pathlib import Path

from controller_support import T0, FakeWorker, job_request

from iris.cluster.controller.core import ControllerCore
from iris.cluster.controller.settings import ControllerSettings
from iris.cluster.controller.store import ControllerStore
from iris.rpc import cluster_pb2 as pb

JOBS = 20
# Applying the two answers that run and then finish a one-task job took 29 statements per job
# before snapshot reads, job refreshes and log positions were batched and folded; now 15.
MAX_STATEMENTS_PER_JOB = 18


class StatementCount:
    """Statements SQLite runs on the store's connection while `counting`; a trigger repeats its
    firing statement's text in the trace, so consecutive repeats count once."""

    def __init__(self, store: ControllerStore) -> None:
        self.total = 0
        self.counting = False
        self._last = ""
        store._conn.set_trace_callback(self._seen)

    def _seen(self, statement: str) -> None:
        if self.counting and statement != self._last:
            self.total += 1
        self._last = statement


def _run_jobs_to_success(tmp_path: Path) -> tuple[ControllerStore, int]:
    """JOBS one-task jobs placed on one worker, reported running, then succeeded; returns the
    statements run while the two answers were applied."""
    now = [T0]

    def clock() -> int:
        now[0] += 1000
        return now[0]

    store = ControllerStore(tmp_path / "controller.sqlite3")
    core = ControllerCore(store, ControllerSettings("http://controller.test:10000"), clock=clock)
    worker = FakeWorker("w1", cpu=JOBS * 1000, memory=1 << 40, clock=lambda: now[0])
    core.register_worker(worker.worker_id, worker.address, worker.metadata())
    for i in range(JOBS):
        core.create_job(f"/job-{i}", job_request(f"/job-{i}", cpu=1000, memory=1 << 20))
    core.run_scheduling_pass()
    counter = StatementCount(store)
    for finish in (False, True):
        heartbeat = core.begin_round(worker.worker_id)
        assert heartbeat is not None
        if finish:
            for attempt in worker.attempts.values():
                attempt.state = pb.TASK_STATE_SUCCEEDED
        response = worker.heartbeat(heartbeat.request)
        counter.counting = True
        core.round_answered(heartbeat, response)
        counter.counting = False
    return store, counter.total


def test_store_heartbeat_answers_of_finishing_jobs_run_few_statements_per_job(tmp_path: Path) -> None:
    store, statements = _run_jobs_to_success(tmp_path)

    assert statements / JOBS <= MAX_STATEMENTS_PER_JOB, f"{statements / JOBS:.1f} statements per job"
    store.close()


def test_store_batched_writes_keep_every_state_change_in_the_history(tmp_path: Path) -> None:
    store, _ = _run_jobs_to_success(tmp_path)

    for i in range(JOBS):
        job = store.job_status(f"/job-{i}", include_tasks=True)
        assert job.state == pb.JOB_STATE_SUCCEEDED
        assert [(h.from_state, h.to_state, h.reason) for h in job.history] == [
            ("JOB_STATE_PENDING", "JOB_STATE_RUNNING", "a task started running"),
            ("JOB_STATE_RUNNING", "JOB_STATE_SUCCEEDED", "every task finished"),
        ]
        (task,) = job.tasks
        assert [(h.from_state, h.to_state, h.reason) for h in task.history] == [
            ("TASK_STATE_PENDING", "TASK_STATE_ASSIGNED", "assigned to w1"),
            ("TASK_STATE_ASSIGNED", "TASK_STATE_RUNNING", "worker report"),
            ("TASK_STATE_RUNNING", "TASK_STATE_SUCCEEDED", "exited 0"),
        ]
        assert job.history[0].at.epoch_ms == task.history[1].at.epoch_ms < job.history[1].at.epoch_ms
        assert task.started_at.epoch_ms and task.finished_at.epoch_ms == job.finished_at.epoch_ms
        (attempt,) = task.attempts
        assert (attempt.state, attempt.exit_code) == (pb.TASK_STATE_SUCCEEDED, 0)
        assert attempt.started_at.epoch_ms == task.started_at.epoch_ms
    store.close()


def test_store_create_jobs_in_one_transaction_refuses_a_bad_launch_alone(tmp_path: Path) -> None:
    store = ControllerStore(tmp_path / "controller.sqlite3")
    store.create_job("/taken", job_request("/taken"), T0)
    commits: list[str] = []
    store._conn.set_trace_callback(lambda statement: commits.append(statement) if statement == "COMMIT" else None)

    results = store.create_jobs(
        [
            ("/first", job_request("/first", replicas=2), ""),
            ("/taken", job_request("/taken"), ""),
            ("/orphan/child", job_request("/orphan/child", parent_job_id="/orphan"), ""),
            ("/last", job_request("/last"), "alice"),
        ],
        T0 + 1,
    )

    assert commits == ["COMMIT"]
    assert [type(result).__name__ for result in results] == ["Effects", "JobExistsError", "NotFoundError", "Effects"]
    assert "already exists" in str(results[1]) and "parent job /orphan not found" in str(results[2])
    first = store.job_status("/first", include_tasks=True)
    assert (first.state, [t.state for t in first.tasks]) == (pb.JOB_STATE_PENDING, [pb.TASK_STATE_PENDING] * 2)
    assert store.job_status("/last").submitted_at.epoch_ms == T0 + 1
    assert store.job_status("/taken").submitted_at.epoch_ms == T0
    assert not store.job_exists("/orphan/child")
    store.close()
