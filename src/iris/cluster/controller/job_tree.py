"""What a job's tasks mean for the job, and what ending a job means for its tree: pure functions.

The store loads a job's row and its tasks' rows (or a job's descendants), asks here, and persists
the answer through its one mutation path in the same transaction. No SQLite, no clock: `now_ms`
is only ever a number the caller passes.

The rules that live here:
- a job's state is derived from its tasks' states (`derive_job_state`): failure budget
  (`max_task_failures`, zero for a gang: one member failing for good ends the gang), worker-failure
  budget, unschedulable tasks, all succeeded;
- a job that starts records when; one that ends records when, its error and exit code (those of its
  first failed task), and a start time taken from its tasks if no heartbeat ever showed it running;
- a job that ends without succeeding kills its remaining tasks;
- a job that ends, or is killed, kills its live descendants, each with a reason naming its parent.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from iris.cluster.controller.transitions import JOB_TRANSITIONS, derive_job_state
from iris.cluster.types import TERMINAL_JOB_STATES, task_state_name
from iris.rpc import cluster_pb2 as pb

# Task states that count against a job: the first such task explains the job's end.
_FAILED_TASK_STATES = (pb.TASK_STATE_FAILED, pb.TASK_STATE_WORKER_FAILED, pb.TASK_STATE_UNSCHEDULABLE)


@dataclass(frozen=True)
class JobRecord:
    job_id: str
    state: int
    started_at_ms: int | None = None
    # Failed tasks the job tolerates (its request's max_task_failures; zero for a gang).
    tolerated_failures: int = 0


@dataclass(frozen=True)
class TaskOutcomeRecord:
    """One task of a job, as far as the job's state is concerned."""

    task_id: str
    state: int
    exit_code: int = 0
    error: str = ""
    started_at_ms: int | None = None


@dataclass(frozen=True)
class JobUpdate:
    """A job moves from `old` to `new`; an ended job gets its finish time, error and exit code."""

    job_id: str
    old: int
    new: int
    reason: str
    started_at_ms: int | None
    error: str = ""
    exit_code: int = 0
    # Its remaining tasks are killed with this reason ("" when none need to be).
    kill_tasks_reason: str = ""
    # Its children (and theirs) are killed with this reason ("" while the job lives).
    kill_children_reason: str = ""

    @property
    def finished(self) -> bool:
        return self.new in TERMINAL_JOB_STATES


def decide_job_update(job: JobRecord, tasks: Sequence[TaskOutcomeRecord], now_ms: int) -> JobUpdate | None:
    """The job's new state given its tasks (in index order), or None when it stays as it is."""
    if job.state in TERMINAL_JOB_STATES:
        return None
    failed = next((t for t in tasks if t.state in _FAILED_TASK_STATES), None)
    detail = f"task {failed.task_id} {task_state_name(failed.state)}: {failed.error}" if failed else ""
    outcome = derive_job_state(job.state, [t.state for t in tasks], job.tolerated_failures, detail)
    if outcome.state == job.state:
        return None
    reason = outcome.reason or JOB_TRANSITIONS[job.state][outcome.state]
    started = job.started_at_ms
    if started is None and outcome.state in (pb.JOB_STATE_BUILDING, pb.JOB_STATE_RUNNING):
        started = now_ms
    if outcome.state not in TERMINAL_JOB_STATES:
        return JobUpdate(job.job_id, job.state, outcome.state, reason, started)
    if started is None:
        # Tasks can finish between two heartbeats without the job ever being seen running.
        starts = [t.started_at_ms for t in tasks if t.started_at_ms is not None]
        started = min(starts) if starts else None
    succeeded = outcome.state == pb.JOB_STATE_SUCCEEDED
    exit_code = failed.exit_code if failed is not None and not succeeded else 0
    return JobUpdate(
        job.job_id,
        job.state,
        outcome.state,
        reason,
        started,
        error="" if succeeded else detail,
        exit_code=exit_code,
        kill_tasks_reason="" if succeeded else f"job ended: {detail}",
        kill_children_reason=f"parent job {job.job_id} finished",
    )


@dataclass(frozen=True)
class JobKill:
    """A live job of a tree to kill (its tasks first, then the job), and why."""

    job_id: str
    old: int
    reason: str


def plan_tree_kill(
    roots: Sequence[str],
    reason: str,
    states: Mapping[str, int],
    children: Mapping[str, Sequence[str]],
) -> list[JobKill]:
    """Every live job under (and including) `roots`, parents before children.

    A job already ended is not killed again, but its descendants still are: a child may outlive
    a parent that failed before the cascade reached it. Each descendant's reason names the parent
    that took it down and, after a colon, why that parent ended."""
    kills: list[JobKill] = []
    pending = [(root, reason) for root in reversed(roots)]
    while pending:
        job_id, why = pending.pop()
        if states[job_id] not in TERMINAL_JOB_STATES:
            kills.append(JobKill(job_id, states[job_id], why))
        for child in reversed(children.get(job_id, ())):
            pending.append((child, f"parent job {job_id} ended: {why}"))
    return kills
