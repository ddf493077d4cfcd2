"""A whole cluster on this machine: the controller in this process, workers as subprocesses.

Used by `IrisClient.local()`, `iris run --local`, `iris cluster controller run-local` and the
background cluster `iris cluster start` keeps for a local config. Each worker is a real worker
daemon talking Connect RPC to the controller, exactly as on a remote host.
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from iris.cluster.controller.main import ControllerDaemon
from iris.config import apply_defaults
from iris.rpc import cluster_pb2 as pb
from iris.rpc import config_pb2
from iris.time import wait_until

logger = logging.getLogger(__name__)

WORKER_STOP_TIMEOUT_S = 15.0


@dataclass
class LocalWorkerSpec:
    worker_id: str
    attributes: dict[str, str] = field(default_factory=dict)
    cpu: float | None = None
    memory_bytes: int | None = None


def worker_specs_from_config(config: config_pb2.IrisClusterConfig) -> list[LocalWorkerSpec]:
    """One worker per VM of each scale group's minimum slices; one plain worker if none."""
    specs = []
    for group_name, group in sorted(config.scale_groups.items()):
        template = group.slice_template
        for slice_index in range(max(group.min_slices, 0)):
            slice_name = f"{group_name}-{slice_index}"
            for vm_index in range(max(template.num_vms, 1)):
                attributes = {"scale-group": group_name, "slice": slice_name, "vm-index": str(vm_index)}
                attributes.update(template.local.attributes)
                resources = group.resources
                specs.append(
                    LocalWorkerSpec(
                        worker_id=f"{slice_name}-{vm_index}",
                        attributes=attributes,
                        cpu=float(resources.cpu) if resources.cpu else None,
                        memory_bytes=resources.ram or None,
                    )
                )
    return specs or [LocalWorkerSpec("local-0")]


class LocalCluster:
    def __init__(
        self,
        config: config_pb2.IrisClusterConfig | None = None,
        workers: list[LocalWorkerSpec] | None = None,
        state_dir: Path | None = None,
        port: int = 0,
        worker_env: dict[str, str] | None = None,
    ):
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
        self.worker_specs = workers if workers is not None else worker_specs_from_config(self.config)
        self._port = port
        self._worker_env = worker_env or {}
        self.daemon: ControllerDaemon | None = None
        self.worker_processes: dict[str, subprocess.Popen] = {}

    @property
    def url(self) -> str:
        if self.daemon is None:
            raise RuntimeError("the local cluster is not started")
        return self.daemon.url

    def start(self, progress: Callable[[str], None] | None = None, timeout: float = 60.0) -> LocalCluster:
        say = progress or (lambda message: None)
        timeouts = self.config.defaults.timeouts
        self.daemon = ControllerDaemon(
            state_dir=self.state_dir / "controller",
            bundle_prefix=self.config.storage.bundle_prefix,
            host="127.0.0.1",
            port=self._port,
            heartbeat_interval_s=timeouts.heartbeat_interval.milliseconds / 1000,
            worker_timeout_s=timeouts.worker_timeout.milliseconds / 1000,
        )
        self.daemon.start_in_thread()
        say(f"controller listening on {self.daemon.url}")
        for spec in self.worker_specs:
            self.start_worker(spec)
        say(f"starting {len(self.worker_specs)} worker(s)")
        self.wait_for_workers(len(self.worker_specs), timeout)
        say(f"{len(self.worker_specs)} worker(s) registered")
        return self

    def start_worker(self, spec: LocalWorkerSpec) -> subprocess.Popen:
        assert self.daemon is not None
        worker_dir = self.state_dir / "workers" / spec.worker_id.replace("/", "_")
        worker_dir.mkdir(parents=True, exist_ok=True)
        kill_grace = self.config.defaults.timeouts.kill_grace_period.milliseconds / 1000
        cmd = [
            sys.executable,
            "-m",
            "iris.cluster.worker.main",
            "serve",
            "--controller-address",
            self.daemon.url,
            "--host",
            "127.0.0.1",
            "--port",
            "0",
            "--cache-dir",
            str(worker_dir / "cache"),
            "--runtime",
            "process",
            "--worker-id",
            spec.worker_id,
            "--kill-grace",
            str(kill_grace),
        ]
        if spec.cpu is not None:
            cmd += ["--cpu", str(spec.cpu)]
        if spec.memory_bytes is not None:
            cmd += ["--memory", str(spec.memory_bytes)]
        for key, value in spec.attributes.items():
            cmd += ["--attribute", f"{key}={value}"]
        log = open(worker_dir / "worker.log", "ab")
        process = subprocess.Popen(
            cmd,
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env={**os.environ, **self._worker_env},
            # Ctrl-C in the terminal is for the cluster's owner to handle, not for each worker.
            start_new_session=True,
        )
        log.close()
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

        wait_until(ready, timeout, 0.05, f"{count} local worker(s) to register")

    def stop_worker(self, worker_id: str, sig: int = signal.SIGTERM) -> None:
        process = self.worker_processes.pop(worker_id)
        if process.poll() is None:
            process.send_signal(sig)
            try:
                process.wait(WORKER_STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()

    def stop(self) -> None:
        # The controller goes first so that it does not report the departing workers as failed.
        if self.daemon is not None:
            self.daemon.stop()
            self.daemon = None
        for process in self.worker_processes.values():
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
        for worker_id in list(self.worker_processes):
            self.stop_worker(worker_id)
        if self._tempdir is not None:
            self._tempdir.cleanup()
            self._tempdir = None

    def __enter__(self) -> LocalCluster:
        return self.start()

    def __exit__(self, *exc_info) -> None:
        self.stop()
