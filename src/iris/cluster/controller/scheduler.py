"""Task placement as a pure function: pending tasks and worker capacities in, assignments and
human-readable pending reasons out. No I/O, no clock, no store: the controller gathers inputs
from its store, calls `find_assignments`, and applies the result in one transaction.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from iris.config import format_size


@dataclass(frozen=True)
class Resources:
    cpu_millicores: int = 0
    memory_bytes: int = 0
    disk_bytes: int = 0

    def fits_in(self, other: Resources) -> bool:
        return (
            self.cpu_millicores <= other.cpu_millicores
            and self.memory_bytes <= other.memory_bytes
            and self.disk_bytes <= other.disk_bytes
        )

    def __sub__(self, other: Resources) -> Resources:
        return Resources(
            self.cpu_millicores - other.cpu_millicores,
            self.memory_bytes - other.memory_bytes,
            self.disk_bytes - other.disk_bytes,
        )

    def __add__(self, other: Resources) -> Resources:
        return Resources(
            self.cpu_millicores + other.cpu_millicores,
            self.memory_bytes + other.memory_bytes,
            self.disk_bytes + other.disk_bytes,
        )

    def describe(self) -> str:
        parts = [f"{self.cpu_millicores / 1000:g} cpu", f"{format_size(self.memory_bytes)} memory"]
        if self.disk_bytes:
            parts.append(f"{format_size(self.disk_bytes)} disk")
        return ", ".join(parts)


@dataclass(frozen=True)
class TaskDemand:
    """One pending task, in the order the scheduler should consider it."""

    task_id: str
    job_id: str
    resources: Resources


@dataclass
class WorkerCapacity:
    worker_id: str
    total: Resources
    available: Resources
    attributes: dict[str, str] = field(default_factory=dict)


@dataclass
class SchedulingResult:
    assignments: list[tuple[str, str]]  # (task_id, worker_id)
    pending_reasons: dict[str, str]


def _shortfall(need: Resources, have: Resources) -> list[str]:
    missing = []
    if need.cpu_millicores > have.cpu_millicores:
        missing.append("cpu")
    if need.memory_bytes > have.memory_bytes:
        missing.append("memory")
    if need.disk_bytes > have.disk_bytes:
        missing.append("disk")
    return missing


def _unplaceable_reason(need: Resources, workers: list[WorkerCapacity]) -> str:
    if not workers:
        return "no healthy workers are registered; start workers or wait for the autoscaler"
    if not any(need.fits_in(w.total) for w in workers):
        largest = max(workers, key=lambda w: (w.total.cpu_millicores, w.total.memory_bytes))
        lacking = ", ".join(_shortfall(need, largest.total))
        return (
            f"no worker is large enough: the task needs {need.describe()} but the largest worker "
            f"({largest.worker_id}) has {largest.total.describe()} (short of {lacking})"
        )
    busy = sum(1 for w in workers if need.fits_in(w.total))
    return f"waiting for capacity: the {busy} worker(s) that could run it ({need.describe()}) are busy"


def find_assignments(tasks: list[TaskDemand], workers: list[WorkerCapacity]) -> SchedulingResult:
    """Place tasks in the given order on the worker with the most free cpu that fits each.

    Spreading by free cpu keeps load even across workers. A task that cannot be placed does not
    block those behind it (no head-of-line blocking). Capacities only shrink within a pass, so
    once a resource shape fails to fit anywhere, later tasks of the same shape skip the search.
    """
    available = {w.worker_id: w.available for w in workers}
    assignments: list[tuple[str, str]] = []
    pending: dict[str, str] = {}
    unfit_shapes: dict[Resources, str] = {}
    for task in tasks:
        need = task.resources
        reason = unfit_shapes.get(need)
        if reason is not None:
            pending[task.task_id] = reason
            continue
        best_id = None
        best_free = -1
        for worker_id, free in available.items():
            if need.fits_in(free) and free.cpu_millicores > best_free:
                best_id, best_free = worker_id, free.cpu_millicores
        if best_id is None:
            reason = _unplaceable_reason(need, workers)
            unfit_shapes[need] = reason
            pending[task.task_id] = reason
            continue
        available[best_id] = available[best_id] - need
        assignments.append((task.task_id, best_id))
    return SchedulingResult(assignments, pending)
