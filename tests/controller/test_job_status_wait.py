"""GetJobStatus that waits for a job's state to change, against a real controller over HTTP, and
the client's Job.wait built on it. The controller has no workers, so a job stays pending until
a test kills it."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import pytest
from controller_support import running_controller

from iris.client import IrisClient
from iris.client.client import InvalidRequestError
from iris.cluster.controller.main import ControllerDaemon
from iris.cluster.types import Entrypoint
from iris.rpc import cluster_pb2 as pb
from iris.time import wait_until


@pytest.fixture(scope="module")
def daemon(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ControllerDaemon]:
    with running_controller(tmp_path_factory.mktemp("status-wait")) as daemon:
        yield daemon


@pytest.fixture
def controller_url(daemon: ControllerDaemon) -> str:
    return daemon.url


@pytest.fixture
def client(controller_url: str) -> Iterator[IrisClient]:
    with IrisClient.remote(controller_url) as client:
        yield client


def _kill_once_waited_on(daemon: ControllerDaemon, job) -> threading.Thread:
    def kill() -> None:
        # The change must happen while the waiting call is parked in the controller.
        wait_until(lambda: daemon.controller.job_watch.is_watched(job.job_id), 20, 0.01, "a caller waiting for the job")
        job.terminate("stopped by the test")

    thread = threading.Thread(target=kill, daemon=True)
    thread.start()
    return thread


def test_get_job_status_wait_answers_when_the_job_changes_state(daemon: ControllerDaemon, client: IrisClient) -> None:
    job = client.submit(Entrypoint.from_command("true"), name="wait-for-kill")
    killer = _kill_once_waited_on(daemon, job)
    started = time.monotonic()

    request = pb.GetJobStatusRequest(job_id=job.job_id, known_state=pb.JOB_STATE_PENDING, wait_ms=20_000)
    status = client.call("get_job_status", request).job

    assert status.state == pb.JOB_STATE_KILLED
    assert time.monotonic() - started < 10, "the answer waited for wait_ms, not for the change"
    killer.join()


def test_get_job_status_wait_unchanged_answers_after_wait_ms_with_the_same_state(client: IrisClient) -> None:
    job = client.submit(Entrypoint.from_command("true"), name="wait-unchanged")
    started = time.monotonic()

    request = pb.GetJobStatusRequest(job_id=job.job_id, known_state=pb.JOB_STATE_PENDING, wait_ms=300)
    status = client.call("get_job_status", request).job

    assert status.state == pb.JOB_STATE_PENDING
    assert time.monotonic() - started >= 0.3
    job.terminate()


def test_get_job_status_until_finished_answers_at_the_end_not_at_a_change(
    daemon: ControllerDaemon, client: IrisClient
) -> None:
    job = client.submit(Entrypoint.from_command("true"), name="wait-until-finished")
    killer = _kill_once_waited_on(daemon, job)

    # known_state differs from the job's (pending) at once: only until_finished makes it wait.
    request = pb.GetJobStatusRequest(
        job_id=job.job_id, known_state=pb.JOB_STATE_RUNNING, wait_ms=20_000, until_finished=True
    )
    status = client.call("get_job_status", request).job

    assert status.state == pb.JOB_STATE_KILLED
    killer.join()


def test_get_job_status_negative_wait_is_invalid_argument(client: IrisClient) -> None:
    job = client.submit(Entrypoint.from_command("true"), name="wait-negative")

    with pytest.raises(InvalidRequestError, match="wait_ms must not be negative"):
        client.call("get_job_status", pb.GetJobStatusRequest(job_id=job.job_id, wait_ms=-1))
    job.terminate()


def test_job_wait_makes_one_call_for_the_whole_wait_instead_of_polling(
    daemon: ControllerDaemon, client: IrisClient
) -> None:
    job = client.submit(Entrypoint.from_command("true"), name="wait-no-polling")
    calls = []
    ask = client.call_riding_out_restarts

    def counting(method, request):
        calls.append(method)
        return ask(method, request)

    client.call_riding_out_restarts = counting
    killer = _kill_once_waited_on(daemon, job)

    status = job.wait(timeout=30, raise_on_failure=False, poll_interval=0.02)

    assert status.state == pb.JOB_STATE_KILLED
    assert calls.count("get_job_status") == 1, f"{len(calls)} status calls in about a second: it polled"
    killer.join()
