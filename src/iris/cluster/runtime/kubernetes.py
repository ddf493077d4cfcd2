"""KubernetesRuntime: each task attempt runs as its own Pod, created by the worker through the API.

Talks to the API server with the official `kubernetes` client (imported when the runtime is
created, so workers using another runtime start without it): in-cluster credentials when the
worker runs as a Pod, otherwise $KUBECONFIG or ~/.kube/config.

A task Pod (seed 001, "KubernetesRuntime"):
- runs the task image with the command, `restartPolicy: Never`, `hostNetwork: true` and
  `dnsPolicy: ClusterFirstWithHostNet` (ports the worker allocated are reachable as they are);
- mounts the worker's workdir (the extracted bundle) at its own path through a hostPath volume and
  is pinned to the worker's node, so paths the worker computes mean the same inside the Pod and
  what the task writes there (the callable's result) is visible to the worker;
- requests the job's cpu, memory and disk; limits memory and cpu; claims `nvidia.com/gpu: N`, and
  `rdma/ib: 1` when the scale group has infiniband; always tolerates the GPU taint, since it runs
  on its worker's node, which may be a GPU node even for a task that needs no GPU;
- gets the config's env, the downward-API variables of seed 001 section 10, and the S3
  credentials by `secretKeyRef` from the platform's Secret;
- has an ownerReference to the worker Pod, so deleting the worker Pod removes its tasks.

Build steps (the pip install, each setup command) run as short-lived Pods of the same shape, one
after the other. Logs come from the `log` subresource, followed per stream (stdout and stderr
apart, the API's `stream` parameter); exit codes, OOMKilled and start failures from the Pod's
container status, followed with a watch; kill deletes the Pod with the grace period (the kubelet
sends SIGTERM, then SIGKILL); stats come from the metrics API (metrics-server), which reports no
process count, so a running Pod counts its running containers.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import socket
import threading
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from iris.cluster.runtime.engine import (
    LABEL_ROLE,
    ROLE_MAIN,
    ROLE_SETUP,
    EngineContainerHandle,
    EngineExit,
    LineAssembler,
    check_config,
    container_env,
    now_ms,
    parse_rfc3339_ms,
    stop_timeout_seconds,
)
from iris.cluster.runtime.types import LABEL_MANAGED, ContainerConfig, ContainerError, ContainerStats

if TYPE_CHECKING:
    from kubernetes.client import ApiClient

LABEL_OWNER = "iris.owner"
MAIN_CONTAINER = "task"
WORKDIR_VOLUME = "workdir"
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
_FOLLOWER_JOIN_SECONDS = 10.0
_STOP_SETTLE_SECONDS = 30.0
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


def task_pod_manifest(
    config: ContainerConfig, name: str, settings: KubernetesSettings, role: str, command: list[str]
) -> dict[str, Any]:
    """The Pod running `command` for one attempt (the main command or a build step)."""
    workdir = str(config.workdir)
    env = {**dict(settings.forwarded_env), **container_env(config)}
    env_list: list[dict[str, Any]] = [{"name": key, "value": value} for key, value in env.items()]
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
    spec: dict[str, Any] = {
        "restartPolicy": "Never",
        "hostNetwork": True,
        "dnsPolicy": "ClusterFirstWithHostNet",
        "volumes": [{"name": WORKDIR_VOLUME, "hostPath": {"path": workdir, "type": "Directory"}}],
        "containers": [
            {
                "name": MAIN_CONTAINER,
                "image": config.image,
                "command": command,
                "workingDir": workdir,
                "env": env_list,
                "volumeMounts": [{"name": WORKDIR_VOLUME, "mountPath": workdir}],
                "resources": {k: v for k, v in (("requests", requests), ("limits", limits)) if v},
            }
        ],
    }
    if config.gpu_count:
        limits[GPU_RESOURCE] = requests[GPU_RESOURCE] = str(config.gpu_count)
    if settings.infiniband:
        limits[RDMA_RESOURCE] = requests[RDMA_RESOURCE] = "1"
    if config.gpu_count or settings.infiniband:
        spec["containers"][0]["resources"] = {"requests": requests, "limits": limits}
    # Every task Pod tolerates the GPU taint: it goes to its worker's node, which may be a GPU node
    # even when this task needs no GPU.
    spec["tolerations"] = [dict(GPU_TOLERATION)]
    if settings.service_account:
        spec["serviceAccountName"] = settings.service_account
    if settings.node_name:
        # The workdir is a directory on the worker's node.
        spec["nodeSelector"] = {HOSTNAME_LABEL: settings.node_name}
    metadata: dict[str, Any] = {
        "name": name,
        "namespace": settings.namespace,
        "labels": {
            **{key: label_value(value) for key, value in config.labels.items()},
            LABEL_ROLE: role,
            LABEL_OWNER: settings.owner,
        },
        # Label values are restricted; the verbatim ones are kept for people and tools.
        "annotations": dict(config.labels),
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


def _main_state(pod: dict[str, Any] | None) -> dict[str, Any]:
    statuses = ((pod or {}).get("status") or {}).get("containerStatuses") or []
    status = next((s for s in statuses if s.get("name") == MAIN_CONTAINER), None)
    return (status or {}).get("state") or {}


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
    """Follows one stream of the task container's log into whole, timestamped lines."""

    def __init__(
        self, api_client: ApiClient, namespace: str, pod: str, stream: str, emit: Callable[[str, int], None]
    ) -> None:
        from kubernetes import client

        self._core = client.CoreV1Api(api_client)
        self._namespace = namespace
        self._pod = pod
        self._stream = stream
        self._assembler = LineAssembler(emit)
        self.thread = threading.Thread(target=self._run, name=f"log-{stream}-{pod}", daemon=True)
        self.thread.start()

    def _run(self) -> None:
        try:
            response = self._core.read_namespaced_pod_log(
                self._pod,
                self._namespace,
                container=MAIN_CONTAINER,
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
        self._watches: dict[str, PodWatch] = {}
        self._followers: list[_LogFollower] = []

    # -- engine calls ---------------------------------------------------------------------------

    def _start_main(self) -> None:
        watch = self._create_pod(self.container_id, ROLE_MAIN, self._config.command)
        self._await_start(watch)
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
        watch = self._watches[self.container_id]
        watch.wait_for(lambda pod, deleted: deleted or "terminated" in _main_state(pod), None)
        for follower in self._followers:
            follower.thread.join(_FOLLOWER_JOIN_SECONDS)
        return self._exit_of(watch)

    def _stop(self, container: str, grace_seconds: float) -> None:
        watch = self._watches.get(container)
        try:
            self._core.delete_namespaced_pod(
                container, self._namespace, grace_period_seconds=stop_timeout_seconds(grace_seconds)
            )
        except _api_errors():
            # Already gone (or the API is unreachable): nothing left to stop from here.
            return
        if watch is not None:
            watch.wait_for(
                lambda pod, deleted: deleted or "terminated" in _main_state(pod),
                stop_timeout_seconds(grace_seconds) + _STOP_SETTLE_SECONDS,
            )

    def _run_step(self, index: int, argv: list[str], on_output: Callable[[str, int], None]) -> EngineExit:
        name = f"{self.container_id}-setup-{index}"
        watch = self._create_pod(name, ROLE_SETUP, argv)
        try:
            self._await_start(watch, name)
            self._step_started(name)
            follower = _LogFollower(self._api_client, self._namespace, name, "All", on_output)
            watch.wait_for(lambda pod, deleted: deleted or "terminated" in _main_state(pod), None)
            follower.thread.join(_FOLLOWER_JOIN_SECONDS)
            return self._exit_of(watch)
        finally:
            self._delete_quietly(name)

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
        for name, watch in list(self._watches.items()):
            self._delete_quietly(name)
            watch.stop()

    # -- helpers --------------------------------------------------------------------------------

    def _create_pod(self, name: str, role: str, command: list[str]) -> PodWatch:
        manifest = task_pod_manifest(self._config, name, self._runtime.settings, role, command)
        try:
            created = self._core.create_namespaced_pod(self._namespace, manifest, _preload_content=False)
        except _api_errors() as exc:
            raise ContainerError(f"cannot create Pod {name}: {_explain(exc)}") from exc
        version = json.loads(created.data)["metadata"]["resourceVersion"]
        watch = PodWatch(self._api_client, self._namespace, name, version)
        self._watches[name] = watch
        return watch

    def _await_start(self, watch: PodWatch, name: str | None = None) -> None:
        """Wait until the container runs or ended; raise with the kubelet's reason if it cannot start."""

        def started_or_stuck(pod: dict[str, Any] | None, deleted: bool) -> bool:
            state = _main_state(pod)
            waiting = state.get("waiting") or {}
            phase = ((pod or {}).get("status") or {}).get("phase")
            return (
                deleted
                or "running" in state
                or "terminated" in state
                or waiting.get("reason") in (FATAL_WAITING_REASONS)
                or phase == "Failed"
            )

        watch.wait_for(started_or_stuck, None)
        pod, deleted = watch.pod, watch.deleted
        state = _main_state(pod)
        if "running" in state or "terminated" in state:
            return
        if deleted:
            raise ContainerError(f"Pod {name or self.container_id} was deleted before its container started")
        waiting = state.get("waiting") or {}
        if waiting.get("reason"):
            raise ContainerError(f"{waiting['reason']}: {waiting.get('message', '')}".rstrip(": "))
        status = (pod or {}).get("status") or {}
        raise ContainerError(
            f"Pod {name or self.container_id} failed: {status.get('reason', '')} {status.get('message', '')}".strip()
        )

    def _exit_of(self, watch: PodWatch) -> EngineExit:
        terminated = _main_state(watch.pod).get("terminated")
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
            started_at_ms=stamp("startedAt"),
            finished_at_ms=stamp("finishedAt"),
            message=terminated.get("message", "")
            if terminated.get("reason") not in ("Completed", "Error", "OOMKilled")
            else "",
        )

    def _delete_quietly(self, name: str) -> None:
        try:
            self._core.delete_namespaced_pod(name, self._namespace, grace_period_seconds=0)
        except _api_errors():
            pass


class KubernetesRuntime:
    name = "kubernetes"

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
        self._lock = threading.Lock()
        self._live: set[str] = set()

    def create_container(self, config: ContainerConfig) -> KubernetesContainerHandle:
        check_config(config, "kubernetes")
        name = pod_name(config)
        with self._lock:
            self._live.add(name)
        return KubernetesContainerHandle(self, config, name, on_cleanup=self._forget)

    def remove_leftovers(self) -> int:
        """Delete this worker's iris.managed Pods that this runtime did not create."""
        with self._lock:
            live = set(self._live)
        selector = f"{LABEL_MANAGED}=true,{LABEL_OWNER}={self.settings.owner}"
        try:
            pods = self._core.list_namespaced_pod(self.settings.namespace, label_selector=selector).items
        except _api_errors() as exc:
            raise ContainerError(f"cannot list Pods: {_explain(exc)}") from exc
        removed = 0
        for pod in pods:
            name = pod.metadata.name
            if name in live or name.rpartition("-setup-")[0] in live:
                continue
            try:
                self._core.delete_namespaced_pod(name, self.settings.namespace, grace_period_seconds=0)
            except _api_errors():
                continue
            removed += 1
        return removed

    def _forget(self, name: str) -> None:
        with self._lock:
            self._live.discard(name)
