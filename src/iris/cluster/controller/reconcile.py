"""Reconciliation as pure functions, in the style of dask's `handle_stimulus`.

A stimulus (a worker's heartbeat answer, a worker's death, a kill, a scheduling timeout) and a
snapshot of what the controller expects go in; decisions come out: state changes with their
reasons, attempts to kill, jobs whose state must be derived again. No SQLite, no sockets, no
clock: `now` is only ever a number the caller passes. The store loads the snapshot and persists
the decisions through its one mutation path, in one transaction.

The rules that live here:
- an attempt's end spends the failure budget (its own code failed) or the preemption budget (its
  worker was lost); a task with budget left goes back to PENDING, otherwise it ends;
- an attempt the worker never received is lost at no cost to either budget;
- an attempt id is delivered at most once: one sent in a heartbeat whose answer was lost is never
  sent again; its task is retried under a new attempt id, and the old one is killed if it ran;
- an expected attempt the worker no longer reports was lost with the worker's state (restart);
- a reported attempt the controller does not want (unknown, killed, moved) is killed;
- a gang member going back to PENDING takes its running siblings with it (killed, not charged);
- a task pending past its job's scheduling timeout becomes UNSCHEDULABLE.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from iris.cluster.controller.transitions import (
    AttemptOutcome,
    InvalidTransitionError,
    check_transition,
    decide_attempt_outcome,
)
from iris.cluster.types import TERMINAL_TASK_STATES, task_state_name
from iris.rpc import cluster_pb2 as pb

ACTIVE_ATTEMPT_STATES = (pb.TASK_STATE_ASSIGNED, pb.TASK_STATE_BUILDING, pb.TASK_STATE_RUNNING)
# Lines of a failed task's output quoted in its error.
FAILURE_LOG_LINES = 5
KILLED_EXIT_CODE = -1

AttemptKey = tuple[str, int]


# ---------------------------------------------------------------- what the controller expects


@dataclass(frozen=True)
class Budget:
    """A job's retry rules, from its launch request."""

    max_retries_failure: int = 0
    max_retries_preemption: int = 0
    gang: bool = False


@dataclass(frozen=True)
class TaskRecord:
    task_id: str
    job_id: str
    state: int
    current_attempt: int = -1
    worker_id: str = ""
    failure_count: int = 0
    preemption_count: int = 0


@dataclass(frozen=True)
class AttemptRecord:
    task_id: str
    attempt_id: int
    worker_id: str
    state: int
    delivered: bool = True

    @property
    def key(self) -> AttemptKey:
        return (self.task_id, self.attempt_id)


@dataclass(frozen=True)
class Snapshot:
    """What the controller knows of the tasks and attempts a stimulus touches.

    `gang_tasks` lists, per gang job, every task of the job (their current attempts are in
    `attempts`), so a gang restart can reach the siblings.
    """

    tasks: Mapping[str, TaskRecord]
    attempts: Mapping[AttemptKey, AttemptRecord]
    budgets: Mapping[str, Budget]
    gang_tasks: Mapping[str, Sequence[str]] = field(default_factory=dict)


@dataclass(frozen=True)
class Report:
    """What a worker said about one attempt."""

    task_id: str
    attempt_id: int
    state: int
    exit_code: int = 0
    error: str = ""
    started_at_ms: int = 0
    ports: Mapping[str, int] = field(default_factory=dict)
    result: bytes = b""

    @property
    def key(self) -> AttemptKey:
        return (self.task_id, self.attempt_id)

    @property
    def active(self) -> bool:
        return self.state in ACTIVE_ATTEMPT_STATES


# ---------------------------------------------------------------- decisions


@dataclass(frozen=True)
class AttemptChange:
    """An attempt moves; `ended` attempts get their exit code, error and finish time."""

    task_id: str
    attempt_id: int
    old: int
    new: int
    reason: str
    exit_code: int = 0
    error: str = ""
    started_at_ms: int = 0

    @property
    def ended(self) -> bool:
        return self.new not in ACTIVE_ATTEMPT_STATES


@dataclass(frozen=True)
class TaskChange:
    """A task moves. `retry`: back to PENDING for another attempt; `closed`: it ended without
    an attempt's outcome (killed, unschedulable) and its error is the reason."""

    task_id: str
    old: int
    new: int
    reason: str
    failure_count: int | None = None
    preemption_count: int | None = None
    exit_code: int | None = None
    error: str | None = None
    pending_reason: str = ""
    started_at_ms: int = 0

    @property
    def finished(self) -> bool:
        return self.new in TERMINAL_TASK_STATES


@dataclass(frozen=True)
class TaskDetail:
    """What a report adds to a task without moving it: ports, result, start time."""

    task_id: str
    attempt_id: int
    ports: Mapping[str, int] | None = None
    result: bytes = b""
    started_at_ms: int = 0


@dataclass
class Decisions:
    changes: list[AttemptChange | TaskChange | TaskDetail] = field(default_factory=list)
    # Attempts whose logs will not grow any more (lost with their worker).
    logs_complete: list[AttemptKey] = field(default_factory=list)
    kills: list[tuple[str, str, int]] = field(default_factory=list)  # (worker_id, task_id, attempt_id)
    # Attempts a worker runs that the controller does not want: kill them on that worker.
    unknown: list[AttemptKey] = field(default_factory=list)
    touched_jobs: set[str] = field(default_factory=set)


class _Reconciler:
    """A working copy of the snapshot that decisions are applied to as they are made, so a later
    rule sees the effect of an earlier one (a gang restart kills a sibling before its report)."""

    def __init__(self, snapshot: Snapshot, failure_tails: Mapping[AttemptKey, Sequence[str]] | None = None):
        self.tasks = dict(snapshot.tasks)
        self.attempts = dict(snapshot.attempts)
        self.budgets = snapshot.budgets
        self.gang_tasks = snapshot.gang_tasks
        self.failure_tails = failure_tails or {}
        self.out = Decisions()

    # -- all-or-nothing groups of decisions

    def _mark(self) -> tuple:
        out = self.out
        return (
            dict(self.tasks),
            dict(self.attempts),
            len(out.changes),
            len(out.kills),
            set(out.touched_jobs),
        )

    def _undo(self, mark: tuple) -> None:
        self.tasks, self.attempts, changes, kills, touched = mark
        del self.out.changes[changes:]
        del self.out.kills[kills:]
        self.out.touched_jobs = touched

    # -- primitive moves

    def move_attempt(self, attempt: AttemptRecord, change: AttemptChange) -> None:
        check_transition("attempt", f"{attempt.task_id}#{attempt.attempt_id}", change.old, change.new)
        self.attempts[attempt.key] = dataclasses.replace(attempt, state=change.new)
        self.out.changes.append(change)

    def move_task(self, task: TaskRecord, change: TaskChange) -> None:
        check_transition("task", task.task_id, change.old, change.new)
        updates: dict[str, object] = {"state": change.new}
        if change.failure_count is not None:
            updates["failure_count"] = change.failure_count
        if change.preemption_count is not None:
            updates["preemption_count"] = change.preemption_count
        self.tasks[task.task_id] = dataclasses.replace(task, **updates)
        self.out.changes.append(change)
        self.out.touched_jobs.add(task.job_id)

    def finish_attempt(self, key: AttemptKey, state: int, exit_code: int, error: str) -> None:
        attempt = self.attempts.get(key)
        if attempt is None or attempt.state not in ACTIVE_ATTEMPT_STATES:
            return
        self.move_attempt(
            attempt,
            AttemptChange(key[0], key[1], attempt.state, state, error or "finished", exit_code, error),
        )

    # -- rules

    def end_attempt(
        self, key: AttemptKey, state: int, exit_code: int, error: str, charge: bool = True
    ) -> None:
        """Apply an attempt's end to its task: retry it, or finish it with a reason a user can act on.

        `charge=False` is for attempts the worker never received: losing those is nobody's fault
        and costs no retry budget.
        """
        task_id, attempt_id = key
        self.finish_attempt(key, state, exit_code, error)
        task = self.tasks[task_id]
        if task.current_attempt != attempt_id or task.state in TERMINAL_TASK_STATES:
            return
        budget = self.budgets[task.job_id]
        if charge:
            outcome = decide_attempt_outcome(
                state,
                task.failure_count,
                task.preemption_count,
                budget.max_retries_failure,
                budget.max_retries_preemption,
            )
        else:
            outcome = AttemptOutcome(
                pb.TASK_STATE_PENDING, task.failure_count, task.preemption_count, retry=True
            )
        reason = error or ("exited 0" if state == pb.TASK_STATE_SUCCEEDED else task_state_name(state))
        if outcome.retry:
            reason = f"attempt {attempt_id} {task_state_name(state)} ({reason}); retrying"
        elif outcome.task_state == pb.TASK_STATE_FAILED:
            error = explain_failure(error, outcome.failure_count, self.failure_tails.get(key, ()))
        elif outcome.task_state == pb.TASK_STATE_WORKER_FAILED:
            error = (
                f"{error}; its worker was lost {outcome.preemption_count} time(s), past the limit of "
                f"{budget.max_retries_preemption} (max_retries_preemption)"
            )
        self.move_task(
            task,
            TaskChange(
                task_id,
                task.state,
                outcome.task_state,
                reason,
                failure_count=outcome.failure_count,
                preemption_count=outcome.preemption_count,
                exit_code=exit_code,
                error=error,
                pending_reason="waiting to be retried" if outcome.retry else "",
            ),
        )
        if outcome.retry and budget.gang:
            self.restart_gang(task.job_id, task_id)

    def restart_gang(self, job_id: str, failed_task_id: str) -> None:
        """A gang runs as a unit: when one member goes back to pending, so do the others (their
        attempts are killed without spending their budgets), and the scheduler places them together."""
        reason = f"gang member {failed_task_id} is being retried; the gang restarts together"
        for sibling_id in self.gang_tasks.get(job_id, ()):
            sibling = self.tasks[sibling_id]
            if sibling_id == failed_task_id or sibling.state not in ACTIVE_ATTEMPT_STATES:
                continue
            self.finish_attempt(
                (sibling_id, sibling.current_attempt), pb.TASK_STATE_KILLED, KILLED_EXIT_CODE, reason
            )
            self.out.kills.append((sibling.worker_id, sibling_id, sibling.current_attempt))
            self.move_task(
                sibling,
                TaskChange(
                    sibling_id, sibling.state, pb.TASK_STATE_PENDING, reason,
                    pending_reason="waiting to be retried with its gang",
                ),
            )  # fmt: skip

    def lose_attempt(self, key: AttemptKey, worker_id: str) -> None:
        self.out.logs_complete.append(key)
        attempt = self.attempts.get(key)
        if attempt is None or attempt.state not in ACTIVE_ATTEMPT_STATES:
            return
        reason = f"worker {worker_id} no longer has attempt {key[1]} (the worker restarted or lost it)"
        self.end_attempt(key, pb.TASK_STATE_WORKER_FAILED, KILLED_EXIT_CODE, reason)

    def absorb_report(self, report: Report) -> None:
        attempt = self.attempts.get(report.key)
        if attempt is None or attempt.state not in ACTIVE_ATTEMPT_STATES or report.state == attempt.state:
            return
        if report.ports:
            self.out.changes.append(TaskDetail(report.task_id, report.attempt_id, ports=dict(report.ports)))
        if report.active:
            self.move_attempt(
                attempt,
                AttemptChange(
                    report.task_id, report.attempt_id, attempt.state, report.state, "worker report",
                    started_at_ms=report.started_at_ms,
                ),
            )  # fmt: skip
            task = self.tasks[report.task_id]
            if task.current_attempt == report.attempt_id and task.state != report.state:
                self.move_task(
                    task,
                    TaskChange(
                        task.task_id,
                        task.state,
                        report.state,
                        "worker report",
                        started_at_ms=report.started_at_ms,
                    ),
                )
            self.out.touched_jobs.add(task.job_id)
            return
        if report.started_at_ms or report.result:
            self.out.changes.append(
                TaskDetail(
                    report.task_id,
                    report.attempt_id,
                    result=report.result,
                    started_at_ms=report.started_at_ms,
                )
            )
        self.end_attempt(report.key, report.state, report.exit_code, report.error)

    def guarded(self, rule: Callable[..., None], *args: object) -> InvalidTransitionError | None:
        """Apply one rule all or nothing: one inconsistent report must not stall the others.
        Returns why the rule was undone, or None when it applied."""
        mark = self._mark()
        try:
            rule(*args)
        except InvalidTransitionError as exc:
            self._undo(mark)
            return exc
        return None


# ---------------------------------------------------------------- stimuli


def on_heartbeat(
    worker_id: str,
    expected: Iterable[AttemptKey],
    reported: Mapping[AttemptKey, Report],
    snapshot: Snapshot,
    failure_tails: Mapping[AttemptKey, Sequence[str]] | None = None,
) -> tuple[Decisions, list[tuple[AttemptKey, InvalidTransitionError]]]:
    """A worker answered a heartbeat. Returns the decisions, and the expected attempts whose
    report was ignored because it broke a transition table, with why (for the caller to log)."""
    rec = _Reconciler(snapshot, failure_tails)
    rejected = []
    for key in expected:
        report = reported.get(key)
        why = (
            rec.guarded(rec.lose_attempt, key, worker_id)
            if report is None
            else rec.guarded(rec.absorb_report, report)
        )
        if why:
            rejected.append((key, why))
    for key, report in reported.items():
        if not report.active:
            continue
        attempt = rec.attempts.get(key)
        # Also covers attempts killed in the store whose kill was lost with a controller restart.
        wanted = (
            attempt is not None and attempt.worker_id == worker_id and attempt.state in ACTIVE_ATTEMPT_STATES
        )
        if not wanted:
            rec.out.unknown.append(key)
    return rec.out, rejected


def on_delivery_unconfirmed(worker_id: str, sent: Sequence[AttemptRecord], snapshot: Snapshot) -> Decisions:
    """A heartbeat carrying attempts to start got no answer, so the worker may or may not have
    started them. Sending one again could run the same attempt id twice; instead each ends, at no
    cost to a budget, and its task is retried as a new attempt. Should the worker have started it,
    its next report names an attempt nobody wants, and it is killed."""
    rec = _Reconciler(snapshot)
    for attempt in sent:
        if attempt.state in ACTIVE_ATTEMPT_STATES and not attempt.delivered:
            rec.end_attempt(
                attempt.key,
                pb.TASK_STATE_WORKER_FAILED,
                KILLED_EXIT_CODE,
                f"the heartbeat starting attempt {attempt.attempt_id} on worker {worker_id} got no answer",
                charge=False,
            )
    return rec.out


def on_worker_lost(
    worker_id: str, reason: str, open_attempts: Sequence[AttemptRecord], snapshot: Snapshot
) -> Decisions:
    """A worker is gone: every attempt it had ends as WORKER_FAILED; attempts it never received
    are retried without spending a budget."""
    rec = _Reconciler(snapshot)
    for attempt in open_attempts:
        rec.out.logs_complete.append(attempt.key)
        if attempt.state in ACTIVE_ATTEMPT_STATES:
            rec.end_attempt(
                attempt.key,
                pb.TASK_STATE_WORKER_FAILED,
                KILLED_EXIT_CODE,
                f"worker {worker_id} failed: {reason}",
                charge=attempt.delivered,
            )
    return rec.out


def on_kill(tasks: Sequence[TaskRecord], reason: str, snapshot: Snapshot) -> Decisions:
    """The tasks' job was terminated or ended: every live task is KILLED, running attempts too."""
    rec = _Reconciler(snapshot)
    for task in tasks:
        if task.state in TERMINAL_TASK_STATES:
            continue
        rec.move_task(task, TaskChange(task.task_id, task.state, pb.TASK_STATE_KILLED, reason, error=reason))
        if task.state != pb.TASK_STATE_PENDING:
            rec.finish_attempt(
                (task.task_id, task.current_attempt), pb.TASK_STATE_KILLED, KILLED_EXIT_CODE, reason
            )
            rec.out.kills.append((task.worker_id, task.task_id, task.current_attempt))
    # Killing is the job's own decision: its state is set by the caller, not derived again.
    rec.out.touched_jobs.clear()
    return rec.out


@dataclass(frozen=True)
class PendingTask:
    task_id: str
    job_id: str
    pending_since_ms: int
    pending_reason: str
    scheduling_timeout_ms: int


def on_scheduling_timeouts(pending: Iterable[PendingTask], now_ms: int) -> Decisions:
    """Tasks pending past their job's scheduling timeout become UNSCHEDULABLE, with the reason
    they could not be placed."""
    out = Decisions()
    for task in pending:
        timeout_ms = task.scheduling_timeout_ms
        if not timeout_ms or now_ms - task.pending_since_ms < timeout_ms:
            continue
        error = (
            f"not scheduled within {timeout_ms / 1000:g}s (scheduling_timeout): "
            f"{task.pending_reason or 'no placement found'}"
        )
        out.changes.append(
            TaskChange(task.task_id, pb.TASK_STATE_PENDING, pb.TASK_STATE_UNSCHEDULABLE, error, error=error)
        )
        out.touched_jobs.add(task.job_id)
    return out


def explain_failure(error: str, failures: int, tail: Sequence[str]) -> str:
    explained = error or "failed"
    if failures > 1:
        explained += f" (after {failures} attempts)"
    if tail:
        explained += "; last output: " + " | ".join(line[:200] for line in tail)
    return explained


def report_from_proto(status: pb.WorkerTaskStatus) -> Report:
    return Report(
        task_id=status.task_id,
        attempt_id=status.attempt_id,
        state=status.state,
        exit_code=status.exit_code,
        error=status.error,
        started_at_ms=status.started_at.epoch_ms,
        ports=dict(status.ports),
        result=status.result,
    )
