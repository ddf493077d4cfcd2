"""LocalPlatform: slices are groups of worker daemons started as processes on this machine.

Each worker is the real worker daemon, registering with the controller over Connect RPC like one
on a remote host, and reporting slice attributes (scale-group, slice-id, tpu-name,
tpu-worker-id) so gangs can be placed on a local "slice". Slices and the controller "VM" are
recorded as JSON files under the platform's state directory, so a controller restarted after a
crash finds the slices that kept running (`list_slices`) and adopts them.
"""

from __future__ import annotations

import json
import logging
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import TextIO

from iris.cluster.platform.base import (
    CloudSliceState,
    CloudWorkerState,
    CommandResult,
    Labels,
    PlatformError,
    ResourceNotFoundError,
    SliceStatus,
    VmLogKind,
    WorkerStatus,
)
from iris.cluster.platform.bootstrap import worker_env, worker_offer_flags
from iris.cluster.types import ATTR_SCALE_GROUP, ATTR_TPU_NAME, ATTR_TPU_WORKER_ID, ATTR_ZONE, AttributeValue
from iris.config import DEFAULT_CONTROLLER_PORT, DEFAULT_KILL_GRACE_PERIOD, DEFAULT_LABEL_PREFIX, state_dir_of
from iris.rpc import config_pb2
from iris.time import Duration, Timestamp, wait_until

logger = logging.getLogger(__name__)

STOP_TIMEOUT_S = 15.0


@dataclass
class LocalWorkerSpec:
    """One local worker daemon: its id, what it reports, and what it offers."""

    worker_id: str
    attributes: dict[str, str] = field(default_factory=dict)
    # The slice the worker belongs to; empty for a standalone worker.
    slice_id: str = ""
    cpu: float | None = None
    memory_bytes: int | None = None
    tpu_variant: str = ""
    gpu_spec: str = ""


def worker_args(
    spec: LocalWorkerSpec,
    controller_url: str,
    work_dir: Path,
    kill_grace_s: float,
    exit_with_pid: int | None = None,
) -> list[str]:
    """The worker daemon's arguments after `python -m iris.cluster.worker.main`, on a free port."""
    args = [
        "serve",
        "--controller-address", controller_url,
        "--host", "127.0.0.1",
        "--port", "0",
        "--cache-dir", str(work_dir / "cache"),
        "--runtime", "process",
        "--worker-id", spec.worker_id,
        "--kill-grace", str(kill_grace_s),
    ]  # fmt: skip
    if spec.slice_id:
        args += ["--slice-id", spec.slice_id]
    args += worker_offer_flags(spec.attributes, spec.cpu, spec.memory_bytes, spec.tpu_variant, spec.gpu_spec)
    if exit_with_pid is not None:
        args += ["--exit-with-pid", str(exit_with_pid)]
    return args


def spawn_worker(
    spec: LocalWorkerSpec,
    controller_url: str,
    work_dir: Path,
    kill_grace_s: float,
    env: dict[str, str] | None = None,
    exit_with_pid: int | None = None,
) -> subprocess.Popen:
    """Start a worker daemon on a free port; its output goes to <work_dir>/worker.log. With
    `exit_with_pid` the worker stops when that process ends; without, it outlives its starter."""
    work_dir.mkdir(parents=True, exist_ok=True)
    cmd = [
        sys.executable, "-m", "iris.cluster.worker.main",
        *worker_args(spec, controller_url, work_dir, kill_grace_s, exit_with_pid),
    ]  # fmt: skip
    with open(work_dir / "worker.log", "ab") as log:
        return subprocess.Popen(
            cmd,
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env={**os.environ, **(env or {})},
            # Slices' workers outlive a crashed controller (to be re-adopted); no worker takes the
            # terminal's Ctrl-C.
            start_new_session=True,
        )


def _run_local_command(command: str, timeout: Duration | None, on_line) -> CommandResult:
    result = subprocess.run(
        ["bash", "-c", command], capture_output=True, text=True, timeout=timeout.seconds if timeout else None
    )
    if on_line is not None:
        for line in result.stdout.splitlines():
            on_line(line)
    return CommandResult(result.returncode, result.stdout, result.stderr)


def _process_alive(pid: int, create_time: float) -> bool:
    import psutil

    try:
        process = psutil.Process(pid)
        return process.create_time() == create_time and process.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def _create_time(pid: int) -> float:
    """When the process started, as psutil tells it: with the pid, it names the process even after
    the pid is reused."""
    # psutil is imported by the functions that use it: a local cluster without scale groups (`iris
    # run --local`) never does, and its import sits on the way to the controller serving.
    import psutil

    return psutil.Process(pid).create_time()


def _stop_process(pid: int, create_time: float) -> None:
    if not _process_alive(pid, create_time):
        return
    try:
        os.killpg(pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    try:
        wait_until(lambda: not _process_alive(pid, create_time), STOP_TIMEOUT_S, 0.05, f"process {pid} to stop")
    except TimeoutError:
        try:
            os.killpg(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


class _LocalProcessHandle:
    """A process of this machine standing in for a remote host: a worker or the controller."""

    _ID_KEY = "worker_id"

    def __init__(self, record: dict):
        self._record = record

    @property
    def worker_id(self) -> str:
        return self._record[self._ID_KEY]

    @property
    def internal_address(self) -> str:
        return "127.0.0.1"

    @property
    def external_address(self) -> str | None:
        return None

    @property
    def pid(self) -> int:
        return self._record["pid"]

    @property
    def log_path(self) -> Path:
        return Path(self._record["log_path"])

    def alive(self) -> bool:
        return _process_alive(self._record["pid"], self._record["create_time"])

    def status(self) -> WorkerStatus:
        return WorkerStatus(CloudWorkerState.RUNNING if self.alive() else CloudWorkerState.TERMINATED)

    def run_command(self, command: str, timeout: Duration | None = None, on_line=None) -> CommandResult:
        return _run_local_command(command, timeout, on_line)

    def reboot(self) -> None:
        raise PlatformError(f"{self.worker_id} is a local process and cannot be rebooted; stop and start it instead")


class LocalWorkerHandle(_LocalProcessHandle):
    pass


class LocalSliceHandle:
    def __init__(self, platform: LocalPlatform, record: dict):
        self._platform = platform
        self._record = record

    @property
    def slice_id(self) -> str:
        return self._record["slice_id"]

    @property
    def zone(self) -> str:
        return self._record.get("zone", "local")

    @property
    def scale_group(self) -> str:
        return self.labels.get(Labels(self._platform.label_prefix).scale_group, "")

    @property
    def labels(self) -> dict[str, str]:
        return dict(self._record["labels"])

    @property
    def created_at(self) -> Timestamp:
        return Timestamp(self._record["created_at_ms"])

    def workers(self) -> list[LocalWorkerHandle]:
        return [LocalWorkerHandle(w) for w in self._record["workers"]]

    def describe(self) -> SliceStatus:
        workers = self.workers()
        dead = [w.worker_id for w in workers if not w.alive()]
        if self._record.get("deleting"):
            return SliceStatus(CloudSliceState.DELETING, len(workers), list(workers))
        if dead:
            last_words = _last_error(next(w for w in workers if not w.alive()).log_path)
            return SliceStatus(
                CloudSliceState.FAILED,
                len(workers),
                list(workers),
                message=f"worker process(es) {', '.join(dead)} exited"
                + (f", the first saying: {last_words}" if last_words else "; see their worker.log"),
            )
        return SliceStatus(CloudSliceState.READY, len(workers), list(workers))

    def terminate(self) -> None:
        self._platform._terminate_slice(self.slice_id)


class LocalControllerHandle(_LocalProcessHandle):
    """The local controller "VM": a controller daemon process started by `create_vm`."""

    _ID_KEY = "name"

    def __init__(self, platform: LocalPlatform, record: dict):
        super().__init__(record)
        self._platform = platform

    @property
    def labels(self) -> dict[str, str]:
        return dict(self._record["labels"])

    @property
    def metadata(self) -> dict[str, str]:
        return dict(self._record["metadata"])

    def terminate(self) -> None:
        _stop_process(self._record["pid"], self._record["create_time"])
        self._platform._vm_path(self.worker_id).unlink(missing_ok=True)

    def set_labels(self, labels: dict[str, str]) -> None:
        self._record["labels"].update(labels)
        self._platform._write(self._platform._vm_path(self.worker_id), self._record)

    def set_metadata(self, metadata: dict[str, str]) -> None:
        self._record["metadata"].update(metadata)
        self._platform._write(self._platform._vm_path(self.worker_id), self._record)


class LocalPlatform:
    def __init__(
        self,
        state_dir: Path,
        label_prefix: str = "iris",
        group_resources: dict[str, config_pb2.ScaleGroupResources] | None = None,
        kill_grace_s: float = DEFAULT_KILL_GRACE_PERIOD.seconds,
        config_path: str | None = None,
    ):
        self.state_dir = state_dir
        self.label_prefix = label_prefix
        self._group_resources = group_resources or {}
        self._kill_grace_s = kill_grace_s
        self._config_path = config_path
        self._lock = threading.Lock()
        self._started_slices: set[str] = set()
        self._started_vms: set[str] = set()
        (state_dir / "slices").mkdir(parents=True, exist_ok=True)
        (state_dir / "vms").mkdir(parents=True, exist_ok=True)

    # ------------------------------------------------------------ records

    def _slice_path(self, slice_id: str) -> Path:
        return self.state_dir / "slices" / f"{slice_id}.json"

    def _vm_path(self, name: str) -> Path:
        return self.state_dir / "vms" / f"{name}.json"

    @staticmethod
    def _write(path: Path, record: dict) -> None:
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(record, indent=1))
        tmp.replace(path)

    @staticmethod
    def _matches(labels: dict[str, str], wanted: dict[str, str] | None) -> bool:
        return all(labels.get(k) == v for k, v in (wanted or {}).items())

    # ------------------------------------------------------------ slices

    def create_slice(
        self, config: config_pb2.SliceConfig, bootstrap_config: config_pb2.BootstrapConfig
    ) -> LocalSliceHandle:
        if not bootstrap_config.controller_address:
            raise PlatformError("cannot start local workers: the bootstrap config has no controller_address")
        slice_id = f"{config.name_prefix or self.label_prefix}-{Timestamp.now().epoch_ms}"
        with self._lock:
            while self._slice_path(slice_id).exists():
                slice_id += "x"
            labels = dict(config.labels)
            labels[Labels(self.label_prefix).slice_id] = slice_id
            group = labels.get(Labels(self.label_prefix).scale_group, "")
            resources = self._group_resources.get(group, config_pb2.ScaleGroupResources())
            record = {
                "slice_id": slice_id,
                "zone": "local",
                "labels": labels,
                "created_at_ms": Timestamp.now().epoch_ms,
                "workers": [],
            }
            tpu = config.accelerator_variant if config.accelerator_type == config_pb2.ACCELERATOR_TYPE_TPU else ""
            gpu = ""
            if config.accelerator_type == config_pb2.ACCELERATOR_TYPE_GPU:
                gpu = f"{config.accelerator_variant}x{resources.gpu_count or 1}"
            for index in range(max(config.num_vms, 1)):
                worker_id = f"{slice_id}-{index}"
                attributes = {
                    ATTR_SCALE_GROUP: group,
                    ATTR_TPU_NAME: slice_id,
                    ATTR_TPU_WORKER_ID: str(index),
                    ATTR_ZONE: "local",
                    **config.local.attributes,
                }
                spec = LocalWorkerSpec(
                    worker_id,
                    attributes,
                    slice_id=slice_id,
                    cpu=float(resources.cpu) if resources.cpu else None,
                    memory_bytes=resources.ram or None,
                    tpu_variant=tpu,
                    gpu_spec=gpu,
                )
                work_dir = self.state_dir / "workers" / worker_id
                env = worker_env(bootstrap_config)
                process = spawn_worker(spec, bootstrap_config.controller_address, work_dir, self._kill_grace_s, env)
                record["workers"].append(
                    {
                        "worker_id": worker_id,
                        "pid": process.pid,
                        "create_time": _create_time(process.pid),
                        "log_path": str(work_dir / "worker.log"),
                    }
                )
            self._write(self._slice_path(slice_id), record)
            self._started_slices.add(slice_id)
        logger.info("created local slice %s with %d worker(s)", slice_id, len(record["workers"]))
        return LocalSliceHandle(self, record)

    def _load_slice(self, path: Path) -> dict | None:
        try:
            return json.loads(path.read_text())
        except (FileNotFoundError, json.JSONDecodeError):
            return None

    def list_slices(self, zones: list[str], labels: dict[str, str] | None = None) -> list[LocalSliceHandle]:
        handles = []
        for path in sorted((self.state_dir / "slices").glob("*.json")):
            record = self._load_slice(path)
            if record is not None and self._matches(record["labels"], labels):
                handles.append(LocalSliceHandle(self, record))
        return handles

    def get_slice(self, slice_id: str) -> LocalSliceHandle:
        record = self._load_slice(self._slice_path(slice_id))
        if record is None:
            raise ResourceNotFoundError(f"local slice {slice_id} does not exist")
        return LocalSliceHandle(self, record)

    def _terminate_slice(self, slice_id: str) -> None:
        path = self._slice_path(slice_id)
        record = self._load_slice(path)
        if record is None:
            return
        record["deleting"] = True
        self._write(path, record)
        for worker in record["workers"]:
            _stop_process(worker["pid"], worker["create_time"])
        path.unlink(missing_ok=True)
        with self._lock:
            self._started_slices.discard(slice_id)
        logger.info("terminated local slice %s", slice_id)

    # ------------------------------------------------------------ the controller "VM"

    def create_vm(self, config: config_pb2.VmConfig) -> LocalControllerHandle:
        """Start the local controller (with its autoscaler) for this platform's cluster config,
        detached from the caller, as `iris cluster controller run-local`."""
        if not self._config_path:
            raise PlatformError("this local platform has no cluster config to start a controller with")
        name = config.name or f"{self.label_prefix}-controller"
        log_path = self.state_dir / f"{name}.log"
        command = [sys.executable, "-m", "iris.cli.main", "cluster", "--config", self._config_path, "controller", "run-local"]
        with open(log_path, "ab") as log:
            process = subprocess.Popen(
                command,
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )
        record = {
            "name": name,
            "pid": process.pid,
            "create_time": _create_time(process.pid),
            "log_path": str(log_path),
            "labels": dict(config.labels),
            "metadata": dict(config.metadata),
        }
        self._write(self._vm_path(name), record)
        with self._lock:
            self._started_vms.add(name)
        return LocalControllerHandle(self, record)

    def list_vms(self, zones: list[str], labels: dict[str, str] | None = None) -> list[LocalControllerHandle]:
        handles = []
        for path in sorted((self.state_dir / "vms").glob("*.json")):
            record = self._load_slice(path)
            if record is None or not self._matches(record["labels"], labels):
                continue
            handle = LocalControllerHandle(self, record)
            if handle.alive():
                handles.append(handle)
            else:
                path.unlink(missing_ok=True)
        return handles

    def discover_controller(self, config: config_pb2.IrisClusterConfig) -> str | None:
        labels = Labels(self.label_prefix)
        for vm in self.list_vms([], {labels.controller: "true"}):
            address = vm.metadata.get(f"iris-controller-address-{self.label_prefix}")
            if address and _healthy(address):
                return address
        return None

    def tunnel(self, address: str, local_port: int | None = None) -> AbstractContextManager[str]:
        return nullcontext(address)

    def _log_path(self, vm_id: str) -> Path:
        for slice_handle in self.list_slices([]):
            for worker in slice_handle.workers():
                if worker.worker_id == vm_id:
                    return worker.log_path
        for vm in self.list_vms([]):
            if vm.worker_id == vm_id:
                return vm.log_path
        raise ResourceNotFoundError(f"no local worker or VM named {vm_id}")

    def worker_logs(self, worker_id: str, tail_lines: int) -> str:
        return _tail(self._log_path(worker_id), tail_lines)

    def vm_log(
        self,
        vm_id: str,
        kind: VmLogKind,
        tail_lines: int,
        on_line: Callable[[str], None],
        follow: bool = False,
    ) -> None:
        """A local process has no bootstrap of its own: both kinds are the process's one log."""
        path = self._log_path(vm_id)
        if not path.exists():
            return
        with open(path, errors="replace") as log:
            for line in log.read().splitlines()[-tail_lines:]:
                on_line(line)
            if follow:
                _follow(log, on_line)

    def shutdown(self) -> None:
        """Stop every slice and controller this object started, leaving nothing running.

        Slices adopted from an earlier process are not this object's to end; `terminate()` them.
        """
        with self._lock:
            started_slices, started_vms = list(self._started_slices), list(self._started_vms)
            self._started_slices.clear()
            self._started_vms.clear()
        for slice_id in started_slices:
            self._terminate_slice(slice_id)
        for name in started_vms:
            record = self._load_slice(self._vm_path(name))
            if record is not None:
                LocalControllerHandle(self, record).terminate()


def _healthy(address: str) -> bool:
    # httpx is imported by the one check that uses it, not by every local cluster's start.
    import httpx

    try:
        return httpx.get(f"{address}/health", timeout=2).status_code == 200
    except httpx.HTTPError:
        return False


def _tail(path: Path, lines: int) -> str:
    if not path.exists():
        return ""
    return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])


_FOLLOW_POLL_S = 0.2
_ERROR_LINE = re.compile(r"Error|error:|Exception|Fatal")


def _last_error(path: Path) -> str:
    """The line of a dead process's log that best says why it died: the last one naming an error
    (a traceback's last line), else its last line."""
    lines = [line.strip() for line in _tail(path, 40).splitlines() if line.strip()]
    errors = [line for line in lines if _ERROR_LINE.search(line)]
    return (errors or lines or [""])[-1]


def _follow(log: TextIO, on_line: Callable[[str], None]) -> None:
    """Pass each line appended to the open `log` past where it was read, until interrupted (as `tail -f`)."""
    pending = ""
    while True:
        chunk = log.read()
        if not chunk:
            time.sleep(_FOLLOW_POLL_S)
            continue
        pending += chunk
        *lines, pending = pending.split("\n")
        for line in lines:
            on_line(line)



class LocalProvider:
    """The local platform's part of the config and of autoscaler routing."""

    name = "local"
    zone_field = None

    def apply_defaults(self, config: config_pb2.IrisClusterConfig) -> None:
        if config.controller.WhichOneof("controller") is None:
            config.controller.local.port = DEFAULT_CONTROLLER_PORT
        state_dir = state_dir_of(config)
        bootstrap = config.defaults.bootstrap
        # Workers are processes of this user, who usually cannot write to /var/cache and may have
        # no container engine.
        bootstrap.runtime = bootstrap.runtime or "process"
        bootstrap.cache_dir = bootstrap.cache_dir or os.path.join(state_dir, "cache")
        if not config.storage.bundle_prefix:
            config.storage.bundle_prefix = f"file://{os.path.join(state_dir, 'bundles')}"

    def config_problems(self, config: config_pb2.IrisClusterConfig) -> list[tuple[str, str]]:
        # A local group needs no hosts or zones, and the local controller section is checked by the
        # shared code since every platform may use it.
        return []

    def worker_attributes(self, template: config_pb2.SliceConfig) -> dict[str, AttributeValue]:
        return {ATTR_ZONE: "local", **template.local.attributes}

    def create(
        self, config: config_pb2.IrisClusterConfig, state_dir: Path, config_path: str | None
    ) -> LocalPlatform:
        return LocalPlatform(
            state_dir / "platform",
            config.platform.label_prefix or DEFAULT_LABEL_PREFIX,
            {name: group.resources for name, group in config.scale_groups.items()},
            config.defaults.timeouts.kill_grace_period.milliseconds / 1000 or DEFAULT_KILL_GRACE_PERIOD.seconds,
            config_path,
        )


PROVIDER = LocalProvider()
