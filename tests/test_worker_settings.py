"""The worker daemon's settings come from the resolved config by one builder, flags overriding."""

from __future__ import annotations

from pathlib import Path

import pytest

from iris.cluster.worker.settings import MIN_REREGISTER_AFTER_S, WorkerDaemonSettings
from iris.config import DEFAULT_KILL_GRACE_PERIOD, DEFAULT_WORKER_PORT, apply_defaults
from iris.rpc import config_pb2


def test_worker_settings_without_config_take_a_local_clusters_defaults():
    settings = WorkerDaemonSettings.from_config(controller_address="10.0.0.2:10000")

    local = config_pb2.IrisClusterConfig()
    local.platform.local.SetInParent()
    expected_cache = Path(apply_defaults(local).defaults.bootstrap.cache_dir)
    assert settings.controller_address == "http://10.0.0.2:10000"
    assert (settings.port, settings.runtime, settings.cache_dir) == (
        DEFAULT_WORKER_PORT,
        "process",
        expected_cache,
    )
    assert settings.kill_grace_s == DEFAULT_KILL_GRACE_PERIOD.seconds
    assert settings.reregister_after_s == MIN_REREGISTER_AFTER_S


def test_worker_settings_from_bootstrap_config_and_flags_override_it(tmp_path: Path):
    config = config_pb2.IrisClusterConfig()
    config.platform.gcp.project_id = "p"
    bootstrap = config.defaults.bootstrap
    bootstrap.controller_address = "http://10.1.0.2:10000"
    bootstrap.worker_port = 10500
    bootstrap.task_image = "img:1"
    config.defaults.timeouts.heartbeat_interval.milliseconds = 20_000
    config.defaults.timeouts.kill_grace_period.milliseconds = 4_000

    from_config = WorkerDaemonSettings.from_config(config)
    overridden = WorkerDaemonSettings.from_config(
        config, port=0, runtime="process", cache_dir=str(tmp_path), kill_grace_s=1.0
    )

    assert (from_config.controller_address, from_config.port, from_config.runtime) == (
        "http://10.1.0.2:10000",
        10500,
        "docker",
    )
    assert (from_config.kill_grace_s, from_config.task_image, from_config.reregister_after_s) == (
        4.0,
        "img:1",
        60.0,
    )
    assert (overridden.port, overridden.runtime, overridden.cache_dir, overridden.kill_grace_s) == (
        0,
        "process",
        tmp_path,
        1.0,
    )


def test_worker_settings_without_any_controller_address_says_how_to_give_one():
    with pytest.raises(ValueError, match="--controller-address"):
        WorkerDaemonSettings.from_config()
