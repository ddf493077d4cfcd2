"""A fake cloud behind the Platform protocol, for autoscaler tests without a network or a real clock.

Slices move CREATING -> BOOTSTRAPPING -> READY as a `FakeClock` the test advances passes
configurable durations; the state is worked out when `describe()` is called, the way a real cloud
is only ever observed by polling. Every failure a cloud produces can be injected:

- `exhaust_quota(zone)`: `create_slice` in that zone raises `QuotaExhaustedError(zone=...)` at once.
- `fail_next_create(message)`: `create_slice` raises `PlatformError` (the request was refused).
- `fail_next_bootstrap(message)`: the next slice created provisions, then fails its bootstrap:
  `describe()` reports FAILED with the message and the platform deletes the slice's resources itself.
- `kill_slice(slice_id, message)`: a live slice dies (FAILED, its resources remain until terminated),
  or with `vanish=True` disappears entirely (`describe()` raises `ResourceNotFoundError`).
- `add_existing_slice(group)`: a slice created before the controller started, labelled the way
  Iris labels its slices, so `list_slices` finds it.
- `unavailable = True`: every call raises `PlatformUnavailableError`; `fail_next_list()` only the
  next `list_slices`.

The platform keeps track of the resources that exist (`live_resources()`), so a test can assert
that nothing is left behind after failures and terminations.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field

from iris.cluster.platform.base import (
    CloudSliceState,
    CloudWorkerState,
    CommandResult,
    Labels,
    PlatformError,
    PlatformUnavailableError,
    QuotaExhaustedError,
    ResourceNotFoundError,
    SliceRecordView,
    SliceStatus,
    VmLogKind,
    WorkerStatus,
)
from iris.rpc import config_pb2
from iris.time import Duration, Timestamp

T0_MS = 1_700_000_000_000


class FakeClock:
    """Milliseconds since the epoch that only move when the test says so. Calling the clock returns
    the current time, so it can stand in for a `_ms()`-style function."""

    def __init__(self, start_ms: int = T0_MS):
        self.now_ms = start_ms

    def __call__(self) -> int:
        return self.now_ms

    def advance(self, ms: int = 0, *, seconds: float = 0) -> int:
        self.now_ms += ms + round(seconds * 1000)
        return self.now_ms

    def timestamp(self) -> Timestamp:
        return Timestamp(self.now_ms)


# ---------------------------------------------------------------- workers and VMs


class FakeWorkerHandle:
    def __init__(self, worker_id: str, index: int, slice_record: _SliceRecord | None = None):
        self._worker_id = worker_id
        self.index = index
        self._slice = slice_record
        self.commands: list[str] = []
        self.reboots = 0

    @property
    def worker_id(self) -> str:
        return self._worker_id

    @property
    def internal_address(self) -> str:
        return f"10.0.{self.index // 250}.{self.index % 250 + 2}"

    @property
    def external_address(self) -> str | None:
        return None

    def status(self) -> WorkerStatus:
        alive = self._slice is None or (self._slice.resources_live and not self._slice.failure)
        return WorkerStatus(CloudWorkerState.RUNNING if alive else CloudWorkerState.TERMINATED)

    def run_command(
        self, command: str, timeout: Duration | None = None, on_line: Callable[[str], None] | None = None
    ) -> CommandResult:
        self.commands.append(command)
        if on_line is not None:
            on_line(f"ran: {command}")
        return CommandResult(0, f"ran: {command}\n", "")

    def reboot(self) -> None:
        self.reboots += 1


class FakeVmHandle(FakeWorkerHandle):
    """A standalone VM (the controller's): can be terminated and tagged."""

    def __init__(
        self, platform: FakeCloudPlatform, name: str, labels: dict[str, str], metadata: dict[str, str]
    ):
        super().__init__(name, 0)
        self._platform = platform
        self.labels = dict(labels)
        self.metadata = dict(metadata)
        self.terminated = False

    def status(self) -> WorkerStatus:
        return WorkerStatus(CloudWorkerState.TERMINATED if self.terminated else CloudWorkerState.RUNNING)

    def terminate(self) -> None:
        self.terminated = True
        self._platform._vms.pop(self.worker_id, None)

    def set_labels(self, labels: dict[str, str]) -> None:
        self.labels.update(labels)

    def set_metadata(self, metadata: dict[str, str]) -> None:
        self.metadata.update(metadata)


# ---------------------------------------------------------------- slices


@dataclass
class _SliceRecord:
    slice_id: str
    zone: str
    scale_group: str
    labels: dict[str, str]
    created_at_ms: int
    num_vms: int
    create_ms: int
    bootstrap_ms: int
    # Set when bootstrap is going to fail: the message it fails with.
    bootstrap_failure: str | None = None
    # Set once the slice has failed (bootstrap failure or death): what describe() reports.
    failure: str | None = None
    # Whether the cloud still holds the slice's VMs/nodes (what costs money).
    resources_live: bool = True
    workers: list[FakeWorkerHandle] = field(default_factory=list)
    describe_calls: int = 0


class FakeSliceHandle(SliceRecordView):
    def __init__(self, platform: FakeCloudPlatform, record: _SliceRecord):
        self._platform = platform
        self._record = record

    @property
    def zone(self) -> str:
        return self._record.zone

    @property
    def created_at(self) -> Timestamp:
        return Timestamp(self._record.created_at_ms)

    def describe(self) -> SliceStatus:
        return self._platform._describe(self._record.slice_id)

    def terminate(self) -> None:
        self._platform._terminate(self._record.slice_id)

    def __repr__(self) -> str:
        return f"FakeSliceHandle({self.slice_id!r}, zone={self.zone!r})"


class FakeCloudPlatform:
    def __init__(
        self,
        clock: FakeClock,
        label_prefix: str = "iris",
        create_ms: int = 30_000,
        bootstrap_ms: int = 60_000,
        default_zone: str = "",
    ):
        self.clock = clock
        self.label_prefix = label_prefix
        self.labels = Labels(label_prefix)
        self.create_ms = create_ms
        self.bootstrap_ms = bootstrap_ms
        self.default_zone = default_zone
        self.unavailable = False
        self.shut_down = False
        self._lock = threading.RLock()
        self._slices: dict[str, _SliceRecord] = {}
        self._vms: dict[str, FakeVmHandle] = {}
        self._counter = 0
        # Injected failures.
        self._quota: dict[str, str] = {}  # zone -> message
        self._create_failures: list[str] = []
        self._bootstrap_failures: list[str] = []
        self._list_failures = 0
        # What was asked of the platform, for assertions.
        self.create_requests: list[tuple[str, config_pb2.SliceConfig]] = []  # (zone, config) that got a slice
        self.refused_requests: list[tuple[str, str]] = []  # (zone, why)
        self.terminate_calls: list[str] = []

    # ------------------------------------------------------------ failure injection

    def exhaust_quota(self, zone: str, message: str | None = None) -> None:
        self._quota[zone] = message or f"quota exhausted for TPUs in {zone or 'the default zone'}"

    def restore_quota(self, zone: str) -> None:
        self._quota.pop(zone, None)

    def fail_next_create(self, message: str = "the cloud refused the request", count: int = 1) -> None:
        self._create_failures.extend([message] * count)

    def fail_next_bootstrap(
        self, message: str = "bootstrap failed: worker image not found", count: int = 1
    ) -> None:
        self._bootstrap_failures.extend([message] * count)

    def fail_next_list(self, count: int = 1) -> None:
        """The next `count` list_slices calls raise PlatformUnavailableError (an API blip)."""
        self._list_failures += count

    def kill_slice(
        self, slice_id: str, message: str = "the slice was preempted", vanish: bool = False
    ) -> None:
        """A live slice dies. It reports FAILED (its remains exist until terminated), or with
        `vanish` disappears without a trace, as a slice deleted out of band does."""
        with self._lock:
            record = self._slices[slice_id]
            if vanish:
                record.resources_live = False
                del self._slices[slice_id]
            else:
                record.failure = message

    def add_existing_slice(
        self,
        scale_group: str,
        zone: str = "",
        num_vms: int = 1,
        *,
        ready: bool = True,
        managed: bool = True,
        extra_labels: dict[str, str] | None = None,
        name_prefix: str | None = None,
    ) -> FakeSliceHandle:
        """A slice that was created before the controller started (by an earlier controller)."""
        labels = dict(extra_labels or {})
        if managed:
            labels[self.labels.managed] = "true"
        labels[self.labels.scale_group] = scale_group
        age = self.create_ms + self.bootstrap_ms if ready else 0
        record = self._new_record(
            name_prefix or f"{self.label_prefix}-{scale_group}", zone, labels, num_vms, self.clock() - age
        )
        return FakeSliceHandle(self, record)

    # ------------------------------------------------------------ observation

    def live_resources(self) -> list[str]:
        """Every slice and worker the cloud still holds, sorted."""
        with self._lock:
            found = []
            for record in self._slices.values():
                if record.resources_live:
                    found.append(record.slice_id)
                    found.extend(w.worker_id for w in record.workers)
            return sorted(found)

    def live_slice_ids(self) -> list[str]:
        with self._lock:
            return sorted(r.slice_id for r in self._slices.values() if r.resources_live)

    def slice_zone(self, slice_id: str) -> str:
        return self._slices[slice_id].zone

    def handle(self, slice_id: str) -> FakeSliceHandle:
        with self._lock:
            record = self._slices.get(slice_id)
            if record is None:
                raise ResourceNotFoundError(f"fake slice {slice_id} does not exist")
            return FakeSliceHandle(self, record)

    # ------------------------------------------------------------ Platform: slices

    def _check_available(self) -> None:
        if self.unavailable:
            raise PlatformUnavailableError("the fake cloud API is unavailable; retry later")

    @staticmethod
    def _zone_of(config: config_pb2.SliceConfig) -> str:
        which = config.WhichOneof("platform")
        if which == "gcp":
            return config.gcp.zone
        if which == "coreweave":
            return config.coreweave.region
        return ""

    def _new_record(
        self, prefix: str, zone: str, labels: dict[str, str], num_vms: int, created_at_ms: int
    ) -> _SliceRecord:
        with self._lock:
            self._counter += 1
            slice_id = f"{prefix}-{self._counter}"
            labels = {**labels, self.labels.slice_id: slice_id}
            record = _SliceRecord(
                slice_id=slice_id,
                zone=zone,
                scale_group=labels.get(self.labels.scale_group, ""),
                labels=labels,
                created_at_ms=created_at_ms,
                num_vms=max(1, num_vms),
                create_ms=self.create_ms,
                bootstrap_ms=self.bootstrap_ms,
            )
            record.workers = [FakeWorkerHandle(f"{slice_id}-{i}", i, record) for i in range(record.num_vms)]
            self._slices[slice_id] = record
            return record

    def create_slice(
        self, config: config_pb2.SliceConfig, bootstrap_config: config_pb2.BootstrapConfig
    ) -> FakeSliceHandle:
        self._check_available()
        zone = self._zone_of(config) or self.default_zone
        with self._lock:
            if zone in self._quota:
                self.refused_requests.append((zone, "quota"))
                raise QuotaExhaustedError(self._quota[zone], zone=zone)
            if self._create_failures:
                message = self._create_failures.pop(0)
                self.refused_requests.append((zone, message))
                raise PlatformError(message)
            prefix = config.name_prefix or self.label_prefix
            record = self._new_record(prefix, zone, dict(config.labels), config.num_vms, self.clock())
            if self._bootstrap_failures:
                record.bootstrap_failure = self._bootstrap_failures.pop(0)
            stored = config_pb2.SliceConfig()
            stored.CopyFrom(config)
            self.create_requests.append((zone, stored))
            return FakeSliceHandle(self, record)

    def _describe(self, slice_id: str) -> SliceStatus:
        self._check_available()
        with self._lock:
            record = self._slices.get(slice_id)
            if record is None:
                raise ResourceNotFoundError(f"fake slice {slice_id} does not exist")
            record.describe_calls += 1
            n = record.num_vms
            if record.failure is not None:
                return SliceStatus(CloudSliceState.FAILED, n, list(record.workers), message=record.failure)
            elapsed = self.clock() - record.created_at_ms
            if elapsed < record.create_ms:
                return SliceStatus(CloudSliceState.CREATING, n, [], message="provisioning")
            if elapsed < record.create_ms + record.bootstrap_ms:
                workers = list(record.workers)
                return SliceStatus(CloudSliceState.BOOTSTRAPPING, n, workers, message="bootstrapping")
            if record.bootstrap_failure is not None:
                # The platform cleans up after a failed bootstrap itself and keeps reporting why.
                record.failure = record.bootstrap_failure
                record.resources_live = False
                return SliceStatus(CloudSliceState.FAILED, n, list(record.workers), message=record.failure)
            return SliceStatus(CloudSliceState.READY, n, list(record.workers))

    def _terminate(self, slice_id: str) -> None:
        self._check_available()
        with self._lock:
            self.terminate_calls.append(slice_id)
            record = self._slices.pop(slice_id, None)
            if record is None or not record.resources_live:
                # Like a cloud's 404: nothing left to delete (already cleaned up or never existed).
                raise ResourceNotFoundError(f"fake slice {slice_id} does not exist")
            record.resources_live = False

    def list_slices(self, zones: list[str], labels: dict[str, str] | None = None) -> list[FakeSliceHandle]:
        self._check_available()
        if self._list_failures:
            self._list_failures -= 1
            raise PlatformUnavailableError("the fake cloud could not list slices; retry later")
        wanted = labels or {}
        any_zone = not zones or "" in zones
        with self._lock:
            return [
                FakeSliceHandle(self, record)
                for _, record in sorted(self._slices.items())
                if record.resources_live
                and (any_zone or record.zone in zones)
                and all(record.labels.get(k) == v for k, v in wanted.items())
            ]

    # ------------------------------------------------------------ Platform: VMs and the rest

    def create_vm(self, config: config_pb2.VmConfig) -> FakeVmHandle:
        self._check_available()
        name = config.name or f"{self.label_prefix}-controller"
        vm = FakeVmHandle(self, name, dict(config.labels), dict(config.metadata))
        self._vms[name] = vm
        return vm

    def list_vms(self, zones: list[str], labels: dict[str, str] | None = None) -> list[FakeVmHandle]:
        self._check_available()
        wanted = labels or {}
        return [vm for vm in self._vms.values() if all(vm.labels.get(k) == v for k, v in wanted.items())]

    def tunnel(self, address: str, local_port: int | None = None) -> AbstractContextManager[str]:
        return nullcontext(address)

    def discover_controller(self, config: config_pb2.IrisClusterConfig) -> str | None:
        for vm in self.list_vms([], {self.labels.controller: "true"}):
            address = vm.metadata.get(f"iris-controller-address-{self.label_prefix}")
            if address:
                return address
        return None

    def worker_logs(self, worker_id: str, tail_lines: int) -> str:
        with self._lock:
            for record in self._slices.values():
                for worker in record.workers:
                    if worker.worker_id == worker_id:
                        return "\n".join(f"{worker_id}: line {i}" for i in range(tail_lines))
        raise ResourceNotFoundError(f"no fake worker named {worker_id}")

    def vm_log(
        self, vm_id: str, kind: VmLogKind, tail_lines: int, on_line: Callable[[str], None], follow: bool = False
    ) -> None:
        """A fake VM's log is its worker log's lines, labelled with the kind; it never grows, so
        `follow` ends with the tail."""
        for line in self.worker_logs(vm_id, tail_lines).splitlines():
            on_line(f"{kind.value}: {line}")

    def shutdown(self) -> None:
        self.shut_down = True
