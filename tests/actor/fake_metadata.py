"""A GCE metadata server on loopback, speaking the real server's protocol for custom attributes.

What GcsResolver relies on, as the real server behaves: requests without `Metadata-Flavor: Google`
are refused with 403; `/computeMetadata/v1/{instance,project}/attributes/?recursive=true` answers a
JSON object of the attributes; without `recursive` a directory answers its keys one per line; a
single key answers its raw value; unknown keys are 404; every answer carries `Metadata-Flavor:
Google`.
"""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit

PREFIX = "/computeMetadata/v1/"


class FakeMetadataServer:
    def __init__(self) -> None:
        self.attributes: dict[str, dict[str, str]] = {"instance": {}, "project": {}}
        self.requests: list[str] = []
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:
                return

            def _answer(self, status: int, body: str, content_type: str = "application/text") -> None:
                data = body.encode()
                self.send_response(status)
                self.send_header("Metadata-Flavor", "Google")
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self) -> None:
                server.requests.append(self.path)
                if self.headers.get("Metadata-Flavor") != "Google":
                    self._answer(403, "Missing required header: Metadata-Flavor\n", "text/html")
                    return
                parts = urlsplit(self.path)
                recursive = parse_qs(parts.query).get("recursive", ["false"])[0] == "true"
                if not parts.path.startswith(PREFIX):
                    self._answer(404, "not found\n", "text/html")
                    return
                scope, _, rest = parts.path.removeprefix(PREFIX).partition("/")
                attributes = server.attributes.get(scope)
                if attributes is None or not rest.startswith("attributes"):
                    self._answer(404, "not found\n", "text/html")
                    return
                key = rest.removeprefix("attributes").strip("/")
                if not key:
                    if recursive:
                        self._answer(200, json.dumps(attributes), "application/json")
                    else:
                        self._answer(200, "".join(f"{k}\n" for k in sorted(attributes)))
                    return
                if key not in attributes:
                    self._answer(404, "not found\n", "text/html")
                    return
                self._answer(200, attributes[key])

        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.host = f"127.0.0.1:{self._httpd.server_address[1]}"
        self._thread = threading.Thread(target=self._httpd.serve_forever, daemon=True)

    def start(self) -> FakeMetadataServer:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()
