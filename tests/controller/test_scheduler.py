"""find_assignments: a pure function from pending tasks and worker capacities to placements and
human-readable pending reasons."""

from __future__ import annotations

import copy
import operator
from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from iris.cluster.controller.scheduler import SchedulingResult, constraint_holds, find_assignments
from iris.cluster.controller.scheduling_types import Device, Resources, TaskDemand, WorkerCapacity
from iris.cluster.types import Constraint, ConstraintOp

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


@settings(max_examples=100, deadline=None)
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


@settings(max_examples=100, deadline=None)
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


@settings(max_examples=100, deadline=None)
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


@settings(max_examples=100, deadline=None)
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


@settings(max_examples=100, deadline=None)
@given(scheduling_inputs())
def test_find_assignments_property_is_deterministic_and_pure(inputs):
    tasks, workers = inputs
    before = copy.deepcopy(workers)
    first = find_assignments(tasks, workers)
    second = find_assignments(tasks, workers)
    assert workers == before
    assert first == second


# ---------------------------------------------------------------- devices, constraints and gangs

TPU_16 = Device("tpu", "v5litepod-16", 0)  # whole host of a 4-host v5litepod-16 slice


def demand(
    task_id: str,
    *,
    cpu: int = 1000,
    memory: int = GB,
    device: Device | None = None,
    constraints: tuple[Constraint, ...] = (),
    gang: str = "",
) -> TaskDemand:
    job_id = task_id.rpartition("/")[0]
    return TaskDemand(task_id, job_id, Resources(cpu, memory, 0), device, constraints, gang)


def host(
    worker_id: str,
    *,
    attributes: dict | None = None,
    device: Device | None = None,
    device_free: int | None = None,
    cpu: int = 4000,
    memory: int = 16 * GB,
    free: Resources | None = None,
) -> WorkerCapacity:
    total = Resources(cpu, memory, 0)
    return WorkerCapacity(
        worker_id,
        total,
        free if free is not None else total,
        dict(attributes or {}),
        device,
        (device.count if device else 0) if device_free is None else device_free,
    )


def tpu_slice(
    name: str, hosts: int, *, variant: str = "v5litepod-16", chips: int = 4, **kwargs
) -> list[WorkerCapacity]:
    """The hosts of one TPU slice, each with the slice's name and its position in it."""
    extra = kwargs.pop("attributes", {})
    return [
        host(
            f"{name}-w{i}",
            attributes={"tpu-name": name, "tpu-worker-id": i, **extra},
            device=Device("tpu", variant, chips),
            **kwargs,
        )
        for i in range(hosts)
    ]


def gang_of(job: str, size: int, **kwargs) -> list[TaskDemand]:
    return [demand(f"/{job}/{i}", gang="tpu-name", **kwargs) for i in range(size)]


C = Constraint.parse


def test_find_assignments_tpu_variant_nobody_has_reason_lists_what_workers_have():
    workers = tpu_slice("a", 3, variant="v5litepod-8", chips=8) + [host("cpu-only")]
    result = find_assignments([demand("/train/0", device=TPU_16)], workers)
    assert result.assignments == []
    reason = result.pending_reasons["/train/0"]
    assert reason.startswith("no worker has tpu v5litepod-16 (workers have: ")
    assert "3 with tpu v5litepod-8 (8 chips)" in reason


def test_find_assignments_gpu_without_any_gpu_worker_reason_omits_worker_list():
    result = find_assignments([demand("/train/0", device=Device("gpu", "H100", 8))], [host("w1")])
    assert result.pending_reasons["/train/0"] == "no worker has 8x gpu H100"


def test_find_assignments_gpu_variant_matches_case_insensitively_and_empty_variant_matches_any():
    workers = [host("a100", device=Device("gpu", "A100", 8)), host("h100", device=Device("gpu", "H100", 8))]
    tasks = [demand("/h/0", device=Device("gpu", "h100", 8)), demand("/any/0", device=Device("gpu", "", 8))]
    assert placed(find_assignments(tasks, workers)) == {"/h/0": "h100", "/any/0": "a100"}


def test_find_assignments_tpu_variant_must_match_exactly():
    workers = tpu_slice("a", 1, variant="v5litepod-16")
    result = find_assignments([demand("/t/0", device=Device("tpu", "V5LITEPOD-16", 0))], workers)
    assert result.assignments == []
    assert result.pending_reasons["/t/0"].startswith("no worker has tpu V5LITEPOD-16")


def test_find_assignments_gpu_count_shares_a_worker_until_its_devices_run_out():
    workers = [host("w1", cpu=64000, device=Device("gpu", "H100", 8))]
    tasks = [demand(f"/j/{i}", device=Device("gpu", "H100", 3)) for i in range(3)]
    result = find_assignments(tasks, workers)
    assert placed(result) == {"/j/0": "w1", "/j/1": "w1"}
    assert result.pending_reasons["/j/2"].startswith(WAITING)
    assert "3x gpu H100" in result.pending_reasons["/j/2"]


def test_find_assignments_gpu_already_in_use_limits_placement():
    workers = [host("w1", device=Device("gpu", "H100", 8), device_free=2)]
    result = find_assignments([demand("/j/0", device=Device("gpu", "H100", 4))], workers)
    assert result.assignments == []
    assert result.pending_reasons["/j/0"].startswith(WAITING)


def test_find_assignments_whole_host_tpu_takes_every_chip_and_needs_all_of_them_free():
    idle, partly_used = tpu_slice("a", 2)
    partly_used.device_free = 3
    tasks = [demand("/a/0", cpu=100, device=TPU_16), demand("/b/0", cpu=100, device=TPU_16)]
    result = find_assignments(tasks, [idle, partly_used])
    assert placed(result) == {"/a/0": idle.worker_id}
    assert result.pending_reasons["/b/0"].startswith(WAITING)

    chip = demand("/chip/0", cpu=100, device=Device("tpu", "v5litepod-16", 1))
    assert placed(find_assignments([chip], [idle, partly_used])) == {"/chip/0": idle.worker_id}


def test_find_assignments_gpu_count_larger_than_any_worker_reason_is_not_waiting_for_capacity():
    """A task asking for 8 GPUs on 4-GPU hosts can never run; saying "waiting for capacity: the 0
    worker(s) that could run it are busy" sends the user waiting for nothing."""
    workers = [host(f"w{i}", device=Device("gpu", "H100", 4)) for i in range(2)]
    result = find_assignments([demand("/big/0", device=Device("gpu", "H100", 8))], workers)
    reason = result.pending_reasons["/big/0"]
    assert not reason.startswith(WAITING), reason
    assert "8x gpu H100" in reason and "4x gpu H100" in reason, reason


def test_find_assignments_constraint_nobody_satisfies_reason_names_it_and_counts_workers():
    workers = [host("w1", attributes={"zone": "us-central1-a"}), host("w2", attributes={"zone": "us-west1"})]
    result = find_assignments([demand("/j/0", constraints=(C("zone=us-east1-b"),))], workers)
    assert result.assignments == []
    reason = result.pending_reasons["/j/0"]
    assert reason == "no worker satisfies constraint zone=us-east1-b (2 worker(s) checked)"


def test_find_assignments_constraint_reason_counts_only_workers_with_the_device():
    workers = tpu_slice("a", 3, attributes={"zone": "a"}) + [host("cpu", attributes={"zone": "b"})]
    result = find_assignments([demand("/j/0", device=TPU_16, constraints=(C("zone=b"),))], workers)
    assert result.pending_reasons["/j/0"] == "no worker satisfies constraint zone=b (3 worker(s) checked)"


def test_find_assignments_constraints_each_met_somewhere_but_never_together_reason_lists_all():
    workers = [host("w1", attributes={"zone": "a", "gen": 2}), host("w2", attributes={"zone": "b", "gen": 4})]
    result = find_assignments([demand("/j/0", constraints=(C("zone=a"), C("gen>=3")))], workers)
    assert result.pending_reasons["/j/0"] == "no worker satisfies all of zone=a, gen>=3"


def test_find_assignments_constraints_are_anded_and_typed():
    workers = [
        host("old", attributes={"zone": "a", "gen": 2}),
        host("other-zone", attributes={"zone": "b", "gen": 5}),
        host("fits", attributes={"zone": "a", "gen": 10}),
    ]
    # 10 >= 3 numerically even though "10" < "3" as text.
    result = find_assignments([demand("/j/0", constraints=(C("zone in a,c"), C("gen>=3")))], workers)
    assert placed(result) == {"/j/0": "fits"}


@pytest.mark.parametrize(
    ("constraint", "expected"),
    [
        ("preemptible!=true", {"plain", "on-demand"}),
        ("preemptible=true", {"spot"}),
        ("preemptible", {"spot", "on-demand"}),
        ("!preemptible", {"plain"}),
        ("preemptible in true,maybe", {"spot"}),
    ],
)
def test_find_assignments_existence_and_inequality_on_missing_attribute(constraint, expected):
    """NE holds on a worker without the attribute; EQ and IN need it."""
    workers = [
        host("spot", attributes={"preemptible": "true"}),
        host("on-demand", attributes={"preemptible": "false"}),
        host("plain"),
    ]
    tasks = [demand(f"/j/{i}", cpu=4000, constraints=(C(constraint),)) for i in range(3)]
    result = find_assignments(tasks, workers)
    assert set(placed(result).values()) == expected


def test_find_assignments_gang_lands_on_one_slice_in_worker_id_order():
    # Registered out of order, and worker 10 sorts before 2 as text: placement follows the number.
    slice_a = [
        host(f"h-{c}", attributes={"tpu-name": "a", "tpu-worker-id": i})
        for c, i in zip("dcba", (10, 2, 1, 0), strict=True)
    ]
    result = find_assignments(gang_of("g", 4), slice_a)
    assert placed(result) == {"/g/0": "h-a", "/g/1": "h-b", "/g/2": "h-c", "/g/3": "h-d"}


def test_find_assignments_gang_skips_slice_with_busy_host_and_takes_a_whole_free_one():
    slice_a = tpu_slice("a", 4)
    slice_a[2].available = Resources(0, 0, 0)
    slice_b = tpu_slice("b", 4)
    result = find_assignments(gang_of("g", 4, device=TPU_16), slice_a + slice_b)
    assert placed(result) == {f"/g/{i}": f"b-w{i}" for i in range(4)}


def test_find_assignments_gang_never_spans_two_slices_even_with_enough_free_hosts_in_total():
    workers = tpu_slice("a", 2) + tpu_slice("b", 3)
    result = find_assignments(gang_of("g", 4), workers)
    assert result.assignments == []
    reasons = {result.pending_reasons[f"/g/{i}"] for i in range(4)}
    assert reasons == {
        "gang of 4 needs 4 workers sharing one 'tpu-name'; "
        "the largest group of suitable workers has 3 (2 group(s))"
    }


def test_find_assignments_gang_waiting_for_free_hosts_reason_says_how_many_are_free():
    workers = tpu_slice("a", 4) + tpu_slice("b", 4)
    for w in workers[1:3] + workers[4:7]:
        w.available = Resources(0, 0, 0)
    result = find_assignments(gang_of("g", 4), workers)
    assert result.assignments == []
    assert set(result.pending_reasons.values()) == {
        "waiting for capacity: gang of 4 needs 4 free workers sharing one 'tpu-name'; "
        "at most 2 are free in any group"
    }


def test_find_assignments_gang_without_group_attribute_reason_names_attribute():
    result = find_assignments(gang_of("g", 2), [host("w1"), host("w2"), host("w3")])
    assert set(result.pending_reasons.values()) == {
        "gang of 2 needs workers with attribute 'tpu-name'; none of the 3 suitable worker(s) have it"
    }


def test_find_assignments_gang_whose_device_nobody_has_reason_prefixed_with_gang_size():
    workers = tpu_slice("a", 4, variant="v5litepod-8", chips=8)
    result = find_assignments(gang_of("g", 4, device=TPU_16), workers)
    reasons = set(result.pending_reasons.values())
    assert len(reasons) == 1
    assert reasons.pop().startswith("gang of 4: no worker has tpu v5litepod-16")


def test_find_assignments_gang_members_only_on_workers_meeting_its_constraints():
    slice_a = tpu_slice("a", 4, attributes={"zone": "a"})
    slice_b = tpu_slice("b", 4, attributes={"zone": "b"})
    result = find_assignments(gang_of("g", 4, constraints=(C("zone=b"),)), slice_a + slice_b)
    assert sorted(placed(result).values()) == [f"b-w{i}" for i in range(4)]


def test_find_assignments_gang_that_cannot_fit_does_not_block_small_tasks_behind_it():
    workers = tpu_slice("a", 4)
    workers[3].available = Resources(0, 0, 0)
    tasks = gang_of("big", 4, device=TPU_16) + [demand(f"/small/{i}", cpu=1000) for i in range(6)]
    result = find_assignments(tasks, workers)
    assert {t for t, _ in result.assignments} == {f"/small/{i}" for i in range(6)}
    for i in range(4):
        assert result.pending_reasons[f"/big/{i}"].startswith("waiting for capacity: gang of 4")
    # The gang reserved nothing: the small tasks spread over the three free hosts.
    assert {w for _, w in result.assignments} == {"a-w0", "a-w1", "a-w2"}


def test_find_assignments_too_large_gang_first_does_not_block_a_gang_that_fits():
    workers = tpu_slice("a", 4)
    tasks = gang_of("huge", 8) + gang_of("fits", 4)
    result = find_assignments(tasks, workers)
    assert sorted(placed(result)) == [f"/fits/{i}" for i in range(4)]
    assert len(result.pending_reasons) == 8


def test_find_assignments_earlier_gang_wins_the_only_slice():
    tasks = gang_of("first", 4, device=TPU_16) + gang_of("second", 4, device=TPU_16)
    result = find_assignments(tasks, tpu_slice("a", 4))
    assert sorted(placed(result)) == [f"/first/{i}" for i in range(4)]
    assert set(result.pending_reasons) == {f"/second/{i}" for i in range(4)}


# ---------------------------------------------------------------- properties with devices, constraints, gangs

# Small value pools so that constraints often match and gangs often find a group; ints and text
# mix ("3" and 3, "1" and 1) to probe how values compare.
_ATTRIBUTE_POOLS: dict[str, list] = {
    "zone": ["a", "b"],
    "gen": [1, 2, 3, 4, "3"],
    "tier": [0, 1, "1", "gold"],
    "tpu-name": ["s0", "s0", "s1", "1", 1],
}
_KEYS = sorted(_ATTRIBUTE_POOLS)
_ALL_VALUES = sorted({v for pool in _ATTRIBUTE_POOLS.values() for v in pool}, key=repr)
_GPU_VARIANTS = ["H100", "A100"]
_TPU_VARIANTS = ["v5litepod-8", "v5litepod-16"]
_CMP_OPS = [
    ConstraintOp.EQ,
    ConstraintOp.NE,
    ConstraintOp.GT,
    ConstraintOp.GE,
    ConstraintOp.LT,
    ConstraintOp.LE,
]

_worker_devices = st.one_of(
    st.none(),
    st.builds(Device, st.just("gpu"), st.sampled_from(_GPU_VARIANTS), st.integers(1, 8)),
    st.builds(Device, st.just("tpu"), st.sampled_from(_TPU_VARIANTS), st.sampled_from([4, 8])),
)
_task_devices = st.one_of(
    st.none(),
    st.none(),
    st.none(),
    st.builds(Device, st.just("gpu"), st.sampled_from(["", "H100", "h100", "A100"]), st.integers(1, 8)),
    st.builds(Device, st.just("tpu"), st.sampled_from(_TPU_VARIANTS), st.integers(0, 8)),
)


@st.composite
def _task_constraint(draw) -> Constraint:
    key = draw(st.sampled_from(_KEYS + ["missing"]))
    pool = st.sampled_from(_ATTRIBUTE_POOLS.get(key, _ALL_VALUES))
    kind = draw(st.sampled_from(["cmp", "cmp", "exists", "in"]))
    if kind == "exists":
        return Constraint(key, draw(st.sampled_from([ConstraintOp.EXISTS, ConstraintOp.NOT_EXISTS])))
    if kind == "in":
        return Constraint(key, ConstraintOp.IN, values=tuple(draw(st.lists(pool, min_size=1, max_size=3))))
    return Constraint(key, draw(st.sampled_from(_CMP_OPS)), draw(pool))


_worker_totals = st.builds(
    Resources,
    cpu_millicores=st.integers(2, 8).map(lambda n: n * 1000),
    memory_bytes=st.integers(2, 16).map(lambda n: n * GB),
    disk_bytes=st.sampled_from([0, 50 * GB]),
)
_task_resources = st.builds(
    Resources,
    cpu_millicores=st.integers(0, 6).map(lambda n: n * 500),
    memory_bytes=st.integers(0, 4).map(lambda n: n * GB),
    disk_bytes=st.sampled_from([0, 0, 0, 10 * GB]),
)


@st.composite
def rich_workers(draw) -> list[WorkerCapacity]:
    workers = []
    for i in range(draw(st.integers(0, 12))):
        total = draw(_worker_totals)
        available = total
        if draw(st.booleans()):  # some work already committed
            available = total - Resources(
                draw(st.integers(0, total.cpu_millicores)),
                draw(st.integers(0, total.memory_bytes)),
                draw(st.integers(0, total.disk_bytes)),
            )
        attributes = {
            key: draw(st.sampled_from(pool))
            for key, pool in _ATTRIBUTE_POOLS.items()
            if draw(st.integers(0, 3))  # each attribute present three times in four
        }
        if draw(st.booleans()):
            attributes["tpu-worker-id"] = draw(st.integers(0, 7))
        device = draw(_worker_devices)
        device_free = draw(st.integers(0, device.count)) if device else 0
        workers.append(WorkerCapacity(f"w{i}", total, available, attributes, device, device_free))
    return workers


@st.composite
def rich_tasks(draw) -> list[TaskDemand]:
    """Jobs in a random order; the tasks of one job share a shape and are contiguous, as the store
    produces them. Some jobs are gangs grouped by an attribute."""
    tasks = []
    for j in range(draw(st.integers(0, 8))):
        gang = draw(st.sampled_from(["", "", "tpu-name", "zone"]))
        replicas = draw(st.integers(2, 4) if gang else st.integers(1, 3))
        resources_ = draw(_task_resources)
        # Gangs get fewer devices and constraints, so that enough of them find a group to land on.
        device = draw(_task_devices) if not gang or draw(st.integers(0, 3)) == 0 else None
        constraints = tuple(draw(st.lists(_task_constraint(), max_size=1 if gang else 2)))
        tasks += [
            TaskDemand(f"/job{j}/{i}", f"/job{j}", resources_, device, constraints, gang)
            for i in range(replicas)
        ]
    return tasks


rich_inputs = st.tuples(rich_tasks(), rich_workers())


def _oracle_holds(constraint: Constraint, attributes: dict) -> bool:
    """Constraint semantics written out independently of the scheduler: numbers compare as numbers,
    text as text, a number never orders against text, and a missing attribute only satisfies
    NE and NOT_EXISTS."""
    if constraint.op == ConstraintOp.EXISTS:
        return constraint.key in attributes
    if constraint.op == ConstraintOp.NOT_EXISTS:
        return constraint.key not in attributes
    if constraint.key not in attributes:
        return constraint.op == ConstraintOp.NE
    actual = attributes[constraint.key]

    def numeric(v) -> bool:
        return isinstance(v, int | float) and not isinstance(v, bool)

    def same(expected) -> bool:
        return actual == expected if numeric(actual) and numeric(expected) else str(actual) == str(expected)

    if constraint.op == ConstraintOp.EQ:
        return same(constraint.value)
    if constraint.op == ConstraintOp.NE:
        return not same(constraint.value)
    if constraint.op == ConstraintOp.IN:
        return any(same(v) for v in constraint.values)
    expected = constraint.value
    if numeric(actual) != numeric(expected):
        return False
    compare = {
        ConstraintOp.GT: operator.gt,
        ConstraintOp.GE: operator.ge,
        ConstraintOp.LT: operator.lt,
        ConstraintOp.LE: operator.le,
    }[constraint.op]
    return compare(actual, expected)


def _oracle_device_ok(task: TaskDemand, w: WorkerCapacity) -> bool:
    if task.device is None:
        return True
    offered = w.device
    if offered is None or offered.kind != task.device.kind or task.device.count > offered.count:
        return False
    if task.device.kind == "tpu":
        return offered.variant == task.device.variant
    return task.device.variant == "" or offered.variant.lower() == task.device.variant.lower()


def _oracle_could_ever_run(task: TaskDemand, w: WorkerCapacity) -> bool:
    return (
        task.resources.fits_in(w.total)
        and _oracle_device_ok(task, w)
        and all(_oracle_holds(c, w.attributes) for c in task.constraints)
    )


def _device_need(task: TaskDemand, w: WorkerCapacity) -> int:
    if task.device is None:
        return 0
    return task.device.count or w.device.count  # count 0: every chip of the host


def _leftover(tasks, workers, result) -> tuple[dict[str, Resources], dict[str, int]]:
    by_id = {t.task_id: t for t in tasks}
    by_worker = {w.worker_id: w for w in workers}
    free = {w.worker_id: w.available for w in workers}
    devices = {w.worker_id: w.device_free for w in workers}
    for task_id, worker_id in result.assignments:
        free[worker_id] = free[worker_id] - by_id[task_id].resources
        devices[worker_id] -= _device_need(by_id[task_id], by_worker[worker_id])
    return free, devices


def _gangs(tasks: list[TaskDemand]) -> dict[str, list[TaskDemand]]:
    gangs: dict[str, list[TaskDemand]] = {}
    for t in tasks:
        if t.gang_group_by:
            gangs.setdefault(t.job_id, []).append(t)
    return gangs


@settings(max_examples=60, deadline=None)
@given(rich_inputs)
def test_find_assignments_property_rich_inputs_never_over_commit_resources_or_devices(inputs):
    tasks, workers = inputs
    result = find_assignments(tasks, workers)
    free, devices = _leftover(tasks, workers, result)
    for w in workers:
        assert free[w.worker_id].cpu_millicores >= 0, w
        assert free[w.worker_id].memory_bytes >= 0, w
        assert free[w.worker_id].disk_bytes >= 0, w
        assert devices[w.worker_id] >= 0, (w, result.assignments)


@settings(max_examples=60, deadline=None)
@given(rich_inputs)
def test_find_assignments_property_assigned_task_device_and_constraints_hold_on_its_worker(inputs):
    tasks, workers = inputs
    result = find_assignments(tasks, workers)
    by_id = {t.task_id: t for t in tasks}
    by_worker = {w.worker_id: w for w in workers}
    for task_id, worker_id in result.assignments:
        task_, worker_ = by_id[task_id], by_worker[worker_id]
        assert _oracle_device_ok(task_, worker_), (task_, worker_)
        for constraint in task_.constraints:
            assert _oracle_holds(constraint, worker_.attributes), (constraint.describe(), worker_)
        assert constraint_holds_agrees(task_, worker_)


def constraint_holds_agrees(task_: TaskDemand, worker_: WorkerCapacity) -> bool:
    return all(
        constraint_holds(c, worker_.attributes) == _oracle_holds(c, worker_.attributes)
        for c in task_.constraints
    )


@settings(max_examples=60, deadline=None)
@given(rich_inputs)
def test_find_assignments_property_every_task_assigned_at_most_once_or_pending_with_reason(inputs):
    tasks, workers = inputs
    result = find_assignments(tasks, workers)
    assigned = [task_id for task_id, _ in result.assignments]
    assert len(assigned) == len(set(assigned))
    assert set(assigned).isdisjoint(result.pending_reasons)
    assert set(assigned) | set(result.pending_reasons) == {t.task_id for t in tasks}
    assert all(reason.strip() for reason in result.pending_reasons.values())


@settings(max_examples=60, deadline=None)
@given(rich_inputs)
def test_find_assignments_property_gang_all_on_distinct_workers_sharing_one_value_or_all_pending(inputs):
    tasks, workers = inputs
    result = find_assignments(tasks, workers)
    where = placed(result)
    by_worker = {w.worker_id: w for w in workers}
    for job_id, gang in _gangs(tasks).items():
        members = [where.get(t.task_id) for t in gang]
        if all(m is None for m in members):
            reasons = {result.pending_reasons[t.task_id] for t in gang}
            assert len(reasons) == 1, (job_id, reasons)
            continue
        assert None not in members, f"gang {job_id} partly placed: {members}"
        assert len(set(members)) == len(members), f"gang {job_id} doubled up on a worker: {members}"
        group_by = gang[0].gang_group_by
        values = {str(by_worker[m].attributes.get(group_by, "<missing>")) for m in members}
        assert "<missing>" not in values and len(values) == 1, (job_id, group_by, values)


@settings(max_examples=60, deadline=None)
@given(rich_inputs)
def test_find_assignments_property_nothing_pending_could_use_what_is_left(inputs):
    """No head-of-line blocking: with what is left after the pass, no pending task fits any worker
    it could run on, and no pending gang finds enough free workers sharing one value."""
    tasks, workers = inputs
    result = find_assignments(tasks, workers)
    free, devices = _leftover(tasks, workers, result)

    def fits_left(t: TaskDemand, w: WorkerCapacity) -> bool:
        return (
            _oracle_could_ever_run(t, w)
            and t.resources.fits_in(free[w.worker_id])
            and _device_need(t, w) <= devices[w.worker_id]
        )

    gangs = _gangs(tasks)
    for t in tasks:
        if t.task_id in result.pending_reasons and not t.gang_group_by:
            assert not any(fits_left(t, w) for w in workers), (t, result.pending_reasons[t.task_id])
    for job_id, gang in gangs.items():
        if gang[0].task_id not in result.pending_reasons:
            continue
        group_by = gang[0].gang_group_by
        free_per_value = Counter(
            str(w.attributes[group_by]) for w in workers if group_by in w.attributes and fits_left(gang[0], w)
        )
        assert max(free_per_value.values(), default=0) < len(gang), (job_id, free_per_value)


@settings(max_examples=60, deadline=None)
@given(rich_inputs)
def test_find_assignments_property_waiting_reason_only_when_some_worker_could_run_the_task(inputs):
    """ "waiting for capacity" promises the task runs once work finishes; it must name a task that
    some worker could run when idle, and every such pending single task must say it."""
    tasks, workers = inputs
    result = find_assignments(tasks, workers)
    for t in tasks:
        reason = result.pending_reasons.get(t.task_id)
        if reason is None or t.gang_group_by:
            continue
        could = any(_oracle_could_ever_run(t, w) for w in workers)
        assert reason.startswith(WAITING) == could, (t, [w.device for w in workers], reason)


def test_find_assignments_failed_job_interleaved_with_fitting_job_of_same_class_keeps_each_outcome():
    # Each job's tasks share one shape's objects, as the store builds them; the failed shape's
    # reason is reused only for tasks of that shape.
    big = demand("/big/0", cpu=8000, constraints=(C("zone=a"),))
    small = demand("/small/0", cpu=1000, constraints=big.constraints)
    tasks = [big, small, big.for_task("/big/1"), small.for_task("/small/1"), big.for_task("/big/2")]
    workers = [host("w0", attributes={"zone": "a"}), host("w1", attributes={"zone": "a"})]

    result = find_assignments(tasks, workers)

    assert sorted(placed(result)) == ["/small/0", "/small/1"]
    assert sorted(result.pending_reasons) == ["/big/0", "/big/1", "/big/2"]
    assert len(set(result.pending_reasons.values())) == 1
    assert result.pending_reasons["/big/0"].startswith(NOT_LARGE_ENOUGH)


def test_find_assignments_shapes_sharing_an_unmet_constraint_each_name_it():
    nowhere = (C("zone=mars"),)
    tasks = [
        demand("/a/0", cpu=500, constraints=nowhere),
        demand("/b/0", cpu=2000, memory=2 * GB, constraints=nowhere),
        demand("/c/0", cpu=500),
    ]
    workers = [host("w0", attributes={"zone": "a"}), host("w1", attributes={"zone": "b"})]

    result = find_assignments(tasks, workers)

    assert placed(result) == {"/c/0": "w0"}
    for task_id in ("/a/0", "/b/0"):
        assert result.pending_reasons[task_id] == (
            f"no worker satisfies constraint {nowhere[0].describe()} (2 worker(s) checked)"
        )


# ---------------------------------------------------------------- runs of one job, gang searches


def test_find_assignments_job_running_out_of_room_places_round_robin_then_the_rest_wait():
    # A job's tasks share one shape's objects (as the store builds them) and are placed as a run.
    first = demand("/j/0", cpu=2000)
    tasks = [first] + [first.for_task(f"/j/{i}") for i in range(1, 6)]
    workers = [host("w0", free=Resources(4000, 16 * GB, 0)), host("w1", free=Resources(4500, 16 * GB, 0))]

    result = find_assignments(tasks, workers)

    # Emptiest first, then round-robin while both have room.
    assert result.assignments == [("/j/0", "w1"), ("/j/1", "w0"), ("/j/2", "w1"), ("/j/3", "w0")]
    assert list(result.pending_reasons) == ["/j/4", "/j/5"]
    assert result.pending_reasons["/j/4"] == result.pending_reasons["/j/5"]
    assert result.pending_reasons["/j/4"].startswith(WAITING + ": the 2 worker(s)")


def _with_own_objects(task: TaskDemand) -> TaskDemand:
    """The same demand with a shape of its own: equal values, no object shared with any task."""
    device = Device(task.device.kind, task.device.variant, task.device.count) if task.device else None
    constraints = tuple(Constraint(c.key, c.op, c.value, c.values) for c in task.constraints)
    resources = Resources(
        task.resources.cpu_millicores, task.resources.memory_bytes, task.resources.disk_bytes
    )
    return TaskDemand(task.task_id, task.job_id, resources, device, constraints, task.gang_group_by)


@settings(max_examples=60, deadline=None)
@given(rich_inputs)
def test_find_assignments_property_job_placed_as_a_run_matches_its_tasks_placed_one_by_one(inputs):
    tasks, workers = inputs
    one_by_one = [_with_own_objects(t) for t in tasks]
    assert find_assignments(tasks, copy.deepcopy(workers)) == find_assignments(one_by_one, workers)


def test_find_assignments_gangs_of_one_shape_take_slices_in_order_and_a_smaller_gang_uses_the_first():
    workers = tpu_slice("a", 4) + tpu_slice("b", 4) + tpu_slice("c", 4)
    workers[1].device_free = 0  # slice a has 3 free hosts
    tasks = [t for job in ("g1", "g2", "g3") for t in gang_of(job, 4, device=TPU_16)] + gang_of(
        "small", 3, device=TPU_16
    )

    result = find_assignments(tasks, workers)

    slices = {
        job: {placed(result).get(f"/{job}/{i}", "")[:1] for i in range(3)} for job in ("g1", "g2", "small")
    }
    assert slices == {"g1": {"b"}, "g2": {"c"}, "small": {"a"}}
    assert {f"/g3/{i}" for i in range(4)} == set(result.pending_reasons)
    assert result.pending_reasons["/g3/0"] == (
        "waiting for capacity: gang of 4 needs 4 free workers sharing one 'tpu-name'; at most 3 are free in any group"
    )


def test_find_assignments_gang_reason_counts_the_group_with_most_free_workers_wherever_it_is():
    workers = tpu_slice("a", 4) + tpu_slice("b", 4) + tpu_slice("c", 4)
    for busy in (0, 1, 2, 4, 8, 9):  # free hosts: a 1, b 3, c 2
        workers[busy].available = Resources(0, 0, 0)

    result = find_assignments(gang_of("g", 4), workers)

    assert set(result.pending_reasons.values()) == {
        "waiting for capacity: gang of 4 needs 4 free workers sharing one 'tpu-name'; at most 3 are free in any group"
    }


def test_find_assignments_gang_never_lands_on_a_worker_reporting_more_free_than_its_size():
    workers = tpu_slice("a", 4, cpu=8000)
    workers[2].total = Resources(1000, 16 * GB, 0)  # free (8 cpu) above its size (1 cpu)

    result = find_assignments(gang_of("g", 4, cpu=4000), workers)

    assert result.assignments == []
    assert result.pending_reasons["/g/0"] == (
        "gang of 4 needs 4 workers sharing one 'tpu-name'; the largest group of suitable workers has 3 (1 group(s))"
    )


def test_find_assignments_class_seen_before_any_placement_bounds_its_own_workers_only():
    # Nothing is placed while the first classes are seen, so their most free capacity is read from
    # the workers as reported. Zone b's bound must be zone b's: a need above it (the big task)
    # fails without ordering zone b's workers, so the small task later finds b0 the emptiest.
    workers = [
        host("a0", attributes={"zone": "a"}, free=Resources(4000, 16 * GB, 0)),
        host("b0", attributes={"zone": "b"}, free=Resources(1000, 16 * GB, 0)),
        host("b1", attributes={"zone": "b", "gen": 2}, free=Resources(1500, 16 * GB, 0)),
    ]
    tasks = [
        demand("/nowhere/0", constraints=(C("zone=c"),)),
        demand("/big/0", cpu=2000, constraints=(C("zone=b"),)),
        demand("/gen2/0", cpu=1000, constraints=(C("gen>=2"),)),
        demand("/small/0", cpu=400, constraints=(C("zone=b"),)),
    ]

    result = find_assignments(tasks, workers)

    assert placed(result) == {"/gen2/0": "b1", "/small/0": "b0"}
    assert result.pending_reasons["/big/0"] == (
        f"{WAITING}: the 2 worker(s) that could run it (2 cpu, 1.0GB memory) are busy"
    )


def test_find_assignments_gangs_of_one_shape_share_a_slice_while_it_has_room():
    workers = tpu_slice("a", 4) + tpu_slice("b", 4)  # 4 cpu per host: room for two gangs' tasks

    result = find_assignments(
        gang_of("g1", 4, cpu=2000) + gang_of("g2", 4, cpu=2000) + gang_of("g3", 4, cpu=2000), workers
    )

    assert [worker for _, worker in result.assignments] == [f"{s}-w{i}" for s in "aab" for i in range(4)]
