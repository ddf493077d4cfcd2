"""ContainerdRuntime: each task attempt runs in its own pod sandbox on containerd's CRI API.

This is the API `crictl` wraps, spoken over containerd's socket with gRPC and the `cri_api`
stubs (imported when the runtime is created). The endpoint is CONTAINER_RUNTIME_ENDPOINT, as for
crictl, or containerd's default socket.

One sandbox per attempt holds the main container and one container per build step. Sandboxes use
the node's network (NODE mode: ports the worker allocated are reachable as they are, and no
hostname is set, which a host-network sandbox may not do) and share one process namespace whose
init is the sandbox's pause process, so the command is not PID 1: it gets signals and exit codes as
a normal process would (killed by signal N reads as exit code 128+N).

containerd writes each container's output to a log file in the CRI format
(`<RFC 3339 time> <stdout|stderr> <P|F> <text>`) in a directory this runtime chooses under its
state dir; the runtime reads it from there, so a worker running in a container must see that
directory at the same path. TPU tasks get /dev/vfio and SYS_RESOURCE; the shared-memory size and
memlock limit of seed 004 have no CRI field and come from containerd's base runtime spec. GPU tasks
run with the `nvidia` runtime handler, which the host's containerd config must define. disk_bytes
is not enforced: CRI has no limit for a container's writable layer.
"""

from __future__ import annotations

import json
import os
import shutil
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from iris.cluster.runtime.engine import (
    LABEL_ROLE,
    ROLE_MAIN,
    ROLE_SETUP,
    TPU_CAPABILITIES,
    TPU_DEVICE,
    EngineContainerHandle,
    EngineExit,
    LineAssembler,
    check_config,
    container_env,
    container_name,
    cpu_percent,
    parse_rfc3339_ms,
    stop_timeout_seconds,
)
from iris.cluster.runtime.types import LABEL_MANAGED, ContainerConfig, ContainerError, ContainerStats

DEFAULT_ENDPOINT = "unix:///run/containerd/containerd.sock"
SANDBOX_NAMESPACE = "iris"
GPU_RUNTIME_HANDLER = "nvidia"

POLL_INTERVAL_SECONDS = 0.1
_RPC_TIMEOUT_SECONDS = 60.0
# Image pulls move gigabytes; they get their own bound.
_PULL_TIMEOUT_SECONDS = 1800.0
_CGROUP_ROOT = Path("/sys/fs/cgroup")


def _cri() -> tuple[Any, Any, Any]:
    try:
        import grpc
        from cri_api.v1 import api_pb2, api_pb2_grpc
    except ImportError as exc:
        raise ContainerError(
            "the containerd runtime needs the `container-runtime-interface-api` package: "
            "pip install 'iris[containerd]'"
        ) from exc
    return grpc, api_pb2, api_pb2_grpc


def _endpoint(endpoint: str | None) -> str:
    endpoint = endpoint or os.environ.get("CONTAINER_RUNTIME_ENDPOINT") or DEFAULT_ENDPOINT
    return endpoint if "://" in endpoint else f"unix://{endpoint}"


class _CriLog:
    """Reads a CRI log file incrementally and turns its chunks back into lines per stream."""

    def __init__(self, path: Path, emit: Callable[[str, str, int], None]) -> None:
        self._path = path
        self._offset = 0
        self._rest = b""
        self._lock = threading.Lock()
        self._assemblers = {
            stream: LineAssembler(lambda data, ts, stream=stream: emit(stream, data, ts)) for stream in ("stdout", "stderr")
        }

    def read_new(self) -> bool:
        """Take what was appended since the last call; returns whether there was anything."""
        with self._lock:
            try:
                with open(self._path, "rb") as log_file:
                    log_file.seek(self._offset)
                    chunk = log_file.read()
            except FileNotFoundError:
                return False
            if not chunk:
                return False
            self._offset += len(chunk)
            *records, self._rest = (self._rest + chunk).split(b"\n")
            for record in records:
                self._take(record.decode("utf-8", errors="replace"))
            return True

    def close(self) -> None:
        with self._lock:
            for assembler in self._assemblers.values():
                assembler.close()

    def _take(self, record: str) -> None:
        stamp, stream, tag, text = (record.split(" ", 3) + ["", "", ""])[:4]
        assembler = self._assemblers.get(stream)
        if assembler is None:
            return
        try:
            timestamp_ms = parse_rfc3339_ms(stamp)
        except ValueError:
            return
        assembler.feed(text, timestamp_ms, complete=tag != "P")


class ContainerdContainerHandle(EngineContainerHandle):
    def __init__(
        self,
        runtime: ContainerdRuntime,
        config: ContainerConfig,
        container_id: str,
        sandbox_id: str,
        sandbox_config: Any,
        log_dir: Path,
        on_cleanup: Callable[[str], None],
    ) -> None:
        super().__init__(config, container_id, on_cleanup)
        self._runtime = runtime
        self._sandbox_id = sandbox_id
        self._sandbox_config = sandbox_config
        self._log_dir = log_dir
        # Names the base class uses (ours) -> ids containerd gave.
        self._ids: dict[str, str] = {}
        self._ids[container_id] = runtime.create_in_sandbox(
            sandbox_id, sandbox_config, runtime.container_config(config, "main", config.command, ROLE_MAIN)
        )
        self._main_log = _CriLog(log_dir / "main.log", lambda stream, data, ts: self._append(stream, data, ts))  # type: ignore[arg-type]
        self._cpu_sample: tuple[int, int] | None = None
        self._cgroup_procs: Path | None | bool = False

    # -- engine calls ---------------------------------------------------------------------------

    def _start_main(self) -> None:
        self._runtime.call("StartContainer", container_id=self._ids[self.container_id])

    def _await_main_exit(self) -> EngineExit:
        return self._await_exit(self._ids[self.container_id], self._main_log)

    def _refresh_logs(self) -> None:
        self._main_log.read_new()

    def _stop(self, container: str, grace_seconds: float) -> None:
        cri_id = self._ids.get(container)
        if cri_id is None:
            return
        try:
            self._runtime.call(
                "StopContainer",
                container_id=cri_id,
                timeout=stop_timeout_seconds(grace_seconds),
                rpc_timeout=grace_seconds + _RPC_TIMEOUT_SECONDS,
            )
        except ContainerError:
            # Already removed, or containerd is down; either way nothing is left to stop here.
            pass

    def _run_step(self, index: int, argv: list[str], on_output: Callable[[str, int], None]) -> EngineExit:
        name = f"setup-{index}"
        cri_id = self._runtime.create_in_sandbox(
            self._sandbox_id, self._sandbox_config, self._runtime.container_config(self._config, name, argv, ROLE_SETUP)
        )
        step = f"{self.container_id}-{name}"
        self._ids[step] = cri_id
        log = _CriLog(self._log_dir / f"{name}.log", lambda _stream, data, ts: on_output(data, ts))
        try:
            try:
                self._runtime.call("StartContainer", container_id=cri_id)
            except ContainerError:
                status = self._runtime.call("ContainerStatus", container_id=cri_id).status
                return EngineExit(exit_code=127, message=status.message or "the setup container did not start")
            self._step_started(step)
            return self._await_exit(cri_id, log)
        finally:
            self._ids.pop(step, None)
            self._runtime.remove_container_quietly(cri_id)

    def _engine_stats(self) -> ContainerStats:
        cri_id = self._ids[self.container_id]
        stats = self._runtime.call("ContainerStats", container_id=cri_id).stats
        sample = (stats.cpu.usage_core_nano_seconds.value, stats.cpu.timestamp)
        percent = cpu_percent(self._cpu_sample, sample) if sample[1] else 0.0
        self._cpu_sample = sample
        return ContainerStats(
            memory_bytes=stats.memory.working_set_bytes.value,
            cpu_percent=percent,
            process_count=self._process_count(cri_id),
        )

    def _remove(self) -> None:
        for cri_id in list(self._ids.values()):
            self._runtime.remove_container_quietly(cri_id)
        self._runtime.remove_sandbox_quietly(self._sandbox_id)
        shutil.rmtree(self._log_dir, ignore_errors=True)

    # -- helpers --------------------------------------------------------------------------------

    def _await_exit(self, cri_id: str, log: _CriLog) -> EngineExit:
        pb = self._runtime.pb
        waiter = threading.Event()
        while True:
            status = self._runtime.call("ContainerStatus", container_id=cri_id).status
            # containerd reports the exit only after its log copier finished, so this read, after
            # the status, sees the whole log once the container is EXITED.
            log.read_new()
            if status.state == pb.CONTAINER_EXITED:
                break
            waiter.wait(POLL_INTERVAL_SECONDS)
        log.close()
        never_ran = status.reason == "StartError"
        return EngineExit(
            exit_code=status.exit_code,
            oom_killed=status.reason == "OOMKilled",
            started_at_ms=status.started_at // 1_000_000 or None,
            finished_at_ms=status.finished_at // 1_000_000 or None,
            message=status.message if never_ran else "",
        )

    def _process_count(self, cri_id: str) -> int:
        """Processes in the container's cgroup when this host's cgroup tree is visible, else 1."""
        if self._cgroup_procs is False:
            self._cgroup_procs = self._find_cgroup_procs(cri_id)
        if isinstance(self._cgroup_procs, Path):
            try:
                return max(1, len(self._cgroup_procs.read_text().split()))
            except OSError:
                pass
        return 1

    def _find_cgroup_procs(self, cri_id: str) -> Path | None:
        try:
            info = json.loads(self._runtime.call("ContainerStatus", container_id=cri_id, verbose=True).info["info"])
            path = info["runtimeSpec"]["linux"]["cgroupsPath"]
        except (ContainerError, KeyError, ValueError, TypeError):
            return None
        if ":" in path:
            # systemd driver ("slice:prefix:name"): a unit name, not a path.
            return None
        for candidate in (_CGROUP_ROOT / "pids" / path.lstrip("/"), _CGROUP_ROOT / path.lstrip("/")):
            procs = candidate / "cgroup.procs"
            if procs.exists():
                return procs
        return None


class ContainerdRuntime:
    name = "containerd"
    fetches_bundle = False
    pulls_images = True

    def __init__(self, state_dir: Path, endpoint: str | None = None) -> None:
        grpc, self.pb, rpc = _cri()
        self._grpc = grpc
        self.endpoint = _endpoint(endpoint)
        self._channel = grpc.insecure_channel(self.endpoint)
        self._runtime_stub = rpc.RuntimeServiceStub(self._channel)
        self._image_stub = rpc.ImageServiceStub(self._channel)
        self._log_root = state_dir / "containerd-logs"
        self._log_root.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        self._live_sandboxes: dict[str, str] = {}
        try:
            self.call("Version", rpc_timeout=10.0)
        except ContainerError as exc:
            raise ContainerError(f"cannot reach containerd's CRI API at {self.endpoint}: {exc}") from exc

    def create_container(self, config: ContainerConfig) -> ContainerdContainerHandle:
        check_config(config, "containerd")
        self._ensure_image(config.image)
        name = container_name(config)
        log_dir = self._log_root / name
        log_dir.mkdir(parents=True)
        sandbox_config = self._sandbox_config(config, name, log_dir)
        try:
            sandbox_id = self.call(
                "RunPodSandbox",
                config=sandbox_config,
                runtime_handler=GPU_RUNTIME_HANDLER if config.gpu_count else "",
            ).pod_sandbox_id
        except ContainerError as exc:
            shutil.rmtree(log_dir, ignore_errors=True)
            raise ContainerError(f"cannot create a pod sandbox: {exc}") from exc
        with self._lock:
            self._live_sandboxes[name] = sandbox_id
        try:
            return ContainerdContainerHandle(
                self, config, name, sandbox_id, sandbox_config, log_dir, on_cleanup=self._forget
            )
        except ContainerError:
            self.remove_sandbox_quietly(sandbox_id)
            shutil.rmtree(log_dir, ignore_errors=True)
            self._forget(name)
            raise

    def remove_leftovers(self) -> int:
        """Remove every iris.managed sandbox (with its containers) that this runtime did not create."""
        with self._lock:
            live_names = set(self._live_sandboxes)
            live_ids = set(self._live_sandboxes.values())
        selector = self.pb.PodSandboxFilter(label_selector={LABEL_MANAGED: "true"})
        removed = 0
        for sandbox in self.call("ListPodSandbox", filter=selector).items:
            if sandbox.id in live_ids:
                continue
            self.remove_sandbox_quietly(sandbox.id)
            removed += 1
        for log_dir in self._log_root.iterdir():
            if log_dir.name not in live_names:
                shutil.rmtree(log_dir, ignore_errors=True)
        return removed

    # -- for handles ----------------------------------------------------------------------------

    def call(self, method: str, rpc_timeout: float = _RPC_TIMEOUT_SECONDS, **fields: Any) -> Any:
        """One RuntimeService (or, for image methods, ImageService) call; errors become ContainerError."""
        stub = self._image_stub if method in ("ImageStatus", "PullImage") else self._runtime_stub
        request = getattr(self.pb, f"{method}Request")(**fields)
        try:
            return getattr(stub, method)(request, timeout=rpc_timeout)
        except self._grpc.RpcError as exc:
            raise ContainerError(f"{method}: {exc.details() or exc.code()}") from exc

    def container_config(self, config: ContainerConfig, name: str, argv: list[str], role: str) -> Any:
        pb = self.pb
        workdir = str(config.workdir)
        resources = pb.LinuxContainerResources()
        if config.memory_bytes:
            # Equal limits leave no swap, so a task over its memory is killed rather than slowed.
            resources.memory_limit_in_bytes = config.memory_bytes
            resources.memory_swap_limit_in_bytes = config.memory_bytes
        if config.cpu_millicores:
            resources.cpu_period = 100_000
            resources.cpu_quota = config.cpu_millicores * 100
            resources.cpu_shares = max(2, config.cpu_millicores * 1024 // 1000)
        security = pb.LinuxContainerSecurityContext(namespace_options=self._namespaces())
        devices = []
        if config.tpu_variant:
            devices.append(pb.Device(container_path=TPU_DEVICE, host_path=TPU_DEVICE, permissions="rwm"))
            security.capabilities.add_capabilities.extend(TPU_CAPABILITIES)
        env = container_env(config)
        if config.gpu_count:
            env.setdefault("NVIDIA_VISIBLE_DEVICES", ",".join(str(i) for i in range(config.gpu_count)))
        return pb.ContainerConfig(
            metadata=pb.ContainerMetadata(name=name),
            image=pb.ImageSpec(image=config.image),
            command=argv,
            working_dir=workdir,
            envs=[pb.KeyValue(key=key, value=value) for key, value in env.items()],
            mounts=[pb.Mount(container_path=workdir, host_path=workdir)],
            devices=devices,
            labels={**config.labels, LABEL_ROLE: role},
            log_path=f"{name}.log",
            linux=pb.LinuxContainerConfig(resources=resources, security_context=security),
        )

    def create_in_sandbox(self, sandbox_id: str, sandbox_config: Any, container_config: Any) -> str:
        return self.call(
            "CreateContainer", pod_sandbox_id=sandbox_id, config=container_config, sandbox_config=sandbox_config
        ).container_id

    def remove_container_quietly(self, cri_id: str) -> None:
        try:
            self.call("RemoveContainer", container_id=cri_id)
        except ContainerError:
            pass

    def remove_sandbox_quietly(self, sandbox_id: str) -> None:
        for method in ("StopPodSandbox", "RemovePodSandbox"):
            try:
                self.call(method, pod_sandbox_id=sandbox_id)
            except ContainerError:
                pass

    # -- helpers --------------------------------------------------------------------------------

    def _namespaces(self) -> Any:
        pb = self.pb
        return pb.NamespaceOption(network=pb.NODE, pid=pb.POD, ipc=pb.POD)

    def _sandbox_config(self, config: ContainerConfig, name: str, log_dir: Path) -> Any:
        pb = self.pb
        return pb.PodSandboxConfig(
            metadata=pb.PodSandboxMetadata(name=name, uid=name, namespace=SANDBOX_NAMESPACE, attempt=0),
            log_directory=str(log_dir),
            labels=dict(config.labels),
            linux=pb.LinuxPodSandboxConfig(
                security_context=pb.LinuxSandboxSecurityContext(namespace_options=self._namespaces())
            ),
        )

    def _ensure_image(self, image: str) -> None:
        spec = self.pb.ImageSpec(image=image)
        try:
            if self.call("ImageStatus", image=spec).image.id:
                return
            self.call("PullImage", image=spec, rpc_timeout=_PULL_TIMEOUT_SECONDS)
        except ContainerError as exc:
            raise ContainerError(f"cannot pull image {image}: {exc}") from exc

    def _forget(self, container_id: str) -> None:
        with self._lock:
            self._live_sandboxes.pop(container_id, None)
