"""FakeGcp: the TPU and Compute APIs on loopback over a pool of real test hosts (see __init__)."""

from __future__ import annotations

import os
import re
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Self

from fakes.gcp.compute import ComputeApi, Instance
from fakes.gcp.errors import ApiError, permission_denied, unavailable
from fakes.gcp.hosts import HostPool, Machine
from fakes.gcp.operations import Operations
from fakes.gcp.server import make_server, resolve, serve_in_thread
from fakes.gcp.tpu import Node, TpuApi

DEFAULT_PROJECT = "iris-test"
DEFAULT_ZONES = ("europe-west4-a", "europe-west4-b", "us-central2-b", "us-west4-a")
DEFAULT_OPERATION_DELAY_S = 0.3
FAILURE_KINDS = ("permission_denied", "unavailable")


@dataclass
class ZoneLimits:
    """A zone's limits; None is unlimited. Quota refuses the create (HTTP 429 / 403); capacity
    accepts it and fails its operation (a stockout)."""

    quota_tpu_chips: int | None = None
    quota_instances: int | None = None
    capacity_tpu_chips: int | None = None
    capacity_instances: int | None = None


@dataclass
class _Failure:
    kind: str
    method: str | None
    path: re.Pattern[str] | None
    remaining: int


class FakeGcp:
    def __init__(
        self,
        machines: Sequence[Machine],
        project: str = DEFAULT_PROJECT,
        zones: Sequence[str] = DEFAULT_ZONES,
        operation_delay: float = DEFAULT_OPERATION_DELAY_S,
    ) -> None:
        self.project = project
        self.zones = tuple(zones)
        self.operation_delay = operation_delay
        self.calls: list[tuple[str, str]] = []
        self._lock = threading.Condition(threading.RLock())
        self.operations = Operations(self._lock)
        self.pool = HostPool(machines)
        self.tpu = TpuApi(self)
        self.compute = ComputeApi(self)
        self._limits: dict[str, ZoneLimits] = {}
        self._failures: list[_Failure] = []
        self._server = make_server(self)
        host, port = self._server.server_address[:2]
        self.url = f"http://{host}:{port}"
        self._thread: threading.Thread | None = None

    # -- lifecycle ------------------------------------------------------------------------------

    def start(self) -> Self:
        self._thread = serve_in_thread(self._server)
        return self

    def stop(self) -> None:
        """Stop serving and give every host back, wiped, with its original keys."""
        self._server.shutdown()
        self._server.server_close()
        with self._lock:
            for node in self.tpu.nodes.values():
                self.pool.give_back(node.hosts)
            for instance in self.compute.instances.values():
                if instance.host is not None:
                    self.pool.give_back([instance.host])
            self.tpu.nodes.clear()
            self.compute.instances.clear()
            self.pool.restore()

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def gcloud_env(self, home: Path) -> dict[str, str]:
        """The environment for a real gcloud talking to this fake, with `home` as its HOME (where
        its SSH key and known hosts go) and `home`/gcloud as its configuration directory. It is
        this process's environment without any CLOUDSDK_* setting it had, plus the fake's."""
        home.mkdir(parents=True, exist_ok=True)
        env = {key: value for key, value in os.environ.items() if not key.startswith("CLOUDSDK_")}
        env.update(
            HOME=str(home),
            CLOUDSDK_CONFIG=str(home / "gcloud"),
            CLOUDSDK_AUTH_ACCESS_TOKEN="fake-gcp-token",
            CLOUDSDK_CORE_PROJECT=self.project,
            CLOUDSDK_CORE_DISABLE_PROMPTS="1",
            CLOUDSDK_API_ENDPOINT_OVERRIDES_TPU=f"{self.url}/",
            CLOUDSDK_API_ENDPOINT_OVERRIDES_COMPUTE=f"{self.url}/",
            # `--internal-ip` would otherwise first ask the VM for its metadata server.
            CLOUDSDK_SSH_VERIFY_INTERNAL_IP="false",
            # Nothing may leave this machine: no usage reports, update checks or metadata probes.
            CLOUDSDK_CORE_DISABLE_USAGE_REPORTING="true",
            CLOUDSDK_COMPONENT_MANAGER_DISABLE_UPDATE_CHECK="true",
            CLOUDSDK_SURVEY_DISABLE_PROMPTS="true",
            CLOUDSDK_CORE_CHECK_GCE_METADATA="false",
        )
        return env

    # -- requests -------------------------------------------------------------------------------

    def handle(self, method: str, path: str, query: dict[str, str], body: Any) -> dict[str, Any]:
        """Serve one request (called by the HTTP server's threads)."""
        with self._lock:
            self.calls.append((method, path))
            route, handler_name, permission, arguments = resolve(method, path)
            project, *rest = arguments
            self._inject_failure(method, path, permission, route.api)
            if project != self.project:
                raise permission_denied(permission, f"projects/{project}")
            if route.api == "tpu" and rest and rest[0] not in (*self.zones, "-"):
                raise ApiError(
                    404,
                    f"Location projects/{project}/locations/{rest[0]} is not found or access is unauthorized.",
                )
            self.operations.advance()
            api = self.tpu if route.api == "tpu" else self.compute
            return getattr(api, handler_name)(*rest, query, body)

    def _inject_failure(self, method: str, path: str, permission: str, api: str) -> None:
        for failure in self._failures:
            if failure.method not in (None, method) or (failure.path and not failure.path.search(path)):
                continue
            failure.remaining -= 1
            if failure.remaining <= 0:
                self._failures.remove(failure)
            if failure.kind == "unavailable":
                raise unavailable()
            resource = path.split("/v2/", 1)[-1].split("/compute/v1/", 1)[-1]
            if api == "compute":
                raise ApiError(403, f"Required '{permission}' permission for '{resource}'")
            raise permission_denied(permission, resource)

    def authorize_all(self) -> None:
        """Rewrite every taken host's keys (the project's common metadata changed)."""
        for node in self.tpu.nodes.values():
            self.tpu.authorize(node)
        for instance in self.compute.instances.values():
            self.compute.authorize(instance)

    def limits(self, zone: str) -> ZoneLimits:
        return self._limits.get(zone, ZoneLimits())

    # -- test controls --------------------------------------------------------------------------

    def set_quota(self, zone: str, tpu_chips: int | None = None, instances: int | None = None) -> None:
        """The zone's quota (replacing the previous one; None is unlimited): a TPU create that would
        bring the zone's chips (all nodes, whatever their state) over `tpu_chips` is refused with
        429 RESOURCE_EXHAUSTED, an instance insert over `instances` VMs with 403 quotaExceeded."""
        with self._lock:
            limits = self._limits.setdefault(zone, ZoneLimits())
            limits.quota_tpu_chips, limits.quota_instances = tpu_chips, instances

    def set_capacity(self, zone: str, tpu_chips: int | None = None, instances: int | None = None) -> None:
        """The zone's free capacity (None: as many as the host pool holds): a create is accepted,
        and its operation fails with a stockout when the zone's running chips or VMs would exceed it."""
        with self._lock:
            limits = self._limits.setdefault(zone, ZoneLimits())
            limits.capacity_tpu_chips, limits.capacity_instances = tpu_chips, instances

    def fail_next(
        self, kind: str, method: str | None = None, path: str | None = None, times: int = 1
    ) -> None:
        """The next `times` requests matching `method` and the regex `path` (any, when None) fail
        with `kind`: "permission_denied" (403 PERMISSION_DENIED naming the route's IAM
        permission) or "unavailable" (503 UNAVAILABLE)."""
        if kind not in FAILURE_KINDS:
            raise ValueError(f"unknown failure {kind!r}; one of {', '.join(FAILURE_KINDS)}")
        with self._lock:
            self._failures.append(_Failure(kind, method, re.compile(path) if path else None, times))

    def preempt(self, name: str, zone: str | None = None) -> None:
        """Preempt the TPU node (or VM) `name`: it turns PREEMPTED (TERMINATED) and every process
        its hosts run apart from their sshd is killed with SIGKILL; the hosts stay the node's
        (and reachable over SSH, empty) until it is deleted."""
        with self._lock:
            self.operations.advance()
            nodes = [n for n in self.tpu.nodes.values() if n.name == name and zone in (None, n.zone)]
            instances = [
                i for i in self.compute.instances.values() if i.name == name and zone in (None, i.zone)
            ]
            if len(nodes) + len(instances) != 1:
                raise KeyError(f"{len(nodes) + len(instances)} nodes or VMs named {name!r} (zone {zone})")
            if nodes:
                self.tpu.preempt(nodes[0])
            else:
                self.compute.preempt(instances[0])

    def nodes(self) -> list[Node]:
        """Every TPU node, operations that are due applied first."""
        with self._lock:
            self.operations.advance()
            return sorted(self.tpu.nodes.values(), key=lambda n: (n.zone, n.name))

    def node(self, name: str, zone: str | None = None) -> Node:
        found = [n for n in self.nodes() if n.name == name and zone in (None, n.zone)]
        if len(found) != 1:
            raise KeyError(f"{len(found)} TPU nodes named {name!r} (zone {zone})")
        return found[0]

    def instances(self) -> list[Instance]:
        """Every VM, operations that are due applied first."""
        with self._lock:
            self.operations.advance()
            return sorted(self.compute.instances.values(), key=lambda i: (i.zone, i.name))

    def instance(self, name: str, zone: str | None = None) -> Instance:
        found = [i for i in self.instances() if i.name == name and zone in (None, i.zone)]
        if len(found) != 1:
            raise KeyError(f"{len(found)} VMs named {name!r} (zone {zone})")
        return found[0]

    @property
    def free_hosts(self) -> int:
        with self._lock:
            self.operations.advance()
            return self.pool.free_count
