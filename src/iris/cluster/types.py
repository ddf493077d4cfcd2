"""The user-facing vocabulary of a job: what runs, on what, and under which name."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import cloudpickle

from iris.config import parse_size
from iris.rpc import cluster_pb2

TERMINAL_JOB_STATES = frozenset(
    {
        cluster_pb2.JOB_STATE_SUCCEEDED,
        cluster_pb2.JOB_STATE_FAILED,
        cluster_pb2.JOB_STATE_KILLED,
        cluster_pb2.JOB_STATE_WORKER_FAILED,
        cluster_pb2.JOB_STATE_UNSCHEDULABLE,
    }
)

TERMINAL_TASK_STATES = frozenset(
    {
        cluster_pb2.TASK_STATE_SUCCEEDED,
        cluster_pb2.TASK_STATE_FAILED,
        cluster_pb2.TASK_STATE_KILLED,
        cluster_pb2.TASK_STATE_WORKER_FAILED,
        cluster_pb2.TASK_STATE_UNSCHEDULABLE,
    }
)


def job_state_name(state: int) -> str:
    """JOB_STATE_RUNNING -> "running"."""
    return cluster_pb2.JobState.Name(state).removeprefix("JOB_STATE_").lower()


def task_state_name(state: int) -> str:
    return cluster_pb2.TaskState.Name(state).removeprefix("TASK_STATE_").lower()


def parse_job_state(text: str) -> int:
    """Accept "running", "RUNNING" or "JOB_STATE_RUNNING"."""
    name = text.strip().upper()
    if not name.startswith("JOB_STATE_"):
        name = f"JOB_STATE_{name}"
    try:
        return cluster_pb2.JobState.Value(name)
    except ValueError:
        known = ", ".join(job_state_name(v) for v in cluster_pb2.JobState.values() if v)
        raise ValueError(f"unknown job state {text!r}; expected one of: {known}") from None


# ---------------------------------------------------------------- names

_NAME_PART = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")


@dataclass(frozen=True)
class JobName:
    """A hierarchical job name: "/train" is a root job, "/train/eval" a child of it.

    Task ids extend the job name with the task index: "/train/0".
    """

    parts: tuple[str, ...]

    @classmethod
    def parse(cls, text: str) -> JobName:
        stripped = text.strip().strip("/")
        if not stripped:
            raise ValueError("a job name cannot be empty")
        parts = tuple(stripped.split("/"))
        for part in parts:
            if part.isdigit():
                raise ValueError(
                    f"invalid job name {text!r}: a name part cannot be only digits ({part!r}); "
                    "those are task ids, e.g. /train/0"
                )
            if not _NAME_PART.match(part):
                raise ValueError(
                    f"invalid job name {text!r}: each part must start with a letter or digit and contain only "
                    "letters, digits, '.', '_' or '-' (at most 128 characters)"
                )
        return cls(parts)

    @classmethod
    def root(cls, name: str) -> JobName:
        return cls.parse(name)

    def child(self, name: str) -> JobName:
        return JobName(self.parts + JobName.parse(name).parts)

    @property
    def parent(self) -> JobName | None:
        return JobName(self.parts[:-1]) if len(self.parts) > 1 else None

    def task_id(self, index: int) -> str:
        return f"{self}/{index}"

    def __str__(self) -> str:
        return "/" + "/".join(self.parts)


def normalize_job_id(text: str) -> str:
    """Users may type "my-job" or "/my-job"; the controller always speaks "/my-job"."""
    return str(JobName.parse(text))


def job_id_of_task(task_id: str) -> str:
    job_id, _, index = task_id.rpartition("/")
    if not job_id or not index.isdigit():
        raise ValueError(f"invalid task id {task_id!r}: expected '<job id>/<task index>'")
    return job_id


# ---------------------------------------------------------------- resources


def tpu_device(variant: str, count: int | None = None) -> cluster_pb2.DeviceConfig:
    return cluster_pb2.DeviceConfig(tpu=cluster_pb2.TpuDevice(variant=variant, count=count or 0))


def gpu_device(variant: str, count: int = 1) -> cluster_pb2.DeviceConfig:
    return cluster_pb2.DeviceConfig(gpu=cluster_pb2.GpuDevice(variant=variant, count=count))


@dataclass
class ResourceSpec:
    """What one task needs. Memory and disk accept bytes or strings such as "2GB"."""

    cpu: float = 1
    memory: int | str = "1GB"
    disk: int | str = 0
    device: cluster_pb2.DeviceConfig | None = None

    def to_proto(self) -> cluster_pb2.ResourceSpec:
        if self.cpu < 0:
            raise ValueError(f"cpu must be >= 0, got {self.cpu}")
        spec = cluster_pb2.ResourceSpec(
            cpu_millicores=round(self.cpu * 1000),
            memory_bytes=parse_size(self.memory),
            disk_bytes=parse_size(self.disk),
        )
        if self.device is not None:
            spec.device.CopyFrom(self.device)
        return spec


@dataclass
class EnvironmentSpec:
    """The task's environment: variables, pip packages and setup commands run before it starts."""

    env_vars: dict[str, str] = field(default_factory=dict)
    pip_packages: list[str] = field(default_factory=list)
    setup_commands: list[str] = field(default_factory=list)

    def to_proto(self) -> cluster_pb2.EnvironmentConfig:
        return cluster_pb2.EnvironmentConfig(
            env_vars=self.env_vars, pip_packages=self.pip_packages, setup_commands=self.setup_commands
        )


# ---------------------------------------------------------------- entrypoints


@dataclass(frozen=True)
class Entrypoint:
    """What a task runs: a command line, or a Python callable with its arguments."""

    proto: cluster_pb2.Entrypoint

    @classmethod
    def from_command(cls, *argv: str) -> Entrypoint:
        if not argv:
            raise ValueError("a command entrypoint needs at least one argument")
        return cls(cluster_pb2.Entrypoint(command=cluster_pb2.CommandEntrypoint(argv=[str(a) for a in argv])))

    @classmethod
    def from_callable(cls, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Entrypoint:
        if not callable(fn):
            raise TypeError(f"{fn!r} is not callable")
        pickled = cloudpickle.dumps((fn, args, kwargs))
        return cls(cluster_pb2.Entrypoint(callable=cluster_pb2.CallableEntrypoint(pickled=pickled)))

    @property
    def is_callable(self) -> bool:
        return self.proto.WhichOneof("kind") == "callable"

    def describe(self) -> str:
        if self.is_callable:
            fn, _, _ = cloudpickle.loads(self.proto.callable.pickled)
            return f"{getattr(fn, '__module__', '?')}.{getattr(fn, '__qualname__', repr(fn))}()"
        return " ".join(self.proto.command.argv)
