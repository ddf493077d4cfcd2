"""FakeKubernetes: the API server, control plane and kubelet started together on loopback.

    with FakeKubernetes(tmp_path, docker_url=engine.url) as cluster:
        cluster.kubeconfig          # a kubeconfig file for kubectl and the Python client
        cluster.kubectl("get", "pods", "-A")
        cluster.add_node("cpu-1")   # a ready node outside any NodePool
        cluster.provisioning_delay = 2.0
        cluster.fail_image_pull("img:tag", "manifest unknown")
        cluster.fail_provisioning("gpu-pool", "no capacity")

Without `docker_url` there is no kubelet: Pods are scheduled but never run (enough for the API
tests, which then need no engine).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import uuid
from pathlib import Path
from typing import Any

import yaml

from fakes.kubernetes.api import Cluster, make_server, serve_in_thread
from fakes.kubernetes.control_plane import NAMESPACES, ControlPlane, add_node
from fakes.kubernetes.incluster import InCluster, make_tls_server, server_tls_context
from fakes.kubernetes.kubelet import Kubelet
from fakes.kubernetes.store import Store

DEFAULT_NAMESPACES = ("default", "kube-system", "kube-public")


class _NoKubelet:
    """Stands in for the kubelet when no engine was given: nothing runs, logs and exec say so."""

    def logs(self, pod: dict[str, Any], **_: Any) -> Any:
        from fakes.kubernetes.store import ApiError

        raise ApiError(
            400, "BadRequest", f"pod {pod['metadata']['name']} has no kubelet in this fake cluster"
        )

    def exec_session(self, pod: dict[str, Any], **kwargs: Any) -> Any:
        return self.logs(pod)

    def pod_metrics(self, pod: dict[str, Any]) -> None:
        return None


class FakeKubernetes:
    def __init__(
        self,
        state_dir: Path,
        docker_url: str | None = None,
        provisioning_delay: float = 0.0,
        in_cluster: bool = False,
        node_local_disks: bool = False,
    ) -> None:
        """`in_cluster`: also serve HTTPS and give Pods in-cluster credentials and cluster DNS
        (fakes.kubernetes.incluster), so daemons in Pods reach the API as on a real cluster.
        `node_local_disks`: each node has a disk of its own, so a hostPath volume's data stays on
        the node that wrote it (by default every node sees this machine's files)."""
        self.state_dir = state_dir
        self.cluster_id = uuid.uuid4().hex[:10]
        self.store = Store()
        self.control_plane = ControlPlane(self.store, state_dir / "volumes", provisioning_delay)
        self.kubelet: Kubelet | None = None
        if docker_url:
            self.kubelet = Kubelet(self.store, docker_url, state_dir / "kubelet", self.cluster_id)
            if node_local_disks:
                self.kubelet.node_disks = state_dir / "node-disks"
        cluster = Cluster(self.store, self.kubelet or _NoKubelet())  # type: ignore[arg-type]
        self._server = make_server(cluster)
        self._tls_server = None
        if in_cluster:
            context, ca_pem = server_tls_context(state_dir / "pki")
            self._tls_server = make_tls_server(cluster, context)
            if self.kubelet is not None:
                self.kubelet.in_cluster = InCluster("127.0.0.1", self._tls_server.server_address[1], ca_pem)
        host, port = self._server.server_address[:2]
        self.url = f"http://{host}:{port}"
        self.kubeconfig = state_dir / "kubeconfig"
        # kubectl caches discovery under $HOME/.kube/cache; a private HOME keeps runs apart.
        self.home = state_dir / "home"

    # -- lifecycle ------------------------------------------------------------------------------

    def start(self) -> FakeKubernetes:
        self.state_dir.mkdir(parents=True, exist_ok=True)
        self.home.mkdir(exist_ok=True)
        for name in DEFAULT_NAMESPACES:
            self.store.create(NAMESPACES, "", {"metadata": {"name": name}})
        self._write_kubeconfig()
        serve_in_thread(self._server)
        if self._tls_server is not None:
            serve_in_thread(self._tls_server)
        self.control_plane.start()
        if self.kubelet is not None:
            self.kubelet.start()
        return self

    def stop(self) -> None:
        for server in (self._server, self._tls_server):
            if server is not None:
                server.shutdown()
                server.server_close()
        self.control_plane.stop()
        if self.kubelet is not None:
            self.kubelet.stop()

    def __enter__(self) -> FakeKubernetes:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- knobs ----------------------------------------------------------------------------------

    @property
    def provisioning_delay(self) -> float:
        return self.control_plane.provisioning_delay

    @provisioning_delay.setter
    def provisioning_delay(self, seconds: float) -> None:
        self.control_plane.provisioning_delay = seconds

    def add_node(
        self,
        name: str,
        labels: dict[str, str] | None = None,
        capacity: dict[str, str] | None = None,
        taints: list[dict[str, str]] | None = None,
    ) -> dict[str, Any]:
        node: dict[str, Any] = {"metadata": {"name": name, "labels": dict(labels or {})}, "spec": {}}
        if taints:
            node["spec"]["taints"] = taints
        if capacity:
            node["status"] = {"capacity": dict(capacity), "allocatable": dict(capacity)}
        return add_node(self.store, node)

    def fail_image_pull(self, image: str, message: str) -> None:
        """Pulls of `image` fail with `message` even if the engine has it (ErrImagePull, then BackOff)."""
        if self.kubelet is None:
            raise RuntimeError("failure injection for images needs the kubelet (start with docker_url)")
        self.kubelet.unpullable_images[image] = message

    def fail_provisioning(self, nodepool: str, message: str) -> None:
        """The NodePool gets no new nodes and reports `message` until `restore_provisioning`."""
        self.control_plane.provisioning_failures[nodepool] = message

    def restore_provisioning(self, nodepool: str) -> None:
        self.control_plane.provisioning_failures.pop(nodepool, None)

    def compact(self) -> None:
        """Drop the watch history: watches resuming from an older resourceVersion get 410 Gone."""
        self.store.compact()

    # -- clients --------------------------------------------------------------------------------

    def env(self) -> dict[str, str]:
        """Environment for a client process (kubectl or a daemon) pointed at this cluster."""
        return {**os.environ, "KUBECONFIG": str(self.kubeconfig), "HOME": str(self.home)}

    def kubectl(
        self, *args: str, input: str | None = None, timeout: float = 60
    ) -> subprocess.CompletedProcess[str]:
        binary = shutil.which("kubectl")
        if binary is None:
            raise RuntimeError("kubectl is not installed (scripts/ci_setup.sh installs it)")
        return subprocess.run(
            [binary, *args],
            input=input,
            capture_output=True,
            text=True,
            env=self.env(),
            timeout=timeout,
            check=False,
        )

    def _write_kubeconfig(self) -> None:
        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "fake", "cluster": {"server": self.url}}],
            "users": [{"name": "fake", "user": {"token": "fake-token"}}],
            "contexts": [
                {"name": "fake", "context": {"cluster": "fake", "user": "fake", "namespace": "default"}}
            ],
            "current-context": "fake",
        }
        self.kubeconfig.write_text(yaml.safe_dump(config))
