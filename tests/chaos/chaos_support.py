"""A cluster of real daemons under chaos: each daemon is the venv's interpreter in its own session,
so a SIGKILL reaches the daemon itself, and each carries a marker in its environment (as does every
task, through its job's environment) so that a scan of /proc finds whatever the run left behind."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import textwrap
import time
from collections import Counter
from pathlib import Path
from typing import Any

import httpx
import psutil
from process_support import stop_processes

from iris import chaos
from iris.client import IrisClient
from iris.client.client import IDEMPOTENT_METHODS, ControllerUnavailableError, IrisError
from iris.rpc import cluster_pb2 as pb
from iris.time import wait_until

MARKER_ENV = "IRIS_CHAOS_SUITE_MARKER"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class PatientClient(IrisClient):
    """A client that rides out a controller restart or an injected store failure on any
    idempotent call, LaunchJob included: the retry carries the same request id."""

    patience_s = 45.0

    def call(self, method: str, request: Any, timeout_ms: int | None = None) -> Any:
        deadline = time.monotonic() + self.patience_s
        while True:
            try:
                return super().call(method, request, timeout_ms)
            except IrisError as exc:
                transient = isinstance(exc, ControllerUnavailableError) or "(unavailable)" in str(exc)
                if method not in IDEMPOTENT_METHODS or not transient or time.monotonic() > deadline:
                    raise
            time.sleep(0.2)


class ChaosCluster:
    def __init__(self, root: Path, marker: str, chaos_env: dict[str, str]):
        self.root = root
        self.marker = marker
        self.state_dir = root / "state"
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.config = root / "cluster.yaml"
        self.config.write_text(
            textwrap.dedent(
                f"""
                name: chaos
                platform:
                  local: {{}}
                storage:
                  bundle_prefix: file://{self.state_dir}/bundles
                controller:
                  local:
                    state_dir: {self.state_dir}
                defaults:
                  timeouts:
                    heartbeat_interval: 500ms
                    worker_timeout: 4s
                    kill_grace_period: 1s
                """
            )
        )
        self.env = {**os.environ, MARKER_ENV: marker, **chaos_env}
        # A daemon started again draws new faults: its seed counts its incarnations.
        self._incarnations: Counter[str] = Counter()
        self.controller: subprocess.Popen | None = None
        self.workers: dict[str, subprocess.Popen] = {}
        self.worker_args: dict[str, list[str]] = {}

    def _spawn(self, args: list[str], log_name: str) -> subprocess.Popen:
        incarnation = self._incarnations[log_name]
        self._incarnations[log_name] += 1
        env = dict(self.env)
        if chaos.ENV_SEED in env:
            env[chaos.ENV_SEED] = str(int(env[chaos.ENV_SEED]) + 1000 * incarnation)
        with open(self.root / log_name, "ab") as log:
            return subprocess.Popen(
                [sys.executable, "-m", *args],
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=env,
                start_new_session=True,
            )

    def start_controller(self) -> None:
        self.controller = self._spawn(
            ["iris.cluster.controller.main", "serve", "--config", str(self.config), "--host", "127.0.0.1",
             "--port", str(self.port)],
            "controller.log",
        )  # fmt: skip

        def healthy() -> bool:
            assert self.controller is not None
            if self.controller.poll() is not None:
                tail = (self.root / "controller.log").read_text()[-3000:]
                raise RuntimeError(f"controller exited with {self.controller.returncode}: {tail}")
            try:
                return httpx.get(f"{self.url}/health", timeout=1).status_code == 200
            except httpx.HTTPError:
                return False

        wait_until(healthy, 30, 0.05, "the controller to answer /health")

    def start_worker(self, worker_id: str, *extra: str) -> None:
        args = self.worker_args.setdefault(worker_id, list(extra))
        self.workers[worker_id] = self._spawn(
            ["iris.cluster.worker.main", "serve", "--controller-address", self.url, "--host", "127.0.0.1",
             "--port", "0", "--cache-dir", str(self.root / "workers" / worker_id), "--worker-id", worker_id,
             "--kill-grace", "1", *args],
            f"worker-{worker_id}.log",
        )  # fmt: skip

    def wait_for_workers(self, client: IrisClient, count: int) -> None:
        def ready() -> bool:
            return sum(w.state == pb.WORKER_STATE_HEALTHY for w in client.list_workers()) >= count

        wait_until(ready, 60, 0.1, f"{count} workers to register")

    def kill_controller(self) -> None:
        assert self.controller is not None
        os.killpg(self.controller.pid, signal.SIGKILL)
        self.controller.wait()

    def kill_worker(self, worker_id: str) -> None:
        # The worker alone, as when its host's OOM killer picks it: its tasks are for it to clean up.
        process = self.workers[worker_id]
        process.send_signal(signal.SIGKILL)
        process.wait()

    def stop(self) -> None:
        stop_processes([*self.workers.values(), *([self.controller] if self.controller else [])], 20)

    def marked_processes(self) -> list[psutil.Process]:
        """Every live process whose environment carries this run's marker: daemons and tasks."""
        found = []
        for process in psutil.process_iter():
            try:
                if process.environ().get(MARKER_ENV) == self.marker and process.status() != psutil.STATUS_ZOMBIE:
                    found.append(process)
            except (psutil.Error, OSError):
                continue
        return found

    def kill_marked_processes(self) -> None:
        for process in self.marked_processes():
            try:
                process.kill()
            except psutil.NoSuchProcess:
                continue
