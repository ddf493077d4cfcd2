"""A local cluster's worker started by forking the process that will run its controller.

A worker started as a new interpreter (`python -m iris.cluster.worker.main serve ...`) imports
protobuf, Connect, Starlette and uvicorn from scratch before it can register: most of a second,
and on the critical path of `iris run --local`, which waits for its one worker. The process
that starts a local cluster has imported most of that already, so a fork of it is a worker
within milliseconds, importing only the worker's own modules while the parent builds the
controller.

The child is the same daemon with the same arguments as the spawned one, set up as a spawned
one would be: a session of its own (the terminal's Ctrl-C does not reach it), its output in
its log file, stdin from /dev/null, the controller's listening socket closed, default signal
handlers. It ends with `os._exit`, never returning into the parent's code (whose exit handlers,
such as a temporary directory's cleanup, belong to the parent). What differs: its command line is
its parent's (`iris run --local ...`), so process lists tell it by its name, `iris-worker`.

A fork copies only the thread that calls it: a lock another thread held stays held in the
child forever. So a worker is forked only while this process has a single thread (see
`can_fork`); otherwise, and on systems without /proc, the caller spawns an interpreter.
"""

from __future__ import annotations

import contextlib
import logging
import os
import select
import signal
import socket
import subprocess
import sys
import traceback
from collections.abc import Sequence
from pathlib import Path

# Signals whose handlers the parent may have replaced (`iris run` turns SIGTERM and SIGHUP into an
# interruption); a worker starts with the handlers of a fresh interpreter.
_RESET_SIGNALS = (signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT, signal.SIGUSR1, signal.SIGUSR2)


# Held from a fork until the child has its own handlers for them: one arriving in between would
# run the parent's handler in the child (a local cluster's SIGTERM handler raising in a worker
# not yet writing to its log, its traceback on the terminal).
_HELD_ACROSS_FORK = (*_RESET_SIGNALS, signal.SIGINT)

# What `ps -o comm`, top and psutil's name() show for a forked worker, whose command line is its
# parent's.
WORKER_PROCESS_NAME = "iris-worker"


def can_fork() -> bool:
    """True when this process runs exactly one thread, native threads included."""
    try:
        return len(os.listdir("/proc/self/task")) == 1
    except OSError:
        return False


class ForkedProcess:
    """The parent's handle on a forked worker: the part of `subprocess.Popen` a local cluster uses."""

    def __init__(self, pid: int, args: Sequence[str]):
        self.pid = pid
        self.args = list(args)
        self.returncode: int | None = None
        # Readable once the child exits; closed when it is reaped.
        self.pidfd = os.pidfd_open(pid)

    def poll(self) -> int | None:
        if self.returncode is None:
            pid, status = os.waitpid(self.pid, os.WNOHANG)
            if pid:
                self._reaped(status)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        if self.returncode is None:
            # The pidfd becomes readable when the child exits; then waitpid does not block.
            if timeout is not None and not select.select([self.pidfd], [], [], timeout)[0]:
                raise subprocess.TimeoutExpired(self.args, timeout)
            self._reaped(os.waitpid(self.pid, 0)[1])
        assert self.returncode is not None
        return self.returncode

    def send_signal(self, sig: int) -> None:
        # Until it is reaped the pid is this child's, even as a zombie; after, it may be anyone's.
        if self.poll() is None:
            os.kill(self.pid, sig)

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)

    def _reaped(self, status: int) -> None:
        self.returncode = os.waitstatus_to_exitcode(status)
        os.close(self.pidfd)


def fork_worker(
    worker_args: Sequence[str], log_path: Path, env: dict[str, str], close_in_child: Sequence[socket.socket]
) -> ForkedProcess:
    """Fork a worker daemon running `iris.cluster.worker.main` with `worker_args` (what follows
    the module on a spawned worker's command line). The caller checked `can_fork()`."""
    log_path.parent.mkdir(parents=True, exist_ok=True)
    # The worker's server and the controller's both run on uvloop with httptools' parser: imported
    # once here, before the fork, instead of once in each process.
    import httptools  # noqa: F401
    import uvloop  # noqa: F401

    # Whatever sits in this process's buffers would otherwise be written twice.
    sys.stdout.flush()
    sys.stderr.flush()
    pid, signal_mask = fork_holding_signals()
    if pid == 0:
        _run_worker_and_exit(worker_args, log_path, env, close_in_child, signal_mask)
    return ForkedProcess(pid, [sys.executable, "-m", "iris.cluster.worker.main", *worker_args])


def fork_holding_signals() -> tuple[int, set[signal.Signals]]:
    """`os.fork()` with the signals a forked child gives handlers of its own held back (see
    `_HELD_ACROSS_FORK`). Returns the pid and the signal mask from before: the parent's is restored
    here, the child restores it once its handlers are set."""
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, _HELD_ACROSS_FORK)
    pid = -1
    try:
        pid = os.fork()
    finally:
        if pid != 0:
            signal.pthread_sigmask(signal.SIG_SETMASK, previous)
    return pid, previous


def _run_worker_and_exit(
    worker_args: Sequence[str],
    log_path: Path,
    env: dict[str, str],
    close_in_child: Sequence[socket.socket],
    signal_mask: set[signal.Signals],
) -> None:
    code = 1
    try:
        os.setsid()
        name_process(WORKER_PROCESS_NAME)
        for sock in close_in_child:
            sock.close()
        stdin = os.open(os.devnull, os.O_RDONLY)
        log = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        os.dup2(stdin, 0)
        os.dup2(log, 1)
        os.dup2(log, 2)
        os.close(stdin)
        os.close(log)
        sys.stdin = open(0, closefd=False)
        sys.stdout = open(1, "w", buffering=1, closefd=False)
        sys.stderr = open(2, "w", buffering=1, closefd=False)
        for sig in _RESET_SIGNALS:
            signal.signal(sig, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        signal.pthread_sigmask(signal.SIG_SETMASK, signal_mask)
        # The worker configures logging as its own program.
        for handler in logging.root.handlers[:]:
            logging.root.removeHandler(handler)
        os.environ.update(env)

        from iris.cluster.worker.main import cli

        cli.main(args=list(worker_args), prog_name="python -m iris.cluster.worker.main")
        code = 0
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    except BaseException:
        traceback.print_exc()
    finally:
        exit_forked_child(code)


def exit_forked_child(code: int) -> None:
    """End a forked child with `code` once its logs and output are out; `os._exit`, so that
    nothing the parent registered (atexit, its threads' state) runs again in the child."""
    try:
        logging.shutdown()
        sys.stdout.flush()
        sys.stderr.flush()
    finally:
        os._exit(code)


def name_process(name: str) -> None:
    # The name only helps a person reading a process list: a system without it loses nothing.
    with contextlib.suppress(OSError), open("/proc/self/comm", "w") as comm:
        comm.write(name)
