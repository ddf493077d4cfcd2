"""What the smoke test's validation jobs ask for, worked out from a cluster config alone."""

from __future__ import annotations

from iris.cli.validation import target_of
from iris.rpc import config_pb2


def _config_with_group(cpu: int) -> config_pb2.IrisClusterConfig:
    config = config_pb2.IrisClusterConfig()
    group = config.scale_groups["cpu-64"]
    group.resources.cpu = cpu
    group.slice_template.num_vms = 1
    group.slice_template.accelerator_type = config_pb2.ACCELERATOR_TYPE_CPU
    return config


def test_validation_concurrent_job_fits_a_worker_short_of_its_configured_cpu_but_never_twice() -> None:
    target = target_of(_config_with_group(64))

    asked = target.resources(whole_worker=True).cpu

    # A node whose worker lost two cores to another Pod (the controller's) still takes one job...
    assert asked <= 62
    # ...and no worker, however empty, takes two, so the jobs need a worker each.
    assert 2 * asked > 64


def test_validation_simple_job_asks_a_tenth_of_a_core() -> None:
    assert target_of(_config_with_group(64)).resources().cpu == 0.1
