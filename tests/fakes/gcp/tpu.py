"""TPU v2 `projects.locations.nodes`: node records, their state table and the REST handlers.

A create is accepted at once (node CREATING, an operation returned); when the operation's delay has
passed the node gets its hosts and becomes READY, or, if the zone's capacity or the host pool cannot
hold it, the operation fails with code 8 and the node disappears, as a stocked-out create does.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from enum import Enum
from typing import TYPE_CHECKING, Any

from fakes.gcp.errors import ApiError, not_found
from fakes.gcp.hosts import Machine, instance_keys, power_off
from fakes.gcp.operations import Operation, OperationError, Outcome, numeric_id, timestamp, tpu_operation_json
from iris.cluster.types import tpu_topology

if TYPE_CHECKING:
    from fakes.gcp.fake import FakeGcp

NODE_TYPE = "type.googleapis.com/google.cloud.tpu.v2.Node"
# The port the TPU runtime's gRPC endpoint listens on, which the API reports per worker.
TPU_RUNTIME_PORT = 8470
RESOURCE_NAME = re.compile(r"[a-z]([-a-z0-9]{0,61}[a-z0-9])?")
# Google's quota metric per TPU generation (the preemptible pools have their own).
_QUOTA_METRICS = {
    "v4": ("TPUV4PodPerProjectPerZoneForTPUAPI", "TPUV4PodPreemptiblePerProjectPerZoneForTPUAPI"),
    "v5litepod": (
        "TPUV5sLitepodServingPerProjectPerZoneForTPUAPI",
        "TPUV5sPreemptibleLitepodServingPerProjectPerZoneForTPUAPI",
    ),
    "v5p": ("TPUV5pPerProjectPerZoneForTPUAPI", "TPUV5pPreemptiblePerProjectPerZoneForTPUAPI"),
    "v6e": ("TPUV6EPerProjectPerZoneForTPUAPI", "TPUV6EPreemptiblePerProjectPerZoneForTPUAPI"),
}


_ACCELERATOR_CONFIG_TYPES = {"v5litepod": "V5LITE_POD", "v5e": "V5LITE_POD"}
# Generations whose chips form a 3-D torus; the others are 2-D.
_THREE_D = {"v2", "v3", "v4", "v5p"}


def topology_text(chips: int, generation: str) -> str:
    """The chip grid Google reports for a slice, e.g. 8 v4 chips -> "2x2x2", 16 v5e -> "4x4"."""
    dims = [1, 1, 1] if generation in _THREE_D else [1, 1]
    while dims[0] * dims[1] * (dims[2] if len(dims) == 3 else 1) < chips:
        dims.sort()
        dims[0] *= 2
    # Ascending, with unused dimensions last: 2x2x1, 2x2x4.
    return "x".join(str(d) for d in sorted(dims, key=lambda d: (d == 1, d)))


class NodeState(str, Enum):
    CREATING = "CREATING"
    READY = "READY"
    PREEMPTED = "PREEMPTED"
    DELETING = "DELETING"


NODE_TRANSITIONS: dict[tuple[NodeState, NodeState], str] = {
    (NodeState.CREATING, NodeState.READY): "the create operation finished: hosts assigned and booted",
    (NodeState.READY, NodeState.PREEMPTED): "preempted: the zone reclaimed the capacity, the hosts stopped",
    (NodeState.CREATING, NodeState.DELETING): "delete requested while creating",
    (NodeState.READY, NodeState.DELETING): "delete requested",
    (NodeState.PREEMPTED, NodeState.DELETING): "delete requested",
}


@dataclass
class Node:
    project: str
    zone: str
    name: str
    accelerator_type: str
    runtime_version: str
    chips: int
    hosts_needed: int
    preemptible: bool
    spot: bool
    external_ips: bool
    labels: dict[str, str]
    metadata: dict[str, str]
    description: str
    id: str = field(default_factory=numeric_id)
    created: datetime = field(default_factory=lambda: datetime.now(UTC))
    state: NodeState = NodeState.CREATING
    hosts: list[Machine] = field(default_factory=list)
    history: list[tuple[NodeState, str]] = field(default_factory=list)

    @property
    def path(self) -> str:
        return f"projects/{self.project}/locations/{self.zone}/nodes/{self.name}"

    def move(self, to: NodeState) -> None:
        reason = NODE_TRANSITIONS.get((self.state, to))
        if reason is None:
            raise ApiError(400, f"node {self.name} cannot go from {self.state.value} to {to.value}")
        self.state = to
        self.history.append((to, reason))

    def to_json(self) -> dict[str, Any]:
        region = self.zone.rsplit("-", 1)[0]
        scheduling: dict[str, Any] = {}
        if self.preemptible:
            scheduling["preemptible"] = True
        if self.spot:
            scheduling["spot"] = True
        body: dict[str, Any] = {
            "name": self.path,
            "description": self.description,
            "acceleratorType": self.accelerator_type,
            "state": self.state.value,
            "runtimeVersion": self.runtime_version,
            "networkConfig": {
                "network": f"projects/{self.project}/global/networks/default",
                "subnetwork": f"projects/{self.project}/regions/{region}/subnetworks/default",
                "enableExternalIps": self.external_ips,
            },
            "serviceAccount": {
                "email": "default",
                "scope": ["https://www.googleapis.com/auth/cloud-platform"],
            },
            "createTime": timestamp(self.created),
            "schedulingConfig": scheduling,
            "id": self.id,
            "apiVersion": "V2",
            "shieldedInstanceConfig": {},
        }
        generation = self.accelerator_type.rsplit("-", 1)[0].lower()
        body["acceleratorConfig"] = {
            "type": _ACCELERATOR_CONFIG_TYPES.get(generation, generation.upper()),
            "topology": topology_text(self.chips, generation),
        }
        if self.hosts:
            endpoints = []
            for host in self.hosts:
                endpoint: dict[str, Any] = {"ipAddress": host.address, "port": TPU_RUNTIME_PORT}
                if self.external_ips:
                    endpoint["accessConfig"] = {"externalIp": host.address}
                endpoints.append(endpoint)
            body["networkEndpoints"] = endpoints
        if self.state == NodeState.READY:
            body["health"] = "HEALTHY"
        if self.labels:
            body["labels"] = dict(self.labels)
        if self.metadata:
            body["metadata"] = dict(self.metadata)
        return {key: value for key, value in body.items() if value != ""}


def quota_metric(accelerator_type: str, preemptible: bool) -> str:
    generation = accelerator_type.rsplit("-", 1)[0].lower()
    normal, cheap = _QUOTA_METRICS.get(
        generation,
        (
            f"TPU{generation.upper()}PerProjectPerZoneForTPUAPI",
            f"TPU{generation.upper()}PreemptiblePerProjectPerZoneForTPUAPI",
        ),
    )
    return cheap if preemptible else normal


def stockout_message(zone: str) -> str:
    return (
        f'There is no more capacity in the zone "{zone}"; you can try in another zone where Cloud TPU '
        "Nodes are offered (see https://cloud.google.com/tpu/docs/regions) [EID: 0x1f2e3d4c5b6a7988]"
    )


class TpuApi:
    """The nodes of every zone; handlers run with the fake's lock held."""

    def __init__(self, fake: FakeGcp) -> None:
        self.fake = fake
        self.nodes: dict[tuple[str, str], Node] = {}

    # -- helpers ---------------------------------------------------------------------------------

    def _node(self, zone: str, name: str) -> Node:
        node = self.nodes.get((zone, name))
        if node is None:
            raise not_found(f"projects/{self.fake.project}/locations/{zone}/nodes/{name}")
        return node

    def _operation(self, node: Node, verb: str, finish: Callable[[], Outcome]) -> dict[str, Any]:
        operation = self.fake.operations.start(
            "tpu", verb, node.path, node.id, node.zone, self.fake.operation_delay, finish, self.fake.project
        )
        return tpu_operation_json(operation)

    def chips_in(self, zone: str, states: tuple[NodeState, ...]) -> int:
        return sum(node.chips for node in self.nodes.values() if node.zone == zone and node.state in states)

    def authorize(self, node: Node) -> None:
        keys = instance_keys(self.fake.compute.project_metadata(), node.metadata)
        for host in node.hosts:
            self.fake.pool.authorize(host, keys)

    # -- handlers --------------------------------------------------------------------------------

    def list(self, zone: str, query: dict[str, str], body: Any) -> dict[str, Any]:
        nodes = sorted(
            (node for node in self.nodes.values() if zone in ("-", node.zone)),
            key=lambda node: (node.zone, node.name),
        )
        return {"nodes": [node.to_json() for node in nodes]} if nodes else {}

    def get(self, zone: str, name: str, query: dict[str, str], body: Any) -> dict[str, Any]:
        return self._node(zone, name).to_json()

    def create(self, zone: str, query: dict[str, str], body: Any) -> dict[str, Any]:
        name = query.get("nodeId", "")
        if not RESOURCE_NAME.fullmatch(name):
            raise ApiError(400, f"Invalid node id {name!r}: it must match {RESOURCE_NAME.pattern}")
        if (zone, name) in self.nodes:
            raise ApiError(
                409, f"Resource 'projects/{self.fake.project}/locations/{zone}/nodes/{name}' already exists"
            )
        accelerator = str(body.get("acceleratorType", ""))
        try:
            topology = tpu_topology(accelerator)
        except ValueError:
            raise ApiError(
                400, f'Accelerator type "{accelerator}" is not available in zone "{zone}"'
            ) from None
        scheduling = body.get("schedulingConfig") or {}
        node = Node(
            project=self.fake.project,
            zone=zone,
            name=name,
            accelerator_type=accelerator,
            runtime_version=str(body.get("runtimeVersion", "")),
            chips=topology.chips,
            hosts_needed=topology.hosts,
            preemptible=bool(scheduling.get("preemptible")),
            spot=bool(scheduling.get("spot")),
            external_ips=bool((body.get("networkConfig") or {}).get("enableExternalIps")),
            labels=dict(body.get("labels") or {}),
            metadata={str(k): str(v) for k, v in (body.get("metadata") or {}).items()},
            description=str(body.get("description", "")),
        )
        quota = self.fake.limits(zone).quota_tpu_chips
        held = self.chips_in(
            zone, (NodeState.CREATING, NodeState.READY, NodeState.PREEMPTED, NodeState.DELETING)
        )
        if quota is not None and held + node.chips > quota:
            metric = quota_metric(accelerator, node.preemptible or node.spot)
            raise ApiError(
                429,
                f"Quota limit '{metric}' has been exceeded. Limit: {quota} in zone {zone}.",
                reason="RATE_LIMIT_EXCEEDED",
                domain="tpu.googleapis.com",
                metadata={"quota_metric": metric, "zone": zone},
            )
        self.nodes[(zone, name)] = node
        return self._operation(node, "create", lambda: self._finish_create(node))

    def _finish_create(self, node: Node) -> dict[str, Any] | OperationError:
        if self.nodes.get((node.zone, node.name)) is not node or node.state != NodeState.CREATING:
            return OperationError(
                10, "ABORTED", f"The node {node.name} was deleted while it was being created."
            )
        capacity = self.fake.limits(node.zone).capacity_tpu_chips
        running = self.chips_in(node.zone, (NodeState.READY, NodeState.PREEMPTED, NodeState.DELETING))
        hosts = None
        if capacity is None or running + node.chips <= capacity:
            hosts = self.fake.pool.take(node.hosts_needed)
        if hosts is None:
            del self.nodes[(node.zone, node.name)]
            return OperationError(8, "ZONE_RESOURCE_POOL_EXHAUSTED", stockout_message(node.zone))
        node.hosts = hosts
        self.authorize(node)
        node.move(NodeState.READY)
        return {"@type": NODE_TYPE, **node.to_json()}

    def delete(self, zone: str, name: str, query: dict[str, str], body: Any) -> dict[str, Any]:
        node = self._node(zone, name)
        if node.state != NodeState.DELETING:
            node.move(NodeState.DELETING)
        return self._operation(node, "delete", lambda: self._finish_delete(node))

    def _finish_delete(self, node: Node) -> None:
        if self.nodes.get((node.zone, node.name)) is node:
            del self.nodes[(node.zone, node.name)]
            self.fake.pool.give_back(node.hosts)
            node.hosts = []

    def update(self, zone: str, name: str, query: dict[str, str], body: Any) -> dict[str, Any]:
        node = self._node(zone, name)
        fields = [f.strip() for f in query.get("updateMask", "").split(",") if f.strip()]
        unknown = [f for f in fields if f not in ("metadata", "labels", "description")]
        if not fields or unknown:
            raise ApiError(
                400,
                f"Invalid update mask {query.get('updateMask', '')!r}: supported fields are metadata, labels, description",
            )

        def finish() -> dict[str, Any]:
            if "metadata" in fields:
                node.metadata = {str(k): str(v) for k, v in (body.get("metadata") or {}).items()}
                self.authorize(node)
            if "labels" in fields:
                node.labels = dict(body.get("labels") or {})
            if "description" in fields:
                node.description = str(body.get("description", ""))
            return {"@type": NODE_TYPE, **node.to_json()}

        return self._operation(node, "update", finish)

    def guest_attributes(self, zone: str, name: str, query: dict[str, str], body: Any) -> dict[str, Any]:
        """Per worker, what its guest agent published: the host keys (gcloud pins them)."""
        node = self._node(zone, name)
        asked = [w for w in (body.get("workerIds") or []) if w != ""]
        workers = [int(w) for w in asked] if asked else list(range(len(node.hosts)))
        attributes = []
        for worker in workers:
            if not 0 <= worker < len(node.hosts):
                raise ApiError(400, f"Invalid worker id {worker}: the node has {len(node.hosts)} workers")
            key_type, key = node.hosts[worker].host_public_key.split()[:2]
            attributes.append(
                {
                    "queryPath": "",
                    "workerId": str(worker),
                    "queryValue": {"items": [{"namespace": "hostkeys", "key": key_type, "value": key}]},
                }
            )
        return {"guestAttributes": attributes} if attributes else {}

    def get_operation(self, zone: str, operation: str, query: dict[str, str], body: Any) -> dict[str, Any]:
        name = f"projects/{self.fake.project}/locations/{zone}/operations/{operation}"
        found: Operation | None = self.fake.operations.find("tpu", zone, name)
        if found is None:
            raise not_found(name)
        return tpu_operation_json(found)

    # -- controls --------------------------------------------------------------------------------

    def preempt(self, node: Node) -> None:
        node.move(NodeState.PREEMPTED)
        for host in node.hosts:
            power_off(host)
