"""ActorPool: every endpoint of one actor name, called round-robin or all at once.

    pool = ActorPool(resolver, "inference")
    pool.predict(x)                      # the next endpoint in turn
    for r in pool.broadcast("reload"):   # every endpoint; one result or error each
        print(r.endpoint.url, r.value if r.ok else r.error)

The pool re-resolves the name at most every `refresh_interval` seconds and at once after an
endpoint failed, so replicas that appear are used and replicas that vanish are dropped.
"""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from connectrpc.errors import ConnectError

from iris.actor.client import (
    DEFAULT_RESOLVE_TIMEOUT_S,
    RETRYABLE_CODES,
    ActorError,
    ActorNotFoundError,
    ActorUnavailableError,
    EndpointConnections,
    build_call,
    call_endpoint,
    not_found_message,
)
from iris.actor.resolver import ResolvedEndpoint, Resolver, ResolverError
from iris.time import Deadline, ExponentialBackoff

DEFAULT_REFRESH_INTERVAL_S = 1.0
MAX_BROADCAST_THREADS = 32


@dataclass(frozen=True)
class BroadcastResult:
    endpoint: ResolvedEndpoint
    value: Any = None
    error: BaseException | None = None

    @property
    def ok(self) -> bool:
        return self.error is None


class ActorPool:
    def __init__(
        self,
        resolver: Resolver,
        name: str,
        resolve_timeout: float = DEFAULT_RESOLVE_TIMEOUT_S,
        call_timeout: float | None = None,
        refresh_interval: float = DEFAULT_REFRESH_INTERVAL_S,
    ):
        self._resolver = resolver
        self._name = name
        self._resolve_timeout = resolve_timeout
        self._refresh_interval = refresh_interval
        self._connections = EndpointConnections(call_timeout)
        self._lock = threading.Lock()
        self._endpoints: list[ResolvedEndpoint] = []
        self._resolved_at = float("-inf")
        self._turn = itertools.count()
        self._broadcast_threads: ThreadPoolExecutor | None = None

    @property
    def name(self) -> str:
        return self._name

    def endpoints(self, refresh: bool = False) -> list[ResolvedEndpoint]:
        """The endpoints as last resolved (at most `refresh_interval` old), or freshly if asked."""
        with self._lock:
            stale = refresh or time.monotonic() - self._resolved_at >= self._refresh_interval
        if stale:
            endpoints = self._resolver.resolve(self._name)
            with self._lock:
                self._endpoints, self._resolved_at = endpoints, time.monotonic()
        with self._lock:
            return list(self._endpoints)

    def __getattr__(self, method: str) -> Callable[..., Any]:
        if method.startswith("_"):
            raise AttributeError(method)
        return lambda *args, **kwargs: self.call(method, *args, **kwargs)

    def call(self, method: str, *args: Any, **kwargs: Any) -> Any:
        """Call `method` on the next endpoint in turn; an endpoint that does not answer is skipped
        (and the name re-resolved) until `resolve_timeout` runs out."""
        request = build_call(self._name, method, args, kwargs)
        deadline = Deadline.from_now(self._resolve_timeout)
        backoff = ExponentialBackoff(0.02, 1.0)
        failed: set[str] = set()
        ever_resolved = False
        last_problem = ""
        refresh = False
        while True:
            try:
                endpoints = self.endpoints(refresh)
            except ResolverError as exc:
                endpoints, last_problem = [], str(exc)
            ever_resolved = ever_resolved or bool(endpoints)
            candidates = [e for e in endpoints if e.url not in failed]
            if candidates:
                endpoint = candidates[next(self._turn) % len(candidates)]
                try:
                    return call_endpoint(self._connections, endpoint, request)
                except ConnectError as exc:
                    if exc.code not in RETRYABLE_CODES:
                        raise ActorError(
                            f"call to actor {self._name!r} at {endpoint.url} failed "
                            f"({exc.code.name.lower()}): {exc.message}"
                        ) from None
                    last_problem = f"{endpoint.url}: {exc.message}"
                    failed.add(endpoint.url)
                    self._connections.forget(endpoint.url)
                    refresh = True
                    continue
            if deadline.expired():
                if not ever_resolved:
                    raise ActorNotFoundError(not_found_message(self._resolver, self._name))
                raise ActorUnavailableError(
                    f"no endpoint of actor {self._name!r} in namespace {self._resolver.namespace!r} answered "
                    f"within {self._resolve_timeout:g}s; last problem: {last_problem}"
                )
            time.sleep(min(backoff.next_delay(), deadline.remaining_seconds()))
            failed.clear()
            refresh = True

    def broadcast(self, method: str, *args: Any, **kwargs: Any) -> list[BroadcastResult]:
        """Call `method` on every endpoint at once (freshly resolved); one result per endpoint,
        in endpoint order, holding either the value or the error (nothing is retried)."""
        request = build_call(self._name, method, args, kwargs)
        endpoints = self.endpoints(refresh=True)
        if not endpoints:
            raise ActorNotFoundError(not_found_message(self._resolver, self._name))

        def one(endpoint: ResolvedEndpoint) -> BroadcastResult:
            try:
                return BroadcastResult(endpoint, value=call_endpoint(self._connections, endpoint, request))
            except ConnectError as exc:
                self._connections.forget(endpoint.url)
                error = ActorUnavailableError(f"actor {self._name!r} at {endpoint.url}: {exc.message}")
                return BroadcastResult(endpoint, error=error)
            except Exception as exc:
                return BroadcastResult(endpoint, error=exc)

        if len(endpoints) <= 1:
            return [one(e) for e in endpoints]
        with self._lock:
            if self._broadcast_threads is None:
                self._broadcast_threads = ThreadPoolExecutor(MAX_BROADCAST_THREADS, thread_name_prefix="actor-broadcast")
            threads = self._broadcast_threads
        return list(threads.map(one, endpoints))

    def close(self) -> None:
        self._connections.close()
        if self._broadcast_threads is not None:
            self._broadcast_threads.shutdown(wait=False)

    def __enter__(self) -> ActorPool:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()
