"""The autoscaler's pure planning, without a platform, a store, a network or a clock.

`plan()` takes scale groups, slice views, demand units and a time; `demand_units()` turns pending
tasks into units (a gang is one); `ScalingGroup` decides what demand a group can serve and keeps
the zone-blocking and backoff arithmetic. Everything here is plain values in, plain values out.
"""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from iris.cluster.controller.autoscaler_plan import (
    MAX_SCALE_UPS_PER_EVALUATION,
    AutoscalerSettings,
    DemandUnit,
    SliceView,
    demand_units,
    explain_pending,
    group_state,
    plan,
    registration_failure,
    slice_registered,
)
from iris.cluster.controller.scaling_group import ScalingGroup
from iris.cluster.controller.scheduling_types import Device, Resources, TaskDemand
from iris.cluster.types import Constraint, ConstraintOp
from iris.rpc import config_pb2

GiB = 1024**3
NOW = 1_700_000_000_000
SECOND = 1000
MINUTE = 60 * SECOND

SETTINGS = AutoscalerSettings(
    scale_up_delay_ms=60 * SECOND,
    scale_down_delay_ms=5 * MINUTE,
    quota_backoff_ms=5 * MINUTE,
    failure_backoff_base_ms=10 * SECOND,
    failure_backoff_max_ms=10 * MINUTE,
    startup_grace_ms=10 * MINUTE,
)
NO_DELAY = AutoscalerSettings(
    scale_up_delay_ms=0,
    scale_down_delay_ms=5 * MINUTE,
    quota_backoff_ms=5 * MINUTE,
    failure_backoff_base_ms=10 * SECOND,
    failure_backoff_max_ms=10 * MINUTE,
)

TPU = config_pb2.ACCELERATOR_TYPE_TPU
GPU = config_pb2.ACCELERATOR_TYPE_GPU
CPU = config_pb2.ACCELERATOR_TYPE_CPU


# ---------------------------------------------------------------- builders


def make_group(
    name: str,
    *,
    accelerator: int = CPU,
    variant: str = "",
    num_vms: int = 1,
    min_slices: int = 0,
    max_slices: int = 4,
    priority: int | None = None,
    zones: tuple[str, ...] = ("zone-a",),
    cpu: int = 8,
    ram: int = 32 * GiB,
    disk: int = 0,
    gpu_count: int = 0,
    tpu_count: int = 0,
) -> ScalingGroup:
    config = config_pb2.ScaleGroupConfig(name=name, min_slices=min_slices, max_slices=max_slices)
    if priority is not None:
        config.priority = priority
    config.zones.extend(zones)
    config.resources.CopyFrom(
        config_pb2.ScaleGroupResources(cpu=cpu, ram=ram, disk=disk, gpu_count=gpu_count, tpu_count=tpu_count)
    )
    template = config.slice_template
    template.num_vms = num_vms
    template.accelerator_type = accelerator
    template.accelerator_variant = variant
    template.gcp.preemptible = True
    return ScalingGroup(config)


def tpu_group(name: str = "tpu", variant: str = "v5litepod-16", num_vms: int = 4, **kwargs) -> ScalingGroup:
    return make_group(
        name, accelerator=TPU, variant=variant, num_vms=num_vms, cpu=112, ram=192 * GiB, **kwargs
    )


def gpu_group(name: str = "gpu", variant: str = "H100", gpu_count: int = 8, **kwargs) -> ScalingGroup:
    return make_group(
        name, accelerator=GPU, variant=variant, gpu_count=gpu_count, cpu=96, ram=512 * GiB, **kwargs
    )


def task(
    job_id: str = "/job",
    index: int = 0,
    *,
    cpu: int = 1000,
    memory: int = GiB,
    disk: int = 0,
    device: Device | None = None,
    constraints: tuple[Constraint, ...] = (),
    group_by: str = "",
) -> TaskDemand:
    return TaskDemand(
        task_id=f"{job_id}/{index}",
        job_id=job_id,
        resources=Resources(cpu, memory, disk),
        device=device,
        constraints=constraints,
        gang_group_by=group_by,
    )


def tasks(job_id: str, count: int, **kwargs) -> list[TaskDemand]:
    return [task(job_id, i, **kwargs) for i in range(count)]


def gang(job_id: str, size: int, **kwargs) -> list[TaskDemand]:
    return tasks(job_id, size, group_by="tpu-name", **kwargs)


def units_of(*demands: list[TaskDemand] | TaskDemand) -> list[DemandUnit]:
    flat: list[TaskDemand] = []
    for d in demands:
        flat.extend(d if isinstance(d, list) else [d])
    return demand_units(flat)


def one_slice_each(n: int, job_prefix: str = "/big") -> list[DemandUnit]:
    """n tasks so large that each needs a slice of its own (8 cpu on an 8 cpu worker)."""
    return units_of(*[task(f"{job_prefix}{i}", cpu=8000) for i in range(n)])


def view(
    slice_id: str,
    group: str,
    state: str = "READY",
    *,
    registered: bool | None = None,
    idle_since_ms: int | None = None,
    zone: str = "zone-a",
) -> SliceView:
    if registered is None:
        registered = state == "READY"
    return SliceView(slice_id, group, zone, state, idle_since_ms, registered)


def waiting(group: ScalingGroup, since_ms: int) -> ScalingGroup:
    """The group has had unmet demand since `since_ms`."""
    group.demand_since_ms = since_ms
    return group


TPU_V5E_16 = Device("tpu", "v5litepod-16", 0)


# ---------------------------------------------------------------- demand units


def test_demand_units_single_tasks_are_one_unit_each():
    units = demand_units(tasks("/a", 3))
    assert [u.task_ids for u in units] == [("/a/0",), ("/a/1",), ("/a/2",)]
    assert all(u.gang_size == 1 for u in units)


def test_demand_units_gang_tasks_of_one_job_form_one_unit():
    units = demand_units([*gang("/g", 4), task("/solo")])
    by_job = {u.job_id: u for u in units}
    assert len(units) == 2
    assert by_job["/g"].task_ids == ("/g/0", "/g/1", "/g/2", "/g/3")
    assert by_job["/g"].gang_size == 4
    assert by_job["/solo"].gang_size == 1


def test_demand_units_two_gangs_stay_separate():
    units = demand_units([*gang("/g1", 2), *gang("/g2", 3)])
    assert sorted((u.job_id, u.gang_size) for u in units) == [("/g1", 2), ("/g2", 3)]


# ---------------------------------------------------------------- scale up and its delay


def test_plan_pending_task_before_scale_up_delay_waits_with_reason():
    group = waiting(make_group("cpu"), NOW - 20 * SECOND)

    result = plan([group], [], units_of(task()), NOW, SETTINGS)

    assert result.scale_up == {}
    assert result.demand == {"cpu": 1}
    assert result.unmet["cpu"] == "waiting 40s more (scale_up_delay) before adding slices"


def test_plan_pending_task_after_scale_up_delay_scales_up_one_slice():
    group = waiting(make_group("cpu"), NOW - 60 * SECOND)

    result = plan([group], [], units_of(task()), NOW, SETTINGS)

    assert result.scale_up == {"cpu": 1}
    assert "cpu" not in result.unmet
    assert result.reasons["cpu"] == "1 pending unit(s) need 1 more slice(s)"


def test_plan_zero_scale_up_delay_scales_up_at_first_sight():
    result = plan([make_group("cpu")], [], units_of(task()), NOW, NO_DELAY)

    assert result.scale_up == {"cpu": 1}


def test_plan_many_small_tasks_pack_into_slices_by_what_a_slice_holds():
    # 8 cpu per worker, 2 workers per slice: 16 one-cpu tasks per slice; 20 tasks need 2 slices.
    group = make_group("cpu", num_vms=2)

    result = plan([group], [], units_of(tasks("/many", 20)), NOW, NO_DELAY)

    assert group.tasks_per_slice(task()) == 16
    assert result.scale_up == {"cpu": 2}
    assert result.demand == {"cpu": 20}


def test_plan_no_demand_and_no_minimum_requests_nothing():
    result = plan([make_group("cpu")], [], [], NOW, SETTINGS)

    assert result.scale_up == {} and result.scale_down == []
    assert result.unmet == {} and result.unroutable == []


# ---------------------------------------------------------------- min and max slices


def test_plan_below_min_slices_tops_up_without_delay_or_demand():
    group = make_group("cpu", min_slices=2)

    result = plan([group], [], [], NOW, SETTINGS)

    assert result.scale_up == {"cpu": 2}
    assert result.reasons["cpu"] == "below min_slices (0 < 2)"


def test_plan_min_slices_counts_slices_on_the_way():
    group = make_group("cpu", min_slices=2)
    slices = [view("s1", "cpu", "CREATING"), view("s2", "cpu", "BOOTSTRAPPING")]

    assert plan([group], slices, [], NOW, SETTINGS).scale_up == {}


def test_plan_min_slices_top_up_happens_while_demand_waits_for_its_delay():
    group = waiting(make_group("cpu", min_slices=1), NOW - 10 * SECOND)

    result = plan([group], [], units_of(task()), NOW, SETTINGS)

    assert result.scale_up == {"cpu": 1}
    assert result.reasons["cpu"] == "below min_slices (0 < 1)"


def test_plan_demand_beyond_max_slices_is_capped_at_max():
    group = make_group("cpu", max_slices=3)
    slices = [view("s1", "cpu")]

    result = plan([group], slices, one_slice_each(10), NOW, NO_DELAY)

    assert result.scale_up == {"cpu": 2}


def test_plan_group_at_max_requests_nothing_and_reports_at_max():
    group = make_group("cpu", max_slices=1)
    slices = [view("s1", "cpu")]

    result = plan([group], slices, units_of(task()), NOW, NO_DELAY)

    assert result.scale_up == {}
    assert result.demand == {"cpu": 1}
    assert result.unmet["cpu"] == "cpu is at max_slices (1)"
    assert group_state(group, slices, NOW) == "at-max"


def test_plan_failed_and_deleting_slices_do_not_count_towards_max():
    group = make_group("cpu", max_slices=1)
    slices = [view("s1", "cpu", "FAILED"), view("s2", "cpu", "DELETING")]

    result = plan([group], slices, units_of(task()), NOW, NO_DELAY)

    assert result.scale_up == {"cpu": 1}


def test_plan_scale_ups_per_evaluation_are_rate_limited():
    group = make_group("cpu", max_slices=20)

    result = plan([group], [], one_slice_each(10), NOW, NO_DELAY)

    assert result.scale_up == {"cpu": MAX_SCALE_UPS_PER_EVALUATION}


def test_plan_min_slices_top_up_is_rate_limited_too():
    group = make_group("cpu", min_slices=10, max_slices=10)

    assert plan([group], [], [], NOW, SETTINGS).scale_up == {"cpu": MAX_SCALE_UPS_PER_EVALUATION}


# ---------------------------------------------------------------- capacity on the way


@pytest.mark.parametrize(
    "state, registered",
    [("CREATING", False), ("BOOTSTRAPPING", False), ("READY", False)],
    ids=["creating", "bootstrapping", "ready-not-registered"],
)
def test_plan_in_flight_slice_absorbs_demand_without_new_requests(state, registered):
    group = make_group("cpu")
    slices = [view("s1", "cpu", state, registered=registered)]

    result = plan([group], slices, units_of(task()), NOW, NO_DELAY)

    assert result.scale_up == {}
    assert result.demand == {"cpu": 1}


def test_plan_in_flight_slices_cover_only_what_they_hold():
    # Three slices' worth of demand, one on the way: two more requested.
    group = make_group("cpu")
    slices = [view("s1", "cpu", "CREATING", registered=False)]

    result = plan([group], slices, one_slice_each(3), NOW, NO_DELAY)

    assert result.scale_up == {"cpu": 2}
    assert result.reasons["cpu"] == "3 pending unit(s) need 3 more slice(s)"


def test_plan_registered_ready_slice_is_not_counted_as_coming_capacity():
    # Demand still pending with every worker of a READY slice registered is demand the slice could
    # not take (the scheduler would have placed it otherwise).
    group = make_group("cpu")
    slices = [view("s1", "cpu", "READY", registered=True)]

    assert plan([group], slices, units_of(task()), NOW, NO_DELAY).scale_up == {"cpu": 1}


# ---------------------------------------------------------------- gangs


def test_plan_gang_is_one_unit_needing_one_slice():
    group = tpu_group()

    result = plan([group], [], units_of(gang("/train", 4, device=TPU_V5E_16)), NOW, NO_DELAY)

    assert result.demand == {"tpu": 1}
    assert result.scale_up == {"tpu": 1}


def test_plan_two_gangs_need_two_slices_even_if_workers_could_hold_both():
    group = make_group("cpu", num_vms=4)
    units = units_of(gang("/g1", 4), gang("/g2", 4))

    assert plan([group], [], units, NOW, NO_DELAY).scale_up == {"cpu": 2}


def test_plan_gang_larger_than_any_slice_is_unroutable_naming_group_and_reason():
    small = make_group("small", num_vms=2)

    result = plan([small], [], units_of(gang("/train", 4)), NOW, NO_DELAY)

    assert result.scale_up == {}
    assert result.unroutable == [
        "/train: no scale group can run it "
        "(small: a gang of 4 needs a slice of 4 workers; its slices have 2)"
    ]


def test_plan_gang_skips_a_preferred_group_whose_slices_are_too_small():
    small = make_group("small", num_vms=2, priority=0)
    big = make_group("big", num_vms=4, priority=10)

    result = plan([small, big], [], units_of(gang("/train", 4)), NOW, NO_DELAY)

    assert result.scale_up == {"big": 1}
    assert result.demand == {"big": 1}
    assert small.cannot_serve(task(group_by="tpu-name"), 4) == (
        "a gang of 4 needs a slice of 4 workers; its slices have 2"
    )


def test_plan_single_tasks_still_use_the_small_preferred_group():
    small = make_group("small", num_vms=2, priority=0)
    big = make_group("big", num_vms=4, priority=10)

    assert plan([small, big], [], units_of(task("/solo")), NOW, NO_DELAY).scale_up == {"small": 1}


# ---------------------------------------------------------------- device and variant routing


def test_plan_tpu_demand_routes_to_the_tpu_group():
    groups = [make_group("cpu"), gpu_group(), tpu_group()]

    result = plan(groups, [], units_of(task("/t", device=TPU_V5E_16)), NOW, NO_DELAY)

    assert result.scale_up == {"tpu": 1}


def test_plan_gpu_demand_routes_to_the_gpu_group():
    groups = [make_group("cpu"), gpu_group(), tpu_group()]

    result = plan(groups, [], units_of(task("/g", device=Device("gpu", "H100", 2))), NOW, NO_DELAY)

    assert result.scale_up == {"gpu": 1}


def test_plan_tpu_variant_routes_to_the_group_of_that_variant():
    v5e = tpu_group("v5e", variant="v5litepod-16", priority=0)
    v6e = tpu_group("v6e", variant="v6e-8", num_vms=1, priority=10)

    result = plan([v5e, v6e], [], units_of(task("/t", device=Device("tpu", "v6e-8", 0))), NOW, NO_DELAY)

    assert result.scale_up == {"v6e": 1}


def test_plan_unknown_tpu_variant_is_unroutable_with_each_groups_reason():
    groups = [make_group("cpu"), tpu_group()]

    result = plan(groups, [], units_of(task("/t", device=Device("tpu", "v4-8", 0))), NOW, NO_DELAY)

    assert result.scale_up == {}
    assert result.unroutable == [
        "/t: no scale group can run it (cpu: its workers have no tpu v4-8; tpu: its workers have no tpu v4-8)"
    ]


def test_plan_gpu_count_beyond_what_a_worker_has_is_unroutable():
    sixteen = units_of(task("/g", device=Device("gpu", "H100", 16)))

    result = plan([gpu_group(gpu_count=8)], [], sixteen, NOW, NO_DELAY)

    assert result.unroutable == [
        "/g: no scale group can run it (gpu: its workers have 8 gpus, the task needs 16)"
    ]


def test_plan_task_larger_than_a_worker_is_unroutable_with_sizes():
    group = make_group("cpu", cpu=8, ram=32 * GiB)

    result = plan([group], [], units_of(task("/big", cpu=16_000)), NOW, NO_DELAY)

    assert len(result.unroutable) == 1
    assert result.unroutable[0].startswith("/big: no scale group can run it (cpu: its workers offer 8 cpu")
    assert "the task needs 16 cpu" in result.unroutable[0]


def test_plan_no_scale_groups_reports_unroutable():
    assert plan([], [], units_of(task("/t")), NOW, NO_DELAY).unroutable == [
        "/t: no scale group can run it (no scale groups are configured)"
    ]


def test_plan_cpu_only_demand_prefers_a_cpu_group_over_an_accelerator_group():
    """Demand without a device should not make the autoscaler buy TPU hosts when a CPU group of the
    same priority could serve it: the TPU group sorting first by name must not decide it."""
    accelerators = tpu_group("a-tpu", variant="v6e-8", num_vms=1)
    plain = make_group("z-cpu")

    result = plan([accelerators, plain], [], units_of(task("/cpu-only")), NOW, NO_DELAY)

    assert result.scale_up == {"z-cpu": 1}


def test_cannot_serve_group_without_a_disk_declaration_accepts_a_disk_request():
    """Scale group resources rarely declare disk (none of the examples do); an undeclared disk must
    not make every task that asks for disk unroutable."""
    group = make_group("cpu", cpu=8, ram=32 * GiB)  # disk not declared

    assert group.cannot_serve(task(disk=10 * GiB), 1) == ""


# ---------------------------------------------------------------- constraints


def test_plan_zone_constraint_routes_to_the_group_in_that_zone():
    west = make_group("west", zones=("europe-west4-a",), priority=0)
    east = make_group("east", zones=("us-east1-b",), priority=10)
    in_east = (Constraint("zone", ConstraintOp.EQ, "us-east1-b"),)

    result = plan([west, east], [], units_of(task("/t", constraints=in_east)), NOW, NO_DELAY)

    assert result.scale_up == {"east": 1}


def test_plan_zone_constraint_matches_any_of_a_groups_zones():
    group = make_group("multi", zones=("zone-a", "zone-b"))

    assert group.cannot_serve(task(constraints=(Constraint("zone", ConstraintOp.EQ, "zone-b"),)), 1) == ""


def test_plan_scale_group_constraint_routes_to_that_group():
    first = make_group("first", priority=0)
    second = make_group("second", priority=10)
    pinned = (Constraint("scale-group", ConstraintOp.EQ, "second"),)

    assert plan([first, second], [], units_of(task("/t", constraints=pinned)), NOW, NO_DELAY).scale_up == {
        "second": 1
    }


def test_plan_preemptible_constraint_routes_by_the_templates_preemptibility():
    spot = make_group("spot", priority=0)
    reserved = make_group("reserved", priority=10)
    reserved.config.slice_template.gcp.preemptible = False
    not_spot = (Constraint("preemptible", ConstraintOp.EQ, "false"),)

    assert plan([spot, reserved], [], units_of(task("/t", constraints=not_spot)), NOW, NO_DELAY).scale_up == {
        "reserved": 1
    }


def test_plan_constraint_no_group_satisfies_is_unroutable_with_the_constraint():
    group = make_group("cpu", zones=("zone-a",))
    elsewhere = (Constraint("zone", ConstraintOp.EQ, "zone-z"),)

    result = plan([group], [], units_of(task("/t", constraints=elsewhere)), NOW, NO_DELAY)

    assert result.unroutable == [
        "/t: no scale group can run it (cpu: its workers would not satisfy zone=zone-z)"
    ]


# ---------------------------------------------------------------- priority and fall-through


def test_plan_lower_priority_value_is_tried_first():
    a = make_group("a", priority=10)
    b = make_group("b", priority=5)

    assert plan([a, b], [], units_of(task()), NOW, NO_DELAY).scale_up == {"b": 1}


def test_plan_equal_priority_orders_by_name():
    assert plan([make_group("b"), make_group("a")], [], units_of(task()), NOW, NO_DELAY).scale_up == {"a": 1}


def test_plan_unset_priority_counts_as_zero():
    unset = make_group("z-unset")
    later = make_group("a-later", priority=1)

    assert plan([later, unset], [], units_of(task()), NOW, NO_DELAY).scale_up == {"z-unset": 1}


def _at_max(group: ScalingGroup) -> list[SliceView]:
    return [view(f"{group.name}-{i}", group.name) for i in range(group.max_slices)]


def _backing_off(group: ScalingGroup) -> list[SliceView]:
    group.record_failure(NOW - SECOND, "bootstrap failed: image not found", 60 * SECOND, 10 * MINUTE)
    return []


def _quota_blocked(group: ScalingGroup) -> list[SliceView]:
    for zone in group.zones():
        group.block_zone(zone, NOW - SECOND, 5 * MINUTE, f"no quota in {zone}")
    return []


@pytest.mark.parametrize(
    "make_unavailable, state, reason",
    [
        (_at_max, "at-max", "first is at max_slices (1)"),
        (
            _backing_off,
            "backoff",
            "first is backing off for 59s after 1 failure(s): bootstrap failed: image not found",
        ),
        (_quota_blocked, "quota-blocked", "first has no zone with quota: zone-a (no quota in zone-a)"),
    ],
    ids=["at-max", "backoff", "quota-blocked"],
)
def test_plan_unavailable_first_group_falls_through_to_the_next(make_unavailable, state, reason):
    first = make_group("first", priority=0, max_slices=1)
    second = make_group("second", priority=10)
    slices = make_unavailable(first)

    result = plan([first, second], slices, units_of(task()), NOW, NO_DELAY)

    assert group_state(first, slices, NOW) == state
    assert result.scale_up == {"second": 1}
    assert result.demand == {"second": 1}

    # With no group to fall through to, the demand waits on the first group, saying why.
    alone = plan([first], slices, units_of(task()), NOW, NO_DELAY)
    assert alone.scale_up == {}
    assert alone.demand == {"first": 1}
    assert alone.unmet == {"first": reason}


def test_plan_stockout_in_every_zone_gives_the_waiting_job_one_line_per_zone_with_why():
    group = make_group("tpu", zones=("zone-a", "zone-b"))
    group.block_zone("zone-b", NOW - SECOND, 5 * MINUTE, 'no more capacity in the zone "zone-b"')
    group.block_zone("zone-a", NOW - SECOND, 5 * MINUTE, "quota TPUV5 exceeded in zone-a")
    waiting, other = tasks("/train", 2), tasks("/other", 1)

    result = plan([group], [], units_of(*waiting, *other), NOW, NO_DELAY)

    expected = (
        "tpu can add no slice: every zone refused\n"
        "  zone-a: quota TPUV5 exceeded in zone-a\n"
        '  zone-b: no more capacity in the zone "zone-b"'
    )
    assert result.job_waits == {"/train": expected, "/other": expected}
    scheduler_says = {t.task_id: "no healthy workers are registered" for t in (*waiting, *other)}
    explained = explain_pending(scheduler_says, [*waiting, *other], {"/train": expected})
    assert explained["/train/1"] == f"no healthy workers are registered\n{expected}"
    assert explained["/other/0"] == "no healthy workers are registered"


def test_plan_job_whose_group_can_grow_has_no_capacity_wait():
    group = make_group("tpu", zones=("zone-a", "zone-b"))
    group.block_zone("zone-a", NOW - SECOND, 5 * MINUTE, "quota exceeded")

    result = plan([group], [], units_of(task()), NOW, NO_DELAY)

    assert result.scale_up == {"tpu": 1} and result.job_waits == {}


def test_plan_backing_off_group_does_not_top_up_min_slices():
    group = make_group("cpu", min_slices=2)
    _backing_off(group)

    assert plan([group], [], [], NOW, SETTINGS).scale_up == {}


def test_plan_fall_through_skips_groups_that_cannot_serve():
    # The preferred group is at max and the next one has the wrong device: the third gets it.
    first = tpu_group("first", priority=0, max_slices=1)
    wrong = tpu_group("wrong", variant="v6e-8", num_vms=1, priority=5)
    third = tpu_group("third", priority=10)
    slices = _at_max(first)

    result = plan([first, wrong, third], slices, units_of(task(device=TPU_V5E_16)), NOW, NO_DELAY)

    assert result.scale_up == {"third": 1}


# ---------------------------------------------------------------- scale down


def test_plan_idle_slice_past_scale_down_delay_is_removed():
    group = make_group("cpu")
    slices = [view("s1", "cpu", idle_since_ms=NOW - 5 * MINUTE)]

    assert plan([group], slices, [], NOW, SETTINGS).scale_down == [("cpu", "s1")]


def test_plan_idle_slice_before_scale_down_delay_stays():
    group = make_group("cpu")
    slices = [view("s1", "cpu", idle_since_ms=NOW - 5 * MINUTE + 1)]

    assert plan([group], slices, [], NOW, SETTINGS).scale_down == []


def test_plan_busy_slice_is_never_removed():
    group = make_group("cpu")
    slices = [view("s1", "cpu", idle_since_ms=None)]

    assert plan([group], slices, [], NOW + 10 * 24 * 60 * MINUTE, SETTINGS).scale_down == []


def test_plan_scale_down_never_goes_below_min_slices():
    group = make_group("cpu", min_slices=2)
    slices = [view(f"s{i}", "cpu", idle_since_ms=NOW - 60 * MINUTE + i) for i in range(3)]

    result = plan([group], slices, [], NOW, SETTINGS)

    # One slice above the minimum, and the one idle the longest goes.
    assert result.scale_down == [("cpu", "s0")]


def test_plan_group_with_demand_keeps_its_idle_slices():
    group = make_group("cpu", max_slices=1)
    slices = [view("s1", "cpu", idle_since_ms=NOW - 60 * MINUTE)]

    result = plan([group], slices, units_of(task()), NOW, NO_DELAY)

    assert result.scale_down == []


def test_plan_pending_gang_that_needs_the_group_prevents_removal_and_thrash():
    """A gang waiting for its slice must not see an idle slice of its group removed: removing it
    and adding one back is the add/remove thrash the planner exists to avoid."""
    group = tpu_group(max_slices=2)
    slices = [view("idle", "tpu", idle_since_ms=NOW - 60 * MINUTE), view("coming", "tpu", "CREATING")]
    pending = units_of(gang("/train", 4, device=TPU_V5E_16))

    for step in range(10):
        result = plan([group], slices, pending, NOW + step * MINUTE, NO_DELAY)
        assert result.scale_down == []
        assert result.scale_up == {}


def test_plan_demand_for_another_group_does_not_protect_idle_slices():
    cpu = make_group("cpu")
    tpu = tpu_group()
    slices = [view("cpu-idle", "cpu", idle_since_ms=NOW - 60 * MINUTE)]

    result = plan([cpu, tpu], slices, units_of(task(device=TPU_V5E_16)), NOW, NO_DELAY)

    assert result.scale_down == [("cpu", "cpu-idle")]
    assert result.scale_up == {"tpu": 1}


def test_plan_unready_slices_are_never_scaled_down():
    group = make_group("cpu")
    slices = [
        view("c", "cpu", "CREATING", idle_since_ms=NOW - 60 * MINUTE),
        view("b", "cpu", "BOOTSTRAPPING", idle_since_ms=NOW - 60 * MINUTE),
    ]

    assert plan([group], slices, [], NOW, SETTINGS).scale_down == []


# ---------------------------------------------------------------- ScalingGroup bookkeeping


def test_scaling_group_record_failure_backs_off_exponentially_up_to_the_cap():
    group = make_group("cpu")
    delays = []
    for _ in range(8):
        group.record_failure(NOW, "create failed", 10 * SECOND, 5 * MINUTE)
        delays.append(group.backoff_until_ms - NOW)

    assert delays == [10_000, 20_000, 40_000, 80_000, 160_000, 300_000, 300_000, 300_000]
    assert group.consecutive_failures == 8
    assert group.last_failure == "create failed"


def test_scaling_group_backoff_state_ends_when_the_delay_passes():
    group = make_group("cpu")
    group.record_failure(NOW, "create failed", 10 * SECOND, 5 * MINUTE)

    assert group_state(group, [], NOW + 10 * SECOND - 1) == "backoff"
    assert group_state(group, [], NOW + 10 * SECOND) == "available"


def test_scaling_group_record_success_resets_the_backoff():
    group = make_group("cpu")
    group.record_failure(NOW, "a", 10 * SECOND, 5 * MINUTE)
    group.record_failure(NOW, "b", 10 * SECOND, 5 * MINUTE)

    group.record_success()
    group.record_failure(NOW, "c", 10 * SECOND, 5 * MINUTE)

    assert group.backoff_until_ms - NOW == 10 * SECOND
    assert group.consecutive_failures == 1


def test_scaling_group_blocked_zone_is_skipped_until_its_block_expires():
    group = make_group("cpu", zones=("zone-a", "zone-b"))
    group.block_zone("zone-a", NOW, 5 * MINUTE, "quota exhausted")

    assert group.available_zones(NOW) == ["zone-b"]
    assert group.available_zones(NOW + 5 * MINUTE - 1) == ["zone-b"]
    assert group.available_zones(NOW + 5 * MINUTE) == ["zone-a", "zone-b"]


def test_scaling_group_all_zones_blocked_is_quota_blocked_until_one_expires():
    group = make_group("cpu", zones=("zone-a", "zone-b"))
    group.block_zone("zone-a", NOW, 5 * MINUTE, "quota a")
    group.block_zone("zone-b", NOW, 10 * MINUTE, "quota b")

    assert group_state(group, [], NOW) == "quota-blocked"
    assert group_state(group, [], NOW + 5 * MINUTE) == "available"


def test_scaling_group_zones_come_from_the_list_then_the_template():
    listed = make_group("listed", zones=("z1", "z2"))
    templated = make_group("templated", zones=())
    templated.config.slice_template.gcp.zone = "z9"
    bare = make_group("bare", zones=())

    assert listed.zones() == ["z1", "z2"]
    assert templated.zones() == ["z9"]
    assert bare.zones() == [""]


def test_scaling_group_tasks_per_slice_counts_devices():
    group = gpu_group(gpu_count=8, num_vms=2)

    assert group.tasks_per_slice(task(device=Device("gpu", "H100", 2))) == 8
    assert group.tasks_per_slice(task(device=Device("gpu", "H100", 8))) == 2


def test_scaling_group_whole_host_tpu_request_takes_one_task_per_worker():
    group = tpu_group()

    assert group.tasks_per_slice(task(device=TPU_V5E_16)) == 4
    assert group.worker_device() == Device("tpu", "v5litepod-16", 4)


# ---------------------------------------------------------------- property


@st.composite
def scenarios(draw):
    n_groups = draw(st.integers(1, 3))
    groups = []
    for i in range(n_groups):
        min_slices = draw(st.integers(0, 2))
        max_slices = draw(st.integers(min_slices, 5))
        group = make_group(
            f"g{i}",
            num_vms=draw(st.integers(1, 4)),
            min_slices=min_slices,
            max_slices=max_slices,
            priority=draw(st.integers(0, 2)),
            zones=tuple(draw(st.sampled_from([("zone-a",), ("zone-a", "zone-b"), ("zone-b",)]))),
            cpu=draw(st.sampled_from([4, 8])),
        )
        if draw(st.booleans()):
            group.record_failure(NOW - draw(st.integers(0, 60_000)), "failed", 10 * SECOND, MINUTE)
        if draw(st.booleans()):
            group.block_zone("zone-a", NOW - draw(st.integers(0, 600_000)), 5 * MINUTE, "quota")
        group.demand_since_ms = draw(st.one_of(st.none(), st.integers(NOW - 10 * MINUTE, NOW)))
        groups.append(group)
    slices = []
    for i in range(draw(st.integers(0, 10))):
        state = draw(st.sampled_from(["CREATING", "BOOTSTRAPPING", "READY", "FAILED", "DELETING"]))
        registered = state == "READY" and draw(st.booleans())
        idle = draw(st.one_of(st.none(), st.integers(NOW - 20 * MINUTE, NOW))) if registered else None
        owner = f"g{draw(st.integers(0, n_groups - 1))}"
        slices.append(view(f"s{i}", owner, state, registered=registered, idle_since_ms=idle))
    demands: list[TaskDemand] = []
    for j in range(draw(st.integers(0, 12))):
        size = draw(st.integers(1, 5))
        cpu = draw(st.sampled_from([500, 1000, 4000, 8000, 16_000]))
        zone = draw(st.sampled_from([None, "zone-a", "zone-b", "zone-c"]))
        constraints = (Constraint("zone", ConstraintOp.EQ, zone),) if zone else ()
        if size > 1 and draw(st.booleans()):
            demands += gang(f"/gang{j}", size, cpu=cpu, constraints=constraints)
        else:
            demands += tasks(f"/job{j}", size, cpu=cpu, constraints=constraints)
    delay = draw(st.sampled_from([0, 60 * SECOND]))
    scale_settings = AutoscalerSettings(scale_up_delay_ms=delay, scale_down_delay_ms=5 * MINUTE)
    return groups, slices, demand_units(demands), scale_settings


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenarios())
def test_plan_property_respects_max_min_and_never_shrinks_a_group_with_demand(scenario):
    groups, slices, units, scale_settings = scenario
    states = {g.name: group_state(g, [s for s in slices if s.group == g.name], NOW) for g in groups}

    result = plan(groups, slices, units, NOW, scale_settings)

    removed = [slice_id for _, slice_id in result.scale_down]
    assert len(removed) == len(set(removed)), "a slice is removed twice"
    by_id = {s.slice_id: s for s in slices}
    for group in groups:
        live = [s for s in slices if s.group == group.name and s.state not in ("FAILED", "DELETING")]
        added = result.scale_up.get(group.name, 0)
        downs = [slice_id for name, slice_id in result.scale_down if name == group.name]
        if added:
            assert len(live) + added <= group.max_slices, f"{group.name} grows past max_slices"
            assert added <= MAX_SCALE_UPS_PER_EVALUATION
            assert states[group.name] == "available", f"{group.name} grows while {states[group.name]}"
        if result.demand.get(group.name):
            assert not downs, f"{group.name} shrinks while it has demand"
        assert len(live) - len(downs) >= min(group.min_slices, len(live)), f"{group.name} shrinks below min"
        assert not (added and downs), f"{group.name} adds and removes in one plan"
        for slice_id in downs:
            assert by_id[slice_id].group == group.name
            assert by_id[slice_id].state == "READY" and by_id[slice_id].idle_since_ms is not None
    assert set(result.scale_up) <= {g.name for g in groups}


# ---------------------------------------------------------------- bookkeeping and registration


def test_plan_demand_first_seen_now_is_returned_as_waiting_since_now():
    group = make_group("cpu")

    result = plan([group], [], units_of(task()), NOW, SETTINGS)

    assert result.demand_since == {"cpu": NOW}
    assert group.demand_since_ms is None, "plan() reports bookkeeping; it does not write it"


def test_plan_demand_keeps_its_start_and_a_group_without_demand_is_cleared():
    busy, idle = waiting(make_group("cpu"), NOW - 20 * SECOND), waiting(make_group("tpu"), NOW - 5 * SECOND)

    result = plan([busy, idle], [], units_of(task()), NOW, SETTINGS)

    assert result.demand_since == {"cpu": NOW - 20 * SECOND, "tpu": None}


def test_slice_registered_counts_workers_whatever_ids_they_registered_under():
    assert slice_registered(["s-0", "s-1"], {"10.0.0.1:10001", "10.0.0.2:10001"})
    assert not slice_registered(["s-0", "s-1"], {"10.0.0.1:10001"})
    assert not slice_registered([], set())


def test_registration_failure_only_after_the_startup_grace_names_missing_workers():
    expected, healthy = ["s-0", "s-1"], {"s-0"}
    grace = 10 * MINUTE

    assert registration_failure(expected, healthy, NOW, NOW + grace - 1, grace) == ""
    assert registration_failure(expected, {"s-0", "s-1"}, NOW, NOW + grace, grace) == ""
    assert registration_failure(expected, healthy, NOW, NOW + grace, grace) == (
        "worker(s) s-1 did not register within the startup grace period (600s)"
    )
    assert registration_failure(expected, {"10.0.0.9:10001"}, NOW, NOW + grace, grace) == (
        "1 of 2 worker(s) did not register within the startup grace period (600s)"
    )
