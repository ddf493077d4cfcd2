"""ActorClient: call a named actor's methods as if it were a local object.

    client = ActorClient(ClusterResolver(url, namespace="/serve"), "inference")
    client.predict({"text": "hello"})

The client sticks to one endpoint while it answers. When it stops answering (its task was
retried on another worker, or one replica died) the client resolves the name again and retries
on an endpoint that answers, until `resolve_timeout` runs out; the caller sees nothing of it. A
call cut off mid-flight may therefore run twice: methods that must not repeat should be
idempotent. An exception raised by the method is raised here, with the remote traceback as a
note.
"""

from __future__ import annotations

import abc
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any, Self

import cloudpickle
from connectrpc.code import Code
from connectrpc.errors import ConnectError

from iris.actor.resolver import ResolvedEndpoint, Resolver, ResolverError
from iris.client.client import IrisError
from iris.rpc import actor_pb2 as apb
from iris.rpc.actor_connect import ActorServiceClientSync
from iris.time import Deadline, ExponentialBackoff

DEFAULT_RESOLVE_TIMEOUT_S = 30.0
# Codes that mean "this endpoint cannot take the call", not "the call failed": connection refused
# or reset (UNAVAILABLE), and a server on that address that no longer hosts the actor (NOT_FOUND,
# e.g. the port was reused).
RETRYABLE_CODES = frozenset({Code.UNAVAILABLE, Code.NOT_FOUND})


class ActorError(IrisError):
    """Base of the actor system's own errors (not those raised by actor methods)."""


class ActorNotFoundError(ActorError, LookupError):
    pass


class ActorUnavailableError(ActorError, ConnectionError):
    """Endpoints exist (or existed) but none answered before the deadline."""


class ActorRemoteError(ActorError):
    """An actor method raised an exception that could not be rebuilt here (e.g. its class is not
    importable on this side); its type, message and traceback are in the message and notes."""

    def __init__(self, error_type: str, message: str):
        self.error_type = error_type
        super().__init__(f"{error_type}: {message}")


def raise_remote(error: apb.ActorError, where: str) -> None:
    note = f"raised in {where}; remote traceback:\n{error.traceback}"
    exc: BaseException | None = None
    if error.serialized_exception:
        try:
            exc = cloudpickle.loads(error.serialized_exception)
        except Exception:
            exc = None
    if not isinstance(exc, BaseException):
        exc = ActorRemoteError(error.error_type, error.message)
    exc.add_note(note)
    raise exc


def not_found_message(resolver: Resolver, name: str) -> str:
    try:
        known = ", ".join(resolver.known_names()) or "none"
    except ResolverError as exc:
        known = f"unknown ({exc})"
    return f"no actor {name!r} in namespace {resolver.namespace!r}; known: {known}"


class EndpointConnections:
    """One Connect client per endpoint URL, reused across calls (keep-alive connections)."""

    def __init__(self, call_timeout: float | None):
        self._timeout_ms = None if call_timeout is None else int(call_timeout * 1000)
        self._clients: dict[str, ActorServiceClientSync] = {}
        self._lock = threading.Lock()

    def get(self, url: str) -> ActorServiceClientSync:
        client = self._clients.get(url)
        if client is None:
            with self._lock:
                client = self._clients.get(url)
                if client is None:
                    # Actor traffic stays inside a cluster: gzip would cost more CPU than it saves.
                    client = ActorServiceClientSync(
                        url, timeout_ms=self._timeout_ms, send_compression=None, accept_compression=()
                    )
                    self._clients[url] = client
        return client

    def forget(self, url: str) -> None:
        with self._lock:
            client = self._clients.pop(url, None)
        if client is not None:
            client.close()

    def close(self) -> None:
        with self._lock:
            clients, self._clients = list(self._clients.values()), {}
        for client in clients:
            client.close()


def call_endpoint(
    connections: EndpointConnections, endpoint: ResolvedEndpoint, request: apb.ActorCall
) -> Any:
    """One call on one endpoint: the method's value, or its exception raised here.

    ConnectError escapes for the caller to decide about retrying.
    """
    response = connections.get(endpoint.url).call(request)
    if response.HasField("error"):
        raise_remote(response.error, f"actor {request.actor_name!r} at {endpoint.url}")
    return cloudpickle.loads(response.serialized_value)


def build_call(name: str, method: str, args: Sequence[Any], kwargs: dict[str, Any]) -> apb.ActorCall:
    return apb.ActorCall(
        actor_name=name,
        method_name=method,
        serialized_args=cloudpickle.dumps(tuple(args)) if args else b"",
        serialized_kwargs=cloudpickle.dumps(kwargs) if kwargs else b"",
    )


class FailoverCaller(abc.ABC):
    """Calls one actor name through a resolver, moving to another endpoint when one does not
    answer. Subclasses choose which endpoint takes a call (`ActorClient`: one, kept while it
    answers; `ActorPool`: each in turn)."""

    def __init__(self, resolver: Resolver, name: str, resolve_timeout: float, call_timeout: float | None):
        self._resolver = resolver
        self._name = name
        self._resolve_timeout = resolve_timeout
        self._connections = EndpointConnections(call_timeout)

    @property
    def name(self) -> str:
        return self._name

    def __getattr__(self, method: str) -> Callable[..., Any]:
        if method.startswith("_"):
            raise AttributeError(method)
        return lambda *args, **kwargs: self.call(method, *args, **kwargs)

    def call(self, method: str, *args: Any, **kwargs: Any) -> Any:
        request = build_call(self._name, method, args, kwargs)
        return self._invoke(lambda endpoint: call_endpoint(self._connections, endpoint, request))

    @abc.abstractmethod
    def _endpoints(self, fresh: bool) -> list[ResolvedEndpoint]:
        """The endpoints to choose from, resolved anew if `fresh`; may raise ResolverError."""

    @abc.abstractmethod
    def _pick(self, candidates: list[ResolvedEndpoint]) -> ResolvedEndpoint:
        """The endpoint that takes the next call."""

    @abc.abstractmethod
    def _dropped(self, endpoint: ResolvedEndpoint) -> None:
        """`endpoint` did not answer."""

    def _invoke(self, attempt: Callable[[ResolvedEndpoint], Any]) -> Any:
        deadline = Deadline.from_now(self._resolve_timeout)
        backoff = ExponentialBackoff(0.02, 1.0)
        failed: set[str] = set()
        ever_resolved = False
        fresh = False
        lookup_problem = call_problem = ""
        while True:
            try:
                endpoints = self._endpoints(fresh)
            except ResolverError as exc:
                endpoints, lookup_problem = [], str(exc)
            ever_resolved = ever_resolved or bool(endpoints)
            candidates = [e for e in endpoints if e.url not in failed]
            if candidates:
                endpoint = self._pick(candidates)
                try:
                    return attempt(endpoint)
                except ConnectError as exc:
                    if exc.code not in RETRYABLE_CODES:
                        raise ActorError(
                            f"call to actor {self._name!r} at {endpoint.url} failed "
                            f"({exc.code.name.lower()}): {exc.message}"
                        ) from None
                    call_problem = f"{endpoint.url}: {exc.message}"
                    failed.add(endpoint.url)
                    self._connections.forget(endpoint.url)
                    self._dropped(endpoint)
                    # Resolve again at once: another endpoint may answer right away.
                    fresh = True
                    continue
            if deadline.expired():
                self._raise_gave_up(ever_resolved, lookup_problem, call_problem)
            time.sleep(min(backoff.next_delay(), deadline.remaining_seconds()))
            # After the pause, endpoints that failed get another chance (a restarting server).
            failed.clear()
            fresh = True

    def _raise_gave_up(self, ever_resolved: bool, lookup_problem: str, call_problem: str) -> None:
        where = f"actor {self._name!r} in namespace {self._resolver.namespace!r}"
        if ever_resolved:
            raise ActorUnavailableError(
                f"{where} did not answer within {self._resolve_timeout:g}s; last problem: {call_problem}"
            )
        if lookup_problem:
            raise ActorUnavailableError(f"cannot look up {where}: {lookup_problem}")
        raise ActorNotFoundError(not_found_message(self._resolver, self._name))

    def close(self) -> None:
        self._connections.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


class ActorClient(FailoverCaller):
    def __init__(
        self,
        resolver: Resolver,
        name: str,
        resolve_timeout: float = DEFAULT_RESOLVE_TIMEOUT_S,
        call_timeout: float | None = None,
    ):
        """`resolve_timeout` bounds how long one call waits for a reachable endpoint (to appear,
        or to come back after a failure); `call_timeout` bounds each RPC (None: no limit, so a
        long-running method is never cut off)."""
        super().__init__(resolver, name, resolve_timeout, call_timeout)
        self._endpoint: ResolvedEndpoint | None = None
        self._lock = threading.Lock()

    def list_methods(self) -> list[apb.MethodInfo]:
        request = apb.ListMethodsRequest(actor_name=self._name)
        return self._invoke(
            lambda endpoint: list(self._connections.get(endpoint.url).list_methods(request).methods)
        )

    def _endpoints(self, fresh: bool) -> list[ResolvedEndpoint]:
        pinned = self._endpoint
        if pinned is not None and not fresh:
            return [pinned]
        return self._resolver.resolve(self._name)

    def _pick(self, candidates: list[ResolvedEndpoint]) -> ResolvedEndpoint:
        with self._lock:
            if self._endpoint not in candidates:
                self._endpoint = candidates[0]
            return self._endpoint

    def _dropped(self, endpoint: ResolvedEndpoint) -> None:
        with self._lock:
            if self._endpoint == endpoint:
                self._endpoint = None
