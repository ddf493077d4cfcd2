"""ActorServer: serve Python objects' methods over Connect RPC and publish them by name.

    server = ActorServer(port="actor")          # the task's named port IRIS_PORT_ACTOR
    server.register("inference", Model())
    server.serve()                               # until SIGTERM; unregisters on the way out

Arguments and results travel cloudpickled. By default every method runs on the server's event
loop, one plain method at a time in arrival order, so an actor's state needs no locks and a call
costs no thread hand-off (as in Ray, where an actor with async methods runs everything on its
loop). `async def` methods may overlap at their awaits. With `max_threads=N`, plain methods run
on N worker threads instead, so a long one does not hold up async methods and health checks. An
exception raised by a method travels back with its type, message and remote traceback.

Inside an Iris task the server registers one controller endpoint per actor, `<job id>/<name>`,
tagged with its task and attempt, and removes the endpoint an earlier attempt of the same task
left behind (that attempt's worker died with it). Outside a task nothing is registered, and
clients use a `FixedResolver` or `GcsResolver`.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import inspect
import logging
import os
import signal
import socket
import threading
import traceback
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Self
from urllib.parse import urlsplit

import cloudpickle
from connectrpc.code import Code
from connectrpc.errors import ConnectError

from iris.actor.resolver import ACTOR_ATTEMPT_KEY, ACTOR_MARKER_KEY, ACTOR_TASK_KEY, actor_name_of
from iris.client.client import IrisClient, IrisContext, IrisError, iris_ctx
from iris.cluster.http_server import HttpServer
from iris.cluster.listening_socket import bind_socket
from iris.rpc import actor_pb2 as apb
from iris.rpc import cluster_pb2 as pb
from iris.rpc.actor_connect import ActorServiceASGIApplication

logger = logging.getLogger(__name__)

# Arguments can be model weights or batches: far above Connect's 4 MiB default.
MAX_MESSAGE_BYTES = 1 << 30


@dataclass
class HostedActor:
    name: str
    instance: Any
    # Public callables by name; the ones that must be awaited, found once rather than per call.
    methods: dict[str, Callable[..., Any]]
    async_methods: frozenset[str]

    @classmethod
    def of(cls, name: str, instance: Any) -> HostedActor:
        methods = {}
        for attr in dir(instance):
            if attr.startswith("_"):
                continue
            value = getattr(instance, attr, None)
            if callable(value):
                methods[attr] = value
        return cls(
            name,
            instance,
            methods,
            frozenset(n for n, m in methods.items() if inspect.iscoroutinefunction(m)),
        )


def actor_error(exc: BaseException) -> apb.ActorError:
    """An exception as the caller will see it; the exception itself goes along when it pickles."""
    error = apb.ActorError(
        error_type=f"{type(exc).__module__}.{type(exc).__qualname__}",
        message=str(exc),
        traceback="".join(traceback.format_exception(exc)),
    )
    try:
        error.serialized_exception = cloudpickle.dumps(exc)
    except Exception:
        # Some exceptions hold sockets or locks; the type, message and traceback still travel.
        pass
    return error


class ActorService:
    """The RPC side: Call, ListMethods and HealthCheck over the hosted actors."""

    def __init__(self, actors: dict[str, HostedActor], executor: ThreadPoolExecutor | None):
        self._actors = actors
        self._executor = executor

    def _actor(self, name: str) -> HostedActor:
        actor = self._actors.get(name)
        if actor is None:
            hosted = ", ".join(sorted(self._actors)) or "none"
            raise ConnectError(Code.NOT_FOUND, f"no actor {name!r} on this server (it hosts: {hosted})")
        return actor

    async def call(self, request: apb.ActorCall, ctx: Any) -> apb.ActorResponse:
        actor = self._actor(request.actor_name)
        try:
            method = actor.methods.get(request.method_name)
            if method is None:
                known = ", ".join(sorted(actor.methods)) or "none"
                raise AttributeError(
                    f"actor {actor.name!r} has no method {request.method_name!r} (methods: {known})"
                )
            args = cloudpickle.loads(request.serialized_args) if request.serialized_args else ()
            kwargs = cloudpickle.loads(request.serialized_kwargs) if request.serialized_kwargs else {}
            if request.method_name in actor.async_methods:
                value = await method(*args, **kwargs)
            elif self._executor is None:
                value = method(*args, **kwargs)
            else:
                loop = asyncio.get_running_loop()
                value = await loop.run_in_executor(self._executor, functools.partial(method, *args, **kwargs))
            return apb.ActorResponse(serialized_value=cloudpickle.dumps(value))
        except Exception as exc:
            return apb.ActorResponse(error=actor_error(exc))

    async def list_methods(self, request: apb.ListMethodsRequest, ctx: Any) -> apb.ListMethodsResponse:
        actor = self._actor(request.actor_name)
        methods = []
        for name, method in sorted(actor.methods.items()):
            try:
                signature = str(inspect.signature(method))
            except (TypeError, ValueError):
                signature = "(...)"
            methods.append(
                apb.MethodInfo(name=name, signature=signature, docstring=inspect.getdoc(method) or "")
            )
        return apb.ListMethodsResponse(methods=methods)

    async def health_check(self, request: apb.ActorHealthRequest, ctx: Any) -> apb.ActorHealthResponse:
        return apb.ActorHealthResponse(healthy=True, actor_names=sorted(self._actors))


def _route_host(controller_address: str) -> str | None:
    """The local address this machine uses to reach the controller, i.e. the one the controller's
    other clients can most likely reach us on. A UDP connect sends nothing."""
    parts = urlsplit(controller_address if "://" in controller_address else f"http://{controller_address}")
    if not parts.hostname:
        return None
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
            probe.connect((parts.hostname, parts.port or 80))
            return probe.getsockname()[0]
    except OSError:
        return None


class ActorServer:
    def __init__(
        self,
        port: int | str = 0,
        host: str = "0.0.0.0",
        advertise_host: str | None = None,
        max_threads: int = 0,
    ):
        """`port` is a number (0: any free port) or the name of one of the task's named ports.

        `max_threads`: 0 runs plain methods on the event loop (fastest, one at a time); N > 0
        runs them on N threads (N = 1 keeps the actor single-threaded but the loop responsive).
        """
        if max_threads < 0:
            raise ValueError(f"max_threads must be 0 or more, got {max_threads}")
        self._ctx: IrisContext | None = iris_ctx() if "IRIS_JOB_ID" in os.environ else None
        self._port = self._port_number(port)
        self._host = host
        self._advertise_host = advertise_host
        self._actors: dict[str, HostedActor] = {}
        self._executor = (
            ThreadPoolExecutor(max_workers=max_threads, thread_name_prefix="actor-method")
            if max_threads
            else None
        )
        self._http: HttpServer | None = None
        self._controller: IrisClient | None = None
        self._endpoint_ids: dict[str, str] = {}
        self._stopped = threading.Event()
        self.url = ""

    def _port_number(self, port: int | str) -> int:
        if isinstance(port, int):
            return port
        if port.isdigit():
            return int(port)
        if self._ctx is None:
            raise IrisError(f"named port {port!r} needs an Iris task (IRIS_PORT_{port.upper()} is not set)")
        number = self._ctx.ports.get(port.lower().replace("-", "_"))
        if number is None:
            known = ", ".join(sorted(self._ctx.ports)) or "none"
            raise IrisError(
                f"this task has no named port {port!r} (it has: {known}); submit the job with ports=[{port!r}]"
            )
        return number

    def register(self, name: str, instance: Any) -> None:
        """Host `instance` as actor `name`; after `start()` it is published at once."""
        if not name or "/" in name:
            raise ValueError(f"invalid actor name {name!r}: it must be non-empty and contain no '/'")
        if name in self._actors:
            raise ValueError(f"an actor named {name!r} is already registered on this server")
        self._actors[name] = HostedActor.of(name, instance)
        if self._http is not None:
            self._publish(name)

    @property
    def actor_names(self) -> list[str]:
        return sorted(self._actors)

    def start(self) -> ActorServer:
        """Serve in a background thread and publish every registered actor; returns self."""
        if self._http is not None:
            raise RuntimeError(f"this actor server is already serving at {self.url}")
        sock = bind_socket(self._host, self._port)
        service = ActorService(self._actors, self._executor)
        # The actor port serves nothing but ActorService, and actor calls are the one
        # latency-bound path: the Connect app runs bare, without a router or a lifespan.
        app = ActorServiceASGIApplication(service, read_max_bytes=MAX_MESSAGE_BYTES)
        self._http = HttpServer(app, sock, lifespan="off")
        self._http.start_in_thread()
        self.url = f"http://{self._advertised_host()}:{self._http.port}"
        if self._ctx is not None and self._ctx.controller_address:
            self._controller = IrisClient.remote(self._ctx.controller_address)
        for name in self._actors:
            self._publish(name)
        logger.info("actor server at %s hosting %s", self.url, ", ".join(self._actors) or "nothing yet")
        return self

    def _advertised_host(self) -> str:
        if self._advertise_host:
            return self._advertise_host
        if self._host not in ("0.0.0.0", ""):
            return self._host
        if self._ctx is not None and self._ctx.controller_address:
            routed = _route_host(self._ctx.controller_address)
            if routed:
                return routed
        return "127.0.0.1"

    def _publish(self, name: str) -> None:
        if self._controller is None or self._ctx is None:
            return
        ctx = self._ctx
        self._drop_stale_endpoints(name, ctx)
        metadata = {
            ACTOR_MARKER_KEY: "1",
            ACTOR_TASK_KEY: ctx.task_id,
            ACTOR_ATTEMPT_KEY: str(ctx.attempt_id),
        }
        self._endpoint_ids[name] = self._controller.register_endpoint(ctx.job_id, name, self.url, metadata)

    def _drop_stale_endpoints(self, name: str, ctx: IrisContext) -> None:
        """An earlier attempt of this task registered `name` and died without unregistering."""
        assert self._controller is not None
        for endpoint in self._controller.list_endpoints(f"{ctx.job_id}/{name}"):
            if (
                actor_name_of(endpoint) == name
                and endpoint.job_id == ctx.job_id
                and endpoint.metadata.get(ACTOR_TASK_KEY) == ctx.task_id
                and int(endpoint.metadata.get(ACTOR_ATTEMPT_KEY, "0") or 0) < ctx.attempt_id
            ):
                with contextlib.suppress(IrisError):
                    self._unregister(endpoint.endpoint_id)

    def _unregister(self, endpoint_id: str) -> None:
        assert self._controller is not None
        self._controller.call("unregister_endpoint", pb.UnregisterEndpointRequest(endpoint_id=endpoint_id))

    def serve(self) -> None:
        """Serve until SIGTERM or SIGINT (or `shutdown()` from another thread), then clean up."""
        if self._http is None:
            self.start()
        if threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGTERM, signal.SIGINT):
                signal.signal(sig, lambda *_: self._stopped.set())
        self._stopped.wait()
        self.shutdown()

    def shutdown(self) -> None:
        """Unregister every endpoint and stop serving; safe to call twice."""
        self._stopped.set()
        if self._controller is not None:
            for endpoint_id in self._endpoint_ids.values():
                try:
                    self._unregister(endpoint_id)
                except IrisError as exc:
                    logger.warning("could not unregister actor endpoint %s: %s", endpoint_id, exc)
            self._endpoint_ids.clear()
            self._controller.close()
            self._controller = None
        if self._http is not None:
            self._http.stop()
            self._http = None
        if self._executor is not None:
            self._executor.shutdown(wait=False, cancel_futures=True)

    def __enter__(self) -> Self:
        return self.start() if self._http is None else self

    def __exit__(self, *exc_info: object) -> None:
        self.shutdown()
