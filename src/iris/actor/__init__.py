"""Actors: Python objects served inside jobs, found by name and called like local objects.

`from iris.actor import ActorServer, ActorClient, ActorPool, FixedResolver`; the cluster's own
resolver is `iris.client.resolver.ClusterResolver`, and inside a task `iris_ctx().resolver`.
"""

from iris.actor.client import (
    ActorClient,
    ActorError,
    ActorNotFoundError,
    ActorRemoteError,
    ActorUnavailableError,
)
from iris.actor.pool import ActorPool, BroadcastResult
from iris.actor.resolver import FixedResolver, GcsResolver, ResolvedEndpoint, Resolver, ResolverError
from iris.actor.server import ActorServer

__all__ = [
    "ActorClient",
    "ActorError",
    "ActorNotFoundError",
    "ActorPool",
    "ActorRemoteError",
    "ActorServer",
    "ActorUnavailableError",
    "BroadcastResult",
    "FixedResolver",
    "GcsResolver",
    "ResolvedEndpoint",
    "Resolver",
    "ResolverError",
]
