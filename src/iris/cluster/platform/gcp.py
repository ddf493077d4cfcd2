"""GcpPlatform: TPU slices and the controller VM, created and reached through the `gcloud` CLI.

A slice is one TPU node (`gcloud compute tpus tpu-vm create`); its `networkEndpoints` are its
workers, so a multi-host variant (v5litepod-16: four hosts) is one slice of four workers.
`create_slice` starts the create and returns as soon as the API accepted it (CREATING); a refusal
for quota or capacity is raised at once as QuotaExhaustedError, so the autoscaler tries the next
zone in the same evaluation. A background thread then waits for the node, reaches every host
over `gcloud compute tpus tpu-vm ssh` (BOOTSTRAPPING), runs the worker bootstrap of bootstrap.py
on each, and reports READY, or FAILED with the reason after deleting the node. A READY slice
keeps being watched: a node that is preempted, or deleted behind Iris's back, fails the slice at
once with that reason, and the autoscaler replaces it.

Iris keeps no records of its own: every node and VM carries the cluster's labels, so a restarted
controller rebuilds its slices from `tpu-vm list` and a laptop finds the controller VM by label.
The controller VM (`gcloud compute instances create`) runs the controller from its image (or a
Python environment), reached over `gcloud compute ssh`; `tunnel()` forwards a local port to it.

Slices are created and described from the autoscaler thread while bring-up and watch threads
change them: the records are guarded by one lock and every state change goes through
SLICE_TRANSITIONS.
"""

from __future__ import annotations

import json
import logging
import re
import threading
from collections.abc import Callable, Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import yaml

from iris.cluster.platform import gcloud as g
from iris.cluster.platform.base import (
    CloudSliceState,
    CommandResult,
    Labels,
    PlatformError,
    PlatformUnavailableError,
    QuotaExhaustedError,
    ResourceNotFoundError,
    SliceStatus,
    VmLogKind,
)
from iris.cluster.platform.bootstrap import (
    CONTROLLER_DAEMON_NAME,
    BootstrapConfigError,
    WorkerPlacement,
    controller_daemon,
    local_storage_dirs,
    logs_script,
    start_script,
    stream_vm_log,
    worker_daemon,
    worker_daemon_name,
)
from iris.cluster.platform.gcloud import GceRemoteExec, Gcloud, GcloudContext, GcloudRemoteExec
from iris.cluster.platform.remote_exec import (
    HostUnreachableError,
    RemoteExecWorkerBase,
)
from iris.cluster.types import ATTR_PREEMPTIBLE, ATTR_TPU_NAME, ATTR_TPU_WORKER_ID, ATTR_ZONE, AttributeValue
from iris.config import DEFAULT_CONTROLLER_PORT, config_to_dict
from iris.rpc import config_pb2
from iris.time import Duration, Timestamp, wait_until

logger = logging.getLogger(__name__)

DEFAULT_MACHINE_TYPE = "n2-standard-4"
DEFAULT_BOOT_DISK_SIZE_GB = 50

# How long one describe/list/label call may take before the API counts as unavailable.
_API_TIMEOUT = Duration.from_seconds(120)
# How long `create` may take to have its request accepted (quota is refused before that).
_ACCEPT_TIMEOUT = Duration.from_seconds(120)
_BOOTSTRAP_SLACK = Duration.from_seconds(60)
_LOGS_TIMEOUT = Duration.from_seconds(60)
# Tries of a label or metadata update that Compute refuses for a stale fingerprint.
_FINGERPRINT_ATTEMPTS = 3
# What `gcloud ... create` prints once the API has accepted the request and it waits for the operation.
_REQUEST_ISSUED = re.compile(r"request issued|Waiting for operation|Created \[", re.IGNORECASE)
# Node states in which the machines are gone or going; the slice cannot come back from them.
_NODE_LOST = {
    "PREEMPTED": "preempted",
    "TERMINATED": "the TPU node was terminated",
    "STOPPED": "the TPU node was stopped",
    "STOPPING": "the TPU node is being stopped",
    "DELETING": "the TPU node is being deleted outside Iris",
}


class IllegalSliceTransition(PlatformError):
    """A move SLICE_TRANSITIONS does not allow: a bug in the platform, never a user error."""


# Every legal move of a GCP slice, with what causes it.
SLICE_TRANSITIONS: dict[CloudSliceState, dict[CloudSliceState, str]] = {
    CloudSliceState.CREATING: {
        CloudSliceState.BOOTSTRAPPING: "the TPU node is READY and its first host answers over SSH",
        CloudSliceState.FAILED: "the create failed (capacity, quota, API) or the hosts never answered",
        CloudSliceState.DELETING: "terminated while being created",
    },
    CloudSliceState.BOOTSTRAPPING: {
        CloudSliceState.READY: "the worker on every host answered /health",
        CloudSliceState.FAILED: "the bootstrap failed on a host, or the node was lost",
        CloudSliceState.DELETING: "terminated during bootstrap",
    },
    CloudSliceState.READY: {
        CloudSliceState.FAILED: "the node was preempted, stopped or deleted",
        CloudSliceState.DELETING: "terminated",
    },
    CloudSliceState.FAILED: {CloudSliceState.DELETING: "terminated after failing"},
    CloudSliceState.DELETING: {},
}


def node_name(node: Mapping[str, Any]) -> str:
    """`projects/p/locations/z/nodes/n` -> `n`."""
    return str(node.get("name", "")).rsplit("/", 1)[-1]


def node_zone(node: Mapping[str, Any], default: str = "") -> str:
    match = re.search(r"/locations/([^/]+)/", str(node.get("name", "")))
    return match.group(1) if match else default


def node_worker_addresses(node: Mapping[str, Any]) -> list[str]:
    return [str(e.get("ipAddress", "")) for e in node.get("networkEndpoints", []) if e.get("ipAddress")]


def parse_rfc3339_ms(text: str) -> int:
    if not text:
        return 0
    return int(datetime.fromisoformat(text).timestamp() * 1000)


def instance_addresses(instance: Mapping[str, Any]) -> tuple[str, str]:
    """(internal IP, external IP or "") of a GCE instance."""
    interfaces = instance.get("networkInterfaces") or [{}]
    internal = str(interfaces[0].get("networkIP", ""))
    configs = interfaces[0].get("accessConfigs") or [{}]
    return internal, str(configs[0].get("natIP", ""))


def instance_metadata(instance: Mapping[str, Any]) -> dict[str, str]:
    return {str(i["key"]): str(i.get("value", "")) for i in (instance.get("metadata") or {}).get("items", [])}


def worker_id_of(slice_id: str, index: int) -> str:
    return f"{slice_id}-w{index}"


def _json(result: CommandResult) -> Any:
    text = result.stdout.strip()
    return json.loads(text) if text else None


# ---------------------------------------------------------------- handles


class GcpWorkerHandle(RemoteExecWorkerBase):
    """One host of a TPU node. TPU hosts cannot be terminated alone: the slice is."""


class GcpControllerHandle(RemoteExecWorkerBase):
    """The controller's GCE VM."""

    def __init__(self, platform: GcpPlatform, instance: Mapping[str, Any], remote: GceRemoteExec):
        super().__init__(str(instance["name"]), remote, instance_addresses(instance)[1] or None)
        self._platform = platform
        self._zone = remote.zone
        self._private_address = instance_addresses(instance)[0]
        self._labels = dict(instance.get("labels") or {})
        self._metadata = instance_metadata(instance)

    @property
    def zone(self) -> str:
        return self._zone

    @property
    def labels(self) -> dict[str, str]:
        return dict(self._labels)

    @property
    def metadata(self) -> dict[str, str]:
        return dict(self._metadata)

    @property
    def private_address(self) -> str:
        """The VM's address inside its network, where workers reach the controller."""
        return self._private_address

    def terminate(self) -> None:
        self._platform._delete_instance(self.worker_id, self._zone)

    def set_labels(self, labels: dict[str, str]) -> None:
        self._update(
            g.instance_add_labels_args(self.worker_id, self._zone, labels),
            f"labelling VM {self.worker_id}",
            lambda instance: dict(instance.get("labels") or {}),
            labels,
        )
        self._labels.update(labels)

    def set_metadata(self, metadata: dict[str, str]) -> None:
        self._update(
            g.instance_add_metadata_args(self.worker_id, self._zone, metadata),
            f"setting metadata of VM {self.worker_id}",
            instance_metadata,
            metadata,
        )
        self._metadata.update(metadata)

    def _update(
        self,
        args: list[str],
        what: str,
        current: Callable[[Mapping[str, Any]], dict[str, str]],
        wanted: dict[str, str],
    ) -> None:
        """Run a read-modify-write gcloud update, again when Compute refuses it because the VM
        changed in between (a stale fingerprint); done as soon as the VM carries `wanted`."""
        context = GcloudContext(what, self._zone)
        for attempt in range(_FINGERPRINT_ATTEMPTS):
            try:
                self._platform.gcloud.run(args, context, _API_TIMEOUT)
                return
            except PlatformError as exc:
                if "fingerprint" not in str(exc) or attempt == _FINGERPRINT_ATTEMPTS - 1:
                    raise
                logger.info("%s: the VM changed meanwhile (%s); checking and trying again", what, exc)
            have = current(self._platform._describe_instance(self.worker_id, self._zone))
            if all(have.get(k) == v for k, v in wanted.items()):
                return


@dataclass
class _SliceRecord:
    slice_id: str
    zone: str
    scale_group: str
    labels: dict[str, str]
    created_at: Timestamp
    accelerator: str
    preemptible: bool
    workers: list[GcpWorkerHandle] = field(default_factory=list)
    state: CloudSliceState = CloudSliceState.CREATING
    message: str = ""
    quota_exhausted: bool = False
    history: list[tuple[CloudSliceState, Timestamp, str]] = field(default_factory=list)
    cancelled: threading.Event = field(default_factory=threading.Event)
    # Whether a thread watches the node for preemption (a slice found by listing gets one once
    # someone describes it: the controller does, a CLI that only lists or deletes does not).
    watched: bool = False


class GcpSliceHandle:
    def __init__(self, platform: GcpPlatform, record: _SliceRecord):
        self._platform = platform
        self._record = record

    @property
    def slice_id(self) -> str:
        return self._record.slice_id

    @property
    def zone(self) -> str:
        return self._record.zone

    @property
    def scale_group(self) -> str:
        return self._record.scale_group

    @property
    def labels(self) -> dict[str, str]:
        return dict(self._record.labels)

    @property
    def created_at(self) -> Timestamp:
        return self._record.created_at

    def history(self) -> list[tuple[CloudSliceState, Timestamp, str]]:
        with self._platform._lock:
            return list(self._record.history)

    def describe(self) -> SliceStatus:
        self._platform._ensure_watched(self._record)
        with self._platform._lock:
            record = self._record
            return SliceStatus(
                record.state,
                len(record.workers),
                list(record.workers),
                message=record.message,
                quota_exhausted=record.quota_exhausted,
            )

    def terminate(self) -> None:
        self._platform._terminate(self._record)


# ---------------------------------------------------------------- the platform


class GcpPlatform:
    def __init__(self, config: config_pb2.IrisClusterConfig, gcloud_env: Mapping[str, str] | None = None):
        """`config` is the resolved cluster config (defaults applied); `gcloud_env` is set on top of
        this process's environment for every gcloud it runs."""
        self._config = config
        self.label_prefix = config.platform.label_prefix or "iris"
        self._keys = Labels(self.label_prefix)
        self.gcloud = Gcloud(config.platform.gcp.project_id, gcloud_env)
        timeouts = config.defaults.timeouts
        self._boot_timeout = Duration.from_proto(timeouts.boot_timeout)
        self._init_timeout = Duration.from_proto(timeouts.init_timeout)
        self._poll_interval = Duration.from_proto(timeouts.ssh_poll_interval)
        self._kill_grace_s = timeouts.kill_grace_period.milliseconds / 1000
        self._connect_timeout = Duration.from_proto(config.defaults.ssh.connect_timeout)
        self._storage_dirs = local_storage_dirs(config.storage.bundle_prefix)
        self._lock = threading.Lock()
        self._slices: dict[str, _SliceRecord] = {}
        self._shutdown = threading.Event()

    # ------------------------------------------------------------ helpers

    def _transition(self, record: _SliceRecord, to: CloudSliceState, detail: str = "") -> bool:
        """Apply a move of SLICE_TRANSITIONS; False when the slice was terminated meanwhile."""
        with self._lock:
            allowed = SLICE_TRANSITIONS[record.state]
            if to not in allowed:
                if record.state in (CloudSliceState.DELETING, CloudSliceState.FAILED):
                    return False
                raise IllegalSliceTransition(f"slice {record.slice_id} cannot go from {record.state} to {to}")
            record.state = to
            record.message = detail
            record.history.append((to, Timestamp.now(), detail or allowed[to]))
        logger.info("gcp slice %s -> %s%s", record.slice_id, to.value, f": {detail}" if detail else "")
        return True

    def _zones(self) -> list[str]:
        """Every zone the config names for slices, for listing when a caller gives none."""
        zones = set()
        for group in self._config.scale_groups.values():
            zones.update(group.zones)
            if group.slice_template.gcp.zone:
                zones.add(group.slice_template.gcp.zone)
        return sorted(zones)

    def _describe_node(self, name: str, zone: str, accelerator: str = "") -> dict[str, Any]:
        context = GcloudContext(f"describing TPU node {name}", zone, accelerator)
        return _json(self.gcloud.run(g.tpu_describe_args(name, zone), context, _API_TIMEOUT)) or {}

    def _delete_node(self, name: str, zone: str) -> None:
        context = GcloudContext(f"deleting TPU node {name}", zone)
        try:
            self.gcloud.run(g.tpu_delete_args(name, zone), context, self._boot_timeout)
        except ResourceNotFoundError:
            pass

    def _delete_instance(self, name: str, zone: str) -> None:
        context = GcloudContext(f"deleting VM {name}", zone)
        try:
            self.gcloud.run(g.instance_delete_args(name, zone), context, self._boot_timeout)
        except ResourceNotFoundError:
            pass

    # ------------------------------------------------------------ slices

    def create_slice(
        self, config: config_pb2.SliceConfig, bootstrap_config: config_pb2.BootstrapConfig
    ) -> GcpSliceHandle:
        if config.WhichOneof("platform") != "gcp":
            raise PlatformError("the gcp platform creates slices from a slice_template with a 'gcp:' section")
        gcp = config.gcp
        if not gcp.zone:
            raise PlatformError(
                "the slice has no zone: set the scale group's zones or slice_template.gcp.zone"
            )
        labels = dict(config.labels)
        slice_id = f"{config.name_prefix or self.label_prefix}-{Timestamp.now().epoch_ms}".lower().replace(
            "_", "-"
        )
        with self._lock:
            while slice_id in self._slices:
                slice_id += "x"
            labels[self._keys.slice_id] = slice_id
        context = GcloudContext(f"creating TPU node {slice_id}", gcp.zone, config.accelerator_variant)
        args = g.tpu_create_args(
            slice_id,
            gcp.zone,
            config.accelerator_variant,
            gcp.runtime_version,
            labels,
            preemptible=gcp.preemptible,
        )
        call = self.gcloud.start(
            args, context, Duration.from_seconds(self._boot_timeout.seconds + _API_TIMEOUT.seconds)
        )
        try:
            accepted = call.wait_for_stderr(_REQUEST_ISSUED, _ACCEPT_TIMEOUT)
        except TimeoutError:
            call.kill()
            raise PlatformUnavailableError(
                f"creating TPU node {slice_id} in zone {gcp.zone}: the TPU API did not accept the request within "
                f"{_ACCEPT_TIMEOUT}; check the Google Cloud status page, Iris retries on its own"
            ) from None
        if not accepted:
            # gcloud ended before the API took the request: a refusal (quota, permission, bad type).
            call.result()
        record = _SliceRecord(
            slice_id,
            gcp.zone,
            labels.get(self._keys.scale_group, ""),
            labels,
            Timestamp.now(),
            config.accelerator_variant,
            gcp.preemptible,
        )
        record.history.append((CloudSliceState.CREATING, Timestamp.now(), "create request accepted"))
        with self._lock:
            self._slices[slice_id] = record
        threading.Thread(
            target=self._bring_up, args=(record, call, bootstrap_config), name=f"gcp-{slice_id}", daemon=True
        ).start()
        logger.info("gcp slice %s: creating %s in %s", slice_id, config.accelerator_variant, gcp.zone)
        return GcpSliceHandle(self, record)

    def _fail(self, record: _SliceRecord, reason: str, quota_exhausted: bool = False) -> None:
        """FAILED with `reason` (one line), after deleting the node: nothing is left to pay for."""
        if record.cancelled.is_set():
            return
        with self._lock:
            record.quota_exhausted = quota_exhausted
        # Reported first, so the autoscaler replaces the slice while the node is being deleted.
        self._transition(record, CloudSliceState.FAILED, reason.splitlines()[0])
        try:
            self._delete_node(record.slice_id, record.zone)
        except PlatformError as exc:
            logger.warning("gcp slice %s: could not delete its node after failing: %s", record.slice_id, exc)

    def _bring_up(
        self, record: _SliceRecord, call: g.GcloudCall, bootstrap_config: config_pb2.BootstrapConfig
    ) -> None:
        try:
            call.result()
        except QuotaExhaustedError as exc:
            self._fail(record, str(exc), quota_exhausted=True)
            return
        except PlatformError as exc:
            self._fail(record, str(exc))
            return
        if record.cancelled.is_set() or self._shutdown.is_set():
            if record.cancelled.is_set():
                self._delete_node(record.slice_id, record.zone)
            return
        try:
            node = self._wait_until_ready(record)
            self._connect_workers(record, node)
        except PlatformError as exc:
            self._fail(record, str(exc))
            return
        if not self._transition(record, CloudSliceState.BOOTSTRAPPING):
            return
        failures = self._each_worker(
            record, lambda index, worker: self._bootstrap_worker(record, index, worker, bootstrap_config)
        )
        if record.cancelled.is_set() or self._shutdown.is_set():
            return
        if failures:
            more = f" (and {len(failures) - 1} more host(s) failed)" if len(failures) > 1 else ""
            self._fail(record, failures[0].splitlines()[0] + more)
            return
        with self._lock:
            record.watched = True
        if self._transition(record, CloudSliceState.READY):
            self._watch(record)

    def _ensure_watched(self, record: _SliceRecord) -> None:
        with self._lock:
            if record.watched or record.state != CloudSliceState.READY:
                return
            record.watched = True
        threading.Thread(
            target=self._watch, args=(record,), name=f"gcp-{record.slice_id}", daemon=True
        ).start()

    def _wait_until_ready(self, record: _SliceRecord) -> dict[str, Any]:
        found: list[dict[str, Any]] = []

        def ready() -> bool:
            node = self._describe_node(record.slice_id, record.zone, record.accelerator)
            state = str(node.get("state", ""))
            if state in _NODE_LOST:
                raise PlatformError(f"{_NODE_LOST[state]} while being created")
            if state == "READY" and node_worker_addresses(node):
                found.append(node)
                return True
            return record.cancelled.is_set()

        try:
            wait_until(
                ready, self._boot_timeout.seconds, self._poll_interval.seconds, f"TPU node {record.slice_id}"
            )
        except TimeoutError:
            raise PlatformError(
                f"TPU node {record.slice_id} in {record.zone} was not READY within boot_timeout ({self._boot_timeout})"
            ) from None
        return found[-1] if found else {}

    def _connect_workers(self, record: _SliceRecord, node: Mapping[str, Any]) -> None:
        addresses = node_worker_addresses(node)
        workers = [
            GcpWorkerHandle(
                worker_id_of(record.slice_id, index),
                GcloudRemoteExec(
                    self.gcloud, record.slice_id, record.zone, index, address, self._connect_timeout
                ),
            )
            for index, address in enumerate(addresses)
        ]
        with self._lock:
            record.workers = workers
        # The first ssh makes gcloud's key and adds it to the node's metadata: once, before the
        # others, which are waited for only if their bootstrap finds them unreachable.
        self._await_host(workers[0])

    def _await_host(self, worker: GcpWorkerHandle) -> bool:
        if not worker.wait_for_connection(self._boot_timeout, self._poll_interval):
            raise HostUnreachableError(
                worker.internal_address,
                f"host {worker.worker_id} ({worker.internal_address}) did not answer over SSH within "
                f"boot_timeout ({self._boot_timeout}); check the node's network and firewall rules for SSH",
            )
        return True

    def _each_worker(self, record: _SliceRecord, step: Callable[[int, GcpWorkerHandle], object]) -> list[str]:
        """Run `step` on every worker at once; the failures, one line each."""
        failures: list[str] = []

        def run(index: int) -> None:
            try:
                step(index, record.workers[index])
            except (PlatformError, BootstrapConfigError) as exc:
                failures.append(str(exc))

        with ThreadPoolExecutor(max_workers=max(1, len(record.workers))) as pool:
            list(pool.map(run, range(len(record.workers))))
        return failures

    def _placement(self, record: _SliceRecord, index: int) -> WorkerPlacement:
        group = self._config.scale_groups.get(record.scale_group)
        resources = group.resources if group is not None else config_pb2.ScaleGroupResources()
        worker = record.workers[index]
        return WorkerPlacement(
            worker_id=worker.worker_id,
            slice_id=record.slice_id,
            scale_group=record.scale_group,
            advertise_host=worker.internal_address,
            labels=record.labels,
            attributes={
                ATTR_TPU_NAME: record.slice_id,
                ATTR_TPU_WORKER_ID: str(index),
                ATTR_ZONE: record.zone,
                ATTR_PREEMPTIBLE: str(record.preemptible).lower(),
            },
            cpu=float(resources.cpu) if resources.cpu else None,
            memory_bytes=resources.ram or None,
            tpu_variant=record.accelerator,
        )

    def _bootstrap_worker(
        self,
        record: _SliceRecord,
        index: int,
        worker: GcpWorkerHandle,
        bootstrap_config: config_pb2.BootstrapConfig,
    ) -> None:
        daemon = worker_daemon(
            bootstrap_config, self._placement(record, index), self._kill_grace_s, self._storage_dirs
        )
        script = start_script(daemon, round(self._init_timeout.seconds))
        timeout = Duration.from_seconds(self._init_timeout.seconds + _BOOTSTRAP_SLACK.seconds)
        try:
            worker.bootstrap(script, timeout=timeout)
        except HostUnreachableError:
            # Hosts of a fresh node come up one by one: wait for this one (up to boot_timeout).
            self._await_host(worker)
            worker.bootstrap(script, timeout=timeout)

    def _watch(self, record: _SliceRecord) -> None:
        """Until the slice ends, describe its node every ssh_poll_interval: preempted, stopped or
        deleted fails the slice at once."""
        while not record.cancelled.wait(self._poll_interval.seconds) and not self._shutdown.is_set():
            try:
                node = self._describe_node(record.slice_id, record.zone)
            except ResourceNotFoundError:
                reason = "the TPU node was deleted outside Iris"
            except PlatformError as exc:
                logger.warning("gcp slice %s: cannot describe its node: %s", record.slice_id, exc)
                continue
            else:
                reason = _NODE_LOST.get(str(node.get("state", "")), "")
            if reason and not record.cancelled.is_set():
                logger.warning("gcp slice %s failed: %s", record.slice_id, reason)
                self._fail(record, reason)
                return

    def _terminate(self, record: _SliceRecord) -> None:
        record.cancelled.set()
        if record.state != CloudSliceState.DELETING:
            self._transition(record, CloudSliceState.DELETING)
        self._delete_node(record.slice_id, record.zone)
        with self._lock:
            self._slices.pop(record.slice_id, None)
        logger.info("terminated gcp slice %s", record.slice_id)

    def list_slices(self, zones: list[str], labels: dict[str, str] | None = None) -> list[GcpSliceHandle]:
        """The labelled TPU nodes of `zones` (every configured zone for ""), adopting those this
        process did not create: a READY node as a READY slice (watched once described), one still
        being created as FAILED, since its bring-up died with the previous controller."""
        wanted = {z for z in zones if z} or set(self._zones())
        # One call for every zone (the API's "-" location) rather than one per zone.
        context = GcloudContext("listing TPU nodes", ",".join(sorted(wanted)))
        nodes = (
            _json(self.gcloud.run(g.tpu_list_args(g.ALL_ZONES, labels or {}), context, _API_TIMEOUT)) or []
        )
        return [
            GcpSliceHandle(self, self._record_of(node, node_zone(node)))
            for node in nodes
            if node_zone(node) in wanted
        ]

    def _record_of(self, node: Mapping[str, Any], zone: str) -> _SliceRecord:
        name = node_name(node)
        with self._lock:
            known = self._slices.get(name)
            if known is not None:
                return known
        node_labels = dict(node.get("labels") or {})
        zone = node_zone(node, zone)
        record = _SliceRecord(
            name,
            zone,
            node_labels.get(self._keys.scale_group, ""),
            node_labels,
            Timestamp(parse_rfc3339_ms(str(node.get("createTime", "")))),
            str(node.get("acceleratorType", "")),
            bool((node.get("schedulingConfig") or {}).get("preemptible")),
        )
        record.workers = [
            GcpWorkerHandle(
                worker_id_of(name, index),
                GcloudRemoteExec(self.gcloud, name, zone, index, address, self._connect_timeout),
            )
            for index, address in enumerate(node_worker_addresses(node))
        ]
        state = str(node.get("state", ""))
        if state == "READY":
            record.state = CloudSliceState.READY
        else:
            record.state = CloudSliceState.FAILED
            record.message = (
                _NODE_LOST.get(state) or f"found {state or 'without a state'} at controller start"
            )
        record.history.append((record.state, Timestamp.now(), "found by its labels"))
        with self._lock:
            return self._slices.setdefault(name, record)

    def worker_logs(self, worker_id: str, tail_lines: int) -> str:
        with self._lock:
            workers = [w for r in self._slices.values() for w in r.workers if w.worker_id == worker_id]
        if not workers:
            raise ResourceNotFoundError(f"no GCP worker named {worker_id}")
        result = workers[0].run_command(logs_script(worker_daemon_name(worker_id), tail_lines), _LOGS_TIMEOUT)
        return result.stdout + result.stderr

    def vm_log(
        self, vm_id: str, kind: VmLogKind, tail_lines: int, on_line: Callable[[str], None], follow: bool = False
    ) -> None:
        for vm in self.list_vms([], {self._keys.controller: "true"}):
            if vm.worker_id == vm_id:
                stream_vm_log(vm, CONTROLLER_DAEMON_NAME, kind, tail_lines, on_line, follow)
                return
        workers = [w for s in self.list_slices([]) for w in s.describe().workers if w.worker_id == vm_id]
        if not workers:
            raise ResourceNotFoundError(f"no GCP controller VM or worker named {vm_id}")
        stream_vm_log(workers[0], worker_daemon_name(vm_id), kind, tail_lines, on_line, follow)

    # ------------------------------------------------------------ the controller VM

    def create_vm(self, config: config_pb2.VmConfig) -> GcpControllerHandle:
        """Create the controller's VM, start the controller on it serving this cluster's config,
        and return once it answers /health there; on any failure the VM is deleted again."""
        controller = self._config.controller.gcp
        zone = config.gcp.zone or controller.zone
        if not zone:
            raise PlatformError("controller.gcp.zone is not set: name the zone the controller VM runs in")
        name = (config.name or f"{self.label_prefix}-controller").lower().replace("_", "-")
        labels = {**config.labels, self._keys.managed: "true"}
        context = GcloudContext(f"creating the controller VM {name}", zone, controller.machine_type)
        args = g.instance_create_args(
            name,
            zone,
            config.gcp.machine_type or controller.machine_type,
            config.gcp.boot_disk_size_gb or controller.boot_disk_size_gb,
            labels,
            dict(config.metadata),
        )
        created = _json(self.gcloud.run(args, context, self._boot_timeout))
        instance = (
            created[0] if isinstance(created, list) and created else self._describe_instance(name, zone)
        )
        try:
            return self._start_controller(instance, zone, config)
        except (PlatformError, BootstrapConfigError) as exc:
            self._delete_instance(name, zone)
            raise PlatformError(f"the controller on VM {name} did not start: {exc}".splitlines()[0]) from None

    def _describe_instance(self, name: str, zone: str) -> dict[str, Any]:
        context = GcloudContext(f"describing VM {name}", zone)
        return _json(self.gcloud.run(g.instance_describe_args(name, zone), context, _API_TIMEOUT)) or {}

    def _controller_handle(self, instance: Mapping[str, Any], zone: str) -> GcpControllerHandle:
        internal, external = instance_addresses(instance)
        remote = GceRemoteExec(
            self.gcloud, str(instance["name"]), zone, external or internal, self._connect_timeout
        )
        return GcpControllerHandle(self, instance, remote)

    def _start_controller(
        self, instance: Mapping[str, Any], zone: str, config: config_pb2.VmConfig
    ) -> GcpControllerHandle:
        handle = self._controller_handle(instance, zone)
        if not handle.wait_for_connection(self._boot_timeout, self._poll_interval):
            raise HostUnreachableError(
                handle.internal_address,
                f"VM {handle.worker_id} did not answer over SSH within boot_timeout ({self._boot_timeout})",
            )
        controller = self._config.controller.gcp
        bootstrap = self._config.defaults.bootstrap
        daemon = controller_daemon(
            yaml.safe_dump(config_to_dict(self._config), sort_keys=False),
            controller.port,
            instance_addresses(instance)[0],
            image=controller.image,
            python_env=bootstrap.python_env,
            # The controller runs gcloud too (the autoscaler): it gets the daemons' environment.
            env=dict(bootstrap.env_vars),
            labels=dict(config.labels),
            metadata=dict(config.metadata),
            vm_name=handle.worker_id,
        )
        handle.bootstrap(
            start_script(daemon, round(self._init_timeout.seconds)),
            timeout=Duration.from_seconds(self._init_timeout.seconds + _BOOTSTRAP_SLACK.seconds),
        )
        return handle

    def list_vms(self, zones: list[str], labels: dict[str, str] | None = None) -> list[GcpControllerHandle]:
        context = GcloudContext("listing VMs", ",".join(z for z in zones if z))
        instances = _json(
            self.gcloud.run(
                g.instance_list_args([z for z in zones if z], labels or {}), context, _API_TIMEOUT
            )
        )
        return [
            self._controller_handle(instance, str(instance.get("zone", "")).rsplit("/", 1)[-1])
            for instance in instances or []
            if instance.get("status", "RUNNING") in ("RUNNING", "PROVISIONING", "STAGING")
        ]

    def discover_controller(self, config: config_pb2.IrisClusterConfig) -> str | None:
        """The controller's address from its VM's metadata (or its internal IP and port), found by
        label; whether this machine can reach it directly is the caller's concern (tunnel)."""
        address_key = f"iris-controller-address-{self.label_prefix}"
        for vm in self.list_vms([], {self._keys.controller: "true"}):
            return vm.metadata.get(address_key) or f"http://{vm.private_address}:{config.controller.gcp.port}"
        return None

    def tunnel(self, address: str, local_port: int | None = None) -> AbstractContextManager[str]:
        """An SSH forward (through `gcloud compute ssh`) to the controller VM serving `address`."""
        parsed = urlparse(address if "://" in address else f"http://{address}")
        if not parsed.hostname or not parsed.port:
            raise PlatformError(f"cannot tunnel to {address!r}: expected http://HOST:PORT")
        vms = self.list_vms([], {self._keys.controller: "true"})
        if not vms:
            raise PlatformError(f"no controller VM labelled {self._keys.controller}=true to tunnel to")
        return _url_of_forward(vms[0].remote_exec, parsed.port, local_port)

    def shutdown(self) -> None:
        """Stop driving bring-ups and watches; nodes and VMs stay for the next controller."""
        self._shutdown.set()


@contextmanager
def _url_of_forward(remote: Any, port: int, local_port: int | None) -> Iterator[str]:
    with remote.forward(port, local_port=local_port) as local:
        yield f"http://127.0.0.1:{local}"


# ---------------------------------------------------------------- the provider


class GcpProvider:
    name = "gcp"
    zone_field = "zone"

    def apply_defaults(self, config: config_pb2.IrisClusterConfig) -> None:
        if config.controller.HasField("gcp"):
            controller = config.controller.gcp
            controller.port = controller.port or DEFAULT_CONTROLLER_PORT
            controller.machine_type = controller.machine_type or DEFAULT_MACHINE_TYPE
            controller.boot_disk_size_gb = controller.boot_disk_size_gb or DEFAULT_BOOT_DISK_SIZE_GB

    def config_problems(self, config: config_pb2.IrisClusterConfig) -> list[tuple[str, str]]:
        problems = []
        for name, group in config.scale_groups.items():
            template = group.slice_template
            path = f"scale_groups.{name}.slice_template"
            if not template.gcp.zone and not group.zones:
                problems.append(
                    (
                        f"{path}.gcp.zone",
                        "GCP slices need a zone; set slice_template.gcp.zone or the group's zones list",
                    )
                )
            if not template.accelerator_variant:
                problems.append(
                    (
                        f"{path}.accelerator_variant",
                        "GCP slices need the TPU type to create, e.g. 'v5litepod-16'",
                    )
                )
        if config.controller.HasField("gcp") and not config.controller.gcp.zone:
            problems.append(("controller.gcp.zone", "the controller VM needs a zone, e.g. 'europe-west4-a'"))
        return problems

    def worker_attributes(self, template: config_pb2.SliceConfig) -> dict[str, AttributeValue]:
        return {ATTR_PREEMPTIBLE: str(template.gcp.preemptible).lower()}

    def create(
        self, config: config_pb2.IrisClusterConfig, state_dir: Path, config_path: str | None
    ) -> GcpPlatform:
        return GcpPlatform(config)


PROVIDER = GcpProvider()
