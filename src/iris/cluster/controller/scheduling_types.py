"""What the scheduler and the autoscaler reason about: resources, devices, a pending task's
demand and a worker's capacity. Plain values, built from protos here and nowhere else."""

from __future__ import annotations

from dataclasses import dataclass, field

from iris.cluster.types import AttributeValue, Constraint
from iris.config import format_size
from iris.rpc import cluster_pb2 as pb


@dataclass(frozen=True)
class Resources:
    cpu_millicores: int = 0
    memory_bytes: int = 0
    disk_bytes: int = 0

    def fits_in(self, other: Resources) -> bool:
        return (
            self.cpu_millicores <= other.cpu_millicores
            and self.memory_bytes <= other.memory_bytes
            and self.disk_bytes <= other.disk_bytes
        )

    def __sub__(self, other: Resources) -> Resources:
        return Resources(
            self.cpu_millicores - other.cpu_millicores,
            self.memory_bytes - other.memory_bytes,
            self.disk_bytes - other.disk_bytes,
        )

    def __add__(self, other: Resources) -> Resources:
        return Resources(
            self.cpu_millicores + other.cpu_millicores,
            self.memory_bytes + other.memory_bytes,
            self.disk_bytes + other.disk_bytes,
        )

    def describe(self) -> str:
        parts = [f"{self.cpu_millicores / 1000:g} cpu", f"{format_size(self.memory_bytes)} memory"]
        if self.disk_bytes:
            parts.append(f"{format_size(self.disk_bytes)} disk")
        return ", ".join(parts)


@dataclass(frozen=True)
class Device:
    """An accelerator: kind "gpu" or "tpu", a variant ("H100", "v5litepod-16") and a count.

    A TPU request with count 0 asks for every chip of the host.
    """

    kind: str
    variant: str
    count: int

    def describe(self) -> str:
        if self.kind == "tpu":
            return f"tpu {self.variant}" + (f" ({self.count} chips)" if self.count else "")
        return f"{self.count}x gpu {self.variant or '(any)'}"

    def matches(self, offered: Device | None) -> bool:
        if offered is None or offered.kind != self.kind:
            return False
        if self.kind == "tpu":
            return offered.variant == self.variant
        return not self.variant or offered.variant.lower() == self.variant.lower()


@dataclass(frozen=True)
class TaskDemand:
    """One pending task, in the order the scheduler should consider it."""

    task_id: str
    job_id: str
    resources: Resources
    device: Device | None = None
    constraints: tuple[Constraint, ...] = ()
    # Attribute every task of the job must share; tasks of one job with a gang key form a gang.
    gang_group_by: str = ""

    def shape(self) -> tuple:
        return (self.resources, self.device, self.constraints)

    def for_task(self, task_id: str) -> TaskDemand:
        """This job's demand for one of its tasks (`dataclasses.replace` costs several times
        more, which a pass over thousands of pending tasks feels)."""
        return TaskDemand(task_id, self.job_id, self.resources, self.device, self.constraints, self.gang_group_by)


@dataclass
class WorkerCapacity:
    worker_id: str
    total: Resources
    available: Resources
    attributes: dict[str, AttributeValue] = field(default_factory=dict)
    device: Device | None = None
    device_free: int = 0


def device_from_proto(config: pb.DeviceConfig) -> Device | None:
    """The device a request asks for or a worker offers; None for cpu only."""
    kind = config.WhichOneof("device")
    if kind is None:
        return None
    chosen = getattr(config, kind)
    return Device(kind, chosen.variant, chosen.count)
