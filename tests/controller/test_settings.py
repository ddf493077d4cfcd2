"""Daemon settings come from the resolved config by one builder; every default from config.DEFAULT_*."""

from __future__ import annotations

from pathlib import Path

from iris.cluster.controller.settings import DaemonSettings
from iris.config import (
    DEFAULT_CONTROLLER_PORT,
    DEFAULT_HEARTBEAT_INTERVAL,
    DEFAULT_WORKER_TIMEOUT,
    default_state_dir,
)
from iris.rpc import config_pb2


def test_daemon_settings_empty_config_takes_every_default_from_config_constants():
    settings = DaemonSettings.from_config()

    controller = settings.controller_settings("http://10.0.0.2:10000")

    assert settings.port == DEFAULT_CONTROLLER_PORT
    assert settings.host == "0.0.0.0"
    assert settings.state_dir == Path(default_state_dir("iris"))
    assert controller.heartbeat_interval_s == DEFAULT_HEARTBEAT_INTERVAL.seconds
    assert controller.worker_timeout_s == DEFAULT_WORKER_TIMEOUT.seconds
    assert controller.advertised_address == "http://10.0.0.2:10000"


def test_daemon_settings_local_controller_listens_on_loopback_with_its_port_and_state(tmp_path: Path):
    config = config_pb2.IrisClusterConfig(name="dev")
    config.platform.local.SetInParent()
    config.controller.local.port = 12345
    config.controller.local.state_dir = str(tmp_path / "state")
    config.defaults.timeouts.heartbeat_interval.milliseconds = 1500

    settings = DaemonSettings.from_config(config)

    assert (settings.host, settings.port, settings.state_dir) == ("127.0.0.1", 12345, tmp_path / "state")
    assert settings.bundle_prefix == f"file://{tmp_path / 'state' / 'bundles'}"
    assert settings.controller_settings("u").heartbeat_interval_s == 1.5
    assert (
        settings.config.defaults.timeouts.worker_timeout.milliseconds == DEFAULT_WORKER_TIMEOUT.milliseconds
    )


def test_daemon_settings_command_line_overrides_win_over_the_config(tmp_path: Path):
    config = config_pb2.IrisClusterConfig()
    config.controller.manual.port = 9999
    config.storage.bundle_prefix = "gs://b/iris/bundles"

    settings = DaemonSettings.from_config(
        config, state_dir=tmp_path, host="127.0.0.1", port=0, bundle_prefix=f"file://{tmp_path}/b"
    )

    assert (settings.state_dir, settings.host, settings.port) == (tmp_path, "127.0.0.1", 0)
    assert settings.bundle_prefix == f"file://{tmp_path}/b"
    assert DaemonSettings.from_config(config).port == 9999
