"""What a worker's heartbeat answer reports about finished attempts: each until the controller
stops expecting it, then nothing, while the attempt stays available by id until its retention
ends; its work directory goes as soon as the controller stops expecting it."""

from __future__ import annotations

import gc
from pathlib import Path

import pytest
from worker_support import unregistered_worker

from iris.cluster.worker import worker as worker_module
from iris.cluster.worker.task_attempt import RetiredAttempt
from iris.cluster.worker.worker import Worker
from iris.rpc import cluster_pb2 as pb
from iris.time import wait_until


@pytest.fixture
def worker(tmp_path: Path) -> Worker:
    return unregistered_worker(tmp_path)


def _run(task_id: str, argv: tuple[str, ...] = ("true",)) -> pb.RunTaskRequest:
    request = pb.RunTaskRequest(task_id=task_id, job_id=task_id.rsplit("/", 1)[0], attempt_id=0)
    request.entrypoint.command.argv.extend(argv)
    return request


def _heartbeat(
    worker: Worker, expected: list[str], run: tuple[str, ...] = (), argv: tuple[str, ...] = ("true",)
) -> pb.HeartbeatResponse:
    return worker.heartbeat(
        pb.HeartbeatRequest(
            tasks_to_run=[_run(task_id, argv) for task_id in run],
            expected_tasks=[pb.ExpectedTask(task_id=task_id, attempt_id=0) for task_id in expected],
        )
    )


def _reported(response: pb.HeartbeatResponse) -> list[str]:
    return sorted(s.task_id for s in (*response.running_tasks, *response.completed_tasks))


def _forgotten(worker: Worker, task_id: str) -> bool:
    _heartbeat(worker, [])  # a worker forgets attempts while it answers a heartbeat
    return worker.attempt(task_id, 0) is None


def _kept_as_retired(worker: Worker, task_id: str) -> bool:
    _heartbeat(worker, [])  # a worker keeps ended attempts as retired while it answers a heartbeat
    return isinstance(worker.attempt(task_id, 0), RetiredAttempt)


def test_worker_heartbeat_delivering_attempts_reports_them_in_its_own_answer_then_runs_them(
    worker: Worker,
) -> None:
    response = _heartbeat(worker, [], run=("/a/0", "/b/0"))

    assert _reported(response) == ["/a/0", "/b/0"]
    wait_until(lambda: all(a.finished for a in worker.attempts()), 30, 0.02, "both attempts to finish")
    assert {a.state for a in worker.attempts()} == {pb.TASK_STATE_SUCCEEDED}


def test_worker_heartbeat_finished_attempt_reported_while_expected_then_kept_for_lookup(
    worker: Worker,
) -> None:
    _heartbeat(worker, [], run=("/a/0", "/b/0"))
    wait_until(lambda: all(a.finished for a in worker.attempts()), 30, 0.02, "both attempts to finish")

    assert _reported(_heartbeat(worker, ["/a/0", "/b/0"])) == ["/a/0", "/b/0"]
    # The controller took in /a/0's end: it is no longer reported, and still found by id.
    assert _reported(_heartbeat(worker, ["/b/0"])) == ["/b/0"]
    assert _reported(_heartbeat(worker, ["/b/0"])) == ["/b/0"]
    attempt = worker.attempt("/a/0", 0)
    assert attempt is not None and attempt.state == pb.TASK_STATE_SUCCEEDED
    # Asked about again (a controller that lost its answer): reported again.
    [status] = _heartbeat(worker, ["/a/0"]).completed_tasks
    assert (status.task_id, status.state) == ("/a/0", pb.TASK_STATE_SUCCEEDED)


def test_worker_heartbeat_attempt_let_go_is_forgotten_after_retention(
    worker: Worker, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(worker_module, "FINISHED_RETENTION_S", 0.0)
    _heartbeat(worker, [], run=("/a/0",))
    wait_until(lambda: all(a.finished for a in worker.attempts()), 30, 0.02, "the attempt to finish")
    [attempt] = worker.attempts()
    _heartbeat(worker, ["/a/0"])

    assert _reported(_heartbeat(worker, [])) == []
    wait_until(lambda: _forgotten(worker, "/a/0"), 10, 0.02, "the attempt to be forgotten")
    assert _reported(_heartbeat(worker, ["/a/0"])) == []
    wait_until(lambda: not attempt.workdir.exists(), 10, 0.02, "the attempt's workdir to be removed")


def test_worker_heartbeat_attempt_let_go_leaves_no_workdir_and_the_next_starts_in_an_empty_one(
    worker: Worker,
) -> None:
    _heartbeat(worker, [], run=("/a/0",), argv=("sh", "-c", "mkdir -p out && echo result > out/file"))
    wait_until(lambda: all(a.finished for a in worker.attempts()), 30, 0.02, "the attempt to finish")
    first = worker.attempt("/a/0", 0)
    assert first is not None and first.state == pb.TASK_STATE_SUCCEEDED
    assert (first.workdir / "out" / "file").read_text() == "result\n"
    _heartbeat(worker, ["/a/0"])

    _heartbeat(worker, [])  # the controller took in its end
    wait_until(lambda: not first.workdir.exists(), 10, 0.02, "the let-go attempt's workdir to go")
    kept = worker.attempt("/a/0", 0)  # its record is kept for its retention
    assert kept is not None and kept.state == pb.TASK_STATE_SUCCEEDED

    # The next attempt's directory is empty, whether or not it is the recycled one.
    _heartbeat(worker, [], run=("/b/0",), argv=("sh", "-c", 'test -z "$(ls -A)"'))
    wait_until(lambda: all(a.finished for a in worker.attempts()), 30, 0.02, "the next attempt to finish")
    second = worker.attempt("/b/0", 0)
    assert second is not None and second.state == pb.TASK_STATE_SUCCEEDED, second.error


def test_worker_heartbeat_retired_attempt_keeps_its_status_and_logs_for_lookup_and_a_later_ask(
    worker: Worker,
) -> None:
    _heartbeat(worker, [], run=("/a/0",), argv=("sh", "-c", "echo one; echo two; exit 3"))
    wait_until(lambda: all(a.finished for a in worker.attempts()), 30, 0.02, "the attempt to finish")
    _heartbeat(worker, ["/a/0"])
    _heartbeat(worker, [])  # the controller took in its end
    wait_until(lambda: _kept_as_retired(worker, "/a/0"), 10, 0.02, "the attempt's thread to be done with it")

    kept = worker.attempt("/a/0", -1)
    assert kept is not None and kept.state == pb.TASK_STATE_FAILED
    assert [line.data for line in kept.logs() if line.source == "stdout"] == ["one", "two"]
    status = kept.status(None, 0)
    assert (status.exit_code, status.error, status.total_log_lines) == (
        3,
        "exited with code 3",
        len(kept.logs()),
    )
    assert status.started_at.epoch_ms and status.finished_at.epoch_ms
    # Asked about again from a log offset: reported with the lines after it.
    [again] = worker.heartbeat(
        pb.HeartbeatRequest(expected_tasks=[pb.ExpectedTask(task_id="/a/0", attempt_id=0, log_offset=1)])
    ).completed_tasks
    assert (again.state, [line.data for line in again.logs]) == (
        pb.TASK_STATE_FAILED,
        [line.data for line in kept.logs()[1:]],
    )


def test_worker_heartbeat_retired_attempts_hold_a_few_objects_each(worker: Worker) -> None:
    """A busy worker keeps ten minutes of ended attempts (300,000 at 500 jobs/s): each must cost the
    garbage collector a few objects, not its request, container, locks and events."""

    def run_and_retire(task_id: str) -> None:
        _heartbeat(worker, [], run=(task_id,))
        wait_until(lambda: worker.attempt(task_id, 0).finished, 30, 0.01, f"{task_id} to finish")
        _heartbeat(worker, [task_id])
        wait_until(lambda: _kept_as_retired(worker, task_id), 10, 0.01, f"{task_id} to be kept as retired")

    run_and_retire("/warm/0")  # the threads and caches a first attempt makes
    gc.collect()
    before = len(gc.get_objects())
    count = 40
    for i in range(count):
        run_and_retire(f"/t{i}/0")
    gc.collect()

    assert (len(gc.get_objects()) - before) / count < 5


class _RecordingController:
    """Stands in for the worker's client of the controller: answers every call, remembering it."""

    def __init__(self) -> None:
        self.calls: list[str] = []

    def call(self, method: str, request, timeout_ms: int | None = None) -> None:
        self.calls.append(method)

    def close(self) -> None:
        self.calls.append("close")


def test_worker_nudges_once_until_a_heartbeat_answers_then_at_once_for_later_changes(
    worker: Worker, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(worker_module, "NUDGE_ANSWER_WAIT_S", 60.0)  # no nudge again by the clock here
    controller = _RecordingController()
    worker._controller = controller  # type: ignore[assignment]
    worker.start()
    try:
        wait_until(lambda: worker.registered, 10, 0.01, "the worker to register")
        nudges = lambda: controller.calls.count("notify_worker_event")  # noqa: E731

        _heartbeat(worker, [], run=("/a/0",))
        wait_until(lambda: nudges() == 1, 10, 0.01, "a nudge for the attempt's first change")
        wait_until(lambda: all(a.finished for a in worker.attempts()), 30, 0.02, "the attempt to finish")
        assert nudges() == 1  # it ran and ended, but the heartbeat asked for has not come

        # The heartbeat's answer reports the end; the attempt it delivers changes after it.
        _heartbeat(worker, ["/a/0"], run=("/b/0",))
        wait_until(lambda: nudges() == 2, 10, 0.01, "a nudge for the change after the answer")
    finally:
        worker.stop()
