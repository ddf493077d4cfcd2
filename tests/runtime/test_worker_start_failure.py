"""An exception while a worker starts an attempt fails the attempt with its reason (issue 10, 1):
before, a name like `A=B` reaching the worker (from a client or controller that did not check it)
killed the attempt's thread on `ValueError: illegal environment variable name`, and the task sat
in BUILDING forever."""

from __future__ import annotations

from pathlib import Path

from iris.cluster.runtime.process import ProcessRuntime
from iris.cluster.worker.worker import Worker, WorkerSettings
from iris.rpc import cluster_pb2 as pb
from iris.time import wait_until

# Nothing listens here: the worker is driven by calling its heartbeat handler, never started.
UNUSED_CONTROLLER = "http://127.0.0.1:9"


def test_worker_attempt_with_illegal_env_name_fails_with_the_reason(tmp_path: Path) -> None:
    settings = WorkerSettings(
        "w1", "http://127.0.0.1:0", UNUSED_CONTROLLER, tmp_path / "cache", pb.WorkerMetadata()
    )
    worker = Worker(settings, ProcessRuntime(tmp_path / "runtime"))
    run = pb.RunTaskRequest(task_id="/bad-env/0", job_id="/bad-env", attempt_id=0, num_tasks=1)
    run.entrypoint.command.argv.append("true")
    run.environment.env_vars["A=B"] = "1"
    expected = pb.ExpectedTask(task_id=run.task_id, attempt_id=0)

    worker.heartbeat(pb.HeartbeatRequest(tasks_to_run=[run], expected_tasks=[expected]))
    wait_until(lambda: worker.attempt(run.task_id, 0).finished, 30, 0.05, "the attempt to end")
    response = worker.heartbeat(pb.HeartbeatRequest(expected_tasks=[expected]))

    (status,) = response.completed_tasks
    assert status.state == pb.TASK_STATE_FAILED
    assert "illegal environment variable name" in status.error, status.error
