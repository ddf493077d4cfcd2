"""A daemon's listening socket, bound before its server starts.

Binding first makes port 0 work (the daemon learns its real port and can register or advertise
it) and reports a bind failure before anything else runs. Apart from the HTTP server
(`iris.cluster.http_server`), so that a process that only binds or names a socket (a worker, whose
server is `iris.rpc.unary_server`, or a local cluster before its controller is built) does not
import uvicorn and Starlette.
"""

from __future__ import annotations

import socket

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
