"""The HTTP face of the fake: routing of the TPU v2 and Compute v1 URLs gcloud calls.

gcloud puts `/v2/` (TPU) or `/compute/v1/` (Compute) after the endpoint override and adds
`?alt=json`; bodies are JSON both ways. Each route names the IAM permission it needs, which is what
an injected PERMISSION_DENIED says was missing.
"""

from __future__ import annotations

import json
import logging
import re
import threading
from collections.abc import Callable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qsl, urlsplit

from fakes.gcp.errors import ApiError

if TYPE_CHECKING:
    from fakes.gcp.fake import FakeGcp

logger = logging.getLogger("fake-gcp")

Handler = Callable[..., dict[str, Any]]


@dataclass(frozen=True)
class Route:
    api: str  # "tpu" or "compute": which error body shape to answer with
    pattern: re.Pattern[str]
    # method -> (handler name on the API object, IAM permission it needs)
    methods: dict[str, tuple[str, str]]


_SEGMENT = r"([^/:]+)"
_TPU = rf"/v2/projects/{_SEGMENT}/locations/{_SEGMENT}"
_COMPUTE = rf"/compute/v1/projects/{_SEGMENT}"

ROUTES = (
    Route(
        "tpu",
        re.compile(rf"{_TPU}/nodes"),
        {"GET": ("list", "tpu.nodes.list"), "POST": ("create", "tpu.nodes.create")},
    ),
    Route(
        "tpu",
        re.compile(rf"{_TPU}/nodes/{_SEGMENT}"),
        {
            "GET": ("get", "tpu.nodes.get"),
            "DELETE": ("delete", "tpu.nodes.delete"),
            "PATCH": ("update", "tpu.nodes.update"),
        },
    ),
    Route(
        "tpu",
        re.compile(rf"{_TPU}/nodes/{_SEGMENT}:getGuestAttributes"),
        {"POST": ("guest_attributes", "tpu.nodes.get")},
    ),
    Route(
        "tpu", re.compile(rf"{_TPU}/operations/{_SEGMENT}"), {"GET": ("get_operation", "tpu.operations.get")}
    ),
    Route("compute", re.compile(_COMPUTE), {"GET": ("get_project", "compute.projects.get")}),
    Route(
        "compute",
        re.compile(rf"{_COMPUTE}/setCommonInstanceMetadata"),
        {"POST": ("set_common_metadata", "compute.projects.setCommonInstanceMetadata")},
    ),
    Route(
        "compute",
        re.compile(rf"{_COMPUTE}/global/operations/{_SEGMENT}"),
        {"GET": ("get_global_operation", "compute.globalOperations.get")},
    ),
    Route(
        "compute",
        re.compile(rf"{_COMPUTE}/global/operations/{_SEGMENT}/wait"),
        {"POST": ("wait_global_operation", "compute.globalOperations.get")},
    ),
    Route("compute", re.compile(rf"{_COMPUTE}/zones"), {"GET": ("list_zones", "compute.zones.list")}),
    Route("compute", re.compile(rf"{_COMPUTE}/zones/{_SEGMENT}"), {"GET": ("get_zone", "compute.zones.get")}),
    Route(
        "compute",
        re.compile(rf"{_COMPUTE}/zones/{_SEGMENT}/instances"),
        {"GET": ("list_instances", "compute.instances.list"), "POST": ("insert", "compute.instances.create")},
    ),
    Route(
        "compute",
        re.compile(rf"{_COMPUTE}/zones/{_SEGMENT}/instances/{_SEGMENT}"),
        {"GET": ("get_instance", "compute.instances.get"), "DELETE": ("delete", "compute.instances.delete")},
    ),
    Route(
        "compute",
        re.compile(rf"{_COMPUTE}/zones/{_SEGMENT}/instances/{_SEGMENT}/setMetadata"),
        {"POST": ("set_metadata", "compute.instances.setMetadata")},
    ),
    Route(
        "compute",
        re.compile(rf"{_COMPUTE}/zones/{_SEGMENT}/instances/{_SEGMENT}/setLabels"),
        {"POST": ("set_labels", "compute.instances.setLabels")},
    ),
    Route(
        "compute",
        re.compile(rf"{_COMPUTE}/zones/{_SEGMENT}/operations/{_SEGMENT}"),
        {"GET": ("get_zone_operation", "compute.zoneOperations.get")},
    ),
    Route(
        "compute",
        re.compile(rf"{_COMPUTE}/zones/{_SEGMENT}/operations/{_SEGMENT}/wait"),
        {"POST": ("wait_zone_operation", "compute.zoneOperations.get")},
    ),
    Route(
        "compute",
        re.compile(rf"{_COMPUTE}/aggregated/instances"),
        {"GET": ("aggregated_instances", "compute.instances.list")},
    ),
)


def resolve(method: str, path: str) -> tuple[Route, str, str, list[str]]:
    """The route, handler name, permission and path arguments (project first) for a request."""
    for route in ROUTES:
        match = route.pattern.fullmatch(path)
        if match:
            if method not in route.methods:
                raise ApiError(405, f"Method {method} is not allowed on {path}")
            handler, permission = route.methods[method]
            return route, handler, permission, list(match.groups())
    raise ApiError(404, f"The requested URL {path} was not found on this server.")


class _RequestHandler(BaseHTTPRequestHandler):
    server: _Server
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:
        logger.debug("%s %s", self.address_string(), format % args)

    def _handle(self) -> None:
        fake = self.server.fake
        parts = urlsplit(self.path)
        query = dict(parse_qsl(parts.query))
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        api = "tpu" if parts.path.startswith("/v2/") else "compute"
        try:
            body = json.loads(raw) if raw else {}
            status, answer = 200, fake.handle(self.command, parts.path, query, body)
        except ApiError as error:
            status = error.code
            answer = error.tpu_body() if api == "tpu" else error.compute_body()
        except json.JSONDecodeError as error:
            status, answer = 400, ApiError(400, f"Invalid JSON payload received. {error}").tpu_body()
        except Exception:  # a bug in the fake: answer like a server error, keep serving
            logger.exception("fake GCP failed on %s %s", self.command, self.path)
            status, answer = 500, ApiError(500, "Internal error in the fake GCP API").tpu_body()
        data = json.dumps(answer).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json; charset=UTF-8")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    do_GET = do_POST = do_PATCH = do_DELETE = do_PUT = _handle


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, fake: FakeGcp) -> None:
        super().__init__(("127.0.0.1", 0), _RequestHandler)
        self.fake = fake


def make_server(fake: FakeGcp) -> _Server:
    return _Server(fake)


def serve_in_thread(server: _Server) -> threading.Thread:
    thread = threading.Thread(target=server.serve_forever, name="fake-gcp", daemon=True)
    thread.start()
    return thread
