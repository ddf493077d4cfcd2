"""The fake's kubelet: runs every Pod bound to a node for real, as Docker containers on the test
session's dockerd, and reports them through Pod status, Events, `pods/log`, `pods/exec` and the
metrics API.

Per Pod a worker thread walks the real kubelet's path: mount volumes (FailedMount while a
ConfigMap, Secret or PersistentVolumeClaim is missing or unbound), check the image (ErrImagePull /
ImagePullBackOff when the engine does not have it: no registry is reachable, so nothing is ever
pulled), resolve env
(CreateContainerConfigError for a missing Secret or key), run init containers in order, then the
containers, restarting them by the Pod's restartPolicy with CrashLoopBackOff between attempts.
Readiness probes (httpGet, tcpSocket, exec) decide the Ready condition; a liveness probe failing
failureThreshold times in a row kills its container (with the grace period), which then restarts
as its restartPolicy says, counted in restartCount, with Unhealthy and Killing events.
Deleting a Pod stops its containers with the grace period (SIGTERM, then SIGKILL), records how they
ended, and only then removes the object. All containers share the host network, so a Pod's ports
are reachable on loopback as with `hostNetwork: true`.
"""

from __future__ import annotations

import base64
import json
import shutil
import socket
import struct
import threading
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import docker
import docker.errors

from fakes.kubernetes.control_plane import NODES, PODS, parse_quantity, record_event
from fakes.kubernetes.incluster import SERVICE_ACCOUNT_DIR, InCluster, service_hosts
from fakes.kubernetes.resources import find_resource
from fakes.kubernetes.store import ApiError, Store, WatchEvent, now_rfc3339
from fakes.kubernetes.websocket import ConnectionClosed, WebSocket

LABEL_CLUSTER = "fake-kubernetes.cluster"
LABEL_POD_UID = "fake-kubernetes.pod-uid"
_POLL_SECONDS = 0.1
_COMPONENT = "kubelet"


def _docker_time(text: str | None) -> str | None:
    """Docker's nanosecond timestamps at the seconds resolution Pod status carries."""
    if not text or text.startswith("0001-"):
        return None
    return text.split(".")[0].rstrip("Z") + "Z"


@dataclass
class ContainerRecord:
    name: str
    spec: dict[str, Any]
    init: bool
    docker_ids: list[str] = field(default_factory=list)
    restart_count: int = 0
    # One of the Pod status `state` shapes: {"waiting": ...}, {"running": ...}, {"terminated": ...}.
    state: dict[str, Any] = field(default_factory=lambda: {"waiting": {"reason": "ContainerCreating"}})
    last_state: dict[str, Any] = field(default_factory=dict)
    restart_at: float | None = None
    # Readiness: a container without a readinessProbe is ready while it runs.
    probe_ready: bool = False
    next_probe_at: float = 0.0
    # Liveness: consecutive failures of the current container's probe.
    liveness_failures: int = 0
    next_liveness_at: float = 0.0

    @property
    def ready(self) -> bool:
        return "running" in self.state and (self.probe_ready or not self.spec.get("readinessProbe"))

    @property
    def current_id(self) -> str | None:
        return self.docker_ids[-1] if self.docker_ids else None

    def status(self) -> dict[str, Any]:
        running = "running" in self.state
        return {
            "name": self.name,
            "image": self.spec.get("image", ""),
            "imageID": f"docker-pullable://{self.spec.get('image', '')}" if self.docker_ids else "",
            **({"containerID": f"docker://{self.current_id}"} if self.current_id else {}),
            "ready": self.ready,
            "started": running,
            "restartCount": self.restart_count,
            "state": self.state,
            "lastState": self.last_state,
        }


class ConfigError(Exception):
    """A container cannot be configured yet (missing Secret/ConfigMap or key); the reason says which."""


class PodWorker:
    def __init__(self, kubelet: Kubelet, pod: dict[str, Any]) -> None:
        self.kubelet = kubelet
        self.uid = pod["metadata"]["uid"]
        self.namespace = pod["metadata"]["namespace"]
        self.name = pod["metadata"]["name"]
        self.pod = pod
        spec = pod["spec"]
        self.init_records = [ContainerRecord(c["name"], c, True) for c in spec.get("initContainers") or []]
        self.records = [ContainerRecord(c["name"], c, False) for c in spec.get("containers") or []]
        self.volume_dir = kubelet.state_dir / "pods" / self.uid
        # Every Pod shares its node's network: its IP is the node's address.
        self.host_ip = _node_address(kubelet.store.find(NODES, "", spec.get("nodeName", "")))
        self.binds: dict[str, dict[str, str]] = {}
        self.lock = threading.Lock()
        self.stopped = threading.Event()
        self.thread = threading.Thread(target=self._run, name=f"kubelet-{self.name}", daemon=True)

    # -- lifecycle ------------------------------------------------------------------------------

    def _run(self) -> None:
        try:
            self._publish(phase="Pending")
            if not self._mount_volumes():
                return
            if not self._run_init_containers():
                return
            self._run_containers()
        except _PodGone:
            pass
        finally:
            self._teardown()

    def _current(self) -> dict[str, Any]:
        pod = self.kubelet.store.find(PODS, self.namespace, self.name)
        if pod is None or pod["metadata"]["uid"] != self.uid or self.kubelet.stopping.is_set():
            raise _PodGone()
        self.pod = pod
        return pod

    def _deleting(self) -> bool:
        return bool(self._current()["metadata"].get("deletionTimestamp"))

    def _event(self, event_type: str, reason: str, message: str) -> None:
        record_event(self.kubelet.store, self.pod, event_type, reason, message, _COMPONENT)

    # -- volumes --------------------------------------------------------------------------------

    def _mount_volumes(self) -> bool:
        """Prepare every volume; retried (with a FailedMount event each time) until it works."""
        while True:
            if self._deleting():
                return False
            try:
                self.binds = self._prepare_volumes()
                return True
            except ConfigError as exc:
                self._event("Warning", "FailedMount", str(exc))
            if self.stopped.wait(self.kubelet.mount_retry_seconds):
                return False

    def _prepare_volumes(self) -> dict[str, dict[str, str]]:
        paths: dict[str, str] = {}
        for volume in self.pod["spec"].get("volumes") or []:
            name = volume["name"]
            target = self.volume_dir / "volumes" / name
            if "emptyDir" in volume:
                target.mkdir(parents=True, exist_ok=True)
                paths[name] = str(target)
            elif "hostPath" in volume:
                host = self._host_path(volume["hostPath"]["path"])
                if volume["hostPath"].get("type") == "DirectoryOrCreate":
                    host.mkdir(parents=True, exist_ok=True)
                paths[name] = str(host)
            elif "persistentVolumeClaim" in volume:
                paths[name] = self._claimed_directory(name, volume["persistentVolumeClaim"]["claimName"])
            elif "configMap" in volume or "secret" in volume:
                files = self._volume_files(volume)
                shutil.rmtree(target, ignore_errors=True)
                target.mkdir(parents=True)
                for relative, content in files.items():
                    (target / relative).parent.mkdir(parents=True, exist_ok=True)
                    (target / relative).write_bytes(content)
                paths[name] = str(target)
            elif "downwardAPI" in volume:
                target.mkdir(parents=True, exist_ok=True)
                for item in volume["downwardAPI"].get("items") or []:
                    value = self._field_value((item.get("fieldRef") or {}).get("fieldPath", ""))
                    (target / item["path"]).write_text(value)
                paths[name] = str(target)
            else:
                raise ConfigError(
                    f'MountVolume.SetUp failed for volume "{name}" : volume type not supported by the fake'
                )
        binds: dict[str, dict[str, str]] = {}
        in_cluster = self.kubelet.in_cluster
        if in_cluster is not None and self.pod["spec"].get("automountServiceAccountToken", True):
            account = self.volume_dir / "serviceaccount"
            account.mkdir(parents=True, exist_ok=True)
            for file_name, content in in_cluster.service_account_files(self.namespace).items():
                (account / file_name).write_bytes(content)
            for record in self.init_records + self.records:
                binds.setdefault(record.name, {})[SERVICE_ACCOUNT_DIR] = f"{account}:ro"
        for record in self.init_records + self.records:
            for mount in record.spec.get("volumeMounts") or []:
                source = paths[mount["name"]]
                if mount.get("subPath"):
                    source = str(Path(source) / mount["subPath"])
                binds.setdefault(record.name, {})[mount["mountPath"]] = source + (
                    ":ro" if mount.get("readOnly") else ""
                )
        return binds

    def _host_path(self, path: str) -> Path:
        """`path` on this Pod's node: the machine's own path unless nodes have disks of their own."""
        if self.kubelet.node_disks is None:
            return Path(path)
        return self.kubelet.node_disks / self.pod["spec"].get("nodeName", "") / path.lstrip("/")

    def _claimed_directory(self, volume_name: str, claim_name: str) -> str:
        """The directory of the PersistentVolume bound to the claim (network storage: the same
        from every node)."""
        claim = self.kubelet.store.find(_resource("persistentvolumeclaims"), self.namespace, claim_name)
        if claim is None:
            raise ConfigError(
                f'MountVolume.SetUp failed for volume "{volume_name}" : '
                f'persistentvolumeclaim "{claim_name}" not found'
            )
        bound = (claim.get("spec") or {}).get("volumeName", "")
        pv = self.kubelet.store.find(_resource("persistentvolumes"), "", bound) if bound else None
        if pv is None or (claim.get("status") or {}).get("phase") != "Bound":
            raise ConfigError(
                f'MountVolume.SetUp failed for volume "{volume_name}" : '
                f'persistentvolumeclaim "{claim_name}" is not bound'
            )
        return str(pv["spec"]["hostPath"]["path"])

    def _volume_files(self, volume: dict[str, Any]) -> dict[str, bytes]:
        name = volume["name"]
        if "configMap" in volume:
            source, kind = volume["configMap"], "configmap"
            obj = self.kubelet.store.find(_resource("configmaps"), self.namespace, source.get("name", ""))
            data = {k: v.encode() for k, v in ((obj or {}).get("data") or {}).items()}
            data.update({k: base64.b64decode(v) for k, v in ((obj or {}).get("binaryData") or {}).items()})
        else:
            source, kind = volume["secret"], "secret"
            obj = self.kubelet.store.find(_resource("secrets"), self.namespace, source.get("secretName", ""))
            data = {k: base64.b64decode(v) for k, v in ((obj or {}).get("data") or {}).items()}
            data.update({k: v.encode() for k, v in ((obj or {}).get("stringData") or {}).items()})
        if obj is None:
            if source.get("optional"):
                return {}
            missing = source.get("name") or source.get("secretName")
            raise ConfigError(f'MountVolume.SetUp failed for volume "{name}" : {kind} "{missing}" not found')
        items = source.get("items")
        if not items:
            return data
        files = {}
        for item in items:
            if item["key"] not in data:
                raise ConfigError(
                    f'MountVolume.SetUp failed for volume "{name}" : configmap references non-existent config key: '
                    f"{item['key']}"
                )
            files[item["path"]] = data[item["key"]]
        return files

    # -- containers -----------------------------------------------------------------------------

    def _run_init_containers(self) -> bool:
        for record in self.init_records:
            while True:
                if not self._start_when_ready(record):
                    return False
                exit_code = self._wait_exit(record)
                if exit_code is None:
                    return False
                if exit_code == 0:
                    break
                if self.pod["spec"].get("restartPolicy") == "Never":
                    self._publish(phase="Failed")
                    self._keep_until_deleted()
                    return False
                self._back_off(record)
        return True

    def _run_containers(self) -> None:
        for record in self.records:
            if not self._start_when_ready(record):
                return
        self._publish()
        policy = self.pod["spec"].get("restartPolicy", "Always")
        while True:
            if self._deleting():
                return
            changed = False
            for record in self.records:
                if "running" in record.state:
                    ended = self._inspect_end(record)
                    if ended is not None:
                        record.state = {"terminated": ended}
                        changed = True
                        exit_code = ended["exitCode"]
                        if policy == "Always" or (policy == "OnFailure" and exit_code != 0):
                            self._schedule_restart(record)
                elif record.restart_at is not None and time.monotonic() >= record.restart_at:
                    record.restart_at = None
                    record.restart_count += 1
                    if not self._start_when_ready(record):
                        return
                    changed = True
            changed = self._probe_readiness() or changed
            self._probe_liveness()
            if changed:
                self._publish()
            if self._phase() in ("Succeeded", "Failed"):
                self._keep_until_deleted()
                return
            if self.stopped.wait(self.kubelet.poll_seconds):
                return

    def _probe_readiness(self) -> bool:
        """Run the readiness probes that are due; True if a container's readiness changed."""
        changed = False
        now = time.monotonic()
        for record in self.records:
            probe = record.spec.get("readinessProbe")
            if not probe or "running" not in record.state or now < record.next_probe_at:
                continue
            record.next_probe_at = now + float(probe.get("periodSeconds", 10))
            ready = self._probe_passes(record, probe)
            if ready != record.probe_ready:
                record.probe_ready = ready
                changed = True
                if not ready:
                    self._event("Warning", "Unhealthy", f"Readiness probe failed for container {record.name}")
        return changed

    def _keep_until_deleted(self) -> None:
        """A finished Pod's containers stay (for logs) until the Pod is deleted."""
        while not self._deleting():
            if self.stopped.wait(self.kubelet.poll_seconds * 5):
                return

    def _probe_liveness(self) -> None:
        """Run the liveness probes that are due; kill each container that failed too often."""
        now = time.monotonic()
        for record in self.records:
            probe = record.spec.get("livenessProbe")
            if not probe or "running" not in record.state or now < record.next_liveness_at:
                continue
            record.next_liveness_at = now + float(probe.get("periodSeconds", 10))
            if self._probe_passes(record, probe):
                record.liveness_failures = 0
                continue
            record.liveness_failures += 1
            self._event("Warning", "Unhealthy", f"Liveness probe failed for container {record.name}")
            if record.liveness_failures < int(probe.get("failureThreshold", 3)):
                continue
            self._event(
                "Normal", "Killing", f"Container {record.name} failed liveness probe, will be restarted"
            )
            grace = probe.get("terminationGracePeriodSeconds")
            if grace is None:
                grace = self.pod["spec"].get("terminationGracePeriodSeconds", 30)
            # The loop sees the container end and restarts it by the restartPolicy, as after a crash.
            self._stop_container(record.current_id or "", int(grace))

    def _probe_passes(self, record: ContainerRecord, probe: dict[str, Any]) -> bool:
        timeout = float(probe.get("timeoutSeconds", 1))
        try:
            if "httpGet" in probe:
                action = probe["httpGet"]
                url = f"http://{self.host_ip}:{action['port']}{action.get('path', '/')}"
                with urllib.request.urlopen(url, timeout=timeout) as response:
                    return 200 <= response.status < 400
            if "tcpSocket" in probe:
                with socket.create_connection(
                    (self.host_ip, int(probe["tcpSocket"]["port"])), timeout=timeout
                ):
                    return True
            if "exec" in probe and record.current_id:
                exec_id = self.kubelet.api.exec_create(record.current_id, probe["exec"]["command"])["Id"]
                self.kubelet.api.exec_start(exec_id)
                return self.kubelet.api.exec_inspect(exec_id).get("ExitCode") == 0
        except (OSError, ValueError, docker.errors.APIError):
            return False
        return False

    def _schedule_restart(self, record: ContainerRecord) -> None:
        delay = min(
            self.kubelet.crash_backoff_seconds * (2**record.restart_count),
            self.kubelet.crash_backoff_max_seconds,
        )
        record.last_state = record.state
        record.restart_at = time.monotonic() + delay
        record.state = {
            "waiting": {
                "reason": "CrashLoopBackOff",
                "message": f"back-off {delay:g}s restarting failed container={record.name} "
                f"pod={self.name}_{self.namespace}({self.uid})",
            }
        }
        self._event("Warning", "BackOff", "Back-off restarting failed container " + record.name)

    def _back_off(self, record: ContainerRecord) -> None:
        self._schedule_restart(record)
        self._publish()
        while record.restart_at is not None and time.monotonic() < record.restart_at:
            if self._deleting() or self.stopped.wait(self.kubelet.poll_seconds):
                raise _PodGone()
        record.restart_at = None
        record.restart_count += 1

    def _start_when_ready(self, record: ContainerRecord) -> bool:
        """Check the image and the config, then create and start the container; False if the Pod went."""
        image = record.spec["image"]
        pull_failures = 0
        while True:
            if self._deleting():
                return False
            problem = self._image_problem(image)
            if problem is None:
                break
            pull_failures += 1
            if pull_failures == 1 or pull_failures % 2:
                record.state = {"waiting": {"reason": "ErrImagePull", "message": problem}}
                self._event("Warning", "Failed", f'Failed to pull image "{image}": {problem}')
            else:
                record.state = {
                    "waiting": {"reason": "ImagePullBackOff", "message": f'Back-off pulling image "{image}"'}
                }
                self._event("Normal", "BackOff", f'Back-off pulling image "{image}"')
            self._publish()
            if self.stopped.wait(self.kubelet.image_backoff_seconds):
                return False
        while True:
            if self._deleting():
                return False
            try:
                env = self._container_env(record.spec)
                break
            except ConfigError as exc:
                record.state = {"waiting": {"reason": "CreateContainerConfigError", "message": str(exc)}}
                self._event("Warning", "Failed", f"Error: {exc}")
                self._publish()
            if self.stopped.wait(self.kubelet.mount_retry_seconds):
                return False
        # A container the runtime refuses to create is retried, as the kubelet does on its next sync.
        while not self._create_and_start(record, env):
            self._publish()
            if self.stopped.wait(self.kubelet.mount_retry_seconds) or self._deleting():
                return False
        self._publish()
        return True

    def _image_problem(self, image: str) -> str | None:
        if image in self.kubelet.unpullable_images:
            return self.kubelet.unpullable_images[image]
        try:
            self.kubelet.api.inspect_image(image)
            return None
        except docker.errors.ImageNotFound:
            return (
                f'rpc error: code = NotFound desc = failed to pull and unpack image "{image}": '
                f'failed to resolve reference "{image}": {image}: not found'
            )

    def _create_and_start(self, record: ContainerRecord, env: dict[str, str]) -> bool:
        """Create and start the container; False if the runtime would not create it."""
        spec = record.spec
        limits = (spec.get("resources") or {}).get("limits") or {}
        host_config: dict[str, Any] = {
            "network_mode": "host",
            "init": True,
            "binds": [
                f"{source.split(':ro')[0]}:{target}{':ro' if source.endswith(':ro') else ''}"
                for target, source in self.binds.get(record.name, {}).items()
            ],
        }
        in_cluster = self.kubelet.in_cluster
        if in_cluster is not None:
            env = {**in_cluster.env(), **env}
            services, _ = self.kubelet.store.list(_resource("services"))
            host_config["extra_hosts"] = service_hosts(services)
        if limits.get("memory"):
            memory = int(parse_quantity(limits["memory"]))
            host_config["mem_limit"] = memory
            host_config["memswap_limit"] = memory
        if limits.get("cpu"):
            # A node may claim more cores than this machine has (a 64-core instance type): a limit
            # of all of them limits nothing, and dockerd refuses a quota above its own CPU count.
            cores = min(float(parse_quantity(limits["cpu"])), self.kubelet.host_cpus())
            host_config["nano_cpus"] = int(cores * 1e9)
        api = self.kubelet.api
        try:
            container = api.create_container(
                image=spec["image"],
                name=f"k8s_{record.name}_{self.name}_{self.namespace}_{self.uid[:8]}_{record.restart_count}",
                # $(VAR) in command and args expands from the container's env, as the real kubelet does.
                entrypoint=[_expand(part, env) for part in spec["command"]] if spec.get("command") else None,
                command=[_expand(part, env) for part in spec["args"]] if spec.get("args") else None,
                environment=env,
                working_dir=spec.get("workingDir"),
                stdin_open=bool(spec.get("stdin")),
                tty=bool(spec.get("tty")),
                labels={LABEL_CLUSTER: self.kubelet.cluster_id, LABEL_POD_UID: self.uid},
                host_config=api.create_host_config(**host_config),
            )
        except docker.errors.APIError as exc:
            # What the kubelet reports of a container its runtime refuses to create.
            message = str(exc.explanation or exc)
            record.state = {"waiting": {"reason": "CreateContainerError", "message": message}}
            self._event("Warning", "Failed", f"Error: {message}")
            return False
        record.docker_ids.append(container["Id"])
        self._event("Normal", "Pulled", f'Container image "{spec["image"]}" already present on machine')
        self._event("Normal", "Created", f"Created container {record.name}")
        try:
            api.start(container["Id"])
        except docker.errors.APIError as exc:
            message = str(exc.explanation or exc)
            now = now_rfc3339()
            record.state = {
                "terminated": {
                    "exitCode": 128,
                    "reason": "StartError",
                    "message": message,
                    "startedAt": "1970-01-01T00:00:00Z",
                    "finishedAt": now,
                    "containerID": f"docker://{container['Id']}",
                }
            }
            self._event("Warning", "Failed", f"Error: {message}")
            return True
        started = (
            _docker_time(api.inspect_container(container["Id"])["State"].get("StartedAt")) or now_rfc3339()
        )
        record.state = {"running": {"startedAt": started}}
        record.probe_ready = False
        probe = spec.get("readinessProbe") or {}
        record.next_probe_at = time.monotonic() + float(probe.get("initialDelaySeconds", 0))
        record.liveness_failures = 0
        liveness = spec.get("livenessProbe") or {}
        record.next_liveness_at = time.monotonic() + float(liveness.get("initialDelaySeconds", 0))
        self._event("Normal", "Started", f"Started container {record.name}")
        return True

    def _inspect_end(self, record: ContainerRecord) -> dict[str, Any] | None:
        try:
            state = self.kubelet.api.inspect_container(record.current_id)["State"]
        except docker.errors.NotFound:
            return {
                "exitCode": 137,
                "reason": "Error",
                "message": "container was removed",
                "finishedAt": now_rfc3339(),
            }
        if state.get("Running") or state.get("Status") in ("created", "restarting"):
            return None
        exit_code = int(state.get("ExitCode", 0))
        reason = "OOMKilled" if state.get("OOMKilled") else ("Completed" if exit_code == 0 else "Error")
        return {
            "exitCode": exit_code,
            "reason": reason,
            "startedAt": _docker_time(state.get("StartedAt")) or now_rfc3339(),
            "finishedAt": _docker_time(state.get("FinishedAt")) or now_rfc3339(),
            "containerID": f"docker://{record.current_id}",
        }

    def _wait_exit(self, record: ContainerRecord) -> int | None:
        if "terminated" in record.state:
            return record.state["terminated"]["exitCode"]
        while True:
            if self._deleting():
                return None
            ended = self._inspect_end(record)
            if ended is not None:
                record.state = {"terminated": ended}
                self._publish()
                return ended["exitCode"]
            if self.stopped.wait(self.kubelet.poll_seconds):
                return None

    # -- env ------------------------------------------------------------------------------------

    def _field_value(self, path: str) -> str:
        metadata, spec = self.pod["metadata"], self.pod["spec"]
        values = {
            "metadata.name": metadata["name"],
            "metadata.namespace": metadata["namespace"],
            "metadata.uid": metadata["uid"],
            "spec.nodeName": spec.get("nodeName", ""),
            "spec.serviceAccountName": spec.get("serviceAccountName", ""),
            "status.hostIP": self.host_ip,
            "status.podIP": self.host_ip,
        }
        if path in values:
            return values[path]
        for prefix, source in (("metadata.labels", "labels"), ("metadata.annotations", "annotations")):
            if path.startswith(prefix + "['") and path.endswith("']"):
                return (metadata.get(source) or {}).get(path[len(prefix) + 2 : -2], "")
        raise ConfigError(f"unsupported fieldRef {path}")

    def _container_env(self, spec: dict[str, Any]) -> dict[str, str]:
        env: dict[str, str] = {}
        for source in spec.get("envFrom") or []:
            if "configMapRef" in source:
                env.update(self._config_data("configmaps", source["configMapRef"], None))
            elif "secretRef" in source:
                env.update(self._config_data("secrets", source["secretRef"], None))
        for variable in spec.get("env") or []:
            name = variable["name"]
            if "value" in variable:
                env[name] = _expand(str(variable["value"]), env)
                continue
            value_from = variable.get("valueFrom") or {}
            if "fieldRef" in value_from:
                env[name] = self._field_value(value_from["fieldRef"]["fieldPath"])
            elif "secretKeyRef" in value_from:
                value = self._config_data(
                    "secrets", value_from["secretKeyRef"], value_from["secretKeyRef"].get("key")
                )
                if value:
                    env[name] = next(iter(value.values()))
            elif "configMapKeyRef" in value_from:
                ref = value_from["configMapKeyRef"]
                value = self._config_data("configmaps", ref, ref.get("key"))
                if value:
                    env[name] = next(iter(value.values()))
            elif "resourceFieldRef" in value_from:
                resource = value_from["resourceFieldRef"]["resource"]
                kind, _, what = resource.partition(".")
                quantity = ((spec.get("resources") or {}).get(kind) or {}).get(what, "0")
                env[name] = str(int(parse_quantity(quantity)))
            else:
                env[name] = ""
        return env

    def _config_data(self, plural: str, ref: dict[str, Any], key: str | None) -> dict[str, str]:
        kind = "secret" if plural == "secrets" else "configmap"
        obj = self.kubelet.store.find(_resource(plural), self.namespace, ref.get("name", ""))
        if obj is None:
            if ref.get("optional"):
                return {}
            raise ConfigError(f'{kind} "{ref.get("name", "")}" not found')
        if plural == "secrets":
            data = {k: base64.b64decode(v).decode() for k, v in (obj.get("data") or {}).items()}
            data.update(obj.get("stringData") or {})
        else:
            data = dict(obj.get("data") or {})
        if key is None:
            return data
        if key not in data:
            if ref.get("optional"):
                return {}
            label = "Secret" if plural == "secrets" else "ConfigMap"
            raise ConfigError(f"couldn't find key {key} in {label} {self.namespace}/{ref.get('name', '')}")
        return {key: data[key]}

    # -- status ---------------------------------------------------------------------------------

    def _phase(self) -> str:
        policy = self.pod["spec"].get("restartPolicy", "Always")
        if any(
            "terminated" in r.state and r.state["terminated"]["exitCode"] != 0 for r in self.init_records
        ) and (policy == "Never"):
            return "Failed"
        if not self.records or any(not r.docker_ids for r in self.records):
            return "Pending"
        if any("running" in r.state or r.restart_at is not None for r in self.records):
            return "Running"
        codes = [r.state.get("terminated", {}).get("exitCode", 0) for r in self.records]
        return "Succeeded" if all(code == 0 for code in codes) else "Failed"

    def _publish(self, phase: str | None = None) -> None:
        phase = phase or self._phase()
        all_ready = all(r.ready for r in self.records)
        initialized = all(
            "terminated" in r.state and r.state["terminated"]["exitCode"] == 0 for r in self.init_records
        )
        now = now_rfc3339()

        def update(pod: dict[str, Any]) -> None:
            status = pod.setdefault("status", {})
            previous = {c["type"]: c for c in status.get("conditions") or []}

            def condition(kind: str, value: bool) -> dict[str, Any]:
                text = "True" if value else "False"
                old = previous.get(kind)
                since = old.get("lastTransitionTime", now) if old and old.get("status") == text else now
                entry = {"type": kind, "status": text, "lastTransitionTime": since}
                if not value and kind in ("Ready", "ContainersReady"):
                    entry["reason"] = (
                        "PodCompleted" if phase in ("Succeeded", "Failed") else "ContainersNotReady"
                    )
                return entry

            status["phase"] = phase
            status["hostIP"] = self.host_ip
            status["podIP"] = self.host_ip
            status["podIPs"] = [{"ip": self.host_ip}]
            status.setdefault("startTime", now)
            status["conditions"] = [
                condition("Initialized", initialized),
                condition("Ready", all_ready and phase == "Running"),
                condition("ContainersReady", all_ready and phase == "Running"),
                previous.get("PodScheduled") or condition("PodScheduled", True),
            ]
            if self.init_records:
                status["initContainerStatuses"] = [r.status() for r in self.init_records]
            status["containerStatuses"] = [r.status() for r in self.records]

        self.kubelet.store.mutate(PODS, self.namespace, self.name, update)

    # -- stop -----------------------------------------------------------------------------------

    def _teardown(self) -> None:
        """Stop the containers (with the Pod's grace if it is being deleted), record, remove."""
        pod = self.kubelet.store.find(PODS, self.namespace, self.name)
        alive = pod is not None and pod["metadata"]["uid"] == self.uid
        grace = int((pod or {}).get("metadata", {}).get("deletionGracePeriodSeconds", 0) or 0) if alive else 0
        running = [
            r for r in self.init_records + self.records if r.current_id and "terminated" not in r.state
        ]
        stoppers = [
            threading.Thread(target=self._stop_container, args=(r.current_id, grace), daemon=True)
            for r in running
        ]
        for stopper in stoppers:
            stopper.start()
        for stopper in stoppers:
            stopper.join(grace + 30)
        if alive and not self.kubelet.stopping.is_set():
            for record in running:
                ended = self._inspect_end(record)
                if ended is not None:
                    record.state = {"terminated": ended}
                record.restart_at = None
            try:
                self._publish()
            except ApiError:
                pass
            self.kubelet.store.finish_pod_deletion(PODS, self.namespace, self.name, self.uid)
        self._remove_containers()
        self.kubelet.forget(self.uid)

    def _stop_container(self, container_id: str, grace: int) -> None:
        try:
            self.kubelet.api.stop(container_id, timeout=grace)
        except docker.errors.APIError:
            pass

    def _remove_containers(self) -> None:
        for record in self.init_records + self.records:
            for container_id in record.docker_ids:
                try:
                    self.kubelet.api.remove_container(container_id, force=True)
                except docker.errors.APIError:
                    pass
        shutil.rmtree(self.volume_dir, ignore_errors=True)

    # -- logs, exec -----------------------------------------------------------------------------

    def record(self, container: str) -> ContainerRecord:
        records = self.init_records + self.records
        if not container:
            if len(self.records) != 1:
                names = " ".join(r.name for r in self.records)
                raise ApiError(
                    400,
                    "BadRequest",
                    f"a container name must be specified for pod {self.name}, choose one of: [{names}]",
                )
            return self.records[0]
        for record in records:
            if record.name == container:
                return record
        raise ApiError(400, "BadRequest", f"container {container} is not valid for pod {self.name}")


class _PodGone(Exception):
    """The Pod was force-deleted or the kubelet is stopping."""


def _node_address(node: dict[str, Any] | None) -> str:
    addresses = ((node or {}).get("status") or {}).get("addresses") or []
    return next((a["address"] for a in addresses if a.get("type") == "InternalIP"), "127.0.0.1")


def _expand(value: str, env: dict[str, str]) -> str:
    for name, replacement in env.items():
        value = value.replace(f"$({name})", replacement)
    return value


def _resource(plural: str) -> Any:
    return find_resource("", "v1", plural)


class Kubelet:
    def __init__(
        self,
        store: Store,
        docker_url: str,
        state_dir: Path,
        cluster_id: str,
        crash_backoff_seconds: float = 0.5,
        crash_backoff_max_seconds: float = 5.0,
        image_backoff_seconds: float = 1.0,
        mount_retry_seconds: float = 1.0,
    ) -> None:
        self.store = store
        self.client = docker.DockerClient(base_url=docker_url, max_pool_size=64)
        self.api = self.client.api
        self.state_dir = state_dir
        self.cluster_id = cluster_id
        self.poll_seconds = _POLL_SECONDS
        self.crash_backoff_seconds = crash_backoff_seconds
        self.crash_backoff_max_seconds = crash_backoff_max_seconds
        self.image_backoff_seconds = image_backoff_seconds
        self.mount_retry_seconds = mount_retry_seconds
        # Set by FakeKubernetes(in_cluster=True): Pods get ServiceAccount credentials and cluster DNS.
        self.in_cluster: InCluster | None = None
        # Set by FakeKubernetes(node_local_disks=True): where each node's own disk lives.
        self.node_disks: Path | None = None
        # image -> the pull error to report for it even when the engine has it (failure injection).
        self.unpullable_images: dict[str, str] = {}
        self.stopping = threading.Event()
        self._workers: dict[str, PodWorker] = {}
        self._lock = threading.Lock()
        self._host_cpus: float | None = None
        self._wake = threading.Event()
        self._cpu_samples: dict[str, tuple[int, int]] = {}
        self._thread = threading.Thread(target=self._run, name="fake-kubelet", daemon=True)
        store.add_listener(self._on_change)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self.stopping.set()
        self._wake.set()
        with self._lock:
            workers = list(self._workers.values())
        for worker in workers:
            worker.stopped.set()
        for worker in workers:
            worker.thread.join(10)
        self._thread.join(5)
        for container in self.api.containers(
            all=True, filters={"label": f"{LABEL_CLUSTER}={self.cluster_id}"}
        ):
            try:
                self.api.remove_container(container["Id"], force=True)
            except docker.errors.APIError:
                pass
        self.client.close()

    def host_cpus(self) -> float:
        """How many CPUs the engine that runs the Pods has (a container's CPU quota is at most that)."""
        if self._host_cpus is None:
            self._host_cpus = float(self.api.info()["NCPU"])
        return self._host_cpus

    def forget(self, uid: str) -> None:
        with self._lock:
            self._workers.pop(uid, None)

    def _on_change(self, event: WatchEvent) -> None:
        if event.plural in ("pods", "nodes"):
            self._wake.set()

    def _run(self) -> None:
        while not self.stopping.is_set():
            self._wake.wait(1.0)
            self._wake.clear()
            pods, _ = self.store.list(PODS)
            nodes = {n["metadata"]["name"] for n in self.store.list(NODES)[0]}
            for pod in pods:
                if (pod.get("spec") or {}).get("nodeName") not in nodes:
                    continue
                uid = pod["metadata"]["uid"]
                with self._lock:
                    if uid in self._workers or (pod.get("status") or {}).get("phase") in (
                        "Succeeded",
                        "Failed",
                    ):
                        continue
                    worker = PodWorker(self, pod)
                    self._workers[uid] = worker
                worker.thread.start()
            # A Pod whose node went away is lost, as on a real cluster.
            for pod in pods:
                node = (pod.get("spec") or {}).get("nodeName")
                if node and node not in nodes and not pod["metadata"].get("deletionTimestamp"):
                    self.store.mutate(
                        PODS, pod["metadata"]["namespace"], pod["metadata"]["name"], _mark_node_lost
                    )

    def _worker(self, pod: dict[str, Any]) -> PodWorker | None:
        with self._lock:
            return self._workers.get(pod["metadata"]["uid"])

    def logs(
        self,
        pod: dict[str, Any],
        container: str,
        follow: bool,
        timestamps: bool,
        stream: str,
        tail_lines: int | None,
        previous: bool,
    ) -> Iterator[bytes]:
        worker = self._worker(pod)
        if worker is None:
            raise ApiError(
                400,
                "BadRequest",
                f'container "{container}" in pod "{pod["metadata"]["name"]}" is not available',
            )
        record = worker.record(container)
        ids = record.docker_ids[:-1] if previous else record.docker_ids
        if not ids:
            reason = (record.state.get("waiting") or {}).get("reason", "ContainerCreating")
            what = "previous terminated container" if previous else "container"
            raise ApiError(
                400,
                "BadRequest",
                f'{what} "{record.name}" in pod "{worker.name}" is waiting to start: {reason}',
            )
        if stream not in ("All", "Stdout", "Stderr"):
            raise ApiError(422, "Invalid", f'stream: Unsupported value: "{stream}"')
        return self._log_frames(ids[-1], stream, follow, timestamps, tail_lines)

    def _log_frames(
        self, container_id: str, stream: str, follow: bool, timestamps: bool, tail_lines: int | None
    ) -> Iterator[bytes]:
        def read(following: bool) -> Iterator[bytes]:
            return self.api.logs(
                container_id,
                stdout=stream in ("All", "Stdout"),
                stderr=stream in ("All", "Stderr"),
                stream=True,
                follow=following,
                timestamps=timestamps,
                tail=tail_lines if tail_lines is not None else "all",
            )

        sent = 0
        for frame in read(follow):
            sent += 1
            yield frame
        if not follow or tail_lines is not None:
            return
        # Docker's follow can end before the container's last output reached its log; the real
        # kubelet reads the log file to its end after the exit, so catch up the same way.
        for index, frame in enumerate(read(False)):
            if index >= sent:
                yield frame

    def exec_session(
        self, pod: dict[str, Any], container: str, command: list[str], stdin: bool, tty: bool
    ) -> ExecSession:
        worker = self._worker(pod)
        if worker is None:
            raise ApiError(400, "BadRequest", f"pod {pod['metadata']['name']} is not running")
        record = worker.record(container)
        if "running" not in record.state or not record.current_id:
            raise ApiError(
                400, "BadRequest", f'unable to upgrade connection: container not found ("{record.name}")'
            )
        if not command:
            raise ApiError(400, "BadRequest", "you must specify at least 1 command")
        exec_id = self.api.exec_create(
            record.current_id, command, stdin=stdin, stdout=True, stderr=True, tty=tty
        )["Id"]
        return ExecSession(self.api, exec_id, stdin, tty)

    def pod_metrics(self, pod: dict[str, Any]) -> dict[str, Any] | None:
        worker = self._worker(pod)
        if worker is None:
            return None
        containers = []
        for record in worker.records:
            if "running" not in record.state or not record.current_id:
                continue
            try:
                raw = self.api.stats(record.current_id, stream=False, one_shot=True)
            except docker.errors.APIError:
                continue
            memory = raw.get("memory_stats") or {}
            details = memory.get("stats") or {}
            inactive = details.get("total_inactive_file", details.get("inactive_file", 0))
            used = max(0, int(memory.get("usage", 0)) - int(inactive))
            cpu_ns = int(((raw.get("cpu_stats") or {}).get("cpu_usage") or {}).get("total_usage", 0))
            sample = (cpu_ns, time.monotonic_ns())
            previous = self._cpu_samples.get(record.current_id)
            self._cpu_samples[record.current_id] = sample
            nanocores = 0
            if previous is not None and sample[1] > previous[1]:
                nanocores = max(0, int((sample[0] - previous[0]) * 1e9 / (sample[1] - previous[1])))
            containers.append(
                {"name": record.name, "usage": {"cpu": f"{nanocores}n", "memory": f"{used // 1024}Ki"}}
            )
        if not containers:
            return None
        return {
            "kind": "PodMetrics",
            "apiVersion": "metrics.k8s.io/v1beta1",
            "metadata": {
                "name": pod["metadata"]["name"],
                "namespace": pod["metadata"]["namespace"],
                "creationTimestamp": now_rfc3339(),
                "labels": pod["metadata"].get("labels") or {},
            },
            "timestamp": now_rfc3339(),
            "window": "10s",
            "containers": containers,
        }


def _mark_node_lost(pod: dict[str, Any]) -> None:
    status = pod.setdefault("status", {})
    if status.get("phase") in ("Succeeded", "Failed"):
        return
    status["phase"] = "Failed"
    status["reason"] = "NodeLost"
    status["message"] = (
        f"Node {pod['spec']['nodeName']} which was running pod {pod['metadata']['name']} is unresponsive"
    )


class ExecSession:
    """One `kubectl exec`: a Docker exec bridged to the WebSocket channel protocol."""

    def __init__(self, api: Any, exec_id: str, stdin: bool, tty: bool) -> None:
        self._api = api
        self._exec_id = exec_id
        self._stdin = stdin
        self._tty = tty

    def serve(self, websocket: WebSocket, v5: bool) -> None:
        raw = self._api.exec_start(self._exec_id, socket=True, tty=self._tty)
        sock: socket.socket = getattr(raw, "_sock", raw)
        pump = threading.Thread(target=self._pump_output, args=(sock, websocket), daemon=True)
        pump.start()
        try:
            while not websocket.closed:
                _, message = websocket.receive()
                if not message:
                    continue
                channel, data = message[0], message[1:]
                if channel == 0 and self._stdin:
                    sock.sendall(data)
                elif channel == 255 and v5 and data[:1] == b"\x00":
                    sock.shutdown(socket.SHUT_WR)
        except (ConnectionClosed, OSError):
            pass
        pump.join(5)

    def _pump_output(self, sock: socket.socket, websocket: WebSocket) -> None:
        try:
            if self._tty:
                while chunk := sock.recv(65536):
                    websocket.send(b"\x01" + chunk)
            else:
                buffer = b""
                while chunk := sock.recv(65536):
                    buffer += chunk
                    while len(buffer) >= 8:
                        stream_type, size = buffer[0], struct.unpack(">I", buffer[4:8])[0]
                        if len(buffer) < 8 + size:
                            break
                        payload, buffer = buffer[8 : 8 + size], buffer[8 + size :]
                        websocket.send(bytes([2 if stream_type == 2 else 1]) + payload)
        except OSError:
            pass
        exit_code = self._api.exec_inspect(self._exec_id).get("ExitCode")
        if exit_code in (0, None):
            status: dict[str, Any] = {"metadata": {}, "status": "Success"}
        else:
            status = {
                "metadata": {},
                "status": "Failure",
                "message": f"command terminated with non-zero exit code: exit status {exit_code}",
                "reason": "NonZeroExitCode",
                "details": {"causes": [{"reason": "ExitCode", "message": str(exit_code)}]},
            }
        websocket.send(b"\x03" + json.dumps(status).encode())
        websocket.close()
        try:
            sock.close()
        except OSError:
            pass
