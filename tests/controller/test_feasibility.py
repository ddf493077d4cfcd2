"""Refusing at submission a job that no scale group and no registered worker could ever run."""

from __future__ import annotations

from iris.cluster.controller.feasibility import never_servable_reason
from iris.cluster.controller.scaling_group import ScalingGroup
from iris.cluster.controller.scheduler import Resources, TaskDemand
from iris.cluster.controller.scheduling_types import Device, WorkerCapacity
from iris.cluster.types import Constraint
from iris.config import parse_size
from iris.rpc import config_pb2

GIB = parse_size("1GB")


def cpu_group() -> ScalingGroup:
    config = config_pb2.ScaleGroupConfig(name="cpu")
    config.resources.cpu = 4
    config.resources.ram = 8 * GIB
    return ScalingGroup(config)


def test_never_servable_reason_huge_task_names_group_shortfall() -> None:
    huge = TaskDemand("/j/0", "/j", Resources(1_000_000, GIB, 0))

    reason = never_servable_reason(huge, 1, [cpu_group()], [])

    assert reason.startswith("no scale group or worker of this cluster can ever run it (cpu: its workers offer")
    assert "short of cpu" in reason


def test_never_servable_reason_a_big_enough_worker_or_group_allows_it() -> None:
    huge = TaskDemand("/j/0", "/j", Resources(1_000_000, GIB, 0))
    small = TaskDemand("/j/0", "/j", Resources(1000, GIB, 0))

    assert never_servable_reason(huge, 1, [cpu_group()], [idle_worker("big", cpu=2000)]) == ""
    assert never_servable_reason(small, 1, [cpu_group()], []) == ""


def idle_worker(
    worker_id: str, cpu: int = 8, device: Device | None = None, **attributes: str
) -> WorkerCapacity:
    total = Resources(cpu * 1000, 32 * GIB, 0)
    return WorkerCapacity(worker_id, total, total, dict(attributes), device, device.count if device else 0)


def test_never_servable_reason_no_groups_tpu_job_on_cpu_workers_names_missing_device() -> None:
    tpu = TaskDemand("", "/t", Resources(1000, GIB, 0), Device("tpu", "v5litepod-16", 0))

    reason = never_servable_reason(tpu, 1, [], [idle_worker("local-0")])

    assert reason.startswith("no worker of this cluster can ever run it (no worker has tpu v5litepod-16")
    assert "start a worker that offers it" in reason


def test_never_servable_reason_no_groups_more_cpu_than_any_worker_names_largest_worker() -> None:
    huge = TaskDemand("", "/h", Resources(1_000_000, GIB, 0))

    reason = never_servable_reason(huge, 1, [], [idle_worker("w1", cpu=4), idle_worker("w2", cpu=8)])

    assert "no worker is large enough" in reason and "(w2)" in reason and "short of cpu" in reason


def test_never_servable_reason_busy_but_large_enough_worker_allows_it() -> None:
    """Only capacity a worker has at all counts: what other jobs use now frees up later."""
    need = TaskDemand("", "/j", Resources(8000, GIB, 0))
    busy = WorkerCapacity("w1", Resources(8000, 32 * GIB, 0), Resources(0, 0, 0))

    assert never_servable_reason(need, 1, [], [busy]) == ""


def test_never_servable_reason_no_groups_constraint_no_worker_satisfies_is_refused() -> None:
    picky = TaskDemand("", "/p", Resources(1000, GIB, 0), constraints=(Constraint.parse("pool=nowhere"),))

    reason = never_servable_reason(picky, 1, [], [idle_worker("w1", pool="default")])

    assert "no worker satisfies constraint pool=nowhere" in reason


def test_never_servable_reason_gang_larger_than_registered_workers_waits_for_more() -> None:
    """The rest of the gang's workers may still be registering (a controller just restarted)."""
    gang = TaskDemand("", "/g", Resources(1000, GIB, 0), gang_group_by="tpu-name")
    workers = [idle_worker(f"s-{i}", **{"tpu-name": "s"}) for i in range(2)]

    assert never_servable_reason(gang, 4, [], workers) == ""
    too_big = TaskDemand("", "/g", Resources(64000, GIB, 0), gang_group_by="tpu-name")
    reason = never_servable_reason(too_big, 4, [], workers)
    assert reason.startswith("no worker of this cluster can ever run it (no worker is large enough: the task needs 64 cpu")


def test_never_servable_reason_no_groups_and_no_workers_yet_refuses_nothing() -> None:
    """Workers of a cluster without scale groups may still register; the pending reason says none has."""
    tpu = TaskDemand("", "/t", Resources(1000, GIB, 0), Device("tpu", "v5litepod-16", 0))

    assert never_servable_reason(tpu, 1, [], []) == ""


def test_never_servable_reason_group_reasons_and_worker_reason_both_named() -> None:
    huge = TaskDemand("", "/h", Resources(1_000_000, GIB, 0))

    reason = never_servable_reason(huge, 1, [cpu_group()], [idle_worker("manual-0", cpu=16)])

    assert reason.startswith("no scale group or worker of this cluster can ever run it (cpu: ")
    assert "registered workers: no worker is large enough" in reason
