"""Finding actors by name: a resolver maps an actor name to the endpoints that serve it.

Three sources: `FixedResolver` (a static table, for tests and fixed deployments), `GcsResolver`
(GCP instance and project metadata `iris_actor_<name>`, read from the GCE metadata server) and
`iris.client.resolver.ClusterResolver` (the controller's endpoint registry). Clients re-resolve
whenever an endpoint stops answering, so a resolver is asked again rather than cached forever.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

import httpx

from iris.rpc import cluster_pb2 as pb

GCS_METADATA_PREFIX = "iris_actor_"
# The variable Google's own client libraries read to find the metadata server.
METADATA_HOST_ENV = "GCE_METADATA_HOST"
DEFAULT_METADATA_HOST = "metadata.google.internal"
METADATA_TIMEOUT_S = 5.0
# Metadata keys an ActorServer puts on the controller endpoints it registers.
ACTOR_MARKER_KEY = "iris.actor"
ACTOR_TASK_KEY = "iris.task_id"
ACTOR_ATTEMPT_KEY = "iris.attempt_id"


@dataclass(frozen=True)
class ResolvedEndpoint:
    """One server of an actor: where to call it, and an id that stays the same while it lives."""

    url: str
    actor_id: str
    metadata: Mapping[str, str] = field(default_factory=dict)


class ResolverError(RuntimeError):
    """The resolver's source could not be read (controller or metadata server unreachable)."""


class Resolver(Protocol):
    @property
    def namespace(self) -> str:
        """What the names are looked up in, for messages ("/train", "gcp:my-project")."""
        ...

    def resolve(self, name: str) -> list[ResolvedEndpoint]:
        """Every live endpoint of actor `name`, in a stable order; empty when there is none."""
        ...

    def known_names(self) -> list[str]:
        """The actor names this resolver can see, sorted; used to explain a failed lookup."""
        ...


def actor_name_of(endpoint: pb.Endpoint) -> str | None:
    """The actor name of a controller endpoint an ActorServer registered (the endpoint name minus
    its job prefix); None for any other kind of endpoint."""
    if endpoint.metadata.get(ACTOR_MARKER_KEY) != "1":
        return None
    return endpoint.name.removeprefix(endpoint.job_id + "/")


def normalize_url(address: str) -> str:
    address = address.strip().rstrip("/")
    return address if "://" in address else f"http://{address}"


class FixedResolver:
    """A static table: `FixedResolver({"calc": "http://10.0.0.5:9000"})`; a list of URLs serves as
    several endpoints of one actor."""

    def __init__(self, endpoints: Mapping[str, str | Sequence[str]], namespace: str = "fixed"):
        self._namespace = namespace
        self._table: dict[str, list[str]] = {
            name: [normalize_url(u) for u in ([urls] if isinstance(urls, str) else urls)]
            for name, urls in endpoints.items()
        }

    @property
    def namespace(self) -> str:
        return self._namespace

    def resolve(self, name: str) -> list[ResolvedEndpoint]:
        return [ResolvedEndpoint(url=url, actor_id=f"{name}@{url}") for url in self._table.get(name, [])]

    def known_names(self) -> list[str]:
        return sorted(self._table)


def parse_metadata_endpoints(attributes: Mapping[str, str]) -> dict[str, list[str]]:
    """`iris_actor_<name>` attributes to {name: [url, ...]}; a value lists URLs separated by commas
    or whitespace (one attribute can name several replicas)."""
    endpoints: dict[str, list[str]] = {}
    for key, value in attributes.items():
        if not key.startswith(GCS_METADATA_PREFIX) or key == GCS_METADATA_PREFIX:
            continue
        urls = [normalize_url(part) for part in value.replace(",", " ").split()]
        if urls:
            endpoints.setdefault(key.removeprefix(GCS_METADATA_PREFIX), []).extend(urls)
    return endpoints


class GcsResolver:
    """Actors published as GCP metadata `iris_actor_<name>` = URL(s).

    Reads both this VM's instance attributes and the project's common attributes (visible to every
    VM of the project) from the GCE metadata server, with the `Metadata-Flavor: Google` header the
    server requires. `GCE_METADATA_HOST` points it elsewhere, as it does Google's libraries.
    """

    def __init__(self, metadata_host: str | None = None, timeout: float = METADATA_TIMEOUT_S):
        host = metadata_host or os.environ.get(METADATA_HOST_ENV) or DEFAULT_METADATA_HOST
        self._base = f"{normalize_url(host)}/computeMetadata/v1"
        self._timeout = timeout

    @property
    def namespace(self) -> str:
        return f"gcp metadata at {self._base.removesuffix('/computeMetadata/v1')}"

    def _attributes(self, scope: str) -> dict[str, str]:
        url = f"{self._base}/{scope}/attributes/"
        try:
            response = httpx.get(
                url,
                params={"recursive": "true"},
                headers={"Metadata-Flavor": "Google"},
                timeout=self._timeout,
            )
        except httpx.HTTPError as exc:
            raise ResolverError(f"cannot read GCP metadata at {url}: {exc}") from None
        if response.status_code == 404:
            return {}
        if response.status_code != 200:
            raise ResolverError(
                f"GCP metadata at {url} answered {response.status_code}: {response.text[:200]}"
            )
        try:
            attributes = json.loads(response.text)
        except json.JSONDecodeError:
            raise ResolverError(f"GCP metadata at {url} did not answer JSON: {response.text[:200]}") from None
        return {str(k): str(v) for k, v in attributes.items()}

    def _endpoints(self) -> dict[str, list[str]]:
        merged: dict[str, list[str]] = {}
        # Instance attributes first: a VM's own publication wins the round-robin start.
        for scope in ("instance", "project"):
            for name, urls in parse_metadata_endpoints(self._attributes(scope)).items():
                merged.setdefault(name, []).extend(u for u in urls if u not in merged.get(name, []))
        return merged

    def resolve(self, name: str) -> list[ResolvedEndpoint]:
        return [
            ResolvedEndpoint(url=url, actor_id=f"{name}@{url}") for url in self._endpoints().get(name, [])
        ]

    def known_names(self) -> list[str]:
        return sorted(self._endpoints())
