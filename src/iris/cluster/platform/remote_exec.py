"""Running commands on remote hosts: the `RemoteExec` protocol, its SSH implementation, and the base
class of worker handles that reach their host through one.

`DirectSshRemoteExec` drives the system's OpenSSH client (`ssh`, `scp`) in batch mode: no password
or host-key prompt can ever block a controller thread. Failures are typed and say what to fix:
`HostUnreachableError` (nothing answered within the connect timeout), `AuthenticationRefusedError`
(the host refused the key), `RemoteCommandTimeoutError`, and `RemoteCommandFailedError` (the command
ran and exited non-zero; the error keeps its last output lines). Which is which is read from the
client's stderr through one pattern table, as every SSH-based platform needs the same mapping.
"""

from __future__ import annotations

import re
import shlex
import socket
import subprocess
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol, runtime_checkable

from iris.cluster.platform.base import (
    CloudWorkerState,
    CommandResult,
    PlatformError,
    PlatformUnavailableError,
    WorkerStatus,
)
from iris.config import DEFAULT_SSH_CONNECT_TIMEOUT, DEFAULT_SSH_PORT, DEFAULT_SSH_USER
from iris.time import Duration, wait_until

DEFAULT_COMMAND_TIMEOUT = Duration.from_seconds(60)
DEFAULT_POLL_INTERVAL = Duration.from_seconds(5)
# How many trailing output lines an error about a failed command quotes.
ERROR_TAIL_LINES = 20
# ssh's own exit status for "could not connect or authenticate"; a remote command's 255 has none of
# the client's messages on stderr, which is how the two are told apart.
SSH_CLIENT_ERROR_EXIT = 255
# After a local timeout fires, how long the remote side gets to end the command (coreutils
# `timeout` there sends SIGTERM, then SIGKILL after this grace).
_REMOTE_KILL_GRACE_S = 5
# coreutils `timeout`'s exit status for "the command ran out of time".
TIMEOUT_EXIT = 124


class RemoteExecError(PlatformError):
    """A remote command could not be run or did not succeed."""

    def __init__(self, address: str, message: str):
        super().__init__(message)
        self.address = address


class HostUnreachableError(RemoteExecError, PlatformUnavailableError):
    pass


class AuthenticationRefusedError(RemoteExecError):
    pass


class RemoteCommandTimeoutError(RemoteExecError):
    pass


class RemoteCommandFailedError(RemoteExecError):
    def __init__(self, address: str, what: str, result: CommandResult):
        self.result = result
        tail = last_lines(result, ERROR_TAIL_LINES)
        message = f"{what} on {address} exited {result.returncode}"
        if not tail:
            super().__init__(address, message)
            return
        # The first line alone must say what went wrong (it is what slice listings show), and the
        # last thing a failing command prints is usually why.
        final = [line.strip() for line in tail.splitlines() if line.strip()][-1]
        super().__init__(address, f"{message}: {final}; its last output lines:\n{tail}")


def bounded_command(command: str, timeout: Duration | None) -> str:
    """`command` wrapped so that the host itself ends it at `timeout`: killing a local ssh client
    does not end the remote command, coreutils `timeout` on the host does (exit 124)."""
    if timeout is None:
        return command
    seconds = max(1, round(timeout.seconds))
    return f"timeout -k {_REMOTE_KILL_GRACE_S} {seconds} bash -c {shlex.quote(command)}"


def last_lines(result: CommandResult, count: int) -> str:
    lines = [*result.stdout.splitlines(), *result.stderr.splitlines()]
    return "\n".join(lines[-count:])


@runtime_checkable
class RemoteExec(Protocol):
    """Runs commands on one remote host. Safe for concurrent use from several threads."""

    @property
    def address(self) -> str:
        """The host's address (IP or name) as this side reaches it."""
        ...

    @property
    def zone(self) -> str:
        """Where the host is, or "" where that means nothing."""
        ...

    def run(self, command: str, timeout: Duration = DEFAULT_COMMAND_TIMEOUT) -> CommandResult:
        """Run a shell command; its exit code and output, whatever the code.

        Raises HostUnreachableError, AuthenticationRefusedError or RemoteCommandTimeoutError when
        the command could not run to its end.
        """
        ...

    def run_streaming(
        self, command: str, on_line: Callable[[str], None], timeout: Duration | None = None
    ) -> CommandResult:
        """As `run`, calling `on_line` with each line of output (stdout and stderr merged) as it comes."""
        ...

    def copy_file(
        self, local_path: Path, remote_path: str, timeout: Duration = DEFAULT_COMMAND_TIMEOUT
    ) -> None:
        """Copy a local file to `remote_path` on the host; raises RemoteExecError on failure."""
        ...


@dataclass(frozen=True)
class _ClientErrorPattern:
    pattern: re.Pattern[str]
    error: type[RemoteExecError]
    advice: str


# What OpenSSH's client prints when it never got to run the command, and what the user should do.
_CLIENT_ERRORS: tuple[_ClientErrorPattern, ...] = (
    _ClientErrorPattern(
        re.compile(r"Permission denied \(|Too many authentication failures|no mutual signature"),
        AuthenticationRefusedError,
        "the host refused the SSH key; check the ssh user and key_file, and that the key's public half "
        "is in the user's authorized_keys on the host",
    ),
    _ClientErrorPattern(
        re.compile(r"Load key .*: |Identity file .* not accessible|bad permissions"),
        AuthenticationRefusedError,
        "the SSH key file cannot be used; check that key_file exists, is a private key and is readable "
        "only by its owner",
    ),
    _ClientErrorPattern(
        re.compile(
            r"Connection timed out|Operation timed out|No route to host|Connection refused|Network is unreachable"
            r"|Could not resolve hostname|Name or service not known|Connection closed by|Connection reset by"
            r"|banner exchange|kex_exchange_identification"
        ),
        HostUnreachableError,
        "check that the host is up, that its address and ssh port are right, and that sshd runs there",
    ),
)


def classify_client_error(address: str, returncode: int, stderr: str) -> RemoteExecError | None:
    """The error an ssh/scp exit stands for when the client itself failed, else None."""
    if returncode != SSH_CLIENT_ERROR_EXIT:
        return None
    for known in _CLIENT_ERRORS:
        match = known.pattern.search(stderr)
        if match:
            line = next(
                (ln.strip() for ln in stderr.splitlines() if known.pattern.search(ln)), match.group(0)
            )
            return known.error(address, f"ssh to {address} failed: {line}; {known.advice}")
    return None


class DirectSshRemoteExec:
    """`RemoteExec` over the system's OpenSSH client, with a key file and no interactive prompts."""

    def __init__(
        self,
        address: str,
        user: str = DEFAULT_SSH_USER,
        key_file: str = "",
        port: int = DEFAULT_SSH_PORT,
        connect_timeout: Duration = DEFAULT_SSH_CONNECT_TIMEOUT,
        zone: str = "",
    ):
        self._address = address
        self._user = user
        self._key_file = str(Path(key_file).expanduser()) if key_file else ""
        self._port = port
        self._connect_timeout = connect_timeout
        self._zone = zone

    @property
    def address(self) -> str:
        return self._address

    @property
    def zone(self) -> str:
        return self._zone

    @property
    def connect_timeout(self) -> Duration:
        return self._connect_timeout

    def _options(self) -> list[str]:
        connect_s = max(1, round(self._connect_timeout.seconds))
        options = [
            "-o", "BatchMode=yes",
            # Hosts come and go (and are reinstalled) under the same address: no known_hosts to go stale.
            "-o", "StrictHostKeyChecking=no",
            "-o", "UserKnownHostsFile=/dev/null",
            "-o", "LogLevel=ERROR",
            "-o", f"ConnectTimeout={connect_s}",
            "-o", "ServerAliveInterval=5",
            "-o", "ServerAliveCountMax=3",
        ]  # fmt: skip
        if self._key_file:
            options += ["-o", "IdentitiesOnly=yes", "-i", self._key_file]
        return options

    def _ssh_argv(self, command: str) -> list[str]:
        return ["ssh", *self._options(), "-p", str(self._port), f"{self._user}@{self._address}", command]

    def _bounded(self, command: str, timeout: Duration | None) -> str:
        return bounded_command(command, timeout)

    def _local_deadline_s(self, timeout: Duration) -> float:
        return timeout.seconds + self._connect_timeout.seconds + 2

    def _finish(self, command: str, timeout: Duration | None, result: CommandResult) -> CommandResult:
        error = classify_client_error(self._address, result.returncode, result.stderr)
        if error is not None:
            raise error
        if timeout is not None and result.returncode == TIMEOUT_EXIT:
            raise self._timed_out(command, timeout)
        return result

    def _timed_out(self, command: str, timeout: Duration) -> RemoteCommandTimeoutError:
        return RemoteCommandTimeoutError(
            self._address, f"`{short_command(command)}` on {self._address} did not finish within {timeout}"
        )

    def run(self, command: str, timeout: Duration = DEFAULT_COMMAND_TIMEOUT) -> CommandResult:
        argv = self._ssh_argv(self._bounded(command, timeout))
        try:
            completed = subprocess.run(
                argv,
                capture_output=True,
                text=True,
                stdin=subprocess.DEVNULL,
                timeout=self._local_deadline_s(timeout),
                check=False,
            )
        except subprocess.TimeoutExpired:
            raise self._timed_out(command, timeout) from None
        return self._finish(
            command, timeout, CommandResult(completed.returncode, completed.stdout, completed.stderr)
        )

    def run_streaming(
        self, command: str, on_line: Callable[[str], None], timeout: Duration | None = None
    ) -> CommandResult:
        argv = self._ssh_argv(self._bounded(command, timeout))
        process = subprocess.Popen(
            argv,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            stdin=subprocess.DEVNULL,
            text=True,
            bufsize=1,
        )
        stderr_lines: list[str] = []
        stderr_reader = threading.Thread(
            target=lambda: stderr_lines.extend(process.stderr or []), name="ssh-stderr", daemon=True
        )
        stderr_reader.start()
        timed_out = threading.Event()
        killer: threading.Timer | None = None
        if timeout is not None:

            def expire() -> None:
                timed_out.set()
                process.kill()

            killer = threading.Timer(self._local_deadline_s(timeout), expire)
            killer.daemon = True
            killer.start()
        output: list[str] = []
        try:
            assert process.stdout is not None
            for line in process.stdout:
                line = line.rstrip("\n")
                output.append(line)
                on_line(line)
            returncode = process.wait()
        finally:
            if killer is not None:
                killer.cancel()
            if process.poll() is None:
                process.kill()
                process.wait()
        stderr_reader.join(timeout=5)
        stderr = "".join(stderr_lines)
        if timeout is not None and timed_out.is_set():
            raise self._timed_out(command, timeout)
        return self._finish(command, timeout, CommandResult(returncode, "\n".join(output), stderr))

    def copy_file(
        self, local_path: Path, remote_path: str, timeout: Duration = DEFAULT_COMMAND_TIMEOUT
    ) -> None:
        argv = ["scp", "-q", *self._options(), "-P", str(self._port), str(local_path),
                f"{self._user}@{_scp_host(self._address)}:{remote_path}"]  # fmt: skip
        try:
            completed = subprocess.run(
                argv,
                capture_output=True,
                text=True,
                stdin=subprocess.DEVNULL,
                timeout=self._local_deadline_s(timeout),
                check=False,
            )
        except subprocess.TimeoutExpired:
            raise RemoteCommandTimeoutError(
                self._address,
                f"copying {local_path} to {self._address}:{remote_path} took longer than {timeout}",
            ) from None
        result = CommandResult(completed.returncode, completed.stdout, completed.stderr)
        error = classify_client_error(self._address, result.returncode, result.stderr)
        if error is not None:
            raise error
        if result.returncode != 0:
            raise RemoteCommandFailedError(self._address, f"copying {local_path} to {remote_path}", result)

    @contextmanager
    def forward(
        self, remote_port: int, remote_host: str = "127.0.0.1", local_port: int | None = None
    ) -> Iterator[int]:
        """An SSH local forward from 127.0.0.1:<local port> here to remote_host:remote_port as seen
        from the host, open while the context lasts; yields the local port."""
        port = local_port or free_local_port()
        argv = ["ssh", *self._options(), "-o", "ExitOnForwardFailure=yes", "-N",
                "-L", f"127.0.0.1:{port}:{remote_host}:{remote_port}",
                "-p", str(self._port), f"{self._user}@{self._address}"]  # fmt: skip
        process = subprocess.Popen(
            argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True
        )
        try:

            def open_or_exited() -> bool:
                return process.poll() is not None or accepts_local(port)

            try:
                wait_until(
                    open_or_exited, self._connect_timeout.seconds + 5, 0.05, f"the tunnel to {self._address}"
                )
            except TimeoutError:
                raise HostUnreachableError(
                    self._address,
                    f"the SSH tunnel to {self._address} did not open within {self._connect_timeout}",
                ) from None
            if process.poll() is not None:
                stderr = process.stderr.read() if process.stderr else ""
                error = classify_client_error(self._address, process.returncode, stderr)
                raise error or RemoteExecError(
                    self._address,
                    f"the SSH tunnel to {self._address} exited {process.returncode}: {stderr.strip()}",
                )
            yield port
        finally:
            if process.poll() is None:
                process.terminate()
                try:
                    process.wait(5)
                except subprocess.TimeoutExpired:
                    process.kill()
                    process.wait()


def free_local_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def accepts_local(port: int) -> bool:
    """Whether something on this machine accepts TCP connections on `port` (a tunnel is up)."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5):
            return True
    except OSError:
        return False


def _scp_host(address: str) -> str:
    return f"[{address}]" if ":" in address else address


def short_command(command: str, limit: int = 80) -> str:
    """A command as an error message quotes it: its first line, cut to `limit` characters."""
    lines = command.strip().splitlines() or [""]
    if len(lines) == 1 and len(lines[0]) <= limit:
        return lines[0]
    return lines[0][:limit] + " ..."


def _discard_line(line: str) -> None:
    """An `on_line` for callers that only want the result."""


class RemoteExecWorkerBase:
    """Shared part of worker handles whose host is reached through a `RemoteExec` (GCP, Manual).

    Implements the `RemoteWorkerHandle` protocol's host-level operations, plus the two steps only
    SSH-reached workers have: waiting for the host to accept connections, and running a bootstrap
    script on it.
    """

    def __init__(self, worker_id: str, remote_exec: RemoteExec, external_address: str | None = None):
        self._worker_id = worker_id
        self._remote_exec = remote_exec
        self._external_address = external_address

    @property
    def worker_id(self) -> str:
        return self._worker_id

    @property
    def internal_address(self) -> str:
        return self._remote_exec.address

    @property
    def external_address(self) -> str | None:
        return self._external_address

    @property
    def remote_exec(self) -> RemoteExec:
        return self._remote_exec

    def status(self) -> WorkerStatus:
        """RUNNING when the host answers a command, UNKNOWN when it cannot be reached."""
        try:
            self._remote_exec.run("true", Duration.from_seconds(10))
        except RemoteExecError:
            return WorkerStatus(CloudWorkerState.UNKNOWN)
        return WorkerStatus(CloudWorkerState.RUNNING)

    def run_command(
        self, command: str, timeout: Duration | None = None, on_line: Callable[[str], None] | None = None
    ) -> CommandResult:
        if on_line is not None:
            return self._remote_exec.run_streaming(command, on_line, timeout)
        return self._remote_exec.run(command, timeout or DEFAULT_COMMAND_TIMEOUT)

    def reboot(self) -> None:
        # The connection drops as the host goes down, so the command's own outcome tells nothing.
        try:
            self._remote_exec.run(
                "nohup sh -c 'sleep 1; reboot' >/dev/null 2>&1 &", Duration.from_seconds(30)
            )
        except RemoteCommandTimeoutError:
            pass

    def wait_for_connection(self, timeout: Duration, poll_interval: Duration = DEFAULT_POLL_INTERVAL) -> bool:
        """Poll until the host runs a command; False if it never did within `timeout`.

        A refused key raises AuthenticationRefusedError at once: waiting longer cannot fix it.
        """

        def answers() -> bool:
            try:
                self._remote_exec.run("true", Duration.from_seconds(10))
            except (HostUnreachableError, RemoteCommandTimeoutError):
                return False
            return True

        try:
            return wait_until(
                answers, timeout.seconds, poll_interval.seconds, f"{self.internal_address} to answer"
            )
        except TimeoutError:
            return False

    def bootstrap(
        self, script: str, on_line: Callable[[str], None] | None = None, timeout: Duration | None = None
    ) -> CommandResult:
        """Run a bootstrap script on the host with bash, streaming its output to `on_line`.

        Raises RemoteCommandFailedError (exit code and last lines) when it exits non-zero.
        """
        return self.run_script(script, "the bootstrap script", on_line, timeout)

    def run_script(
        self,
        script: str,
        what: str,
        on_line: Callable[[str], None] | None = None,
        timeout: Duration | None = None,
    ) -> CommandResult:
        """Run a bash script on the host; RemoteCommandFailedError naming `what` if it exits non-zero."""
        result = self._remote_exec.run_streaming(f"bash -c {shlex.quote(script)}", on_line or _discard_line, timeout)
        if result.returncode != 0:
            raise RemoteCommandFailedError(self.internal_address, what, result)
        return result
