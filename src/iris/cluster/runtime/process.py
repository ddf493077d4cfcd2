"""ProcessRuntime: runs each task attempt as a local process group (Linux only).

A "container" here is the command started in its own session in the task's workdir, sharing the
host's network and filesystem. The runtime enforces the memory limit (by sampling the RSS of the
process tree) and the timeout itself; cpu_millicores, disk_bytes, image and accelerator fields
are not enforced because there is nothing to isolate them with.

State lives in `<state_dir>/containers/`: the runtime's journal (process_journal.py: each
container before anything is forked for it, its pid and create time once forked, its end) lets a
later worker process find and kill what this one left running, next to `<id>.stdout.log`,
`<id>.stderr.log` and `<id>.build.log` (each created with its first line). Every process of a
container carries its id in the environment (CONTAINER_MARKER_ENV), so a worker killed between
fork and recording the pid still leaves processes a later one can find.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import functools
import heapq
import importlib.util
import itertools
import json
import os
import re
import selectors
import shlex
import shutil
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import IO, NoReturn, get_args

import psutil

from iris.cluster.reused_threads import ReusedThreads
from iris.cluster.runtime import task_launcher
from iris.cluster.runtime.process_journal import JOURNAL_SUFFIX, ContainerJournal, open_containers
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
from iris.time import now_ms

MONITOR_INTERVAL_SECONDS = 0.1
TIMEOUT_GRACE_SECONDS = 5.0
PACKAGES_DIRNAME = ".iris-packages"

# How long kill() keeps waiting after SIGKILL; SIGKILL cannot be caught, so this only covers
# the kernel tearing the processes down and the readers draining the pipes.
_KILL_SETTLE_SECONDS = 1.0
# Pipes stay open while any process holding them lives; a process that left the group (setsid)
# must not stall the exit report forever.
_READER_DRAIN_SECONDS = 5.0
_READ_CHUNK_BYTES = 64 * 1024
_BUILD_TAIL_LINES = 20
# Bounds memory for output without newlines (progress bars, binary data): longer runs are split.
_MAX_LINE_BYTES = 64 * 1024
# psutil derives create_time from boot time and clock ticks; two readings of the same process
# agree far more closely than this, while a recycled pid starts much later.
_CREATE_TIME_TOLERANCE_SECONDS = 0.05
_MIB = 1024 * 1024

_PR_SET_PDEATHSIG = 1
_LIBC = ctypes.CDLL(None, use_errno=True)

_BASE_ENV_NAMES = frozenset(
    {
        "PATH",
        "HOME",
        "USER",
        "LOGNAME",
        "SHELL",
        "LANG",
        "LANGUAGE",
        "TZ",
        "TERM",
        "TMPDIR",
        "HTTP_PROXY",
        "HTTPS_PROXY",
        "NO_PROXY",
        "http_proxy",
        "https_proxy",
        "no_proxy",
        "SSL_CERT_FILE",
        "SSL_CERT_DIR",
    }
)


def _base_env() -> dict[str, str]:
    """The part of the worker's environment a task inherits, like a container image's defaults."""
    env = {k: v for k, v in os.environ.items() if k in _BASE_ENV_NAMES or k.startswith("LC_")}
    # Tasks run `python3 ...` and expect the interpreter (and venv) the worker itself runs with.
    python_dir = os.path.dirname(sys.executable)
    rest = [p for p in env.get("PATH", os.defpath).split(os.pathsep) if p and p != python_dir]
    env["PATH"] = os.pathsep.join([python_dir, *rest])
    # Without this, Python buffers stdout into a pipe and logs arrive only when the task exits.
    env["PYTHONUNBUFFERED"] = "1"
    return env


# Inherited by every process a container starts; names the container whose processes they are.
CONTAINER_MARKER_ENV = "IRIS_PROCESS_CONTAINER_ID"


def _container_env(base_env: dict[str, str], config: ContainerConfig, container_id: str) -> dict[str, str]:
    env = {**base_env, **config.env, CONTAINER_MARKER_ENV: container_id}
    if config.pip_packages:
        packages = str(config.workdir / PACKAGES_DIRNAME)
        env["PYTHONPATH"] = os.pathsep.join(p for p in (packages, config.env.get("PYTHONPATH", "")) if p)
    return env


def _log_path(containers_dir: Path, container_id: str, source: LogSource) -> Path:
    return containers_dir / f"{container_id}.{source}.log"


def _container_id(config: ContainerConfig) -> str:
    task = re.sub(r"[^A-Za-z0-9_.-]+", "-", config.task_id).strip("-")[:64] or "task"
    return f"iris-{task}-{config.attempt_id}-{uuid.uuid4().hex[:8]}"


def _pip_install_command(target: Path, packages: list[str]) -> list[str]:
    """Install into `target` for the worker's interpreter, with pip if it has it, else with uv.

    uv-managed virtualenvs ship without pip, so `python -m pip` alone would fail there.
    """
    if importlib.util.find_spec("pip") is not None:
        return [
            sys.executable,
            "-m",
            "pip",
            "install",
            "--disable-pip-version-check",
            "--target",
            str(target),
            *packages,
        ]
    uv = os.environ.get("UV") or shutil.which("uv")
    if uv is None:
        raise ContainerError(
            f"cannot install pip packages: {sys.executable} has no pip and uv is not on PATH"
        )
    return [uv, "pip", "install", "--python", sys.executable, "--target", str(target), *packages]


SETPRIV = shutil.which("setpriv")
# setpriv ... <worker pid> <argv>: SIGKILL on the forking thread's exit, then exec argv unless
# the parent is no longer the worker (it died before the signal was set). What the compiled
# launcher does in one exec, for hosts without a C compiler.
_PDEATHSIG_PREFIX = ["--pdeathsig", "KILL", "--", "/bin/sh", "-c", '[ "$PPID" = "$0" ] && exec "$@"']


def _resolve_command(command: str, cwd: str, path: str) -> str:
    """The file Popen would execute for `command` in `cwd`, or what it would raise: behind a
    launcher a command that cannot start would otherwise be only an exit status of 127."""
    if os.sep in command:
        candidate = os.path.join(cwd, command)
        if not os.path.isfile(candidate):
            raise FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), command)
        if not os.access(candidate, os.X_OK):
            raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), command)
        return command
    # As Popen: PATH is searched after changing into cwd, so relative entries are relative to it.
    for entry in path.split(os.pathsep):
        candidate = os.path.join(entry, command)
        found = os.path.join(cwd, candidate)
        # access() first: for the entries that lack the command it answers without raising.
        if os.access(found, os.X_OK) and os.path.isfile(found):
            return candidate
    raise FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), command)


def launch_argv(argv: list[str], cwd: str, path: str) -> tuple[list[str], Callable[[], None] | None]:
    """What to Popen for `argv`, and the preexec_fn it needs: the task must die with the worker.

    Without preexec_fn Popen uses vfork, about a sixth of the CPU of forking the whole worker,
    so the parent death signal is armed after the fork by a launcher that also makes sure the
    parent did not die before it was armed, as _pdeathsig_preexec does."""
    launcher = task_launcher.launcher()
    if launcher is not None:
        return [launcher, str(os.getpid()), _resolve_command(argv[0], cwd, path), *argv], None
    if SETPRIV is not None:
        _resolve_command(argv[0], cwd, path)
        return [SETPRIV, *_PDEATHSIG_PREFIX, str(os.getpid()), *argv], None
    return argv, _pdeathsig_preexec(os.getpid())


def _pdeathsig_preexec(parent_pid: int) -> Callable[[], None]:
    def preexec() -> None:
        _LIBC.prctl(_PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0)
        # If the parent died between fork and prctl no signal will ever come.
        if os.getppid() != parent_pid:
            os.kill(os.getpid(), signal.SIGKILL)

    return preexec


def _read_children() -> dict[int, list[int]]:
    """Every process's children, from one pass over /proc."""
    children: dict[int, list[int]] = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as stat:
                line = stat.read()
        except OSError:
            continue  # gone since the listing
        # "pid (comm) state ppid ...": comm may hold spaces and parentheses, the last ")" ends it.
        ppid = int(line[line.rfind(b")") + 2 :].split(b" ", 2)[1])
        children.setdefault(ppid, []).append(int(name))
    return children


class _ProcessTable:
    """Which process is whose child, read from /proc at most once per MONITOR_INTERVAL_SECONDS.

    psutil's children(recursive=True) reads every process's stat file on each call: with a few
    hundred processes on the host, several ms of CPU paid per container per limit check and per
    heartbeat. One reading serves every container of the worker; a child younger than the
    reading is found by the next one."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._read_at = -MONITOR_INTERVAL_SECONDS
        self._children: dict[int, list[int]] = {}

    def descendants(self, pid: int) -> list[int]:
        with self._lock:
            now = time.monotonic()
            if now - self._read_at >= MONITOR_INTERVAL_SECONDS:
                self._children = _read_children()
                self._read_at = now
            children = self._children
        found: list[int] = []
        stack = [pid]
        while stack:
            for child in children.get(stack.pop(), ()):
                found.append(child)
                stack.append(child)
        return found


_PROCESS_TABLE = _ProcessTable()


def _tree(pid: int) -> list[psutil.Process]:
    try:
        root = psutil.Process(pid)
    except psutil.NoSuchProcess:
        return []
    tree = [root]
    for descendant in _PROCESS_TABLE.descendants(pid):
        try:
            proc = psutil.Process(descendant)
        except psutil.NoSuchProcess:
            continue
        # As psutil's children(): a pid recycled since the reading is younger than its "parent".
        if proc.create_time() >= root.create_time():
            tree.append(proc)
    return tree


def _tree_rss(pid: int) -> int:
    total = 0
    for proc in _tree(pid):
        try:
            total += proc.memory_info().rss
        except psutil.NoSuchProcess:
            continue
    return total


_CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
# /proc/<pid>/stat is one line: the command name (at most 64 bytes) and 51 numbers of at most 20 digits.
_PROC_STAT_BYTES = 4096


def _create_time(pid: int) -> float:
    """What psutil.Process(pid).create_time() returns, from one read of /proc/<pid>/stat: psutil
    also reads /proc/stat for the boot time on every call, which the kernel assembles from every
    CPU's counters."""
    # os.open and one read, not open(): a buffered file costs four more system calls (fstat,
    # ioctl, two lseeks) and a second read for its end.
    fd = os.open(f"/proc/{pid}/stat", os.O_RDONLY | os.O_CLOEXEC)
    try:
        line = os.read(fd, _PROC_STAT_BYTES)
    finally:
        os.close(fd)
    # Field 22, starttime, counted after "(comm)", which may hold spaces and parentheses.
    start_ticks = int(line[line.rfind(b")") + 2 :].split(b" ", 20)[19])
    return start_ticks / _CLOCK_TICKS + _boot_time()


@functools.cache
def _boot_time() -> float:
    return psutil.boot_time()


@functools.cache
def _devnull() -> int:
    """Every task's standard input, opened once for the worker's life (Popen's DEVNULL opens and
    closes it per process); close-on-exec, like every descriptor of the worker a task must not get."""
    return os.open(os.devnull, os.O_RDONLY | os.O_CLOEXEC)


def _describe_exit(returncode: int) -> tuple[int, str]:
    if returncode < 0:
        signum = -returncode
        try:
            name = f" ({signal.Signals(signum).name})"
        except ValueError:
            name = ""
        return 128 + signum, f"killed by signal {signum}{name}"
    if returncode > 0:
        return returncode, f"exited with code {returncode}"
    return 0, ""


class _Pipe:
    """One output pipe of a process, read only when the loop's poll says it is ready (so a read
    never blocks, and the pipe can stay in blocking mode: two fcntl calls fewer per pipe), split
    into lines like readline(), and copied to a log file opened at the first line: most trivial
    tasks print nothing, and creating and deleting two empty files cost more than starting their
    process."""

    def __init__(self, fd: int, source: LogSource, log_path: Path) -> None:
        self.fd = fd
        self.source: LogSource = source
        self.log_path = log_path
        self.log_file: IO[str] | None = None
        self.pending = b""

    def copy_to_log(self, text: str) -> None:
        if self.log_file is None:
            self.log_file = open(self.log_path, "a", encoding="utf-8")
        self.log_file.write(text)
        self.log_file.flush()

    def close(self) -> None:
        os.close(self.fd)
        if self.log_file is not None:
            self.log_file.close()


class _Supervised:
    """One process of a container (a build step or the command) and what its loop watches."""

    def __init__(
        self,
        proc: subprocess.Popen[bytes],
        loop: _ProcessLoop,
        create_time: float,
        deadline: float | None,
        is_command: bool,
    ) -> None:
        self.proc = proc
        self.loop = loop
        self.create_time = create_time
        # The container's command, whose end ends the container; otherwise a build step.
        self.is_command = is_command
        self.deadline = deadline
        self.sigkill_at: float | None = None
        self.pipes: dict[int, _Pipe] = {}
        # The Popen return code, once the process was reaped and its pipes drained.
        self.returncode: int | None = None
        self.reaped = False
        # Reaped and its pipes drained; set and read only by the thread that runs its loop.
        self.done = False


class _ProcessLoop:
    """One process's pidfd and output pipes in one selector, with timers for its limits, run by
    the thread that forked it (PR_SET_PDEATHSIG fires when that *thread* exits): a monitor
    thread for the command started by run(), run_to_exit()'s caller for one started by it,
    build()'s caller for a build step.

    A thread per pipe besides the monitor (three threads for a command) cost a trivial task more
    than its process did: their starts and hand-offs under a busy interpreter."""

    def __init__(self) -> None:
        # poll(2) for a handful of fds: no epoll instance to create and close per process.
        self._selector = selectors.PollSelector()
        self._timers: list[tuple[float, int, Callable[[], None]]] = []
        self._timer_order = itertools.count()

    def watch(self, fd: int, on_ready: Callable[[], None]) -> None:
        self._selector.register(fd, selectors.EVENT_READ, on_ready)

    def unwatch(self, fd: int) -> None:
        self._selector.unregister(fd)

    def at(self, when: float, fn: Callable[[], None]) -> None:
        heapq.heappush(self._timers, (when, next(self._timer_order), fn))

    def run_until_done(self, supervised: _Supervised) -> None:
        try:
            while not supervised.done:
                timeout = max(0.0, self._timers[0][0] - time.monotonic()) if self._timers else None
                for key, _ in self._selector.select(timeout):
                    key.data()
                now = time.monotonic()
                while self._timers and self._timers[0][0] <= now and not supervised.done:
                    heapq.heappop(self._timers)[2]()
        finally:
            self._selector.close()
            # The timers' callbacks hold the process they watch: let it go with the loop.
            self._timers.clear()


# A thread runs one process's loop until the process was reaped, and only then the next one's:
# PR_SET_PDEATHSIG fires when the forking thread ends, and an idle thread has no child left.
_MONITOR_THREADS = ReusedThreads("process-monitor")


class ProcessContainerHandle:
    def __init__(
        self,
        config: ContainerConfig,
        container_id: str,
        containers_dir: Path,
        journal: ContainerJournal,
        base_env: dict[str, str],
    ) -> None:
        self.container_id = container_id
        self._config = config
        self._containers_dir = containers_dir
        self._journal = journal
        self._env = _container_env(base_env, config, container_id)
        self._lock = threading.Lock()
        # Held while signalling or reaping, so a signal never reaches a recycled pid/pgid: the
        # group leader stays a zombie (pid reserved) until the whole group has been killed.
        self._signal_lock = threading.Lock()
        self._stats_lock = threading.Lock()
        self._lines: list[LogLine] = []
        self._status = ContainerStatus(phase=ContainerPhase.CREATED)
        self._oom_error = ""
        self._built = not (config.setup_commands or config.pip_packages)
        self._current: _Supervised | None = None
        self._kill_requested = False
        self._exited = threading.Event()
        self._stats_procs: dict[int, psutil.Process] = {}
        # The log files its processes' output created: cleanup removes these, not every name a
        # log could have (three failed unlinks for a task that printed nothing).
        self._log_files: list[Path] = []

    # -- protocol -------------------------------------------------------------------------------

    def build(self) -> None:
        with self._lock:
            if self._status.phase != ContainerPhase.CREATED:
                raise ContainerError(
                    f"cannot build container {self.container_id} in phase {self._status.phase}"
                )
            if self._built:
                return
            self._status.phase = ContainerPhase.BUILDING
        steps: list[tuple[str, list[str]]] = []
        if self._config.pip_packages:
            try:
                argv = _pip_install_command(
                    self._config.workdir / PACKAGES_DIRNAME, self._config.pip_packages
                )
            except ContainerError as e:
                self._fail_build("pip install " + shlex.join(self._config.pip_packages), 127, [str(e)])
            steps.append((shlex.join(argv), argv))
        steps.extend((command, ["bash", "-c", command]) for command in self._config.setup_commands)
        for display, argv in steps:
            self._run_build_step(display, argv)
        with self._lock:
            self._built = True
            self._status.phase = ContainerPhase.CREATED

    def run(self) -> None:
        self._enter_running()
        started = threading.Event()
        spawn_errors: list[ContainerError] = []
        _MONITOR_THREADS.run(lambda: self._monitor(started, spawn_errors))
        started.wait()
        if spawn_errors:
            raise spawn_errors[0]

    def run_to_exit(self, on_running: Callable[[], None], poll_s: float, on_poll: Callable[[], None]) -> None:
        """The command forked and watched on the calling thread: no monitor thread to hand it to and
        to hear its start and end from (for a trivial task those hand-overs between threads cost
        more than the rest of its supervision). The caller's thread is the one the parent death
        signal follows, and it is here until the command was reaped."""
        self._enter_running()
        loop = _ProcessLoop()
        current = self._spawn_command(loop)
        on_running()

        def poll() -> None:
            on_poll()
            loop.at(time.monotonic() + poll_s, poll)

        loop.at(time.monotonic() + poll_s, poll)
        loop.run_until_done(current)

    def status(self) -> ContainerStatus:
        with self._lock:
            return replace(self._status)

    def logs(self, start_line: int = 0) -> list[LogLine]:
        with self._lock:
            return self._lines[start_line:]

    def stats(self) -> ContainerStats:
        with self._lock:
            current = self._current
        with self._stats_lock:
            if current is None or current.proc.returncode is not None:
                self._stats_procs = {}
                return ContainerStats(memory_bytes=0, cpu_percent=0.0, process_count=0)
            # cpu_percent measures since the previous call on the same psutil.Process object.
            known: dict[int, psutil.Process] = {}
            memory, cpu = 0, 0.0
            for proc in _tree(current.proc.pid):
                cached = self._stats_procs.get(proc.pid)
                if cached is None or cached != proc:
                    cached = proc
                try:
                    memory += cached.memory_info().rss
                    cpu += cached.cpu_percent(interval=None)
                except psutil.NoSuchProcess:
                    continue
                known[proc.pid] = cached
            self._stats_procs = known
            return ContainerStats(memory_bytes=memory, cpu_percent=cpu, process_count=len(known))

    def kill(self, grace_seconds: float) -> None:
        with self._lock:
            self._kill_requested = True
            current = self._current
            if self._status.phase == ContainerPhase.CREATED:
                self._finish_locked(exit_code=None, error="killed before start")
                return
        if current is None:
            # Between build steps or before the command was forked: the flag stops them.
            self._exited.wait(_KILL_SETTLE_SECONDS)
            return
        self._signal(current, signal.SIGTERM)
        if self._exited.wait(grace_seconds):
            return
        self._signal(current, signal.SIGKILL)
        self._exited.wait(_KILL_SETTLE_SECONDS)

    def wait(self, timeout: float | None = None) -> ContainerStatus:
        self._exited.wait(timeout)
        return self.status()

    def cleanup(self) -> None:
        self.kill(grace_seconds=0)
        with self._lock:
            log_files, self._log_files = self._log_files, []
        for path in log_files:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(path)
        # Last: a container whose end is recorded has nothing left for a later worker to remove.
        self._journal.ended(self.container_id)

    # -- processes ------------------------------------------------------------------------------

    def _enter_running(self) -> None:
        with self._lock:
            if self._status.phase != ContainerPhase.CREATED:
                raise ContainerError(
                    f"cannot run container {self.container_id} in phase {self._status.phase}"
                )
            if not self._built:
                raise ContainerError(
                    f"container {self.container_id} has setup steps: build() must succeed first"
                )
            self._status.phase = ContainerPhase.RUNNING

    def _monitor(self, started: threading.Event, spawn_errors: list[ContainerError]) -> None:
        loop = _ProcessLoop()
        try:
            current = self._spawn_command(loop)
        except ContainerError as e:
            spawn_errors.append(e)
            return
        finally:
            started.set()
        loop.run_until_done(current)

    def _spawn_command(self, loop: _ProcessLoop) -> _Supervised:
        """Fork the container's command, watched by `loop`; when it cannot start, the container ends
        with exit code 127 and ContainerError says why."""
        timeout = self._config.timeout_seconds
        deadline = None if timeout is None else time.monotonic() + timeout
        try:
            return self._spawn(loop, self._config.command, merge_output=False, deadline=deadline)
        # Not only OSError: Popen raises ValueError for an environment it cannot pass.
        except Exception as e:
            with self._lock:
                self._finish_locked(exit_code=127, error=f"failed to start {self._config.command[0]!r}: {e}")
                error = self._status.error
            raise ContainerError(error) from e

    def _spawn(
        self, loop: _ProcessLoop, argv: list[str], merge_output: bool, deadline: float | None
    ) -> _Supervised:
        """Fork `argv` in its own session, watched by `loop`, and make it the `_current` process."""
        spawned, preexec = launch_argv(argv, str(self._config.workdir), self._env.get("PATH", os.defpath))
        sources: list[LogSource] = ["build"] if merge_output else ["stdout", "stderr"]
        # The pipes are made here and handed to Popen as descriptors: Popen's own come wrapped in
        # buffered files that cost three system calls each and are never read through.
        pipes = [os.pipe() for _ in sources]
        try:
            proc = subprocess.Popen(
                spawned,
                cwd=self._config.workdir,
                env=self._env,
                stdin=_devnull(),
                stdout=pipes[0][1],
                stderr=subprocess.STDOUT if merge_output else pipes[1][1],
                start_new_session=True,
                # preexec_fn is unsafe only if it touches locks another thread may hold at fork; this
                # one only makes raw syscalls through a libc handle loaded at import.
                preexec_fn=preexec,
            )
        except BaseException:
            for fd in itertools.chain.from_iterable(pipes):
                os.close(fd)
            raise
        for _, write_end in pipes:
            os.close(write_end)
        # The child cannot be reaped before the loop runs, so its /proc entry is still there.
        create_time = _create_time(proc.pid)
        current = _Supervised(proc, loop, create_time, deadline, is_command=not merge_output)
        for (read_end, _), source in zip(pipes, sources, strict=True):
            watched = _Pipe(read_end, source, _log_path(self._containers_dir, self.container_id, source))
            current.pipes[watched.fd] = watched
            loop.watch(watched.fd, lambda w=watched: self._read(current, w))
        pidfd = os.pidfd_open(proc.pid)
        # The pidfd becomes readable when the child exits; it stays a zombie until reaped.
        loop.watch(pidfd, lambda: self._reap(current, pidfd))
        loop.at(time.monotonic() + MONITOR_INTERVAL_SECONDS, lambda: self._check_limits(current))
        self._journal.forked(self.container_id, proc.pid, create_time)
        with self._lock:
            self._current = current
            if not merge_output:
                self._status.started_at_ms = now_ms()
            kill_requested = self._kill_requested
        if kill_requested:
            self._signal(current, signal.SIGKILL)
        return current

    def _read(self, current: _Supervised, pipe: _Pipe) -> None:
        chunk = os.read(pipe.fd, _READ_CHUNK_BYTES)
        *complete, rest = (pipe.pending + chunk).split(b"\n")
        # Lines as readline(_MAX_LINE_BYTES) cuts them: at each newline, or after that many bytes.
        raws = [
            raw[i : i + _MAX_LINE_BYTES]
            for raw in (line + b"\n" for line in complete)
            for i in range(0, len(raw), _MAX_LINE_BYTES)
        ]
        whole = len(rest) - len(rest) % _MAX_LINE_BYTES if chunk else len(rest)
        raws += [rest[i : i + _MAX_LINE_BYTES] for i in range(0, whole, _MAX_LINE_BYTES)]
        pipe.pending = rest[whole:]
        self._record(pipe, raws)
        if not chunk:
            self._close_pipe(current, pipe)

    def _record(self, pipe: _Pipe, raws: list[bytes]) -> None:
        if not raws:
            return
        data = [raw.decode("utf-8", errors="replace").removesuffix("\n").removesuffix("\r") for raw in raws]
        if pipe.log_file is None:
            with self._lock:
                self._log_files.append(pipe.log_path)
        try:
            pipe.copy_to_log("".join(line + "\n" for line in data))
        except OSError:
            pass  # a full disk costs the file copy; the lines still reach the controller
        stamp = now_ms()
        with self._lock:
            self._lines.extend(LogLine(stamp, pipe.source, line) for line in data)

    def _close_pipe(self, current: _Supervised, pipe: _Pipe) -> None:
        current.loop.unwatch(pipe.fd)
        del current.pipes[pipe.fd]
        pipe.close()
        if current.reaped and not current.pipes:
            self._done(current)

    def _reap(self, current: _Supervised, pidfd: int) -> None:
        current.loop.unwatch(pidfd)
        os.close(pidfd)
        # Like a container, nothing outlives the main process; this also closes stray pipe writers.
        self._signal(current, signal.SIGKILL)
        with self._signal_lock:
            current.proc.wait()
        current.reaped = True
        if not current.pipes:
            self._done(current)
        else:
            drain_until = time.monotonic() + _READER_DRAIN_SECONDS
            current.loop.at(drain_until, lambda: self._stop_draining(current))

    def _stop_draining(self, current: _Supervised) -> None:
        for pipe in list(current.pipes.values()):
            self._record(pipe, [pipe.pending] if pipe.pending else [])
            self._close_pipe(current, pipe)

    def _done(self, current: _Supervised) -> None:
        if current.done:
            return
        current.returncode = current.proc.returncode
        current.done = True
        if current.is_command:
            self._command_exited(current)

    def _command_exited(self, current: _Supervised) -> None:
        assert current.returncode is not None
        exit_code, error = _describe_exit(current.returncode)
        with self._lock:
            if self._status.oom_killed:
                error = self._oom_error
            elif self._status.timed_out:
                error = f"killed after timeout of {self._config.timeout_seconds:g}s"
            self._finish_locked(exit_code=exit_code, error=error)

    def _signal(self, current: _Supervised, sig: signal.Signals) -> None:
        with self._signal_lock:
            if current.proc.returncode is not None:
                return
            try:
                os.killpg(current.proc.pid, sig)
            except ProcessLookupError:
                pass

    def _check_limits(self, current: _Supervised) -> None:
        if current.reaped:
            return
        self._enforce_limits(current, current.deadline)
        current.loop.at(time.monotonic() + MONITOR_INTERVAL_SECONDS, lambda: self._check_limits(current))

    def _enforce_limits(self, current: _Supervised, deadline: float | None) -> None:
        now = time.monotonic()
        limit = self._config.memory_bytes
        if limit and not self._status.oom_killed:
            used = _tree_rss(current.proc.pid)
            if used > limit:
                with self._lock:
                    self._status.oom_killed = True
                    self._oom_error = f"out of memory: used {used // _MIB}MB of {limit // _MIB}MB limit"
                self._signal(current, signal.SIGKILL)
        if deadline is not None and now >= deadline and not self._status.timed_out:
            with self._lock:
                self._status.timed_out = True
            self._signal(current, signal.SIGTERM)
            current.sigkill_at = now + TIMEOUT_GRACE_SECONDS
        if current.sigkill_at is not None and now >= current.sigkill_at:
            self._signal(current, signal.SIGKILL)
            current.sigkill_at = None

    # -- build steps, on the caller's thread ----------------------------------------------------

    def _run_build_step(self, display: str, argv: list[str]) -> None:
        with self._lock:
            killed = self._kill_requested
            if not killed:
                self._lines.append(LogLine(timestamp_ms=now_ms(), source="build", data=f"$ {display}"))
            first_line = len(self._lines)
        if killed:
            self._fail_build(display, 128 + signal.SIGKILL, [], error="killed during build")
        loop = _ProcessLoop()
        try:
            current = self._spawn(loop, argv, merge_output=True, deadline=None)
        except OSError as e:
            self._fail_build(display, 127, [str(e)])
        loop.run_until_done(current)
        assert current.returncode is not None
        exit_code, _ = _describe_exit(current.returncode)
        with self._lock:
            self._current = None
            tail = [line.data for line in self._lines[first_line:]][-_BUILD_TAIL_LINES:]
            kill_requested = self._kill_requested
        if kill_requested:
            self._fail_build(display, exit_code, tail, error="killed during build")
        if exit_code != 0:
            self._fail_build(display, exit_code, tail, error=self._oom_error)

    def _fail_build(self, command: str, exit_code: int, tail: list[str], error: str = "") -> NoReturn:
        failure = BuildFailedError(command, exit_code, tail)
        with self._lock:
            self._finish_locked(exit_code=exit_code, error=error or str(failure))
        raise failure

    def _finish_locked(self, exit_code: int | None, error: str) -> None:
        self._status.phase = ContainerPhase.EXITED
        self._status.exit_code = exit_code
        self._status.error = error
        self._status.finished_at_ms = now_ms()
        self._exited.set()


def _remove_logs(containers_dir: Path, container_id: str) -> None:
    for source in get_args(LogSource):
        with contextlib.suppress(FileNotFoundError):
            os.unlink(_log_path(containers_dir, container_id, source))


def _read_record_dir(record_dir: Path) -> dict:
    """The record of a worker of an earlier version (a directory per container, its pid in
    meta.json), whose tasks may still run when an upgraded worker starts."""
    try:
        return json.loads((record_dir / "meta.json").read_bytes())
    except (OSError, ValueError):
        return {}


def _kill_leftover_group(pid: int, create_time: float) -> None:
    """SIGKILL the process group a previous worker recorded, unless its pid now names someone else."""
    try:
        leader: psutil.Process | None = psutil.Process(pid)
    except psutil.NoSuchProcess:
        leader = None
    if leader is not None and abs(leader.create_time() - create_time) > _CREATE_TIME_TOLERANCE_SECONDS:
        return
    # A leader that is gone may have left members behind (PDEATHSIG reaches only the direct
    # child). The kernel does not hand out a pid while it is still some group's id, so a group
    # with this id and no leader can only be the one we recorded.
    try:
        os.killpg(pid, signal.SIGKILL)
    except ProcessLookupError:
        return
    if leader is None:
        return
    deadline = time.monotonic() + _KILL_SETTLE_SECONDS
    while time.monotonic() < deadline:
        try:
            if leader.status() == psutil.STATUS_ZOMBIE:
                return
        except psutil.NoSuchProcess:
            return
        time.sleep(0.01)


def _kill_marked_processes(container_ids: set[str]) -> None:
    """SIGKILL every process whose environment names one of these containers."""
    if not container_ids:
        return
    for proc in psutil.process_iter():
        try:
            if proc.environ().get(CONTAINER_MARKER_ENV) in container_ids:
                proc.kill()
        except (psutil.Error, OSError):
            continue  # gone, or another user's process, which no container of ours can be


class ProcessRuntime:
    name = "process"
    fetches_bundle = False
    # A process starts from the host's files: there is no image to pull.
    pulls_images = False

    def __init__(self, state_dir: Path) -> None:
        self._containers_dir = state_dir / "containers"
        self._containers_dir.mkdir(parents=True, exist_ok=True)
        # Read once: walking the whole of os.environ cost about a tenth of a trivial attempt's CPU.
        self._base_env = _base_env()
        self._journal = ContainerJournal(self._containers_dir)

    def create_container(self, config: ContainerConfig) -> ProcessContainerHandle:
        if not config.workdir.is_dir():
            raise ContainerError(f"workdir {config.workdir} does not exist")
        container_id = _container_id(config)
        self._journal.started(container_id)
        return ProcessContainerHandle(
            config, container_id, self._containers_dir, self._journal, self._base_env
        )

    def remove_leftovers(self) -> int:
        """Kill and delete every container recorded in state_dir that this instance did not create
        (all recorded by a ProcessRuntime); returns how many there were."""
        journals = [
            path for path in self._containers_dir.glob(f"*{JOURNAL_SUFFIX}") if path != self._journal.path
        ]
        leftovers: dict[str, dict] = {}
        for journal in journals:
            leftovers.update(open_containers(journal))
        earlier_layout = [path for path in self._containers_dir.iterdir() if path.is_dir()]
        for record_dir in earlier_layout:
            leftovers[record_dir.name] = _read_record_dir(record_dir)
        for record in leftovers.values():
            if record.get("pid") is not None and record.get("create_time") is not None:
                _kill_leftover_group(record["pid"], record["create_time"])
        # Also processes of a container whose pid was never recorded (the worker died right after
        # forking) and any that left its process group.
        _kill_marked_processes(set(leftovers))
        for container_id in leftovers:
            _remove_logs(self._containers_dir, container_id)
        for journal in journals:
            journal.unlink(missing_ok=True)
        for record_dir in earlier_layout:
            shutil.rmtree(record_dir, ignore_errors=True)
        return len(leftovers)
