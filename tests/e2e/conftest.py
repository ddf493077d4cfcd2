"""A cluster of real daemons for end-to-end tests: the controller and each worker are separate
processes talking Connect RPC, so tests can SIGKILL any of them."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from process_support import stop_processes

from iris.client import IrisClient
from iris.rpc import cluster_pb2 as pb
from iris.time import wait_until


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def write_config(path: Path, state_dir: Path, heartbeat: str = "1s", worker_timeout: str = "5s") -> Path:
    path.write_text(
        textwrap.dedent(
            f"""
            name: e2e
            platform:
              local: {{}}
            storage:
              bundle_prefix: file://{state_dir}/bundles
            controller:
              local:
                state_dir: {state_dir}
            defaults:
              timeouts:
                heartbeat_interval: {heartbeat}
                worker_timeout: {worker_timeout}
                kill_grace_period: 2s
            """
        )
    )
    return path


class ProcessCluster:
    def __init__(self, root: Path, heartbeat: str = "1s", worker_timeout: str = "5s"):
        self.root = root
        self.state_dir = root / "state"
        self.config = write_config(root / "cluster.yaml", self.state_dir, heartbeat, worker_timeout)
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.controller: subprocess.Popen | None = None
        self.workers: dict[str, subprocess.Popen] = {}

    def _spawn(self, args: list[str], log_name: str) -> subprocess.Popen:
        log = open(self.root / log_name, "ab")
        try:
            return subprocess.Popen(
                [sys.executable, "-m", *args], stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL
            )
        finally:
            log.close()

    def start_controller(self) -> None:
        self.controller = self._spawn(
            ["iris.cluster.controller.main", "serve", "--config", str(self.config), "--host", "127.0.0.1",
             "--port", str(self.port)],
            "controller.log",
        )

        def healthy() -> bool:
            assert self.controller is not None
            if self.controller.poll() is not None:
                raise RuntimeError(f"controller exited: {(self.root / 'controller.log').read_text()[-2000:]}")
            try:
                return httpx.get(f"{self.url}/health", timeout=1).status_code == 200
            except httpx.HTTPError:
                return False

        wait_until(healthy, 30, 0.05, "the controller to answer /health")

    def start_worker(self, worker_id: str, *extra: str) -> None:
        cache = self.root / "workers" / worker_id
        self.workers[worker_id] = self._spawn(
            ["iris.cluster.worker.main", "serve", "--controller-address", self.url, "--host", "127.0.0.1",
             "--port", "0", "--cache-dir", str(cache), "--worker-id", worker_id, "--kill-grace", "2", *extra],
            f"worker-{worker_id}.log",
        )

    def wait_for_workers(self, *worker_ids: str) -> None:
        with IrisClient.remote(self.url) as client:
            def ready() -> bool:
                healthy = {w.worker_id for w in client.list_workers() if w.state == pb.WORKER_STATE_HEALTHY}
                return set(worker_ids) <= healthy

            # Each worker is a Python process importing the daemon: a dozen of them starting at once
            # on two busy cores take most of a minute.
            wait_until(ready, 120, 0.05, f"workers {worker_ids} to register")

    def kill_controller(self) -> None:
        assert self.controller is not None
        self.controller.send_signal(signal.SIGKILL)
        self.controller.wait()

    def kill_worker(self, worker_id: str) -> None:
        process = self.workers.pop(worker_id)
        process.send_signal(signal.SIGKILL)
        process.wait()

    def stop(self) -> None:
        stop_processes([*self.workers.values(), *([self.controller] if self.controller else [])], 15)


@pytest.fixture
def process_cluster(tmp_path: Path) -> Iterator[ProcessCluster]:
    cluster = ProcessCluster(tmp_path)
    try:
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    """A user workspace with an importable module and a git-ignored file."""
    ws = tmp_path / "workspace"
    ws.mkdir()
    (ws / "mathlib.py").write_text(
        "def triple(x):\n    return 3 * x\n\n\ndef explode(message):\n    raise ValueError(message)\n"
    )
    (ws / "data.txt").write_text("payload from the workspace\n")
    (ws / "secret.log").write_text("must not be bundled\n")
    (ws / ".gitignore").write_text("*.log\n")
    return ws


@pytest.fixture
def pid_alive():
    def alive(pid: int) -> bool:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        return True

    return alive
