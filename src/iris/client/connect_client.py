"""A Connect unary client on kept-alive HTTP/1.1 connections: how `IrisClient` calls the controller.

connectrpc's sync client sends through pyqwest (reqwest on a tokio runtime of its own): a call
cost the calling thread ~75 µs of CPU and the runtime's threads ~100 µs more, most of it handing
the request over and the answer back. Here a call is one `sendall` of the request and the
`recv`s of its answer on the caller's thread, parsed by httptools: binary Connect messages,
`connect-timeout-ms` deadlines, gzip-compressed answers when asked for, and Connect's JSON errors
raised as `ConnectError`, as connectrpc raises them. Failures to reach the server are
`unavailable` with "Request failed: ..." and a deadline that passed is `deadline_exceeded`
("Request timed out"), connectrpc's codes and messages.

Connections are pooled for the threads sharing a client. One the server closed while it sat
idle is found when a request on it gets no answer at all: the request goes again, once, on a new
connection (the server had not read it: it closes only connections with nothing in flight).
"""

from __future__ import annotations

import ctypes
import gzip
import socket
import ssl
import sys
import threading
import time
import zlib
from collections.abc import Mapping
from urllib.parse import urlsplit

import httptools
from connectrpc.code import Code
from connectrpc.errors import ConnectError
from google.protobuf.descriptor import ServiceDescriptor
from google.protobuf.message import DecodeError, Message
from google.protobuf.message_factory import GetMessageClass

from iris.rpc.connect_errors import error_of_answer
from iris.rpc.method_names import python_name

# Under glibc's threshold for mapping an allocation of its own: a larger buffer cost every call
# an mmap, an mremap and a munmap (the answer shrinks it before it is freed).
_RECV_BYTES = 64 * 1024
# What a call raises when its deadline passes: a blocking socket whose kernel timeout ran out
# raises BlockingIOError, or with TLS one of the SSLWant errors.
_TIMED_OUT = (TimeoutError, BlockingIOError, ssl.SSLWantReadError, ssl.SSLWantWriteError)


class _Answer:
    """httptools' callbacks for one response."""

    __slots__ = ("status", "headers", "body", "complete")

    def __init__(self) -> None:
        self.status = 0
        self.headers: dict[str, str] = {}
        self.body: list[bytes] = []
        self.complete = False

    def on_header(self, name: bytes, value: bytes) -> None:
        self.headers[name.decode("latin-1").lower()] = value.decode("latin-1")

    def on_body(self, body: bytes) -> None:
        self.body.append(body)

    def on_message_complete(self) -> None:
        self.complete = True


class _NoAnswer(OSError):
    """The connection ended before a byte of the answer came back."""


class ConnectClient:
    """Calls the unary methods of `service` at `url` by their snake_case names, as the generated
    clients name them. `headers` go with every call (a bearer token). Thread-safe."""

    def __init__(
        self, url: str, service: ServiceDescriptor, timeout_ms: int, headers: Mapping[str, str] | None = None
    ) -> None:
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"not an http:// or https:// URL: {url!r}")
        self._address = (parts.hostname, parts.port or (443 if parts.scheme == "https" else 80))
        self._tls = ssl.create_default_context() if parts.scheme == "https" else None
        self._timeout_ms = timeout_ms
        host = parts.netloc.rsplit("@", 1)[-1]
        fixed = {"host": host, "content-type": "application/proto", "connect-protocol-version": "1"}
        fixed.update({name.lower(): value for name, value in (headers or {}).items()})
        self._fixed_headers = "".join(f"{name}: {value}\r\n" for name, value in fixed.items())
        prefix = parts.path.rstrip("/")
        self._methods = {
            python_name(method.name): (
                f"{prefix}/{service.full_name}/{method.name}",
                GetMessageClass(method.output_type),
            )
            for method in service.methods
        }
        self._idle: list[socket.socket] = []
        self._lock = threading.Lock()

    def call(
        self, method: str, request: Message, timeout_ms: int | None = None, accept_gzip: bool = False
    ) -> Message:
        path, answer_class = self._methods[method]
        timeout_ms = self._timeout_ms if timeout_ms is None else timeout_ms
        if timeout_ms <= 0:
            raise ConnectError(Code.DEADLINE_EXCEEDED, "Request timed out")
        body = request.SerializeToString()
        head = (
            f"POST {path} HTTP/1.1\r\n{self._fixed_headers}connect-timeout-ms: {timeout_ms}\r\n"
            f"{'accept-encoding: gzip' if accept_gzip else 'accept-encoding: identity'}\r\n"
            f"content-length: {len(body)}\r\n\r\n"
        )
        answer = self._exchange(head.encode("latin-1") + body, time.monotonic() + timeout_ms / 1000)
        return _decoded(answer, answer_class)

    def _exchange(self, data: bytes, deadline: float) -> _Answer:
        sock, reused = self._connection(deadline)
        try:
            try:
                answer = _send(sock, data, deadline)
            except _NoAnswer:
                if not reused:
                    raise
                sock.close()
                sock, reused = self._new_connection(deadline), False
                answer = _send(sock, data, deadline)
        except _TIMED_OUT:
            sock.close()
            raise ConnectError(Code.DEADLINE_EXCEEDED, "Request timed out") from None
        except OSError as exc:
            sock.close()
            raise ConnectError(Code.UNAVAILABLE, f"Request failed: {_reason(exc)}") from None
        if answer.headers.get("connection", "").lower() == "close":
            sock.close()
        else:
            with self._lock:
                self._idle.append(sock)
        return answer

    def _connection(self, deadline: float) -> tuple[socket.socket, bool]:
        with self._lock:
            if self._idle:
                return self._idle.pop(), True
        try:
            return self._new_connection(deadline), False
        except _TIMED_OUT:
            raise ConnectError(Code.DEADLINE_EXCEEDED, "Request timed out") from None
        except OSError as exc:
            raise ConnectError(Code.UNAVAILABLE, f"Request failed: {_reason(exc)}") from None

    def _new_connection(self, deadline: float) -> socket.socket:
        sock = socket.create_connection(self._address, timeout=max(deadline - time.monotonic(), 0.001))
        # Without it Nagle's algorithm holds a request's last segment for the server's delayed ACK.
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if self._tls is not None:
            # TLS keeps Python's timeout: on a blocking socket, CPython's TLS layer retries a read
            # the kernel's timeout ended, and would wait for ever.
            return self._tls.wrap_socket(sock, server_hostname=self._address[0])
        # Blocking from here on, with the kernel's send and receive timeouts as the deadline: a
        # socket with a Python timeout polls before each send and receive, and like those (and the
        # ioctl that sets the timeout) each poll lets go of the interpreter, which a busy process
        # (a controller serving its clients' threads) then hands to another thread and back.
        sock.settimeout(None)
        return sock

    def close(self) -> None:
        with self._lock:
            idle, self._idle = self._idle, []
        for sock in idle:
            sock.close()


class _Timeval(ctypes.Structure):
    """struct timeval, for SO_SNDTIMEO and SO_RCVTIMEO: suseconds_t is an int on macOS, a long on Linux."""

    _fields_ = (("tv_sec", ctypes.c_long), ("tv_usec", ctypes.c_int32 if sys.platform == "darwin" else ctypes.c_long))


def _limit(sock: socket.socket, option: int, deadline: float) -> None:
    """Let the next sends (SO_SNDTIMEO) or receives (SO_RCVTIMEO) on `sock` block until `deadline`;
    a socket in Python's timeout mode (TLS) gets that timeout instead."""
    remaining = deadline - time.monotonic()
    if remaining <= 0:
        raise TimeoutError
    if sock.gettimeout() is not None:
        sock.settimeout(remaining)
        return
    seconds, fraction = divmod(remaining, 1.0)
    # A timeout of zero would mean none at all.
    timeval = _Timeval(int(seconds), max(int(fraction * 1_000_000), 0 if seconds else 1))
    sock.setsockopt(socket.SOL_SOCKET, option, bytes(timeval))


def _send(sock: socket.socket, data: bytes, deadline: float) -> _Answer:
    answer = _Answer()
    parser = httptools.HttpResponseParser(answer)
    try:
        _limit(sock, socket.SO_SNDTIMEO, deadline)
        sock.sendall(data)
        _limit(sock, socket.SO_RCVTIMEO, deadline)
        chunk = sock.recv(_RECV_BYTES)
    except (ConnectionResetError, BrokenPipeError) as exc:
        raise _NoAnswer(_reason(exc)) from None
    if not chunk:
        raise _NoAnswer("the server closed the connection")
    while True:
        try:
            parser.feed_data(chunk)
        except httptools.HttpParserError as exc:
            raise ConnectionResetError(f"malformed HTTP answer: {exc}") from None
        if answer.complete:
            break
        _limit(sock, socket.SO_RCVTIMEO, deadline)
        chunk = sock.recv(_RECV_BYTES)
        if not chunk:
            raise ConnectionResetError("the server closed the connection before its answer ended")
    answer.status = parser.get_status_code()
    return answer


def _reason(exc: OSError) -> str:
    return exc.strerror or str(exc) or type(exc).__name__


def _decoded(answer: _Answer, answer_class: type[Message]) -> Message:
    status = answer.status
    body = b"".join(answer.body)
    encoding = answer.headers.get("content-encoding", "identity")
    if encoding == "gzip":
        try:
            body = gzip.decompress(body)
        except (OSError, EOFError, zlib.error) as exc:
            raise ConnectError(Code.INTERNAL, f"the gzip-compressed answer is corrupt: {exc}") from None
    elif encoding != "identity":
        raise ConnectError(Code.INTERNAL, f"unknown encoding '{encoding}'; accepted encodings are gzip")
    content_type = answer.headers.get("content-type", "").split(";", 1)[0].strip().lower()
    if status != 200:
        raise error_of_answer(status, body)
    if content_type != "application/proto":
        raise ConnectError(
            Code.UNKNOWN, f"invalid content-type: '{content_type}'; expecting 'application/proto'"
        )
    try:
        return answer_class.FromString(body)
    except DecodeError as exc:
        raise ConnectError(
            Code.INTERNAL, f"the answer is no {answer_class.DESCRIPTOR.full_name}: {exc}"
        ) from None
