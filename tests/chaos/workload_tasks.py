"""The chaos suite's task code, shipped to the workers in the suite's bundle.

Every execution appends `<task id> <attempt id> <pid>` to the file CHAOS_EXEC_LOG names (one
short O_APPEND write, so concurrent writers never interleave), which is how the suite checks that
no attempt ran twice.
"""

from __future__ import annotations

import os
import sys
import time

EXEC_LOG_ENV = "CHAOS_EXEC_LOG"
# The variables a child job must carry like its parent: the execution log and the run's marker.
CARRIED_ENV = (EXEC_LOG_ENV, "IRIS_CHAOS_SUITE_MARKER")


def record_execution() -> None:
    line = f"{os.environ['IRIS_TASK_ID']} {os.environ['IRIS_ATTEMPT_ID']} {os.getpid()}\n"
    fd = os.open(os.environ[EXEC_LOG_ENV], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line.encode())
    finally:
        os.close(fd)


def succeed(seconds: float, value: int) -> int:
    record_execution()
    time.sleep(seconds)
    return value


def raise_error(seconds: float, message: str) -> None:
    record_execution()
    time.sleep(seconds)
    raise ValueError(message)


def parent_with_child(seconds: float) -> str:
    """Run a child job to its end; like any user code, ride out a controller that restarts."""
    from iris.client import iris_ctx
    from iris.cluster.types import Entrypoint, EnvironmentSpec, JobState

    record_execution()
    client = iris_ctx().client
    env = EnvironmentSpec(env_vars={name: os.environ[name] for name in CARRIED_ENV})
    deadline = time.monotonic() + 90
    while True:
        try:
            child = client.submit(
                Entrypoint.from_command("python3", "-m", "workload_tasks", "sleep", str(seconds)),
                name="child",
                environment=env,
                max_retries_failure=6,
                existing_job_policy="keep",
            )
            status = child.wait(timeout=max(1.0, deadline - time.monotonic()), raise_on_failure=False)
            break
        except Exception as exc:
            if time.monotonic() > deadline:
                raise
            print(f"child job: {exc}; trying again", file=sys.stderr)
            time.sleep(0.5)
    return JobState.of(status.state).name


def main(argv: list[str]) -> int:
    command, seconds = argv[0], float(argv[1])
    record_execution()
    time.sleep(seconds)
    if command == "fail":
        print("deliberate failure of the workload", file=sys.stderr)
        return 3
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
