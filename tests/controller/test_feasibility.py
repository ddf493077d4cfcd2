"""Refusing at submission a job that no scale group and no registered worker could ever run."""

from __future__ import annotations

from iris.cluster.controller.feasibility import never_servable_reason
from iris.cluster.controller.scaling_group import ScalingGroup
from iris.cluster.controller.scheduler import Resources, TaskDemand
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

    assert never_servable_reason(huge, 1, [cpu_group()], [Resources(2_000_000, 64 * GIB, 0)]) == ""
    assert never_servable_reason(small, 1, [cpu_group()], []) == ""
