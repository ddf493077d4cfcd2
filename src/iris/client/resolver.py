"""ClusterResolver: actors found through the controller's endpoint registry.

An `ActorServer` inside a task registers each actor as the endpoint `<job id>/<actor name>`,
tagged as an actor. A namespace is a root job: `/train` sees the actors of `/train` and of every
job below it, which is how a task's sibling and child jobs find it. Without a namespace the
resolver sees every running job. Endpoints of finished jobs are never listed (the registry's
visibility rule), so a finished actor simply disappears.
"""

from __future__ import annotations

from iris.actor.resolver import ResolvedEndpoint, ResolverError, actor_name_of, normalize_url
from iris.client.client import ControllerUnavailableError, IrisClient
from iris.cluster.types import JobName
from iris.rpc import cluster_pb2 as pb


def namespace_of(job_id: str) -> str:
    """A job's actor namespace: its root job."""
    return f"/{JobName.parse(job_id).parts[0]}"


class ClusterResolver:
    def __init__(self, controller_url: str, namespace: str | None = None):
        self._client = IrisClient.remote(normalize_url(controller_url))
        self._namespace = namespace_of(namespace) if namespace else None

    @property
    def namespace(self) -> str:
        return self._namespace or "(every job)"

    def actor_endpoints(self) -> list[tuple[str, pb.Endpoint]]:
        """(actor name, endpoint) for every actor in the namespace, ordered by endpoint name."""
        prefix = f"{self._namespace}/" if self._namespace else ""
        try:
            endpoints = self._client.list_endpoints(prefix)
        except ControllerUnavailableError as exc:
            raise ResolverError(str(exc)) from None
        found = []
        for endpoint in endpoints:
            name = actor_name_of(endpoint)
            if name is not None:
                found.append((name, endpoint))
        return found

    def resolve(self, name: str) -> list[ResolvedEndpoint]:
        return [
            ResolvedEndpoint(url=normalize_url(e.address), actor_id=e.endpoint_id, metadata=dict(e.metadata))
            for actor, e in self.actor_endpoints()
            if actor == name
        ]

    def known_names(self) -> list[str]:
        return sorted({actor for actor, _ in self.actor_endpoints()})

    def close(self) -> None:
        self._client.close()
