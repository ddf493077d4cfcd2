"""What the image-based runtimes (docker, containerd) share.

One task attempt is a main container created from the task image, plus one short-lived container
per build step (the pip install, then each setup command) from the same image and with the same
mounts, env and limits. The worker's workdir holding the bundle is mounted at the same path inside
every one of them and is their working directory, so paths the worker computes (the callable's
pickle, the result file, PYTHONPATH) mean the same thing inside and outside; anything a build step
leaves in the workdir (installed packages, generated files) is there for the command.

A runtime subclasses `EngineContainerHandle` and implements the engine calls (`_start_main`,
`_await_main_exit`, `_stop`, `_run_step`, `_engine_stats`, `_remove`); the phases, the build loop,
the timeout, kill semantics and the wording of failures live here so that both engines report the
same things the same way as the process runtime.
"""

from __future__ import annotations

import math
import re
import shlex
import signal
import threading
import uuid
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import datetime
from typing import NoReturn

from iris.cluster.runtime.process import PACKAGES_DIRNAME, TIMEOUT_GRACE_SECONDS
from iris.cluster.runtime.types import (
    BuildFailedError,
    ContainerConfig,
    ContainerError,
    ContainerPhase,
    ContainerStats,
    ContainerStatus,
    LogLine,
    LogSource,
)
from iris.cluster.task_env import TPU_RUNTIME_ENV
from iris.time import now_ms

LABEL_ROLE = "iris.role"
ROLE_MAIN = "main"
ROLE_SETUP = "setup"

# seed 004's container settings for TPU tasks.
TPU_DEVICE = "/dev/vfio"
TPU_SHM_BYTES = 100 * 1024**3
TPU_MEMLOCK_BYTES = 68719476736
TPU_CAPABILITIES = ("SYS_RESOURCE",)

# kill() waits this long past the engine's own stop for the monitor to record the exit.
_EXIT_SETTLE_SECONDS = 5.0
_BUILD_TAIL_LINES = 20
_MIB = 1024 * 1024

# The image's python installs the packages; images without pip (uv-based ones) use uv. "$0" is the
# target directory, the packages follow.
_PIP_SCRIPT = (
    'if python3 -m pip --version >/dev/null 2>&1; then '
    'exec python3 -m pip install --disable-pip-version-check --no-warn-script-location --target "$0" "$@"; '
    'elif command -v uv >/dev/null 2>&1; then exec uv pip install --python python3 --target "$0" "$@"; '
    'else echo "the task image has neither pip nor uv to install packages with" >&2; exit 127; fi'
)


def container_name(config: ContainerConfig) -> str:
    """A name both engines accept and a person can trace back to the task: iris-<task>-<attempt>-<random>."""
    task = re.sub(r"[^A-Za-z0-9_.-]+", "-", config.task_id).strip("-._")[:64] or "task"
    return f"iris-{task}-{config.attempt_id}-{uuid.uuid4().hex[:8]}"


_RFC3339 = re.compile(r"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(?:\.(\d+))?(Z|[+-]\d\d:\d\d)?")


def parse_rfc3339_ms(text: str) -> int:
    """Epoch milliseconds of an engine timestamp such as 2024-05-01T10:00:00.123456789Z.

    Engines write nanoseconds, which Python's parser does not take, so the fraction is read apart.
    """
    match = _RFC3339.fullmatch(text.strip())
    if match is None:
        raise ValueError(f"not an RFC 3339 timestamp: {text!r}")
    seconds, fraction, zone = match.groups()
    offset = "+00:00" if zone in (None, "Z") else zone
    moment = datetime.fromisoformat(seconds + offset)
    return int(moment.timestamp()) * 1000 + int(((fraction or "") + "000")[:3])


def container_env(config: ContainerConfig) -> dict[str, str]:
    """The env of every container of an attempt: the config's on top of the image's."""
    env = {"PYTHONUNBUFFERED": "1"}
    if config.tpu_variant:
        env.update(TPU_RUNTIME_ENV)
    env.update(config.env)
    if config.pip_packages:
        packages = str(config.workdir / PACKAGES_DIRNAME)
        env["PYTHONPATH"] = ":".join(p for p in (packages, config.env.get("PYTHONPATH", "")) if p)
    return env


def build_steps(config: ContainerConfig) -> list[tuple[str, list[str]]]:
    """(what the build log shows, argv) for each step: the pip install, then the setup commands."""
    steps: list[tuple[str, list[str]]] = []
    if config.pip_packages:
        target = str(config.workdir / PACKAGES_DIRNAME)
        steps.append(
            ("pip install " + shlex.join(config.pip_packages), ["sh", "-c", _PIP_SCRIPT, target, *config.pip_packages])
        )
    steps.extend((command, ["bash", "-c", command]) for command in config.setup_commands)
    return steps


def describe_exit(exit_code: int) -> str:
    """Engines report a command killed by signal N as exit code 128+N (their init does the mapping)."""
    if exit_code == 0:
        return ""
    signum = exit_code - 128
    if 0 < signum < 65:
        try:
            name = f" ({signal.Signals(signum).name})"
        except ValueError:
            name = ""
        return f"killed by signal {signum}{name}"
    return f"exited with code {exit_code}"


def oom_error(memory_bytes: int) -> str:
    if memory_bytes:
        return f"out of memory: exceeded the {memory_bytes // _MIB}MB limit"
    return "out of memory"


def cpu_percent(previous: tuple[int, int] | None, current: tuple[int, int]) -> float:
    """Percent of one core used between two (cpu nanoseconds, wall nanoseconds) samples."""
    if previous is None:
        return 0.0
    cpu_delta, wall_delta = current[0] - previous[0], current[1] - previous[1]
    if wall_delta <= 0 or cpu_delta < 0:
        return 0.0
    return 100.0 * cpu_delta / wall_delta


def stop_timeout_seconds(grace_seconds: float) -> int:
    """Engines take whole seconds; never round a grace down to an immediate SIGKILL."""
    return max(0, math.ceil(grace_seconds))


@dataclass
class EngineExit:
    """How a container ended, in the engine's terms."""

    exit_code: int | None
    oom_killed: bool = False
    started_at_ms: int | None = None
    finished_at_ms: int | None = None
    # The engine's explanation when the command never ran, e.g. "exec: foo: not found".
    message: str = ""


class LineAssembler:
    """Joins an engine's partial chunks of one stream into whole lines."""

    def __init__(self, emit: Callable[[str, int], None]) -> None:
        self._emit = emit
        self._pending = ""
        self._pending_ms = 0

    def feed(self, text: str, timestamp_ms: int, complete: bool) -> None:
        if not self._pending:
            self._pending_ms = timestamp_ms
        self._pending += text
        if complete:
            self._flush()

    def close(self) -> None:
        if self._pending:
            self._flush()

    def _flush(self) -> None:
        data, self._pending = self._pending.removesuffix("\r"), ""
        self._emit(data, self._pending_ms)


class EngineContainerHandle(ABC):
    """The ContainerHandle protocol on top of a container engine; see the module docstring."""

    def __init__(self, config: ContainerConfig, container_id: str, on_cleanup: Callable[[str], None]) -> None:
        self.container_id = container_id
        self._config = config
        self._on_cleanup = on_cleanup
        self._lock = threading.Lock()
        self._lines: list[LogLine] = []
        self._status = ContainerStatus(phase=ContainerPhase.CREATED)
        self._built = not (config.setup_commands or config.pip_packages)
        self._kill_requested = False
        self._running_step: str | None = None
        self._exited = threading.Event()
        self._monitor: threading.Thread | None = None
        self._removed = False

    # -- engine calls ---------------------------------------------------------------------------

    @abstractmethod
    def _start_main(self) -> None:
        """Start the main container; raise ContainerError with the engine's reason if it cannot."""

    @abstractmethod
    def _await_main_exit(self) -> EngineExit:
        """Block until the main container exited, its output is in the log, and say how it ended."""

    @abstractmethod
    def _stop(self, container: str, grace_seconds: float) -> None:
        """SIGTERM `container` (the main container's name or a step's), SIGKILL it after the grace.

        Returns once it exited; a container that is not running is left alone.
        """

    @abstractmethod
    def _run_step(self, index: int, argv: list[str], on_output: Callable[[str, int], None]) -> EngineExit:
        """Run one build step to completion in its own container, passing each output line on.

        Calls `_step_started(name)` once the container runs so that kill() can stop it.
        """

    @abstractmethod
    def _engine_stats(self) -> ContainerStats: ...

    @abstractmethod
    def _remove(self) -> None:
        """Remove every engine resource of this attempt (the workdir is not one)."""

    def _refresh_logs(self) -> None:
        """Pull output the engine holds but has not handed over yet; engines that push need nothing."""

    # -- for engines ----------------------------------------------------------------------------

    def _append(self, source: LogSource, data: str, timestamp_ms: int) -> None:
        with self._lock:
            self._lines.append(LogLine(timestamp_ms=timestamp_ms, source=source, data=data))

    def _step_started(self, name: str) -> None:
        with self._lock:
            self._running_step = name
            killed = self._kill_requested
        if killed:
            self._stop(name, 0)

    # -- protocol -------------------------------------------------------------------------------

    def build(self) -> None:
        with self._lock:
            if self._status.phase != ContainerPhase.CREATED:
                raise ContainerError(f"cannot build container {self.container_id} in phase {self._status.phase}")
            if self._built:
                return
            self._status.phase = ContainerPhase.BUILDING
        for index, (display, argv) in enumerate(build_steps(self._config)):
            with self._lock:
                killed = self._kill_requested
                if not killed:
                    self._lines.append(LogLine(timestamp_ms=now_ms(), source="build", data=f"$ {display}"))
                first_line = len(self._lines)
            if killed:
                self._fail_build(display, 128 + signal.SIGKILL, [], error="killed during build")
            try:
                result = self._run_step(index, argv, lambda data, ts: self._append("build", data, ts))
            except ContainerError as exc:
                self._fail_build(display, 127, [str(exc)])
            finally:
                with self._lock:
                    self._running_step = None
            with self._lock:
                tail = [line.data for line in self._lines[first_line:]][-_BUILD_TAIL_LINES:]
                killed = self._kill_requested
            exit_code = result.exit_code if result.exit_code is not None else 127
            if result.message and result.message not in tail:
                tail.append(result.message)
            if killed:
                self._fail_build(display, exit_code, tail, error="killed during build")
            if result.oom_killed:
                self._fail_build(display, exit_code, tail, error=oom_error(self._config.memory_bytes))
            if exit_code != 0:
                self._fail_build(display, exit_code, tail)
        with self._lock:
            self._built = True
            self._status.phase = ContainerPhase.CREATED

    def run(self) -> None:
        with self._lock:
            if self._status.phase != ContainerPhase.CREATED:
                raise ContainerError(f"cannot run container {self.container_id} in phase {self._status.phase}")
            if not self._built:
                raise ContainerError(f"container {self.container_id} has setup steps: build() must succeed first")
            if self._kill_requested:
                raise ContainerError(f"container {self.container_id} was killed")
            self._status.phase = ContainerPhase.RUNNING
        started_ms = now_ms()
        try:
            self._start_main()
        except ContainerError as exc:
            with self._lock:
                self._finish_locked(127, f"failed to start {self._config.command[0]!r}: {exc}")
            raise
        with self._lock:
            self._status.started_at_ms = started_ms
            killed = self._kill_requested
        if killed:
            # kill() came while the engine was starting the container and found nothing to stop.
            self._stop(self.container_id, 0)
        self._monitor = threading.Thread(target=self._watch, name=f"monitor-{self.container_id}", daemon=True)
        self._monitor.start()
        if self._config.timeout_seconds is not None:
            threading.Thread(
                target=self._enforce_timeout,
                args=(self._config.timeout_seconds,),
                name=f"timeout-{self.container_id}",
                daemon=True,
            ).start()

    def run_to_exit(self, on_running: Callable[[], None], poll_s: float, on_poll: Callable[[], None]) -> None:
        self.run()
        on_running()
        while self.wait(poll_s).phase != ContainerPhase.EXITED:
            on_poll()

    def status(self) -> ContainerStatus:
        with self._lock:
            return replace(self._status)

    def logs(self, start_line: int = 0) -> list[LogLine]:
        if self.status().phase == ContainerPhase.RUNNING:
            self._refresh_logs()
        with self._lock:
            return self._lines[start_line:]

    def stats(self) -> ContainerStats:
        if self.status().phase != ContainerPhase.RUNNING:
            return ContainerStats(memory_bytes=0, cpu_percent=0.0, process_count=0)
        try:
            return self._engine_stats()
        except ContainerError:
            # The container exited between the phase check and the engine call.
            return ContainerStats(memory_bytes=0, cpu_percent=0.0, process_count=0)

    def kill(self, grace_seconds: float) -> None:
        with self._lock:
            self._kill_requested = True
            phase = self._status.phase
            step = self._running_step
            if phase == ContainerPhase.CREATED:
                self._finish_locked(None, "killed before start")
                return
        if phase == ContainerPhase.BUILDING:
            if step is not None:
                self._stop(step, grace_seconds)
            self._exited.wait(_EXIT_SETTLE_SECONDS)
            return
        if phase == ContainerPhase.RUNNING:
            self._stop(self.container_id, grace_seconds)
            self._exited.wait(_EXIT_SETTLE_SECONDS)

    def wait(self, timeout: float | None = None) -> ContainerStatus:
        self._exited.wait(timeout)
        return self.status()

    def cleanup(self) -> None:
        self.kill(grace_seconds=0)
        if self._monitor is not None:
            self._monitor.join(_EXIT_SETTLE_SECONDS)
        with self._lock:
            if self._removed:
                return
            self._removed = True
        try:
            self._remove()
        finally:
            self._on_cleanup(self.container_id)

    # -- internals ------------------------------------------------------------------------------

    def _watch(self) -> None:
        try:
            result = self._await_main_exit()
        except ContainerError as exc:
            result = EngineExit(exit_code=None, message=str(exc))
        with self._lock:
            if result.started_at_ms:
                self._status.started_at_ms = result.started_at_ms
            self._status.oom_killed = result.oom_killed
            self._finish_locked(result.exit_code, self._exit_error(result), result.finished_at_ms)

    def _exit_error(self, result: EngineExit) -> str:
        if result.oom_killed:
            return oom_error(self._config.memory_bytes)
        if self._status.timed_out:
            return f"killed after timeout of {self._config.timeout_seconds:g}s"
        if result.exit_code is None:
            return result.message or "the container ended without an exit code"
        error = describe_exit(result.exit_code)
        if result.exit_code in (126, 127):
            # "command not found" and "not executable": the image's init says which command.
            detail = result.message or next(
                (line.data for line in reversed(self._lines) if line.source == "stderr" and line.data.strip()), ""
            )
            if detail:
                error += f": {detail}"
        return error

    def _enforce_timeout(self, timeout: float) -> None:
        if self._exited.wait(timeout):
            return
        with self._lock:
            self._status.timed_out = True
        self._stop(self.container_id, TIMEOUT_GRACE_SECONDS)

    def _fail_build(self, command: str, exit_code: int, tail: list[str], error: str = "") -> NoReturn:
        failure = BuildFailedError(command, exit_code, tail)
        with self._lock:
            self._finish_locked(exit_code, error or str(failure))
        raise failure

    def _finish_locked(self, exit_code: int | None, error: str, finished_at_ms: int | None = None) -> None:
        if self._status.phase == ContainerPhase.EXITED:
            return
        self._status.phase = ContainerPhase.EXITED
        self._status.exit_code = exit_code
        self._status.error = error
        finished = finished_at_ms or now_ms()
        if self._status.started_at_ms is not None:
            finished = max(finished, self._status.started_at_ms)
        self._status.finished_at_ms = finished
        self._exited.set()


def check_config(config: ContainerConfig, runtime_name: str) -> None:
    """What an image-based runtime needs before it creates anything."""
    if not config.workdir.is_dir():
        raise ContainerError(f"workdir {config.workdir} does not exist")
    if not config.image:
        raise ContainerError(
            f"the {runtime_name} runtime runs tasks in a task image, and none is set: "
            "set defaults.bootstrap.task_image in the cluster config"
        )
