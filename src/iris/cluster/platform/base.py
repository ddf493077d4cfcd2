"""The platform layer's contract: where slices of workers come from.

A `Platform` creates slices (the atomic unit of capacity: a TPU pod, a group of GPU nodes, a set
of local worker processes) and standalone VMs (the controller). `create_slice` returns at once;
the platform provisions and bootstraps in the background, cleans up after itself on failure, and
reports progress through `SliceHandle.describe()`: CREATING -> BOOTSTRAPPING -> READY, or FAILED.
The autoscaler only observes; it never drives a bootstrap.

Status types here are the cloud's view and are never persisted or sent over RPC as such. Errors
are typed so callers can react (fall back to another zone on quota, back off when the platform is
down) and each carries a reason a user can act on.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from iris.cluster.types import AttributeValue
from iris.rpc import config_pb2
from iris.time import Duration, Timestamp


class CloudSliceState(StrEnum):
    CREATING = "CREATING"
    BOOTSTRAPPING = "BOOTSTRAPPING"
    READY = "READY"
    REPAIRING = "REPAIRING"
    DELETING = "DELETING"
    FAILED = "FAILED"
    UNKNOWN = "UNKNOWN"


class VmLogKind(StrEnum):
    """Which of a VM's logs: what bringing it up printed, or its daemon's own output."""

    BOOTSTRAP = "bootstrap"
    DAEMON = "daemon"


class CloudWorkerState(StrEnum):
    RUNNING = "RUNNING"
    STOPPED = "STOPPED"
    TERMINATED = "TERMINATED"
    UNKNOWN = "UNKNOWN"


@dataclass
class CommandResult:
    returncode: int
    stdout: str
    stderr: str


@dataclass
class WorkerStatus:
    state: CloudWorkerState


@runtime_checkable
class RemoteWorkerHandle(Protocol):
    """One worker of a slice: a TPU VM, a Pod, a local process. Slices are terminated as a whole,
    so a worker handle has no terminate."""

    @property
    def worker_id(self) -> str: ...

    @property
    def internal_address(self) -> str: ...

    @property
    def external_address(self) -> str | None: ...

    def status(self) -> WorkerStatus: ...

    def run_command(
        self, command: str, timeout: Duration | None = None, on_line: Callable[[str], None] | None = None
    ) -> CommandResult: ...

    def reboot(self) -> None: ...


@runtime_checkable
class StandaloneWorkerHandle(RemoteWorkerHandle, Protocol):
    """A VM created on its own (the controller's): it can be terminated and tagged for discovery."""

    def terminate(self) -> None: ...

    def set_labels(self, labels: dict[str, str]) -> None: ...

    def set_metadata(self, metadata: dict[str, str]) -> None: ...


@runtime_checkable
class RestartableInPlace(Protocol):
    """A controller VM whose terminate() deletes the machine and with it the controller's state
    directory (a cloud VM): restarting the controller process on the same VM instead keeps its
    SQLite state, so running jobs and their history survive a restart."""

    def restart_in_place(self) -> None:
        """Restart the controller daemon on this VM with the current config; returns once it answers."""
        ...


@runtime_checkable
class RedeployableInPlace(Protocol):
    """A slice whose machines outlive its worker daemons (a TPU node): `iris cluster reload` starts
    the workers again on the same machines, with the current config and image, instead of
    replacing the slice."""

    def redeploy(self, bootstrap_config: config_pb2.BootstrapConfig) -> None:
        """Restart the worker daemon on every host of this slice with `bootstrap_config`; returns
        once each answers, PlatformError naming the hosts that did not."""
        ...


@dataclass
class SliceStatus:
    state: CloudSliceState
    worker_count: int
    workers: list[RemoteWorkerHandle] = field(default_factory=list)
    # Why the slice is FAILED (or what it is waiting on), in words a user can act on.
    message: str = ""
    # FAILED because its zone ran out of quota or capacity after accepting the request: the
    # autoscaler blocks the zone as if create_slice had raised QuotaExhaustedError.
    quota_exhausted: bool = False


@runtime_checkable
class SliceHandle(Protocol):
    @property
    def slice_id(self) -> str: ...

    @property
    def zone(self) -> str: ...

    @property
    def scale_group(self) -> str: ...

    @property
    def labels(self) -> dict[str, str]: ...

    @property
    def created_at(self) -> Timestamp: ...

    def describe(self) -> SliceStatus: ...

    def terminate(self) -> None: ...


class SliceRecordView:
    """The identity of a slice as a platform's handle reads it off the record the platform keeps
    (`_record`: slice_id, scale_group, labels, created_at); each handle adds its zone, describe()
    and terminate()."""

    _record: Any

    @property
    def slice_id(self) -> str:
        return self._record.slice_id

    @property
    def scale_group(self) -> str:
        return self._record.scale_group

    @property
    def labels(self) -> dict[str, str]:
        return dict(self._record.labels)

    @property
    def created_at(self) -> Timestamp:
        return self._record.created_at


@runtime_checkable
class Platform(Protocol):
    def create_vm(self, config: config_pb2.VmConfig) -> StandaloneWorkerHandle: ...

    def create_slice(
        self, config: config_pb2.SliceConfig, bootstrap_config: config_pb2.BootstrapConfig
    ) -> SliceHandle:
        """Start creating a slice and return its handle at once (CREATING).

        Raises QuotaExhaustedError synchronously when the request is refused for quota; every
        later failure shows up as FAILED on the handle, with the platform's resources cleaned up.
        """
        ...

    def list_slices(self, zones: list[str], labels: dict[str, str] | None = None) -> list[SliceHandle]: ...

    def list_vms(self, zones: list[str], labels: dict[str, str] | None = None) -> list[StandaloneWorkerHandle]: ...

    def tunnel(self, address: str, local_port: int | None = None) -> AbstractContextManager[str]: ...

    def discover_controller(self, config: config_pb2.IrisClusterConfig) -> str | None:
        """The controller's URL if one is running for this cluster, else None."""
        ...

    def worker_logs(self, worker_id: str, tail_lines: int) -> str:
        """The last lines of a worker's own log (bootstrap and daemon output)."""
        ...

    def vm_log(
        self,
        vm_id: str,
        kind: VmLogKind,
        tail_lines: int,
        on_line: Callable[[str], None],
        follow: bool = False,
    ) -> None:
        """Pass a VM's log to `on_line`, line by line: the controller VM (by its name) or a worker
        (by its id). The last `tail_lines`, then with `follow` each new line until interrupted.
        ResourceNotFoundError when the platform knows no such VM."""
        ...

    def shutdown(self) -> None:
        """Release what the Platform object holds (threads, connections); cloud resources stay."""
        ...


# ---------------------------------------------------------------- providers


@runtime_checkable
class PlatformProvider(Protocol):
    """Everything shared code needs to know about one provider, so that it never branches on
    platform names. Each provider module defines one; `factory.PROVIDERS` maps the config's
    platform oneof to it."""

    @property
    def name(self) -> str:
        """The provider's key in every platform oneof of config.proto (`platform`, `slice_template`,
        `controller`)."""
        ...

    @property
    def zone_field(self) -> str | None:
        """The slice template field (relative to the provider's section) that names a slice's
        zone, or None when the provider has no zones."""
        ...

    def apply_defaults(self, config: config_pb2.IrisClusterConfig) -> None:
        """Fill the provider's own defaults into a config being resolved (its platform and
        controller sections, and shared settings whose default differs on this provider)."""
        ...

    def config_problems(self, config: config_pb2.IrisClusterConfig) -> list[tuple[str, str]]:
        """(key path, problem) for each problem in the provider's sections of a resolved config:
        its slice templates and, when the controller is the provider's, the controller section."""
        ...

    def worker_attributes(self, template: config_pb2.SliceConfig) -> dict[str, AttributeValue]:
        """Attributes a worker of a slice made from `template` reports beyond scale group, zone and
        device, so the autoscaler can route constrained demand before the worker exists."""
        ...

    def create(
        self, config: config_pb2.IrisClusterConfig, state_dir: Path, config_path: str | None
    ) -> Platform:
        """The provider's Platform for a resolved config; PlatformError when it cannot run here."""
        ...


def template_zone(provider: PlatformProvider, template: config_pb2.SliceConfig) -> str:
    """The zone a slice template names in the provider's section, or ""."""
    if provider.zone_field is None:
        return ""
    return getattr(getattr(template, provider.name), provider.zone_field)


# ---------------------------------------------------------------- errors


class PlatformError(RuntimeError):
    """A platform operation failed; the message says why and what to do."""


class QuotaExhaustedError(PlatformError):
    def __init__(self, message: str, zone: str = ""):
        super().__init__(message)
        self.zone = zone


class ResourceNotFoundError(PlatformError):
    pass


class PlatformUnavailableError(PlatformError):
    """The platform cannot be reached or refuses service for now; retry later."""


# ---------------------------------------------------------------- labels


class IllegalSliceTransition(PlatformError):
    """A move a platform's slice transition table does not allow: a bug in the platform, never a
    user error."""


def move_slice(
    table: Mapping[CloudSliceState, Mapping[CloudSliceState, str]],
    record: Any,
    to: CloudSliceState,
    detail: str = "",
    ignored_from: Collection[CloudSliceState] = (),
) -> bool:
    """The one path by which a platform's slice record (state, message, history) changes state:
    check the move against the platform's `table` of legal moves, then record the new state, the
    time and the detail (or the edge's reason). A move out of a state in `ignored_from` is dropped
    with False (the slice ended meanwhile and a bring-up thread learns it late); any other move
    the table lacks raises IllegalSliceTransition. Callers hold their platform's lock."""
    allowed = table[record.state]
    if to not in allowed:
        if record.state in ignored_from:
            return False
        raise IllegalSliceTransition(f"slice {record.slice_id} cannot go from {record.state} to {to}")
    record.state = to
    record.message = detail
    record.history.append((to, Timestamp.now(), detail or allowed[to]))
    return True


@dataclass(frozen=True)
class Labels:
    """The label keys Iris puts on what it creates, all under the cluster's prefix."""

    prefix: str

    @property
    def managed(self) -> str:
        return f"{self.prefix}-managed"

    @property
    def scale_group(self) -> str:
        return f"{self.prefix}-scale-group"

    @property
    def slice_id(self) -> str:
        return f"{self.prefix}-slice-id"

    @property
    def controller(self) -> str:
        return f"iris-controller-{self.prefix}"


def prepare_slice_config(
    template: config_pb2.SliceConfig,
    group_name: str,
    label_prefix: str,
    zone: str = "",
    provider: PlatformProvider | None = None,
) -> config_pb2.SliceConfig:
    """Stamp a scale group's slice template with Iris's labels, a name prefix and the chosen zone
    (written where `provider` keeps a slice's zone)."""
    config = config_pb2.SliceConfig()
    config.CopyFrom(template)
    labels = Labels(label_prefix)
    config.name_prefix = f"{label_prefix}-{group_name}"
    config.labels[labels.managed] = "true"
    config.labels[labels.scale_group] = group_name
    if zone and provider is not None and provider.zone_field is not None:
        setattr(getattr(config, provider.name), provider.zone_field, zone)
    return config
