"""A whole cluster on this machine: the controller in this process, workers as subprocesses.

Two ways to get workers: a config with scale groups gets them from the autoscaler and the
LocalPlatform (min_slices at start, more on demand), exactly as a cloud cluster would; without
scale groups, a fixed list of worker daemons is started (`IrisClient.local(workers=N)`,
`iris run --local`). Either way each worker is a real daemon talking Connect RPC. With
`fork_workers` the fixed workers are forks of this process rather than new interpreters (see
`iris.cluster.local_worker`), when this process runs a single thread at that moment.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import signal
import socket
import subprocess
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from iris.cluster import task_env
from iris.cluster.auth.tokens import AuthMode, parse_mode
from iris.cluster.controller.settings import DaemonSettings
from iris.cluster.listening_socket import bind_socket, url_for
from iris.cluster.local_worker import ForkedProcess, can_fork, fork_worker
from iris.cluster.platform.local import STOP_TIMEOUT_S, LocalWorkerSpec, spawn_worker, worker_args
from iris.config import apply_defaults
from iris.rpc import cluster_pb2 as pb
from iris.rpc import config_pb2
from iris.time import wait_until

if TYPE_CHECKING:
    from iris.cluster.controller.main import ControllerDaemon

logger = logging.getLogger(__name__)


class LocalCluster:
    def __init__(
        self,
        config: config_pb2.IrisClusterConfig | None = None,
        workers: list[LocalWorkerSpec] | None = None,
        state_dir: Path | None = None,
        port: int = 0,
        worker_env: dict[str, str] | None = None,
        config_path: str | None = None,
        fork_workers: bool = False,
    ):
        """`fork_workers` is for a program that starts a local cluster as its first act, such as
        `iris run --local`: a fork copies the whole process, which must hold nothing a worker
        should not inherit."""
        self._tempdir = None
        if state_dir is None:
            self._tempdir = tempfile.TemporaryDirectory(prefix="iris-local-")
            state_dir = Path(self._tempdir.name)
        self.state_dir = state_dir
        if config is None:
            # A throwaway cluster keeps its bundles with the rest of its state.
            config = config_pb2.IrisClusterConfig()
            config.platform.local.SetInParent()
            config.storage.bundle_prefix = f"file://{state_dir / 'bundles'}"
        self.config = apply_defaults(config)
        self._config_path = config_path
        if workers is None and not self.config.scale_groups:
            workers = [LocalWorkerSpec("local-0")]
        self.worker_specs = workers or []
        self._port = port
        self._worker_env = worker_env or {}
        self._fork_workers = fork_workers
        self.daemon: ControllerDaemon | None = None
        self.worker_processes: dict[str, subprocess.Popen | ForkedProcess] = {}

    @property
    def url(self) -> str:
        if self.daemon is None:
            raise RuntimeError("the local cluster is not started")
        return self.daemon.url

    def expected_worker_count(self) -> int:
        if self.worker_specs:
            return len(self.worker_specs)
        return sum(g.min_slices * max(1, g.slice_template.num_vms) for g in self.config.scale_groups.values())

    def start(self, progress: Callable[[str], None] | None = None, timeout: float = 60.0) -> LocalCluster:
        say = progress or (lambda message: None)
        sock = bind_socket("127.0.0.1", self._port)
        controller_url = url_for(sock)
        # A worker needs only the controller's address, which the bound socket already fixes. Started
        # before the controller is built, the worker's interpreter start and imports run beside the
        # controller's, and its registration waits in the socket's backlog until the controller
        # serves. With auth on, a worker needs a token from the controller, so it starts after it.
        workers_first = parse_mode(self.config.auth.mode) is AuthMode.NONE
        # Whatever ends the start (a worker that dies, Ctrl-C, SIGTERM) must not leave workers behind.
        try:
            if workers_first:
                for spec in self.worker_specs:
                    self._spawn_worker(spec, controller_url, worker_token="", listening=sock)
            # Imported here so that the workers above start before this import's time is spent.
            from iris.cluster.controller.main import ControllerDaemon

            settings = DaemonSettings.from_config(
                self.config,
                state_dir=self.state_dir,
                host="127.0.0.1",
                port=self._port,
                config_path=self._config_path,
            )
            if self._tempdir is not None:
                settings = dataclasses.replace(settings, durable_store=False)
            self.daemon = ControllerDaemon(settings, sock)
            self.daemon.start_in_thread()
            say(f"controller listening on {self.daemon.url}")
            if not workers_first:
                for spec in self.worker_specs:
                    self.start_worker(spec)
            expected = self.expected_worker_count()
            if expected:
                say(f"starting {expected} worker(s)")
                self.wait_for_workers(expected, timeout)
                say(f"{expected} worker(s) registered")
        except BaseException:
            if self.daemon is None:
                sock.close()
            self.stop()
            raise
        return self

    def start_worker(self, spec: LocalWorkerSpec) -> subprocess.Popen | ForkedProcess:
        assert self.daemon is not None
        return self._spawn_worker(spec, self.daemon.url, self.daemon.worker_token())

    def _spawn_worker(
        self,
        spec: LocalWorkerSpec,
        controller_url: str,
        worker_token: str,
        listening: socket.socket | None = None,
    ) -> subprocess.Popen | ForkedProcess:
        """`listening` is the controller's socket, which a forked worker must not keep open."""
        kill_grace = self.config.defaults.timeouts.kill_grace_period.milliseconds / 1000
        work_dir = self.state_dir / "workers" / spec.worker_id.replace("/", "_")
        env = dict(self._worker_env)
        if worker_token:
            env[task_env.WORKER_TOKEN] = worker_token
        # Fixed workers are not slices: no later controller adopts them, so they end with this process.
        process: subprocess.Popen | ForkedProcess
        if self._fork_workers and can_fork():
            args = worker_args(spec, controller_url, work_dir, kill_grace, exit_with_pid=os.getpid())
            process = fork_worker(args, work_dir / "worker.log", env, [listening] if listening else [])
        else:
            process = spawn_worker(spec, controller_url, work_dir, kill_grace, env, exit_with_pid=os.getpid())
        self.worker_processes[spec.worker_id] = process
        return process

    def healthy_worker_ids(self) -> set[str]:
        assert self.daemon is not None
        return {w.worker_id for w in self.daemon.store.list_workers() if w.state == pb.WORKER_STATE_HEALTHY}

    def wait_for_workers(self, count: int, timeout: float = 60.0) -> None:
        def ready() -> bool:
            for worker_id, process in self.worker_processes.items():
                if process.poll() is not None:
                    log = self.state_dir / "workers" / worker_id.replace("/", "_") / "worker.log"
                    tail = log.read_text(errors="replace").strip().splitlines()[-5:] if log.exists() else []
                    raise RuntimeError(
                        f"local worker {worker_id} exited with code {process.returncode}: " + " | ".join(tail)
                    )
            return len(self.healthy_worker_ids()) >= count

        # A worker started beside the controller registers as soon as it serves, a millisecond or
        # two after the controller does: a short poll keeps a cold start from waiting most of an
        # interval for a registration already made.
        wait_until(ready, timeout, 0.002, f"{count} local worker(s) to register")

    def stop_worker(self, worker_id: str, sig: int = signal.SIGTERM) -> None:
        process = self.worker_processes.pop(worker_id)
        if process.poll() is None:
            process.send_signal(sig)
            try:
                process.wait(STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()

    def stop(self, terminate_slices: bool = True) -> None:
        """Stop the controller, the fixed workers and (unless asked not to) the autoscaled slices."""
        platform = self.daemon.platform if self.daemon is not None else None
        # The controller goes first so that it does not report the departing workers as failed.
        if self.daemon is not None:
            self.daemon.stop()
            self.daemon = None
        for process in self.worker_processes.values():
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
        for worker_id in list(self.worker_processes):
            self.stop_worker(worker_id)
        if platform is not None and terminate_slices:
            for handle in platform.list_slices([]):
                handle.terminate()
            platform.shutdown()
        if self._tempdir is not None:
            self._tempdir.cleanup()
            self._tempdir = None

    def __enter__(self) -> LocalCluster:
        return self.start()

    def __exit__(self, *exc_info) -> None:
        self.stop()
