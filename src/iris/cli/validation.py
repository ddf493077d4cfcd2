"""The validation jobs of `iris cluster debug validate` and the smoke test, from the cluster config.

Each step submits jobs to one scale group and passes when they succeed and print what they should:
a simple job; concurrent jobs that each need a whole worker, so the autoscaler must bring up slices
in parallel; a coscheduled job with one task per host of a slice; and an accelerator job that checks
the TPU/GPU environment Iris gives it and does a small computation (JAX when installed, else NumPy,
else plain Python), reporting the backend. A slice of the group that fails while jobs wait ends the
step at once with the slice's reason, rather than at the timeout.
"""

from __future__ import annotations

import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from iris.client.client import IrisClient, Job
from iris.cluster.types import (
    ATTR_SCALE_GROUP,
    TERMINAL_JOB_STATES,
    Constraint,
    CoschedulingConfig,
    Entrypoint,
    ResourceSpec,
    gpu_device,
    job_state_name,
    tpu_device,
    tpu_topology,
)
from iris.rpc import cluster_pb2 as pb
from iris.rpc import config_pb2
from iris.time import Timestamp, wait_until

TASK_MEMORY = "128MB"
# Each step needs at least this many concurrent jobs to make the autoscaler provision in parallel.
CONCURRENT_JOBS = 3
CONCURRENT_HOLD_S = 3
# The share of a worker's configured CPU that a concurrent job asks for (see Target.resources).
WHOLE_WORKER_SHARE = 0.6
POLL_INTERVAL_S = 0.5
# sum(i * i for i in range(64)): what the accelerator job's computation must print.
EXPECTED_RESULT = 85344.0

_ACCELERATOR_SCRIPT = """
import os, sys
accelerator = sys.argv[1]
need = {"tpu": ["TPU_WORKER_ID", "TPU_WORKER_HOSTNAMES"], "gpu": []}.get(accelerator, [])
missing = [name for name in need if name not in os.environ]
if accelerator == "gpu" and not (os.environ.get("CUDA_VISIBLE_DEVICES") or os.path.exists("/dev/nvidia0")):
    missing.append("CUDA_VISIBLE_DEVICES or /dev/nvidia0")
if missing:
    sys.exit(f"iris-validate: the {accelerator} environment lacks " + ", ".join(missing))
try:
    import jax, jax.numpy as jnp
    backend, devices = "jax-" + jax.default_backend(), len(jax.devices())
    value = float(jnp.dot(jnp.arange(64.0), jnp.arange(64.0)))
except ImportError:
    try:
        import numpy as np
        backend, devices, value = "numpy", 0, float(np.arange(64.0) @ np.arange(64.0))
    except ImportError:
        backend, devices, value = "python", 0, float(sum(i * i for i in range(64)))
print(f"iris-validate accelerator={accelerator} backend={backend} devices={devices} result={value}")
"""


class ValidationFailed(RuntimeError):
    """A step's jobs failed or could not run; the message is the one-line reason."""


@dataclass(frozen=True)
class Target:
    """The scale group the validation jobs run on and what one of its slices offers."""

    scale_group: str
    accelerator: str  # "tpu", "gpu" or "cpu"
    device: pb.DeviceConfig | None
    worker_cpu: float
    hosts_per_slice: int

    def resources(self, whole_worker: bool = False) -> ResourceSpec:
        # More than half of what the group's workers are configured with, so that no worker holds
        # two such jobs, but not all of it: a worker offers less when other Pods or daemons on
        # its host already hold a share, and a job asking for the configured amount would never
        # be placed there.
        cpu = self.worker_cpu * WHOLE_WORKER_SHARE if whole_worker and self.worker_cpu else 0.1
        return ResourceSpec(cpu=cpu, memory=TASK_MEMORY, device=self.device)

    @property
    def constraints(self) -> list[Constraint]:
        return [Constraint(ATTR_SCALE_GROUP, value=self.scale_group)]


def target_of(config: config_pb2.IrisClusterConfig, scale_group: str | None = None) -> Target:
    """The named scale group, else the one with the most hosts per slice (so the coscheduled step
    has a gang to place), ties broken by name."""
    if not config.scale_groups:
        raise ValidationFailed("the config defines no scale_groups to validate")
    if scale_group is None:
        groups = sorted(config.scale_groups.items(), key=lambda item: (-item[1].slice_template.num_vms, item[0]))
        scale_group = groups[0][0]
    if scale_group not in config.scale_groups:
        raise ValidationFailed(f"no scale group '{scale_group}' (defined: {', '.join(sorted(config.scale_groups))})")
    group = config.scale_groups[scale_group]
    template = group.slice_template
    device, accelerator = None, "cpu"
    if template.accelerator_type == config_pb2.ACCELERATOR_TYPE_TPU:
        device, accelerator = tpu_device(template.accelerator_variant), "tpu"
    elif template.accelerator_type == config_pb2.ACCELERATOR_TYPE_GPU:
        device, accelerator = gpu_device(template.accelerator_variant, group.resources.gpu_count or 1), "gpu"
    return Target(scale_group, accelerator, device, float(group.resources.cpu), max(1, template.num_vms))


@dataclass(frozen=True)
class StepResult:
    name: str
    passed: bool
    detail: str
    seconds: float


def _python(code: str, *args: str) -> Entrypoint:
    return Entrypoint.from_command("python3", "-c", code, *args)


def _print(marker: str) -> Entrypoint:
    return _python(f"print({marker!r})")


def _slice_failure(client: IrisClient, scale_group: str, since: Timestamp) -> str | None:
    """Why a slice of the group failed since `since`, or None. The autoscaler cleans a failed
    slice up at once, so its recorded actions are where the failure stays visible."""
    status = client.call("get_autoscaler_status", pb.GetAutoscalerStatusRequest())
    for action in status.recent_actions:
        if action.scale_group == scale_group and action.action == "failed" and action.at.epoch_ms >= since.epoch_ms:
            return f"slice {action.slice_id} of {scale_group} failed: {action.reason}"
    return None


def wait_for_jobs(client: IrisClient, jobs: list[Job], scale_group: str, timeout: float, since: Timestamp) -> None:
    """Wait until every job succeeded; ValidationFailed at the first failure, when a slice of the
    group failed since `since` while a job still waits for a worker, or at the timeout."""

    def finished() -> bool:
        statuses = [job.status() for job in jobs]
        for job, status in zip(jobs, statuses, strict=True):
            if status.state in TERMINAL_JOB_STATES and status.state != pb.JOB_STATE_SUCCEEDED:
                raise ValidationFailed(f"job {job.job_id} {job_state_name(status.state)}: {status.error or 'no reason given'}")
        if any(status.state == pb.JOB_STATE_PENDING for status in statuses):
            failure = _slice_failure(client, scale_group, since)
            if failure:
                raise ValidationFailed(failure)
        return all(status.state == pb.JOB_STATE_SUCCEEDED for status in statuses)

    try:
        wait_until(finished, timeout, POLL_INTERVAL_S, "the jobs to finish")
    except TimeoutError:
        waiting = [f"{job.job_id} {job_state_name(job.status().state)}" for job in jobs]
        raise ValidationFailed(f"not finished within {timeout:.0f}s: {', '.join(waiting)}") from None


def _log_lines(job: Job) -> list[str]:
    return [entry.data for entry in job.logs()]


def _expect_output(job: Job, wanted: str) -> str:
    lines = [line for line in _log_lines(job) if wanted in line]
    if not lines:
        raise ValidationFailed(f"job {job.job_id} succeeded but never printed {wanted!r}")
    return lines[0]


class Validation:
    """The validation steps against one cluster; job names carry `prefix` so runs do not collide."""

    def __init__(self, client: IrisClient, target: Target, timeout: float, prefix: str, workspace: Path):
        self.client = client
        self.target = target
        self.timeout = timeout
        self.prefix = prefix
        self.workspace = workspace
        self.jobs: list[Job] = []
        # A slice failing at any point of the run means the group cannot give workers: every
        # later step waiting for one fails at once with that reason.
        self.started = Timestamp.now()

    def _wait(self, jobs: list[Job]) -> None:
        wait_for_jobs(self.client, jobs, self.target.scale_group, self.timeout, self.started)

    def _submit(self, name: str, entrypoint: Entrypoint, whole_worker: bool = False, **options) -> Job:
        job = self.client.submit(
            entrypoint,
            name=f"{self.prefix}-{name}",
            resources=self.target.resources(whole_worker),
            constraints=self.target.constraints,
            workspace=self.workspace,
            timeout=self.timeout,
            **options,
        )
        self.jobs.append(job)
        return job

    def simple(self) -> str:
        job = self._submit("simple", _print("iris-validate simple ok"))
        self._wait([job])
        return _expect_output(job, "iris-validate simple ok")

    def concurrent(self) -> str:
        # Each holds its worker a while, so together they need more workers than one slice has.
        code = f"import sys, time; time.sleep({CONCURRENT_HOLD_S}); print('iris-validate concurrent', sys.argv[1])"
        jobs = [
            self._submit(f"concurrent-{index}", _python(code, str(index)), whole_worker=True)
            for index in range(CONCURRENT_JOBS)
        ]
        self._wait(jobs)
        workers = set()
        for index, job in enumerate(jobs):
            _expect_output(job, f"iris-validate concurrent {index}")
            workers.update(task.worker_id for task in job.status(include_tasks=True).tasks)
        return f"{len(jobs)} jobs on {len(workers)} worker(s)"

    def coscheduled(self) -> str:
        hosts = self.target.hosts_per_slice
        if self.target.accelerator == "tpu":
            hosts = tpu_topology(self.target.device.tpu.variant).hosts if self.target.device else hosts
        if hosts < 2:
            return f"skipped: scale group {self.target.scale_group} has one host per slice"
        # A multi-host TPU device makes the job a gang by itself; other devices need it spelled out.
        options = {} if self.target.accelerator == "tpu" else {"replicas": hosts, "coscheduling": CoschedulingConfig()}
        code = "import os; print('iris-validate task', os.environ['IRIS_TASK_INDEX'], 'of', os.environ['IRIS_NUM_TASKS'])"
        job = self._submit("coscheduled", _python(code), **options)
        self._wait([job])
        workers = sorted(task.worker_id for task in job.status(include_tasks=True).tasks)
        printed = sorted(line for line in _log_lines(job) if line.startswith("iris-validate task"))
        expected = [f"iris-validate task {index} of {hosts}" for index in range(hosts)]
        if printed != expected:
            raise ValidationFailed(f"job {job.job_id}: tasks printed {printed}, expected {expected}")
        return f"{hosts} tasks placed together on {', '.join(workers)}"

    def accelerator(self) -> str:
        job = self._submit("accelerator", _python(_ACCELERATOR_SCRIPT, self.target.accelerator))
        self._wait([job])
        line = _expect_output(job, "iris-validate accelerator=")
        if f"result={EXPECTED_RESULT}" not in line:
            raise ValidationFailed(f"job {job.job_id} computed the wrong result: {line}")
        return line.removeprefix("iris-validate ")

    def steps(self) -> list[tuple[str, Callable[[], str]]]:
        return [
            ("simple job", self.simple),
            ("concurrent jobs", self.concurrent),
            ("coscheduled job", self.coscheduled),
            ("accelerator job", self.accelerator),
        ]


def run_step(name: str, step: Callable[[], str]) -> StepResult:
    started = time.monotonic()
    try:
        detail = step()
    except ValidationFailed as exc:
        return StepResult(name, False, str(exc), time.monotonic() - started)
    return StepResult(name, True, detail, time.monotonic() - started)


def validate(
    client: IrisClient,
    target: Target,
    timeout: float,
    prefix: str,
    on_result: Callable[[StepResult], None] = lambda result: None,
) -> list[StepResult]:
    """Run every step in order (each one even when an earlier one failed); their results. Jobs a
    failed step left unfinished are killed, so they do not hold the cluster's capacity."""
    results = []
    with tempfile.TemporaryDirectory(prefix="iris-validate-") as workspace:
        validation = Validation(client, target, timeout, prefix, Path(workspace))
        try:
            for name, step in validation.steps():
                result = run_step(name, step)
                on_result(result)
                results.append(result)
        finally:
            for job in validation.jobs:
                if job.status().state not in TERMINAL_JOB_STATES:
                    job.terminate("validation step failed")
    return results
