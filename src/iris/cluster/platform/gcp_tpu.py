"""The GCP platform's TPU slices, created and watched through the `gcloud` CLI.

A slice is one TPU node (`gcloud compute tpus tpu-vm create`); its `networkEndpoints` are its
workers, so a multi-host variant (v5litepod-16: four hosts) is one slice of four workers.
`create_slice` starts the create and returns as soon as the API accepted it (CREATING); a refusal
for quota or capacity is raised at once as QuotaExhaustedError, so the autoscaler tries the next
zone in the same evaluation. A background thread then waits for the node, reaches every host
over `gcloud compute tpus tpu-vm ssh` (BOOTSTRAPPING), runs the worker bootstrap of bootstrap.py
on each, and reports READY, or FAILED with the reason after deleting the node. READY slices keep
being watched, all with one `tpu-vm list` per poll: a node that is preempted, or deleted behind
Iris's back, fails its slice at once with that reason, and the autoscaler replaces it.

Iris keeps no records of its own: every node carries the cluster's labels, so a restarted
controller rebuilds its slices from `tpu-vm list`.

Slices are created and described from the autoscaler thread while bring-up and watch threads
change them: the records are guarded by one lock and every state change goes through
SLICE_TRANSITIONS.
"""

from __future__ import annotations

import logging
import re
import threading
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from iris.cluster.platform import gcloud as g
from iris.cluster.platform.base import (
    CloudSliceState,
    Labels,
    PlatformError,
    PlatformUnavailableError,
    QuotaExhaustedError,
    ResourceNotFoundError,
    SliceRecordView,
    SliceStatus,
    move_slice,
)
from iris.cluster.platform.bootstrap import (
    BootstrapConfigError,
    WorkerPlacement,
    local_storage_dirs,
    logs_script,
    start_script,
    worker_daemon,
    worker_daemon_name,
)
from iris.cluster.platform.gcloud import Gcloud, GcloudContext, GcloudRemoteExec
from iris.cluster.platform.remote_exec import (
    HostUnreachableError,
    RemoteExecWorkerBase,
)
from iris.cluster.types import ATTR_PREEMPTIBLE, ATTR_TPU_NAME, ATTR_TPU_WORKER_ID, ATTR_ZONE
from iris.rpc import config_pb2
from iris.time import Duration, Timestamp, wait_until

logger = logging.getLogger(__name__)

# How long `create` may take to have its request accepted (quota is refused before that).
_ACCEPT_TIMEOUT = Duration.from_seconds(120)
_LOGS_TIMEOUT = Duration.from_seconds(60)
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


def _reclaimable(node: Mapping[str, Any]) -> bool:
    """Whether Google may take the node back: preemptible or spot."""
    scheduling = node.get("schedulingConfig") or {}
    return bool(scheduling.get("preemptible") or scheduling.get("spot"))


def _ready(node: Mapping[str, Any]) -> bool:
    """READY, with the addresses of its hosts."""
    return node.get("state") == "READY" and bool(node_worker_addresses(node))


def parse_rfc3339_ms(text: str) -> int:
    if not text:
        return 0
    return int(datetime.fromisoformat(text).timestamp() * 1000)


def worker_id_of(slice_id: str, index: int) -> str:
    return f"{slice_id}-w{index}"


# ---------------------------------------------------------------- handles


class GcpWorkerHandle(RemoteExecWorkerBase):
    """One host of a TPU node. TPU hosts cannot be terminated alone: the slice is."""


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
    # Whether the watch thread checks the node for preemption (a slice found by listing is watched
    # once someone describes it: the controller does, a CLI that only lists or deletes does not).
    watched: bool = False


class GcpSliceHandle(SliceRecordView):
    def __init__(self, tpus: GcpTpuSlices, record: _SliceRecord):
        self._tpus = tpus
        self._record = record

    @property
    def zone(self) -> str:
        return self._record.zone


    def history(self) -> list[tuple[CloudSliceState, Timestamp, str]]:
        with self._tpus._lock:
            return list(self._record.history)

    def describe(self) -> SliceStatus:
        self._tpus._ensure_watched(self._record)
        with self._tpus._lock:
            record = self._record
            return SliceStatus(
                record.state,
                len(record.workers),
                list(record.workers),
                message=record.message,
                quota_exhausted=record.quota_exhausted,
            )

    def terminate(self) -> None:
        self._tpus._terminate(self._record)

    def redeploy(self, bootstrap_config: config_pb2.BootstrapConfig) -> None:
        self._tpus._redeploy(self._record, bootstrap_config)


# ---------------------------------------------------------------- the slices


class GcpTpuSlices:
    """Every TPU slice of one cluster config: creation, bring-up, watching, adoption, deletion."""

    def __init__(self, config: config_pb2.IrisClusterConfig, gcloud: Gcloud):
        self._config = config
        self.label_prefix = config.platform.label_prefix or "iris"
        self._keys = Labels(self.label_prefix)
        self.gcloud = gcloud
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
        # One thread watches every READY slice's node (see _watch_all), started with the first.
        self._watcher: threading.Thread | None = None

    # ------------------------------------------------------------ helpers

    def _transition(self, record: _SliceRecord, to: CloudSliceState, detail: str = "") -> bool:
        """Apply a move of SLICE_TRANSITIONS; False when the slice was terminated or failed meanwhile."""
        with self._lock:
            ended = (CloudSliceState.DELETING, CloudSliceState.FAILED)
            moved = move_slice(SLICE_TRANSITIONS, record, to, detail, ignored_from=ended)
        if moved:
            logger.info("gcp slice %s -> %s%s", record.slice_id, to.value, f": {detail}" if detail else "")
        return moved

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
        return g.json_of(self.gcloud.run(g.tpu_describe_args(name, zone), context, g.API_TIMEOUT)) or {}

    def _delete_node(self, name: str, zone: str) -> None:
        context = GcloudContext(f"deleting TPU node {name}", zone)
        try:
            self.gcloud.run(g.tpu_delete_args(name, zone), context, self._boot_timeout)
        except ResourceNotFoundError:
            pass

    # ------------------------------------------------------------ slices

    def create(
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
            spot=gcp.spot,
        )
        call = self.gcloud.start(
            args, context, Duration.from_seconds(self._boot_timeout.seconds + g.API_TIMEOUT.seconds)
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
            gcp.preemptible or gcp.spot,
        )
        record.history.append((CloudSliceState.CREATING, Timestamp.now(), "create request accepted"))
        with self._lock:
            self._slices[slice_id] = record
        threading.Thread(
            target=self._bring_up, args=(record, call, bootstrap_config), name=f"gcp-{slice_id}", daemon=True
        ).start()
        logger.info("gcp slice %s: creating %s in %s", slice_id, config.accelerator_variant, gcp.zone)
        return GcpSliceHandle(self, record)

    def _fail(
        self, record: _SliceRecord, reason: str, quota_exhausted: bool = False, delete_first: bool = False
    ) -> None:
        """FAILED with `reason` (one line), and the node deleted: nothing is left to pay for.

        A node that never came up is reported first, so the autoscaler replaces the slice while
        it is being deleted. A lost one (`delete_first`: preempted, stopped) still holds its
        machines until it is deleted, so a replacement asked for before that may find the zone
        out of capacity and block it for quota_backoff: it is deleted first."""
        if record.cancelled.is_set():
            return
        with self._lock:
            record.quota_exhausted = quota_exhausted
        if not delete_first:
            self._transition(record, CloudSliceState.FAILED, reason.splitlines()[0])
        try:
            self._delete_node(record.slice_id, record.zone)
        except PlatformError as exc:
            logger.warning("gcp slice %s: could not delete its node after failing: %s", record.slice_id, exc)
        if delete_first:
            self._transition(record, CloudSliceState.FAILED, reason.splitlines()[0])

    def _delete_terminated_during_create(self, record: _SliceRecord) -> None:
        """The slice was terminated while its create ran: delete the node the create made. If the
        API is unreachable now, the node keeps the cluster's labels, so the next controller start
        (reconcile) or `iris cluster debug cleanup` finds and deletes it."""
        try:
            self._delete_node(record.slice_id, record.zone)
        except PlatformError as exc:
            logger.warning(
                "gcp slice %s: terminated while being created; its node is left for reconcile: %s",
                record.slice_id,
                exc,
            )

    def _bring_up(
        self, record: _SliceRecord, call: g.GcloudCall, bootstrap_config: config_pb2.BootstrapConfig
    ) -> None:
        try:
            created = g.json_of(call.result())
        except QuotaExhaustedError as exc:
            self._fail(record, str(exc), quota_exhausted=True)
            return
        except PlatformError as exc:
            self._fail(record, str(exc))
            return
        if record.cancelled.is_set() or self._shutdown.is_set():
            if record.cancelled.is_set():
                self._delete_terminated_during_create(record)
            return
        try:
            # `create` prints the node once its operation is done: described again only if it is
            # not READY with its hosts yet.
            node = (
                created if isinstance(created, dict) and _ready(created) else self._wait_until_ready(record)
            )
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
        if self._transition(record, CloudSliceState.READY):
            self._ensure_watched(record)

    def _ensure_watched(self, record: _SliceRecord) -> None:
        with self._lock:
            if record.watched or record.state != CloudSliceState.READY:
                return
            record.watched = True
            if self._watcher is None:
                self._watcher = threading.Thread(target=self._watch_all, name="gcp-node-watch", daemon=True)
                self._watcher.start()

    def _wait_until_ready(self, record: _SliceRecord) -> dict[str, Any]:
        found: list[dict[str, Any]] = []

        def ready() -> bool:
            node = self._describe_node(record.slice_id, record.zone, record.accelerator)
            state = str(node.get("state", ""))
            if state in _NODE_LOST:
                raise PlatformError(f"{_NODE_LOST[state]} while being created")
            if _ready(node):
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
        pull: bool = False,
    ) -> None:
        daemon = worker_daemon(
            bootstrap_config, self._placement(record, index), self._kill_grace_s, self._storage_dirs
        )
        script = start_script(daemon, round(self._init_timeout.seconds), pull)
        timeout = Duration.from_seconds(self._init_timeout.seconds + g.BOOTSTRAP_SLACK.seconds)
        try:
            worker.bootstrap(script, timeout=timeout)
        except HostUnreachableError:
            # Hosts of a fresh node come up one by one: wait for this one (up to boot_timeout).
            self._await_host(worker)
            worker.bootstrap(script, timeout=timeout)

    def _redeploy(self, record: _SliceRecord, bootstrap_config: config_pb2.BootstrapConfig) -> None:
        """The worker bootstrap again on every host of a READY node (its start script stops the
        daemon running there first): same node, same worker ids, the current config, and the image
        pulled again (a rebuild keeps its tag)."""
        if record.state != CloudSliceState.READY:
            raise PlatformError(
                f"slice {record.slice_id} is {record.state.value.lower()}, not ready: its workers cannot be "
                f"redeployed ({record.message or 'no reason recorded'}); the controller replaces it"
            )
        failures = self._each_worker(
            record,
            lambda index, worker: self._bootstrap_worker(record, index, worker, bootstrap_config, pull=True),
        )
        if failures:
            more = f" (and {len(failures) - 1} more host(s) failed)" if len(failures) > 1 else ""
            raise PlatformError(
                f"redeploying the workers of slice {record.slice_id}: {failures[0].splitlines()[0]}{more}"
            )
        logger.info("gcp slice %s: redeployed %d worker(s)", record.slice_id, len(record.workers))

    def _watch_all(self) -> None:
        """Every ssh_poll_interval, one list of the cluster's nodes in every zone (not a describe per
        slice, each a gcloud process): a watched READY slice whose node is preempted, stopped or
        gone fails at once."""
        while not self._shutdown.wait(self._poll_interval.seconds):
            with self._lock:
                watched = [
                    r
                    for r in self._slices.values()
                    if r.watched and r.state == CloudSliceState.READY and not r.cancelled.is_set()
                ]
            if not watched:
                continue
            try:
                nodes = {node_name(n): n for n in self._list_nodes({self._keys.managed: "true"})}
            except PlatformError as exc:
                logger.warning("cannot list the TPU nodes to watch %d slice(s): %s", len(watched), exc)
                continue
            for record in watched:
                node = nodes.get(record.slice_id)
                reason = (
                    _NODE_LOST.get(str(node.get("state", "")), "")
                    if node is not None
                    else "the TPU node was deleted outside Iris"
                )
                if reason and not record.cancelled.is_set():
                    logger.warning("gcp slice %s failed: %s", record.slice_id, reason)
                    self._fail(record, reason, delete_first=True)

    def _terminate(self, record: _SliceRecord) -> None:
        record.cancelled.set()
        if record.state != CloudSliceState.DELETING:
            self._transition(record, CloudSliceState.DELETING)
        self._delete_node(record.slice_id, record.zone)
        with self._lock:
            self._slices.pop(record.slice_id, None)
        logger.info("terminated gcp slice %s", record.slice_id)

    def list(self, zones: list[str], labels: dict[str, str] | None = None) -> list[GcpSliceHandle]:
        """The labelled TPU nodes of `zones` (every configured zone for ""), adopting those this
        process did not create: a READY node as a READY slice (watched once described), one still
        being created as FAILED, since its bring-up died with the previous controller."""
        wanted = {z for z in zones if z} or set(self._zones())
        nodes = self._list_nodes(labels or {}, wanted)
        return [
            GcpSliceHandle(self, self._record_of(node, node_zone(node)))
            for node in nodes
            if node_zone(node) in wanted
        ]

    def _list_nodes(self, labels: dict[str, str], zones: set[str] | None = None) -> list[dict[str, Any]]:
        """The nodes carrying `labels`, from one call for every zone (the API's "-" location)
        rather than one per zone."""
        context = GcloudContext("listing TPU nodes", ",".join(sorted(zones or self._zones())))
        return g.json_of(self.gcloud.run(g.tpu_list_args(g.ALL_ZONES, labels), context, g.API_TIMEOUT)) or []

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
            _reclaimable(node),
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

    def shutdown(self) -> None:
        """Stop driving bring-ups and watches; nodes and VMs stay for the next controller."""
        self._shutdown.set()
