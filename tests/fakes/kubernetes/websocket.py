"""The server side of RFC 6455 WebSockets, enough for the exec and portforward channel protocols.

The Kubernetes channel protocols (`v4.channel.k8s.io`, `v5.channel.k8s.io`) put a channel byte in
front of every binary message: 0 stdin, 1 stdout, 2 stderr, 3 error/status (JSON), 4 resize,
255 close (v5: followed by the channel being closed).
"""

from __future__ import annotations

import base64
import hashlib
import socket
import struct
import threading

_GUID = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"
OP_CONTINUATION, OP_TEXT, OP_BINARY, OP_CLOSE, OP_PING, OP_PONG = 0x0, 0x1, 0x2, 0x8, 0x9, 0xA


def accept_key(key: str) -> str:
    return base64.b64encode(hashlib.sha1((key + _GUID).encode()).digest()).decode()


class ConnectionClosed(Exception):
    pass


class WebSocket:
    def __init__(self, sock: socket.socket, reader: object) -> None:
        self._sock = sock
        # The HTTP server's buffered reader may already hold the first frames.
        self._reader = reader
        self._send_lock = threading.Lock()
        self.closed = False

    def _read_exact(self, count: int) -> bytes:
        data = self._reader.read(count)  # type: ignore[attr-defined]
        if data is None or len(data) < count:
            raise ConnectionClosed()
        return data

    def receive(self) -> tuple[int, bytes]:
        """The next whole message as (opcode, payload); answers pings, raises on close."""
        message = b""
        message_opcode = None
        while True:
            first, second = self._read_exact(2)
            final, opcode = first & 0x80, first & 0x0F
            length = second & 0x7F
            if length == 126:
                (length,) = struct.unpack("!H", self._read_exact(2))
            elif length == 127:
                (length,) = struct.unpack("!Q", self._read_exact(8))
            mask = self._read_exact(4) if second & 0x80 else b""
            payload = self._read_exact(length) if length else b""
            if mask:
                payload = bytes(b ^ mask[i % 4] for i, b in enumerate(payload))
            if opcode == OP_CLOSE:
                self.close()
                raise ConnectionClosed()
            if opcode == OP_PING:
                self._send_frame(OP_PONG, payload)
                continue
            if opcode == OP_PONG:
                continue
            if opcode != OP_CONTINUATION:
                message_opcode = opcode
            message += payload
            if final:
                return message_opcode or OP_BINARY, message

    def send(self, payload: bytes, opcode: int = OP_BINARY) -> None:
        self._send_frame(opcode, payload)

    def _send_frame(self, opcode: int, payload: bytes) -> None:
        header = bytes([0x80 | opcode])
        length = len(payload)
        if length < 126:
            header += bytes([length])
        elif length < 1 << 16:
            header += bytes([126]) + struct.pack("!H", length)
        else:
            header += bytes([127]) + struct.pack("!Q", length)
        with self._send_lock:
            if self.closed:
                return
            try:
                self._sock.sendall(header + payload)
            except OSError:
                self.closed = True

    def close(self, code: int = 1000) -> None:
        if self.closed:
            return
        self._send_frame(OP_CLOSE, struct.pack("!H", code))
        self.closed = True
