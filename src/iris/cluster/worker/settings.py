"""A worker daemon's settings, built from a resolved cluster config by one builder.

The config is the one the worker was bootstrapped with (`--config`); a worker started by hand
without one runs with a local cluster's defaults. Command-line flags override the config. Every
default comes from `iris.config` (through `apply_defaults`), never from a literal here.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from iris.cluster.limits import InputLimits, limits_from_config
from iris.config import apply_defaults
from iris.rpc import config_pb2

# Without a heartbeat for this many intervals (and at least MIN_REREGISTER_AFTER_S) the worker
# assumes the controller forgot it (a restart on fresh state) and registers again.
REREGISTER_AFTER_HEARTBEATS = 3
MIN_REREGISTER_AFTER_S = 15.0


def reregister_delay_s(heartbeat_interval_s: float) -> float:
    return max(REREGISTER_AFTER_HEARTBEATS * heartbeat_interval_s, MIN_REREGISTER_AFTER_S)


def normalize_address(address: str) -> str:
    address = address.strip().rstrip("/")
    return address if "://" in address else f"http://{address}"


@dataclass(frozen=True)
class WorkerDaemonSettings:
    controller_address: str
    host: str
    port: int
    runtime: str
    cache_dir: Path
    kill_grace_s: float
    task_image: str
    reregister_after_s: float
    input_limits: InputLimits

    @classmethod
    def from_config(
        cls,
        config: config_pb2.IrisClusterConfig | None = None,
        *,
        controller_address: str | None = None,
        host: str = "0.0.0.0",
        port: int | None = None,
        runtime: str | None = None,
        cache_dir: str | None = None,
        kill_grace_s: float | None = None,
        task_image: str | None = None,
    ) -> WorkerDaemonSettings:
        if config is None:
            config = config_pb2.IrisClusterConfig()
            config.platform.local.SetInParent()
        resolved = apply_defaults(config)
        bootstrap = resolved.defaults.bootstrap
        timeouts = resolved.defaults.timeouts
        address = controller_address or bootstrap.controller_address
        if not address:
            raise ValueError("give --controller-address or a config whose bootstrap sets controller_address")
        return cls(
            controller_address=normalize_address(address),
            host=host,
            port=bootstrap.worker_port if port is None else port,
            runtime=runtime or bootstrap.runtime,
            cache_dir=Path(cache_dir or bootstrap.cache_dir).expanduser(),
            kill_grace_s=timeouts.kill_grace_period.milliseconds / 1000
            if kill_grace_s is None
            else kill_grace_s,
            task_image=task_image or bootstrap.task_image,
            reregister_after_s=reregister_delay_s(timeouts.heartbeat_interval.milliseconds / 1000),
            input_limits=limits_from_config(resolved.limits),
        )
