"""`iris run --local`'s cluster in a process of its own, forked before the CLI imports its commands.

The process that hosts a controller imports nearly everything the CLI imports (protobuf, Connect,
click, the cluster's types) and more (Starlette, uvicorn, the store, the controller's modules), then
builds the controller. In one process all of it runs one step after another. Here the CLI imports
what both sides share, forks, and the two halves run side by side on two cores: the child imports
and builds the controller (and forks its worker, see `iris.cluster.local_worker`) while the parent
imports its commands and the client, parses the command line, and opens its HTTP client.

What the user sees is unchanged: the same progress lines (the child sends them, the parent prints
them where it printed them before), the same errors (a cluster that fails to start is raised in
the parent as the same builtin error with the same message), and the cluster never outlives the
command. The child is set up so that only the parent decides when it ends:
- its own session, so the terminal's Ctrl-C and SIGHUP reach only the parent, which stops the job
  and then the cluster as before;
- SIGTERM from the parent (`stop`) stops the cluster, whether it is still starting or serving;
- if the parent dies without stopping it (SIGKILL), its pidfd of the parent becomes readable and it
  stops the cluster itself, and its worker follows (`--exit-with-pid` names the child);
- stdin from /dev/null and stdout onto stderr, so that the command's stdout carries only the job's
  output; log records go to stderr as the CLI's would.
It ends with `os._exit`, so none of the parent's exit handlers run in it.
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import signal
import subprocess
import sys
import traceback
from collections.abc import Callable

from iris.cluster.local_worker import (
    ForkedProcess,
    can_fork,
    exit_forked_child,
    fork_holding_signals,
    name_process,
)

# What `ps -o comm`, top and psutil's name() show for the cluster's process, whose command line is
# the CLI's.
CLUSTER_PROCESS_NAME = "iris-cluster"

# Errors a cluster's start raises that the CLI shows as one line (its other errors are bugs, shown
# with the child's traceback).
_BUILTIN_ERRORS: dict[str, type[Exception]] = {
    cls.__name__: cls for cls in (RuntimeError, ValueError, OSError, TimeoutError, KeyError)
}

# How long `stop` waits for the cluster to stop before killing it.
STOP_TIMEOUT_S = 30.0


class ClusterProcess:
    """The parent's handle on a forked local cluster."""

    def __init__(self, process: ForkedProcess, messages: int):
        self._process = process
        self._messages = messages
        self._buffer = b""
        self.url: str | None = None

    def wait_started(self, progress: Callable[[str], None]) -> str:
        """The controller's URL once its workers registered, passing on each progress line; raises
        what the cluster's start raised, or a RuntimeError if its process ended without a word."""
        while self.url is None:
            line = self._read_message()
            if line is None:
                code = self._process.wait()
                raise RuntimeError(f"the local cluster's process exited with code {code} before it started")
            message = json.loads(line)
            if "progress" in message:
                progress(message["progress"])
            elif "url" in message:
                self.url = message["url"]
            else:
                error = _BUILTIN_ERRORS.get(message["type"])
                if error is None:
                    failure = f"{message['type']}: {message['error']}"
                    raise RuntimeError(f"the local cluster failed to start: {failure}")
                raise error(message["error"])
        return self.url

    def _read_message(self) -> bytes | None:
        """The next line the cluster's process sent; None once it ended without one."""
        while b"\n" not in self._buffer:
            # The forked worker inherited the pipe's write end, so the end of the cluster's process
            # is seen on its pidfd, not as the end of the pipe.
            if self._process.returncode is not None:
                return None
            readable, _, _ = select.select([self._messages, self._process.pidfd], [], [])
            if self._messages in readable:
                chunk = os.read(self._messages, 65536)
                if not chunk:
                    return None
                self._buffer += chunk
            elif not select.select([self._messages], [], [], 0)[0]:
                self._process.poll()
        line, _, self._buffer = self._buffer.partition(b"\n")
        return line

    def stop(self) -> None:
        """Stop the cluster (controller, workers, their tasks) and wait until its process ends."""
        self._process.terminate()
        try:
            self._process.wait(STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            self._process.kill()
            self._process.wait()
        if self._messages >= 0:
            os.close(self._messages)
            self._messages = -1


class _Stopped(BaseException):
    """SIGTERM from the parent, raised wherever the cluster's process is (starting or serving)."""


def fork_cluster(verbose: bool, configure_logging: Callable[[bool], None]) -> ClusterProcess | None:
    """Fork a process that starts `iris run --local`'s cluster: one forked worker, state in a
    temporary directory. None when this process cannot fork safely (see `can_fork`)."""
    if not can_fork():
        return None
    messages, sender = os.pipe()
    sys.stdout.flush()
    sys.stderr.flush()
    parent = os.getpid()
    pid, signal_mask = fork_holding_signals()
    if pid == 0:
        os.close(messages)
        _run_cluster_and_exit(parent, sender, verbose, configure_logging, signal_mask)
    os.close(sender)
    return ClusterProcess(ForkedProcess(pid, sys.argv), messages)


def _run_cluster_and_exit(
    parent: int,
    sender: int,
    verbose: bool,
    configure_logging: Callable[[bool], None],
    signal_mask: set[signal.Signals],
) -> None:
    code = 1
    try:
        _detach(verbose, configure_logging, signal_mask)
        watch_parent = os.pidfd_open(parent)
        code = _serve_cluster(sender, watch_parent)
    except _Stopped:
        code = 0
    except BaseException:
        traceback.print_exc()
    finally:
        exit_forked_child(code)


def _detach(
    verbose: bool, configure_logging: Callable[[bool], None], signal_mask: set[signal.Signals]
) -> None:
    os.setsid()
    name_process(CLUSTER_PROCESS_NAME)
    stdin = os.open(os.devnull, os.O_RDONLY)
    os.dup2(stdin, 0)
    os.close(stdin)
    os.dup2(2, 1)
    signal.signal(signal.SIGTERM, _raise_stopped)
    for sig in (signal.SIGHUP, signal.SIGQUIT, signal.SIGUSR1, signal.SIGUSR2):
        signal.signal(sig, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.pthread_sigmask(signal.SIG_SETMASK, signal_mask)
    configure_logging(verbose)


def _raise_stopped(signum: int, frame: object) -> None:
    # Once: the cleanup this starts must not be interrupted by a second SIGTERM.
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    raise _Stopped()


def _serve_cluster(sender: int, watch_parent: int) -> int:
    def send(message: dict[str, str]) -> None:
        with contextlib.suppress(BrokenPipeError):
            os.write(sender, json.dumps(message).encode() + b"\n")

    from iris.cluster.local_cluster import LocalCluster
    from iris.cluster.platform.local import LocalWorkerSpec

    cluster = LocalCluster(workers=[LocalWorkerSpec("local-0")], fork_workers=True)
    try:
        try:
            cluster.start(lambda text: send({"progress": text}))
        except Exception as exc:
            if type(exc).__name__ not in _BUILTIN_ERRORS:
                traceback.print_exc()
            send({"type": type(exc).__name__, "error": str(exc)})
            return 1
        send({"url": cluster.url})
        # Until the parent stops it (SIGTERM) or dies.
        select.select([watch_parent], [], [])
        return 0
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        # The store goes with the cluster, so the workers need not wait for the controller to
        # stop first (`LocalCluster.stop`'s order, which keeps a lasting store from recording
        # them as failed): both stop at once.
        for process in cluster.worker_processes.values():
            process.terminate()
        cluster.stop()
