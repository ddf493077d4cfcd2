"""ManualPlatform: a fixed list of hosts per scale group, reached over SSH.

Iris never creates or deletes these machines. A slice is `num_vms` free hosts of its group's
`slice_template.manual.hosts`; `create_slice` takes them from the pool and returns at once
(CREATING), and a background thread connects to every host (BOOTSTRAPPING once all answer), runs
the worker bootstrap script on each (see bootstrap.py), and marks the slice READY, or FAILED with
the reason after stopping whatever it started. `terminate` stops the workers and gives the hosts
back to the pool. No free host is `HostsExhaustedError`, a QuotaExhaustedError, so the autoscaler
backs off as it does for a cloud out of quota.

The platform keeps no records of its own: each worker leaves a marker on its host, and a
restarted controller rebuilds its slices (and which hosts are taken) from what the hosts report.

The controller runs on `controller.manual.host` (`create_vm`), from the controller image or the
bootstrap's Python environment, with its labels and metadata in its marker there; `tunnel()`
forwards a local port to it over SSH for clients that cannot reach the host directly.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlparse

import yaml

from iris.cluster.platform.base import (
    CloudSliceState,
    Labels,
    PlatformError,
    QuotaExhaustedError,
    ResourceNotFoundError,
    SliceRecordView,
    SliceStatus,
    VmLogKind,
    move_slice,
)
from iris.cluster.platform.bootstrap import (
    CONTROLLER_DAEMON_NAME,
    BootstrapConfigError,
    WorkerPlacement,
    controller_daemon,
    list_markers_script,
    local_storage_dirs,
    logs_script,
    parse_markers,
    start_script,
    stop_controller_script,
    stop_worker_script,
    stream_vm_log,
    worker_daemon,
    worker_daemon_name,
    write_marker_script,
)
from iris.cluster.platform.remote_exec import DirectSshRemoteExec, RemoteExecError, RemoteExecWorkerBase
from iris.cluster.types import AttributeValue
from iris.config import DEFAULT_CONTROLLER_PORT, config_to_dict
from iris.rpc import config_pb2
from iris.time import Duration, Timestamp

logger = logging.getLogger(__name__)

# Extra time an SSH command running a bootstrap gets beyond the script's own readiness wait.
_BOOTSTRAP_SLACK = Duration.from_seconds(60)
_STOP_TIMEOUT = Duration.from_seconds(60)
_LIST_TIMEOUT = Duration.from_seconds(30)
# A READY slice's host that fails this many checks in a row (not one lost packet) fails the slice.
_UNANSWERED_CHECKS_TO_FAIL = 3


class HostsExhaustedError(QuotaExhaustedError):
    """Every host a scale group lists is already part of a slice."""


# Every legal move of a manual slice, with what causes it.
SLICE_TRANSITIONS: dict[CloudSliceState, dict[CloudSliceState, str]] = {
    CloudSliceState.CREATING: {
        CloudSliceState.BOOTSTRAPPING: "every host accepted an SSH connection",
        CloudSliceState.FAILED: "a host was unreachable or refused the SSH key",
        CloudSliceState.DELETING: "terminated before the hosts answered",
    },
    CloudSliceState.BOOTSTRAPPING: {
        CloudSliceState.READY: "the worker on every host answered /health",
        CloudSliceState.FAILED: "the bootstrap failed on a host",
        CloudSliceState.DELETING: "terminated during bootstrap",
    },
    CloudSliceState.READY: {
        CloudSliceState.FAILED: "a worker stopped running, or its host stopped answering",
        CloudSliceState.DELETING: "terminated",
    },
    CloudSliceState.FAILED: {
        CloudSliceState.DELETING: "terminated after failing",
    },
    CloudSliceState.DELETING: {},
}


@dataclass
class SshSettings:
    user: str
    key_file: str
    port: int
    connect_timeout: Duration

    def remote(self, host: str) -> DirectSshRemoteExec:
        return DirectSshRemoteExec(host, self.user, self.key_file, self.port, self.connect_timeout)


class ManualWorkerHandle(RemoteExecWorkerBase):
    """The worker of one host of a manual slice."""


class ManualControllerHandle(RemoteExecWorkerBase):
    """The controller daemon on its host; labels and metadata live in its marker there."""

    def __init__(self, remote: DirectSshRemoteExec, marker: dict):
        self._marker = {k: v for k, v in marker.items() if k != "alive"}
        super().__init__(str(self._marker.get("name", CONTROLLER_DAEMON_NAME)), remote)

    @property
    def labels(self) -> dict[str, str]:
        return dict(self._marker.get("labels", {}))

    @property
    def metadata(self) -> dict[str, str]:
        return dict(self._marker.get("metadata", {}))

    def terminate(self) -> None:
        self.run_script(stop_controller_script(), "stopping the controller", timeout=_STOP_TIMEOUT)

    def set_labels(self, labels: dict[str, str]) -> None:
        self._marker["labels"] = {**self.labels, **labels}
        self._write_marker()

    def set_metadata(self, metadata: dict[str, str]) -> None:
        self._marker["metadata"] = {**self.metadata, **metadata}
        self._write_marker()

    def _write_marker(self) -> None:
        script = write_marker_script(CONTROLLER_DAEMON_NAME, self._marker)
        self.run_script(script, "recording the controller's labels", timeout=_LIST_TIMEOUT)


@contextmanager
def _url_of_forward(remote: DirectSshRemoteExec, port: int, local_port: int | None) -> Iterator[str]:
    with remote.forward(port, local_port=local_port) as local:
        yield f"http://127.0.0.1:{local}"


@dataclass
class _SliceRecord:
    slice_id: str
    scale_group: str
    labels: dict[str, str]
    created_at: Timestamp
    workers: list[ManualWorkerHandle]
    state: CloudSliceState = CloudSliceState.CREATING
    message: str = ""
    history: list[tuple[CloudSliceState, Timestamp, str]] = field(default_factory=list)
    cancelled: threading.Event = field(default_factory=threading.Event)


class ManualSliceHandle(SliceRecordView):
    def __init__(self, platform: ManualPlatform, record: _SliceRecord):
        self._platform = platform
        self._record = record

    @property
    def zone(self) -> str:
        return ""


    @property
    def hosts(self) -> list[str]:
        return [w.internal_address for w in self._record.workers]

    def history(self) -> list[tuple[CloudSliceState, Timestamp, str]]:
        return list(self._record.history)

    def describe(self) -> SliceStatus:
        record = self._record
        return SliceStatus(record.state, len(record.workers), list(record.workers), message=record.message)

    def terminate(self) -> None:
        self._platform._terminate(self._record)


class ManualPlatform:
    def __init__(self, config: config_pb2.IrisClusterConfig):
        """`config` is the resolved cluster config (defaults applied)."""
        self._config = config
        self.label_prefix = config.platform.label_prefix or "iris"
        ssh = config.defaults.ssh
        self._ssh_defaults = SshSettings(
            ssh.user, ssh.key_file, ssh.port, Duration.from_proto(ssh.connect_timeout)
        )
        self._ready_timeout = Duration.from_proto(config.defaults.timeouts.init_timeout)
        self._kill_grace_s = config.defaults.timeouts.kill_grace_period.milliseconds / 1000
        self._check_interval = Duration.from_proto(config.defaults.timeouts.ssh_poll_interval)
        self._storage_dirs = local_storage_dirs(config.storage.bundle_prefix, config.storage.log_prefix)
        self._lock = threading.Lock()
        self._slices: dict[str, _SliceRecord] = {}
        # host -> slice id holding it; rebuilt from markers by list_slices after a restart
        self._taken: dict[str, str] = {}
        # host -> when its last slice gave it back (monotonic): a new slice takes the hosts given
        # back longest ago first, so a slice replacing one whose worker died lands on another host
        # whenever one is free, not on the one it just lost.
        self._given_back_at: dict[str, float] = {}
        self._shutdown = threading.Event()

    # ------------------------------------------------------------ helpers

    def _ssh_for(self, template: config_pb2.SliceConfig) -> SshSettings:
        """A group's ssh_user / ssh_key_file override the cluster's defaults.ssh."""
        defaults = self._ssh_defaults
        return SshSettings(
            template.manual.ssh_user or defaults.user,
            template.manual.ssh_key_file or defaults.key_file,
            defaults.port,
            defaults.connect_timeout,
        )

    def _group_templates(self) -> dict[str, config_pb2.SliceConfig]:
        return {
            name: group.slice_template
            for name, group in self._config.scale_groups.items()
            if group.slice_template.WhichOneof("platform") == "manual"
        }

    def _transition(self, record: _SliceRecord, to: CloudSliceState, detail: str = "") -> bool:
        """Apply a move of SLICE_TRANSITIONS; False when the slice was terminated meanwhile."""
        with self._lock:
            moved = move_slice(SLICE_TRANSITIONS, record, to, detail, ignored_from=(CloudSliceState.DELETING,))
        if moved:
            logger.info("manual slice %s -> %s%s", record.slice_id, to.value, f": {detail}" if detail else "")
        return moved

    # ------------------------------------------------------------ slices

    def create_slice(
        self, config: config_pb2.SliceConfig, bootstrap_config: config_pb2.BootstrapConfig
    ) -> ManualSliceHandle:
        if config.WhichOneof("platform") != "manual":
            raise PlatformError(
                "the manual platform creates slices from a slice_template with a 'manual:' section"
            )
        labels = dict(config.labels)
        keys = Labels(self.label_prefix)
        group = labels.get(keys.scale_group, "")
        wanted = max(config.num_vms, 1)
        slice_id = f"{config.name_prefix or self.label_prefix}-{Timestamp.now().epoch_ms}"
        with self._lock:
            while slice_id in self._slices:
                slice_id += "x"
            free = [host for host in config.manual.hosts if host not in self._taken]
            if len(free) < wanted:
                raise HostsExhaustedError(
                    f"scale group {group or '?'} needs {wanted} free host(s) but {len(free)} of its "
                    f"{len(config.manual.hosts)} are free; add hosts to slice_template.manual.hosts or lower max_slices"
                )
            hosts = sorted(free, key=lambda host: self._given_back_at.get(host, 0.0))[:wanted]
            for host in hosts:
                self._taken[host] = slice_id
            labels[keys.slice_id] = slice_id
            ssh = self._ssh_for(config)
            workers = [
                ManualWorkerHandle(f"{slice_id}-{i}", ssh.remote(host)) for i, host in enumerate(hosts)
            ]
            record = _SliceRecord(slice_id, group, labels, Timestamp.now(), workers)
            record.history.append((CloudSliceState.CREATING, Timestamp.now(), "hosts allocated"))
            self._slices[slice_id] = record
        thread = threading.Thread(
            target=self._bring_up,
            args=(record, config, bootstrap_config),
            name=f"manual-{slice_id}",
            daemon=True,
        )
        thread.start()
        logger.info("manual slice %s: bootstrapping %s", slice_id, ", ".join(hosts))
        return ManualSliceHandle(self, record)

    def _placement(self, record: _SliceRecord, config: config_pb2.SliceConfig, index: int) -> WorkerPlacement:
        worker = record.workers[index]
        group = self._config.scale_groups.get(record.scale_group)
        resources = group.resources if group is not None else config_pb2.ScaleGroupResources()
        gpu = ""
        if config.accelerator_type == config_pb2.ACCELERATOR_TYPE_GPU:
            gpu = f"{config.accelerator_variant}x{resources.gpu_count or 1}"
        return WorkerPlacement(
            worker_id=worker.worker_id,
            slice_id=record.slice_id,
            scale_group=record.scale_group,
            advertise_host=worker.internal_address,
            labels=record.labels,
            # Hosts of one slice form a gang, as the workers of a TPU slice do.
            attributes={"tpu-name": record.slice_id, "tpu-worker-id": str(index)},
            cpu=float(resources.cpu) if resources.cpu else None,
            memory_bytes=resources.ram or None,
            tpu_variant=config.accelerator_variant
            if config.accelerator_type == config_pb2.ACCELERATOR_TYPE_TPU
            else "",
            gpu_spec=gpu,
        )

    def _each_worker(
        self, record: _SliceRecord, step: Callable[[int, ManualWorkerHandle], None]
    ) -> list[str]:
        """Run `step` on every worker at once; the failures, one line each."""
        failures: list[str] = []

        def run(index: int) -> None:
            worker = record.workers[index]
            try:
                step(index, worker)
            except (RemoteExecError, BootstrapConfigError) as exc:
                failures.append(str(exc))

        with ThreadPoolExecutor(max_workers=len(record.workers)) as pool:
            list(pool.map(run, range(len(record.workers))))
        return failures

    def _bring_up(
        self,
        record: _SliceRecord,
        config: config_pb2.SliceConfig,
        bootstrap_config: config_pb2.BootstrapConfig,
    ) -> None:
        connect_timeout = self._ssh_defaults.connect_timeout

        def connect(index: int, worker: ManualWorkerHandle) -> None:
            worker.remote_exec.run("true", connect_timeout)

        failures = self._each_worker(record, connect)
        if self._shutdown.is_set():
            return
        if failures:
            self._fail(record, failures)
            return
        if not self._transition(record, CloudSliceState.BOOTSTRAPPING):
            return

        def bootstrap(index: int, worker: ManualWorkerHandle) -> None:
            daemon = worker_daemon(
                bootstrap_config,
                self._placement(record, config, index),
                self._kill_grace_s,
                self._storage_dirs,
            )
            script = start_script(daemon, round(self._ready_timeout.seconds))
            worker.bootstrap(
                script, timeout=Duration.from_seconds(self._ready_timeout.seconds + _BOOTSTRAP_SLACK.seconds)
            )

        failures = self._each_worker(record, bootstrap)
        if self._shutdown.is_set():
            return
        if record.cancelled.is_set():
            # Terminated while the scripts ran: terminate() may have stopped workers before they started.
            self._stop_workers(record)
            return
        if failures:
            self._fail(record, failures)
            return
        if self._transition(record, CloudSliceState.READY):
            self._watch(record)

    def _watch(self, record: _SliceRecord) -> None:
        """Until the slice ends, check its workers every ssh_poll_interval: a worker that stopped
        (its marker says dead or is gone) or a host that stopped answering fails the slice."""
        unanswered = {w.worker_id: 0 for w in record.workers}
        while not record.cancelled.wait(self._check_interval.seconds) and not self._shutdown.is_set():
            problems = []
            for worker in record.workers:
                try:
                    output = worker.run_command(list_markers_script(), _LIST_TIMEOUT).stdout
                except RemoteExecError as exc:
                    unanswered[worker.worker_id] += 1
                    if unanswered[worker.worker_id] >= _UNANSWERED_CHECKS_TO_FAIL:
                        problems.append(f"{worker.internal_address} stopped answering: {exc}".splitlines()[0])
                    continue
                unanswered[worker.worker_id] = 0
                mine = [m for m in parse_markers(output) if m.get("worker_id") == worker.worker_id]
                if not mine or not mine[0]["alive"]:
                    problems.append(f"worker {worker.worker_id} on {worker.internal_address} stopped running")
            if problems and not record.cancelled.is_set():
                reason = problems[0] + (f" (and {len(problems) - 1} more)" if len(problems) > 1 else "")
                self._fail(record, [reason])
                return

    def _fail(self, record: _SliceRecord, failures: list[str]) -> None:
        # One line for `iris cluster slice list`; the full output is in each host's bootstrap.log.
        reason = failures[0].splitlines()[0]
        tail = "\n".join(failures[0].splitlines()[1:])
        if len(failures) > 1:
            reason += f" (and {len(failures) - 1} more host(s) failed)"
        self._stop_workers(record)
        if tail:
            logger.warning("manual slice %s failed: %s\n%s", record.slice_id, reason, tail)
        self._transition(record, CloudSliceState.FAILED, reason)

    def _stop_workers(self, record: _SliceRecord) -> list[str]:
        def stop(index: int, worker: ManualWorkerHandle) -> None:
            worker.run_command(stop_worker_script(worker.worker_id), _STOP_TIMEOUT)

        failures = self._each_worker(record, stop)
        for failure in failures:
            logger.warning("manual slice %s: could not stop a worker: %s", record.slice_id, failure)
        return failures

    def _terminate(self, record: _SliceRecord) -> None:
        record.cancelled.set()
        if record.state != CloudSliceState.DELETING:
            self._transition(record, CloudSliceState.DELETING)
        self._stop_workers(record)
        with self._lock:
            self._slices.pop(record.slice_id, None)
            for worker in record.workers:
                if self._taken.get(worker.internal_address) == record.slice_id:
                    del self._taken[worker.internal_address]
                    self._given_back_at[worker.internal_address] = time.monotonic()
        logger.info("terminated manual slice %s; its hosts are free again", record.slice_id)

    def get_slice(self, slice_id: str) -> ManualSliceHandle:
        with self._lock:
            record = self._slices.get(slice_id)
        if record is None:
            raise ResourceNotFoundError(f"manual slice {slice_id} does not exist")
        return ManualSliceHandle(self, record)

    def list_slices(self, zones: list[str], labels: dict[str, str] | None = None) -> list[ManualSliceHandle]:
        """The slices this platform runs, plus those the hosts' markers show (after a restart)."""
        self._adopt_from_hosts()
        with self._lock:
            records = list(self._slices.values())
        return [
            ManualSliceHandle(self, r)
            for r in records
            if all(r.labels.get(k) == v for k, v in (labels or {}).items())
        ]

    def _adopt_from_hosts(self) -> None:
        templates = self._group_templates()
        with self._lock:
            hosts = {
                host: self._ssh_for(template)
                for template in templates.values()
                for host in template.manual.hosts
                if host not in self._taken
            }
        if not hosts:
            return

        def markers_on(host: str) -> list[dict]:
            try:
                output = hosts[host].remote(host).run(list_markers_script(), _LIST_TIMEOUT)
            except RemoteExecError as exc:
                logger.warning("cannot list Iris workers on %s: %s", host, exc)
                return []
            return [m for m in parse_markers(output.stdout) if m.get("kind") == "worker"]

        with ThreadPoolExecutor(max_workers=min(16, len(hosts))) as pool:
            found = dict(zip(hosts, pool.map(markers_on, hosts)))
        by_slice: dict[str, list[tuple[str, dict]]] = {}
        for host, markers in found.items():
            for marker in markers:
                by_slice.setdefault(marker["slice_id"], []).append((host, marker))
        adopted: list[_SliceRecord] = []
        with self._lock:
            for slice_id, members in by_slice.items():
                if slice_id in self._slices:
                    continue
                members.sort(key=lambda m: m[1]["worker_id"])
                first = members[0][1]
                workers = [
                    ManualWorkerHandle(m["worker_id"], hosts[host].remote(host)) for host, m in members
                ]
                record = _SliceRecord(
                    slice_id,
                    first.get("scale_group", ""),
                    dict(first.get("labels", {})),
                    Timestamp(int(first.get("started_at_ms", 0))),
                    workers,
                )
                dead = [m["worker_id"] for _, m in members if not m.get("alive")]
                record.state = CloudSliceState.FAILED if dead else CloudSliceState.READY
                record.message = f"worker(s) {', '.join(dead)} stopped running" if dead else ""
                record.history.append((record.state, Timestamp.now(), "found on its hosts"))
                self._slices[slice_id] = record
                for host, _ in members:
                    self._taken[host] = slice_id
                logger.info("adopted manual slice %s on %s", slice_id, ", ".join(h for h, _ in members))
                adopted.append(record)
        for record in adopted:
            if record.state == CloudSliceState.READY:
                threading.Thread(
                    target=self._watch, args=(record,), name=f"manual-{record.slice_id}", daemon=True
                ).start()

    # ------------------------------------------------------------ logs and the rest

    def worker_logs(self, worker_id: str, tail_lines: int) -> str:
        with self._lock:
            workers = [w for r in self._slices.values() for w in r.workers if w.worker_id == worker_id]
        if not workers:
            raise ResourceNotFoundError(f"no manual worker named {worker_id}")
        result = workers[0].run_command(logs_script(worker_daemon_name(worker_id), tail_lines), _LIST_TIMEOUT)
        return result.stdout + result.stderr

    def vm_log(
        self,
        vm_id: str,
        kind: VmLogKind,
        tail_lines: int,
        on_line: Callable[[str], None],
        follow: bool = False,
    ) -> None:
        for vm in self.list_vms([]):
            if vm.worker_id == vm_id:
                stream_vm_log(vm, CONTROLLER_DAEMON_NAME, kind, tail_lines, on_line, follow)
                return
        self._adopt_from_hosts()
        with self._lock:
            workers = [w for r in self._slices.values() for w in r.workers if w.worker_id == vm_id]
        if not workers:
            raise ResourceNotFoundError(f"no manual controller VM or worker named {vm_id}")
        stream_vm_log(workers[0], worker_daemon_name(vm_id), kind, tail_lines, on_line, follow)

    def _controller_ssh(self, vm: config_pb2.ManualVmConfig | None = None) -> SshSettings:
        defaults = self._ssh_defaults
        return SshSettings(
            (vm.ssh_user if vm else "") or defaults.user,
            (vm.ssh_key_file if vm else "") or defaults.key_file,
            defaults.port,
            defaults.connect_timeout,
        )

    def create_vm(self, config: config_pb2.VmConfig) -> ManualControllerHandle:
        """Start the controller daemon on `config.manual.host` (default controller.manual.host),
        serving this cluster's config, and return once it answers /health there."""
        controller = self._config.controller.manual
        host = config.manual.host or controller.host
        if not host:
            raise PlatformError("controller.manual.host is not set: name the host the controller runs on")
        remote = self._controller_ssh(config.manual).remote(host)
        config_yaml = yaml.safe_dump(config_to_dict(self._config), sort_keys=False)
        daemon = controller_daemon(
            config_yaml,
            controller.port,
            host,
            image=controller.image,
            python_env=self._config.defaults.bootstrap.python_env,
            labels=dict(config.labels),
            metadata=dict(config.metadata),
            vm_name=config.name or f"{self.label_prefix}-controller",
            storage_dirs=self._storage_dirs,
        )
        handle = ManualControllerHandle(remote, daemon.marker)
        try:
            handle.bootstrap(
                start_script(daemon, round(self._ready_timeout.seconds)),
                timeout=Duration.from_seconds(self._ready_timeout.seconds + _BOOTSTRAP_SLACK.seconds),
            )
        except BootstrapConfigError as exc:
            raise PlatformError(str(exc)) from None
        return handle

    def list_vms(
        self, zones: list[str], labels: dict[str, str] | None = None
    ) -> list[ManualControllerHandle]:
        """The controllers running on the controller host (the only standalone VM a manual cluster has)."""
        host = self._config.controller.manual.host
        if not host:
            return []
        remote = self._controller_ssh().remote(host)
        try:
            output = remote.run(list_markers_script(), _LIST_TIMEOUT).stdout
        except RemoteExecError as exc:
            logger.warning("cannot list Iris daemons on %s: %s", host, exc)
            return []
        return [
            ManualControllerHandle(remote, marker)
            for marker in parse_markers(output)
            if marker.get("kind") == "controller"
            and marker["alive"]
            and all(marker.get("labels", {}).get(k) == v for k, v in (labels or {}).items())
        ]

    def discover_controller(self, config: config_pb2.IrisClusterConfig) -> str | None:
        """The address of the controller running on controller.manual.host, as its marker there
        records it; whether this machine can reach it directly is the caller's concern (tunnel)."""
        controller = config.controller.manual
        if not controller.host:
            return None
        address_key = f"iris-controller-address-{self.label_prefix}"
        for vm in self.list_vms([], {Labels(self.label_prefix).controller: "true"}):
            return vm.metadata.get(address_key) or f"http://{controller.host}:{controller.port}"
        return None

    def tunnel(self, address: str, local_port: int | None = None) -> AbstractContextManager[str]:
        """An SSH forward to the controller at `address` (a URL or host:port) through its host."""
        parsed = urlparse(address if "://" in address else f"http://{address}")
        if not parsed.hostname or not parsed.port:
            raise PlatformError(f"cannot tunnel to {address!r}: expected http://HOST:PORT")
        remote = self._controller_ssh().remote(parsed.hostname)
        return _url_of_forward(remote, parsed.port, local_port)

    def shutdown(self) -> None:
        """Stop driving bootstraps; the workers on the hosts keep running for the next controller."""
        self._shutdown.set()


class ManualProvider:
    """The manual platform's part of the config: hosts per group, the controller's host."""

    name = "manual"
    zone_field = None

    def apply_defaults(self, config: config_pb2.IrisClusterConfig) -> None:
        if config.controller.HasField("manual"):
            config.controller.manual.port = config.controller.manual.port or DEFAULT_CONTROLLER_PORT

    def config_problems(self, config: config_pb2.IrisClusterConfig) -> list[tuple[str, str]]:
        problems = []
        for name, group in config.scale_groups.items():
            path = f"scale_groups.{name}.slice_template.manual.hosts"
            hosts = group.slice_template.manual.hosts
            needed = group.max_slices * group.slice_template.num_vms
            if not hosts:
                problems.append((path, "manual slices need at least one host"))
            elif needed > len(hosts):
                problems.append(
                    (
                        path,
                        f"max_slices ({group.max_slices}) x num_vms ({group.slice_template.num_vms}) needs "
                        f"{needed} hosts, but only {len(hosts)} are listed",
                    )
                )
        if config.controller.HasField("manual") and not config.controller.manual.host:
            problems.append(("controller.manual.host", "name the host that runs the controller"))
        return problems

    def worker_attributes(self, template: config_pb2.SliceConfig) -> dict[str, AttributeValue]:
        # A manual host reports nothing beyond its group, slice and device.
        return {}

    def create(
        self, config: config_pb2.IrisClusterConfig, state_dir: Path, config_path: str | None
    ) -> ManualPlatform:
        return ManualPlatform(config)


PROVIDER = ManualProvider()
