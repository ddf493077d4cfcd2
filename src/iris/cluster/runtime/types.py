"""The ContainerRuntime protocol shared by every runtime the worker can run task attempts with.

Lifecycle of one attempt, driven by the worker:

    handle = runtime.create_container(config)   # phase CREATED
    handle.build()                                # phase BUILDING; pip installs + setup commands
    handle.run()                                  # phase RUNNING; returns once the command started
    handle.logs(start_line=n) / status() / stats()
    handle.kill(grace_seconds) or handle.wait(timeout)
    handle.cleanup()                              # always, also after failures

A runtime labels everything it creates with `managed_labels(...)` so that a worker restarting on
the same host can find and remove what its predecessor left behind (`remove_leftovers`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Literal, Protocol

LABEL_MANAGED = "iris.managed"
LABEL_TASK_ID = "iris.task_id"
LABEL_JOB_ID = "iris.job_id"
LABEL_ATTEMPT_ID = "iris.attempt_id"

LogSource = Literal["stdout", "stderr", "build"]


def managed_labels(task_id: str, job_id: str, attempt_id: int) -> dict[str, str]:
    """Labels every runtime attaches to the resources it creates for one task attempt.

    Values are kept verbatim; runtimes whose label syntax is restricted (Kubernetes) encode them.
    """
    return {
        LABEL_MANAGED: "true",
        LABEL_TASK_ID: task_id,
        LABEL_JOB_ID: job_id,
        LABEL_ATTEMPT_ID: str(attempt_id),
    }


class ContainerError(RuntimeError):
    """A runtime could not create, build, start or control a container."""


class BuildFailedError(ContainerError):
    """A pip install or setup command exited non-zero while building a container."""

    def __init__(self, command: str, exit_code: int, last_lines: list[str]) -> None:
        self.command = command
        self.exit_code = exit_code
        self.last_lines = list(last_lines)
        message = f"build command failed with exit code {exit_code}: {command}"
        if last_lines:
            message += "\n" + "\n".join(last_lines)
        super().__init__(message)


@dataclass
class LogLine:
    timestamp_ms: int
    source: LogSource
    data: str


@dataclass(kw_only=True)
class ContainerConfig:
    """Everything a runtime needs to run one task attempt.

    `workdir` is a host directory owned by the worker holding the extracted bundle; it is the
    command's working directory (mounted into the container by image-based runtimes) and is never
    deleted by a runtime. A runtime that `fetches_bundle` (its containers may run on another host)
    gets an unextracted `bundle_uri` instead, and the workdir holds only what the worker wrote;
    what the command writes there comes back when it exits. Ports are already allocated by the worker, which also puts them into
    `env`; a runtime only has to make them reachable (the process runtime shares the host network).
    """

    command: list[str]
    workdir: Path
    task_id: str
    attempt_id: int
    labels: dict[str, str]
    image: str = ""
    bundle_uri: str = ""
    bundle_sha256: str = ""
    env: dict[str, str] = field(default_factory=dict)
    setup_commands: list[str] = field(default_factory=list)
    pip_packages: list[str] = field(default_factory=list)
    cpu_millicores: int = 0
    memory_bytes: int = 0
    disk_bytes: int = 0
    ports: dict[str, int] = field(default_factory=dict)
    timeout_seconds: float | None = None
    gpu_count: int = 0
    tpu_variant: str = ""

    def __post_init__(self) -> None:
        # Unlabelled resources would survive a worker restart, so refuse them up front.
        if self.labels.get(LABEL_MANAGED) != "true":
            raise ValueError(f"labels must contain {LABEL_MANAGED}=true (use managed_labels())")
        if self.labels.get(LABEL_TASK_ID) != self.task_id:
            raise ValueError(f"label {LABEL_TASK_ID} must equal task_id {self.task_id!r}")
        if not self.labels.get(LABEL_JOB_ID):
            raise ValueError(f"labels must contain {LABEL_JOB_ID}")
        if not self.command:
            raise ValueError("command must not be empty")


class ContainerPhase(StrEnum):
    CREATED = "created"
    BUILDING = "building"
    RUNNING = "running"
    EXITED = "exited"


@dataclass
class ContainerStatus:
    """Point-in-time state of a container.

    `exit_code` follows the shell convention: 128+N when the command was killed by signal N.
    `error` is empty on success and otherwise a human-readable reason, e.g. "exited with code 3",
    "out of memory: used 600MB of 512MB limit", "killed after timeout of 30s",
    "killed by signal 9 (SIGKILL)".
    """

    phase: ContainerPhase
    exit_code: int | None = None
    error: str = ""
    oom_killed: bool = False
    timed_out: bool = False
    started_at_ms: int | None = None
    finished_at_ms: int | None = None


@dataclass
class ContainerStats:
    memory_bytes: int
    cpu_percent: float
    process_count: int


class ContainerHandle(Protocol):
    container_id: str

    def build(self) -> None:
        """Run pip installs and setup commands in the workdir, logging them with source="build".

        Raises BuildFailedError naming the failing command; the container is then EXITED.
        """
        ...

    def run(self) -> None:
        """Start the command and return as soon as it is running."""
        ...

    def run_to_exit(self, on_running: Callable[[], None], poll_s: float, on_poll: Callable[[], None]) -> None:
        """run(), then stay with the command on the calling thread until it exits: `on_running()`
        once it started, `on_poll()` about every `poll_s` while it runs (neither may raise). Raises
        what run() raises when the command cannot start."""
        ...

    def status(self) -> ContainerStatus: ...

    def logs(self, start_line: int = 0) -> list[LogLine]:
        """All lines from index `start_line` on; indexes are stable so callers can poll incrementally."""
        ...

    def stats(self) -> ContainerStats: ...

    def kill(self, grace_seconds: float) -> None:
        """SIGTERM, then SIGKILL after `grace_seconds`.

        Returns early if the container exits sooner and never blocks for much longer than the grace.
        """
        ...

    def wait(self, timeout: float | None = None) -> ContainerStatus:
        """Block until EXITED or `timeout` seconds passed; returns the status either way."""
        ...

    def cleanup(self) -> None:
        """Kill if still running and remove runtime resources. Never deletes the workdir."""
        ...


class ContainerRuntime(Protocol):
    name: str
    # True when the runtime's containers fetch the bundle themselves (ContainerConfig.bundle_uri).
    fetches_bundle: bool
    # True when creating a container may take a while (pulling its image): the attempt shows
    # BUILDING meanwhile, as it does while a bundle is unpacked or setup commands run.
    pulls_images: bool

    def create_container(self, config: ContainerConfig) -> ContainerHandle: ...

    def remove_leftovers(self) -> int:
        """Remove everything labelled iris.managed=true that a previous worker left on this host.

        Returns how many containers were removed.
        """
        ...
