"""uvicorn serving an ASGI app (an actor server's) on a socket bound before it starts
(`iris.cluster.listening_socket`). The controller and the worker serve theirs through
`iris.rpc.unary_server`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import threading
from types import FrameType
from typing import Any

import uvicorn

from iris.cluster.listening_socket import IDLE_CONNECTION_TIMEOUT_S

logger = logging.getLogger(__name__)


class _PromptServer(uvicorn.Server):
    """uvicorn looks at `should_exit` every 0.1 s; here a stop (`request_exit`, or SIGTERM/SIGINT
    to a daemon serving in the foreground) also wakes that loop at once. A local cluster stops its
    controller and then its workers, each paying the wait otherwise."""

    def __init__(self, config: uvicorn.Config):
        super().__init__(config)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._wake: asyncio.Event | None = None
        # Set once the server accepts (uvicorn's `started`) or once serving ended without that:
        # what a starter waits for, woken at once rather than at its next look.
        self.started_or_ended = threading.Event()

    async def main_loop(self) -> None:
        self.started_or_ended.set()
        self._loop = asyncio.get_running_loop()
        self._wake = asyncio.Event()
        counter = 0
        while not await self.on_tick(counter):
            # Counted as uvicorn counts: on_tick's once-a-second work keys on it.
            counter = (counter + 1) % 864000
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), 0.1)

    def request_exit(self) -> None:
        """From any thread."""
        self.should_exit = True
        self._wake_loop()

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        super().handle_exit(sig, frame)
        self._wake_loop()

    def _wake_loop(self) -> None:
        loop, wake = self._loop, self._wake
        if loop is None or wake is None:
            return  # not serving yet: the loop sees should_exit on its first look
        with contextlib.suppress(RuntimeError):  # the loop has closed
            loop.call_soon_threadsafe(wake.set)


class HttpServer:
    """Runs an ASGI app (a Starlette app, or a bare Connect app with `lifespan="off"`) on a bound
    socket, in the foreground or in a background thread."""

    def __init__(self, app: Any, sock: socket.socket, lifespan: str = "on"):
        self._sock = sock
        self.host, self.port = sock.getsockname()[:2]
        self._server = _PromptServer(
            uvicorn.Config(
                app,
                log_level="warning",
                access_log=False,
                lifespan=lifespan,
                timeout_graceful_shutdown=2,
                timeout_keep_alive=IDLE_CONNECTION_TIMEOUT_S,
                loop="uvloop",
                proxy_headers=False,
            )
        )
        self._thread: threading.Thread | None = None

    def serve_forever(self) -> None:
        try:
            self._server.run(sockets=[self._sock])
        finally:
            self._server.started_or_ended.set()

    def start_in_thread(self, timeout: float = 30.0) -> None:
        self._thread = threading.Thread(target=self.serve_forever, name="http-server", daemon=True)
        self._thread.start()
        if not self._server.started_or_ended.wait(timeout):
            raise TimeoutError(f"timed out after {timeout}s waiting for the HTTP server to start")
        # uvicorn flips `started` once the lifespan startup finished and the socket accepts.
        if not self._server.started:
            raise RuntimeError("the HTTP server did not start; see the log above for the reason")

    def stop(self) -> None:
        self._server.request_exit()
        if self._thread is not None:
            self._thread.join(10)
        self._sock.close()
