"""KubernetesRuntime: each task attempt runs as its own Pod, created by the worker through the API.

Talks to the API server with the official `kubernetes` client (imported when the runtime is
created, so workers using another runtime start without it): in-cluster credentials when the
worker runs as a Pod, otherwise $KUBECONFIG or ~/.kube/config.

A task Pod (seed 001, "KubernetesRuntime") goes to its worker's node, whose resources the controller
placed it by, but needs nothing from that host: it brings its own workdir:
- an `emptyDir` at /app, filled by an init container (`pod_workdir fill`, from the worker's image)
  that fetches the job bundle through fsspec and unpacks it, then adds the files the worker wrote
  (the callable, inputs), which travel in a ConfigMap named like the Pod; paths the worker computed
  under its own workdir are rewritten to /app in the command and env;
- the build steps (the pip install, each setup command) as further init containers in /app;
- the task container, which starts the command once `run()` says so (the build and the run stay
  apart, as in every runtime), and a `workdir` container that keeps /app after the task ended so
  the worker can copy back what the task wrote there (the callable's result) through exec;
- `restartPolicy: Never`, `hostNetwork: true` and `dnsPolicy: ClusterFirstWithHostNet` (ports the
  worker allocated are reachable as they are);
- requests of the job's cpu, memory and disk; limits of memory and cpu; `nvidia.com/gpu: N`, and
  `rdma/ib: 1` when the worker's scale group has infiniband; always the GPU toleration, since a GPU
  node may run tasks that need no GPU;
- the config's env, the downward-API variables and platform variables of seed 001 section 10, and
  the S3 credentials by `secretKeyRef` from the platform's Secret;
- an ownerReference to the worker Pod, so deleting the worker Pod removes its tasks.

Logs come from the `log` subresource, followed per stream (stdout and stderr apart, the API's
`stream` parameter); exit codes, OOMKilled and start failures from the container statuses, followed
with a watch (a Pod the scheduler cannot place on its worker's node fails its attempt with the
scheduler's reason after UNSCHEDULABLE_GRACE_SECONDS); kill deletes the Pod with the grace period
(the kubelet sends SIGTERM, then SIGKILL); stats come from the metrics API (metrics-server), which
reports no process count, so a running Pod counts its running task container.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import os
import re
import socket
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from iris.bundle_format import UnsafeBundleError, extract_bundle
from iris.cluster.runtime.engine import (
    LABEL_ROLE,
    ROLE_MAIN,
    EngineContainerHandle,
    EngineExit,
    LineAssembler,
    build_steps,
    check_config,
    container_env,
    now_ms,
    parse_rfc3339_ms,
    stop_timeout_seconds,
)
from iris.cluster.runtime.pod_workdir import START_NAME, STATE_DIRNAME, zip_tree
from iris.cluster.runtime.types import LABEL_MANAGED, ContainerConfig, ContainerError, ContainerStats

if TYPE_CHECKING:
    from kubernetes.client import ApiClient

LABEL_OWNER = "iris.owner"
MAIN_CONTAINER = "task"
# Keeps /app after the task ended; build steps and collection need no more than what it holds.
WORKDIR_CONTAINER = "workdir"
FILL_CONTAINER = "fill-workdir"
WORKDIR_VOLUME = "workdir"
APP_DIR = "/app"
FILES_VOLUME = "worker-files"
FILES_MOUNT = "/var/run/iris/worker-files"
FILES_KEY = "workdir.zip"
BUNDLE_STORE_VOLUME = "bundle-store"
# A ConfigMap holds at most 1 MiB; larger inputs belong in storage.
MAX_WORKER_FILES_BYTES = 1024 * 1024 - 4096
_GATE_SCRIPT = f'until [ -e {APP_DIR}/{STATE_DIRNAME}/{START_NAME} ]; do sleep 0.05; done; exec "$@"'
GPU_RESOURCE = "nvidia.com/gpu"
RDMA_RESOURCE = "rdma/ib"
GPU_TOLERATION = {"key": GPU_RESOURCE, "operator": "Exists", "effect": "NoSchedule"}
HOSTNAME_LABEL = "kubernetes.io/hostname"
S3_SECRET_KEYS = ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY")
# seed 001 section 10: what the platform sets on the worker Pod that task Pods get as well.
FORWARDED_ENV = ("IRIS_SERVICE_ACCOUNT_NAME", "IRIS_S3_SECRET_NAME", "AWS_ENDPOINT_URL", "FSSPEC_S3")
# Waiting reasons after which a container will not start without someone changing something.
FATAL_WAITING_REASONS = frozenset(
    {
        "ErrImagePull",
        "ImagePullBackOff",
        "InvalidImageName",
        "CreateContainerConfigError",
        "CreateContainerError",
    }
)
# seed 001 section 10: set in every task Pod through the downward API.
DOWNWARD_ENV = {
    "IRIS_WORKER_NODE_NAME": "spec.nodeName",
    "IRIS_POD_NAMESPACE": "metadata.namespace",
    "IRIS_POD_NAME": "metadata.name",
    "IRIS_POD_UID": "metadata.uid",
}
_IN_CLUSTER_NAMESPACE = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"
_WATCH_SECONDS = 60
_EXEC_SECONDS = 120
_FOLLOWER_JOIN_SECONDS = 10.0
_STOP_SETTLE_SECONDS = 30.0
# How long a task Pod may stay unschedulable before its attempt fails with the scheduler's reason.
# The Pod is pinned to its worker's node, so no autoscaler can make room for it: room appears only
# when Pods already on the node end, and a deleted Pod takes up to its termination grace period to
# go (Kubernetes' default terminationGracePeriodSeconds is 30 s; an attempt the worker kills, its
# kill_grace_period). Twice that default covers a Pod on its way out.
UNSCHEDULABLE_GRACE_SECONDS = 60.0
_MAX_POOL_SIZE = 64
_LABEL_VALUE = re.compile(r"(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?")


def label_value(text: str) -> str:
    """`text` as a valid label value; values that had to change get a hash so they stay distinct."""
    if len(text) <= 63 and _LABEL_VALUE.fullmatch(text):
        return text
    digest = hashlib.sha256(text.encode()).hexdigest()[:8]
    cleaned = re.sub(r"[^A-Za-z0-9_.-]+", ".", text).strip("._-")[: 63 - 9].rstrip("._-")
    return f"{cleaned}-{digest}" if cleaned else digest


def pod_name(config: ContainerConfig) -> str:
    """iris-<task>-<attempt>-<random>: a valid Pod name a person can trace back to the task."""
    task = re.sub(r"[^a-z0-9]+", "-", config.task_id.lower()).strip("-")[:40].strip("-") or "task"
    return f"iris-{task}-{config.attempt_id}-{uuid.uuid4().hex[:8]}"


@dataclass(frozen=True)
class KubernetesSettings:
    """Where task Pods go and what they get; the platform sets these in the worker Pod's env."""

    namespace: str = "default"
    owner_pod_name: str = ""
    owner_pod_uid: str = ""
    node_name: str = ""
    service_account: str = ""
    s3_secret: str = ""
    # The scale group's `infiniband`: task Pods claim `rdma/ib: 1`. Seed 001 names no variable for
    # it in the Pods' env; the platform tells the worker through IRIS_INFINIBAND.
    infiniband: bool = False
    forwarded_env: tuple[tuple[str, str], ...] = ()
    # Image with iris for the Pod's workdir containers; the worker's own Pod's image when empty
    # (outside a cluster: the task image).
    helper_image: str = ""
    unschedulable_grace_s: float = UNSCHEDULABLE_GRACE_SECONDS

    @classmethod
    def from_env(cls, environ: dict[str, str] | None = None) -> KubernetesSettings:
        env = os.environ if environ is None else environ
        namespace = env.get("IRIS_POD_NAMESPACE", "")
        if not namespace and os.path.exists(_IN_CLUSTER_NAMESPACE):
            with open(_IN_CLUSTER_NAMESPACE) as handle:
                namespace = handle.read().strip()
        return cls(
            namespace=namespace or "default",
            owner_pod_name=env.get("IRIS_POD_NAME", ""),
            owner_pod_uid=env.get("IRIS_POD_UID", ""),
            node_name=env.get("IRIS_WORKER_NODE_NAME", ""),
            service_account=env.get("IRIS_SERVICE_ACCOUNT_NAME", ""),
            s3_secret=env.get("IRIS_S3_SECRET_NAME", ""),
            infiniband=env.get("IRIS_INFINIBAND", "").lower() in ("1", "true", "yes"),
            forwarded_env=tuple((key, env[key]) for key in FORWARDED_ENV if env.get(key)),
        )

    @property
    def owner(self) -> str:
        """Which worker's Pods these are: its Pod's name, or the host's name outside a cluster."""
        return label_value(self.owner_pod_name or socket.gethostname())


def pod_path(text: str, workdir: Path) -> str:
    """`text` with the worker's workdir replaced by the Pod's /app, where the same files are."""
    return re.sub(re.escape(str(workdir)) + r"(?=$|[/:\s'\"])", APP_DIR, text)


def _fill_command(config: ContainerConfig, with_files: bool) -> list[str]:
    command = ["python3", "-m", "iris.cluster.runtime.pod_workdir", "fill", APP_DIR]
    if config.bundle_uri:
        command += ["--bundle", config.bundle_uri, "--sha256", config.bundle_sha256]
    if with_files:
        command += ["--files", f"{FILES_MOUNT}/{FILES_KEY}"]
    return command


def task_pod_manifest(
    config: ContainerConfig,
    name: str,
    settings: KubernetesSettings,
    helper_image: str = "",
    with_files: bool = False,
) -> dict[str, Any]:
    """The Pod of one attempt: its workdir, build steps, the task, and a container keeping /app.

    Init containers fill the `/app` emptyDir (`pod_workdir fill`: the bundle through fsspec, then
    the files the worker wrote, from the ConfigMap of the same name) and then run the build steps
    there. The task container waits for the worker's go (a file `run()` creates) and then runs the
    command, so building and running stay two calls as in every runtime. The `workdir` container
    holds /app after the task ends so the worker can collect what it wrote.
    """
    helper_image = helper_image or config.image
    env = {**dict(settings.forwarded_env), **container_env(config)}
    env_list: list[dict[str, Any]] = [
        {"name": key, "value": pod_path(value, config.workdir)} for key, value in env.items()
    ]
    for key, path in DOWNWARD_ENV.items():
        if key not in env:
            env_list.append({"name": key, "valueFrom": {"fieldRef": {"fieldPath": path}}})
    if settings.s3_secret:
        for key in S3_SECRET_KEYS:
            if key not in env:
                env_list.append(
                    {"name": key, "valueFrom": {"secretKeyRef": {"name": settings.s3_secret, "key": key}}}
                )
    requests: dict[str, str] = {}
    limits: dict[str, str] = {}
    if config.cpu_millicores:
        requests["cpu"] = limits["cpu"] = f"{config.cpu_millicores}m"
    if config.memory_bytes:
        requests["memory"] = limits["memory"] = str(config.memory_bytes)
    if config.disk_bytes:
        requests["ephemeral-storage"] = str(config.disk_bytes)
    if config.gpu_count:
        limits[GPU_RESOURCE] = requests[GPU_RESOURCE] = str(config.gpu_count)
    if settings.infiniband:
        limits[RDMA_RESOURCE] = requests[RDMA_RESOURCE] = "1"
    resources = {key: value for key, value in (("requests", requests), ("limits", limits)) if value}
    app_mount = [{"name": WORKDIR_VOLUME, "mountPath": APP_DIR}]

    def container(container_name: str, image: str, command: list[str], **extra: Any) -> dict[str, Any]:
        return {
            "name": container_name,
            "image": image,
            "command": command,
            "workingDir": APP_DIR,
            "env": env_list,
            "volumeMounts": app_mount,
            **extra,
        }

    fill = container(FILL_CONTAINER, helper_image, _fill_command(config, with_files))
    volumes: list[dict[str, Any]] = [{"name": WORKDIR_VOLUME, "emptyDir": {}}]
    if with_files:
        volumes.append({"name": FILES_VOLUME, "configMap": {"name": name}})
        fill["volumeMounts"] = [
            *app_mount,
            {"name": FILES_VOLUME, "mountPath": FILES_MOUNT, "readOnly": True},
        ]
    if config.bundle_uri.startswith("file://"):
        # A file:// store is a directory every node mounts at the same path.
        store = str(Path(config.bundle_uri.removeprefix("file://")).parent)
        volumes.append({"name": BUNDLE_STORE_VOLUME, "hostPath": {"path": store, "type": "Directory"}})
        fill["volumeMounts"] = [
            *fill["volumeMounts"],
            {"name": BUNDLE_STORE_VOLUME, "mountPath": store, "readOnly": True},
        ]
    steps = [
        container(
            step_container(index),
            config.image,
            [pod_path(arg, config.workdir) for arg in argv],
            resources=resources,
        )
        for index, (_, argv) in enumerate(build_steps(config))
    ]
    gated = [
        "sh",
        "-c",
        _GATE_SCRIPT,
        "iris-task",
        *(pod_path(arg, config.workdir) for arg in config.command),
    ]
    spec: dict[str, Any] = {
        "restartPolicy": "Never",
        "hostNetwork": True,
        "dnsPolicy": "ClusterFirstWithHostNet",
        "volumes": volumes,
        "initContainers": [fill, *steps],
        "containers": [
            container(MAIN_CONTAINER, config.image, gated, resources=resources),
            container(
                WORKDIR_CONTAINER, helper_image, ["python3", "-m", "iris.cluster.runtime.pod_workdir", "hold"]
            ),
        ],
        # Every task Pod tolerates the GPU taint: a GPU node may run tasks that need no GPU.
        "tolerations": [dict(GPU_TOLERATION)],
    }
    if settings.service_account:
        spec["serviceAccountName"] = settings.service_account
    if settings.node_name:
        # The controller placed the task by what this worker's node offers (its GPUs among them).
        spec["nodeSelector"] = {HOSTNAME_LABEL: settings.node_name}
    metadata: dict[str, Any] = {
        "name": name,
        "namespace": settings.namespace,
        "labels": {
            **{key: label_value(value) for key, value in config.labels.items()},
            LABEL_ROLE: ROLE_MAIN,
            LABEL_OWNER: settings.owner,
        },
        # Label values are restricted; the verbatim ones are kept for people and tools.
        "annotations": {**config.labels, "kubectl.kubernetes.io/default-container": MAIN_CONTAINER},
    }
    if settings.owner_pod_name and settings.owner_pod_uid:
        metadata["ownerReferences"] = [
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "name": settings.owner_pod_name,
                "uid": settings.owner_pod_uid,
            }
        ]
    return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": spec}


@dataclass(frozen=True)
class NodeRoom:
    """What a worker's node has left for the worker's task Pods."""

    cpu_millicores: int
    memory_bytes: int
    gpus: int


def _quantity(text: Any) -> float:
    from kubernetes.utils import parse_quantity

    return float(parse_quantity(str(text)))


def pod_requests(pod: dict[str, Any]) -> dict[str, float]:
    """What the scheduler counts a Pod as taking from its node: per resource, the larger of its
    containers' requests summed and its largest init container's (a request not given is the
    limit, as the API server defaults it)."""

    def requested(container: dict[str, Any]) -> dict[str, float]:
        resources = container.get("resources") or {}
        amounts = {**(resources.get("limits") or {}), **(resources.get("requests") or {})}
        return {name: _quantity(value) for name, value in amounts.items()}

    spec = pod.get("spec") or {}
    total: dict[str, float] = {}
    for container in spec.get("containers") or []:
        for name, amount in requested(container).items():
            total[name] = total.get(name, 0.0) + amount
    for container in spec.get("initContainers") or []:
        for name, amount in requested(container).items():
            total[name] = max(total.get(name, 0.0), amount)
    return total


def node_room(node: dict[str, Any], pods: list[dict[str, Any]], owner: str) -> NodeRoom:
    """The node's allocatable cpu, memory and GPUs minus what the live Pods on it request, except
    the task Pods of worker `owner` (they use the room this worker offers)."""
    allocatable = (node.get("status") or {}).get("allocatable") or {}
    cpu = _quantity(allocatable.get("cpu", 0))
    memory = _quantity(allocatable.get("memory", 0))
    gpus = _quantity(allocatable.get(GPU_RESOURCE, 0))
    for pod in pods:
        labels = (pod.get("metadata") or {}).get("labels") or {}
        phase = (pod.get("status") or {}).get("phase")
        own_task = labels.get(LABEL_MANAGED) == "true" and labels.get(LABEL_OWNER) == owner
        if own_task or phase in ("Succeeded", "Failed"):
            continue
        requests = pod_requests(pod)
        cpu -= requests.get("cpu", 0.0)
        memory -= requests.get("memory", 0.0)
        gpus -= requests.get(GPU_RESOURCE, 0.0)
    return NodeRoom(
        cpu_millicores=max(0, int(cpu * 1000)), memory_bytes=max(0, int(memory)), gpus=max(0, int(gpus))
    )


def step_container(index: int) -> str:
    return f"setup-{index}"


def _api_errors() -> tuple[type[BaseException], ...]:
    import urllib3.exceptions
    from kubernetes.client.rest import ApiException

    return (ApiException, urllib3.exceptions.HTTPError, OSError)


def _explain(exc: BaseException) -> str:
    body = getattr(exc, "body", None)
    if body:
        try:
            return str(json.loads(body).get("message") or body)
        except ValueError:
            return str(body)
    return str(getattr(exc, "reason", None) or exc)


def _state(pod: dict[str, Any] | None, container: str = MAIN_CONTAINER) -> dict[str, Any]:
    """The `state` of one of the Pod's containers or init containers."""
    status = (pod or {}).get("status") or {}
    statuses = (status.get("containerStatuses") or []) + (status.get("initContainerStatuses") or [])
    found = next((s for s in statuses if s.get("name") == container), None)
    return (found or {}).get("state") or {}


def _fatal_waiting(pod: dict[str, Any] | None) -> dict[str, Any] | None:
    """The `waiting` state of a container of the Pod that will not start as things are, if any."""
    status = (pod or {}).get("status") or {}
    for container in (status.get("initContainerStatuses") or []) + (status.get("containerStatuses") or []):
        waiting = (container.get("state") or {}).get("waiting") or {}
        if waiting.get("reason") in FATAL_WAITING_REASONS:
            return waiting
    return None


def _unschedulable(pod: dict[str, Any] | None) -> str | None:
    """The scheduler's message while it cannot place the Pod (PodScheduled False, Unschedulable)."""
    for condition in ((pod or {}).get("status") or {}).get("conditions") or []:
        if (
            condition.get("type") == "PodScheduled"
            and condition.get("status") == "False"
            and condition.get("reason") == "Unschedulable"
        ):
            return str(condition.get("message") or "Unschedulable")
    return None


class PodWatch:
    """The latest state of one Pod, kept current by a watch (resumed from the last version seen).

    Remembers the Pod as it was when deleted, so how its container ended is known afterwards.
    """

    def __init__(self, api_client: ApiClient, namespace: str, name: str, resource_version: str) -> None:
        from kubernetes import client

        self._core = client.CoreV1Api(api_client)
        self._namespace = namespace
        self._name = name
        self._version = resource_version
        self._changed = threading.Condition()
        self.pod: dict[str, Any] | None = None
        self.deleted = False
        self._stopped = False
        self._thread = threading.Thread(target=self._run, name=f"watch-{name}", daemon=True)
        self._thread.start()

    def wait_for(self, done: Callable[[dict[str, Any] | None, bool], bool], timeout: float | None) -> bool:
        """Block until `done(pod, deleted)` holds or the watch was stopped; False after `timeout` seconds."""
        with self._changed:
            return self._changed.wait_for(lambda: self._stopped or done(self.pod, self.deleted), timeout)

    @property
    def stopped(self) -> bool:
        with self._changed:
            return self._stopped

    def stop(self) -> None:
        with self._changed:
            self._stopped = True
            self._changed.notify_all()

    def _run(self) -> None:
        errors = _api_errors()
        while True:
            with self._changed:
                if self._stopped or self.deleted:
                    return
            try:
                self._stream()
            except errors as exc:
                if getattr(exc, "status", None) == 410:
                    # The history moved on: read the Pod afresh and watch from there.
                    self._relist()
                elif not self._wait_before_retry():
                    return

    def _stream(self) -> None:
        response = self._core.list_namespaced_pod(
            self._namespace,
            field_selector=f"metadata.name={self._name}",
            watch=True,
            resource_version=self._version,
            allow_watch_bookmarks=True,
            timeout_seconds=_WATCH_SECONDS,
            _preload_content=False,
        )
        try:
            buffer = b""
            for chunk in response.stream(65536, decode_content=True):
                buffer += chunk
                while b"\n" in buffer:
                    line, buffer = buffer.split(b"\n", 1)
                    if line.strip() and self._apply(json.loads(line)):
                        return
        finally:
            response.release_conn()

    def _apply(self, event: dict[str, Any]) -> bool:
        """Take one watch event; True once the Pod is gone or the watch was stopped."""
        from kubernetes.client.rest import ApiException

        kind, obj = event.get("type"), event.get("object") or {}
        if kind == "ERROR":
            raise ApiException(status=obj.get("code"), reason=obj.get("message"))
        version = (obj.get("metadata") or {}).get("resourceVersion")
        with self._changed:
            if version:
                self._version = version
            if kind in ("ADDED", "MODIFIED", "DELETED"):
                self.pod = obj
            if kind == "DELETED":
                self.deleted = True
            self._changed.notify_all()
            return self.deleted or self._stopped

    def _relist(self) -> None:
        errors = _api_errors()
        try:
            pods = self._core.list_namespaced_pod(
                self._namespace, field_selector=f"metadata.name={self._name}", _preload_content=False
            )
            listing = json.loads(pods.data)
        except errors:
            self._wait_before_retry()
            return
        with self._changed:
            self._version = listing["metadata"]["resourceVersion"]
            items = listing.get("items") or []
            if items:
                self.pod = items[0]
            elif self.pod is not None:
                self.deleted = True
            self._changed.notify_all()

    def _wait_before_retry(self) -> bool:
        with self._changed:
            self._changed.wait(1.0)
            return not self._stopped


class _LogFollower:
    """Follows one stream of a container's log into whole, timestamped lines."""

    def __init__(
        self,
        api_client: ApiClient,
        namespace: str,
        pod: str,
        stream: str,
        emit: Callable[[str, int], None],
        container: str = MAIN_CONTAINER,
    ) -> None:
        from kubernetes import client

        self._core = client.CoreV1Api(api_client)
        self._namespace = namespace
        self._pod = pod
        self._container = container
        self._stream = stream
        self._assembler = LineAssembler(emit)
        self.thread = threading.Thread(target=self._run, name=f"log-{stream}-{pod}", daemon=True)
        self.thread.start()

    def _run(self) -> None:
        try:
            response = self._core.read_namespaced_pod_log(
                self._pod,
                self._namespace,
                container=self._container,
                follow=True,
                timestamps=True,
                stream=self._stream,
                _preload_content=False,
            )
        except _api_errors():
            # Gone before its log could be read (deleted at once): nothing more to take.
            return
        buffer = b""
        try:
            for chunk in response.stream(65536, decode_content=True):
                buffer += chunk
                while b"\n" in buffer:
                    line, buffer = buffer.split(b"\n", 1)
                    self._take(line, complete=True)
        except _api_errors():
            pass
        finally:
            response.release_conn()
        if buffer:
            self._take(buffer, complete=True)

    def _take(self, raw: bytes, complete: bool) -> None:
        text = raw.decode("utf-8", errors="replace")
        stamp, _, data = text.partition(" ")
        try:
            timestamp_ms = parse_rfc3339_ms(stamp)
        except ValueError:
            timestamp_ms, data = now_ms(), text
        self._assembler.feed(data, timestamp_ms, complete)


class KubernetesContainerHandle(EngineContainerHandle):
    def __init__(
        self,
        runtime: KubernetesRuntime,
        config: ContainerConfig,
        name: str,
        on_cleanup: Callable[[str], None],
    ) -> None:
        super().__init__(config, name, on_cleanup)
        from kubernetes import client

        self._runtime = runtime
        self._api_client = runtime.api_client
        self._core = client.CoreV1Api(runtime.api_client)
        self._namespace = runtime.settings.namespace
        self._attempt_watch: PodWatch | None = None
        self._pod_lock = threading.Lock()
        self._followers: list[_LogFollower] = []

    # -- engine calls ---------------------------------------------------------------------------

    def _start_main(self) -> None:
        watch = self._ensure_pod()
        self._await_running(watch, MAIN_CONTAINER)
        self._await_running(watch, WORKDIR_CONTAINER)
        if "terminated" not in _state(watch.pod):
            self._exec(["touch", f"{APP_DIR}/{STATE_DIRNAME}/{START_NAME}"])
        for stream, source in (("Stdout", "stdout"), ("Stderr", "stderr")):
            self._followers.append(
                _LogFollower(
                    self._api_client,
                    self._namespace,
                    self.container_id,
                    stream,
                    lambda data, ts, source=source: self._append(source, data, ts),
                )
            )

    def _await_main_exit(self) -> EngineExit:
        watch = self._pod_watch()
        watch.wait_for(lambda pod, deleted: deleted or "terminated" in _state(pod), None)
        for follower in self._followers:
            follower.thread.join(_FOLLOWER_JOIN_SECONDS)
        # A Pod being deleted was killed: its workdir container is stopping, and the worker takes
        # nothing from a killed attempt.
        if not watch.deleted and not ((watch.pod or {}).get("metadata") or {}).get("deletionTimestamp"):
            self._collect_outputs()
        return self._exit_of(watch.pod, MAIN_CONTAINER)

    def _stop(self, container: str, grace_seconds: float) -> None:
        # Steps and the task share the Pod: stopping any of them ends the attempt.
        watch = self._attempt_watch
        try:
            self._core.delete_namespaced_pod(
                self.container_id, self._namespace, grace_period_seconds=stop_timeout_seconds(grace_seconds)
            )
        except _api_errors():
            # Already gone (or the API is unreachable): nothing left to stop from here.
            return
        if watch is not None:
            watch.wait_for(
                lambda pod, deleted: deleted or "terminated" in _state(pod, container),
                stop_timeout_seconds(grace_seconds) + _STOP_SETTLE_SECONDS,
            )

    def _run_step(self, index: int, argv: list[str], on_output: Callable[[str, int], None]) -> EngineExit:
        watch = self._ensure_pod()
        name = step_container(index)
        self._await_running(watch, name)
        self._step_started(name)
        follower = _LogFollower(self._api_client, self._namespace, self.container_id, "All", on_output, name)
        watch.wait_for(lambda pod, deleted: deleted or "terminated" in _state(pod, name), None)
        follower.thread.join(_FOLLOWER_JOIN_SECONDS)
        return self._exit_of(watch.pod, name)

    def _engine_stats(self) -> ContainerStats:
        from kubernetes import client

        try:
            metrics = client.CustomObjectsApi(self._api_client).get_namespaced_custom_object(
                "metrics.k8s.io", "v1beta1", self._namespace, "pods", self.container_id
            )
        except _api_errors() as exc:
            raise ContainerError(f"no metrics for Pod {self.container_id}: {_explain(exc)}") from exc
        containers = [c for c in metrics.get("containers") or [] if c.get("name") == MAIN_CONTAINER]
        if not containers:
            raise ContainerError(f"no metrics for the task container of Pod {self.container_id}")
        usage = containers[0].get("usage") or {}
        from kubernetes.utils import parse_quantity

        memory = int(parse_quantity(usage.get("memory", "0")))
        # The metrics API reports cores in use over its window, so no second sample is needed.
        percent = 100.0 * float(parse_quantity(usage.get("cpu", "0")))
        return ContainerStats(memory_bytes=memory, cpu_percent=percent, process_count=len(containers))

    def _remove(self) -> None:
        for follower in self._followers:
            follower.thread.join(_FOLLOWER_JOIN_SECONDS)
        if self._attempt_watch is not None:
            self._runtime.delete_attempt(self.container_id)
            self._attempt_watch.stop()

    # -- helpers --------------------------------------------------------------------------------

    def _pod_watch(self) -> PodWatch:
        if self._attempt_watch is None:
            raise ContainerError(f"Pod {self.container_id} was never created")
        return self._attempt_watch

    def _ensure_pod(self) -> PodWatch:
        """Create the attempt's Pod (and the ConfigMap with the worker's files) on first use."""
        with self._pod_lock:
            if self._attempt_watch is not None:
                return self._attempt_watch
            files = zip_tree(self._config.workdir)
            if len(files) > MAX_WORKER_FILES_BYTES:
                raise ContainerError(
                    f"the files the worker wrote in {self._config.workdir} take {len(files) / 2**20:.1f} MiB zipped; "
                    f"a task Pod receives at most {MAX_WORKER_FILES_BYTES // 1024} KiB this way: pass large "
                    "inputs through storage"
                )
            settings = self._runtime.settings
            manifest = task_pod_manifest(
                self._config, self.container_id, settings, self._runtime.helper_image, with_files=bool(files)
            )
            try:
                if files:
                    self._core.create_namespaced_config_map(
                        self._namespace,
                        {
                            "metadata": {
                                "name": self.container_id,
                                "labels": manifest["metadata"]["labels"],
                            },
                            "binaryData": {FILES_KEY: base64.b64encode(files).decode()},
                        },
                    )
                created = self._core.create_namespaced_pod(self._namespace, manifest, _preload_content=False)
            except _api_errors() as exc:
                raise ContainerError(f"cannot create Pod {self.container_id}: {_explain(exc)}") from exc
            pod = json.loads(created.data)
            if files:
                # Deleting the Pod (here, by its worker's GC or by hand) removes its files too.
                owner = {
                    "apiVersion": "v1",
                    "kind": "Pod",
                    "name": self.container_id,
                    "uid": pod["metadata"]["uid"],
                }
                try:
                    self._core.patch_namespaced_config_map(
                        self.container_id, self._namespace, {"metadata": {"ownerReferences": [owner]}}
                    )
                except _api_errors() as exc:
                    raise ContainerError(
                        f"cannot update ConfigMap {self.container_id}: {_explain(exc)}"
                    ) from exc
            self._attempt_watch = PodWatch(
                self._api_client, self._namespace, self.container_id, pod["metadata"]["resourceVersion"]
            )
            return self._attempt_watch

    def _await_running(self, watch: PodWatch, container: str) -> None:
        """Wait until `container` runs or ended; raise with the kubelet's reason if it cannot start,
        or with the scheduler's once the Pod stayed unschedulable for the settings' grace."""

        def fill_failed(pod: dict[str, Any] | None) -> bool:
            return _state(pod, FILL_CONTAINER).get("terminated", {}).get("exitCode", 0) != 0

        def started_or_stuck(pod: dict[str, Any] | None, deleted: bool) -> bool:
            state = _state(pod, container)
            phase = ((pod or {}).get("status") or {}).get("phase")
            return (
                deleted
                or "running" in state
                or "terminated" in state
                or _fatal_waiting(pod) is not None
                or phase == "Failed"
                or fill_failed(pod)
            )

        grace = self._runtime.settings.unschedulable_grace_s
        unschedulable_since: float | None = None
        while True:
            # Wakes when the Pod starts or gets stuck, when it becomes (or stops being)
            # unschedulable, and when it has been unschedulable for the whole grace.
            timeout = None if unschedulable_since is None else unschedulable_since + grace - time.monotonic()
            settled = watch.wait_for(
                lambda pod, deleted: started_or_stuck(pod, deleted)
                or (_unschedulable(pod) is None) != (unschedulable_since is None),
                None if timeout is None else max(timeout, 0.0),
            )
            if not settled:
                raise ContainerError(
                    f"Pod {self.container_id} could not be scheduled for {grace:.0f}s: "
                    f"{_unschedulable(watch.pod)}"
                )
            if watch.stopped or started_or_stuck(watch.pod, watch.deleted):
                break
            unschedulable_since = None if _unschedulable(watch.pod) is None else time.monotonic()
        pod, deleted = watch.pod, watch.deleted
        state = _state(pod, container)
        if "running" in state or "terminated" in state:
            return
        if fill_failed(pod):
            raise ContainerError(f"cannot materialise the task's workdir: {self._fill_log()}")
        if deleted:
            raise ContainerError(
                f"Pod {self.container_id} was deleted before its container {container} started"
            )
        waiting = _fatal_waiting(pod)
        if waiting is not None:
            raise ContainerError(f"{waiting['reason']}: {waiting.get('message', '')}".rstrip(": "))
        status = (pod or {}).get("status") or {}
        raise ContainerError(
            f"Pod {self.container_id} failed: {status.get('reason', '')} {status.get('message', '')}".strip()
        )

    def _fill_log(self) -> str:
        try:
            text = self._core.read_namespaced_pod_log(
                self.container_id, self._namespace, container=FILL_CONTAINER, tail_lines=20
            )
        except _api_errors() as exc:
            return f"(its log is unavailable: {_explain(exc)})"
        return str(text).strip() or "it exited without saying why"

    def _exec(self, command: list[str]) -> str:
        """Run `command` in the Pod's workdir container; its stdout, or ContainerError."""
        from kubernetes import client
        from kubernetes.stream import stream

        # The exec transport swaps the client's request function while it runs: keep it off the
        # client the watches and log followers use.
        api_client = client.ApiClient(self._api_client.configuration)
        try:
            response = stream(
                client.CoreV1Api(api_client).connect_get_namespaced_pod_exec,
                self.container_id,
                self._namespace,
                container=WORKDIR_CONTAINER,
                command=command,
                stdout=True,
                stderr=True,
                stdin=False,
                tty=False,
                _preload_content=False,
            )
            response.run_forever(timeout=_EXEC_SECONDS)
            output, errors, code = response.read_stdout(), response.read_stderr(), response.returncode
            response.close()
        except (*_api_errors(), ConnectionError, ValueError) as exc:
            raise ContainerError(
                f"cannot run {command[0]} in Pod {self.container_id}: {_explain(exc)}"
            ) from exc
        finally:
            api_client.close()
        if code != 0:
            raise ContainerError(
                f"{' '.join(command)} failed in Pod {self.container_id} ({code}): {errors.strip()}"
            )
        return output

    def _collect_outputs(self) -> None:
        """Copy what the task wrote in /app back into the worker's workdir."""
        encoded = self._exec(["python3", "-m", "iris.cluster.runtime.pod_workdir", "collect", APP_DIR])
        try:
            archive = base64.b64decode(encoded, validate=True)
        except binascii.Error as exc:
            raise ContainerError(
                f"the task's outputs in Pod {self.container_id} came back garbled: {exc}"
            ) from exc
        if archive:
            try:
                extract_bundle(archive, self._config.workdir)
            except (UnsafeBundleError, OSError) as exc:
                raise ContainerError(
                    f"cannot copy the task's outputs into {self._config.workdir}: {exc}"
                ) from exc

    def _exit_of(self, pod: dict[str, Any] | None, container: str) -> EngineExit:
        terminated = _state(pod, container).get("terminated")
        if terminated is None:
            return EngineExit(exit_code=None, message="the Pod was deleted before its container finished")

        def stamp(key: str) -> int | None:
            text = terminated.get(key)
            if not text or text.startswith("1970-"):
                return None
            return parse_rfc3339_ms(text)

        return EngineExit(
            exit_code=terminated.get("exitCode"),
            oom_killed=terminated.get("reason") == "OOMKilled",
            # The task container starts before its go; the engine's own start time is the command's.
            started_at_ms=None,
            finished_at_ms=stamp("finishedAt"),
            message=terminated.get("message", "")
            if terminated.get("reason") not in ("Completed", "Error", "OOMKilled")
            else "",
        )


class KubernetesRuntime:
    name = "kubernetes"
    # Task Pods fetch the job bundle themselves (they may run on any node): the worker does not.
    fetches_bundle = True
    pulls_images = True

    def __init__(self, settings: KubernetesSettings | None = None, kubeconfig: str | None = None) -> None:
        try:
            from kubernetes import client, config
        except ImportError as exc:
            raise ContainerError(
                "the kubernetes runtime needs the `kubernetes` package: pip install 'iris[kubernetes]'"
            ) from exc
        self.settings = settings or KubernetesSettings.from_env()
        configuration = client.Configuration()
        try:
            if kubeconfig or os.environ.get("KUBECONFIG") or not os.environ.get("KUBERNETES_SERVICE_HOST"):
                config.load_kube_config(config_file=kubeconfig, client_configuration=configuration)
            else:
                config.load_incluster_config(client_configuration=configuration)
        except (config.ConfigException, OSError, TypeError) as exc:
            raise ContainerError(f"cannot load Kubernetes credentials: {exc}") from exc
        configuration.connection_pool_maxsize = _MAX_POOL_SIZE
        self.api_client = client.ApiClient(configuration)
        self._core = client.CoreV1Api(self.api_client)
        try:
            self._core.list_namespaced_pod(self.settings.namespace, limit=1, _request_timeout=30)
        except _api_errors() as exc:
            raise ContainerError(
                f"cannot list Pods in namespace {self.settings.namespace!r} at {configuration.host}: {_explain(exc)}"
            ) from exc
        self.helper_image = self.settings.helper_image or self._own_image()
        self._lock = threading.Lock()
        self._live: set[str] = set()

    def _own_image(self) -> str:
        """The image of the worker's Pod (it has iris, with the storage clients); empty outside one."""
        if not self.settings.owner_pod_name:
            return ""
        try:
            pod = self._core.read_namespaced_pod(self.settings.owner_pod_name, self.settings.namespace)
        except _api_errors() as exc:
            raise ContainerError(
                f"cannot read the worker's Pod {self.settings.owner_pod_name!r}: {_explain(exc)}"
            ) from exc
        return pod.spec.containers[0].image

    def node_room(self) -> NodeRoom | None:
        """What the worker's node has left for its task Pods (None outside a node): other Pods there,
        such as daemonsets or the controller, hold part of the node for good."""
        node_name = self.settings.node_name
        if not node_name:
            return None
        try:
            node = json.loads(self._core.read_node(node_name, _preload_content=False).data)
            listing = self._core.list_pod_for_all_namespaces(
                field_selector=f"spec.nodeName={node_name},status.phase!=Succeeded,status.phase!=Failed",
                _preload_content=False,
            )
        except _api_errors() as exc:
            raise ContainerError(
                f"cannot read what node {node_name} has left for tasks: {_explain(exc)}"
            ) from exc
        return node_room(node, json.loads(listing.data).get("items") or [], self.settings.owner)

    def create_container(self, config: ContainerConfig) -> KubernetesContainerHandle:
        check_config(config, "kubernetes")
        name = pod_name(config)
        with self._lock:
            self._live.add(name)
        return KubernetesContainerHandle(self, config, name, on_cleanup=self._forget)

    def remove_leftovers(self) -> int:
        """Delete this worker's iris.managed Pods (and their ConfigMaps) that this runtime did not create."""
        with self._lock:
            live = set(self._live)
        selector = f"{LABEL_MANAGED}=true,{LABEL_OWNER}={self.settings.owner}"
        namespace = self.settings.namespace
        try:
            pods = self._core.list_namespaced_pod(namespace, label_selector=selector).items
            config_maps = self._core.list_namespaced_config_map(namespace, label_selector=selector).items
        except _api_errors() as exc:
            raise ContainerError(f"cannot list Pods: {_explain(exc)}") from exc
        removed = 0
        for pod in pods:
            if pod.metadata.name not in live and self.delete_attempt(pod.metadata.name):
                removed += 1
        for config_map in config_maps:
            if config_map.metadata.name not in live:
                self.delete_attempt(config_map.metadata.name)
        return removed

    def delete_attempt(self, name: str) -> bool:
        """Delete an attempt's Pod and ConfigMap at once; True if the Pod was there."""
        namespace = self.settings.namespace
        try:
            self._core.delete_namespaced_config_map(name, namespace)
        except _api_errors():
            pass  # it had no files, or the Pod's deletion took it already
        try:
            self._core.delete_namespaced_pod(name, namespace, grace_period_seconds=0)
        except _api_errors():
            return False
        return True

    def _forget(self, name: str) -> None:
        with self._lock:
            self._live.discard(name)
