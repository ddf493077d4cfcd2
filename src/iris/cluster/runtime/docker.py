"""DockerRuntime: each task attempt runs in a Docker container created from the task image.

Talks to the engine with the `docker` SDK (imported when the runtime is created, so the worker
starts without it when another runtime is chosen), at DOCKER_HOST or the engine's default socket.

Containers use the host network by default (ports the worker allocated are reachable as they are;
with another network mode they are published on the same host port), run under Docker's init so
the command gets signals and its exit code as a normal process would (a command killed by signal
N exits 128+N), and get the workdir mounted at its own path. When the worker itself runs in a
container with the engine's socket mounted, its cache directory must be mounted at the same path
as on the host for that mount to find the bundle. disk_bytes is not enforced: Docker limits a
container's writable layer only on overlay2 over XFS with project quotas.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from iris.cluster.runtime.engine import (
    LABEL_ROLE,
    ROLE_MAIN,
    ROLE_SETUP,
    TPU_CAPABILITIES,
    TPU_DEVICE,
    TPU_MEMLOCK_BYTES,
    TPU_SHM_BYTES,
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
from iris.time import now_ms

if TYPE_CHECKING:
    import docker

# Followers end when the container stops; this bounds the wait for them to hand over the tail.
_FOLLOWER_JOIN_SECONDS = 5.0
# Each running attempt holds a few streaming connections (two log followers and a wait).
_MAX_POOL_SIZE = 64
_NEVER = "0001-01-01T00:00:00Z"


def _docker_errors() -> tuple[type[BaseException], ...]:
    import docker.errors
    import requests.exceptions

    return (docker.errors.DockerException, requests.exceptions.RequestException)


def _explain(exc: BaseException) -> str:
    explanation = getattr(exc, "explanation", None)
    return str(explanation or exc)


def _timestamp_ms(text: str | None) -> int | None:
    if not text or text.startswith(_NEVER[:4]):
        return None
    try:
        return parse_rfc3339_ms(text)
    except ValueError:
        return None


class _LogStream:
    """The messages of one log stream, taken in order exactly once.

    Docker's follow stream can end before the last message reached the log, so after the container
    exits the stream is read again without following; the message index drops what was seen.
    """

    def __init__(self, emit: Callable[[str, int], None]) -> None:
        self._assembler = LineAssembler(emit)
        self._lock = threading.Lock()
        self._taken = 0

    def take_all(self, frames: Any) -> None:
        for index, frame in enumerate(frames):
            with self._lock:
                if index != self._taken:
                    continue
                self._taken += 1
                self._take(frame)

    def close(self) -> None:
        with self._lock:
            self._assembler.close()

    def _take(self, frame: bytes) -> None:
        text = frame.decode("utf-8", errors="replace")
        stamp, _, data = text.partition(" ")
        try:
            timestamp_ms = parse_rfc3339_ms(stamp)
        except ValueError:
            timestamp_ms, data = now_ms(), text
        # Docker splits lines longer than 16KB into several messages; only the last has the newline.
        if data.endswith("\n"):
            self._assembler.feed(data[:-1], timestamp_ms, complete=True)
        else:
            self._assembler.feed(data, timestamp_ms, complete=False)


class DockerContainerHandle(EngineContainerHandle):
    def __init__(
        self,
        runtime: DockerRuntime,
        config: ContainerConfig,
        container_id: str,
        create_kwargs: dict[str, Any],
        on_cleanup: Callable[[str], None],
    ) -> None:
        super().__init__(config, container_id, on_cleanup)
        self._api = runtime.client.api
        self._errors = _docker_errors()
        self._create_kwargs = create_kwargs
        self._streams: dict[str, _LogStream] = {}
        self._followers: list[threading.Thread] = []
        self._cpu_sample: tuple[int, int] | None = None
        self._step_names: list[str] = []

    # -- engine calls ---------------------------------------------------------------------------

    def _start_main(self) -> None:
        try:
            self._api.start(self.container_id)
        except self._errors as exc:
            raise ContainerError(_explain(exc)) from exc
        for source in ("stdout", "stderr"):
            stream = _LogStream(lambda data, ts, source=source: self._append(source, data, ts))
            self._streams[source] = stream
            follower = threading.Thread(
                target=self._follow,
                args=(self.container_id, stream, source == "stdout", source == "stderr"),
                name=f"{source}-{self.container_id}",
                daemon=True,
            )
            follower.start()
            self._followers.append(follower)

    def _await_main_exit(self) -> EngineExit:
        try:
            waited = self._api.wait(self.container_id)
        except self._errors as exc:
            waited = {"StatusCode": None, "Error": {"Message": _explain(exc)}}
        for follower in self._followers:
            follower.join(_FOLLOWER_JOIN_SECONDS)
        for source, stream in self._streams.items():
            self._catch_up(self.container_id, stream, source == "stdout", source == "stderr")
            stream.close()
        result = self._inspect_exit(self.container_id)
        if result is None:
            # Removed under us (a leftover sweep by another worker): wait's answer is all there is.
            message = ((waited.get("Error") or {}).get("Message")) or "the container was removed"
            return EngineExit(exit_code=waited.get("StatusCode"), message=message)
        return result

    def _stop(self, container: str, grace_seconds: float) -> None:
        try:
            self._api.stop(container, timeout=stop_timeout_seconds(grace_seconds))
        except self._errors:
            # Already gone, or the engine is down; either way there is nothing left to stop here.
            pass

    def _run_step(self, index: int, argv: list[str], on_output: Callable[[str, int], None]) -> EngineExit:
        name = f"{self.container_id}-setup-{index}"
        kwargs = dict(self._create_kwargs)
        kwargs.update(
            name=name,
            entrypoint=argv[:1],
            command=argv[1:],
            labels={**self._create_kwargs["labels"], LABEL_ROLE: ROLE_SETUP},
        )
        self._step_names.append(name)
        try:
            self._api.create_container(**kwargs)
            self._api.start(name)
        except self._errors as exc:
            raise ContainerError(_explain(exc)) from exc
        self._step_started(name)
        stream = _LogStream(on_output)
        follower = threading.Thread(
            target=self._follow, args=(name, stream, True, True), name=f"setup-{name}", daemon=True
        )
        follower.start()
        try:
            self._api.wait(name)
            follower.join(_FOLLOWER_JOIN_SECONDS)
            self._catch_up(name, stream, True, True)
            stream.close()
            result = self._inspect_exit(name)
        except self._errors as exc:
            raise ContainerError(_explain(exc)) from exc
        finally:
            self._remove_quietly(name)
        if result is None:
            raise ContainerError(f"setup container {name} disappeared")
        return result

    def _engine_stats(self) -> ContainerStats:
        import docker.errors

        try:
            try:
                raw = self._api.stats(self.container_id, stream=False, one_shot=True)
            except docker.errors.InvalidVersion:
                # Engines before API 1.41 always sample twice, a second apart.
                raw = self._api.stats(self.container_id, stream=False)
        except self._errors as exc:
            raise ContainerError(_explain(exc)) from exc
        memory = raw.get("memory_stats") or {}
        details = memory.get("stats") or {}
        # What `docker stats` shows: usage without the page cache the kernel can drop at will.
        inactive = details.get("total_inactive_file", details.get("inactive_file", 0))
        used = max(0, int(memory.get("usage", 0)) - int(inactive))
        cpu_ns = int(((raw.get("cpu_stats") or {}).get("cpu_usage") or {}).get("total_usage", 0))
        sample = (cpu_ns, time.monotonic_ns())
        percent = cpu_percent(self._cpu_sample, sample)
        self._cpu_sample = sample
        processes = int((raw.get("pids_stats") or {}).get("current", 0))
        return ContainerStats(memory_bytes=used, cpu_percent=percent, process_count=processes)

    def _remove(self) -> None:
        for follower in self._followers:
            follower.join(_FOLLOWER_JOIN_SECONDS)
        for name in [self.container_id, *self._step_names]:
            self._remove_quietly(name)

    # -- helpers --------------------------------------------------------------------------------

    def _follow(self, container: str, stream: _LogStream, stdout: bool, stderr: bool) -> None:
        try:
            stream.take_all(
                self._api.logs(container, stdout=stdout, stderr=stderr, stream=True, follow=True, timestamps=True)
            )
        except self._errors:
            # The catch-up read after exit recovers whatever the follower missed.
            pass

    def _catch_up(self, container: str, stream: _LogStream, stdout: bool, stderr: bool) -> None:
        try:
            stream.take_all(
                self._api.logs(container, stdout=stdout, stderr=stderr, stream=True, follow=False, timestamps=True)
            )
        except self._errors:
            pass

    def _inspect_exit(self, container: str) -> EngineExit | None:
        import docker.errors

        try:
            state = self._api.inspect_container(container)["State"]
        except docker.errors.NotFound:
            return None
        except self._errors as exc:
            raise ContainerError(_explain(exc)) from exc
        return EngineExit(
            exit_code=state.get("ExitCode"),
            oom_killed=bool(state.get("OOMKilled")),
            started_at_ms=_timestamp_ms(state.get("StartedAt")),
            finished_at_ms=_timestamp_ms(state.get("FinishedAt")),
            message=state.get("Error") or "",
        )

    def _remove_quietly(self, name: str) -> None:
        try:
            self._api.remove_container(name, force=True)
        except self._errors:
            pass


class DockerRuntime:
    name = "docker"
    fetches_bundle = False
    pulls_images = True

    def __init__(self, base_url: str | None = None, network_mode: str = "host") -> None:
        try:
            import docker
        except ImportError as exc:
            raise ContainerError("the docker runtime needs the `docker` package: pip install docker") from exc
        try:
            if base_url:
                self.client: docker.DockerClient = docker.DockerClient(base_url=base_url, max_pool_size=_MAX_POOL_SIZE)
            else:
                self.client = docker.from_env(max_pool_size=_MAX_POOL_SIZE)
            self.client.ping()
        except _docker_errors() as exc:
            raise ContainerError(f"cannot reach the Docker engine: {_explain(exc)}") from exc
        self._network_mode = network_mode
        self._lock = threading.Lock()
        self._live: set[str] = set()

    def create_container(self, config: ContainerConfig) -> DockerContainerHandle:
        check_config(config, "docker")
        self._ensure_image(config.image)
        name = container_name(config)
        kwargs = self._create_kwargs(config, name)
        try:
            self.client.api.create_container(**kwargs)
        except _docker_errors() as exc:
            raise ContainerError(f"cannot create a container from {config.image}: {_explain(exc)}") from exc
        with self._lock:
            self._live.add(name)
        return DockerContainerHandle(self, config, name, kwargs, on_cleanup=self._forget)

    def remove_leftovers(self) -> int:
        """Remove every iris.managed container on this engine that this runtime did not create."""
        with self._lock:
            live = set(self._live)
        try:
            found = self.client.api.containers(all=True, filters={"label": f"{LABEL_MANAGED}=true"})
        except _docker_errors() as exc:
            raise ContainerError(f"cannot list containers: {_explain(exc)}") from exc
        removed = 0
        for container in found:
            names = [n.lstrip("/") for n in container.get("Names") or []]
            if any(n in live or n.rpartition("-setup-")[0] in live for n in names):
                continue
            try:
                self.client.api.remove_container(container["Id"], force=True)
            except _docker_errors():
                continue
            removed += 1
        return removed

    # -- helpers --------------------------------------------------------------------------------

    def _ensure_image(self, image: str) -> None:
        import docker.errors
        from docker.utils import parse_repository_tag

        try:
            self.client.api.inspect_image(image)
            return
        except docker.errors.ImageNotFound:
            pass
        except _docker_errors() as exc:
            raise ContainerError(f"cannot inspect image {image}: {_explain(exc)}") from exc
        repository, tag = parse_repository_tag(image)
        try:
            # Without a tag the SDK would pull every tag of the repository.
            self.client.images.pull(repository, tag=tag or "latest")
        except _docker_errors() as exc:
            raise ContainerError(f"cannot pull image {image}: {_explain(exc)}") from exc

    def _create_kwargs(self, config: ContainerConfig, name: str) -> dict[str, Any]:
        """Arguments of the engine's create call for the main container; build steps reuse them."""
        from docker.types import DeviceRequest, Ulimit

        workdir = str(config.workdir)
        host_config: dict[str, Any] = {
            "binds": {workdir: {"bind": workdir, "mode": "rw"}},
            "network_mode": self._network_mode,
            "init": True,
        }
        if config.memory_bytes:
            # Equal limits leave no swap, so a task over its memory is killed rather than slowed.
            host_config["mem_limit"] = config.memory_bytes
            host_config["memswap_limit"] = config.memory_bytes
        if config.cpu_millicores:
            host_config["nano_cpus"] = config.cpu_millicores * 1_000_000
        ports: list[int] = []
        if self._network_mode != "host" and config.ports:
            ports = sorted(set(config.ports.values()))
            host_config["port_bindings"] = {port: port for port in ports}
        if config.tpu_variant:
            host_config["devices"] = [f"{TPU_DEVICE}:{TPU_DEVICE}"]
            host_config["shm_size"] = TPU_SHM_BYTES
            host_config["cap_add"] = list(TPU_CAPABILITIES)
            host_config["ulimits"] = [Ulimit(name="memlock", soft=TPU_MEMLOCK_BYTES, hard=TPU_MEMLOCK_BYTES)]
        if config.gpu_count:
            host_config["device_requests"] = [DeviceRequest(count=config.gpu_count, capabilities=[["gpu"]])]
        return {
            "image": config.image,
            "name": name,
            "entrypoint": config.command[:1],
            "command": config.command[1:],
            "environment": container_env(config),
            "working_dir": workdir,
            "labels": {**config.labels, LABEL_ROLE: ROLE_MAIN},
            "ports": ports or None,
            "host_config": self.client.api.create_host_config(**host_config),
        }

    def _forget(self, container_id: str) -> None:
        with self._lock:
            self._live.discard(container_id)
