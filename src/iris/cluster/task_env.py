"""The environment contract between the controller, the runtimes and a running task.

The controller writes `TaskEnv.to_env()` (and, for TPU jobs, `tpu_env()`) into each attempt's
run request; the worker adds the named ports and the work directory; `iris_ctx()` inside the task
reads it back with `TaskEnv.from_env()`. Every name lives here so the writer and readers cannot drift.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

JOB_ID = "IRIS_JOB_ID"
TASK_ID = "IRIS_TASK_ID"
TASK_INDEX = "IRIS_TASK_INDEX"
NUM_TASKS = "IRIS_NUM_TASKS"
ATTEMPT_ID = "IRIS_ATTEMPT_ID"
WORKER_ID = "IRIS_WORKER_ID"
CONTROLLER_ADDRESS = "IRIS_CONTROLLER_ADDRESS"
WORKDIR = "IRIS_WORKDIR"
PORT_PREFIX = "IRIS_PORT_"
# The bearer token a task (or any client) calls the controller with; a task's names its job's owner.
TOKEN = "IRIS_TOKEN"
# The worker daemon's own credential, given at bootstrap; never passed on to tasks.
WORKER_TOKEN = "IRIS_WORKER_TOKEN"

# What JAX needs to find the TPU of a host; every TPU task's container gets it.
TPU_RUNTIME_ENV: Mapping[str, str] = {"JAX_PLATFORMS": "tpu,cpu", "PJRT_DEVICE": "TPU"}


def port_env_name(port_name: str) -> str:
    return PORT_PREFIX + port_name.upper().replace("-", "_")


@dataclass(frozen=True)
class TaskEnv:
    """Who a running task is and where its controller is."""

    job_id: str
    task_id: str = ""
    task_index: int = 0
    num_tasks: int = 1
    attempt_id: int = 0
    worker_id: str = ""
    controller_address: str = ""
    ports: dict[str, int] = field(default_factory=dict)

    def to_env(self) -> dict[str, str]:
        """The variables the controller sets; ports are added by the worker that allocates them."""
        return {
            JOB_ID: self.job_id,
            TASK_ID: self.task_id,
            TASK_INDEX: str(self.task_index),
            NUM_TASKS: str(self.num_tasks),
            ATTEMPT_ID: str(self.attempt_id),
            WORKER_ID: self.worker_id,
            CONTROLLER_ADDRESS: self.controller_address,
        }

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> TaskEnv | None:
        """The task's identity, or None outside an Iris task."""
        if JOB_ID not in env:
            return None
        ports = {
            k.removeprefix(PORT_PREFIX).lower(): int(v) for k, v in env.items() if k.startswith(PORT_PREFIX)
        }
        return cls(
            job_id=env[JOB_ID],
            task_id=env.get(TASK_ID, ""),
            task_index=int(env.get(TASK_INDEX, "0")),
            num_tasks=int(env.get(NUM_TASKS, "1")),
            attempt_id=int(env.get(ATTEMPT_ID, "0")),
            worker_id=env.get(WORKER_ID, ""),
            controller_address=env.get(CONTROLLER_ADDRESS, ""),
            ports=ports,
        )


def tpu_env(task_index: int, gang_hosts: Sequence[str], tpu_name: str, chips_per_host: int = 0) -> dict[str, str]:
    """What JAX needs to form one program over a slice's hosts: the hosts of the whole gang in
    task order, this task's place among them, and how the chips of each host are laid out."""
    env = {**TPU_RUNTIME_ENV, "TPU_WORKER_ID": str(task_index)}
    if gang_hosts:
        env["TPU_WORKER_HOSTNAMES"] = ",".join(gang_hosts)
    if tpu_name:
        env["TPU_NAME"] = tpu_name
    if chips_per_host:
        env["TPU_CHIPS_PER_HOST_BOUNDS"] = chips_per_host_bounds(chips_per_host)
    return env


def chips_per_host_bounds(chips_per_host: int) -> str:
    """The x,y,z extent of one host's chips, as the TPU runtime reads it: 4 chips are 2x2, 8 are 2x4."""
    x = 2 if chips_per_host >= 4 else 1
    return f"{x},{max(1, chips_per_host // x)},1"
