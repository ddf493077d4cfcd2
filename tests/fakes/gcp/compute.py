"""Compute v1: instances, zones, zone and global operations, and the project's common metadata.

An insert is accepted at once (status PROVISIONING); when its operation's delay has passed the VM
gets one host from the pool and is RUNNING, or the operation fails with
ZONE_RESOURCE_POOL_EXHAUSTED and the VM disappears. Metadata and labels carry fingerprints that a
write must quote, as the real API requires (gcloud reads them first).
"""

from __future__ import annotations

import base64
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from enum import Enum
from typing import TYPE_CHECKING, Any

from fakes.gcp.errors import ApiError, not_found
from fakes.gcp.hosts import Machine, instance_keys, power_off
from fakes.gcp.operations import (
    COMPUTE_WAIT_LIMIT_S,
    Operation,
    OperationError,
    Outcome,
    compute_operation_json,
    numeric_id,
    timestamp,
)
from fakes.gcp.tpu import RESOURCE_NAME

if TYPE_CHECKING:
    from fakes.gcp.fake import FakeGcp


class InstanceStatus(str, Enum):
    PROVISIONING = "PROVISIONING"
    RUNNING = "RUNNING"
    STOPPING = "STOPPING"
    TERMINATED = "TERMINATED"


INSTANCE_TRANSITIONS: dict[tuple[InstanceStatus, InstanceStatus], str] = {
    (InstanceStatus.PROVISIONING, InstanceStatus.RUNNING): "the insert operation finished: a host booted",
    (InstanceStatus.RUNNING, InstanceStatus.TERMINATED): "preempted: the zone reclaimed the capacity",
    (InstanceStatus.PROVISIONING, InstanceStatus.STOPPING): "delete requested while provisioning",
    (InstanceStatus.RUNNING, InstanceStatus.STOPPING): "delete requested",
    (InstanceStatus.TERMINATED, InstanceStatus.STOPPING): "delete requested",
}


def fingerprint() -> str:
    """A fresh fingerprint: 8 random bytes in base64, as Compute's (gcloud decodes them)."""
    return base64.b64encode(os.urandom(8)).decode()


def same_fingerprint(quoted: object, current: str) -> bool:
    """Fingerprints are bytes: clients may send them back in base64 or its URL-safe form (gcloud does)."""
    if not isinstance(quoted, str):
        return False
    try:
        return base64.urlsafe_b64decode(quoted.replace("+", "-").replace("/", "_")) == base64.b64decode(
            current
        )
    except ValueError:
        return False


def metadata_items(body: dict[str, Any] | None) -> dict[str, str]:
    return {str(item["key"]): str(item.get("value", "")) for item in (body or {}).get("items") or []}


@dataclass
class Metadata:
    items: dict[str, str] = field(default_factory=dict)
    fingerprint: str = field(default_factory=fingerprint)

    def to_json(self) -> dict[str, Any]:
        body: dict[str, Any] = {"kind": "compute#metadata", "fingerprint": self.fingerprint}
        if self.items:
            body["items"] = [{"key": key, "value": value} for key, value in self.items.items()]
        return body

    def replace(self, body: dict[str, Any]) -> None:
        """setMetadata semantics: the quoted fingerprint must be current; the items replace all."""
        if not same_fingerprint(body.get("fingerprint"), self.fingerprint):
            raise ApiError(
                412,
                "Supplied fingerprint does not match current metadata fingerprint.",
                compute_reason="conditionNotMet",
            )
        self.items = metadata_items(body)
        self.fingerprint = fingerprint()


@dataclass
class Instance:
    project: str
    zone: str
    name: str
    machine_type: str
    labels: dict[str, str]
    metadata: Metadata
    external_ip: bool
    preemptible: bool
    body: dict[str, Any]  # what the insert asked for: disks, service accounts, tags...
    id: str = field(default_factory=numeric_id)
    created: datetime = field(default_factory=lambda: datetime.now(UTC))
    status: InstanceStatus = InstanceStatus.PROVISIONING
    label_fingerprint: str = field(default_factory=fingerprint)
    host: Machine | None = None
    history: list[tuple[InstanceStatus, str]] = field(default_factory=list)

    @property
    def path(self) -> str:
        return f"projects/{self.project}/zones/{self.zone}/instances/{self.name}"

    def move(self, to: InstanceStatus) -> None:
        reason = INSTANCE_TRANSITIONS.get((self.status, to))
        if reason is None:
            raise ApiError(400, f"instance {self.name} cannot go from {self.status.value} to {to.value}")
        self.status = to
        self.history.append((to, reason))

    def to_json(self, base: str) -> dict[str, Any]:
        region = self.zone.rsplit("-", 1)[0]
        interface: dict[str, Any] = {
            "kind": "compute#networkInterface",
            "name": "nic0",
            "network": f"{base}projects/{self.project}/global/networks/default",
            "subnetwork": f"{base}projects/{self.project}/regions/{region}/subnetworks/default",
            "stackType": "IPV4_ONLY",
            "fingerprint": self.label_fingerprint,
        }
        if self.host is not None:
            interface["networkIP"] = self.host.address
        if self.external_ip:
            access: dict[str, Any] = {
                "kind": "compute#accessConfig",
                "name": "external-nat",
                "type": "ONE_TO_ONE_NAT",
                "networkTier": "PREMIUM",
            }
            if self.host is not None:
                access["natIP"] = self.host.address
            interface["accessConfigs"] = [access]
        body: dict[str, Any] = {
            "kind": "compute#instance",
            "id": self.id,
            "creationTimestamp": timestamp(self.created),
            "name": self.name,
            "machineType": self.machine_type,
            "status": self.status.value,
            "zone": f"{base}projects/{self.project}/zones/{self.zone}",
            "networkInterfaces": [interface],
            "disks": self.body.get("disks", []),
            "metadata": self.metadata.to_json(),
            "serviceAccounts": self.body.get("serviceAccounts", []),
            "scheduling": self.body.get("scheduling", {}),
            "tags": {"fingerprint": "42WmSpB8rSM=", **(self.body.get("tags") or {})},
            "labelFingerprint": self.label_fingerprint,
            "selfLink": f"{base}{self.path}",
            "canIpForward": False,
            "deletionProtection": False,
            "cpuPlatform": "Intel Cascade Lake",
            "fingerprint": self.label_fingerprint,
        }
        if self.labels:
            body["labels"] = dict(self.labels)
        return body


class ComputeApi:
    def __init__(self, fake: FakeGcp) -> None:
        self.fake = fake
        self.instances: dict[tuple[str, str], Instance] = {}
        self.common_metadata = Metadata()
        self.project_id = numeric_id()

    @property
    def base(self) -> str:
        return f"{self.fake.url}/compute/v1/"

    def project_metadata(self) -> dict[str, str]:
        return self.common_metadata.items

    # -- helpers ---------------------------------------------------------------------------------

    def _zone(self, zone: str) -> str:
        if zone not in self.fake.zones:
            raise not_found(f"projects/{self.fake.project}/zones/{zone}")
        return zone

    def _instance(self, zone: str, name: str) -> Instance:
        instance = self.instances.get((self._zone(zone), name))
        if instance is None:
            raise not_found(f"projects/{self.fake.project}/zones/{zone}/instances/{name}")
        return instance

    def _operation(
        self, verb: str, target: str, target_id: str, zone: str | None, finish: Callable[[], Outcome]
    ) -> dict[str, Any]:
        operation = self.fake.operations.start(
            "compute", verb, target, target_id, zone, self.fake.operation_delay, finish, self.fake.project
        )
        return compute_operation_json(operation, self.base, self.fake.project)

    def authorize(self, instance: Instance) -> None:
        if instance.host is not None:
            keys = instance_keys(self.project_metadata(), instance.metadata.items)
            self.fake.pool.authorize(instance.host, keys)

    # -- project and zones -----------------------------------------------------------------------

    def get_project(self, query: dict[str, str], body: Any) -> dict[str, Any]:
        return {
            "kind": "compute#project",
            "id": self.project_id,
            "name": self.fake.project,
            "commonInstanceMetadata": self.common_metadata.to_json(),
            "defaultServiceAccount": f"{self.project_id}-compute@developer.gserviceaccount.com",
            "defaultNetworkTier": "PREMIUM",
            "xpnProjectStatus": "UNSPECIFIED_XPN_PROJECT_STATUS",
            "selfLink": f"{self.base}projects/{self.fake.project}",
        }

    def set_common_metadata(self, query: dict[str, str], body: Any) -> dict[str, Any]:
        self.common_metadata.replace(body)
        self.fake.authorize_all()
        return self._operation(
            "setMetadata", f"projects/{self.fake.project}", self.project_id, None, lambda: None
        )

    def _zone_json(self, zone: str) -> dict[str, Any]:
        region = zone.rsplit("-", 1)[0]
        return {
            "kind": "compute#zone",
            "id": str(2000 + self.fake.zones.index(zone)),
            "name": zone,
            "description": zone,
            "status": "UP",
            "region": f"{self.base}projects/{self.fake.project}/regions/{region}",
            "selfLink": f"{self.base}projects/{self.fake.project}/zones/{zone}",
            "availableCpuPlatforms": ["Intel Cascade Lake", "AMD Milan"],
            "supportsPzs": False,
        }

    def get_zone(self, zone: str, query: dict[str, str], body: Any) -> dict[str, Any]:
        return self._zone_json(self._zone(zone))

    def list_zones(self, query: dict[str, str], body: Any) -> dict[str, Any]:
        return {
            "kind": "compute#zoneList",
            "items": [self._zone_json(zone) for zone in self.fake.zones],
            "selfLink": f"{self.base}projects/{self.fake.project}/zones",
        }

    # -- instances -------------------------------------------------------------------------------

    def list_instances(self, zone: str, query: dict[str, str], body: Any) -> dict[str, Any]:
        self._zone(zone)
        found = sorted((i for i in self.instances.values() if i.zone == zone), key=lambda i: i.name)
        result: dict[str, Any] = {
            "kind": "compute#instanceList",
            "id": f"projects/{self.fake.project}/zones/{zone}/instances",
            "selfLink": f"{self.base}projects/{self.fake.project}/zones/{zone}/instances",
        }
        if found:
            result["items"] = [i.to_json(self.base) for i in found]
        return result

    def aggregated_instances(self, query: dict[str, str], body: Any) -> dict[str, Any]:
        items: dict[str, Any] = {}
        for zone in self.fake.zones:
            found = sorted((i for i in self.instances.values() if i.zone == zone), key=lambda i: i.name)
            if found:
                items[f"zones/{zone}"] = {"instances": [i.to_json(self.base) for i in found]}
            else:
                items[f"zones/{zone}"] = {
                    "warning": {
                        "code": "NO_RESULTS_ON_PAGE",
                        "message": f"There are no results for scope 'zones/{zone}' on this page.",
                        "data": [{"key": "scope", "value": f"zones/{zone}"}],
                    }
                }
        return {
            "kind": "compute#instanceAggregatedList",
            "id": f"projects/{self.fake.project}/aggregated/instances",
            "items": items,
            "selfLink": f"{self.base}projects/{self.fake.project}/aggregated/instances",
        }

    def get_instance(self, zone: str, name: str, query: dict[str, str], body: Any) -> dict[str, Any]:
        return self._instance(zone, name).to_json(self.base)

    def insert(self, zone: str, query: dict[str, str], body: Any) -> dict[str, Any]:
        self._zone(zone)
        name = str(body.get("name", ""))
        if not RESOURCE_NAME.fullmatch(name):
            raise ApiError(
                400,
                f"Invalid value for field 'resource.name': '{name}'. Must be a match of regex "
                "'(?:[a-z](?:[-a-z0-9]{0,61}[a-z0-9])?|[1-9][0-9]{0,19})'",
            )
        if (zone, name) in self.instances:
            raise ApiError(
                409,
                f"The resource 'projects/{self.fake.project}/zones/{zone}/instances/{name}' already exists",
            )
        quota = self.fake.limits(zone).quota_instances
        if quota is not None and sum(1 for i in self.instances.values() if i.zone == zone) >= quota:
            region = zone.rsplit("-", 1)[0]
            raise ApiError(
                403,
                f"Quota 'INSTANCES' exceeded.  Limit: {float(quota)} in region {region}.",
                compute_reason="quotaExceeded",
            )
        interfaces = body.get("networkInterfaces") or [{}]
        scheduling = body.get("scheduling") or {}
        instance = Instance(
            project=self.fake.project,
            zone=zone,
            name=name,
            machine_type=str(body.get("machineType", "")),
            labels=dict(body.get("labels") or {}),
            metadata=Metadata(metadata_items(body.get("metadata"))),
            external_ip=bool(interfaces[0].get("accessConfigs")),
            preemptible=bool(scheduling.get("preemptible")) or scheduling.get("provisioningModel") == "SPOT",
            body=body,
        )
        self.instances[(zone, name)] = instance
        return self._operation(
            "insert", instance.path, instance.id, zone, lambda: self._finish_insert(instance)
        )

    def _finish_insert(self, instance: Instance) -> OperationError | None:
        if self.instances.get((instance.zone, instance.name)) is not instance:
            return OperationError(
                10,
                "RESOURCE_NOT_READY",
                f"The instance {instance.name} was deleted while it was being created.",
            )
        capacity = self.fake.limits(instance.zone).capacity_instances
        running = sum(1 for i in self.instances.values() if i.zone == instance.zone and i.host is not None)
        hosts = None
        if capacity is None or running < capacity:
            hosts = self.fake.pool.take(1)
        if hosts is None:
            del self.instances[(instance.zone, instance.name)]
            return OperationError(
                8,
                "ZONE_RESOURCE_POOL_EXHAUSTED",
                f"The zone 'projects/{self.fake.project}/zones/{instance.zone}' does not have enough resources "
                "available to fulfill the request.  Try a different zone, or try again later.",
            )
        instance.host = hosts[0]
        self.authorize(instance)
        instance.move(InstanceStatus.RUNNING)
        return None

    def delete(self, zone: str, name: str, query: dict[str, str], body: Any) -> dict[str, Any]:
        instance = self._instance(zone, name)
        if instance.status != InstanceStatus.STOPPING:
            instance.move(InstanceStatus.STOPPING)

        def finish() -> None:
            if self.instances.get((zone, name)) is instance:
                del self.instances[(zone, name)]
                if instance.host is not None:
                    self.fake.pool.give_back([instance.host])
                    instance.host = None

        return self._operation("delete", instance.path, instance.id, zone, finish)

    def set_metadata(self, zone: str, name: str, query: dict[str, str], body: Any) -> dict[str, Any]:
        instance = self._instance(zone, name)
        instance.metadata.replace(body)
        self.authorize(instance)
        return self._operation("setMetadata", instance.path, instance.id, zone, lambda: None)

    def set_labels(self, zone: str, name: str, query: dict[str, str], body: Any) -> dict[str, Any]:
        instance = self._instance(zone, name)
        if not same_fingerprint(body.get("labelFingerprint"), instance.label_fingerprint):
            raise ApiError(
                412,
                "Labels fingerprint either invalid or resource labels have changed",
                compute_reason="conditionNotMet",
            )
        instance.labels = dict(body.get("labels") or {})
        instance.label_fingerprint = fingerprint()
        return self._operation("setLabels", instance.path, instance.id, zone, lambda: None)

    # -- operations ------------------------------------------------------------------------------

    def _find_operation(self, zone: str | None, name: str) -> Operation:
        found = self.fake.operations.find("compute", zone, name)
        if found is None:
            scope = f"zones/{zone}" if zone else "global"
            raise not_found(f"projects/{self.fake.project}/{scope}/operations/{name}")
        return found

    def get_zone_operation(
        self, zone: str, operation: str, query: dict[str, str], body: Any
    ) -> dict[str, Any]:
        return compute_operation_json(self._find_operation(zone, operation), self.base, self.fake.project)

    def wait_zone_operation(
        self, zone: str, operation: str, query: dict[str, str], body: Any
    ) -> dict[str, Any]:
        found = self._find_operation(zone, operation)
        self.fake.operations.wait(found, COMPUTE_WAIT_LIMIT_S)
        return compute_operation_json(found, self.base, self.fake.project)

    def get_global_operation(self, operation: str, query: dict[str, str], body: Any) -> dict[str, Any]:
        return compute_operation_json(self._find_operation(None, operation), self.base, self.fake.project)

    def wait_global_operation(self, operation: str, query: dict[str, str], body: Any) -> dict[str, Any]:
        found = self._find_operation(None, operation)
        self.fake.operations.wait(found, COMPUTE_WAIT_LIMIT_S)
        return compute_operation_json(found, self.base, self.fake.project)

    # -- controls --------------------------------------------------------------------------------

    def preempt(self, instance: Instance) -> None:
        instance.move(InstanceStatus.TERMINATED)
        if instance.host is not None:
            power_off(instance.host)
