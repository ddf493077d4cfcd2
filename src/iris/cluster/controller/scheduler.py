"""Task placement as a pure function: pending tasks and worker capacities in, assignments and
human-readable pending reasons out. No I/O, no clock, no store: the controller gathers inputs
from its store, calls `find_assignments`, and applies the result in one transaction.

A task fits a worker when the worker's free cpu, memory and disk cover it, its device (GPU or TPU
variant and count) matches, and every one of the task's constraints holds on the worker's
attributes. Tasks of a coscheduled job (a gang) are placed all or nothing, one per worker, on
workers that share one value of the gang's `group_by` attribute.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field

from iris.cluster.controller.scheduling_types import Device, Resources, TaskDemand, WorkerCapacity
from iris.cluster.types import ATTR_TPU_WORKER_ID, AttributeValue, Constraint, ConstraintOp


@dataclass
class SchedulingResult:
    assignments: list[tuple[str, str]]  # (task_id, worker_id)
    pending_reasons: dict[str, str]


# ---------------------------------------------------------------- matching


def constraint_holds(constraint: Constraint, attributes: dict[str, AttributeValue]) -> bool:
    op = constraint.op
    present = constraint.key in attributes
    if op == ConstraintOp.EXISTS:
        return present
    if op == ConstraintOp.NOT_EXISTS:
        return not present
    if not present:
        # NE holds for a worker that lacks the attribute: it certainly is not equal.
        return op == ConstraintOp.NE
    actual = attributes[constraint.key]
    if op == ConstraintOp.EQ:
        return _equal(actual, constraint.value)
    if op == ConstraintOp.NE:
        return not _equal(actual, constraint.value)
    if op == ConstraintOp.IN:
        return any(_equal(actual, v) for v in constraint.values)
    ordered = _compare(actual, constraint.value)
    if ordered is None:
        return False
    return {
        ConstraintOp.GT: ordered > 0,
        ConstraintOp.GE: ordered >= 0,
        ConstraintOp.LT: ordered < 0,
        ConstraintOp.LE: ordered <= 0,
    }[op]


def _equal(actual: AttributeValue, expected: AttributeValue) -> bool:
    if isinstance(actual, int | float) and isinstance(expected, int | float):
        return actual == expected
    return str(actual) == str(expected)


def _compare(actual: AttributeValue, expected: AttributeValue) -> int | None:
    """-1, 0 or 1; None when the two cannot be ordered (a number against text)."""
    if isinstance(actual, int | float) and isinstance(expected, int | float):
        return (actual > expected) - (actual < expected)
    if isinstance(actual, str) and isinstance(expected, str):
        return (actual > expected) - (actual < expected)
    return None


def _device_need(task: TaskDemand, worker: WorkerCapacity) -> int:
    if task.device is None:
        return 0
    if task.device.count == 0:
        assert worker.device is not None
        return worker.device.count
    return task.device.count


@dataclass
class _Class:
    """The workers whose device and attributes suit one (device, constraints) class of tasks, with
    what makes a failed search and its reason cheap on a saturated cluster."""

    members: list[WorkerCapacity]
    ids: frozenset[int]  # positions in the pass's worker list
    # Componentwise maxima of free resources and free chips when the class was first seen. Free
    # capacity only shrinks within a pass, so they stay upper bounds: a need above them fits nowhere.
    most_free: Resources
    most_device_free: int
    # Members by total size: a reason counts the workers large enough for a need per distinct size.
    by_total: dict[Resources, list[WorkerCapacity]]
    # Round-robin placement: members emptiest first, and where the next search starts.
    eligible: list[WorkerCapacity] | None = None
    eligible_rooms: list[list[int]] | None = None  # each eligible worker's free cpu, memory, disk
    cursor: int = 0
    # Resource needs that found no room: capacity only shrinks in a pass, so a need at least as
    # large in every dimension cannot fit either.
    failed: list[Resources] = field(default_factory=list)
    # Why no task of the class can run whatever its size ("" when some worker suits it): the
    # device and constraints alone decide it, so every failed shape of the class shares it.
    misfit: str | None = None
    # Gang groups per (size buckets, group_by): distinct shapes of a class share a few buckets.
    group_tallies: dict[tuple, Counter[str]] = field(default_factory=dict)

    def could_fit(self, task: TaskDemand) -> bool:
        """False when no member can have room for the task now (a cheap bound)."""
        if not task.resources.fits_in(self.most_free):
            return False
        return task.device is None or not task.device.count or task.device.count <= self.most_device_free

    def dominated(self, need: Resources) -> bool:
        return any(r.fits_in(need) for r in self.failed)

    def large_enough(self, need: Resources) -> list[list[WorkerCapacity]]:
        return [members for total, members in self.by_total.items() if need.fits_in(total)]


class _Pass:
    """The mutable bookkeeping of one scheduling pass, plus per-pass indexes: which workers satisfy
    each constraint and each (device, constraints) class, and workers grouped by attribute value.
    Index sets hold workers' positions in the pass's worker list, so intersections stay in C."""

    def __init__(self, workers: list[WorkerCapacity]):
        self.workers = workers
        self.position = {w.worker_id: i for i, w in enumerate(workers)}
        # Free cpu, memory and disk per worker, updated in place: a placement is then a few integer
        # operations rather than a new frozen Resources.
        self.free = {
            w.worker_id: [w.available.cpu_millicores, w.available.memory_bytes, w.available.disk_bytes]
            for w in workers
        }
        self.device_free = {w.worker_id: w.device_free for w in workers}
        self._holds: dict[Constraint, frozenset[int]] = {}
        self._by_value: dict[str, tuple[dict[AttributeValue, list[int]], list[int]]] = {}
        self._with_device: dict[Device, frozenset[int]] = {}
        self._classes: dict[tuple, _Class] = {}
        # Consecutive tasks of one job share their device and constraints objects: an identity
        # check finds their class without hashing the key again.
        self._last_class: tuple[Device | None, tuple[Constraint, ...], _Class] | None = None
        self._group_counts: dict[tuple[int, str], Counter[str]] = {}
        self._groups: dict[str, list[tuple[str, list[WorkerCapacity]]]] = {}
        self.all_ids = frozenset(range(len(workers)))
        # Workers by total size, so a class splits its members by size with a few set intersections.
        by_total: dict[Resources, set[int]] = {}
        for i, w in enumerate(workers):
            by_total.setdefault(w.total, set()).add(i)
        self._by_total = {total: frozenset(ids) for total, ids in by_total.items()}

    def holding(self, constraint: Constraint) -> frozenset[int]:
        """Workers on which the constraint holds. A constraint reads one attribute, so it is
        evaluated once per distinct value of that attribute, not once per worker."""
        ids = self._holds.get(constraint)
        if ids is None:
            key = constraint.key
            by_value, lacking = self._values_of(key)
            held = [
                i
                for value, positions in by_value.items()
                if constraint_holds(constraint, {key: value})
                for i in positions
            ]
            if constraint_holds(constraint, {}):
                held.extend(lacking)
            ids = self._holds[constraint] = frozenset(held)
        return ids

    def _values_of(self, key: str) -> tuple[dict[AttributeValue, list[int]], list[int]]:
        """Workers by their value of attribute `key`, and the workers without it."""
        found = self._by_value.get(key)
        if found is None:
            by_value: dict[AttributeValue, list[int]] = {}
            lacking = []
            for i, w in enumerate(self.workers):
                if key in w.attributes:
                    by_value.setdefault(w.attributes[key], []).append(i)
                else:
                    lacking.append(i)
            found = self._by_value[key] = (by_value, lacking)
        return found

    def with_device(self, device: Device) -> frozenset[int]:
        ids = self._with_device.get(device)
        if ids is None:
            ids = self._with_device[device] = frozenset(
                i
                for i, w in enumerate(self.workers)
                if device.matches(w.device) and device.count <= w.device.count  # type: ignore[union-attr]
            )
        return ids

    def matching(self, task: TaskDemand) -> tuple[list[WorkerCapacity], frozenset[int]]:
        """Workers whose device and attributes suit the task (resources not considered)."""
        found = self.task_class(task)
        return found.members, found.ids

    def task_class(self, task: TaskDemand) -> _Class:
        last = self._last_class
        if last is not None and last[0] is task.device and last[1] is task.constraints:
            return last[2]
        key = (task.device, task.constraints)
        found = self._classes.get(key)
        if found is None:
            ids = self.with_device(task.device) if task.device is not None else None
            for constraint in task.constraints:
                ids = self.holding(constraint) if ids is None else ids & self.holding(constraint)
            ids = self.all_ids if ids is None else ids
            members = self.workers if ids is self.all_ids else [self.workers[i] for i in sorted(ids)]
            by_total = {}
            for total, sized in self._by_total.items():
                chosen = sized & ids
                if chosen:
                    by_total[total] = [self.workers[i] for i in sorted(chosen)]
            free = [self.free[w.worker_id] for w in members]
            most_free = Resources(*(max(column, default=0) for column in zip(*free, strict=True)))
            chips = max((self.device_free[w.worker_id] for w in members), default=0)
            found = self._classes[key] = _Class(members, ids, most_free, chips, by_total)
        self._last_class = (task.device, task.constraints, found)
        return found

    def could_fit(self, task: TaskDemand) -> bool:
        return self.task_class(task).could_fit(task)

    def group_counts(self, members: list[WorkerCapacity], group_by: str) -> Counter[str]:
        """How many of `members` (a list the pass keeps) carry each value of `group_by`."""
        key = (id(members), group_by)
        counts = self._group_counts.get(key)
        if counts is None:
            counts = self._group_counts[key] = Counter(
                str(w.attributes[group_by]) for w in members if group_by in w.attributes
            )
        return counts

    def groups(self, group_by: str) -> list[tuple[str, list[WorkerCapacity]]]:
        groups = self._groups.get(group_by)
        if groups is None:
            by_value: dict[str, list[WorkerCapacity]] = {}
            for w in self.workers:
                if group_by in w.attributes:
                    by_value.setdefault(str(w.attributes[group_by]), []).append(w)
            groups = self._groups[group_by] = [
                (value, sorted(by_value[value], key=_worker_order)) for value in sorted(by_value)
            ]
        return groups

    def fits_now(self, task: TaskDemand, worker: WorkerCapacity) -> bool:
        need = task.resources
        free = self.free[worker.worker_id]
        return (
            need.cpu_millicores <= free[0]
            and need.memory_bytes <= free[1]
            and need.disk_bytes <= free[2]
            and (task.device is None or _device_need(task, worker) <= self.device_free[worker.worker_id])
        )

    def take(self, task: TaskDemand, worker: WorkerCapacity) -> None:
        free = self.free[worker.worker_id]
        free[0] -= task.resources.cpu_millicores
        free[1] -= task.resources.memory_bytes
        free[2] -= task.resources.disk_bytes
        if task.device is not None:
            self.device_free[worker.worker_id] -= _device_need(task, worker)


# ---------------------------------------------------------------- reasons


def _unplaceable_reason(task: TaskDemand, workers: list[WorkerCapacity], state: _Pass) -> str:
    if not workers:
        return "no healthy workers are registered; start workers or wait for the autoscaler"
    task_class = state.task_class(task)
    if task_class.misfit is None:
        task_class.misfit = _class_misfit(task, workers, state)
    if task_class.misfit:
        return task_class.misfit
    need = task.resources
    candidates = task_class.members
    able = sum(len(members) for members in task_class.large_enough(need))
    if not able:
        largest = max(candidates, key=lambda w: (w.total.cpu_millicores, w.total.memory_bytes))
        lacking = ", ".join(_shortfall(need, largest.total))
        return (
            f"no worker is large enough: the task needs {need.describe()} but the largest worker "
            f"({largest.worker_id}) has {largest.total.describe()} (short of {lacking})"
        )
    what = task.device.describe() + ", " if task.device else ""
    return f"waiting for capacity: the {able} worker(s) that could run it ({what}{need.describe()}) are busy"


def _class_misfit(task: TaskDemand, workers: list[WorkerCapacity], state: _Pass) -> str:
    """Why no worker suits the task's device and constraints, or "" when some worker does."""
    if task.device is not None:
        capable, ids = state.matching(TaskDemand("", "", task.resources, task.device))
        if not capable:
            offered = Counter(w.device.describe() for w in workers if w.device is not None)
            others = ", ".join(f"{n} with {d}" for d, n in sorted(offered.items()))
            return f"no worker has {task.device.describe()}" + (f" (workers have: {others})" if others else "")
        workers = capable
    else:
        ids = state.all_ids
    for constraint in task.constraints:
        if not (state.holding(constraint) & ids):
            return f"no worker satisfies constraint {constraint.describe()} ({len(workers)} worker(s) checked)"
    if not state.task_class(task).members:
        return f"no worker satisfies all of {', '.join(c.describe() for c in task.constraints)}"
    return ""


def _shortfall(need: Resources, have: Resources) -> list[str]:
    missing = []
    if need.cpu_millicores > have.cpu_millicores:
        missing.append("cpu")
    if need.memory_bytes > have.memory_bytes:
        missing.append("memory")
    if need.disk_bytes > have.disk_bytes:
        missing.append("disk")
    return missing


def _gang_reason(gang: list[TaskDemand], workers: list[WorkerCapacity], state: _Pass) -> str:
    task = gang[0]
    group_by = task.gang_group_by
    size = len(gang)
    task_class = state.task_class(task)
    buckets = task_class.large_enough(task.resources)
    if not buckets:
        return f"gang of {size}: " + _unplaceable_reason(task, workers, state)
    tally_key = (tuple(id(members) for members in buckets), group_by)
    groups = task_class.group_tallies.get(tally_key)
    if groups is None:
        groups = task_class.group_tallies[tally_key] = Counter()
        for members in buckets:
            groups.update(state.group_counts(members, group_by))
    if not groups:
        able = sum(len(members) for members in buckets)
        return f"gang of {size} needs workers with attribute '{group_by}'; none of the {able} suitable worker(s) have it"
    biggest = max(groups.values())
    if biggest < size:
        return (
            f"gang of {size} needs {size} workers sharing one '{group_by}'; the largest group of suitable "
            f"workers has {biggest} ({len(groups)} group(s))"
        )
    free_groups = Counter(
        str(w.attributes[group_by])
        for members in (buckets if state.could_fit(task) else ())
        for w in members
        if group_by in w.attributes and state.fits_now(task, w)
    )
    best_free = max(free_groups.values(), default=0)
    return (
        f"waiting for capacity: gang of {size} needs {size} free workers sharing one '{group_by}'; "
        f"at most {best_free} are free in any group"
    )


# ---------------------------------------------------------------- placement


def _place_run(
    run: list[TaskDemand], task_class: _Class, state: _Pass, assignments: list[tuple[str, str]]
) -> int:
    """Place the run's tasks in order, each on the next worker with room now, round-robin over the
    workers whose device and attributes suit them; returns how many were placed (the rest found
    no room, and capacity only shrinks, so none after the first failure could be placed either).

    Round-robin spreads load evenly, and one cursor per (device, constraints) class makes a
    placement cost a few checks instead of a scan of every worker, which matters with thousands of
    each. Room now (free >= need) implies the worker is large enough, so no size filter is needed.
    """
    task = run[0]
    if not task_class.could_fit(task):
        return 0
    eligible = task_class.eligible
    if eligible is None:
        # Emptiest first, so the first placements of a pass go where there is most room.
        eligible = task_class.eligible = sorted(task_class.members, key=lambda w: -state.free[w.worker_id][0])
    if task.device is not None:
        return _place_run_with_device(run, task_class, eligible, state, assignments)
    rooms = task_class.eligible_rooms
    if rooms is None:
        rooms = task_class.eligible_rooms = [state.free[w.worker_id] for w in eligible]
    count = len(eligible)
    position = task_class.cursor
    cpu, memory, disk = task.resources.cpu_millicores, task.resources.memory_bytes, task.resources.disk_bytes
    placed = misses = 0
    wanted = len(run)
    # One task's search ends after `count` workers without room: then the rest fail too.
    while placed < wanted and misses < count:
        room = rooms[position]
        worker = eligible[position]
        position += 1
        if position == count:
            position = 0
        if cpu > room[0] or memory > room[1] or disk > room[2]:
            misses += 1
            continue
        room[0] -= cpu
        room[1] -= memory
        room[2] -= disk
        assignments.append((run[placed].task_id, worker.worker_id))
        placed += 1
        misses = 0
    task_class.cursor = position
    return placed


def _place_run_with_device(
    run: list[TaskDemand],
    task_class: _Class,
    eligible: list[WorkerCapacity],
    state: _Pass,
    assignments: list[tuple[str, str]],
) -> int:
    """`_place_run` for tasks that also need chips, whose count can depend on the worker."""
    count = len(eligible)
    for placed, task in enumerate(run):
        start = task_class.cursor
        for offset in range(count):
            worker = eligible[(start + offset) % count]
            if state.fits_now(task, worker):
                task_class.cursor = (start + offset + 1) % count
                state.take(task, worker)
                assignments.append((task.task_id, worker.worker_id))
                break
        else:
            return placed
    return len(run)


def _place_gang(gang: list[TaskDemand], state: _Pass) -> list[WorkerCapacity] | None:
    """Distinct workers sharing one group value, one per task, or None. Within a group, workers are
    taken in id order so task i tends to land on the i-th host of a slice."""
    task, size = gang[0], len(gang)
    if not state.could_fit(task):
        return None
    _, suitable = state.matching(task)
    need = task.resources
    cpu, memory, disk = need.cpu_millicores, need.memory_bytes, need.disk_bytes
    free, position = state.free, state.position
    for _, members in state.groups(task.gang_group_by):
        if len(members) < size:
            continue
        chosen = []
        for w in members:
            room = free[w.worker_id]  # the resource test of `fits_now` first, inline: it rules out most
            if cpu > room[0] or memory > room[1] or disk > room[2] or position[w.worker_id] not in suitable:
                continue
            if need.fits_in(w.total) and (task.device is None or state.fits_now(task, w)):
                chosen.append(w)
                if len(chosen) == size:
                    return chosen
    return None


def _worker_order(worker: WorkerCapacity) -> tuple:
    index = worker.attributes.get(ATTR_TPU_WORKER_ID)
    return (index if isinstance(index, int) else 1 << 30, worker.worker_id)


def _units(tasks: Iterable[TaskDemand]) -> list[list[TaskDemand]]:
    """Tasks grouped into scheduling units, in order of first appearance: a gang is one unit, and
    so is a run of consecutive single tasks that share their shape's objects (the tasks of one job,
    as the store lists them), which the pass then places as a batch."""
    units: list[list[TaskDemand]] = []
    gangs: dict[str, list[TaskDemand]] = {}
    run: list[TaskDemand] = []
    resources = device = constraints = None
    for task in tasks:
        if task.gang_group_by:
            gang = gangs.get(task.job_id)
            if gang is None:
                gang = gangs[task.job_id] = []
                units.append(gang)
                run = []
            gang.append(task)
        elif run and task.resources is resources and task.constraints is constraints and task.device is device:
            run.append(task)
        else:
            run = [task]
            units.append(run)
            resources, device, constraints = task.resources, task.device, task.constraints
    return units


def find_assignments(tasks: list[TaskDemand], workers: list[WorkerCapacity]) -> SchedulingResult:
    """Place tasks in the given order; what cannot be placed gets a reason and does not block the
    tasks behind it (no head-of-line blocking). Capacities only shrink within a pass, so once a
    task shape fails to fit anywhere, later tasks of the same shape skip the search."""
    state = _Pass(workers)
    assignments: list[tuple[str, str]] = []
    pending: dict[str, str] = {}
    unfit_shapes: dict[tuple, str] = {}
    unfit_gangs: dict[tuple, tuple[int, str]] = {}
    for unit in _units(tasks):
        if unit[0].gang_group_by:
            _schedule_gang(unit, state, unfit_gangs, assignments, pending)
        else:
            _schedule_run(unit, state, unfit_shapes, assignments, pending)
    return SchedulingResult(assignments, pending)


def _schedule_gang(
    gang: list[TaskDemand],
    state: _Pass,
    unfit_gangs: dict[tuple, tuple[int, str]],
    assignments: list[tuple[str, str]],
    pending: dict[str, str],
) -> None:
    # Like single tasks: a gang that found no room rules out every later gang of the same shape
    # that is at least as large.
    gang_key = (gang[0].shape(), gang[0].gang_group_by)
    failed = unfit_gangs.get(gang_key)
    members = None if failed and len(gang) >= failed[0] else _place_gang(gang, state)
    if members is None:
        if failed and len(gang) == failed[0]:
            reason = failed[1]
        else:
            reason = _gang_reason(gang, state.workers, state)
            if not failed or len(gang) < failed[0]:
                unfit_gangs[gang_key] = (len(gang), reason)
        pending.update((t.task_id, reason) for t in gang)
        return
    for task, worker in zip(gang, members, strict=False):
        state.take(task, worker)
        assignments.append((task.task_id, worker.worker_id))


def _schedule_run(
    run: list[TaskDemand],
    state: _Pass,
    unfit_shapes: dict[tuple, str],
    assignments: list[tuple[str, str]],
    pending: dict[str, str],
) -> None:
    """Single tasks of one shape, in order: each as if placed alone, but the class lookup, the
    checks against earlier failures and the search's setup are done once for the run."""
    task = run[0]
    task_class = state.task_class(task)
    # A shape that failed put its resources in its class's failures: a class without any spares
    # the lookup of the shape.
    reason = unfit_shapes.get(task.shape()) if task_class.failed else None
    if reason is None:
        placed = 0 if task_class.dominated(task.resources) else _place_run(run, task_class, state, assignments)
        if placed == len(run):
            return
        task_class.failed.append(task.resources)
        reason = _unplaceable_reason(task, state.workers, state)
        unfit_shapes[task.shape()] = reason
        run = run[placed:]
    pending.update((t.task_id, reason) for t in run)
