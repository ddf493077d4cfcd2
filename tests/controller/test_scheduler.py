"""find_assignments: a pure function from pending tasks and worker capacities to placements and
human-readable pending reasons."""

from __future__ import annotations

import copy

from hypothesis import given, settings
from hypothesis import strategies as st

from iris.cluster.controller.scheduler import (
    Resources,
    SchedulingResult,
    TaskDemand,
    WorkerCapacity,
    find_assignments,
)

GB = 1000**3
NOT_LARGE_ENOUGH = "no worker is large enough"
NO_WORKERS = "no healthy workers are registered"
WAITING = "waiting for capacity"


def task(task_id: str, cpu: int = 1000, memory: int = GB, disk: int = 0, job_id: str = "/job") -> TaskDemand:
    return TaskDemand(task_id, job_id, Resources(cpu, memory, disk))


def worker(
    worker_id: str, cpu: int = 4000, memory: int = 16 * GB, disk: int = 0, free: Resources | None = None
) -> WorkerCapacity:
    total = Resources(cpu, memory, disk)
    return WorkerCapacity(worker_id, total, free if free is not None else total)


def placed(result: SchedulingResult) -> dict[str, str]:
    return dict(result.assignments)


# ---------------------------------------------------------------- examples


def test_find_assignments_no_tasks_returns_nothing():
    result = find_assignments([], [worker("w1")])
    assert result.assignments == []
    assert result.pending_reasons == {}


def test_find_assignments_no_workers_every_task_says_none_registered():
    result = find_assignments([task("/job/0"), task("/job/1", cpu=8000)], [])
    assert result.assignments == []
    assert set(result.pending_reasons) == {"/job/0", "/job/1"}
    for reason in result.pending_reasons.values():
        assert reason.startswith(NO_WORKERS)
        assert "autoscaler" in reason


def test_find_assignments_task_larger_than_largest_worker_names_it_and_the_shortfall():
    workers = [worker("small", cpu=2000, memory=4 * GB), worker("big", cpu=8000, memory=32 * GB)]
    result = find_assignments([task("/job/0", cpu=4000, memory=64 * GB)], workers)
    assert result.assignments == []
    reason = result.pending_reasons["/job/0"]
    assert reason.startswith(NOT_LARGE_ENOUGH)
    assert "(big)" in reason
    assert "needs 4 cpu, 64.0GB memory" in reason
    assert "has 8 cpu, 32.0GB memory" in reason
    assert reason.endswith("(short of memory)")


def test_find_assignments_task_short_of_cpu_and_disk_lists_both():
    workers = [worker("w1", cpu=2000, memory=8 * GB, disk=10 * GB)]
    result = find_assignments([task("/job/0", cpu=3000, memory=GB, disk=20 * GB)], workers)
    reason = result.pending_reasons["/job/0"]
    assert reason.startswith(NOT_LARGE_ENOUGH)
    assert "20.0GB disk" in reason
    assert reason.endswith("(short of cpu, disk)")


def test_find_assignments_busy_workers_reason_counts_workers_that_could_run_it():
    busy = Resources(500, 16 * GB, 0)
    workers = [worker("w1", free=busy), worker("w2", free=busy), worker("tiny", cpu=500)]
    result = find_assignments([task("/job/0", cpu=2000)], workers)
    assert result.assignments == []
    reason = result.pending_reasons["/job/0"]
    assert reason.startswith(WAITING)
    assert "the 2 worker(s) that could run it (2 cpu, 1.0GB memory) are busy" in reason


def test_find_assignments_big_task_first_does_not_block_small_tasks_behind_it():
    tasks = [task("/big/0", cpu=16000), task("/small/0", cpu=1000), task("/small/1", cpu=1000)]
    result = find_assignments(tasks, [worker("w1", cpu=4000)])
    assert placed(result) == {"/small/0": "w1", "/small/1": "w1"}
    assert result.pending_reasons["/big/0"].startswith(NOT_LARGE_ENOUGH)


def test_find_assignments_big_task_waiting_for_busy_worker_does_not_block_small_tasks():
    tasks = [task("/big/0", cpu=4000), task("/small/0", cpu=1000)]
    result = find_assignments(tasks, [worker("w1", cpu=4000, free=Resources(2000, 16 * GB))])
    assert placed(result) == {"/small/0": "w1"}
    assert result.pending_reasons["/big/0"].startswith(WAITING)


def test_find_assignments_earlier_task_wins_when_only_one_fits():
    tasks = [task("/first/0", cpu=3000), task("/second/0", cpu=3000)]
    result = find_assignments(tasks, [worker("w1", cpu=4000)])
    assert placed(result) == {"/first/0": "w1"}
    assert result.pending_reasons["/second/0"].startswith(WAITING)


def test_find_assignments_spreads_tasks_across_workers_by_free_cpu():
    tasks = [task(f"/job/{i}", cpu=1000) for i in range(4)]
    result = find_assignments(tasks, [worker("w1", cpu=4000), worker("w2", cpu=4000)])
    per_worker = {"w1": 0, "w2": 0}
    for _, worker_id in result.assignments:
        per_worker[worker_id] += 1
    assert per_worker == {"w1": 2, "w2": 2}


def test_find_assignments_prefers_worker_with_most_free_cpu():
    workers = [worker("busy", free=Resources(1000, 16 * GB)), worker("idle")]
    result = find_assignments([task("/job/0", cpu=1000)], workers)
    assert placed(result) == {"/job/0": "idle"}


def test_find_assignments_memory_limits_placement_even_with_free_cpu():
    result = find_assignments(
        [task("/job/0", cpu=100, memory=3 * GB), task("/job/1", cpu=100, memory=3 * GB)],
        [worker("w1", cpu=8000, memory=4 * GB)],
    )
    assert placed(result) == {"/job/0": "w1"}
    assert result.pending_reasons["/job/1"].startswith(WAITING)


def test_find_assignments_does_not_mutate_worker_inputs():
    workers = [worker("w1", cpu=2000)]
    before = copy.deepcopy(workers)
    find_assignments([task("/job/0", cpu=1000), task("/job/1", cpu=1000)], workers)
    assert workers == before


def test_find_assignments_zero_resource_task_fits_a_full_worker():
    result = find_assignments([task("/job/0", cpu=0, memory=0)], [worker("w1", free=Resources(0, 0, 0))])
    assert placed(result) == {"/job/0": "w1"}


# ---------------------------------------------------------------- properties

resources = st.builds(
    Resources,
    cpu_millicores=st.integers(0, 8).map(lambda n: n * 500),
    memory_bytes=st.integers(0, 8).map(lambda n: n * GB),
    disk_bytes=st.sampled_from([0, 0, 10 * GB, 50 * GB]),
)


@st.composite
def worker_capacities(draw) -> WorkerCapacity:
    total = draw(resources)
    # Available is the total minus some committed work, never more than the total.
    cpu_used = draw(st.integers(0, total.cpu_millicores))
    mem_used = draw(st.integers(0, total.memory_bytes))
    disk_used = draw(st.integers(0, total.disk_bytes))
    available = total - Resources(cpu_used, mem_used, disk_used)
    return WorkerCapacity("", total, available)


@st.composite
def scheduling_inputs(draw) -> tuple[list[TaskDemand], list[WorkerCapacity]]:
    workers = draw(st.lists(worker_capacities(), max_size=5))
    for i, w in enumerate(workers):
        w.worker_id = f"w{i}"
    demands = draw(st.lists(resources, max_size=15))
    tasks = [TaskDemand(f"/job{i % 3}/{i}", f"/job{i % 3}", r) for i, r in enumerate(demands)]
    return tasks, workers


@settings(max_examples=400, deadline=None)
@given(scheduling_inputs())
def test_find_assignments_property_no_worker_is_over_committed(inputs):
    tasks, workers = inputs
    result = find_assignments(tasks, workers)
    demand = {t.task_id: t.resources for t in tasks}
    used = {w.worker_id: Resources() for w in workers}
    for task_id, worker_id in result.assignments:
        used[worker_id] = used[worker_id] + demand[task_id]
    for w in workers:
        assert used[w.worker_id].fits_in(w.available), (w, used[w.worker_id])


@settings(max_examples=400, deadline=None)
@given(scheduling_inputs())
def test_find_assignments_property_every_task_assigned_once_or_has_a_reason(inputs):
    tasks, workers = inputs
    result = find_assignments(tasks, workers)
    assigned = [task_id for task_id, _ in result.assignments]
    assert len(assigned) == len(set(assigned)), "a task was assigned twice"
    assert set(assigned).isdisjoint(result.pending_reasons), "a task is both assigned and pending"
    assert set(assigned) | set(result.pending_reasons) == {t.task_id for t in tasks}
    assert all(reason.strip() for reason in result.pending_reasons.values())
    known_workers = {w.worker_id for w in workers}
    assert all(worker_id in known_workers for _, worker_id in result.assignments)


@settings(max_examples=400, deadline=None)
@given(scheduling_inputs())
def test_find_assignments_property_task_fitting_an_empty_worker_is_never_too_large(inputs):
    tasks, workers = inputs
    result = find_assignments(tasks, workers)
    for t in tasks:
        reason = result.pending_reasons.get(t.task_id)
        if reason is None:
            continue
        fits_somewhere = any(t.resources.fits_in(w.total) for w in workers)
        if fits_somewhere:
            assert not reason.startswith(NOT_LARGE_ENOUGH), (t, reason)
            assert reason.startswith(WAITING), (t, reason)
        elif workers:
            assert reason.startswith(NOT_LARGE_ENOUGH), (t, reason)
        else:
            assert reason.startswith(NO_WORKERS), (t, reason)


@settings(max_examples=400, deadline=None)
@given(scheduling_inputs())
def test_find_assignments_property_pending_task_does_not_fit_leftover_capacity(inputs):
    """No head-of-line blocking: whatever stays pending could not have been placed anywhere with
    what was left after the pass."""
    tasks, workers = inputs
    result = find_assignments(tasks, workers)
    demand = {t.task_id: t.resources for t in tasks}
    left = {w.worker_id: w.available for w in workers}
    for task_id, worker_id in result.assignments:
        left[worker_id] = left[worker_id] - demand[task_id]
    for task_id in result.pending_reasons:
        assert not any(demand[task_id].fits_in(free) for free in left.values()), task_id


@settings(max_examples=200, deadline=None)
@given(scheduling_inputs())
def test_find_assignments_property_is_deterministic_and_pure(inputs):
    tasks, workers = inputs
    before = copy.deepcopy(workers)
    first = find_assignments(tasks, workers)
    second = find_assignments(tasks, workers)
    assert workers == before
    assert first == second
