"""A task attempt on a real process runtime when the worker's side fails: the worker's own faults
(storage, the container engine) spend the preemption budget, the task's own failures the failure
budget; a kill that fails is retried by the next request."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from iris import chaos
from iris.client.bundle import build_bundle
from iris.cluster.controller.bundle_store import BundleStore
from iris.cluster.worker.task_attempt import AttemptContext, TaskAttempt
from iris.rpc import cluster_pb2 as pb
from iris.time import wait_until
from worker_support import attempt_context


@pytest.fixture(autouse=True)
def clean_chaos() -> Iterator[None]:
    chaos.reset()
    yield
    chaos.reset()


@pytest.fixture
def ctx(tmp_path: Path) -> AttemptContext:
    return attempt_context(tmp_path)


def _run_request(tmp_path: Path, *argv: str, bundle: bool = False) -> pb.RunTaskRequest:
    request = pb.RunTaskRequest(task_id="/job/0", job_id="/job", attempt_id=0)
    request.entrypoint.command.argv.extend(argv)
    if bundle:
        workspace = tmp_path / "workspace"
        workspace.mkdir(exist_ok=True)
        (workspace / "data.txt").write_text("payload\n")
        built = build_bundle(workspace)
        request.bundle_sha256 = built.sha256
        request.bundle_uri = BundleStore(f"file://{tmp_path / 'store'}").put(built.blob, built.sha256)
    return request


def _finish(attempt: TaskAttempt) -> TaskAttempt:
    attempt.start()
    wait_until(lambda: attempt.finished, 30, 0.02, "the attempt to finish")
    return attempt


def test_attempt_bundle_download_outage_is_a_worker_failure(ctx, tmp_path):
    chaos.enable(chaos.WORKER_BUNDLE_DOWNLOAD, 1.0, count=1)
    attempt = _finish(TaskAttempt(_run_request(tmp_path, sys.executable, "-c", "pass", bundle=True), {}, ctx))

    assert attempt.state == pb.TASK_STATE_WORKER_FAILED
    assert "the worker could not prepare the task: StorageError" in attempt.error


def test_attempt_bundle_missing_from_storage_fails_the_task(ctx, tmp_path):
    request = _run_request(tmp_path, sys.executable, "-c", "pass", bundle=True)
    request.bundle_uri = f"file://{tmp_path / 'store' / 'gone.zip'}"
    attempt = _finish(TaskAttempt(request, {}, ctx))

    assert attempt.state == pb.TASK_STATE_FAILED


def test_attempt_container_create_failure_is_a_worker_failure(ctx, tmp_path):
    chaos.enable(chaos.CONTAINER_CREATE, 1.0, count=1)
    attempt = _finish(TaskAttempt(_run_request(tmp_path, sys.executable, "-c", "pass"), {}, ctx))

    assert attempt.state == pb.TASK_STATE_WORKER_FAILED
    assert "ContainerError: chaos: injected failure at container.create" in attempt.error


def test_attempt_command_that_cannot_start_fails_the_task(ctx, tmp_path):
    attempt = _finish(TaskAttempt(_run_request(tmp_path, str(tmp_path / "no-such-program")), {}, ctx))

    assert attempt.state == pb.TASK_STATE_FAILED
    assert "no-such-program" in attempt.error


def test_attempt_kill_that_fails_leaves_it_running_until_asked_again(ctx, tmp_path):
    attempt = TaskAttempt(_run_request(tmp_path, sys.executable, "-c", "import time; time.sleep(60)"), {}, ctx)
    attempt.start()
    wait_until(lambda: attempt.state == pb.TASK_STATE_RUNNING, 30, 0.02, "the attempt to run")
    chaos.enable(chaos.CONTAINER_KILL, 1.0, count=1)

    attempt.kill()
    wait_until(lambda: chaos.injections().get(chaos.CONTAINER_KILL) == 1, 10, 0.02, "the kill to be refused")
    assert attempt.state == pb.TASK_STATE_RUNNING

    attempt.kill()
    wait_until(lambda: attempt.finished, 30, 0.02, "the attempt to be killed")
    assert attempt.state == pb.TASK_STATE_KILLED


