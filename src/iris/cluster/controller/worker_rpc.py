"""The controller's heartbeat RPC to a worker: Connect's unary protocol (binary protobuf in one
HTTP/1.1 POST) spoken directly on the controller's event loop.

A heartbeat round sends one RPC to every live worker. Through the generic Connect client a call
cost ~0.7 ms of controller CPU (a hop to the HTTP library's own I/O threads and back, a tracing
span, a timeout task per call), so a round over 1,000 workers took most of a second of CPU. Here
a call is one write and one parsed answer on a kept-alive connection per worker, reported to a
callback (no task or future per call), and the calls' deadlines share one timer. Failures are
reported as the Connect client raises them (`ConnectError` with the worker's code and message, or
UNAVAILABLE / DEADLINE_EXCEEDED), so callers handle both alike.

Workers serve plain HTTP (`http://host:port`); an address of another scheme fails its heartbeat
with a reason that says so.
"""

from __future__ import annotations

import asyncio
import gzip
import math
from collections import deque
from collections.abc import Callable
from typing import cast
from urllib.parse import urlsplit

import httptools
from connectrpc.code import Code
from connectrpc.errors import ConnectError

from iris.rpc import cluster_pb2 as pb
from iris.rpc.connect_errors import error_of_answer

HEARTBEAT_PATH = "/iris.cluster.WorkerService/Heartbeat"

# An HTTP answer: status, headers by lower-case name, body.
Answer = tuple[int, dict[bytes, bytes], bytes]


class _ConnectionEnded(Exception):
    """The worker closed the connection; `answered_nothing` when no byte of an answer came."""

    def __init__(self, answered_nothing: bool, cause: BaseException | None):
        super().__init__(str(cause) if cause else "the worker closed the connection")
        self.answered_nothing = answered_nothing


# What a call is told when it ends: the answer, or why there is none.
Settle = Callable[["Answer | Exception"], None]


class _Connection(asyncio.Protocol):
    """One kept-alive HTTP/1.1 connection to `where`, carrying one call at a time."""

    def __init__(self, where: tuple[str, int]) -> None:
        self.where = where
        self.transport: asyncio.Transport | None = None
        self.closed = False
        self._parser = httptools.HttpResponseParser(self)
        self._settle_call: Settle | None = None
        # Counts the calls sent; an expiry names the call it was set for.
        self.calls = 0
        self._headers: dict[bytes, bytes] = {}
        self._body: list[bytes] = []
        self._received = False

    # asyncio.Protocol

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's is not a subclass

    def data_received(self, data: bytes) -> None:
        self._received = True
        try:
            self._parser.feed_data(data)
        except httptools.HttpParserError as exc:
            self._settle(ConnectError(Code.UNAVAILABLE, f"malformed HTTP answer: {exc}"))
            self.close()

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self._settle(_ConnectionEnded(not self._received, exc))

    # httptools callbacks

    def on_header(self, name: bytes, value: bytes) -> None:
        self._headers[name.lower()] = value

    def on_body(self, body: bytes) -> None:
        self._body.append(body)

    def on_message_complete(self) -> None:
        answer = (self._parser.get_status_code(), self._headers, b"".join(self._body))
        if not self._parser.should_keep_alive():
            self.close()
        self._settle(answer)

    # calls

    def send(self, data: bytes, settle: Settle) -> int:
        """Sends one request; `settle` gets its answer, or the connection's end, or TimeoutError
        when `expire` is called with the number this returns."""
        assert self.transport is not None
        self._headers, self._body, self._received = {}, [], False
        self._settle_call = settle
        self.calls += 1
        self.transport.write(data)
        return self.calls

    def expire(self, call: int) -> None:
        if call == self.calls and self._settle_call is not None:
            self._settle(TimeoutError())
            self.close()  # a late answer must not be read as the next call's

    def close(self) -> None:
        self.closed = True
        if self.transport is not None:
            self.transport.close()

    def _settle(self, result: Answer | Exception) -> None:
        settle, self._settle_call = self._settle_call, None
        if settle is not None:
            settle(result)


# Told how a heartbeat call ended: the worker's answer, or the ConnectError it failed with.
Done = Callable[["pb.HeartbeatResponse | ConnectError"], None]


class WorkerHeartbeatClient:
    """Heartbeat calls to workers at `http://host:port[/prefix]`, one idle connection kept per
    worker between calls.

    `send` starts a call and reports its end to a callback, so that a round over thousands of
    workers needs no task or future per call; `heartbeat` awaits one call."""

    def __init__(self) -> None:
        self._idle: dict[tuple[str, int], list[_Connection]] = {}
        # Per worker address: the headers and timeout last sent there, where to connect, and the
        # request head up to its content length. A worker's calls differ only in their body.
        self._heads: dict[str, tuple[tuple, tuple[str, int], bytes]] = {}
        self._connecting: set[asyncio.Task] = set()
        # Calls' deadlines (loop time) in the order the calls were sent, one queue per timeout so
        # that each queue is in deadline order, and one timer at the earliest. A timer per call
        # cost more than the rest of a call's bookkeeping; an entry whose call has ended is
        # dropped when its time comes.
        self._deadlines: dict[float, deque[tuple[float, _Connection, int]]] = {}
        self._expiry: asyncio.TimerHandle | None = None
        self._expiry_at = math.inf

    async def heartbeat(
        self, address: str, request: pb.HeartbeatRequest, headers: dict[str, str], timeout_s: float
    ) -> pb.HeartbeatResponse:
        answer: asyncio.Future[pb.HeartbeatResponse | ConnectError] = (
            asyncio.get_running_loop().create_future()
        )
        self.send(
            address, request, headers, timeout_s, lambda result: answer.done() or answer.set_result(result)
        )
        result = await answer
        if isinstance(result, ConnectError):
            raise result
        return result

    def send(
        self,
        address: str,
        request: pb.HeartbeatRequest,
        headers: dict[str, str],
        timeout_s: float,
        done: Done,
    ) -> None:
        """Starts one heartbeat call; `done` is called once, later, from the loop. Raises
        ConnectError at once for an address that is not http://host:port."""
        variant = (timeout_s, *headers.items())
        known = self._heads.get(address)
        if known is None or known[0] != variant:
            known = self._heads[address] = (variant, *_head_for(address, headers, timeout_s))
        _, where, head = known
        body = request.SerializeToString()
        call = _Call(self, where, b"%scontent-length: %d\r\n\r\n%s" % (head, len(body), body), done)
        call.timeout_s = timeout_s
        call.deadline = asyncio.get_running_loop().time() + timeout_s
        connection = self._take_idle(where)
        if connection is None:
            self._connect(call)
        else:
            call.on(connection, reused=True)

    def _connect(self, call: _Call) -> None:
        task = asyncio.get_running_loop().create_task(self._open(call))
        self._connecting.add(task)
        task.add_done_callback(self._connecting.discard)

    async def _open(self, call: _Call) -> None:
        loop = asyncio.get_running_loop()
        try:
            async with asyncio.timeout_at(call.deadline):
                _, connection = await loop.create_connection(lambda: _Connection(call.where), *call.where)
        except TimeoutError:
            call.done(ConnectError(Code.DEADLINE_EXCEEDED, "Request timed out"))
            return
        except OSError as exc:
            call.done(ConnectError(Code.UNAVAILABLE, str(exc) or type(exc).__name__))
            return
        call.on(connection, reused=False)

    def _watch(self, connection: _Connection, call: int, timeout_s: float, deadline: float) -> None:
        queue = self._deadlines.get(timeout_s)
        if queue is None:
            queue = self._deadlines[timeout_s] = deque()
        queue.append((deadline, connection, call))
        if deadline < self._expiry_at:
            self._arm(deadline)

    def _arm(self, deadline: float) -> None:
        if self._expiry is not None:
            self._expiry.cancel()
        self._expiry_at = deadline
        self._expiry = asyncio.get_running_loop().call_at(deadline, self._expire_due)

    def _expire_due(self) -> None:
        self._expiry, self._expiry_at = None, math.inf
        now = asyncio.get_running_loop().time()
        earliest = math.inf
        for queue in self._deadlines.values():
            while queue and queue[0][0] <= now:
                _, connection, call = queue.popleft()
                connection.expire(call)
            if queue:
                earliest = min(earliest, queue[0][0])
        if earliest < math.inf:
            self._arm(earliest)

    def _take_idle(self, where: tuple[str, int]) -> _Connection | None:
        idle = self._idle.get(where)
        while idle:
            connection = idle.pop()
            if not connection.closed:
                return connection
        return None

    def _keep(self, connection: _Connection) -> None:
        if not connection.closed:
            self._idle.setdefault(connection.where, []).append(connection)

    def close(self) -> None:
        if self._expiry is not None:
            self._expiry.cancel()
        self._deadlines.clear()
        for task in self._connecting:
            task.cancel()
        for connections in self._idle.values():
            for connection in connections:
                connection.close()
        self._idle.clear()


class _Call:
    """One heartbeat call: its request's bytes, its deadline, and whom to tell how it ended."""

    __slots__ = ("_connection", "_reused", "client", "data", "deadline", "done", "timeout_s", "where")

    def __init__(self, client: WorkerHeartbeatClient, where: tuple[str, int], data: bytes, done: Done):
        self.client, self.where, self.data, self.done = client, where, data, done
        self.timeout_s = 0.0
        self.deadline = 0.0
        self._connection: _Connection | None = None
        self._reused = False

    def on(self, connection: _Connection, reused: bool) -> None:
        self._connection, self._reused = connection, reused
        self.client._watch(
            connection, connection.send(self.data, self._settled), self.timeout_s, self.deadline
        )

    def _settled(self, result: Answer | Exception) -> None:
        connection = self._connection
        assert connection is not None
        if isinstance(result, tuple):
            self.client._keep(connection)
            try:
                response = _decode_answer(*result)
            except ConnectError as exc:
                self.done(exc)
                return
            self.done(response)
            return
        connection.close()  # a late answer must not be read as the next call's
        if isinstance(result, _ConnectionEnded) and result.answered_nothing and self._reused:
            # The worker closed the idle connection as the request went out, so it never saw the
            # request: send it again on a new connection, as HTTP clients do.
            self.client._connect(self)
        elif isinstance(result, TimeoutError):
            self.done(ConnectError(Code.DEADLINE_EXCEEDED, "Request timed out"))
        elif isinstance(result, ConnectError):
            self.done(result)
        else:
            self.done(ConnectError(Code.UNAVAILABLE, str(result) or type(result).__name__))


def _head_for(address: str, headers: dict[str, str], timeout_s: float) -> tuple[tuple[str, int], bytes]:
    """Where to connect for `address`, and a heartbeat request's head without its content length."""
    parts = urlsplit(address)
    if parts.scheme != "http" or not parts.hostname:
        raise ConnectError(
            Code.UNAVAILABLE, f"worker address {address!r} is not http://host:port (a worker serves HTTP)"
        )
    extra = "".join(f"{name}: {value}\r\n" for name, value in headers.items())
    head = (
        f"POST {parts.path.rstrip('/')}{HEARTBEAT_PATH} HTTP/1.1\r\n"
        f"host: {parts.netloc}\r\n"
        "content-type: application/proto\r\n"
        "connect-protocol-version: 1\r\n"
        f"connect-timeout-ms: {int(timeout_s * 1000)}\r\n"
        f"{extra}"
    )
    return (parts.hostname, parts.port or 80), head.encode()


def _decode_answer(status: int, headers: dict[bytes, bytes], content: bytes) -> pb.HeartbeatResponse:
    encoding = headers.get(b"content-encoding", b"identity")
    if encoding == b"gzip":
        content = gzip.decompress(content)
    elif encoding != b"identity":
        unknown = encoding.decode(errors="replace")
        raise ConnectError(Code.INTERNAL, f"the worker answered with content encoding {unknown}, not gzip")
    if status == 200:
        response = pb.HeartbeatResponse()
        try:
            response.ParseFromString(content)
        except Exception as exc:  # noqa: BLE001 - protobuf's DecodeError and its C twin
            raise ConnectError(Code.INTERNAL, f"the worker's answer is no HeartbeatResponse: {exc}") from None
        return response
    raise error_of_answer(status, content)
