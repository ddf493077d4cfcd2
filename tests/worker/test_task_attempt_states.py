"""The states a task attempt passes through on a real process runtime: BUILDING only while there is
something to wait for before the command starts (a bundle, setup, an image to pull)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from worker_support import attempt_context

from iris.client.bundle import build_bundle
from iris.cluster.controller.bundle_store import BundleStore
from iris.cluster.runtime.process import ProcessRuntime
from iris.cluster.worker.task_attempt import AttemptContext, TaskAttempt
from iris.rpc import cluster_pb2 as pb
from iris.time import wait_until


class _ImagePullingProcessRuntime(ProcessRuntime):
    """The process runtime, declaring what a container engine's runtime declares."""

    pulls_images = True


def _states_of(request: pb.RunTaskRequest, ctx: AttemptContext, errors: list[str] | None = None) -> list[int]:
    """The distinct states the attempt announced through on_change, in order, until it ended; its
    error, if any, goes to `errors`."""
    seen: list[int] = []

    def note_state() -> None:
        # Called only once the attempt started, on its thread: `attempt` is bound by then.
        if not seen or seen[-1] != attempt.state:
            seen.append(attempt.state)

    attempt = TaskAttempt(request, {}, replace(ctx, on_change=note_state))
    attempt.start()
    wait_until(lambda: attempt.ended, 30, 0.02, "the attempt to end")
    if errors is not None:
        errors.append(attempt.error)
    return seen


def _request(*argv: str) -> pb.RunTaskRequest:
    request = pb.RunTaskRequest(task_id="/job/0", job_id="/job", attempt_id=0)
    request.entrypoint.command.argv.extend(argv)
    return request


def test_attempt_without_setup_goes_from_assigned_to_running(tmp_path: Path) -> None:
    states = _states_of(_request("true"), attempt_context(tmp_path))

    assert states == [pb.TASK_STATE_RUNNING, pb.TASK_STATE_SUCCEEDED]


def test_attempt_with_setup_commands_shows_building_first(tmp_path: Path) -> None:
    request = _request("true")
    request.environment.setup_commands.append("true")

    states = _states_of(request, attempt_context(tmp_path))

    assert states == [pb.TASK_STATE_BUILDING, pb.TASK_STATE_RUNNING, pb.TASK_STATE_SUCCEEDED]


def test_attempt_with_bundle_shows_building_while_unpacking(tmp_path: Path) -> None:
    workspace = tmp_path / "workspace"
    workspace.mkdir()
    (workspace / "data.txt").write_text("payload\n")
    built = build_bundle(workspace)
    request = _request("cat", "data.txt")
    request.bundle_sha256 = built.sha256
    request.bundle_uri = BundleStore(f"file://{tmp_path / 'store'}").put(built.blob, built.sha256)

    states = _states_of(request, attempt_context(tmp_path))

    assert states == [pb.TASK_STATE_BUILDING, pb.TASK_STATE_RUNNING, pb.TASK_STATE_SUCCEEDED]


def test_attempt_on_image_pulling_runtime_shows_building(tmp_path: Path) -> None:
    ctx = replace(attempt_context(tmp_path), runtime=_ImagePullingProcessRuntime(tmp_path / "pulling"))

    states = _states_of(_request("true"), ctx)

    assert states == [pb.TASK_STATE_BUILDING, pb.TASK_STATE_RUNNING, pb.TASK_STATE_SUCCEEDED]


def test_attempt_that_cannot_start_fails_from_assigned_with_the_reason(tmp_path: Path) -> None:
    failures: list[str] = []
    ctx = attempt_context(tmp_path)

    states = _states_of(_request("no-such-command-anywhere"), ctx, failures)

    assert states == [pb.TASK_STATE_FAILED]
    assert "failed to start 'no-such-command-anywhere'" in failures[0]
