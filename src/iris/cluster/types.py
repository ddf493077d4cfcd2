"""The user-facing vocabulary of a job: what runs, on what, and under which name."""

from __future__ import annotations

import enum
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Union

import cloudpickle

from iris.cluster.limits import quote_prefix
from iris.config import parse_size
from iris.rpc import cluster_pb2

# Attribute keys a worker reports and the scheduler, the autoscaler and the platforms agree on.
ATTR_SLICE_ID = "slice-id"
ATTR_SCALE_GROUP = "scale-group"
ATTR_TPU_NAME = "tpu-name"
ATTR_TPU_WORKER_ID = "tpu-worker-id"
ATTR_TPU_TOPOLOGY = "tpu-topology"
ATTR_ZONE = "zone"
ATTR_REGION = "region"
ATTR_PREEMPTIBLE = "preemptible"
ATTR_DEVICE_VARIANT = "device-variant"

TERMINAL_JOB_STATES = frozenset(
    {
        cluster_pb2.JOB_STATE_SUCCEEDED,
        cluster_pb2.JOB_STATE_FAILED,
        cluster_pb2.JOB_STATE_KILLED,
        cluster_pb2.JOB_STATE_WORKER_FAILED,
        cluster_pb2.JOB_STATE_UNSCHEDULABLE,
    }
)

UNFINISHED_JOB_STATES = tuple(
    state for state in cluster_pb2.JobState.values() if state and state not in TERMINAL_JOB_STATES
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


class JobState(enum.IntEnum):
    """A job's state by name; equal to the protobuf value, so `status.state == JobState.SUCCEEDED`."""

    UNSPECIFIED = cluster_pb2.JOB_STATE_UNSPECIFIED
    PENDING = cluster_pb2.JOB_STATE_PENDING
    BUILDING = cluster_pb2.JOB_STATE_BUILDING
    RUNNING = cluster_pb2.JOB_STATE_RUNNING
    SUCCEEDED = cluster_pb2.JOB_STATE_SUCCEEDED
    FAILED = cluster_pb2.JOB_STATE_FAILED
    KILLED = cluster_pb2.JOB_STATE_KILLED
    WORKER_FAILED = cluster_pb2.JOB_STATE_WORKER_FAILED
    UNSCHEDULABLE = cluster_pb2.JOB_STATE_UNSCHEDULABLE

    @classmethod
    def of(cls, value: int | str) -> JobState:
        """From a protobuf value or a name such as "succeeded" or "JOB_STATE_SUCCEEDED"."""
        return cls(parse_job_state(value) if isinstance(value, str) else value)

    @property
    def finished(self) -> bool:
        return self.value in TERMINAL_JOB_STATES

    def __str__(self) -> str:
        return self.name.lower()


def parse_job_state(text: str) -> int:
    """Accept "running", "RUNNING" or "JOB_STATE_RUNNING"."""
    name = text.strip().upper()
    if not name.startswith("JOB_STATE_"):
        name = f"JOB_STATE_{name}"
    try:
        return cluster_pb2.JobState.Value(name)
    except ValueError:
        known = ", ".join(job_state_name(v) for v in cluster_pb2.JobState.values() if v)
        raise ValueError(f"unknown job state {quote_prefix(text)}; expected one of: {known}") from None


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
                    f"invalid job name {quote_prefix(text)}: a name part cannot be only digits ({quote_prefix(part)}); "
                    "those are task ids, e.g. /train/0"
                )
            if not _NAME_PART.match(part):
                raise ValueError(
                    f"invalid job name {quote_prefix(text)}: each part must start with a letter or digit and contain only "
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
        raise ValueError(f"invalid task id {quote_prefix(task_id)}: expected '<job id>/<task index>'")
    return job_id


# ---------------------------------------------------------------- attributes and constraints

AttributeValue = Union[str, int, float]


def attribute_from_proto(value: cluster_pb2.AttributeValue) -> AttributeValue:
    kind = value.WhichOneof("value")
    return "" if kind is None else getattr(value, kind)


def attribute_to_proto(value: AttributeValue) -> cluster_pb2.AttributeValue:
    if isinstance(value, bool):
        return cluster_pb2.AttributeValue(string_value=str(value).lower())
    if isinstance(value, int):
        return cluster_pb2.AttributeValue(int_value=value)
    if isinstance(value, float):
        return cluster_pb2.AttributeValue(float_value=value)
    return cluster_pb2.AttributeValue(string_value=str(value))


def parse_attribute(text: str) -> AttributeValue:
    """Numbers become numbers so that GT/LT compare them numerically."""
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return text


class ConstraintOp(enum.IntEnum):
    EQ = cluster_pb2.CONSTRAINT_OP_EQ
    NE = cluster_pb2.CONSTRAINT_OP_NE
    EXISTS = cluster_pb2.CONSTRAINT_OP_EXISTS
    NOT_EXISTS = cluster_pb2.CONSTRAINT_OP_NOT_EXISTS
    GT = cluster_pb2.CONSTRAINT_OP_GT
    GE = cluster_pb2.CONSTRAINT_OP_GE
    LT = cluster_pb2.CONSTRAINT_OP_LT
    LE = cluster_pb2.CONSTRAINT_OP_LE
    IN = cluster_pb2.CONSTRAINT_OP_IN


_OP_SYMBOLS = {
    ConstraintOp.EQ: "=",
    ConstraintOp.NE: "!=",
    ConstraintOp.GT: ">",
    ConstraintOp.GE: ">=",
    ConstraintOp.LT: "<",
    ConstraintOp.LE: "<=",
}
# Longest symbols first so ">=" is not read as ">" followed by "=".
_CONSTRAINT_TEXT = re.compile(r"^\s*([A-Za-z0-9_.\-/]+)\s*(==|!=|>=|<=|=|>|<)\s*(.*?)\s*$")


@dataclass(frozen=True)
class Constraint:
    """A requirement on a worker attribute; a task's constraints must all hold (AND)."""

    key: str
    op: ConstraintOp = ConstraintOp.EQ
    value: AttributeValue = ""
    values: tuple[AttributeValue, ...] = ()

    def __post_init__(self) -> None:
        if not self.key:
            raise ValueError("a constraint needs an attribute key")
        if self.op == ConstraintOp.IN and not self.values:
            raise ValueError(f"constraint on {quote_prefix(self.key)}: IN needs at least one value")

    @classmethod
    def parse(cls, text: str) -> Constraint:
        """CLI form: "zone=us-central1-a", "cpu-gen>=3", "preemptible!=true", "tpu-name" (exists),
        "!spot" (does not exist), "zone in a,b"."""
        stripped = text.strip()
        if " in " in stripped:
            key, _, rest = stripped.partition(" in ")
            values = tuple(parse_attribute(v.strip()) for v in rest.split(",") if v.strip())
            return cls(key.strip(), ConstraintOp.IN, values=values)
        if stripped.startswith("!") and re.fullmatch(r"![A-Za-z0-9_.\-/]+", stripped):
            return cls(stripped[1:], ConstraintOp.NOT_EXISTS)
        if re.fullmatch(r"[A-Za-z0-9_.\-/]+", stripped):
            return cls(stripped, ConstraintOp.EXISTS)
        match = _CONSTRAINT_TEXT.match(stripped)
        if not match:
            raise ValueError(
                f"invalid constraint {quote_prefix(text)}: expected KEY=VALUE, KEY!=VALUE, KEY>VALUE, KEY>=VALUE, KEY<VALUE, "
                "KEY<=VALUE, KEY (exists), !KEY (does not exist) or 'KEY in A,B'"
            )
        key, symbol, value = match.groups()
        op = next(op for op, sym in _OP_SYMBOLS.items() if sym == symbol.replace("==", "="))
        return cls(key, op, parse_attribute(value))

    def describe(self) -> str:
        if self.op == ConstraintOp.EXISTS:
            return f"{self.key} exists"
        if self.op == ConstraintOp.NOT_EXISTS:
            return f"{self.key} does not exist"
        if self.op == ConstraintOp.IN:
            return f"{self.key} in {{{', '.join(str(v) for v in self.values)}}}"
        return f"{self.key}{_OP_SYMBOLS[self.op]}{self.value}"

    def to_proto(self) -> cluster_pb2.Constraint:
        proto = cluster_pb2.Constraint(key=self.key, op=int(self.op))
        if self.op in _OP_SYMBOLS:
            proto.value.CopyFrom(attribute_to_proto(self.value))
        proto.values.extend(attribute_to_proto(v) for v in self.values)
        return proto

    @classmethod
    def from_proto(cls, proto: cluster_pb2.Constraint) -> Constraint:
        try:
            op = ConstraintOp(proto.op)
        except ValueError:
            raise ValueError(f"constraint on {quote_prefix(proto.key)} has no valid operator") from None
        return cls(
            proto.key,
            op,
            attribute_from_proto(proto.value),
            tuple(attribute_from_proto(v) for v in proto.values),
        )


@dataclass(frozen=True)
class CoschedulingConfig:
    """Place every task of the job at once on workers sharing one value of `group_by`."""

    group_by: str = ATTR_TPU_NAME

    def to_proto(self) -> cluster_pb2.CoschedulingConfig:
        return cluster_pb2.CoschedulingConfig(group_by=self.group_by)


# ---------------------------------------------------------------- priorities


class Priority(enum.IntEnum):
    """Named bands; any integer works too. Higher runs first; FIFO within a value."""

    BATCH = 0
    INTERACTIVE = 100
    PRODUCTION = 200


def parse_priority(text: str | int) -> int:
    if isinstance(text, int):
        return text
    try:
        return int(text)
    except ValueError:
        pass
    try:
        return int(Priority[text.strip().upper()])
    except KeyError:
        names = ", ".join(p.name.lower() for p in Priority)
        raise ValueError(f"unknown priority {quote_prefix(text)}: use a number or one of {names}") from None


# ---------------------------------------------------------------- TPU topologies


@dataclass(frozen=True)
class TpuTopology:
    variant: str
    chips: int
    chips_per_host: int

    @property
    def hosts(self) -> int:
        return max(1, self.chips // self.chips_per_host)


# Generations whose variant suffix counts TensorCores (two per chip) rather than chips.
_CORE_COUNTED = {"v2", "v3", "v4", "v5p"}
# Generations whose single-host slices go up to 8 chips; larger slices have 4 chips per host.
_EIGHT_CHIP_HOSTS = {"v5litepod", "v5e", "v6e"}


def tpu_topology(variant: str) -> TpuTopology:
    """Chips and hosts of a TPU slice variant such as "v5litepod-16" (4 hosts of 4 chips)."""
    match = re.fullmatch(r"(v\d+[a-z]*(?:pod)?)-(\d+)", variant.strip().lower())
    if not match:
        raise ValueError(f"unknown TPU variant {quote_prefix(variant)}: expected a form like v4-8, v5litepod-16, v5p-32 or v6e-8")
    generation, size = match.group(1), int(match.group(2))
    known = _CORE_COUNTED | _EIGHT_CHIP_HOSTS
    if generation not in known:
        raise ValueError(f"unknown TPU generation {quote_prefix(generation)} in {quote_prefix(variant)}; known: {', '.join(sorted(known))}")
    chips = size // 2 if generation in _CORE_COUNTED else size
    if chips < 1:
        raise ValueError(f"TPU variant {quote_prefix(variant)} has no whole chip")
    if generation in _EIGHT_CHIP_HOSTS and chips <= 8:
        return TpuTopology(variant, chips, chips)
    return TpuTopology(variant, chips, min(4, chips))


# ---------------------------------------------------------------- resources


def tpu_device(variant: str, count: int | None = None) -> cluster_pb2.DeviceConfig:
    return cluster_pb2.DeviceConfig(tpu=cluster_pb2.TpuDevice(variant=variant, count=count or 0))


def gpu_device(variant: str, count: int = 1) -> cluster_pb2.DeviceConfig:
    return cluster_pb2.DeviceConfig(gpu=cluster_pb2.GpuDevice(variant=variant, count=count))


def parse_gpu_spec(text: str) -> cluster_pb2.DeviceConfig:
    """"H100x8" -> 8 H100s; "H100" -> one; "8" -> eight of any kind."""
    # "x" separates a count only from a variant that has a digit, so names like RTX6000 stay whole.
    match = re.fullmatch(
        r"(?:([A-Za-z][A-Za-z0-9_-]*?\d[A-Za-z0-9_-]*?)[xX](\d+)|([A-Za-z][A-Za-z0-9_-]*)|(\d+))", text.strip()
    )
    if not match:
        raise ValueError(f"invalid GPU spec {quote_prefix(text)}: expected VARIANTxCOUNT such as H100x8, a variant, or a count")
    counted_variant, count_text, bare_variant, only_count = match.groups()
    variant = counted_variant or bare_variant
    count = int(count_text or only_count or 1)
    if count < 1:
        raise ValueError(f"invalid GPU spec {quote_prefix(text)}: the count must be at least 1")
    return gpu_device(variant or "", count)


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
        check_env_vars(self.env_vars)
        return cluster_pb2.EnvironmentConfig(
            env_vars=self.env_vars, pip_packages=self.pip_packages, setup_commands=self.setup_commands
        )


EXISTING_JOB_POLICIES = {
    "replace-finished": cluster_pb2.EXISTING_JOB_POLICY_UNSPECIFIED,
    "error": cluster_pb2.EXISTING_JOB_POLICY_ERROR,
    "keep": cluster_pb2.EXISTING_JOB_POLICY_KEEP,
    "recreate": cluster_pb2.EXISTING_JOB_POLICY_RECREATE,
}


def parse_existing_job_policy(policy: str | int | None) -> int:
    """What a launch does when its name is taken: "replace-finished" (default), "error", "keep", "recreate"."""
    if policy is None:
        return cluster_pb2.EXISTING_JOB_POLICY_UNSPECIFIED
    if isinstance(policy, int):
        return policy
    key = policy.strip().lower().replace("_", "-")
    if key not in EXISTING_JOB_POLICIES:
        raise ValueError(f"unknown existing_job_policy {policy!r}; expected one of: {', '.join(EXISTING_JOB_POLICIES)}")
    return EXISTING_JOB_POLICIES[key]


def check_env_vars(env_vars: dict[str, str]) -> None:
    """Names and values a process environment can hold; the OS refuses the rest only at exec time."""
    for name, value in env_vars.items():
        if not name:
            raise ValueError("an environment variable needs a name")
        if "=" in name:
            key, _, rest = name.partition("=")
            raise ValueError(
                f"environment variable name {quote_prefix(name)} contains '='; to set {key} to {quote_prefix(rest)} write -e {name} "
                f"(or env_vars={{{key!r}: {quote_prefix(rest)}}})"
            )
        if "\0" in name or "\0" in value:
            raise ValueError(f"environment variable {quote_prefix(name)} contains a NUL byte")


def check_launch_strings(request: cluster_pb2.LaunchJobRequest) -> None:
    """What exec() and the environment cannot carry: '=' in a variable name, NUL anywhere."""
    check_env_vars(dict(request.environment.env_vars))
    if request.entrypoint.WhichOneof("kind") == "command":
        for arg in request.entrypoint.command.argv:
            if "\0" in arg:
                raise ValueError(f"command argument {quote_prefix(arg)} contains a NUL byte")
    for port in request.ports:
        if not port or "\0" in port:
            raise ValueError(f"port name {quote_prefix(port)} is empty or contains a NUL byte")


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
