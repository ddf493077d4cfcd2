"""scripts/smoke-test.py driven by a platform's end-to-end test: it starts the cluster and passes
its validation steps, the test runs its own scenarios on the cluster while the smoke test waits,
then the smoke test's cleanup deletes everything (one cluster start for both)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
from pathlib import Path
from typing import IO

from iris.time import wait_until

REPO = Path(__file__).resolve().parents[1]
SMOKE_TEST = REPO / "scripts" / "smoke-test.py"
SMOKE_JOB_TIMEOUT_S = 300
# Start, slices from zero, some in parallel, and four validation jobs, on a loaded machine.
SMOKE_PAUSE_TIMEOUT_S = 540
SMOKE_CLEANUP_TIMEOUT_S = 240
READER_JOIN_TIMEOUT_S = 10
# Every step a passing smoke test reports before it pauses.
SMOKE_STEPS = ("start cluster", "simple job", "concurrent jobs", "coscheduled job", "accelerator job")


class RunningIris:
    """A command left running; the lines of one of its outputs (stderr unless told) as they come."""

    def __init__(self, process: subprocess.Popen[str], stream: IO[str] | None = None):
        self.process = process
        self._stream = stream or process.stderr
        self._lines: list[str] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self._stream is not None
        for line in self._stream:
            self._lines.append(line.rstrip("\n"))

    def lines(self) -> list[str]:
        return list(self._lines)

    def done(self) -> None:
        """Wait until everything the command printed before it exited has been read."""
        self._reader.join(READER_JOIN_TIMEOUT_S)


def stop_group(process: subprocess.Popen[str]) -> None:
    """SIGTERM to the process group a command leads, SIGKILL if it is still there after a while."""
    os.killpg(process.pid, signal.SIGTERM)
    try:
        process.wait(30)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()


class SmokeTestRun:
    """scripts/smoke-test.py with --pause-before-cleanup, started in its own process group: the
    cluster it validated stays up until `finish()` lets it go on to its cleanup."""

    def __init__(self, config: Path, prefix: str, log_dir: Path, cwd: Path, env: dict[str, str]):
        env = {**env}
        env.pop("IRIS_CONTROLLER_URL", None)
        # The config the smoke test started the cluster with: the user's, named after the prefix.
        self.config_file = log_dir / "cluster.yaml"
        self.process = subprocess.Popen(
            [sys.executable, str(SMOKE_TEST), "--config", str(config), "--prefix", prefix, "--no-build-images",
             "--job-timeout", str(SMOKE_JOB_TIMEOUT_S), "--log-dir", str(log_dir), "--pause-before-cleanup"],
            cwd=cwd, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
            start_new_session=True,
        )  # fmt: skip
        self._output = RunningIris(self.process, self.process.stdout)

    def output(self) -> str:
        return "\n".join(self._output.lines())

    def wait_until_paused(self) -> None:
        def paused() -> bool:
            if self.process.poll() is not None:
                raise AssertionError(f"the smoke test ended (exit {self.process.returncode}):\n{self.output()}")
            return "press Enter to clean up" in self.output()

        try:
            wait_until(paused, SMOKE_PAUSE_TIMEOUT_S, 0.5, "the smoke test to finish its jobs")
        except TimeoutError:
            raise AssertionError(f"the smoke test did not finish its jobs:\n{self.output()}") from None

    def assert_every_step_passed(self) -> None:
        for step in SMOKE_STEPS:
            assert f"PASS  {step} " in self.output(), self.output()

    def finish(self) -> subprocess.Popen[str]:
        """Let it clean up and wait for it to exit."""
        assert self.process.stdin is not None
        self.process.stdin.write("\n")
        self.process.stdin.close()
        self.process.wait(SMOKE_CLEANUP_TIMEOUT_S)
        self._output.done()
        return self.process

    def stop(self) -> None:
        if self.process.poll() is None:
            stop_group(self.process)
