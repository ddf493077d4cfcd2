"""The HTTP face of the fake: REST routing, Status errors, Tables, watch streams, log and exec.

URLs, query parameters, content types and error bodies are those of the real API server, so the
official Python client and kubectl talk to it unchanged (plain HTTP on loopback).
"""

from __future__ import annotations

import json
import logging
import threading
import time
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qs, urlsplit

import yaml

from fakes.kubernetes import discovery
from fakes.kubernetes.managed_fields import record_update, server_side_apply
from fakes.kubernetes.patch import APPLY_PATCH, PATCH_TYPES, PatchError, apply_patch
from fakes.kubernetes.portforward import SpdyPortForward, serve_websocket
from fakes.kubernetes.protobuf import PROTOBUF, ProtobufError, decode_object
from fakes.kubernetes.resources import Resource, find_resource
from fakes.kubernetes.selectors import SelectorError, parse_field_selector, parse_label_selector
from fakes.kubernetes.store import BACKGROUND, ApiError, Store, WatchEvent, not_found
from fakes.kubernetes.tables import table
from fakes.kubernetes.websocket import WebSocket, accept_key

if TYPE_CHECKING:
    from fakes.kubernetes.kubelet import Kubelet

logger = logging.getLogger("fake-kubernetes")

# A watch with no timeoutSeconds ends after this long, as the real server's min-request-timeout does.
DEFAULT_WATCH_SECONDS = 1800
BOOKMARK_INTERVAL_SECONDS = 1.0
CHANNEL_PROTOCOLS = ("v5.channel.k8s.io", "v4.channel.k8s.io")

# Top-level fields each kind has; fieldValidation=Strict rejects anything else, as the real
# server's schema-based decoder does.
_COMMON_FIELDS = {"apiVersion", "kind", "metadata"}
_KIND_FIELDS = {
    "ConfigMap": {"data", "binaryData", "immutable"},
    "Secret": {"data", "stringData", "type", "immutable"},
    "ServiceAccount": {"secrets", "imagePullSecrets", "automountServiceAccountToken"},
    "ClusterRole": {"rules", "aggregationRule"},
    "ClusterRoleBinding": {"roleRef", "subjects"},
    "Event": {
        "involvedObject",
        "reason",
        "message",
        "source",
        "firstTimestamp",
        "lastTimestamp",
        "count",
        "type",
        "eventTime",
        "series",
        "action",
        "related",
        "reportingComponent",
        "reportingInstance",
    },
}
_CONTAINER_FIELDS = {
    "name",
    "image",
    "command",
    "args",
    "workingDir",
    "ports",
    "envFrom",
    "env",
    "resources",
    "resizePolicy",
    "restartPolicy",
    "volumeMounts",
    "volumeDevices",
    "livenessProbe",
    "readinessProbe",
    "startupProbe",
    "lifecycle",
    "terminationMessagePath",
    "terminationMessagePolicy",
    "imagePullPolicy",
    "securityContext",
    "stdin",
    "stdinOnce",
    "tty",
}


class Cluster:
    """What the handlers reach: the store and the kubelet (logs, exec, metrics)."""

    def __init__(self, store: Store, kubelet: Kubelet) -> None:
        self.store = store
        self.kubelet = kubelet


class _ApiServer(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request: Any, client_address: Any) -> None:
        # Clients drop connections all the time (a watch they stopped, a killed kubectl).
        logger.debug("connection from %s ended abruptly", client_address, exc_info=True)


def make_server(cluster: Cluster, host: str = "127.0.0.1", port: int = 0) -> ThreadingHTTPServer:
    handler = type("BoundApiHandler", (ApiHandler,), {"cluster": cluster})
    return _ApiServer((host, port), handler)


def _strict_errors(resource: Resource, obj: dict[str, Any]) -> list[str]:
    allowed = _COMMON_FIELDS | _KIND_FIELDS.get(resource.kind, {"spec", "status"})
    unknown = [f'unknown field "{key}"' for key in obj if key not in allowed]
    spec = obj.get("spec") if isinstance(obj.get("spec"), dict) else {}
    pod_spec = spec if resource.kind == "Pod" else ((spec.get("template") or {}).get("spec") or {})
    prefix = "spec" if resource.kind == "Pod" else "spec.template.spec"
    if resource.kind in ("Pod", "Deployment") and isinstance(pod_spec, dict):
        for kind in ("initContainers", "containers"):
            for index, container in enumerate(pod_spec.get(kind) or []):
                unknown += [
                    f'unknown field "{prefix}.{kind}[{index}].{key}"'
                    for key in container
                    if key not in _CONTAINER_FIELDS
                ]
    return unknown


class ApiHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    cluster: Cluster

    def log_message(self, format: str, *args: Any) -> None:
        logger.debug("%s " + format, self.address_string(), *args)

    # -- dispatch -------------------------------------------------------------------------------

    def do_GET(self) -> None:
        self._dispatch("GET")

    def do_POST(self) -> None:
        self._dispatch("POST")

    def do_PUT(self) -> None:
        self._dispatch("PUT")

    def do_PATCH(self) -> None:
        self._dispatch("PATCH")

    def do_DELETE(self) -> None:
        self._dispatch("DELETE")

    def _dispatch(self, method: str) -> None:
        url = urlsplit(self.path)
        self.query = {key: values for key, values in parse_qs(url.query, keep_blank_values=True).items()}
        parts = [part for part in url.path.split("/") if part]
        self._body_read = False
        try:
            self._route(method, parts)
        except ApiError as exc:
            # An unread body would be taken for the next request on this keep-alive connection.
            if not self._body_read:
                self._read_body()
            self._send_json(exc.status(), exc.code)
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True
        except Exception as exc:
            logger.exception("fake API server error on %s %s", method, self.path)
            self._send_json(ApiError(500, "InternalError", f"fake API server error: {exc!r}").status(), 500)

    def _param(self, name: str, default: str = "") -> str:
        values = self.query.get(name)
        return values[0] if values else default

    def _route(self, method: str, parts: list[str]) -> None:
        if parts == ["version"]:
            return self._send_json(discovery.version())
        if parts in (["healthz"], ["readyz"], ["livez"]):
            return self._send_text("ok")
        if parts == ["api"]:
            return self._send_json(
                discovery.core_versions(f"{self.server.server_address[0]}:{self.server.server_address[1]}")
            )
        if parts == ["apis"]:
            return self._send_json(discovery.group_list())
        if parts[:2] == ["openapi", "v3"]:
            if len(parts) == 2:
                return self._send_json(discovery.openapi_index())
            document = discovery.openapi_document("/".join(parts[2:]))
            if document is None:
                raise ApiError(404, "NotFound", "the server could not find the requested resource")
            return self._send_json(document)
        if parts[:1] == ["api"] and len(parts) >= 2:
            group, version, rest = "", parts[1], parts[2:]
        elif parts[:1] == ["apis"] and len(parts) >= 2:
            if len(parts) == 2:
                if parts[1] not in discovery.GROUP_VERSIONS:
                    raise ApiError(404, "NotFound", "the server could not find the requested resource")
                return self._send_json(discovery.group(parts[1]))
            group, version, rest = parts[1], parts[2], parts[3:]
        else:
            raise ApiError(404, "NotFound", "the server could not find the requested resource")
        if not rest:
            listing = discovery.resource_list(group, version)
            if listing is None:
                raise ApiError(404, "NotFound", "the server could not find the requested resource")
            return self._send_json(listing)
        namespace = ""
        if rest[0] == "namespaces" and len(rest) >= 3 and find_resource(group, version, rest[2]) is not None:
            namespace, rest = rest[1], rest[2:]
        resource = find_resource(group, version, rest[0])
        if resource is None:
            raise ApiError(404, "NotFound", "the server could not find the requested resource")
        name = rest[1] if len(rest) > 1 else ""
        subresource = rest[2] if len(rest) > 2 else ""
        if subresource and subresource not in resource.subresources:
            raise ApiError(404, "NotFound", "the server could not find the requested resource")
        if resource.kind == "PodMetrics":
            return self._metrics(method, namespace, name)
        self._resource_request(method, resource, namespace, name, subresource)

    def _resource_request(self, method: str, resource: Resource, namespace: str, name: str, sub: str) -> None:
        store = self.cluster.store
        if sub == "log":
            return self._logs(resource, namespace, name)
        if sub == "exec":
            return self._exec(resource, namespace, name)
        if sub == "portforward":
            return self._portforward(resource, namespace, name)
        if not name:
            if method == "GET":
                if self._param("watch") in ("true", "1"):
                    return self._watch(resource, namespace)
                return self._list(resource, namespace)
            if method == "POST":
                body = self._read_object()
                self._check_fields(resource, body)
                record_update(None, body, self._field_manager(), resource.group_version)
                created = store.create(resource, namespace, body, dry_run=self._dry_run())
                return self._send_object(resource, created, 201)
            if method == "DELETE":
                items, _ = store.list(resource, namespace, self._selector())
                for item in items:
                    store.delete(resource, namespace, item["metadata"]["name"], **self._delete_options())
                return self._send_json(self._list_body(resource, items, store.resource_version))
            raise ApiError(
                405, "MethodNotAllowed", "the server does not allow this method on the requested resource"
            )
        if method == "GET":
            return self._send_object(resource, store.get(resource, namespace, name))
        if method == "PUT":
            body = self._read_object()
            self._check_fields(resource, body)
            if sub != "status":
                self._record_update(resource, store.get(resource, namespace, name), body)
            updated = store.update(resource, namespace, name, body, subresource=sub, dry_run=self._dry_run())
            return self._send_object(resource, updated)
        if method == "PATCH":
            return self._patch(resource, namespace, name, sub)
        if method == "DELETE":
            deleted = store.delete(resource, namespace, name, **self._delete_options())
            return self._send_object(resource, deleted)
        raise ApiError(
            405, "MethodNotAllowed", "the server does not allow this method on the requested resource"
        )

    # -- verbs ----------------------------------------------------------------------------------

    def _selector(self) -> Any:
        try:
            labels = parse_label_selector(self._param("labelSelector"))
            fields = parse_field_selector(self._param("fieldSelector"))
        except SelectorError as exc:
            raise ApiError(400, "BadRequest", str(exc)) from None
        return lambda obj: labels(obj) and fields(obj)

    def _list_body(self, resource: Resource, items: list[dict[str, Any]], version: int) -> dict[str, Any]:
        return {
            "kind": f"{resource.kind}List",
            "apiVersion": resource.group_version,
            "metadata": {"resourceVersion": str(version)},
            "items": items,
        }

    def _wants_table(self) -> bool:
        return "as=Table" in (self.headers.get("Accept") or "")

    def _list(self, resource: Resource, namespace: str) -> None:
        items, version = self.cluster.store.list(resource, namespace, self._selector())
        if self._wants_table():
            return self._send_json(table(resource, items, str(version)))
        self._send_json(self._list_body(resource, items, version))

    def _send_object(self, resource: Resource, obj: dict[str, Any], code: int = 200) -> None:
        if self._wants_table():
            return self._send_json(table(resource, [obj], obj["metadata"].get("resourceVersion", "")), code)
        self._send_json(obj, code)

    def _dry_run(self) -> bool:
        return self._param("dryRun") == "All"

    def _read_body(self) -> bytes:
        self._body_read = True
        length = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(length) if length else b""

    def _read_object(self, content_type: str = "") -> Any:
        raw = self._read_body()
        sent_type = (self.headers.get("Content-Type") or "application/json").split(";")[0].strip()
        if raw and sent_type == PROTOBUF:
            try:
                return decode_object(raw)
            except ProtobufError as exc:
                raise ApiError(
                    415, "UnsupportedMediaType", f"the body of the request was in an unknown format: {exc}"
                ) from None
        if raw and sent_type not in ("application/json", "application/yaml", *PATCH_TYPES):
            raise ApiError(
                415,
                "UnsupportedMediaType",
                "the body of the request was in an unknown format - accepted media types include: "
                f"application/json, application/yaml, {PROTOBUF}",
            )
        try:
            if content_type == APPLY_PATCH:
                return yaml.safe_load(raw) or {}
            return json.loads(raw or b"{}")
        except (ValueError, yaml.YAMLError) as exc:
            raise ApiError(
                400, "BadRequest", f"the body of the request was in an unknown format: {exc}"
            ) from None

    def _check_fields(self, resource: Resource, body: Any) -> None:
        if not isinstance(body, dict):
            raise ApiError(400, "BadRequest", "the body of the request must be a JSON object")
        if self._param("fieldValidation") == "Strict":
            unknown = _strict_errors(resource, body)
            if unknown:
                raise ApiError(400, "BadRequest", "strict decoding error: " + ", ".join(unknown))

    def _field_manager(self) -> str:
        """The request's fieldManager; by default the client's name, as the real server derives it."""
        return self._param("fieldManager") or (self.headers.get("User-Agent") or "unknown").split("/")[0]

    def _record_update(self, resource: Resource, current: dict[str, Any], updated: dict[str, Any]) -> None:
        # Clients send managedFields back as they read them (or not at all): the server keeps its own.
        updated.setdefault("metadata", {})["managedFields"] = current["metadata"].get("managedFields") or []
        record_update(current, updated, self._field_manager(), resource.group_version)

    def _patch(self, resource: Resource, namespace: str, name: str, sub: str) -> None:
        content_type = (self.headers.get("Content-Type") or "").split(";")[0].strip()
        if content_type not in PATCH_TYPES:
            raise ApiError(
                415,
                "UnsupportedMediaType",
                f"the body of the request was in an unknown format - accepted media types include: "
                f"{', '.join(PATCH_TYPES)}",
            )
        patch = self._read_object(content_type)
        store = self.cluster.store
        current = store.find(resource, namespace, name)
        if content_type == APPLY_PATCH:
            if not self._param("fieldManager"):
                raise ApiError(
                    422, "Invalid", 'PatchOptions.meta.k8s.io "" is invalid: fieldManager: Required value'
                )
            self._check_fields(resource, patch)
            applied = server_side_apply(
                current,
                patch,
                self._param("fieldManager"),
                resource.group_version,
                self._param("force") == "true",
            )
            if current is None:
                # Server-side apply creates what is missing.
                applied["metadata"]["name"] = name
                created = store.create(resource, namespace, applied, self._dry_run())
                return self._send_object(resource, created, 201)
            updated = store.update(
                resource, namespace, name, applied, subresource=sub, dry_run=self._dry_run()
            )
            return self._send_object(resource, updated)
        if current is None:
            raise not_found(resource, name)
        try:
            patched = apply_patch(content_type, current, patch)
        except PatchError as exc:
            raise ApiError(422, "Invalid", str(exc)) from None
        if isinstance(patched, dict) and self._param("fieldValidation") == "Strict":
            self._check_fields(resource, patched)
        if sub != "status":
            self._record_update(resource, current, patched)
        # A patch applies to the version it read unless it names one itself.
        patch_version = ((patch.get("metadata") or {}) if isinstance(patch, dict) else {}).get(
            "resourceVersion"
        )
        patched.setdefault("metadata", {})["resourceVersion"] = (
            patch_version or current["metadata"]["resourceVersion"]
        )
        updated = store.update(resource, namespace, name, patched, subresource=sub, dry_run=self._dry_run())
        self._send_object(resource, updated)

    def _delete_options(self) -> dict[str, Any]:
        body = self._read_object() if int(self.headers.get("Content-Length") or 0) else {}
        propagation = self._param("propagationPolicy") or body.get("propagationPolicy") or BACKGROUND
        if body.get("orphanDependents") is True:
            propagation = "Orphan"
        grace = self._param("gracePeriodSeconds") or body.get("gracePeriodSeconds")
        return {
            "propagation": propagation,
            "grace_seconds": int(grace) if grace not in (None, "") else None,
            "preconditions": body.get("preconditions"),
            "dry_run": self._dry_run() or body.get("dryRun") == ["All"],
        }

    # -- watch ----------------------------------------------------------------------------------

    def _watch(self, resource: Resource, namespace: str) -> None:
        store = self.cluster.store
        predicate = self._selector()
        timeout = float(self._param("timeoutSeconds") or DEFAULT_WATCH_SECONDS)
        bookmarks = self._param("allowWatchBookmarks") in ("true", "1")
        as_table = self._wants_table()
        requested = self._param("resourceVersion")
        initial: list[dict[str, Any]] = []
        if requested in ("", "0"):
            # No version: the current state as ADDED events first, then the changes after it.
            initial, version = store.list(resource, namespace, predicate)
        else:
            try:
                version = int(requested)
            except ValueError:
                raise ApiError(400, "BadRequest", f"invalid resource version: {requested}") from None
        self._start_stream("application/json")
        visible = {(o["metadata"].get("namespace", ""), o["metadata"]["name"]) for o in initial}

        def encode(event_type: str, obj: dict[str, Any]) -> bytes:
            body = table(resource, [obj], obj["metadata"].get("resourceVersion", "")) if as_table else obj
            return json.dumps({"type": event_type, "object": body}).encode() + b"\n"

        for obj in initial:
            self._write_chunk(encode("ADDED", obj))
        deadline = time.monotonic() + timeout
        last_sent = time.monotonic()
        try:
            for event in store.iter_changes(version, deadline):
                if event is None:
                    if bookmarks and time.monotonic() - last_sent >= BOOKMARK_INTERVAL_SECONDS:
                        mark = {
                            "kind": resource.kind,
                            "apiVersion": resource.group_version,
                            "metadata": {"resourceVersion": str(store.resource_version)},
                        }
                        self._write_chunk(json.dumps({"type": "BOOKMARK", "object": mark}).encode() + b"\n")
                        last_sent = time.monotonic()
                    continue
                translated = self._translate(event, resource, namespace, predicate, visible)
                if translated is not None:
                    self._write_chunk(encode(*translated))
                    last_sent = time.monotonic()
        except ApiError as exc:
            self._write_chunk(json.dumps({"type": "ERROR", "object": exc.status()}).encode() + b"\n")
        self._end_stream()

    @staticmethod
    def _translate(
        event: WatchEvent, resource: Resource, namespace: str, predicate: Any, visible: set[tuple[str, str]]
    ) -> tuple[str, dict[str, Any]] | None:
        """A store event as this watcher sees it: objects entering or leaving its selector are ADDED/DELETED."""
        if (event.group, event.plural) != resource.key or (namespace and event.namespace != namespace):
            return None
        key = (event.namespace, event.obj["metadata"]["name"])
        matches = event.type != "DELETED" and predicate(event.obj)
        was_visible = key in visible
        if event.type == "DELETED":
            if not was_visible and not predicate(event.obj):
                return None
            visible.discard(key)
            return "DELETED", event.obj
        if matches:
            visible.add(key)
            return ("MODIFIED" if was_visible else "ADDED"), event.obj
        if was_visible:
            visible.discard(key)
            return "DELETED", event.obj
        return None

    # -- pods/log, pods/exec, metrics ----------------------------------------------------------

    def _logs(self, resource: Resource, namespace: str, name: str) -> None:
        pod = self.cluster.store.get(resource, namespace, name)
        tail = self._param("tailLines")
        chunks = self.cluster.kubelet.logs(
            pod,
            container=self._param("container"),
            follow=self._param("follow") in ("true", "1"),
            timestamps=self._param("timestamps") in ("true", "1"),
            stream=self._param("stream", "All"),
            tail_lines=int(tail) if tail else None,
            previous=self._param("previous") in ("true", "1"),
        )
        self._start_stream("text/plain")
        for chunk in chunks:
            self._write_chunk(chunk)
        self._end_stream()

    def _exec(self, resource: Resource, namespace: str, name: str) -> None:
        pod = self.cluster.store.get(resource, namespace, name)
        if (self.headers.get("Upgrade") or "").lower() != "websocket":
            raise ApiError(400, "BadRequest", "Upgrade request required")
        offered = [p.strip() for p in (self.headers.get("Sec-WebSocket-Protocol") or "").split(",")]
        protocol = next((p for p in CHANNEL_PROTOCOLS if p in offered), None)
        if protocol is None:
            raise ApiError(400, "BadRequest", f"none of the offered subprotocols {offered} is supported")
        session = self.cluster.kubelet.exec_session(
            pod,
            container=self._param("container"),
            command=self.query.get("command", []),
            stdin=self._param("stdin") in ("true", "1"),
            tty=self._param("tty") in ("true", "1"),
        )
        session.serve(self._accept_websocket(protocol), v5=protocol.startswith("v5"))

    def _switch_protocols(self, headers: dict[str, str]) -> None:
        self.send_response(HTTPStatus.SWITCHING_PROTOCOLS)
        self.send_header("Connection", "Upgrade")
        for name, value in headers.items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.flush()
        # The connection now speaks another protocol until it closes.
        self.close_connection = True

    def _accept_websocket(self, protocol: str) -> WebSocket:
        self._switch_protocols(
            {
                "Upgrade": "websocket",
                "Sec-WebSocket-Accept": accept_key(self.headers.get("Sec-WebSocket-Key", "")),
                "Sec-WebSocket-Protocol": protocol,
            }
        )
        return WebSocket(self.connection, self.rfile)

    def _portforward(self, resource: Resource, namespace: str, name: str) -> None:
        pod = self.cluster.store.get(resource, namespace, name)
        if (pod.get("status") or {}).get("phase") != "Running":
            raise ApiError(400, "BadRequest", f"pod {name} is not running")
        upgrade = (self.headers.get("Upgrade") or "").lower()
        if upgrade == "websocket":
            offered = [p.strip() for p in (self.headers.get("Sec-WebSocket-Protocol") or "").split(",")]
            # SPDY tunnelled in a WebSocket is refused, so kubectl falls back to plain SPDY.
            if "v4.channel.k8s.io" not in offered:
                raise ApiError(400, "BadRequest", f"none of the offered subprotocols {offered} is supported")
            ports = [int(p) for value in self.query.get("ports", []) for p in value.split(",") if p]
            if not ports:
                raise ApiError(400, "BadRequest", 'query parameter "ports" is required')
            return serve_websocket(self._accept_websocket("v4.channel.k8s.io"), ports)
        if upgrade.startswith("spdy/3.1"):
            self._switch_protocols({"Upgrade": "SPDY/3.1", "X-Stream-Protocol-Version": "portforward.k8s.io"})
            return SpdyPortForward(self.connection, self.rfile).serve()
        raise ApiError(400, "BadRequest", "Upgrade request required")

    def _metrics(self, method: str, namespace: str, name: str) -> None:
        if method != "GET":
            raise ApiError(
                405, "MethodNotAllowed", "the server does not allow this method on the requested resource"
            )
        pods_resource = find_resource("", "v1", "pods")
        metrics_resource = find_resource("metrics.k8s.io", "v1beta1", "pods")
        assert pods_resource is not None and metrics_resource is not None
        if name:
            pod = self.cluster.store.get(pods_resource, namespace, name)
            metrics = self.cluster.kubelet.pod_metrics(pod)
            if metrics is None:
                raise not_found(metrics_resource, name)
            return self._send_json(metrics)
        pods, version = self.cluster.store.list(pods_resource, namespace)
        items = [m for m in (self.cluster.kubelet.pod_metrics(p) for p in pods) if m is not None]
        self._send_json(self._list_body(metrics_resource, items, version))

    # -- output ---------------------------------------------------------------------------------

    def _send_json(self, body: Any, code: int = 200) -> None:
        data = json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _send_text(self, text: str, code: int = 200) -> None:
        data = text.encode()
        self.send_response(code)
        self.send_header("Content-Type", "text/plain")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _start_stream(self, content_type: str) -> None:
        self.send_response(200)
        self.send_header("Content-Type", content_type)
        self.send_header("Transfer-Encoding", "chunked")
        self.send_header("Cache-Control", "no-cache, private")
        self.end_headers()
        self.wfile.flush()

    def _write_chunk(self, data: bytes) -> None:
        if not data:
            return
        self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
        self.wfile.flush()

    def _end_stream(self) -> None:
        self.wfile.write(b"0\r\n\r\n")
        self.wfile.flush()


def serve_in_thread(server: ThreadingHTTPServer) -> threading.Thread:
    thread = threading.Thread(target=server.serve_forever, name="fake-kubernetes-api", daemon=True)
    thread.start()
    return thread
