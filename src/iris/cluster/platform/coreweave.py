"""CoreWeave: slices as worker Pods on shared, autoscaling NodePools of a CKS cluster (seed 001).

`iris cluster start` (through `create_vm`) applies the Namespace and RBAC, the S3 credentials
Secret, the cluster-config ConfigMap, one NodePool per scale group, the claim holding the
controller's state, and the controller Deployment and Service, then waits for the Deployment with
early failure detection; started again, it applies a changed config and rolls the controller
out. Slices are worker Pods on their group's pool; their state is rebuilt from the Pods' labels
after a controller restart. The manifests themselves come from coreweave_resources.py.
"""

from __future__ import annotations

import datetime
import difflib
import hashlib
import logging
import os
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import yaml

from iris.cluster.platform import coreweave_resources as res
from iris.cluster.platform.base import (
    CloudSliceState,
    CloudWorkerState,
    CommandResult,
    Labels,
    Platform,
    PlatformError,
    ResourceNotFoundError,
    SliceRecordView,
    SliceStatus,
    VmLogKind,
    WorkerStatus,
    move_slice,
)
from iris.cluster.platform.bootstrap import worker_env, worker_offer_flags
from iris.cluster.platform.coreweave_kube import Kube
from iris.cluster.types import AttributeValue
from iris.config import DEFAULT_CONTROLLER_PORT, DEFAULT_WORKER_PORT, config_to_dict
from iris.rpc import config_pb2
from iris.time import Duration, Timestamp

logger = logging.getLogger(__name__)

DEFAULT_NAMESPACE = "iris"
DEFAULT_CONTROLLER_SERVICE_NAME = "iris-controller-svc"
DEFAULT_CONTROLLER_STATE_DIR = "/var/lib/iris-controller"
DEFAULT_CACHE_DIR = "/mnt/local/iris-cache"
# Bare-metal nodes take 20-30 minutes to provision before a Pod can even pull its image.
DEFAULT_STARTUP_GRACE_PERIOD = Duration.from_seconds(2400)
# seed 001 section 11.
DEFAULT_POD_READY_TIMEOUT = Duration.from_seconds(2400)
DEFAULT_DEPLOYMENT_READY_TIMEOUT = Duration.from_seconds(2400)
DEFAULT_API_TIMEOUT = Duration.from_seconds(1800)
DEFAULT_MOUNT_FAILURE_GRACE = Duration.from_seconds(90)
_POLL_SECONDS = 1.0
_WORKER_LABEL = "iris-worker"

# Every legal move of a CoreWeave slice, with what causes it.
SLICE_TRANSITIONS: dict[CloudSliceState, dict[CloudSliceState, str]] = {
    CloudSliceState.CREATING: {
        CloudSliceState.BOOTSTRAPPING: "the worker Pod was accepted by the API server",
        CloudSliceState.FAILED: "the API server refused the worker Pod",
        CloudSliceState.DELETING: "terminated before the Pod was created",
    },
    CloudSliceState.BOOTSTRAPPING: {
        CloudSliceState.READY: "the worker Pod passed its readiness probe",
        CloudSliceState.FAILED: "the Pod hit a fatal error (image, config, crash loop, mount) or timed out",
        CloudSliceState.DELETING: "terminated while the Pod was starting",
    },
    CloudSliceState.READY: {
        CloudSliceState.FAILED: "the worker Pod ended or was deleted",
        CloudSliceState.DELETING: "terminated",
    },
    CloudSliceState.FAILED: {CloudSliceState.DELETING: "terminated after failing"},
    CloudSliceState.DELETING: {},
}

class CoreweaveWorkerHandle:
    """The worker of a slice: its Pod. Reached on the Pod's (host network) IP."""

    def __init__(self, platform: CoreweavePlatform, pod_name: str, worker_id: str, address: str) -> None:
        self._platform = platform
        self.pod_name = pod_name
        self._worker_id = worker_id
        self._address = address

    @property
    def worker_id(self) -> str:
        return self._worker_id

    @property
    def internal_address(self) -> str:
        return self._address

    @property
    def external_address(self) -> str | None:
        return None

    def status(self) -> WorkerStatus:
        pod = self._platform.kube.get("Pod", self.pod_name, self._platform.namespace)
        if pod is None or pod["metadata"].get("deletionTimestamp"):
            return WorkerStatus(CloudWorkerState.TERMINATED)
        phase = (pod.get("status") or {}).get("phase")
        return WorkerStatus(CloudWorkerState.RUNNING if phase == "Running" else CloudWorkerState.STOPPED)

    def run_command(
        self, command: str, timeout: Duration | None = None, on_line: Callable[[str], None] | None = None
    ) -> CommandResult:
        raise PlatformError(
            f"CoreWeave workers run no commands through Iris; use `kubectl exec -n {self._platform.namespace} "
            f"{self.pod_name} -- ...`"
        )

    def reboot(self) -> None:
        raise PlatformError(f"worker Pod {self.pod_name} cannot be rebooted; terminate its slice instead")


class CoreweaveControllerHandle:
    """The controller: its Deployment (one replica behind the Service)."""

    def __init__(self, platform: CoreweavePlatform, deployment: dict[str, Any]) -> None:
        self._platform = platform
        self._deployment = deployment

    @property
    def worker_id(self) -> str:
        return res.CONTROLLER_NAME

    @property
    def internal_address(self) -> str:
        return self._platform.controller_host

    @property
    def external_address(self) -> str | None:
        return None

    @property
    def labels(self) -> dict[str, str]:
        return dict(self._deployment["metadata"].get("labels") or {})

    @property
    def metadata(self) -> dict[str, str]:
        return dict(self._deployment["metadata"].get("annotations") or {})

    def status(self) -> WorkerStatus:
        deployment = self._platform.kube.get("Deployment", res.CONTROLLER_NAME, self._platform.namespace)
        if deployment is None or deployment["metadata"].get("deletionTimestamp"):
            return WorkerStatus(CloudWorkerState.TERMINATED)
        return WorkerStatus(CloudWorkerState.RUNNING)

    def run_command(
        self, command: str, timeout: Duration | None = None, on_line: Callable[[str], None] | None = None
    ) -> CommandResult:
        raise PlatformError(
            f"the CoreWeave controller runs no commands through Iris; use `kubectl exec -n "
            f"{self._platform.namespace} deploy/{res.CONTROLLER_NAME} -- ...`"
        )

    def reboot(self) -> None:
        """Delete the controller Pod; the Deployment starts a new one on the same state."""
        for pod in self._platform.controller_pods():
            self._platform.kube.delete("Pod", pod["metadata"]["name"], self._platform.namespace)

    def terminate(self) -> None:
        self._platform.delete_controller_resources()

    def set_labels(self, labels: dict[str, str]) -> None:
        self._platform.kube.merge_patch(
            "Deployment", res.CONTROLLER_NAME, self._platform.namespace, {"metadata": {"labels": labels}}
        )

    def set_metadata(self, metadata: dict[str, str]) -> None:
        self._platform.kube.merge_patch(
            "Deployment", res.CONTROLLER_NAME, self._platform.namespace, {"metadata": {"annotations": metadata}}
        )


@dataclass
class _SliceRecord:
    slice_id: str
    pod_name: str
    scale_group: str
    labels: dict[str, str]
    created_at: Timestamp
    state: CloudSliceState = CloudSliceState.CREATING
    message: str = ""
    worker: CoreweaveWorkerHandle | None = None
    history: list[tuple[CloudSliceState, Timestamp, str]] = field(default_factory=list)


class CoreweaveSliceHandle(SliceRecordView):
    def __init__(self, platform: CoreweavePlatform, record: _SliceRecord) -> None:
        self._platform = platform
        self._record = record

    @property
    def zone(self) -> str:
        return self._platform.region


    def history(self) -> list[tuple[CloudSliceState, Timestamp, str]]:
        return list(self._record.history)

    def describe(self) -> SliceStatus:
        record = self._platform.refresh(self._record)
        workers = [record.worker] if record.worker is not None else []
        return SliceStatus(record.state, 1, workers, message=record.message)

    def terminate(self) -> None:
        self._platform.terminate_slice(self._record)


class CoreweavePlatform:
    def __init__(self, config: config_pb2.IrisClusterConfig, kube: Kube | None = None) -> None:
        """`config` is the resolved cluster config (defaults applied)."""
        self._config = config
        platform = config.platform.coreweave
        self.namespace = platform.namespace or DEFAULT_NAMESPACE
        self.region = platform.region
        self.label_prefix = config.platform.label_prefix or "iris"
        self._labels = Labels(self.label_prefix)
        self._pod_ready_timeout = Duration.from_proto(platform.pod_ready_timeout).seconds or 2400.0
        self._deployment_timeout = Duration.from_proto(platform.deployment_ready_timeout).seconds or 2400.0
        self._mount_grace = Duration.from_proto(platform.mount_failure_grace).seconds
        api_timeout = Duration.from_proto(platform.api_timeout).seconds or 1800.0
        kubeconfig = os.path.expanduser(platform.kubeconfig_path) if platform.kubeconfig_path else ""
        self.kube = kube or Kube(kubeconfig, api_timeout)
        controller = config.controller.coreweave
        self._controller_port = controller.port or DEFAULT_CONTROLLER_PORT
        self.controller_host = res.service_dns(
            controller.service_name or DEFAULT_CONTROLLER_SERVICE_NAME, self.namespace
        )
        self._lock = threading.Lock()
        self._slices: dict[str, _SliceRecord] = {}
        self._shutdown = threading.Event()

    # ------------------------------------------------------------ controller (seed 001 section 12)

    def create_vm(self, config: config_pb2.VmConfig) -> CoreweaveControllerHandle:
        """Apply every resource of the cluster and wait for the controller Deployment to be
        available; the address is the Service's DNS name (see discover_controller)."""
        self.apply_controller(config)
        deployment = self.kube.get("Deployment", res.CONTROLLER_NAME, self.namespace)
        if deployment is None:
            raise PlatformError(f"the controller Deployment in namespace {self.namespace} vanished at start")
        return CoreweaveControllerHandle(self, deployment)

    def apply_controller(self, config: config_pb2.VmConfig) -> bool:
        """Apply every resource `iris cluster start` owns (seed 001 section 12) and wait until the
        controller Deployment runs its current template, failing early on section 9's errors.
        The Pod template carries the config's hash, so a changed config rolls the controller out
        onto it; True when the Deployment changed, False when everything already was as asked."""
        controller = self._config.controller.coreweave
        if not self._config.controller.HasField("coreweave"):
            raise PlatformError("controller.coreweave is not set: the CoreWeave controller runs as a Deployment")
        if not controller.image:
            raise PlatformError(
                "controller.coreweave.image is not set: name the controller image, e.g. "
                "ghcr.io/marin-community/iris-controller-coreweave:latest (`iris build push --registry ghcr`)"
            )
        self.ensure_rbac()
        if self._config.storage.bundle_prefix.startswith("s3://"):
            try:
                secret = res.s3_secret(self.namespace, dict(os.environ))
            except ValueError as exc:
                raise PlatformError(str(exc)) from None
            self.kube.apply(secret)
        self.kube.apply(res.config_map(self.namespace, config_yaml(self._config)))
        self.ensure_nodepools()
        self.kube.apply(res.controller_state_claim(self.namespace))
        deployment, service = controller_manifests(self._config)
        deployment["metadata"]["labels"].update(config.labels)
        before = self.kube.get("Deployment", res.CONTROLLER_NAME, self.namespace)
        applied = self.kube.apply(deployment)
        self.kube.apply(service)
        generation = int(applied["metadata"].get("generation", 1))
        self._wait_for_controller(generation)
        return before is None or int(before["metadata"].get("generation", 1)) != generation

    def ensure_rbac(self) -> None:
        self.kube.apply(res.namespace(self.namespace))
        for manifest in res.rbac(self.namespace):
            self.kube.apply(manifest)

    def ensure_nodepools(self) -> None:
        """One pool per scale group, applied in parallel; pools of removed groups are deleted."""
        existing = {p["metadata"]["name"]: p for p in self.kube.list("NodePool")}
        wanted: dict[str, dict[str, Any]] = {}
        for group_name, group in self._config.scale_groups.items():
            name = res.nodepool_name(self.label_prefix, group_name)
            wanted[name] = res.nodepool(
                name,
                self.label_prefix,
                group_name,
                group.slice_template.coreweave.instance_type,
                max(group.max_slices, 1),
                res.clamped_target_nodes(existing.get(name)),
            )
        with ThreadPoolExecutor(max_workers=max(len(wanted), 1)) as pool:
            list(pool.map(self.kube.apply, wanted.values()))
        for stale in res.stale_nodepools(list(existing.values()), set(wanted), self.label_prefix):
            logger.info("deleting NodePool %s: no scale group uses it any more", stale)
            self.kube.delete("NodePool", stale)

    def controller_pods(self) -> list[dict[str, Any]]:
        return [
            p
            for p in self.kube.list("Pod", self.namespace, f"app={res.CONTROLLER_NAME}")
            if not p["metadata"].get("deletionTimestamp")
        ]

    def _wait_for_controller(self, generation: int) -> None:
        """Until the Deployment's `generation` is rolled out and available (as `kubectl rollout
        status` decides), failing at once when a controller Pod hits an early failure."""
        deadline = time.monotonic() + self._deployment_timeout
        while True:
            deployment = self.kube.get("Deployment", res.CONTROLLER_NAME, self.namespace) or {}
            if res.deployment_rolled_out(deployment, generation):
                return
            for pod in self.controller_pods():
                failure = self._pod_failure(pod)
                if failure:
                    raise PlatformError(f"the controller did not start: {failure}")
            if time.monotonic() >= deadline:
                raise PlatformError(
                    f"the controller Deployment was not available within {self._deployment_timeout:.0f}s; "
                    f"see `kubectl describe pod -n {self.namespace} -l app={res.CONTROLLER_NAME}`"
                )
            time.sleep(_POLL_SECONDS)

    def _pod_failure(self, pod: dict[str, Any]) -> str:
        """Section 9's verdict on a Pod, with the crash log when it crash-loops; "" when none."""
        metadata = pod["metadata"]
        age = _created_at(metadata).age().seconds
        events = self.kube.events_for(self.namespace, metadata["name"], metadata.get("uid", ""))
        failure = res.pod_failure(pod, events, age, self._mount_grace)
        if failure is None:
            return ""
        if failure.needs_logs:
            logs = self.kube.pod_logs(
                self.namespace, metadata["name"], failure.needs_logs, res.CRASH_LOG_LINES, previous=True
            )
            return res.with_log_tail(failure, logs)
        return failure.message

    def delete_controller_resources(self) -> None:
        """Everything `create_vm` made except the NodePools, which scale to zero on their own; the
        controller's state goes with its claim."""
        controller = self._config.controller.coreweave
        self.kube.delete("Deployment", res.CONTROLLER_NAME, self.namespace)
        self.kube.delete("Service", controller.service_name or DEFAULT_CONTROLLER_SERVICE_NAME, self.namespace)
        self.kube.delete("ConfigMap", res.CONFIGMAP_NAME, self.namespace)
        self.kube.delete("Secret", res.S3_SECRET_NAME, self.namespace)
        self.kube.delete("PersistentVolumeClaim", res.STATE_CLAIM_NAME, self.namespace)
        self.kube.delete("ClusterRoleBinding", res.cluster_role_name(self.namespace))
        self.kube.delete("ClusterRole", res.cluster_role_name(self.namespace))
        self.kube.delete("Namespace", self.namespace)

    def list_vms(self, zones: list[str], labels: dict[str, str] | None = None) -> list[CoreweaveControllerHandle]:
        deployment = self.kube.get("Deployment", res.CONTROLLER_NAME, self.namespace)
        if deployment is None or deployment["metadata"].get("deletionTimestamp"):
            return []
        have = deployment["metadata"].get("labels") or {}
        if any(have.get(k) != v for k, v in (labels or {}).items()):
            return []
        return [CoreweaveControllerHandle(self, deployment)]

    def discover_controller(self, config: config_pb2.IrisClusterConfig) -> str | None:
        """The Service's in-cluster address while the controller Deployment exists; from outside
        the cluster the CLI reaches it through `tunnel`."""
        if not self.list_vms([]):
            return None
        return f"http://{self.controller_host}:{self._controller_port}"

    def tunnel(self, address: str, local_port: int | None = None) -> AbstractContextManager[str]:
        """A port-forward to the controller Pod serving `address` (the Service's port)."""
        parsed = urlparse(address if "://" in address else f"http://{address}")
        port = parsed.port or self._controller_port
        ready = [p for p in self.controller_pods() if res.pod_ready(p)]
        if not ready:
            raise PlatformError(
                f"no ready controller Pod in namespace {self.namespace} to forward to; "
                f"see `kubectl get pods -n {self.namespace} -l app={res.CONTROLLER_NAME}`"
            )
        return _url_of_forward(self.kube, self.namespace, ready[0]["metadata"]["name"], port, local_port)

    # ------------------------------------------------------------ slices

    def _transition(self, record: _SliceRecord, to: CloudSliceState, detail: str = "") -> bool:
        """Apply a move of SLICE_TRANSITIONS; False when it is not allowed from where the slice is:
        describe() re-derives the state from the Pod each time, so a move a racing thread already
        made is expected, not a bug."""
        with self._lock:
            moved = move_slice(SLICE_TRANSITIONS, record, to, detail, ignored_from=tuple(CloudSliceState))
        if moved:
            logger.info("coreweave slice %s -> %s%s", record.slice_id, to.value, f": {detail}" if detail else "")
        return moved

    def create_slice(
        self, config: config_pb2.SliceConfig, bootstrap_config: config_pb2.BootstrapConfig
    ) -> CoreweaveSliceHandle:
        if config.WhichOneof("platform") != "coreweave":
            raise PlatformError("the coreweave platform creates slices from a slice_template with a 'coreweave:' section")
        if config.num_vms > 1:
            raise PlatformError(
                f"num_vms={config.num_vms}: CoreWeave slices are one node each (multi-node slices are not "
                "supported); set num_vms: 1 and raise max_slices instead"
            )
        labels = dict(config.labels)
        group = labels.get(self._labels.scale_group, "")
        slice_id = f"{config.name_prefix or self.label_prefix}-{Timestamp.now().epoch_ms}"
        with self._lock:
            while slice_id in self._slices:
                slice_id += "x"
            labels[self._labels.slice_id] = slice_id
            labels["app"] = _WORKER_LABEL
            record = _SliceRecord(slice_id, f"iris-worker-{slice_id}", group, labels, Timestamp.now())
            record.history.append((CloudSliceState.CREATING, Timestamp.now(), "slice requested"))
            self._slices[slice_id] = record
        pod = res.worker_pod(self._worker_spec(record, config, bootstrap_config))
        threading.Thread(target=self._bring_up, args=(record, pod), name=f"coreweave-{slice_id}", daemon=True).start()
        return CoreweaveSliceHandle(self, record)

    def _worker_spec(
        self, record: _SliceRecord, config: config_pb2.SliceConfig, bootstrap: config_pb2.BootstrapConfig
    ) -> res.WorkerPodSpec:
        template = config.coreweave
        group = self._config.scale_groups.get(record.scale_group)
        resources = group.resources if group is not None else config_pb2.ScaleGroupResources()
        gpu_class = template.gpu_class or config.accelerator_variant
        gpus = resources.gpu_count or template.gpus_per_node
        offer = worker_offer_flags(
            {"scale-group": record.scale_group},
            float(resources.cpu) if resources.cpu else None,
            resources.ram or None,
            gpu_spec=f"{gpu_class}x{gpus}" if gpu_class and gpus else "",
        )
        env = worker_env(bootstrap)
        return res.WorkerPodSpec(
            name=record.pod_name,
            namespace=self.namespace,
            labels=record.labels,
            node_selector={res.scale_group_label(self.label_prefix): record.scale_group},
            image=bootstrap.docker_image,
            port=bootstrap.worker_port or DEFAULT_WORKER_PORT,
            cache_dir=bootstrap.cache_dir or DEFAULT_CACHE_DIR,
            controller_address=bootstrap.controller_address or f"http://{self.controller_host}:{self._controller_port}",
            worker_id=f"{record.slice_id}-0",
            slice_id=record.slice_id,
            task_image=bootstrap.task_image,
            offer_flags=tuple(offer),
            infiniband=template.infiniband,
            s3_secret=self._config.storage.bundle_prefix.startswith("s3://"),
            object_storage_endpoint=self._config.platform.coreweave.object_storage_endpoint,
            env=env,
        )

    def _bring_up(self, record: _SliceRecord, pod: dict[str, Any]) -> None:
        try:
            self.kube.create(pod)
        except PlatformError as exc:
            self._transition(record, CloudSliceState.FAILED, f"the worker Pod was refused: {exc}")
            return
        if self._transition(record, CloudSliceState.BOOTSTRAPPING):
            self._follow(record)

    def refresh(self, record: _SliceRecord) -> _SliceRecord:
        """Bring a live slice's state up to date with its Pod (readiness, early failures, loss)."""
        if record.state not in (CloudSliceState.BOOTSTRAPPING, CloudSliceState.READY):
            return record
        pod = self.kube.get("Pod", record.pod_name, self.namespace)
        if pod is None or pod["metadata"].get("deletionTimestamp"):
            self._fail(record, f"the worker Pod {record.pod_name} was deleted", delete=False)
            return record
        failure = self._pod_failure(pod)
        if failure:
            self._fail(record, failure)
        elif record.state == CloudSliceState.BOOTSTRAPPING and res.pod_ready(pod):
            record.worker = self._worker_handle(pod)
            self._transition(record, CloudSliceState.READY)
        return record

    def _worker_handle(self, pod: dict[str, Any]) -> CoreweaveWorkerHandle:
        metadata = pod["metadata"]
        status = pod.get("status") or {}
        return CoreweaveWorkerHandle(
            self,
            metadata["name"],
            f"{metadata['labels'][self._labels.slice_id]}-0",
            status.get("podIP") or status.get("hostIP") or "",
        )

    def _fail(self, record: _SliceRecord, reason: str, delete: bool = True) -> None:
        if self._transition(record, CloudSliceState.FAILED, reason) and delete:
            self.kube.delete("Pod", record.pod_name, self.namespace)

    def terminate_slice(self, record: _SliceRecord) -> None:
        self._transition(record, CloudSliceState.DELETING)
        self.kube.delete("Pod", record.pod_name, self.namespace, grace_s=0)
        with self._lock:
            self._slices.pop(record.slice_id, None)

    def list_slices(self, zones: list[str], labels: dict[str, str] | None = None) -> list[CoreweaveSliceHandle]:
        """Slices from the worker Pods found by label, so a restarted controller rebuilds them
        with their state from each Pod's phase and readiness."""
        selector = ",".join(f"{k}={v}" for k, v in {**(labels or {}), "app": _WORKER_LABEL}.items())
        handles = []
        for pod in self.kube.list("Pod", self.namespace, selector):
            pod_labels = pod["metadata"].get("labels") or {}
            slice_id = pod_labels.get(self._labels.slice_id)
            if not slice_id or pod["metadata"].get("deletionTimestamp"):
                continue
            with self._lock:
                record = self._slices.get(slice_id)
                if record is None:
                    record = self._adopt(pod, slice_id)
                    self._slices[slice_id] = record
            handles.append(CoreweaveSliceHandle(self, record))
        return handles

    def _adopt(self, pod: dict[str, Any], slice_id: str) -> _SliceRecord:
        metadata = pod["metadata"]
        labels = dict(metadata.get("labels") or {})
        record = _SliceRecord(
            slice_id,
            metadata["name"],
            labels.get(self._labels.scale_group, ""),
            labels,
            _created_at(metadata),
        )
        # The caller holds the lock, so the moves go through move_slice directly.
        found = "its worker Pod was found at controller start"
        move_slice(SLICE_TRANSITIONS, record, CloudSliceState.BOOTSTRAPPING, found)
        if (pod.get("status") or {}).get("phase") == "Running" and res.pod_ready(pod):
            record.worker = self._worker_handle(pod)
            move_slice(SLICE_TRANSITIONS, record, CloudSliceState.READY, "its Pod is running and ready")
        else:
            threading.Thread(target=self._follow, args=(record,), name=f"coreweave-{slice_id}", daemon=True).start()
        return record

    def _follow(self, record: _SliceRecord) -> None:
        """Follow a BOOTSTRAPPING slice's Pod (a new one, or one found at controller start) until it
        is ready or has failed, failing it when it is not ready within pod_ready_timeout."""
        deadline = time.monotonic() + self._pod_ready_timeout
        while not self._shutdown.is_set() and record.state == CloudSliceState.BOOTSTRAPPING:
            try:
                self.refresh(record)
            except PlatformError as exc:
                logger.warning("coreweave slice %s: %s", record.slice_id, exc)
            if record.state != CloudSliceState.BOOTSTRAPPING:
                return
            if time.monotonic() >= deadline:
                self._fail(record, f"the worker Pod was not ready within {self._pod_ready_timeout:.0f}s")
                return
            time.sleep(_POLL_SECONDS)

    def worker_logs(self, worker_id: str, tail_lines: int) -> str:
        slice_id = worker_id.rsplit("-", 1)[0]
        pods = self.kube.list("Pod", self.namespace, f"{self._labels.slice_id}={slice_id}")
        if not pods:
            raise ResourceNotFoundError(f"no worker Pod for {worker_id} in namespace {self.namespace}")
        return self.kube.pod_logs(self.namespace, pods[0]["metadata"]["name"], "worker", tail_lines)

    def vm_log(
        self, vm_id: str, kind: VmLogKind, tail_lines: int, on_line: Callable[[str], None], follow: bool = False
    ) -> None:
        """A Pod stands for the VM here: its bring-up is the Pod's events (scheduling, image pulls,
        mounts, probes), its daemon log the container's own output."""
        if vm_id == res.CONTROLLER_NAME:
            pods, container = self.controller_pods(), "controller"
        else:
            slice_id = vm_id.rsplit("-", 1)[0]
            pods, container = self.kube.list("Pod", self.namespace, f"{self._labels.slice_id}={slice_id}"), "worker"
        if not pods:
            raise ResourceNotFoundError(f"no Pod for {vm_id} in namespace {self.namespace}")
        metadata = pods[0]["metadata"]
        if kind == VmLogKind.BOOTSTRAP:
            events = self.kube.events_for(self.namespace, metadata["name"], metadata.get("uid", ""))
            for event in events[-tail_lines:]:
                stamp = event.get("lastTimestamp") or event.get("eventTime") or ""
                on_line(f"{stamp} {event.get('reason', '')}: {event.get('message', '')}".strip())
        elif follow:
            self.kube.stream_pod_log(self.namespace, metadata["name"], container, tail_lines, on_line)
        else:
            for line in self.kube.pod_logs(self.namespace, metadata["name"], container, tail_lines).splitlines():
                on_line(line)

    def shutdown(self) -> None:
        """Stop following Pods; the Pods and pools stay for the next controller."""
        self._shutdown.set()


def controller_manifests(config: config_pb2.IrisClusterConfig) -> tuple[dict[str, Any], dict[str, Any]]:
    """The controller Deployment and Service a resolved config asks for (infra/coreweave/k8s holds
    the same for examples/coreweave.yaml)."""
    controller = config.controller.coreweave
    namespace = config.platform.coreweave.namespace or DEFAULT_NAMESPACE
    label_prefix = config.platform.label_prefix or "iris"
    port = controller.port or DEFAULT_CONTROLLER_PORT
    service_name = controller.service_name or DEFAULT_CONTROLLER_SERVICE_NAME
    deployment = res.controller_deployment(
        config_digest(config),
        namespace,
        controller.image,
        port,
        controller.scale_group,
        label_prefix,
        res.service_dns(service_name, namespace),
        controller.state_dir or DEFAULT_CONTROLLER_STATE_DIR,
        Labels(label_prefix).controller,
        s3=config.storage.bundle_prefix.startswith("s3://"),
        object_storage_endpoint=config.platform.coreweave.object_storage_endpoint,
    )
    return deployment, res.controller_service(namespace, service_name, port)


def config_yaml(config: config_pb2.IrisClusterConfig) -> str:
    """The cluster config as the ConfigMap holds it for the controller and the workers. Keys are
    sorted: a proto map (the scale groups) iterates in an order that differs between processes,
    and a second `start` must write the very same text."""
    return yaml.safe_dump(config_to_dict(config), sort_keys=True)


def config_digest(config: config_pb2.IrisClusterConfig) -> str:
    return hashlib.sha256(config_yaml(config).encode()).hexdigest()[:16]


def _created_at(metadata: dict[str, Any]) -> Timestamp:
    text = metadata.get("creationTimestamp")
    if not text:
        return Timestamp.now()
    return Timestamp.from_seconds(datetime.datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp())


@contextmanager
def _url_of_forward(kube: Kube, namespace: str, pod: str, port: int, local_port: int | None) -> Iterator[str]:
    with kube.port_forward(namespace, pod, port, local_port) as local:
        yield f"http://127.0.0.1:{local}"


class CoreweaveProvider:
    name = "coreweave"
    zone_field = "region"

    def apply_defaults(self, config: config_pb2.IrisClusterConfig) -> None:
        platform = config.platform.coreweave
        platform.namespace = platform.namespace or DEFAULT_NAMESPACE
        for name, default in (
            ("pod_ready_timeout", DEFAULT_POD_READY_TIMEOUT),
            ("deployment_ready_timeout", DEFAULT_DEPLOYMENT_READY_TIMEOUT),
            ("api_timeout", DEFAULT_API_TIMEOUT),
            ("mount_failure_grace", DEFAULT_MOUNT_FAILURE_GRACE),
        ):
            if not platform.HasField(name):
                getattr(platform, name).CopyFrom(default.to_proto())
        autoscaler = config.defaults.autoscaler
        if not autoscaler.HasField("startup_grace_period"):
            autoscaler.startup_grace_period.CopyFrom(DEFAULT_STARTUP_GRACE_PERIOD.to_proto())
        if config.controller.HasField("coreweave"):
            controller = config.controller.coreweave
            controller.port = controller.port or DEFAULT_CONTROLLER_PORT
            controller.service_name = controller.service_name or DEFAULT_CONTROLLER_SERVICE_NAME
            controller.state_dir = controller.state_dir or DEFAULT_CONTROLLER_STATE_DIR

    def config_problems(self, config: config_pb2.IrisClusterConfig) -> list[tuple[str, str]]:
        problems = [
            (
                f"scale_groups.{name}.slice_template.coreweave.instance_type",
                "CoreWeave slices need an instance_type, e.g. 'gd-8xh100ib-i128'",
            )
            for name, group in config.scale_groups.items()
            if not group.slice_template.coreweave.instance_type
        ]
        if config.controller.HasField("coreweave"):
            problem = _controller_group_problem(config)
            if problem:
                problems.append(("controller.coreweave.scale_group", problem))
        return problems

    def worker_attributes(self, template: config_pb2.SliceConfig) -> dict[str, AttributeValue]:
        # A CoreWeave worker reports nothing beyond its group, slice, region and device.
        return {}

    def create(
        self, config: config_pb2.IrisClusterConfig, state_dir: Path, config_path: str | None
    ) -> Platform:
        return CoreweavePlatform(config)


def _controller_group_problem(config: config_pb2.IrisClusterConfig) -> str:
    group = config.controller.coreweave.scale_group
    groups = sorted(config.scale_groups)
    defined = ", ".join(groups) if groups else "none"
    if not group:
        return f"required: name the scale group whose nodes host the controller (defined groups: {defined})"
    if group not in config.scale_groups:
        close = difflib.get_close_matches(group, groups, n=1)
        hint = f"did you mean '{close[0]}'? " if close else ""
        return f"'{group}' is not a scale group; {hint}(defined groups: {defined})"
    return ""


PROVIDER = CoreweaveProvider()
