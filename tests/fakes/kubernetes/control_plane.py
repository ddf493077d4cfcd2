"""The simulated control plane: NodePool node provisioning, the scheduler, the Deployment controller,
the namespace controller and a volume provisioner, all reconciling the store the way their real
counterparts do.

One thread runs every controller whenever the store changes (and on a short tick for the
time-based parts: provisioning delays and scale-down). CoreWeave's NodePool operator is modelled as
"a pool owns `targetNodes` nodes, or with `autoscaling: true` as many as its pending Pods need
between minNodes and maxNodes", each node appearing `provisioning_delay` seconds after it was
asked for, with the instance type's capacity, the pool's labels and taints.

The volume provisioner stands for a network storage class: each new PersistentVolumeClaim gets a
PersistentVolume of its own (a directory under the fake's state, reachable from every node, as a
network volume is from any node it is attached to) and is Bound to it; a volume whose claim is
gone is deleted with its data (reclaim policy Delete).
"""

from __future__ import annotations

import copy
import hashlib
import json
import shutil
import threading
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fakes.kubernetes.resources import RESOURCES, find_resource
from fakes.kubernetes.selectors import match_node_selector
from fakes.kubernetes.store import ApiError, Store, WatchEvent, now_rfc3339

PODS = find_resource("", "v1", "pods")
NODES = find_resource("", "v1", "nodes")
EVENTS = find_resource("", "v1", "events")
NAMESPACES = find_resource("", "v1", "namespaces")
SERVICE_ACCOUNTS = find_resource("", "v1", "serviceaccounts")
DEPLOYMENTS = find_resource("apps", "v1", "deployments")
NODEPOOLS = find_resource("compute.coreweave.com", "v1alpha1", "nodepools")
CLAIMS = find_resource("", "v1", "persistentvolumeclaims")
VOLUMES = find_resource("", "v1", "persistentvolumes")
assert PODS and NODES and EVENTS and NAMESPACES and SERVICE_ACCOUNTS and DEPLOYMENTS and NODEPOOLS
assert CLAIMS and VOLUMES

NODEPOOL_LABEL = "compute.coreweave.com/node-pool"
INSTANCE_TYPE_LABEL = "node.kubernetes.io/instance-type"
GPU_RESOURCE = "nvidia.com/gpu"
RDMA_RESOURCE = "rdma/ib"
GPU_TAINT = {"key": GPU_RESOURCE, "value": "present", "effect": "NoSchedule"}
_TICK_SECONDS = 0.2
DEFAULT_STORAGE_CLASS = "shared-network"

# What each instance type offers (the fake's stand-ins for CoreWeave's catalogue). Unknown types
# get the CPU shape.
INSTANCE_TYPES: dict[str, dict[str, str]] = {
    "cd-gp-i64-erapids": {"cpu": "64", "memory": "256Gi", "pods": "110"},
    "gd-8xh100ib-i128": {"cpu": "128", "memory": "2Ti", GPU_RESOURCE: "8", RDMA_RESOURCE: "1", "pods": "110"},
    "gd-8xa100-i128": {"cpu": "128", "memory": "1Ti", GPU_RESOURCE: "8", "pods": "110"},
}
DEFAULT_INSTANCE = INSTANCE_TYPES["cd-gp-i64-erapids"]

_SUFFIXES = {
    "Ki": 1024,
    "Mi": 1024**2,
    "Gi": 1024**3,
    "Ti": 1024**4,
    "Pi": 1024**5,
    "n": 1e-9,
    "u": 1e-6,
    "m": 1e-3,
    "k": 1e3,
    "M": 1e6,
    "G": 1e9,
    "T": 1e12,
    "P": 1e15,
}


def parse_quantity(text: Any) -> float:
    text = str(text).strip()
    for suffix in sorted(_SUFFIXES, key=len, reverse=True):
        if text.endswith(suffix):
            return float(text[: -len(suffix)]) * _SUFFIXES[suffix]
    return float(text)


def record_event(
    store: Store, obj: dict[str, Any], event_type: str, reason: str, message: str, component: str
) -> None:
    """Create or bump the Event about `obj` with this reason, as the real event recorder aggregates."""
    metadata = obj["metadata"]
    namespace = metadata.get("namespace") or "default"
    digest = hashlib.sha256(f"{metadata['uid']}/{reason}/{message}".encode()).hexdigest()[:10]
    name = f"{metadata['name']}.{digest}"
    now = now_rfc3339()

    def bump(event: dict[str, Any]) -> None:
        event["count"] = event.get("count", 1) + 1
        event["lastTimestamp"] = now

    if store.mutate(EVENTS, namespace, name, bump) is not None:
        return
    try:
        store.create(
            EVENTS,
            namespace,
            {
                "metadata": {"name": name, "namespace": namespace},
                "involvedObject": {
                    "kind": obj.get("kind"),
                    "apiVersion": obj.get("apiVersion"),
                    "name": metadata["name"],
                    "namespace": metadata.get("namespace", ""),
                    "uid": metadata["uid"],
                },
                "reason": reason,
                "message": message,
                "type": event_type,
                "count": 1,
                "firstTimestamp": now,
                "lastTimestamp": now,
                "source": {"component": component},
                "reportingComponent": component,
            },
        )
    except ApiError:
        # The namespace is going away; its events go with it.
        pass


def pod_requests(pod: dict[str, Any]) -> dict[str, float]:
    totals: dict[str, float] = {}
    for container in (pod.get("spec") or {}).get("containers") or []:
        resources = container.get("resources") or {}
        for name, quantity in {
            **(resources.get("limits") or {}),
            **(resources.get("requests") or {}),
        }.items():
            totals[name] = totals.get(name, 0.0) + parse_quantity(quantity)
    return totals


def tolerates(pod: dict[str, Any], taint: dict[str, Any]) -> bool:
    for toleration in (pod.get("spec") or {}).get("tolerations") or []:
        if toleration.get("effect") not in (None, "", taint.get("effect")):
            continue
        if toleration.get("operator") == "Exists" and toleration.get("key") in (None, "", taint.get("key")):
            return True
        if toleration.get("key") == taint.get("key") and toleration.get("value", "") == taint.get(
            "value", ""
        ):
            return True
    return False


def is_terminal(pod: dict[str, Any]) -> bool:
    return (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed")


@dataclass
class _PoolState:
    # Monotonic times at which requested nodes become ready.
    provisioning: list[float] = field(default_factory=list)


class ControlPlane:
    def __init__(self, store: Store, volumes_dir: Path, provisioning_delay: float = 0.0) -> None:
        self.store = store
        self.volumes_dir = volumes_dir
        self.provisioning_delay = provisioning_delay
        # NodePool name -> message: the pool cannot get nodes (capacity or quota trouble).
        self.provisioning_failures: dict[str, str] = {}
        self._pools: dict[str, _PoolState] = {}
        self._node_count = 0
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="fake-kubernetes-control-plane", daemon=True)
        store.add_listener(self._on_change)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._wake.set()
        self._thread.join(5)

    def _on_change(self, event: WatchEvent) -> None:
        if event.plural != "events":
            self._wake.set()

    def _run(self) -> None:
        while not self._stop.is_set():
            self._wake.wait(_TICK_SECONDS)
            self._wake.clear()
            for reconcile in (
                self._namespaces, self._volumes, self._deployments, self._nodepools, self._schedule
            ):
                try:
                    reconcile()
                except ApiError:
                    # Lost a race with a client's write; the next pass sees the new state.
                    self._wake.set()

    # -- namespaces -----------------------------------------------------------------------------

    def _namespaces(self) -> None:
        namespaces, _ = self.store.list(NAMESPACES)
        live = set()
        for namespace in namespaces:
            name = namespace["metadata"]["name"]
            if namespace["metadata"].get("deletionTimestamp"):
                continue
            live.add(name)
            if self.store.find(SERVICE_ACCOUNTS, name, "default") is None:
                self.store.create(SERVICE_ACCOUNTS, name, {"metadata": {"name": "default"}})
        # A deleted namespace's contents go with it, as the namespace controller empties it.
        for resource in RESOURCES:
            if not resource.namespaced or "delete" not in resource.verbs:
                continue
            for obj in self.store.list(resource)[0]:
                metadata = obj["metadata"]
                if metadata.get("namespace") not in live and not metadata.get("deletionTimestamp"):
                    self.store.delete(resource, metadata["namespace"], metadata["name"])

    # -- volumes --------------------------------------------------------------------------------

    def _volumes(self) -> None:
        claims, _ = self.store.list(CLAIMS)
        live = {c["metadata"]["uid"] for c in claims if not c["metadata"].get("deletionTimestamp")}
        for claim in claims:
            if claim["metadata"]["uid"] in live and not (claim.get("spec") or {}).get("volumeName"):
                self._provision(claim)
        volumes, _ = self.store.list(VOLUMES)
        for volume in volumes:
            claim_ref = (volume.get("spec") or {}).get("claimRef") or {}
            if claim_ref.get("uid") not in live and not volume["metadata"].get("deletionTimestamp"):
                shutil.rmtree(self.volumes_dir / volume["metadata"]["name"], ignore_errors=True)
                self.store.delete(VOLUMES, "", volume["metadata"]["name"])

    def _provision(self, claim: dict[str, Any]) -> None:
        metadata, spec = claim["metadata"], claim.get("spec") or {}
        name = f"pvc-{metadata['uid']}"
        directory = self.volumes_dir / name
        directory.mkdir(parents=True, exist_ok=True)
        capacity = {"storage": ((spec.get("resources") or {}).get("requests") or {}).get("storage", "1Gi")}
        access_modes = list(spec.get("accessModes") or ["ReadWriteOnce"])
        self.store.create(
            VOLUMES,
            "",
            {
                "metadata": {"name": name},
                "spec": {
                    "capacity": capacity,
                    "accessModes": access_modes,
                    "persistentVolumeReclaimPolicy": "Delete",
                    "storageClassName": spec.get("storageClassName") or DEFAULT_STORAGE_CLASS,
                    "claimRef": {
                        "kind": "PersistentVolumeClaim",
                        "namespace": metadata["namespace"],
                        "name": metadata["name"],
                        "uid": metadata["uid"],
                    },
                    "hostPath": {"path": str(directory)},
                },
                "status": {"phase": "Bound"},
            },
        )

        def bind(obj: dict[str, Any]) -> None:
            obj.setdefault("spec", {})["volumeName"] = name
            obj["spec"].setdefault("storageClassName", DEFAULT_STORAGE_CLASS)
            obj["status"] = {"phase": "Bound", "accessModes": access_modes, "capacity": capacity}

        self.store.mutate(CLAIMS, metadata["namespace"], metadata["name"], bind)

    # -- deployments ----------------------------------------------------------------------------

    def _deployments(self) -> None:
        deployments, _ = self.store.list(DEPLOYMENTS)
        pods, _ = self.store.list(PODS)
        for deployment in deployments:
            if deployment["metadata"].get("deletionTimestamp"):
                continue
            self._reconcile_deployment(deployment, pods)

    def _reconcile_deployment(self, deployment: dict[str, Any], all_pods: list[dict[str, Any]]) -> None:
        metadata, spec = deployment["metadata"], deployment["spec"]
        namespace = metadata["namespace"]
        template = spec.get("template") or {}
        template_hash = hashlib.sha256(json.dumps(template, sort_keys=True).encode()).hexdigest()[:10]
        owned = [
            pod
            for pod in all_pods
            if any(ref.get("uid") == metadata["uid"] for ref in pod["metadata"].get("ownerReferences") or [])
            and not pod["metadata"].get("deletionTimestamp")
        ]
        current = [
            p for p in owned if p["metadata"].get("labels", {}).get("pod-template-hash") == template_hash
        ]
        for pod in owned:
            if pod not in current or is_terminal(pod):
                self.store.delete(PODS, namespace, pod["metadata"]["name"])
        current = [p for p in current if not is_terminal(p)]
        wanted = int(spec.get("replicas", 1))
        for _ in range(wanted - len(current)):
            pod = copy.deepcopy(template)
            pod_metadata = pod.setdefault("metadata", {})
            pod_metadata["name"] = f"{metadata['name']}-{template_hash}-{uuid.uuid4().hex[:5]}"
            pod_metadata.setdefault("labels", {})["pod-template-hash"] = template_hash
            pod_metadata["ownerReferences"] = [
                {
                    "apiVersion": "apps/v1",
                    "kind": "Deployment",
                    "name": metadata["name"],
                    "uid": metadata["uid"],
                    "controller": True,
                    "blockOwnerDeletion": True,
                }
            ]
            self.store.create(PODS, namespace, pod)
        for pod in current[wanted:]:
            self.store.delete(PODS, namespace, pod["metadata"]["name"])
        ready = sum(1 for p in current[:wanted] if _pod_ready(p))
        available = ready >= wanted
        status = {
            "observedGeneration": metadata.get("generation", 1),
            "replicas": min(len(current), wanted),
            "updatedReplicas": min(len(current), wanted),
            "readyReplicas": ready,
            "availableReplicas": ready,
            "conditions": [
                {
                    "type": "Available",
                    "status": "True" if available else "False",
                    "reason": "MinimumReplicasAvailable" if available else "MinimumReplicasUnavailable",
                    "message": "Deployment has minimum availability."
                    if available
                    else "Deployment does not have minimum availability.",
                },
                {
                    "type": "Progressing",
                    "status": "True",
                    "reason": "NewReplicaSetAvailable" if available else "ReplicaSetUpdated",
                    "message": f'ReplicaSet "{metadata["name"]}-{template_hash}" has successfully progressed.',
                },
            ],
        }
        if ready == 0:
            status.pop("readyReplicas")
            status.pop("availableReplicas")
        previous = deployment.get("status") or {}
        if previous != status:
            self.store.mutate(
                DEPLOYMENTS, namespace, metadata["name"], lambda d: d.__setitem__("status", status)
            )

    # -- node pools -----------------------------------------------------------------------------

    def _nodepools(self) -> None:
        pools, _ = self.store.list(NODEPOOLS)
        nodes, _ = self.store.list(NODES)
        pods, _ = self.store.list(PODS)
        now = time.monotonic()
        names = set()
        for pool in pools:
            name = pool["metadata"]["name"]
            names.add(name)
            state = self._pools.setdefault(name, _PoolState())
            pool_nodes = [n for n in nodes if n["metadata"].get("labels", {}).get(NODEPOOL_LABEL) == name]
            if pool["metadata"].get("deletionTimestamp"):
                continue
            wanted = self._wanted_nodes(pool, pool_nodes, pods)
            failure = self.provisioning_failures.get(name)
            # Nodes already asked for count; more are asked for, or requests dropped, to reach `wanted`.
            missing = wanted - len(pool_nodes) - len(state.provisioning)
            if failure is None:
                state.provisioning.extend([now + self.provisioning_delay] * max(0, missing))
            if missing < 0 and state.provisioning:
                del state.provisioning[: min(-missing, len(state.provisioning))]
            ready = [t for t in state.provisioning if t <= now]
            state.provisioning = [t for t in state.provisioning if t > now]
            for _ in ready:
                self._create_node(pool)
            if state.provisioning:
                self._wake_at(min(state.provisioning))
            excess = len(pool_nodes) - wanted
            if excess > 0:
                idle = [n for n in pool_nodes if not _pods_on(n["metadata"]["name"], pods)]
                for node in idle[:excess]:
                    self.store.delete(NODES, "", node["metadata"]["name"])
            self._pool_status(pool, wanted, len(pool_nodes) + len(ready), failure)
        for name in list(self._pools):
            if name not in names:
                del self._pools[name]
        # A pool's nodes go with it (the operator deprovisions them).
        for node in nodes:
            pool_name = node["metadata"].get("labels", {}).get(NODEPOOL_LABEL)
            if pool_name and pool_name not in names:
                self.store.delete(NODES, "", node["metadata"]["name"])

    def _wanted_nodes(
        self, pool: dict[str, Any], pool_nodes: list[dict[str, Any]], pods: list[dict[str, Any]]
    ) -> int:
        spec = pool.get("spec") or {}
        if not spec.get("autoscaling"):
            return int(spec.get("targetNodes", 0))
        minimum, maximum = int(spec.get("minNodes", 0)), int(spec.get("maxNodes", 0))
        busy = {n["metadata"]["name"] for n in pool_nodes if _pods_on(n["metadata"]["name"], pods)}
        # A cordoned node takes no new Pods: it is no room for the pending ones.
        cordoned = {n["metadata"]["name"] for n in pool_nodes if (n.get("spec") or {}).get("unschedulable")}
        pending = [
            p
            for p in pods
            if not (p.get("spec") or {}).get("nodeName")
            and not is_terminal(p)
            and not p["metadata"].get("deletionTimestamp")
            and self._fits_pool(p, pool)
        ]
        # Pending Pods that no current node takes each get a fresh node (a simple bin-packing bound).
        free = len(pool_nodes) - len(busy | cordoned)
        needed = len(busy | cordoned) + max(free, 0) + max(0, len(pending) - max(free, 0))
        return max(minimum, min(maximum, needed if pending or busy else minimum))

    def _fits_pool(self, pod: dict[str, Any], pool: dict[str, Any]) -> bool:
        node = self._node_template(pool)
        return _fits(pod, node, [])

    def _node_template(self, pool: dict[str, Any]) -> dict[str, Any]:
        spec = pool.get("spec") or {}
        capacity = dict(INSTANCE_TYPES.get(spec.get("instanceType", ""), DEFAULT_INSTANCE))
        labels = {
            NODEPOOL_LABEL: pool["metadata"]["name"],
            INSTANCE_TYPE_LABEL: spec.get("instanceType", ""),
            "kubernetes.io/os": "linux",
            "kubernetes.io/arch": "amd64",
            **(spec.get("nodeLabels") or {}),
        }
        taints = (
            [
                {"key": k, "value": v.split(":")[0], "effect": v.split(":")[1] if ":" in v else "NoSchedule"}
                for k, v in (spec.get("nodeTaints") or {}).items()
            ]
            if isinstance(spec.get("nodeTaints"), dict)
            else list(spec.get("nodeTaints") or [])
        )
        if GPU_RESOURCE in capacity and not any(t.get("key") == GPU_RESOURCE for t in taints):
            taints.append(dict(GPU_TAINT))
        return {
            "metadata": {"labels": labels},
            "spec": {"taints": taints} if taints else {},
            "status": {"capacity": capacity, "allocatable": capacity},
        }

    def _create_node(self, pool: dict[str, Any]) -> None:
        node = self._node_template(pool)
        name = f"{pool['metadata']['name']}-{uuid.uuid4().hex[:6]}"
        node["metadata"]["name"] = name
        node["metadata"]["labels"]["kubernetes.io/hostname"] = name
        # Each provisioned node has an address of its own on loopback, so host-network Pods on
        # different nodes can listen on the same port, as on separate machines.
        self._node_count += 1
        address = f"127.0.{1 + self._node_count // 250}.{2 + self._node_count % 250}"
        node["status"]["addresses"] = [{"type": "InternalIP", "address": address}]
        add_node(self.store, node)

    def _pool_status(self, pool: dict[str, Any], wanted: int, current: int, failure: str | None) -> None:
        conditions = [
            {
                "type": "Validated",
                "status": "True",
                "reason": "Valid",
                "message": "NodePool configuration is valid",
            },
            {
                "type": "AtTarget",
                "status": "True" if current == wanted else "False",
                "reason": "TargetMet"
                if current == wanted
                else ("Unavailable" if failure else "Provisioning"),
                "message": failure or ("" if current == wanted else f"{current} of {wanted} nodes are ready"),
            },
        ]
        status = {"currentNodes": current, "targetNodes": wanted, "conditions": conditions}
        if (pool.get("status") or {}) != status:
            name = pool["metadata"]["name"]
            self.store.mutate(NODEPOOLS, "", name, lambda p: p.__setitem__("status", status))

    def _wake_at(self, moment: float) -> None:
        delay = max(0.0, moment - time.monotonic())
        timer = threading.Timer(delay, self._wake.set)
        timer.daemon = True
        timer.start()

    # -- scheduler ------------------------------------------------------------------------------

    def _schedule(self) -> None:
        pods, _ = self.store.list(PODS)
        nodes, _ = self.store.list(NODES)
        ready_nodes = [n for n in nodes if _node_ready(n) and not (n.get("spec") or {}).get("unschedulable")]
        for pod in pods:
            if (
                (pod.get("spec") or {}).get("nodeName")
                or is_terminal(pod)
                or pod["metadata"].get("deletionTimestamp")
            ):
                continue
            placed = next((n for n in ready_nodes if _fits(pod, n, pods)), None)
            if placed is not None:
                node_name = placed["metadata"]["name"]
                self.store.mutate(
                    PODS, pod["metadata"]["namespace"], pod["metadata"]["name"], _binder(node_name)
                )
                pods = [
                    p if p["metadata"]["uid"] != pod["metadata"]["uid"] else _bound(p, node_name)
                    for p in pods
                ]
                record_event(
                    self.store,
                    pod,
                    "Normal",
                    "Scheduled",
                    f"Successfully assigned {pod['metadata']['namespace']}/{pod['metadata']['name']} to {node_name}",
                    "default-scheduler",
                )
                continue
            message = f"0/{len(nodes)} nodes are available: {_unschedulable_reason(pod, nodes, pods)}"
            conditions = (pod.get("status") or {}).get("conditions") or []
            if not any(c.get("type") == "PodScheduled" and c.get("message") == message for c in conditions):
                self.store.mutate(
                    PODS, pod["metadata"]["namespace"], pod["metadata"]["name"], _unschedulable(message)
                )
                record_event(self.store, pod, "Warning", "FailedScheduling", message, "default-scheduler")


def add_node(store: Store, node: dict[str, Any]) -> dict[str, Any]:
    """Register a node as its kubelet does: Ready, on loopback, with capacity and system info."""
    status = node.setdefault("status", {})
    capacity = status.setdefault("capacity", dict(DEFAULT_INSTANCE))
    status.setdefault("allocatable", dict(capacity))
    now = now_rfc3339()
    status["conditions"] = [
        {
            "type": "Ready",
            "status": "True",
            "reason": "KubeletReady",
            "message": "kubelet is posting ready status",
            "lastHeartbeatTime": now,
            "lastTransitionTime": now,
        },
        {
            "type": "MemoryPressure",
            "status": "False",
            "reason": "KubeletHasSufficientMemory",
            "lastHeartbeatTime": now,
            "lastTransitionTime": now,
        },
    ]
    status.setdefault("addresses", [{"type": "InternalIP", "address": "127.0.0.1"}])
    status["addresses"].append({"type": "Hostname", "address": node["metadata"]["name"]})
    status["nodeInfo"] = {
        "kubeletVersion": "v1.32.4",
        "containerRuntimeVersion": "docker://fake",
        "operatingSystem": "linux",
        "architecture": "amd64",
        "osImage": "fake",
        "kernelVersion": "fake",
        "machineID": "",
        "systemUUID": "",
        "bootID": "",
        "kubeProxyVersion": "",
        "containerRuntime": "",
    }
    node["metadata"].setdefault("labels", {}).setdefault("kubernetes.io/hostname", node["metadata"]["name"])
    return store.create(NODES, "", node)


def _pod_ready(pod: dict[str, Any]) -> bool:
    return any(
        c.get("type") == "Ready" and c.get("status") == "True"
        for c in (pod.get("status") or {}).get("conditions") or []
    )


def _node_ready(node: dict[str, Any]) -> bool:
    return any(
        c.get("type") == "Ready" and c.get("status") == "True"
        for c in (node.get("status") or {}).get("conditions") or []
    )


def _pods_on(node_name: str, pods: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [p for p in pods if (p.get("spec") or {}).get("nodeName") == node_name and not is_terminal(p)]


def _fits(pod: dict[str, Any], node: dict[str, Any], pods: list[dict[str, Any]]) -> bool:
    return _misfit(pod, node, pods) is None


def _misfit(pod: dict[str, Any], node: dict[str, Any], pods: list[dict[str, Any]]) -> str | None:
    """Why `pod` cannot go on `node` in the scheduler's words, or None if it fits."""
    spec = pod.get("spec") or {}
    if not match_node_selector(spec.get("nodeSelector") or {}, node["metadata"].get("labels") or {}):
        return "node(s) didn't match Pod's node affinity/selector"
    for taint in (node.get("spec") or {}).get("taints") or []:
        if taint.get("effect") in ("NoSchedule", "NoExecute") and not tolerates(pod, taint):
            return f"node(s) had untolerated taint {{{taint.get('key')}: {taint.get('value', '')}}}"
    allocatable = {
        k: parse_quantity(v) for k, v in ((node.get("status") or {}).get("allocatable") or {}).items()
    }
    used: dict[str, float] = {}
    for other in _pods_on(node["metadata"].get("name", ""), pods):
        if other["metadata"].get("uid") == pod["metadata"].get("uid"):
            continue
        for name, amount in pod_requests(other).items():
            used[name] = used.get(name, 0.0) + amount
    for name, amount in pod_requests(pod).items():
        if amount > allocatable.get(name, 0.0) - used.get(name, 0.0) + 1e-9:
            return f"Insufficient {name}"
    taken = {
        port
        for other in _pods_on(node["metadata"].get("name", ""), pods)
        if other["metadata"].get("uid") != pod["metadata"].get("uid") and not is_terminal(other)
        for port in _host_ports(other)
    }
    if taken & _host_ports(pod):
        return "node(s) didn't have free ports for the requested pod ports"
    return None


def _host_ports(pod: dict[str, Any]) -> set[tuple[str, int]]:
    """The (protocol, port) pairs the Pod takes on its node (hostPort; a host-network Pod's
    containerPorts are defaulted to hostPorts)."""
    return {
        (port.get("protocol", "TCP"), int(port["hostPort"]))
        for container in (pod.get("spec") or {}).get("containers") or []
        for port in container.get("ports") or []
        if port.get("hostPort")
    }


def _unschedulable_reason(
    pod: dict[str, Any], nodes: list[dict[str, Any]], pods: list[dict[str, Any]]
) -> str:
    if not nodes:
        return "no nodes available to schedule pods."
    counts: dict[str, int] = {}
    for node in nodes:
        reason = "node(s) were not ready" if not _node_ready(node) else (_misfit(pod, node, pods) or "")
        if reason:
            counts[reason] = counts.get(reason, 0) + 1
    return ", ".join(f"{count} {reason}" for reason, count in sorted(counts.items())) + "."


def _binder(node_name: str) -> Any:
    def bind(pod: dict[str, Any]) -> None:
        pod["spec"]["nodeName"] = node_name
        conditions = [
            c
            for c in (pod.setdefault("status", {}).get("conditions") or [])
            if c.get("type") != "PodScheduled"
        ]
        conditions.append({"type": "PodScheduled", "status": "True", "lastTransitionTime": now_rfc3339()})
        pod["status"]["conditions"] = conditions

    return bind


def _bound(pod: dict[str, Any], node_name: str) -> dict[str, Any]:
    copied = copy.deepcopy(pod)
    copied["spec"]["nodeName"] = node_name
    return copied


def _unschedulable(message: str) -> Any:
    def mark(pod: dict[str, Any]) -> None:
        conditions = [
            c
            for c in (pod.setdefault("status", {}).get("conditions") or [])
            if c.get("type") != "PodScheduled"
        ]
        conditions.append(
            {
                "type": "PodScheduled",
                "status": "False",
                "reason": "Unschedulable",
                "message": message,
                "lastTransitionTime": now_rfc3339(),
            }
        )
        pod["status"]["conditions"] = conditions

    return mark
