"""Named ports for tasks: each name gets a free host port, exported as IRIS_PORT_<NAME>."""

from __future__ import annotations

import socket
import threading
from collections.abc import Hashable, Iterable


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("", 0))
        return sock.getsockname()[1]


class PortAllocator:
    """Hands out ports the OS reports free, never giving one port to two live owners."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._by_owner: dict[Hashable, dict[str, int]] = {}

    def allocate(self, names: Iterable[str], owner: Hashable) -> dict[str, int]:
        with self._lock:
            in_use = {port for ports in self._by_owner.values() for port in ports.values()}
            ports: dict[str, int] = {}
            for name in names:
                port = _free_port()
                while port in in_use:
                    port = _free_port()
                in_use.add(port)
                ports[name] = port
            if ports:
                self._by_owner[owner] = ports
            return ports

    def release(self, owner: Hashable) -> None:
        with self._lock:
            self._by_owner.pop(owner, None)
