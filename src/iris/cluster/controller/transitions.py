"""Legal state changes for jobs, tasks, attempts, workers and slices, and job-state derivation.

Each table maps a state to the states it may move to, with the event that causes each edge. The
store's one mutation path (`ControllerStore.set_state`) checks every change against its table and
records it (time, reason, causing event); nothing else writes a state column. Job state is never
set directly except for KILLED: it is derived from task states by `derive_job_state()`.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from enum import StrEnum

from iris.rpc import cluster_pb2 as pb

TASK_TRANSITIONS: dict[int, dict[int, str]] = {
    pb.TASK_STATE_PENDING: {
        pb.TASK_STATE_ASSIGNED: "the scheduler placed it on a worker",
        pb.TASK_STATE_KILLED: "its job was terminated before it ran",
        pb.TASK_STATE_FAILED: "its job failed before it ran",
        pb.TASK_STATE_UNSCHEDULABLE: "it stayed pending past its scheduling timeout",
    },
    pb.TASK_STATE_ASSIGNED: {
        pb.TASK_STATE_BUILDING: "the worker started its setup",
        pb.TASK_STATE_RUNNING: "the worker started its command",
        pb.TASK_STATE_SUCCEEDED: "it finished between two heartbeats",
        pb.TASK_STATE_FAILED: "it failed before the controller saw it run",
        pb.TASK_STATE_KILLED: "its job was terminated",
        pb.TASK_STATE_WORKER_FAILED: "its worker died and the retry budget is spent",
        pb.TASK_STATE_PENDING: "its worker died or lost it; it will be retried",
    },
    pb.TASK_STATE_BUILDING: {
        pb.TASK_STATE_RUNNING: "setup finished and the command started",
        pb.TASK_STATE_SUCCEEDED: "it finished between two heartbeats",
        pb.TASK_STATE_FAILED: "setup or the command failed",
        pb.TASK_STATE_KILLED: "its job was terminated",
        pb.TASK_STATE_WORKER_FAILED: "its worker died and the retry budget is spent",
        pb.TASK_STATE_PENDING: "it failed or its worker died; it will be retried",
    },
    pb.TASK_STATE_RUNNING: {
        pb.TASK_STATE_SUCCEEDED: "the command exited 0",
        pb.TASK_STATE_FAILED: "the command failed and the retry budget is spent",
        pb.TASK_STATE_KILLED: "its job was terminated",
        pb.TASK_STATE_WORKER_FAILED: "its worker died and the retry budget is spent",
        pb.TASK_STATE_PENDING: "it failed or its worker died; it will be retried",
    },
    pb.TASK_STATE_SUCCEEDED: {},
    pb.TASK_STATE_FAILED: {},
    pb.TASK_STATE_KILLED: {},
    pb.TASK_STATE_WORKER_FAILED: {},
    pb.TASK_STATE_UNSCHEDULABLE: {},
}

ATTEMPT_TRANSITIONS: dict[int, dict[int, str]] = {
    pb.TASK_STATE_ASSIGNED: {
        pb.TASK_STATE_BUILDING: "the worker reported setup in progress",
        pb.TASK_STATE_RUNNING: "the worker reported the command running",
        pb.TASK_STATE_SUCCEEDED: "the worker reported success",
        pb.TASK_STATE_FAILED: "the worker reported failure",
        pb.TASK_STATE_KILLED: "the controller killed it",
        pb.TASK_STATE_WORKER_FAILED: "the worker died or no longer has it",
    },
    pb.TASK_STATE_BUILDING: {
        pb.TASK_STATE_RUNNING: "the worker reported the command running",
        pb.TASK_STATE_SUCCEEDED: "the worker reported success",
        pb.TASK_STATE_FAILED: "the worker reported failure",
        pb.TASK_STATE_KILLED: "the controller killed it",
        pb.TASK_STATE_WORKER_FAILED: "the worker died or no longer has it",
    },
    pb.TASK_STATE_RUNNING: {
        pb.TASK_STATE_SUCCEEDED: "the worker reported success",
        pb.TASK_STATE_FAILED: "the worker reported failure",
        pb.TASK_STATE_KILLED: "the controller killed it",
        pb.TASK_STATE_WORKER_FAILED: "the worker died or no longer has it",
    },
    pb.TASK_STATE_SUCCEEDED: {},
    pb.TASK_STATE_FAILED: {},
    pb.TASK_STATE_KILLED: {},
    pb.TASK_STATE_WORKER_FAILED: {},
}

JOB_TRANSITIONS: dict[int, dict[int, str]] = {
    pb.JOB_STATE_PENDING: {
        pb.JOB_STATE_BUILDING: "a task started its setup",
        pb.JOB_STATE_RUNNING: "a task started running",
        pb.JOB_STATE_SUCCEEDED: "every task succeeded before a heartbeat showed them running",
        pb.JOB_STATE_FAILED: "tasks failed past the job's failure budget",
        pb.JOB_STATE_KILLED: "a user or its parent terminated it",
        pb.JOB_STATE_UNSCHEDULABLE: "a task could not be scheduled in time",
    },
    pb.JOB_STATE_BUILDING: {
        pb.JOB_STATE_PENDING: "its building tasks were lost and are pending again",
        pb.JOB_STATE_RUNNING: "a task started running",
        pb.JOB_STATE_SUCCEEDED: "every task succeeded",
        pb.JOB_STATE_FAILED: "tasks failed past the job's failure budget",
        pb.JOB_STATE_KILLED: "a user or its parent terminated it",
        pb.JOB_STATE_UNSCHEDULABLE: "a task could not be scheduled in time",
    },
    pb.JOB_STATE_RUNNING: {
        pb.JOB_STATE_PENDING: "its running tasks were lost and are pending again",
        pb.JOB_STATE_BUILDING: "its running tasks were lost and retries are in setup",
        pb.JOB_STATE_SUCCEEDED: "every task succeeded",
        pb.JOB_STATE_FAILED: "tasks failed past the job's failure budget",
        pb.JOB_STATE_KILLED: "a user or its parent terminated it",
        pb.JOB_STATE_WORKER_FAILED: "a task's workers kept dying past its preemption budget",
        pb.JOB_STATE_UNSCHEDULABLE: "a retried task could not be scheduled in time",
    },
    pb.JOB_STATE_SUCCEEDED: {},
    pb.JOB_STATE_FAILED: {},
    pb.JOB_STATE_KILLED: {},
    pb.JOB_STATE_WORKER_FAILED: {},
    pb.JOB_STATE_UNSCHEDULABLE: {},
}
# A job whose tasks were lost before running may also go from PENDING straight to WORKER_FAILED.
JOB_TRANSITIONS[pb.JOB_STATE_PENDING][pb.JOB_STATE_WORKER_FAILED] = "its tasks' workers kept dying"
JOB_TRANSITIONS[pb.JOB_STATE_BUILDING][pb.JOB_STATE_WORKER_FAILED] = "its tasks' workers kept dying"

WORKER_TRANSITIONS: dict[int, dict[int, str]] = {
    pb.WORKER_STATE_UNSPECIFIED: {
        pb.WORKER_STATE_HEALTHY: "it registered for the first time",
    },
    pb.WORKER_STATE_HEALTHY: {
        pb.WORKER_STATE_UNHEALTHY: "a heartbeat failed",
        pb.WORKER_STATE_FAILED: "no successful heartbeat within the worker timeout",
        pb.WORKER_STATE_STOPPED: "it was deregistered",
        pb.WORKER_STATE_TERMINATED: "its slice was terminated on purpose",
    },
    pb.WORKER_STATE_UNHEALTHY: {
        pb.WORKER_STATE_HEALTHY: "a heartbeat succeeded again",
        pb.WORKER_STATE_FAILED: "no successful heartbeat within the worker timeout",
        pb.WORKER_STATE_STOPPED: "it was deregistered",
        pb.WORKER_STATE_TERMINATED: "its slice was terminated on purpose",
    },
    pb.WORKER_STATE_FAILED: {
        pb.WORKER_STATE_HEALTHY: "it registered again",
    },
    pb.WORKER_STATE_STOPPED: {
        pb.WORKER_STATE_HEALTHY: "it registered again",
    },
    pb.WORKER_STATE_TERMINATED: {
        pb.WORKER_STATE_HEALTHY: "it registered again",
    },
}

class SliceState(StrEnum):
    """A slice's life as the controller records it; the cloud's own states arrive through describe()."""

    UNSPECIFIED = ""
    CREATING = "CREATING"
    BOOTSTRAPPING = "BOOTSTRAPPING"
    READY = "READY"
    FAILED = "FAILED"
    DELETING = "DELETING"
    DELETED = "DELETED"


# Slices that still hold (or will hold) cloud resources and count against a group's max_slices.
LIVE_SLICE_STATES = (SliceState.CREATING, SliceState.BOOTSTRAPPING, SliceState.READY)
IN_FLIGHT_SLICE_STATES = (SliceState.CREATING, SliceState.BOOTSTRAPPING)

SLICE_TRANSITIONS: dict[str, dict[str, str]] = {
    SliceState.UNSPECIFIED: {
        SliceState.CREATING: "the autoscaler asked the platform for it, or found it running",
    },
    SliceState.CREATING: {
        SliceState.BOOTSTRAPPING: "the platform provisioned it and is starting workers",
        SliceState.READY: "its workers are up",
        SliceState.FAILED: "provisioning or bootstrap failed",
        SliceState.DELETING: "scaled down or terminated before it was ready",
    },
    SliceState.BOOTSTRAPPING: {
        SliceState.READY: "its workers are up",
        SliceState.FAILED: "bootstrap failed",
        SliceState.DELETING: "scaled down or terminated before it was ready",
    },
    SliceState.READY: {
        SliceState.FAILED: "the slice died (preempted, a worker lost, or it vanished)",
        SliceState.DELETING: "scaled down or terminated",
    },
    SliceState.FAILED: {
        SliceState.DELETING: "its remains are being cleaned up",
    },
    SliceState.DELETING: {
        SliceState.DELETED: "the platform removed it",
    },
    SliceState.DELETED: {},
}

_TABLES = {
    "task": (TASK_TRANSITIONS, pb.TaskState.Name),
    "attempt": (ATTEMPT_TRANSITIONS, pb.TaskState.Name),
    "job": (JOB_TRANSITIONS, pb.JobState.Name),
    "worker": (WORKER_TRANSITIONS, pb.WorkerState.Name),
    "slice": (SLICE_TRANSITIONS, str),
}


class InvalidTransitionError(RuntimeError):
    def __init__(self, message: str, kind: str = "", entity_id: str = ""):
        super().__init__(message)
        self.kind = kind
        self.entity_id = entity_id


def check_transition(kind: str, entity_id: str, old: int | str, new: int | str, history: Iterable[str] = ()) -> None:
    """Raise with the entity's story when `old -> new` is not an edge of its table."""
    table, name = _TABLES[kind]
    if new not in table.get(old, {}):
        story = "; ".join(history) or "no recorded history"
        raise InvalidTransitionError(
            f"illegal {kind} transition for {entity_id}: {name(old)} -> {name(new)} (history: {story})",
            kind,
            entity_id,
        )


def state_label(kind: str, state: int | str) -> str:
    return _TABLES[kind][1](state)


# ---------------------------------------------------------------- job derivation


@dataclass(frozen=True)
class JobOutcome:
    state: int
    reason: str


def derive_job_state(
    current: int,
    task_states: list[int],
    max_task_failures: int,
    failure_detail: str = "",
) -> JobOutcome:
    """The job state implied by its tasks' states.

    KILLED is sticky (set by terminate); otherwise: any task that exhausted its worker-failure
    budget fails the job as WORKER_FAILED; more failed tasks than `max_task_failures` fails it;
    all tasks succeeded is SUCCEEDED; an unschedulable task makes the job UNSCHEDULABLE; then
    RUNNING if any task runs, BUILDING if any task is in setup, else PENDING.
    """
    if current == pb.JOB_STATE_KILLED:
        return JobOutcome(current, "")
    counts = Counter(task_states)
    if counts[pb.TASK_STATE_WORKER_FAILED]:
        return JobOutcome(pb.JOB_STATE_WORKER_FAILED, failure_detail or "a task's worker kept failing")
    if counts[pb.TASK_STATE_FAILED] > max_task_failures:
        return JobOutcome(pb.JOB_STATE_FAILED, failure_detail or "a task failed")
    if counts[pb.TASK_STATE_UNSCHEDULABLE]:
        return JobOutcome(pb.JOB_STATE_UNSCHEDULABLE, failure_detail or "a task could not be scheduled")
    finished = counts[pb.TASK_STATE_SUCCEEDED] + counts[pb.TASK_STATE_FAILED]
    if task_states and finished == len(task_states):
        if counts[pb.TASK_STATE_SUCCEEDED]:
            return JobOutcome(pb.JOB_STATE_SUCCEEDED, "every task finished")
        return JobOutcome(pb.JOB_STATE_FAILED, failure_detail or "every task failed")
    if counts[pb.TASK_STATE_RUNNING]:
        return JobOutcome(pb.JOB_STATE_RUNNING, "")
    if current == pb.JOB_STATE_RUNNING and counts[pb.TASK_STATE_SUCCEEDED]:
        # Later tasks starting after earlier ones finished: nothing was lost, the job runs on.
        return JobOutcome(current, "")
    if counts[pb.TASK_STATE_BUILDING]:
        return JobOutcome(pb.JOB_STATE_BUILDING, "")
    if current in (pb.JOB_STATE_RUNNING, pb.JOB_STATE_BUILDING) and (
        counts[pb.TASK_STATE_SUCCEEDED] or counts[pb.TASK_STATE_ASSIGNED]
    ):
        # Some tasks finished and the rest are merely between attempts: the job keeps running.
        return JobOutcome(current, "")
    return JobOutcome(pb.JOB_STATE_PENDING, "")


# ---------------------------------------------------------------- retries


@dataclass(frozen=True)
class AttemptOutcome:
    """What a finished attempt means for its task."""

    task_state: int
    failure_count: int
    preemption_count: int
    retry: bool


def decide_attempt_outcome(
    attempt_state: int,
    failure_count: int,
    preemption_count: int,
    max_retries_failure: int,
    max_retries_preemption: int,
) -> AttemptOutcome:
    """Failures of the task's own code spend the failure budget; losing the worker (preemption,
    crash, a task the worker no longer knows) spends the preemption budget. A task whose budget
    still has room goes back to PENDING for another attempt."""
    if attempt_state == pb.TASK_STATE_SUCCEEDED:
        return AttemptOutcome(pb.TASK_STATE_SUCCEEDED, failure_count, preemption_count, retry=False)
    if attempt_state == pb.TASK_STATE_FAILED:
        failures = failure_count + 1
        if failures <= max_retries_failure:
            return AttemptOutcome(pb.TASK_STATE_PENDING, failures, preemption_count, retry=True)
        return AttemptOutcome(pb.TASK_STATE_FAILED, failures, preemption_count, retry=False)
    if attempt_state in (pb.TASK_STATE_WORKER_FAILED, pb.TASK_STATE_KILLED):
        preemptions = preemption_count + 1
        if preemptions <= max_retries_preemption:
            return AttemptOutcome(pb.TASK_STATE_PENDING, failure_count, preemptions, retry=True)
        return AttemptOutcome(pb.TASK_STATE_WORKER_FAILED, failure_count, preemptions, retry=False)
    raise ValueError(f"attempt state {pb.TaskState.Name(attempt_state)} is not terminal")
