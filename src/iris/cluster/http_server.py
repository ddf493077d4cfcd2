"""A daemon's listening socket, and uvicorn serving an ASGI app on it (an actor server's).

The socket is bound before the server starts so that port 0 works (the daemon learns its real
port and can register or advertise it), and so a bind failure is reported before anything else
runs. The controller and the worker serve theirs through `iris.rpc.unary_server`.
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

from iris.time import wait_until

logger = logging.getLogger(__name__)

# How long a server keeps an idle client connection open. uvicorn's 5 s default equals the
# default heartbeat interval, so a worker closed the controller's connection just as the next
# heartbeat was due and every heartbeat paid for a new connection on both ends.
IDLE_CONNECTION_TIMEOUT_S = 120


class PortInUseError(OSError):
    pass


def url_for(sock: socket.socket, advertised_host: str | None = None) -> str:
    host, port = sock.getsockname()[:2]
    if advertised_host:
        host = advertised_host
    elif host in ("0.0.0.0", ""):
        host = "127.0.0.1"
    return f"http://{host}:{port}"


def bind_socket(host: str, port: int) -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    # Accepted connections inherit this; without it Nagle's algorithm meets the client's delayed
    # ACK and every RPC response stalls ~40 ms.
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        raise PortInUseError(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from None
    sock.listen(2048)
    sock.set_inheritable(False)
    return sock


class _PromptServer(uvicorn.Server):
    """uvicorn looks at `should_exit` every 0.1 s; here a stop (`request_exit`, or SIGTERM/SIGINT
    to a daemon serving in the foreground) also wakes that loop at once. A local cluster stops its
    controller and then its workers, each paying the wait otherwise."""

    def __init__(self, config: uvicorn.Config):
        super().__init__(config)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._wake: asyncio.Event | None = None

    async def main_loop(self) -> None:
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
        self._server.run(sockets=[self._sock])

    def start_in_thread(self, timeout: float = 30.0) -> None:
        self._thread = threading.Thread(target=self.serve_forever, name="http-server", daemon=True)
        self._thread.start()
        thread = self._thread
        # uvicorn flips `started` once the lifespan startup finished and the socket accepts.
        wait_until(lambda: self._server.started or not thread.is_alive(), timeout, 0.01, "the HTTP server to start")
        if not self._server.started:
            raise RuntimeError("the HTTP server did not start; see the log above for the reason")

    def stop(self) -> None:
        self._server.request_exit()
        if self._thread is not None:
            self._thread.join(10)
        self._sock.close()
