"""Serves one HTTP request through an ASGI application, for the lean unary server's requests that
are none of its Connect methods (the controller's dashboard, /health, /metrics: Starlette routes).

The request's body has already been read whole; the application's answer is collected whole too
and written in one piece, so a route that streams its answer is not served here (none does: a
dashboard page and its files come from memory).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, MutableMapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote

logger = logging.getLogger(__name__)

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
AsgiApp = Callable[[Scope, Receive, Send], Awaitable[None]]


class _Exchange:
    """The request as the application reads it, and the answer as it writes it."""

    def __init__(self, body: bytes) -> None:
        self.body = body
        self.body_read = False
        self.answered = asyncio.Event()
        self.status: int | None = None
        self.headers: list[tuple[bytes, bytes]] = []
        self.chunks: list[bytes] = []

    async def receive(self) -> Message:
        if not self.body_read:
            self.body_read = True
            return {"type": "http.request", "body": self.body, "more_body": False}
        # As a server does once the answer is out: the application learns the exchange is over.
        await self.answered.wait()
        return {"type": "http.disconnect"}

    async def send(self, message: Message) -> None:
        kind = message["type"]
        if kind == "http.response.start":
            self.status = int(message["status"])
            self.headers = [(bytes(name).lower(), bytes(value)) for name, value in message.get("headers", ())]
        elif kind == "http.response.body":
            self.chunks.append(bytes(message.get("body", b"")))
            if not message.get("more_body", False):
                self.answered.set()


def scope_for(
    method: str,
    target: str,
    http_version: str,
    headers: dict[str, str],
    client: tuple[str, int] | None,
    server: tuple[str, int] | None,
) -> Scope:
    path, _, query = target.partition("?")
    return {
        "type": "http",
        "asgi": {"version": "3.0", "spec_version": "2.3"},
        "http_version": http_version,
        "method": method,
        "scheme": "http",
        "path": unquote(path),
        "raw_path": path.encode("latin-1"),
        "query_string": query.encode("latin-1"),
        "root_path": "",
        "headers": [(name.encode("latin-1"), value.encode("latin-1")) for name, value in headers.items()],
        "client": client,
        "server": server,
    }


@dataclass(frozen=True, slots=True)
class AsgiAnswer:
    status: int
    headers: list[tuple[bytes, bytes]]
    body: bytes
    # The application failed after it had answered (Starlette's error handler answers 500, then
    # raises again): the connection is closed after the answer, as uvicorn closes it.
    close_after: bool = False


class AnswerBroken(Exception):
    """The application failed after it had begun its answer: the connection can only be closed."""


_SERVER_ERROR = AsgiAnswer(500, [(b"content-type", b"text/plain; charset=utf-8")], b"Internal Server Error")


async def answer_through(app: AsgiApp, scope: Scope, body: bytes) -> AsgiAnswer:
    """The application's whole answer to the request. One that fails before answering is answered
    500; one that fails halfway through its answer raises `AnswerBroken`."""
    exchange = _Exchange(body)
    try:
        await app(scope, exchange.receive, exchange.send)
    except Exception as exc:  # noqa: BLE001 - the application's failure is logged and answered
        logger.exception("Exception in ASGI application")
        if exchange.status is None:
            return _SERVER_ERROR
        if not exchange.answered.is_set():
            raise AnswerBroken(str(exc)) from exc
        return AsgiAnswer(exchange.status, exchange.headers, b"".join(exchange.chunks), close_after=True)
    finally:
        exchange.answered.set()
    if exchange.status is None:
        logger.error("the ASGI application returned without answering %s %s", scope["method"], scope["path"])
        return _SERVER_ERROR
    return AsgiAnswer(exchange.status, exchange.headers, b"".join(exchange.chunks))
