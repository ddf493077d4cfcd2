"""ControllerCore: who is owed a heartbeat, what it carries, what an answer changes.

Fake workers answer the requests the core builds; the clock is a number the tests advance; the
rounds the core asks to start are collected instead of being sent by the asyncio shell.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest
from controller_support import CONTROLLER, T0, WORKER_TIMEOUT_MS, FakeWorker, job_request

from iris import chaos
from iris.cluster.controller.core import ControllerCore
from iris.cluster.controller.settings import ControllerSettings
from iris.cluster.controller.store import ControllerStore
from iris.rpc import cluster_pb2 as pb


class Harness:
    def __init__(self, path: Path):
        self.now = T0
        self.started: list[str] = []
        self.scheduler_wakeups = 0
        self.store = ControllerStore(path)
        settings = ControllerSettings(CONTROLLER, worker_timeout_s=WORKER_TIMEOUT_MS / 1000)
        self.core = ControllerCore(
            self.store,
            settings,
            clock=lambda: self.now,
            start_round=self.started.append,
            wake_scheduler=self.wake,
        )

    def wake(self) -> None:
        self.scheduler_wakeups += 1

    def worker(self, worker_id: str, **kwargs) -> FakeWorker:
        worker = FakeWorker(worker_id, clock=lambda: self.now, **kwargs)
        self.core.register_worker(worker.worker_id, worker.address, worker.metadata())
        return worker

    def round_trip(self, worker: FakeWorker):
        """One full round as the shell runs it: begin, send, hand back the answer."""
        heartbeat = self.core.begin_round(worker.worker_id)
        assert heartbeat is not None
        return heartbeat, self.core.round_answered(heartbeat, worker.heartbeat(heartbeat.request))

    def run_job(self, worker: FakeWorker, name: str = "/train", **kwargs) -> str:
        self.core.create_job(name, job_request(name, **kwargs))
        self.core.run_scheduling_pass()
        self.round_trip(worker)
        return name


@pytest.fixture
def harness(tmp_path: Path):
    h = Harness(tmp_path / "controller.sqlite3")
    yield h
    h.store.close()


def test_core_registration_starts_a_round_and_wakes_the_scheduler(harness):
    harness.worker("w1")

    assert harness.started == ["w1"]
    assert harness.scheduler_wakeups == 1


def test_core_heartbeat_requested_while_in_flight_starts_no_second_round_but_one_more_after(harness):
    worker = harness.worker("w1")
    heartbeat = harness.core.begin_round("w1")

    harness.core.request_heartbeat("w1")
    harness.core.request_heartbeat("w1")

    assert harness.started == ["w1"], "a worker's rounds never overlap"
    outcome = harness.core.round_answered(heartbeat, worker.heartbeat(heartbeat.request))
    assert harness.core.another_round("w1", outcome)
    harness.core.begin_round("w1")
    assert not harness.core.another_round("w1", None)
    harness.core.rounds_ended("w1")
    harness.core.request_heartbeat("w1")
    assert harness.started == ["w1", "w1"]


def test_core_kill_lost_with_a_failed_round_rides_on_the_next_one(harness):
    worker = harness.worker("w1")
    job_id = harness.run_job(worker)
    harness.core.terminate_job(job_id, "stop")
    heartbeat = harness.core.begin_round("w1")
    assert [(k.task_id, k.attempt_id) for k in heartbeat.request.tasks_to_kill] == [("/train/0", 0)]

    harness.core.round_failed(heartbeat, "connection refused")

    assert harness.core.pending_kills("w1") == {("/train/0", 0)}
    retry = harness.core.begin_round("w1")
    assert [(k.task_id, k.attempt_id) for k in retry.request.tasks_to_kill] == [("/train/0", 0)]
    harness.core.round_answered(retry, worker.heartbeat(retry.request))
    assert worker.kill_requests == [("/train/0", 0)]
    assert harness.core.pending_kills("w1") == set()


def test_core_failed_round_marks_worker_unhealthy_then_failed_past_its_timeout(harness):
    harness.worker("w1")
    heartbeat = harness.core.begin_round("w1")

    harness.core.round_failed(heartbeat, "connection refused")
    assert harness.store.list_workers()[0].state == pb.WORKER_STATE_UNHEALTHY

    harness.now += WORKER_TIMEOUT_MS
    harness.core.round_failed(harness.core.begin_round("w1"), "connection refused")
    (info,) = harness.store.list_workers()
    assert info.state == pb.WORKER_STATE_FAILED
    assert "no successful heartbeat for 60s (last error: connection refused)" in info.error


def test_core_worker_holding_more_log_lines_than_one_answer_gets_another_round_at_once(harness):
    worker = harness.worker("w1", max_log_lines=2)
    harness.run_job(worker)
    worker.log("/train/0", 0, "a", "b", "c", "d", "e")

    _, first = harness.round_trip(worker)
    _, second = harness.round_trip(worker)
    _, third = harness.round_trip(worker)

    assert (first.more, second.more, third.more) == (True, True, False)
    lines, _, _ = harness.store.read_logs("/train/0", 0, 100)
    assert [line.line.data for line in lines] == ["a", "b", "c", "d", "e"]


def test_core_unknown_attempt_is_killed_on_the_next_round(harness):
    worker = harness.worker("w1")
    worker.script("/ghost/0", state=pb.TASK_STATE_RUNNING)

    _, outcome = harness.round_trip(worker)

    assert outcome.unknown == [("/ghost/0", 0)] and outcome.more
    follow_up, _ = harness.round_trip(worker)
    assert [(k.task_id, k.attempt_id) for k in follow_up.request.tasks_to_kill] == [("/ghost/0", 0)]


def test_core_answer_from_another_worker_on_the_address_fails_the_one_we_knew(harness):
    harness.worker("w1")
    heartbeat = harness.core.begin_round("w1")

    harness.core.round_answered(heartbeat, pb.HeartbeatResponse(worker_id="w2"))

    (info,) = harness.store.list_workers()
    assert info.state == pb.WORKER_STATE_FAILED
    assert f"address {heartbeat.address} now belongs to worker w2" in info.error


def test_core_tick_fails_silent_workers_and_owes_live_ones_a_heartbeat(harness):
    harness.worker("w1")
    harness.core.rounds_ended("w1")
    harness.now += WORKER_TIMEOUT_MS // 2
    harness.worker("w2")
    harness.core.rounds_ended("w2")
    harness.started.clear()

    harness.now += WORKER_TIMEOUT_MS // 2 + 1
    harness.core.tick()

    states = {w.worker_id: w.state for w in harness.store.list_workers()}
    assert states == {"w1": pb.WORKER_STATE_FAILED, "w2": pb.WORKER_STATE_HEALTHY}
    assert harness.started == ["w2"]


def test_core_stopped_worker_gets_no_round(harness):
    harness.worker("w1")
    harness.now += WORKER_TIMEOUT_MS + 1
    harness.core.tick()

    assert harness.core.begin_round("w1") is None


def test_core_resume_after_restart_heartbeats_known_workers_with_a_fresh_timeout(harness, tmp_path):
    harness.worker("w1")
    harness.store.close()
    harness.now += 10 * WORKER_TIMEOUT_MS  # the controller was down this long
    restarted = Harness(tmp_path / "controller.sqlite3")
    restarted.now = harness.now

    restarted.core.resume()
    restarted.core.tick()

    assert restarted.store.list_workers()[0].state == pb.WORKER_STATE_HEALTHY
    assert restarted.started == ["w1"]
    assert restarted.scheduler_wakeups == 1
    restarted.store.close()


def test_core_attempt_whose_start_answer_was_lost_is_never_sent_again(harness):
    worker = harness.worker("w1")
    harness.core.create_job("/train", job_request("/train"))
    harness.core.run_scheduling_pass()
    heartbeat = harness.core.begin_round("w1")
    # The worker receives attempt 0 and starts it, then dies before its answer arrives.
    worker.heartbeat(heartbeat.request)
    harness.core.round_failed(heartbeat, "connection reset")
    worker.restart()

    harness.round_trip(worker)  # the worker answers again, and is healthy
    harness.core.run_scheduling_pass()
    harness.round_trip(worker)

    assert [(r.task_id, r.attempt_id) for r in worker.received] == [("/train/0", 0), ("/train/0", 1)]
    task = harness.store.task_status("/train/0")
    assert (task.current_attempt_id, task.preemption_count) == (1, 0)


@pytest.fixture
def store_writes_fail():
    """Makes the next store transaction fail, as a full disk or a locked database would."""
    yield lambda: chaos.enable(chaos.CONTROLLER_STORE_WRITE, 1.0, count=1)
    chaos.reset()


def test_core_attempt_whose_answer_could_not_be_recorded_is_never_sent_again(harness, store_writes_fail):
    worker = harness.worker("w1")
    harness.core.create_job("/train", job_request("/train"))
    harness.core.run_scheduling_pass()
    heartbeat = harness.core.begin_round("w1")
    worker.heartbeat(heartbeat.request)  # the worker starts attempt 0...
    store_writes_fail()
    with pytest.raises(sqlite3.OperationalError):
        # ...but its answer cannot be recorded, as if the controller died before recording it.
        harness.core.round_answered(heartbeat, pb.HeartbeatResponse(worker_id="w1"))
    harness.core.rounds_ended("w1")
    worker.restart()  # and the worker restarts, forgetting attempt 0

    harness.round_trip(worker)
    harness.core.run_scheduling_pass()
    harness.round_trip(worker)

    assert [(r.task_id, r.attempt_id) for r in worker.received] == [("/train/0", 0), ("/train/0", 1)]
    assert harness.store.task_status("/train/0").current_attempt_id == 1


def test_core_round_whose_dispatch_cannot_be_recorded_sends_nothing_and_keeps_its_kills(harness, store_writes_fail):
    worker = harness.worker("w1")
    job_id = harness.run_job(worker)
    harness.core.terminate_job(job_id, "stop")
    harness.core.create_job("/next", job_request("/next"))
    harness.core.run_scheduling_pass()
    store_writes_fail()

    with pytest.raises(sqlite3.OperationalError):
        harness.core.begin_round("w1")

    assert harness.core.pending_kills("w1") == {("/train/0", 0)}
    retry = harness.core.begin_round("w1")
    assert [(r.task_id, r.attempt_id) for r in retry.request.tasks_to_run] == [("/next/0", 0)]
