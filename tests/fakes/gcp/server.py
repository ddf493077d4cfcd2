"""The HTTP face of the fake: routing of the TPU v2 and Compute v1 URLs gcloud calls.

gcloud puts `/v2/` (TPU) or `/compute/v1/` (Compute) after the endpoint override and adds
`?alt=json`; bodies are JSON both ways. Each route names the IAM permission it needs, which is what
an injected PERMISSION_DENIED says was missing.
"""

from __future__ import annotations

import email.parser
import json
import logging
import re
import threading
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from http import HTTPStatus
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


# Where Google's batch endpoint for each API is (relative to the endpoint override).
BATCH_PATHS = ("/batch/compute/v1", "/batch/tpu/v2", "/batch")

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


def answer_one(fake: FakeGcp, method: str, target: str, raw: bytes) -> tuple[int, dict[str, Any]]:
    """Status and JSON body for one request (`target` is the path with its query)."""
    parts = urlsplit(target)
    api = "tpu" if parts.path.startswith("/v2/") else "compute"
    try:
        body = json.loads(raw) if raw.strip() else {}
        return 200, fake.handle(method, parts.path, dict(parse_qsl(parts.query)), body)
    except ApiError as error:
        return error.code, error.tpu_body() if api == "tpu" else error.compute_body()
    except json.JSONDecodeError as error:
        return 400, ApiError(400, f"Invalid JSON payload received. {error}").tpu_body()
    except Exception:  # a bug in the fake: answer like a server error, keep serving
        logger.exception("fake GCP failed on %s %s", method, target)
        return 500, ApiError(500, "Internal error in the fake GCP API").tpu_body()


def answer_batch(fake: FakeGcp, content_type: str, raw: bytes) -> tuple[str, bytes]:
    """A batch request (gcloud sends one for a Compute list over several zones): multipart/mixed
    parts that are each an HTTP request, answered in one multipart/mixed of HTTP responses whose
    Content-ID is the request's with a `response-` prefix."""
    message = email.parser.BytesParser().parsebytes(f"Content-Type: {content_type}\r\n\r\n".encode() + raw)
    boundary = f"batch_{uuid.uuid4().hex}"
    out = []
    for part in message.get_payload():
        request = part.get_payload(decode=True) or b""
        head, _, body = request.replace(b"\r\n", b"\n").partition(b"\n\n")
        method, target = head.split(b"\n", 1)[0].decode().split(" ")[:2]
        status, answer = answer_one(fake, method, target, body)
        content_id = str(part.get("Content-ID", "<+0>")).strip("<>")
        out.append(
            f"--{boundary}\r\nContent-Type: application/http\r\nContent-ID: <response-{content_id}>\r\n\r\n"
            f"HTTP/1.1 {status} {HTTPStatus(status).phrase}\r\n"
            f"Content-Type: application/json; charset=UTF-8\r\n\r\n{json.dumps(answer)}\r\n"
        )
    out.append(f"--{boundary}--\r\n")
    return f"multipart/mixed; boundary={boundary}", "".join(out).encode()


class _RequestHandler(BaseHTTPRequestHandler):
    server: _Server
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:
        logger.debug("%s %s", self.address_string(), format % args)

    def _handle(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        if self.command == "POST" and urlsplit(self.path).path in BATCH_PATHS:
            content_type, data = answer_batch(self.server.fake, self.headers.get("Content-Type", ""), raw)
            status = 200
        else:
            status, answer = answer_one(self.server.fake, self.command, self.path, raw)
            content_type, data = "application/json; charset=UTF-8", json.dumps(answer).encode()
        self.send_response(status)
        self.send_header("Content-Type", content_type)
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
