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
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from connectrpc.errors import ConnectError

from iris.actor.client import (
    DEFAULT_RESOLVE_TIMEOUT_S,
    ActorNotFoundError,
    ActorUnavailableError,
    FailoverCaller,
    build_call,
    call_endpoint,
    not_found_message,
)
from iris.actor.resolver import ResolvedEndpoint, Resolver

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


class ActorPool(FailoverCaller):
    def __init__(
        self,
        resolver: Resolver,
        name: str,
        resolve_timeout: float = DEFAULT_RESOLVE_TIMEOUT_S,
        call_timeout: float | None = None,
        refresh_interval: float = DEFAULT_REFRESH_INTERVAL_S,
    ):
        super().__init__(resolver, name, resolve_timeout, call_timeout)
        self._refresh_interval = refresh_interval
        self._lock = threading.Lock()
        self._endpoints_cache: list[ResolvedEndpoint] = []
        self._resolved_at = float("-inf")
        # Endpoints that just refused a call sit out round-robin for one refresh interval, so a
        # dead replica whose job still lists it does not cost every few calls a failed attempt.
        self._benched_until: dict[str, float] = {}
        self._turn = itertools.count()
        self._broadcast_threads: ThreadPoolExecutor | None = None

    def endpoints(self, refresh: bool = False) -> list[ResolvedEndpoint]:
        """The endpoints as last resolved (at most `refresh_interval` old), or freshly if asked."""
        with self._lock:
            stale = refresh or time.monotonic() - self._resolved_at >= self._refresh_interval
        if stale:
            endpoints = self._resolver.resolve(self._name)
            with self._lock:
                self._endpoints_cache, self._resolved_at = endpoints, time.monotonic()
        with self._lock:
            return list(self._endpoints_cache)

    def _endpoints(self, fresh: bool) -> list[ResolvedEndpoint]:
        endpoints = self.endpoints(refresh=fresh)
        now = time.monotonic()
        with self._lock:
            self._benched_until = {url: until for url, until in self._benched_until.items() if until > now}
            benched = set(self._benched_until)
        return [e for e in endpoints if e.url not in benched]

    def _pick(self, candidates: list[ResolvedEndpoint]) -> ResolvedEndpoint:
        return candidates[next(self._turn) % len(candidates)]

    def _dropped(self, endpoint: ResolvedEndpoint) -> None:
        with self._lock:
            self._benched_until[endpoint.url] = time.monotonic() + self._refresh_interval

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

        if len(endpoints) == 1:
            return [one(endpoints[0])]
        with self._lock:
            if self._broadcast_threads is None:
                self._broadcast_threads = ThreadPoolExecutor(
                    MAX_BROADCAST_THREADS, thread_name_prefix="actor-broadcast"
                )
            threads = self._broadcast_threads
        return list(threads.map(one, endpoints))

    def close(self) -> None:
        super().close()
        if self._broadcast_threads is not None:
            self._broadcast_threads.shutdown(wait=False)
