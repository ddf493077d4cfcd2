"""A scale group as the autoscaler sees it: what its workers offer, which demand it can serve, and
its bookkeeping between evaluations (zones out of quota, failure backoff, how long demand waited).

Everything here is plain data and pure methods of a clock value passed in, so planning can be
tested without a platform, a store or a real clock.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field

from iris.cluster.controller.scheduler import constraint_holds
from iris.cluster.controller.scheduling_types import Device, Resources, TaskDemand
from iris.cluster.platform.base import PlatformProvider, template_zone
from iris.cluster.platform.factory import provider_for
from iris.cluster.types import (
    ATTR_DEVICE_VARIANT,
    ATTR_SCALE_GROUP,
    ATTR_ZONE,
    AttributeValue,
    tpu_topology,
)
from iris.rpc import config_pb2

_ACCELERATOR_KIND = {config_pb2.ACCELERATOR_TYPE_GPU: "gpu", config_pb2.ACCELERATOR_TYPE_TPU: "tpu"}


@dataclass
class ScalingGroup:
    config: config_pb2.ScaleGroupConfig
    # zone -> (blocked until, why)
    blocked_zones: dict[str, tuple[int, str]] = field(default_factory=dict)
    backoff_until_ms: int = 0
    consecutive_failures: int = 0
    last_failure: str = ""
    # When demand routed to this group was first seen unmet (None: no demand now).
    demand_since_ms: int | None = None
    last_scale_up_ms: int = 0

    @classmethod
    def restore(cls, config: config_pb2.ScaleGroupConfig, saved: Mapping | None) -> ScalingGroup:
        """The group with the bookkeeping a previous controller persisted (see `bookkeeping()`)."""
        group = cls(config)
        if saved is not None:
            group.blocked_zones = {z: (until, why) for z, (until, why) in json.loads(saved["blocked_zones"]).items()}
            group.backoff_until_ms = saved["backoff_until_ms"]
            group.consecutive_failures = saved["consecutive_failures"]
            group.last_failure = saved["last_failure"]
            group.demand_since_ms = saved["demand_since_ms"]
            group.last_scale_up_ms = saved["last_scale_up_ms"]
        return group

    def bookkeeping(self) -> dict[str, int | str | None]:
        """What the store keeps of the group between controller runs."""
        return {
            "blocked_zones": json.dumps(self.blocked_zones, sort_keys=True),
            "backoff_until_ms": self.backoff_until_ms,
            "consecutive_failures": self.consecutive_failures,
            "last_failure": self.last_failure,
            "demand_since_ms": self.demand_since_ms,
            "last_scale_up_ms": self.last_scale_up_ms,
        }

    @property
    def name(self) -> str:
        return self.config.name

    @property
    def priority(self) -> int:
        return self.config.priority if self.config.HasField("priority") else 0

    @property
    def min_slices(self) -> int:
        return self.config.min_slices

    @property
    def max_slices(self) -> int:
        return self.config.max_slices

    @property
    def workers_per_slice(self) -> int:
        return max(1, self.config.slice_template.num_vms)

    @property
    def provider(self) -> PlatformProvider | None:
        """The provider of the group's slice template (None for a template without a platform)."""
        return provider_for(self.config.slice_template.WhichOneof("platform"))

    def zones(self) -> list[str]:
        """Zones in the order to try them: the group's list, else the template's own zone."""
        if self.config.zones:
            return list(self.config.zones)
        provider = self.provider
        return [template_zone(provider, self.config.slice_template) if provider else ""]

    def available_zones(self, now_ms: int) -> list[str]:
        return [z for z in self.zones() if self.blocked_zones.get(z, (0, ""))[0] <= now_ms]

    # ------------------------------------------------------------ what a worker of the group offers

    def worker_resources(self) -> Resources:
        r = self.config.resources
        return Resources(int(r.cpu) * 1000, r.ram, r.disk)

    def worker_device(self) -> Device | None:
        template = self.config.slice_template
        kind = _ACCELERATOR_KIND.get(template.accelerator_type)
        if kind == "tpu":
            variant = template.accelerator_variant
            return Device("tpu", variant, self.config.resources.tpu_count or tpu_topology(variant).chips_per_host)
        if kind == "gpu":
            return Device("gpu", template.accelerator_variant, self.config.resources.gpu_count or 1)
        return None

    def worker_attributes(self, zone: str = "") -> dict[str, AttributeValue]:
        """The attributes its workers will report, for checking constraints before they exist."""
        attributes: dict[str, AttributeValue] = {ATTR_SCALE_GROUP: self.name}
        if zone:
            attributes[ATTR_ZONE] = zone
        provider = self.provider
        if provider is not None:
            attributes.update(provider.worker_attributes(self.config.slice_template))
        device = self.worker_device()
        if device is not None:
            attributes[ATTR_DEVICE_VARIANT] = device.variant
        return attributes

    def cannot_serve(self, demand: TaskDemand, gang_size: int) -> str:
        """Why this group can never serve the demand, or "" when it can."""
        need, offered = demand.resources, self.worker_resources()
        if demand.device is not None and not demand.device.matches(self.worker_device()):
            return f"its workers have no {demand.device.describe()}"
        device = self.worker_device()
        if demand.device is not None and device is not None and demand.device.count > device.count:
            return f"its workers have {device.count} {device.kind}s, the task needs {demand.device.count}"
        # A dimension the group does not declare (0) is not known in advance, so it cannot rule a task out.
        short = [
            name
            for name, have, want in (
                ("cpu", offered.cpu_millicores, need.cpu_millicores),
                ("memory", offered.memory_bytes, need.memory_bytes),
                ("disk", offered.disk_bytes, need.disk_bytes),
            )
            if have and want > have
        ]
        if short:
            return f"its workers offer {offered.describe()}, the task needs {need.describe()} (short of {', '.join(short)})"
        if gang_size > self.workers_per_slice:
            return f"a gang of {gang_size} needs a slice of {gang_size} workers; its slices have {self.workers_per_slice}"
        zones = self.zones()
        for constraint in demand.constraints:
            if not any(constraint_holds(constraint, self.worker_attributes(z)) for z in zones):
                return f"its workers would not satisfy {constraint.describe()}"
        return ""

    def tasks_per_slice(self, demand: TaskDemand) -> int:
        """How many tasks of this shape one new slice absorbs."""
        offered = self.worker_resources()
        need = demand.resources
        per_worker = []
        for have, want in (
            (offered.cpu_millicores, need.cpu_millicores),
            (offered.memory_bytes, need.memory_bytes),
            (offered.disk_bytes, need.disk_bytes),
        ):
            if want and have:
                per_worker.append(have // want)
        device = self.worker_device()
        if demand.device is not None and device is not None:
            per_worker.append(1 if demand.device.count == 0 else device.count // demand.device.count)
        return max(1, min(per_worker, default=1)) * self.workers_per_slice

    # ------------------------------------------------------------ bookkeeping

    def block_zone(self, zone: str, now_ms: int, backoff_ms: int, reason: str) -> None:
        self.blocked_zones[zone] = (now_ms + backoff_ms, reason)

    def record_failure(self, now_ms: int, reason: str, base_ms: int, max_ms: int) -> None:
        self.consecutive_failures += 1
        self.last_failure = reason
        delay = min(max_ms, base_ms * 2 ** (self.consecutive_failures - 1))
        self.backoff_until_ms = now_ms + delay

    def record_success(self) -> None:
        self.consecutive_failures = 0
        self.backoff_until_ms = 0
