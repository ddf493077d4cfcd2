"""A thin layer over the official `kubernetes` client for the CoreWeave platform: server-side
apply of plain manifests of any kind, reads, deletes, Pod logs and a port-forward to a Pod.

Manifests stay plain dicts (see coreweave_resources.py), so one generic path per verb serves every
kind, including the NodePool custom resource the typed client has no class for.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any
from urllib.parse import quote

from iris.cluster.platform.base import PlatformError, PlatformUnavailableError

logger = logging.getLogger(__name__)

FIELD_MANAGER = "iris"
# kind -> (API path prefix, plural, namespaced)
_KINDS: dict[str, tuple[str, str, bool]] = {
    "Namespace": ("/api/v1", "namespaces", False),
    "ServiceAccount": ("/api/v1", "serviceaccounts", True),
    "Secret": ("/api/v1", "secrets", True),
    "ConfigMap": ("/api/v1", "configmaps", True),
    "Service": ("/api/v1", "services", True),
    "Pod": ("/api/v1", "pods", True),
    "Event": ("/api/v1", "events", True),
    "PersistentVolumeClaim": ("/api/v1", "persistentvolumeclaims", True),
    "ClusterRole": ("/apis/rbac.authorization.k8s.io/v1", "clusterroles", False),
    "ClusterRoleBinding": ("/apis/rbac.authorization.k8s.io/v1", "clusterrolebindings", False),
    "Deployment": ("/apis/apps/v1", "deployments", True),
    "NodePool": ("/apis/compute.coreweave.com/v1alpha1", "nodepools", False),
}


class KubeError(PlatformError):
    def __init__(self, message: str, status: int = 0):
        super().__init__(message)
        self.status = status


def collection_path(kind: str, namespace: str = "") -> str:
    prefix, plural, namespaced = _KINDS[kind]
    return f"{prefix}/namespaces/{namespace}/{plural}" if namespaced else f"{prefix}/{plural}"


def object_path(kind: str, name: str, namespace: str = "") -> str:
    return f"{collection_path(kind, namespace)}/{quote(name)}"


class Kube:
    """One API server, reached with a kubeconfig (outside the cluster) or the Pod's ServiceAccount."""

    def __init__(self, kubeconfig: str = "", request_timeout_s: float = 1800.0) -> None:
        try:
            from kubernetes import client, config
        except ImportError as exc:
            raise PlatformError(
                "the coreweave platform needs the `kubernetes` package: pip install 'iris[kubernetes]'"
            ) from exc
        configuration = client.Configuration()
        try:
            if os.environ.get("KUBERNETES_SERVICE_HOST"):
                # Inside the cluster (the controller's Pod): its ServiceAccount, whatever the config names.
                config.load_incluster_config(client_configuration=configuration)
            else:
                config.load_kube_config(config_file=kubeconfig or None, client_configuration=configuration)
        except (config.ConfigException, OSError, TypeError) as exc:
            raise PlatformError(
                f"cannot load Kubernetes credentials: {exc}; set platform.coreweave.kubeconfig_path or KUBECONFIG"
            ) from exc
        self.host = configuration.host
        self.api_client = client.ApiClient(configuration)
        self.core = client.CoreV1Api(self.api_client)
        self._timeout = request_timeout_s

    def close(self) -> None:
        self.api_client.close()

    def _call(
        self,
        method: str,
        path: str,
        body: Any = None,
        query: list[tuple[str, str]] | None = None,
        content_type: str = "application/json",
    ) -> dict[str, Any]:
        from kubernetes.client.exceptions import ApiException
        from urllib3.exceptions import HTTPError

        try:
            method, url, headers, payload, post = self.api_client.param_serialize(
                method,
                path,
                query_params=query or [],
                header_params={"Content-Type": content_type, "Accept": "application/json"},
                body=body,
                auth_settings=["BearerToken"],
            )
            response = self.api_client.call_api(method, url, headers, payload, post, _request_timeout=self._timeout)
            response.read()
        except ApiException as exc:
            raise KubeError(f"{method} {path}: {_explain(exc)}", exc.status or 0) from None
        except HTTPError as exc:
            raise PlatformUnavailableError(f"the Kubernetes API at {self.host} did not answer: {exc}") from None
        if not 200 <= response.status < 300:
            raise KubeError(f"{method} {path}: {_message(response.data, response.reason)}", response.status)
        return json.loads(response.data) if response.data else {}

    # -- verbs ----------------------------------------------------------------------------------

    def apply(self, manifest: dict[str, Any]) -> dict[str, Any]:
        """Server-side apply: creates the object or brings Iris's fields to `manifest`; applying an
        unchanged manifest changes nothing (same resourceVersion)."""
        metadata = manifest["metadata"]
        path = object_path(manifest["kind"], metadata["name"], metadata.get("namespace", ""))
        return self._call(
            "PATCH",
            path,
            json.dumps(manifest),
            [("fieldManager", FIELD_MANAGER), ("force", "true")],
            "application/apply-patch+yaml",
        )

    def create(self, manifest: dict[str, Any]) -> dict[str, Any]:
        metadata = manifest["metadata"]
        return self._call("POST", collection_path(manifest["kind"], metadata.get("namespace", "")), manifest)

    def get(self, kind: str, name: str, namespace: str = "") -> dict[str, Any] | None:
        try:
            return self._call("GET", object_path(kind, name, namespace))
        except KubeError as exc:
            if exc.status == 404:
                return None
            raise

    def list(self, kind: str, namespace: str = "", selector: str = "", field_selector: str = "") -> list[dict[str, Any]]:
        query = [("labelSelector", selector)] if selector else []
        if field_selector:
            query.append(("fieldSelector", field_selector))
        try:
            return list(self._call("GET", collection_path(kind, namespace), query=query).get("items") or [])
        except KubeError as exc:
            if exc.status == 404:
                return []
            raise

    def merge_patch(self, kind: str, name: str, namespace: str, patch: dict[str, Any]) -> dict[str, Any]:
        return self._call("PATCH", object_path(kind, name, namespace), patch, content_type="application/merge-patch+json")

    def delete(self, kind: str, name: str, namespace: str = "", grace_s: int | None = None) -> bool:
        """Delete (with background propagation); False when it was already gone."""
        body: dict[str, Any] = {"propagationPolicy": "Background"}
        if grace_s is not None:
            body["gracePeriodSeconds"] = grace_s
        try:
            self._call("DELETE", object_path(kind, name, namespace), body)
            return True
        except KubeError as exc:
            if exc.status == 404:
                return False
            raise

    def events_for(self, namespace: str, name: str, uid: str) -> list[dict[str, Any]]:
        events = self.list("Event", namespace, field_selector=f"involvedObject.name={name}")
        return [e for e in events if (e.get("involvedObject") or {}).get("uid") in (uid, None, "")]

    def pod_logs(self, namespace: str, name: str, container: str, tail_lines: int, previous: bool = False) -> str:
        from kubernetes.client.exceptions import ApiException

        try:
            return str(
                self.core.read_namespaced_pod_log(
                    name, namespace, container=container, tail_lines=tail_lines, previous=previous, _request_timeout=60
                )
            )
        except ApiException as exc:
            if previous and exc.status == 400:
                return self.pod_logs(namespace, name, container, tail_lines)
            return f"(no logs: {_explain(exc)})"

    def stream_pod_log(
        self, namespace: str, name: str, container: str, tail_lines: int, on_line: Callable[[str], None]
    ) -> None:
        """Pass the container's last `tail_lines` log lines to `on_line`, then every new line until
        the container ends or the caller is interrupted (the API server's `follow=true`)."""
        from kubernetes.client.exceptions import ApiException

        try:
            response = self.core.read_namespaced_pod_log(
                name, namespace, container=container, tail_lines=tail_lines, follow=True, _preload_content=False
            )
        except ApiException as exc:
            raise KubeError(f"cannot follow the log of Pod {name}: {_explain(exc)}", exc.status) from None
        try:
            pending = b""
            for chunk in response.stream(amt=4096, decode_content=True):
                pending += chunk
                *lines, pending = pending.split(b"\n")
                for line in lines:
                    on_line(line.decode(errors="replace"))
            if pending:
                on_line(pending.decode(errors="replace"))
        finally:
            response.release_conn()

    @contextmanager
    def port_forward(self, namespace: str, pod: str, port: int, local_port: int | None = None) -> Iterator[int]:
        """Listen on 127.0.0.1 (`local_port` or a free one) and carry each connection to `port` of
        the Pod over the API server's portforward subresource; yields the local port."""
        from kubernetes.stream import portforward

        listener = socket.create_server(("127.0.0.1", local_port or 0))
        stop = threading.Event()

        def carry(connection: socket.socket) -> None:
            try:
                forward = portforward(
                    self.core.connect_get_namespaced_pod_portforward, pod, namespace, ports=str(port)
                )
                remote = forward.socket(port)
            except Exception as exc:  # noqa: BLE001 - one failed connection must not end the tunnel
                logger.warning("port-forward to %s/%s:%d failed: %s", namespace, pod, port, exc)
                connection.close()
                return
            _pump_both(connection, remote)
            forward.close()

        def accept() -> None:
            while not stop.is_set():
                try:
                    connection, _ = listener.accept()
                except OSError:
                    return
                threading.Thread(target=carry, args=(connection,), name="port-forward", daemon=True).start()

        thread = threading.Thread(target=accept, name=f"port-forward-{pod}", daemon=True)
        thread.start()
        try:
            yield listener.getsockname()[1]
        finally:
            stop.set()
            listener.close()


def _pump_both(local: socket.socket, remote: Any) -> None:
    def pump(source: Any, target: Any) -> None:
        try:
            while data := source.recv(65536):
                target.sendall(data)
        except OSError:
            pass
        finally:
            for end in (source, target):
                try:
                    end.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    back = threading.Thread(target=pump, args=(remote, local), daemon=True)
    back.start()
    pump(local, remote)
    back.join(30)
    local.close()
    remote.close()


def _explain(exc: Any) -> str:
    return _message(exc.body, exc.reason or str(exc))


def _message(body: Any, fallback: str) -> str:
    """The Status message the API server put in an error body, else `fallback`."""
    try:
        status = json.loads(body or "{}")
    except (TypeError, ValueError):
        status = {}
    return str((status.get("message") if isinstance(status, dict) else None) or fallback)
