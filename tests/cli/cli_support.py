"""Helpers for CLI tests: run the real `iris` command as a subprocess and manage local clusters.

Every `iris` invocation runs in its own process group with HOME pointed at a temporary directory
(so nothing touches ~/.iris) and without IRIS_CONTROLLER_URL from the caller's environment. When
it finishes, any process left in its group is killed and the test fails: a CLI command must not
leave workers behind. Clusters started with `iris cluster start` run in their own session; the
`LocalClusterConfig.stop` finalizer stops them with `iris cluster stop` and, as a last resort,
kills the process tree recorded from cluster.pid.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import textwrap
from dataclasses import dataclass
from pathlib import Path

import psutil
import pytest

from iris.time import wait_until

IRIS = [sys.executable, "-m", "iris.cli.main"]
COMMAND_TIMEOUT_S = 120.0
PROCESS_EXIT_TIMEOUT_S = 20.0


# ---------------------------------------------------------------- processes


def is_alive(process: psutil.Process) -> bool:
    try:
        return process.is_running() and process.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def pid_alive(pid: int) -> bool:
    try:
        return is_alive(psutil.Process(pid))
    except psutil.NoSuchProcess:
        return False


def process_tree(pid: int) -> list[psutil.Process]:
    """The process and all its descendants (including ones that called setsid)."""
    try:
        root = psutil.Process(pid)
        return [root, *root.children(recursive=True)]
    except psutil.NoSuchProcess:
        return []


def kill_all(processes: list[psutil.Process]) -> list[str]:
    """SIGKILL every live process; return descriptions of the ones that were still alive."""
    survivors = []
    for process in processes:
        if not is_alive(process):
            continue
        try:
            survivors.append(f"pid {process.pid}: {' '.join(process.cmdline())}")
            process.kill()
        except psutil.NoSuchProcess:
            pass
    psutil.wait_procs(processes, timeout=5)
    return survivors


def processes_in_group(pgid: int) -> list[psutil.Process]:
    found = []
    for process in psutil.process_iter():
        try:
            if os.getpgid(process.pid) == pgid and process.status() != psutil.STATUS_ZOMBIE:
                found.append(process)
        except (ProcessLookupError, psutil.NoSuchProcess):
            continue
    return found


def closed_port() -> int:
    """A localhost port nothing listens on (bound and released, so it was free a moment ago)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


# ---------------------------------------------------------------- running iris


@dataclass
class IrisResult:
    args: list[str]
    returncode: int
    stdout: str
    stderr: str

    def __str__(self) -> str:
        return (
            f"iris {' '.join(self.args)} -> exit {self.returncode}\n"
            f"--- stdout ---\n{self.stdout}\n--- stderr ---\n{self.stderr}"
        )


class IrisRunner:
    """Runs `python -m iris.cli.main ARGS` the way a user's shell would, minus the terminal."""

    def __init__(self, home: Path, cwd: Path) -> None:
        self.home = home
        self.cwd = cwd

    def env(self, extra: dict[str, str] | None = None) -> dict[str, str]:
        env = {
            key: value
            for key, value in os.environ.items()
            if key not in ("IRIS_CONTROLLER_URL", "IRIS_CONTROLLER_ADDRESS")
        }
        # Wide tables so long job ids and URLs are not folded across lines.
        env.update(HOME=str(self.home), COLUMNS="200", PYTHONUNBUFFERED="1")
        env.update(extra or {})
        return env

    def popen(
        self, *args: str, cwd: Path | None = None, env: dict[str, str] | None = None
    ) -> subprocess.Popen:
        return subprocess.Popen(
            [*IRIS, *args],
            cwd=cwd or self.cwd,
            env=self.env(env),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )

    def finish(self, process: subprocess.Popen, args: tuple[str, ...], timeout: float) -> IrisResult:
        try:
            stdout, stderr = process.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            kill_all(processes_in_group(process.pid))
            process.kill()
            stdout, stderr = process.communicate()
            pytest.fail(f"iris {' '.join(args)} did not finish in {timeout}s\n{stdout}\n{stderr}")
        result = IrisResult(list(args), process.returncode, stdout, stderr)
        leaked = kill_all(processes_in_group(process.pid))
        assert not leaked, f"processes outlived {result}:\n" + "\n".join(leaked)
        return result

    def __call__(
        self,
        *args: str,
        cwd: Path | None = None,
        env: dict[str, str] | None = None,
        timeout: float = COMMAND_TIMEOUT_S,
    ) -> IrisResult:
        return self.finish(self.popen(*args, cwd=cwd, env=env), args, timeout)


# ---------------------------------------------------------------- local cluster configs


@dataclass
class LocalClusterConfig:
    """A local cluster config file plus the state directory it points at."""

    name: str
    path: Path
    state_dir: Path
    runner: IrisRunner
    start_result: IrisResult | None = None

    @property
    def pid_file(self) -> Path:
        return self.state_dir / "cluster.pid"

    @property
    def url_file(self) -> Path:
        return self.state_dir / "controller.url"

    def pid(self) -> int | None:
        try:
            return int(self.pid_file.read_text().strip())
        except (FileNotFoundError, ValueError):
            return None

    def url(self) -> str:
        return self.url_file.read_text().strip()

    def start(self) -> IrisResult:
        result = self.runner("cluster", "--config", str(self.path), "start")
        assert result.returncode == 0, str(result)
        self.start_result = result
        return result

    def stop(self) -> None:
        """Finalizer: `iris cluster stop`, then kill whatever of the cluster's process tree is left."""
        if not self.pid_file.exists() and not self.url_file.exists():
            return  # never started
        pid = self.pid()
        tree = process_tree(pid) if pid else []
        try:
            self.runner("cluster", "--config", str(self.path), "stop", "--yes")
        finally:
            psutil.wait_procs(tree, timeout=PROCESS_EXIT_TIMEOUT_S)
            kill_all(tree)


def write_local_config(directory: Path, name: str, extra_yaml: str = "") -> tuple[Path, Path]:
    state_dir = directory / "state"
    path = directory / "cluster.yaml"
    path.write_text(
        textwrap.dedent(
            f"""\
            name: {name}
            platform:
              local: {{}}
            controller:
              local:
                port: 0
                state_dir: {state_dir}
            defaults:
              timeouts:
                heartbeat_interval: 1s
                kill_grace_period: 2s
            """
        )
        + textwrap.dedent(extra_yaml)
    )
    return path, state_dir


def send_ctrl_c(process: subprocess.Popen) -> None:
    """What a terminal does on Ctrl-C: SIGINT to the whole foreground process group."""
    os.killpg(process.pid, signal.SIGINT)


def wait_for_file_text(path: Path, timeout: float = 30.0) -> str:
    return wait_until(
        lambda: path.exists() and path.read_text().strip(), timeout, 0.05, f"{path} to be written"
    )
