"""pods/portforward: both wire protocols clients speak, bridged to the Pod's ports on loopback (the
fake's Pods share the host network).

- WebSocket `v4.channel.k8s.io` (the Python client): two channels per requested port, data 2i and
  error 2i+1; the server's first frame on each is the port (2 bytes, little-endian); the server
  closes the WebSocket once a backend connection closes.
- SPDY/3.1 (kubectl, after the HTTP upgrade): per forwarded connection the client opens an `error`
  and a `data` stream (headers `streamtype`, `port`, `requestID`); the server answers each
  SYN_STREAM with a SYN_REPLY, bridges the data stream to the port, and writes failures to the
  error stream. Header blocks are zlib-compressed with SPDY/3's dictionary, one compression
  context per direction for the whole connection.
"""

from __future__ import annotations

import socket
import struct
import threading
import zlib
from typing import Any, BinaryIO

from fakes.kubernetes.websocket import ConnectionClosed, WebSocket

_SPDY_VERSION = 3
SYN_STREAM, SYN_REPLY, RST_STREAM, SETTINGS, PING, GOAWAY, HEADERS, WINDOW_UPDATE = 1, 2, 3, 4, 6, 7, 8, 9
FLAG_FIN = 0x01
_CHUNK = 32 * 1024


def _connect(port: int) -> socket.socket:
    return socket.create_connection(("127.0.0.1", port), timeout=10)


# -- WebSocket (v4.channel.k8s.io) ----------------------------------------------------------------


def serve_websocket(websocket: WebSocket, ports: list[int]) -> None:
    backends: dict[int, socket.socket] = {}
    for index, port in enumerate(ports):
        websocket.send(bytes([2 * index]) + struct.pack("<H", port))
        websocket.send(bytes([2 * index + 1]) + struct.pack("<H", port))
        try:
            backend = _connect(port)
        except OSError as exc:
            websocket.send(bytes([2 * index + 1]) + f"error forwarding port {port}: {exc}".encode())
            websocket.close()
            return
        backend.settimeout(None)
        backends[index] = backend
        threading.Thread(target=_pump_to_websocket, args=(backend, websocket, 2 * index), daemon=True).start()
    try:
        while not websocket.closed:
            _, message = websocket.receive()
            if len(message) < 1 or message[0] % 2:
                continue
            backend = backends.get(message[0] // 2)
            if backend is not None and len(message) > 1:
                backend.sendall(message[1:])
    except (ConnectionClosed, OSError):
        pass
    finally:
        for backend in backends.values():
            backend.close()


def _pump_to_websocket(backend: socket.socket, websocket: WebSocket, channel: int) -> None:
    try:
        while data := backend.recv(_CHUNK):
            websocket.send(bytes([channel]) + data)
    except OSError:
        pass
    websocket.close()


# -- SPDY/3.1 --------------------------------------------------------------------------------------


def _header_block(headers: dict[str, str]) -> bytes:
    block = struct.pack(">I", len(headers))
    for name, value in headers.items():
        encoded_name, encoded_value = name.lower().encode(), value.encode()
        block += (
            struct.pack(">I", len(encoded_name))
            + encoded_name
            + struct.pack(">I", len(encoded_value))
            + encoded_value
        )
    return block


def _parse_header_block(block: bytes) -> dict[str, str]:
    (count,) = struct.unpack(">I", block[:4])
    offset, headers = 4, {}
    for _ in range(count):
        (length,) = struct.unpack(">I", block[offset : offset + 4])
        name = block[offset + 4 : offset + 4 + length].decode()
        offset += 4 + length
        (length,) = struct.unpack(">I", block[offset : offset + 4])
        headers[name] = block[offset + 4 : offset + 4 + length].decode()
        offset += 4 + length
    return headers


class SpdyPortForward:
    """One upgraded kubectl connection: streams in, forwarded TCP connections out."""

    def __init__(self, sock: socket.socket, reader: BinaryIO, pod_ports: set[int] | None = None) -> None:
        from spdy.dictionary import zdict

        self._sock = sock
        self._reader = reader
        self._write_lock = threading.Lock()
        self._inflater = zlib.decompressobj(zdict=zdict)
        self._deflater = zlib.compressobj(zdict=zdict)
        # requestID -> {"data": stream id, "error": stream id, "port": int}
        self._requests: dict[str, dict[str, Any]] = {}
        self._backends: dict[int, socket.socket] = {}
        self._closed = False

    def serve(self) -> None:
        try:
            while not self._closed:
                self._handle_frame()
        except (OSError, struct.error, EOFError):
            pass
        finally:
            self._closed = True
            for backend in list(self._backends.values()):
                backend.close()

    # -- frames ---------------------------------------------------------------------------------

    def _read(self, count: int) -> bytes:
        data = self._reader.read(count)
        if data is None or len(data) < count:
            raise EOFError()
        return data

    def _handle_frame(self) -> None:
        first, second = struct.unpack(">II", self._read(8))
        flags, length = second >> 24, second & 0xFFFFFF
        payload = self._read(length) if length else b""
        if not first & 0x80000000:
            self._on_data(first & 0x7FFFFFFF, flags, payload)
            return
        kind = first & 0xFFFF
        if kind == SYN_STREAM:
            stream_id = struct.unpack(">I", payload[:4])[0] & 0x7FFFFFFF
            headers = _parse_header_block(self._inflater.decompress(payload[10:]))
            self._on_syn_stream(stream_id, flags, headers)
        elif kind == PING:
            self._write_control(PING, 0, payload)
        elif kind == RST_STREAM:
            stream_id = struct.unpack(">I", payload[:4])[0] & 0x7FFFFFFF
            backend = self._backends.pop(stream_id, None)
            if backend is not None:
                backend.close()
        elif kind == GOAWAY:
            self._closed = True
        elif kind == HEADERS:
            self._inflater.decompress(payload[4:])

    def _write_control(self, kind: int, flags: int, payload: bytes) -> None:
        header = struct.pack(">HHI", 0x8000 | _SPDY_VERSION, kind, (flags << 24) | len(payload))
        with self._write_lock:
            self._sock.sendall(header + payload)

    def _write_data(self, stream_id: int, data: bytes, fin: bool = False) -> None:
        with self._write_lock:
            if self._closed:
                return
            self._sock.sendall(
                struct.pack(">II", stream_id, ((FLAG_FIN if fin else 0) << 24) | len(data)) + data
            )

    def _reply(self, stream_id: int) -> None:
        with self._write_lock:
            block = self._deflater.compress(_header_block({})) + self._deflater.flush(zlib.Z_SYNC_FLUSH)
        self._write_control(SYN_REPLY, 0, struct.pack(">I", stream_id) + block)

    # -- streams --------------------------------------------------------------------------------

    def _on_syn_stream(self, stream_id: int, flags: int, headers: dict[str, str]) -> None:
        self._reply(stream_id)
        request = self._requests.setdefault(headers.get("requestid", ""), {})
        request[headers.get("streamtype", "")] = stream_id
        request["port"] = int(headers.get("port", "0"))
        if "data" in request and "error" in request and "backend" not in request:
            self._open_backend(request)

    def _open_backend(self, request: dict[str, Any]) -> None:
        port, data_stream, error_stream = request["port"], request["data"], request["error"]
        try:
            backend = _connect(port)
        except OSError as exc:
            self._write_data(error_stream, f"error forwarding port {port} to pod: {exc}".encode(), fin=True)
            self._write_data(data_stream, b"", fin=True)
            request["backend"] = None
            return
        backend.settimeout(None)
        request["backend"] = backend
        self._backends[data_stream] = backend
        threading.Thread(target=self._pump, args=(backend, data_stream, error_stream), daemon=True).start()

    def _pump(self, backend: socket.socket, data_stream: int, error_stream: int) -> None:
        try:
            while data := backend.recv(_CHUNK):
                self._write_data(data_stream, data)
        except OSError:
            pass
        try:
            self._write_data(data_stream, b"", fin=True)
            self._write_data(error_stream, b"", fin=True)
        except OSError:
            pass

    def _on_data(self, stream_id: int, flags: int, data: bytes) -> None:
        backend = self._backends.get(stream_id)
        if backend is None:
            return
        try:
            if data:
                backend.sendall(data)
            if flags & FLAG_FIN:
                backend.shutdown(socket.SHUT_WR)
        except OSError:
            self._backends.pop(stream_id, None)
