"""A lean server for Connect unary RPCs: an httptools parser on an asyncio Protocol, on uvloop.

A worker's services are all unary. Served through uvicorn and connectrpc's ASGI application, a
request cost the worker ~0.2 ms of CPU, most of it the two libraries' generic machinery (ASGI
scopes and messages, a response sender, a deadline scope, a task per request): a heartbeat round
over 1,000 workers paid that on every host. Here a request is parsed into one small object, its
handler is called as soon as its body is complete, and its answer is one write on the same
kept-alive connection. A handler that finishes without waiting on anything (the simulated
workers' heartbeat) runs with no task at all; one that waits finishes in a task. Measured in the
controller scale benchmark: 70-80 ms of the simulated workers' CPU per 1,000 heartbeats instead
of 220-255 ms through uvicorn and connectrpc.

What it speaks is Connect's unary protocol over HTTP/1.1, as the generated Connect clients and
the controller's own heartbeat client send it: POST of a binary (`application/proto`) or JSON
(`application/json`) message, optionally gzip-compressed (`content-encoding`), with an optional
`connect-timeout-ms` deadline; the answer is the message with status 200, or Connect's JSON
error body with the HTTP status of its code. Handlers are the generated service protocol's
methods (`async def method(request, ctx)`) and see a connectrpc `RequestContext` (response headers
set on it are not sent: no WorkerService method sets any); metadata interceptors (`on_start(ctx)` / `on_end(token, ctx, error)`) run around them, as connectrpc runs
them. Plain GET routes answering JSON (a daemon's /health) are served beside the services, and
any other request goes to an optional ASGI application (the controller's dashboard, /health and
/metrics on Starlette): the controller's ControllerService is served here too, on its one port.
A connection's request in flight is cancelled when the client goes away, as connectrpc does.
"""

from __future__ import annotations

import asyncio
import contextlib
import gzip
import json
import logging
import re
import signal
import socket
import threading
import time
import zlib
from collections.abc import Callable, Generator, Sequence
from dataclasses import dataclass, field
from http import HTTPStatus
from typing import Any, cast

import httptools
import uvloop
from connectrpc._protocol import ConnectWireError
from connectrpc.code import Code
from connectrpc.errors import ConnectError
from connectrpc.method import IdempotencyLevel, MethodInfo, StreamType
from connectrpc.request import Headers, RequestContext
from google.protobuf import json_format
from google.protobuf.descriptor import ServiceDescriptor
from google.protobuf.message import Message
from google.protobuf.message_factory import GetMessageClass

from iris.rpc.asgi_fallback import AnswerBroken, AsgiAnswer, AsgiApp, answer_through, scope_for
from iris.rpc.method_names import python_name
from iris.time import wait_until

logger = logging.getLogger(__name__)

# As connectrpc's servers: a larger request message is refused before it is parsed (the default;
# a server given a larger limit reads larger messages).
READ_MAX_BYTES = 4 * 1024 * 1024
# Answers at least this large are gzip-compressed when the client accepts gzip; a smaller one
# (every heartbeat of an idle worker) costs more to compress than it saves.
COMPRESS_MIN_BYTES = 1024
GRACEFUL_STOP_S = 2.0
_IDLE_SWEEP_S = 5.0
_TIMEOUT_HEADER = re.compile(r"[0-9]{1,10}")

# Handler of a plain GET route: the JSON object to answer with status 200.
JsonRoute = Callable[[], dict[str, Any]]


@dataclass(frozen=True, slots=True)
class UnaryMethod:
    info: MethodInfo
    function: Callable[[Any, RequestContext], Any]


def service_methods(
    implementation: object, service: ServiceDescriptor, prefix: str = ""
) -> dict[str, UnaryMethod]:
    """The routes of `service` served by `implementation` (a generated service protocol's methods
    by their snake_case names), at `prefix` + `/package.Service/Method`."""
    methods = {}
    for method in service.methods:
        if method.client_streaming or method.server_streaming:
            raise ValueError(
                f"{service.full_name}.{method.name} streams; this server serves unary methods only"
            )
        info = MethodInfo(
            name=method.name,
            service_name=service.full_name,
            input=GetMessageClass(method.input_type),
            output=GetMessageClass(method.output_type),
            idempotency_level=IdempotencyLevel.UNKNOWN,
            stream_type=StreamType.UNARY,
        )
        methods[f"{prefix}/{service.full_name}/{method.name}"] = UnaryMethod(
            info, getattr(implementation, python_name(method.name))
        )
    return methods


@dataclass(slots=True)
class _Request:
    path: str = ""
    headers: dict[str, str] = field(default_factory=dict)
    body: list[bytes] = field(default_factory=list)
    size: int = 0
    keep_alive: bool = True
    method: str = ""
    http_version: str = "1.1"


def status_line(status: int) -> bytes:
    try:
        phrase = HTTPStatus(status).phrase
    except ValueError:
        phrase = "Unknown"
    return f"HTTP/1.1 {status} {phrase}\r\n".encode()


_STATUS_LINES = {
    status: status_line(status)
    for status in (200, 400, 401, 403, 404, 405, 408, 409, 412, 415, 429, 499, 500, 501, 503, 504)
}


def _answer(status: int, content_type: bytes, body: bytes, keep_alive: bool, extra: bytes = b"") -> bytes:
    line = _STATUS_LINES.get(status) or status_line(status)
    close = b"" if keep_alive else b"connection: close\r\n"
    return b"%scontent-type: %s\r\ncontent-length: %d\r\n%s%s\r\n%s" % (
        line,
        content_type,
        len(body),
        extra,
        close,
        body,
    )


def _asgi_answer(answer: AsgiAnswer, keep_alive: bool, method: str) -> bytes:
    """`answer` framed: the application's headers, a length when it gave none, and no body where
    HTTP has none (HEAD, 1xx, 204, 304: RFC 9110, 6.4.1)."""
    parts = [_STATUS_LINES.get(answer.status) or status_line(answer.status)]
    has_length = False
    for name, value in answer.headers:
        if name != b"connection":
            has_length = has_length or name == b"content-length"
            parts.append(b"%s: %s\r\n" % (name, value))
    bodiless_status = answer.status < 200 or answer.status in (204, 304)
    if not has_length and not bodiless_status:
        parts.append(b"content-length: %d\r\n" % len(answer.body))
    if not keep_alive:
        parts.append(b"connection: close\r\n")
    parts.append(b"\r\n")
    if not bodiless_status and method != "HEAD":
        parts.append(answer.body)
    return b"".join(parts)


def _error_answer(exc: Exception, keep_alive: bool) -> bytes:
    wire = ConnectWireError.from_exception(exc)
    return _answer(wire.to_http_status().code, b"application/json", wire.to_json_bytes(), keep_alive)


class _Connection(asyncio.Protocol):
    """One client connection: requests are answered in the order they arrived."""

    def __init__(self, server: _Serving) -> None:
        self._server = server
        self._parser = httptools.HttpRequestParser(self)
        self._transport: asyncio.Transport | None = None
        self._request = _Request()
        self._waiting: list[_Request] = []
        self._busy = False
        self._in_flight: asyncio.Task | None = None
        self.last_active = time.monotonic()
        self.peer: tuple[str, int] | None = None
        self.local: tuple[str, int] | None = None

    # asyncio.Protocol

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = cast(asyncio.Transport, transport)
        self.peer = transport.get_extra_info("peername")
        self.local = transport.get_extra_info("sockname")
        self._server.connections.add(self)

    def connection_lost(self, exc: Exception | None) -> None:
        self._server.connections.discard(self)
        self._transport = None
        if self._in_flight is not None:
            self._in_flight.cancel()

    def data_received(self, data: bytes) -> None:
        self.last_active = time.monotonic()
        try:
            self._parser.feed_data(data)
        except httptools.HttpParserUpgrade:
            self._write(_answer(400, b"text/plain", b"protocol upgrades are not served", False))
        except httptools.HttpParserError as exc:
            self._write(_answer(400, b"text/plain", f"malformed HTTP request: {exc}".encode(), False))

    # httptools callbacks

    def on_message_begin(self) -> None:
        self._request = _Request()

    def on_url(self, url: bytes) -> None:
        self._request.path += url.decode("latin-1")

    def on_header(self, name: bytes, value: bytes) -> None:
        headers, key, text = self._request.headers, name.decode("latin-1").lower(), value.decode("latin-1")
        # A repeated field is one list-valued field (RFC 9110, 5.3).
        headers[key] = f"{headers[key]}, {text}" if key in headers else text

    def on_headers_complete(self) -> None:
        parser = self._parser
        self._request.method = parser.get_method().decode("latin-1")
        self._request.http_version = parser.get_http_version()
        if self._request.headers.get("expect", "").lower() == "100-continue" and self._transport is not None:
            # curl and others hold a larger body back until told to send it.
            self._transport.write(b"HTTP/1.1 100 Continue\r\n\r\n")

    def on_body(self, body: bytes) -> None:
        request = self._request
        request.size += len(body)
        if request.size <= self._server.read_max_bytes:
            request.body.append(body)

    def on_message_complete(self) -> None:
        request = self._request
        request.keep_alive = self._parser.should_keep_alive()
        if self._busy:
            self._waiting.append(request)
        else:
            self._serve(request)

    # serving

    def _serve(self, request: _Request) -> None:
        self._busy = True
        answer = self._server.dispatch(request, self)
        if isinstance(answer, bytes):
            self.answered(answer, request.keep_alive)
        else:
            self._in_flight = answer

    def answered(self, answer: bytes, keep_alive: bool) -> None:
        """Writes the answer and serves the next request waiting, if any."""
        self._in_flight = None
        self._write(answer, keep_alive)
        self._busy = False
        if self._waiting and self._transport is not None:
            self._serve(self._waiting.pop(0))

    def _write(self, data: bytes, keep_alive: bool = False) -> None:
        transport = self._transport
        if transport is None:
            return
        transport.write(data)
        if not keep_alive:
            transport.close()
            self._transport = None

    def close_if_idle(self, idle_since: float) -> None:
        if not self._busy and self.last_active < idle_since and self._transport is not None:
            self._transport.close()
            self._transport = None

    def close(self) -> None:
        if self._transport is not None:
            self._transport.close()
            self._transport = None


class _Serving:
    """What every connection shares: the routes, the interceptors, the live connections."""

    def __init__(
        self,
        methods: dict[str, UnaryMethod],
        routes: dict[str, JsonRoute],
        interceptors: Sequence[Any],
        fallback: AsgiApp | None,
        read_max_bytes: int,
    ) -> None:
        self.methods = methods
        self.routes = routes
        self.interceptors = tuple(interceptors)
        self.fallback = fallback
        self.read_max_bytes = read_max_bytes
        self.connections: set[_Connection] = set()
        self.tasks: set[asyncio.Task] = set()

    def dispatch(self, request: _Request, connection: _Connection) -> bytes | asyncio.Task:
        """The answer's bytes now, or the task that will hand them to `connection.answered`."""
        method = self.methods.get(request.path)
        if method is None:
            return self._plain(request, connection)
        if request.method != "POST":
            return _answer(
                405,
                b"text/plain",
                b"Connect unary methods are called with POST",
                request.keep_alive,
                b"allow: POST\r\n",
            )
        try:
            call = _UnaryCall.read(method, request, self.read_max_bytes)
        except _Unsupported as exc:
            return exc.answer(request.keep_alive)
        except ConnectError as exc:
            return _error_answer(exc, request.keep_alive)
        if not self.interceptors:
            coroutine = method.function(call.message, call.ctx)
            try:
                # Most handlers finish without waiting for anything: answer with no task at all.
                waited_on = coroutine.send(None)
            except StopIteration as done:
                return call.encode(done.value, request.keep_alive)
            except Exception as exc:  # noqa: BLE001 - a handler's error is the caller's answer
                return call.error(exc, request.keep_alive)
            run = _Resume(coroutine, waited_on)
        else:
            run = self._intercepted(method, call)
        task = self._track(self._finish(run, call, request.keep_alive, connection))
        if call.deadline is not None:
            timer = asyncio.get_running_loop().call_at(call.deadline, call.expire, task)
            task.add_done_callback(lambda _: timer.cancel())
        return task

    def _track(self, coroutine: Any) -> asyncio.Task:
        task = asyncio.get_running_loop().create_task(coroutine)
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)
        return task

    async def _intercepted(self, method: UnaryMethod, call: _UnaryCall) -> Message:
        started: list[tuple[Any, Any]] = []
        error: Exception | None = None
        result = None
        try:
            for interceptor in self.interceptors:
                started.append((interceptor, await interceptor.on_start(call.ctx)))
            result = await method.function(call.message, call.ctx)
        except Exception as exc:  # noqa: BLE001 - reported to the interceptors, then answered
            error = exc
        while started:
            interceptor, token = started.pop()
            try:
                await interceptor.on_end(token, call.ctx, error)
            except Exception as exc:  # noqa: BLE001 - as connectrpc: it replaces the error
                error = exc
        if error is not None:
            raise error
        return cast(Message, result)

    async def _finish(self, run: Any, call: _UnaryCall, keep_alive: bool, connection: _Connection) -> None:
        try:
            answer = call.encode(await run, keep_alive)
        except asyncio.CancelledError:
            if not call.expired:
                raise  # the server is stopping
            answer = _error_answer(ConnectError(Code.DEADLINE_EXCEEDED, "Request timed out"), keep_alive)
        except Exception as exc:  # noqa: BLE001 - a handler's error is the caller's answer
            answer = call.error(exc, keep_alive)
        connection.answered(answer, keep_alive)

    def _plain(self, request: _Request, connection: _Connection) -> bytes | asyncio.Task:
        route = self.routes.get(request.path.split("?", 1)[0])
        if route is not None:
            if request.method != "GET":
                return _answer(405, b"text/plain", b"", request.keep_alive, b"allow: GET\r\n")
            return _answer(200, b"application/json", json.dumps(route()).encode(), request.keep_alive)
        if self.fallback is None:
            return _answer(404, b"text/plain", b"", request.keep_alive)
        if request.size > self.read_max_bytes:
            return _answer(413, b"text/plain", b"the request is too large", False)
        return self._track(self._through_fallback(self.fallback, request, connection))

    async def _through_fallback(self, app: AsgiApp, request: _Request, connection: _Connection) -> None:
        scope = scope_for(
            request.method,
            request.path,
            request.http_version,
            request.headers,
            connection.peer,
            connection.local,
        )
        try:
            answer = await answer_through(app, scope, b"".join(request.body))
        except AnswerBroken:
            connection.answered(b"", False)
            return
        keep_alive = request.keep_alive and not answer.close_after
        connection.answered(_asgi_answer(answer, keep_alive, request.method), keep_alive)


class _Unsupported(Exception):
    """A request this server cannot read as a Connect unary call: a plain HTTP status answers it."""

    def __init__(self, status: int, message: str, extra: bytes = b""):
        super().__init__(message)
        self.status, self.extra = status, extra

    def answer(self, keep_alive: bool) -> bytes:
        return _answer(self.status, b"text/plain", str(self).encode(), keep_alive, self.extra)


@dataclass(slots=True)
class _UnaryCall:
    message: Message
    ctx: RequestContext
    json: bool
    gzip_accepted: bool
    deadline: float | None
    # Set when the deadline's timer cancelled the handler (rather than the server stopping). Not
    # derived from the clock: the loop's timer may fire a little before `deadline` as its own
    # `time()` reads it, and such a call would have got no answer at all.
    expired: bool = False

    def expire(self, task: asyncio.Task) -> None:
        self.expired = True
        task.cancel()

    @staticmethod
    def read(method: UnaryMethod, request: _Request, read_max_bytes: int) -> _UnaryCall:
        headers = request.headers
        content_type = headers.get("content-type", "").split(";", 1)[0].strip().lower()
        if content_type not in ("application/proto", "application/json"):
            raise _Unsupported(
                415,
                f"unsupported content type {content_type!r}",
                b"accept-post: application/json, application/proto\r\n",
            )
        version = headers.get("connect-protocol-version")
        if version is not None and version != "1":
            raise ConnectError(
                Code.INVALID_ARGUMENT, f"connect-protocol-version must be '1': got '{version}'"
            )
        timeout_ms = headers.get("connect-timeout-ms")
        if timeout_ms is not None and not _TIMEOUT_HEADER.fullmatch(timeout_ms):
            raise ConnectError(Code.INVALID_ARGUMENT, f"Invalid timeout header: '{timeout_ms}'")
        if request.size > read_max_bytes:
            raise ConnectError(
                Code.RESOURCE_EXHAUSTED, f"message is larger than configured max {read_max_bytes}"
            )
        body = b"".join(request.body)
        encoding = headers.get("content-encoding", "identity")
        if encoding == "gzip":
            body = _gunzip(body, read_max_bytes)
        elif encoding != "identity":
            raise ConnectError(
                Code.UNIMPLEMENTED, f"unknown compression: '{encoding}': supported encodings are gzip"
            )
        as_json = content_type == "application/json"
        message = _decode(method.info.input, body, as_json)
        ctx = RequestContext(
            method=method.info,
            http_method="POST",
            request_headers=Headers(headers),
            timeout_ms=int(timeout_ms) if timeout_ms is not None else None,
        )
        deadline = (
            asyncio.get_running_loop().time() + int(timeout_ms) / 1000 if timeout_ms is not None else None
        )
        return _UnaryCall(message, ctx, as_json, "gzip" in headers.get("accept-encoding", ""), deadline)

    def encode(self, result: Message, keep_alive: bool) -> bytes:
        if self.json:
            content_type, body = b"application/json", json_format.MessageToJson(result).encode()
        else:
            content_type, body = b"application/proto", result.SerializeToString()
        if self.gzip_accepted and len(body) >= COMPRESS_MIN_BYTES:
            return _answer(
                200, content_type, gzip.compress(body, 6), keep_alive, b"content-encoding: gzip\r\n"
            )
        return _answer(200, content_type, body, keep_alive)

    def error(self, exc: Exception, keep_alive: bool) -> bytes:
        if not isinstance(exc, ConnectError):
            logger.exception("%s failed", self.ctx.method.name, exc_info=exc)
        return _error_answer(exc, keep_alive)


def _gunzip(body: bytes, read_max_bytes: int) -> bytes:
    decompressor = zlib.decompressobj(wbits=31)
    try:
        data = decompressor.decompress(body, read_max_bytes + 1)
    except zlib.error as exc:
        raise ConnectError(Code.INVALID_ARGUMENT, f"the gzip-compressed request is corrupt: {exc}") from None
    if len(data) > read_max_bytes:
        raise ConnectError(Code.RESOURCE_EXHAUSTED, f"message is larger than configured max {read_max_bytes}")
    return data


def _decode(message_class: type[Message], body: bytes, as_json: bool) -> Message:
    try:
        if as_json:
            return json_format.Parse(body or b"{}", message_class(), ignore_unknown_fields=True)
        return message_class.FromString(body)
    except Exception as exc:  # noqa: BLE001 - protobuf's DecodeError, its C twin, and ParseError
        raise ConnectError(
            Code.INVALID_ARGUMENT, f"the request is no {message_class.DESCRIPTOR.full_name}: {exc}"
        ) from None


class _Resume:
    """The rest of a coroutine that already ran up to its first wait, for a task to finish: it
    hands the task what the coroutine waits on, then passes results and errors through."""

    __slots__ = ("_coroutine", "_waited_on")

    def __init__(self, coroutine: Any, waited_on: Any):
        self._coroutine, self._waited_on = coroutine, waited_on

    def __await__(self) -> Generator[Any, Any, Any]:
        coroutine, waited_on = self._coroutine, self._waited_on
        while True:
            try:
                sent = yield waited_on
            except BaseException as exc:  # noqa: BLE001 - a cancellation goes to the handler
                try:
                    waited_on = coroutine.throw(exc)
                except StopIteration as done:
                    return done.value
            else:
                try:
                    waited_on = coroutine.send(sent)
                except StopIteration as done:
                    return done.value


class UnaryServer:
    """Serves unary Connect methods and JSON GET routes on a bound socket, in the foreground (a
    daemon's main thread: SIGTERM and SIGINT stop it) or in a background thread.

    `on_startup` runs on the server's loop before it accepts a connection; `on_shutdown` once it
    stopped accepting and its requests in flight had `GRACEFUL_STOP_S` to finish. Requests for
    any other path than the methods' and the routes' go to `fallback` when given."""

    def __init__(
        self,
        sock: socket.socket,
        methods: dict[str, UnaryMethod],
        routes: dict[str, JsonRoute] | None = None,
        interceptors: Sequence[Any] = (),
        on_startup: Callable[[], Any] | None = None,
        on_shutdown: Callable[[], Any] | None = None,
        idle_timeout_s: float = 120.0,
        fallback: AsgiApp | None = None,
        read_max_bytes: int = READ_MAX_BYTES,
    ) -> None:
        self._sock = sock
        self.host, self.port = sock.getsockname()[:2]
        self._serving = _Serving(methods, routes or {}, interceptors, fallback, read_max_bytes)
        self._on_startup = on_startup
        self._on_shutdown = on_shutdown
        self._idle_timeout_s = idle_timeout_s
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._started = threading.Event()
        self._stopping = False
        self._stopped_by: signal.Signals | None = None
        self._thread: threading.Thread | None = None

    def serve_forever(self) -> None:
        with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
            runner.run(self._serve())
        if self._stopped_by is not None:
            # As uvicorn does: once shut down, end as the signal would have ended the process, so
            # whoever sent it sees the usual exit status.
            signal.signal(self._stopped_by, signal.SIG_DFL)
            signal.raise_signal(self._stopped_by)

    async def _serve(self) -> None:
        loop = asyncio.get_running_loop()
        self._loop, self._stop = loop, asyncio.Event()
        if threading.current_thread() is threading.main_thread():
            for signum in (signal.SIGTERM, signal.SIGINT):
                loop.add_signal_handler(signum, self._stop_by_signal, signum)
        serving = self._serving
        if self._on_startup is not None:
            await self._on_startup()
        server = await loop.create_server(lambda: _Connection(serving), sock=self._sock, backlog=2048)
        sweeper = loop.create_task(self._close_idle_connections())
        self._started.set()
        if self._stopping:
            self._stop.set()
        try:
            await self._stop.wait()
        finally:
            sweeper.cancel()
            server.close()
            for connection in list(serving.connections):
                connection.close_if_idle(float("inf"))
            if serving.tasks:
                await asyncio.wait(list(serving.tasks), timeout=GRACEFUL_STOP_S)
            for connection in list(serving.connections):
                connection.close()
            if self._on_shutdown is not None:
                await self._on_shutdown()

    def _stop_by_signal(self, signum: int) -> None:
        self._stopped_by = signal.Signals(signum)
        assert self._stop is not None
        self._stop.set()

    async def _close_idle_connections(self) -> None:
        while True:
            await asyncio.sleep(_IDLE_SWEEP_S)
            idle_since = time.monotonic() - self._idle_timeout_s
            for connection in list(self._serving.connections):
                connection.close_if_idle(idle_since)

    def start_in_thread(self, timeout: float = 30.0) -> None:
        self._thread = threading.Thread(target=self.serve_forever, name="unary-server", daemon=True)
        self._thread.start()
        thread = self._thread
        wait_until(
            lambda: self._started.is_set() or not thread.is_alive(), timeout, 0.01, "the server to start"
        )
        if not self._started.is_set():
            raise RuntimeError("the server did not start; see the log above for the reason")

    def stop(self) -> None:
        """From any thread."""
        self._stopping = True
        loop, stop = self._loop, self._stop
        if loop is not None and stop is not None:
            with contextlib.suppress(RuntimeError):  # the loop has closed
                loop.call_soon_threadsafe(stop.set)
        if self._thread is not None:
            self._thread.join(10)
        self._sock.close()
