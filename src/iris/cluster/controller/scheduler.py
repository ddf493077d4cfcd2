"""Task placement as a pure function: pending tasks and worker capacities in, assignments and
human-readable pending reasons out. No I/O, no clock, no store: the controller gathers inputs
from its store, calls `find_assignments`, and applies the result in one transaction.

A task fits a worker when the worker's free cpu, memory and disk cover it, its device (GPU or TPU
variant and count) matches, and every one of the task's constraints holds on the worker's
attributes. Tasks of a coscheduled job (a gang) are placed all or nothing, one per worker, on
workers that share one value of the gang's `group_by` attribute.
"""

from __future__ import annotations

import gc
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from itertools import chain, groupby

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
    what makes a failed search and its reason cheap on a saturated cluster. Beyond the bound of
    free capacity, what costs a walk over the members is built on first use: a pass sees dozens
    of classes."""

    ids: frozenset[int]  # positions in the pass's worker list
    # Componentwise maxima of free resources and free chips when the class was first seen. Free
    # capacity only shrinks within a pass, so they stay upper bounds: a need above them fits nowhere.
    most_free: Resources
    most_device_free: int
    # The members in position order (see `_Pass.members`).
    members: list[WorkerCapacity] | None = None
    # Members' positions per distinct total size: a reason counts the workers large enough for a
    # need per size.
    sizes: dict[Resources, frozenset[int]] | None = None
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
    # Per gang `group_by`: the class's members that carry it, as positions grouped by its value.
    gang_groups: dict[str, list[list[int]]] = field(default_factory=dict)
    # Per (group_by, need, gang size): how many leading groups a gang search can skip, because they
    # had no room for such a gang earlier in the pass and capacity only shrinks.
    gang_resume: dict[tuple, int] = field(default_factory=dict)
    # Per (group_by, sizes large enough): how many such members each group has, where not 0.
    group_tallies: dict[tuple, list[int]] = field(default_factory=dict)

    def could_fit(self, task: TaskDemand) -> bool:
        """False when no member can have room for the task now (a cheap bound)."""
        if not task.resources.fits_in(self.most_free):
            return False
        return task.device is None or not task.device.count or task.device.count <= self.most_device_free

    def dominated(self, need: Resources) -> bool:
        return any(r.fits_in(need) for r in self.failed)


class _Pass:
    """The mutable bookkeeping of one scheduling pass, plus per-pass indexes: which workers satisfy
    each constraint and each (device, constraints) class, and workers grouped by attribute value.
    Index sets hold workers' positions in the pass's worker list, so intersections stay in C."""

    def __init__(self, workers: list[WorkerCapacity]):
        self.workers = workers
        self.position = {w.worker_id: i for i, w in enumerate(workers)}
        # Free cpu, memory and disk per position (and the same lists by worker id), updated in
        # place: a placement is then a few integer operations rather than a new frozen Resources.
        self.rooms = [
            [w.available.cpu_millicores, w.available.memory_bytes, w.available.disk_bytes] for w in workers
        ]
        self.free = {w.worker_id: room for w, room in zip(workers, self.rooms, strict=True)}
        self.chips = [w.device_free for w in workers]  # free chips per position
        self.placed = False  # whether any task was placed in this pass yet
        # Per column of free capacity (cpu, memory, disk, chips): the column as reported, and the
        # workers' positions largest first (see `_most_free`).
        self._largest_first: list[tuple[list[int], list[int]]] | None = None
        self._holds: dict[Constraint, frozenset[int]] = {}
        self._by_value: dict[str, tuple[dict[AttributeValue, list[int]], list[int]]] = {}
        self._with_device: dict[Device, frozenset[int]] = {}
        self._classes: dict[tuple, _Class] = {}
        # Consecutive tasks of one job share their device and constraints objects: an identity
        # check finds their class without hashing the key again.
        self._last_class: tuple[Device | None, tuple[Constraint, ...], _Class] | None = None
        self._group_order: dict[str, tuple[list[int], list[int]]] = {}
        self._described: dict[tuple, str] = {}
        self._free_within_total: bool | None = None
        self.all_ids = frozenset(range(len(workers)))
        self._positions = list(range(len(workers)))
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
            found = self._classes[key] = _Class(ids, *self._most_free(ids))
        self._last_class = (task.device, task.constraints, found)
        return found

    def _most_free(self, ids: frozenset[int]) -> tuple[Resources, int]:
        """The largest free cpu, memory, disk and chips among the workers at `ids`."""
        if not ids:
            return Resources(), 0
        if self.placed or not self._classes:
            rooms = [self.rooms[i] for i in ids]
            cpu, memory, disk = (max([r[column] for r in rooms]) for column in range(3))
            return Resources(cpu, memory, disk), max([self.chips[i] for i in ids])
        # Nothing placed yet, and more than one class (all of a saturated cluster's pass): free
        # capacity is still what the workers reported, so the largest of each among `ids` is the
        # first of `ids` in a per-pass order of the workers by it, a few steps for any class.
        if self._largest_first is None:
            columns = [[room[column] for room in self.rooms] for column in range(3)] + [self.chips]
            self._largest_first = [
                (column, sorted(range(len(column)), key=column.__getitem__, reverse=True))
                for column in columns
            ]
        cpu, memory, disk, chips = (
            column[next(i for i in order if i in ids)] for column, order in self._largest_first
        )
        return Resources(cpu, memory, disk), chips

    def members(self, task_class: _Class) -> list[WorkerCapacity]:
        if task_class.members is None:
            ids = task_class.ids
            task_class.members = (
                self.workers if ids is self.all_ids else list(map(self.workers.__getitem__, sorted(ids)))
            )
        return task_class.members

    def large_enough(self, task_class: _Class, need: Resources) -> list[tuple[Resources, frozenset[int]]]:
        """The class's members whose total size can hold `need`, per distinct size."""
        sizes = task_class.sizes
        if sizes is None:
            ids = task_class.ids
            sizes = task_class.sizes = {
                total: chosen for total, sized in self._by_total.items() if (chosen := sized & ids)
            }
        return [(total, chosen) for total, chosen in sizes.items() if need.fits_in(total)]

    def group_order(self, group_by: str) -> tuple[list[int], list[int]]:
        """Per worker position: its group (groups numbered in order of their `group_by` value as
        text, -1 without one) and its rank in the order groups are searched in (group, then host
        index within the slice, then id)."""
        found = self._group_order.get(group_by)
        if found is None:
            by_value: dict[str, list[int]] = {}
            for i, w in enumerate(self.workers):
                if group_by in w.attributes:
                    by_value.setdefault(str(w.attributes[group_by]), []).append(i)
            group_of = [-1] * len(self.workers)
            rank = [-1] * len(self.workers)
            ranked = 0
            for number, value in enumerate(sorted(by_value)):
                for i in sorted(by_value[value], key=lambda i: _worker_order(self.workers[i])):
                    group_of[i] = number
                    rank[i] = ranked
                    ranked += 1
            if rank == self._positions:
                rank = self._positions
            found = self._group_order[group_by] = (group_of, rank)
        return found

    def class_groups(self, task_class: _Class, group_by: str) -> list[list[int]]:
        """The groups of workers sharing a value of `group_by`, in search order, cut down to the
        class's members: each a list of worker positions."""
        found = task_class.gang_groups.get(group_by)
        if found is None:
            group_of, rank = self.group_order(group_by)
            # Workers listed slice by slice, host by host (as a cluster registers them) are already
            # in search order, which spares the sort its key.
            ordered = sorted(task_class.ids, key=None if rank is self._positions else rank.__getitem__)
            found = task_class.gang_groups[group_by] = [
                list(positions)
                for number, positions in groupby(ordered, key=group_of.__getitem__)
                if number >= 0
            ]
        return found

    def free_within_total(self) -> bool:
        """Whether every worker's free capacity is within its total size (as workers report it)."""
        if self._free_within_total is None:
            self._free_within_total = all(w.available.fits_in(w.total) for w in self.workers)
        return self._free_within_total

    def describe(self, task: TaskDemand) -> str:
        """The task's device and resources in words; many failed shapes of a pass share them."""
        key = (task.device, task.resources)
        text = self._described.get(key)
        if text is None:
            what = task.device.describe() + ", " if task.device else ""
            text = self._described[key] = what + task.resources.describe()
        return text

    def fits_now(self, task: TaskDemand, worker: WorkerCapacity) -> bool:
        need = task.resources
        free = self.free[worker.worker_id]
        return (
            need.cpu_millicores <= free[0]
            and need.memory_bytes <= free[1]
            and need.disk_bytes <= free[2]
            and (
                task.device is None
                or _device_need(task, worker) <= self.chips[self.position[worker.worker_id]]
            )
        )

    def take(self, task: TaskDemand, worker: WorkerCapacity) -> None:
        self.placed = True
        free = self.free[worker.worker_id]
        free[0] -= task.resources.cpu_millicores
        free[1] -= task.resources.memory_bytes
        free[2] -= task.resources.disk_bytes
        if task.device is not None:
            self.chips[self.position[worker.worker_id]] -= _device_need(task, worker)


# ---------------------------------------------------------------- reasons


def _unplaceable_reason(task: TaskDemand, state: _Pass) -> str:
    if not state.workers:
        return "no healthy workers are registered; start workers or wait for the autoscaler"
    task_class = state.task_class(task)
    if task_class.misfit is None:
        task_class.misfit = _class_misfit(task, state)
    if task_class.misfit:
        return task_class.misfit
    need = task.resources
    able = sum(len(chosen) for _, chosen in state.large_enough(task_class, need))
    if not able:
        largest = max(state.members(task_class), key=lambda w: (w.total.cpu_millicores, w.total.memory_bytes))
        lacking = ", ".join(_shortfall(need, largest.total))
        return (
            f"no worker is large enough: the task needs {need.describe()} but the largest worker "
            f"({largest.worker_id}) has {largest.total.describe()} (short of {lacking})"
        )
    return f"waiting for capacity: the {able} worker(s) that could run it ({state.describe(task)}) are busy"


def _class_misfit(task: TaskDemand, state: _Pass) -> str:
    """Why no worker suits the task's device and constraints, or "" when some worker does."""
    if task.device is not None:
        ids = state.task_class(TaskDemand("", "", task.resources, task.device)).ids
        if not ids:
            offered = Counter(w.device.describe() for w in state.workers if w.device is not None)
            others = ", ".join(f"{n} with {d}" for d, n in sorted(offered.items()))
            return f"no worker has {task.device.describe()}" + (
                f" (workers have: {others})" if others else ""
            )
    else:
        ids = state.all_ids
    for constraint in task.constraints:
        if state.holding(constraint).isdisjoint(ids):
            return f"no worker satisfies constraint {constraint.describe()} ({len(ids)} worker(s) checked)"
    if not state.task_class(task).ids:
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


def _gang_reason(gang: list[TaskDemand], state: _Pass) -> str:
    task = gang[0]
    group_by = task.gang_group_by
    size = len(gang)
    task_class = state.task_class(task)
    sized = state.large_enough(task_class, task.resources)
    if not sized:
        return f"gang of {size}: " + _unplaceable_reason(task, state)
    groups = _group_tally(task_class, sized, group_by, state)
    if not groups:
        able = sum(len(chosen) for _, chosen in sized)
        return f"gang of {size} needs workers with attribute '{group_by}'; none of the {able} suitable worker(s) have it"
    biggest = max(groups)
    if biggest < size:
        return (
            f"gang of {size} needs {size} workers sharing one '{group_by}'; the largest group of suitable "
            f"workers has {biggest} ({len(groups)} group(s))"
        )
    best_free = 0
    if task_class.could_fit(task):
        for positions in state.class_groups(task_class, group_by):
            # Most groups cannot beat the best so far, which the search tells after a few misses.
            if (
                len(positions) > best_free
                and len(_with_room(task, positions, state, best_free + 1)) > best_free
            ):
                best_free = len(_with_room(task, positions, state))
    return (
        f"waiting for capacity: gang of {size} needs {size} free workers sharing one '{group_by}'; "
        f"at most {best_free} are free in any group"
    )


def _group_tally(
    task_class: _Class, sized: list[tuple[Resources, frozenset[int]]], group_by: str, state: _Pass
) -> list[int]:
    """How many workers large enough for a need each group of the class has, where not 0. Needs
    of a class share a few sets of large enough sizes, so the tally is kept per set."""
    key = (group_by, tuple(total for total, _ in sized))
    tally = task_class.group_tallies.get(key)
    if tally is None:
        group_of = state.group_order(group_by)[0]
        counts = Counter(map(group_of.__getitem__, chain.from_iterable(chosen for _, chosen in sized)))
        counts.pop(-1, None)  # workers without the attribute
        tally = task_class.group_tallies[key] = list(counts.values())
    return tally


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
        # Emptiest first (a stable sort of the members by free cpu), so the first placements of a
        # pass go where there is most room.
        free_cpu = {i: state.rooms[i][0] for i in task_class.ids}
        positions = sorted(sorted(free_cpu), key=free_cpu.__getitem__, reverse=True)
        eligible = task_class.eligible = [state.workers[i] for i in positions]
        task_class.eligible_rooms = [state.rooms[i] for i in positions]
    if task.device is not None:
        return _place_run_with_device(run, task_class, eligible, state, assignments)
    rooms = task_class.eligible_rooms
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
    if placed:
        state.placed = True
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
    task_class = state.task_class(task)
    if not task_class.could_fit(task):
        return None
    group_by = task.gang_group_by
    groups = state.class_groups(task_class, group_by)
    resume_key = (group_by, task.resources, size)
    first = task_class.gang_resume.get(resume_key, 0)
    for number in range(first, len(groups)):
        positions = groups[number]
        if len(positions) < size:
            continue
        chosen = _gang_in_group(task, size, positions, state)
        if chosen is not None:
            task_class.gang_resume[resume_key] = number
            return [state.workers[i] for i in chosen]
    task_class.gang_resume[resume_key] = len(groups)
    return None


def _gang_in_group(task: TaskDemand, size: int, positions: list[int], state: _Pass) -> list[int] | None:
    """The first `size` workers of one group with room for the task now, or None."""
    chosen = _with_room(task, positions, state, size)
    return chosen if len(chosen) == size else None


def _with_room(task: TaskDemand, positions: list[int], state: _Pass, wanted: int = 0) -> list[int]:
    """The workers among `positions` that can take the task now (and could at all), in order.
    With `wanted`, only the first that many, and none once fewer than that are possible."""
    need, rooms, workers = task.resources, state.rooms, state.workers
    cpu, memory, disk = need.cpu_millicores, need.memory_bytes, need.disk_bytes
    # Room for the need implies a total that holds it, unless a worker reported more free than
    # its size.
    check_total = not state.free_within_total()
    chosen = []
    # Without `wanted`, no miss ends the search.
    spare = len(positions) - wanted if wanted else len(positions)
    for i in positions:
        room = rooms[i]
        if (
            cpu <= room[0]
            and memory <= room[1]
            and disk <= room[2]
            and (not check_total or need.fits_in(workers[i].total))
            and (task.device is None or state.fits_now(task, workers[i]))
        ):
            chosen.append(i)
            if len(chosen) == wanted:
                break
        else:
            spare -= 1
            if spare < 0:
                break
    return chosen


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
        elif (
            run and task.resources is resources and task.constraints is constraints and task.device is device
        ):
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
    # A pass allocates tens of thousands of short-lived objects and frees none that form cycles:
    # the cyclic collector's runs in between cost 10-15% of a pass and find nothing.
    collecting = gc.isenabled()
    gc.disable()
    try:
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
    finally:
        if collecting:
            gc.enable()


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
            reason = _gang_reason(gang, state)
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
        placed = (
            0 if task_class.dominated(task.resources) else _place_run(run, task_class, state, assignments)
        )
        if placed == len(run):
            return
        task_class.failed.append(task.resources)
        reason = _unplaceable_reason(task, state)
        unfit_shapes[task.shape()] = reason
        run = run[placed:]
    for t in run:
        pending[t.task_id] = reason
