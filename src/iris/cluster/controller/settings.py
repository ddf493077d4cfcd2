"""The controller daemon's, the controller's and the autoscaler's settings, built from a resolved
cluster config by `DaemonSettings.from_config`, the one builder every way of starting a controller
uses (the daemon's `serve`, a local cluster, tests and benchmarks).

Every default comes from `iris.config.DEFAULT_*` (which `apply_defaults` writes into a config),
so a setting has one source whether the daemon was started from a config file or not.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from iris.cluster.limits import DEFAULT_INPUT_LIMITS, InputLimits, limits_from_config
from iris.config import (
    DEFAULT_CONTROLLER_PORT,
    DEFAULT_EVALUATION_INTERVAL,
    DEFAULT_FAILURE_BACKOFF_MAX,
    DEFAULT_HEARTBEAT_INTERVAL,
    DEFAULT_QUOTA_BACKOFF,
    DEFAULT_SCALE_DOWN_DELAY,
    DEFAULT_SCALE_UP_DELAY,
    DEFAULT_STARTUP_GRACE_PERIOD,
    DEFAULT_WORKER_TIMEOUT,
    apply_defaults,
    default_state_dir,
)
from iris.rpc import config_pb2

# A heartbeat RPC that takes longer than this counts as failed.
HEARTBEAT_RPC_TIMEOUT_S = 10.0
# Heartbeat RPCs open at once. A round over ten thousand workers sent all at once would open as
# many connections, overflow listen backlogs and time out in the queue; a few hundred keep both
# ends busy without a backlog.
MAX_HEARTBEATS_IN_FLIGHT = 256
# The scheduler also runs this often with no event, for time-based rules such as timeouts.
SCHEDULER_FALLBACK_INTERVAL_S = 1.0
# The failure backoff never starts below this, however fast the autoscaler evaluates.
MIN_FAILURE_BACKOFF_MS = 1000


@dataclass(frozen=True)
class ControllerSettings:
    advertised_address: str
    heartbeat_interval_s: float = DEFAULT_HEARTBEAT_INTERVAL.seconds
    worker_timeout_s: float = DEFAULT_WORKER_TIMEOUT.seconds
    heartbeat_rpc_timeout_s: float = HEARTBEAT_RPC_TIMEOUT_S
    max_heartbeats_in_flight: int = MAX_HEARTBEATS_IN_FLIGHT
    scheduler_fallback_interval_s: float = SCHEDULER_FALLBACK_INTERVAL_S

    @property
    def worker_timeout_ms(self) -> int:
        return int(self.worker_timeout_s * 1000)


@dataclass(frozen=True)
class AutoscalerSettings:
    scale_up_delay_ms: int = DEFAULT_SCALE_UP_DELAY.milliseconds
    scale_down_delay_ms: int = DEFAULT_SCALE_DOWN_DELAY.milliseconds
    quota_backoff_ms: int = DEFAULT_QUOTA_BACKOFF.milliseconds
    failure_backoff_base_ms: int = DEFAULT_EVALUATION_INTERVAL.milliseconds
    failure_backoff_max_ms: int = DEFAULT_FAILURE_BACKOFF_MAX.milliseconds
    startup_grace_ms: int = DEFAULT_STARTUP_GRACE_PERIOD.milliseconds
    evaluation_interval_s: float = DEFAULT_EVALUATION_INTERVAL.seconds

    @classmethod
    def from_config(cls, config: config_pb2.IrisClusterConfig) -> AutoscalerSettings:
        """Settings of a (resolved) config; a field the config leaves at zero keeps its default."""
        auto = config.defaults.autoscaler
        timeouts = config.defaults.timeouts
        return cls(
            scale_up_delay_ms=auto.scale_up_delay.milliseconds,
            scale_down_delay_ms=auto.scale_down_delay.milliseconds,
            quota_backoff_ms=auto.quota_backoff.milliseconds,
            failure_backoff_base_ms=max(MIN_FAILURE_BACKOFF_MS, auto.evaluation_interval.milliseconds),
            failure_backoff_max_ms=auto.failure_backoff_max.milliseconds,
            startup_grace_ms=max(auto.startup_grace_period.milliseconds, timeouts.init_timeout.milliseconds),
            evaluation_interval_s=auto.evaluation_interval.milliseconds / 1000
            or DEFAULT_EVALUATION_INTERVAL.seconds,
        )


@dataclass(frozen=True)
class DaemonSettings:
    """What a controller daemon runs with: a resolved config, and where it keeps state and listens."""

    config: config_pb2.IrisClusterConfig
    state_dir: Path
    bundle_prefix: str
    host: str
    port: int
    advertise_host: str | None = None
    config_path: str | None = None
    input_limits: InputLimits = DEFAULT_INPUT_LIMITS
    scheduler_fallback_interval_s: float = SCHEDULER_FALLBACK_INTERVAL_S
    # False for a cluster whose state is deleted when it stops (see `StoreBase`).
    durable_store: bool = True

    @classmethod
    def from_config(
        cls,
        config: config_pb2.IrisClusterConfig | None = None,
        *,
        state_dir: Path | None = None,
        host: str | None = None,
        port: int | None = None,
        bundle_prefix: str | None = None,
        config_path: str | None = None,
        advertise_host: str | None = None,
        input_limits: InputLimits | None = None,
        scheduler_fallback_interval_s: float = SCHEDULER_FALLBACK_INTERVAL_S,
    ) -> DaemonSettings:
        """Settings of a config (resolved here; none is an empty one), with command-line overrides.

        Without overrides: state in the local controller's state_dir (else ~/.iris/NAME), the
        configured port (else the default), 127.0.0.1 for a local controller and every interface
        otherwise, bundles under storage.bundle_prefix, the config's input limits."""
        resolved = apply_defaults(config if config is not None else config_pb2.IrisClusterConfig())
        kind = resolved.controller.WhichOneof("controller")
        local = resolved.controller.local if kind == "local" else None
        if state_dir is None:
            state_dir = Path(local.state_dir if local is not None else default_state_dir(resolved.name))
        if port is None:
            port = (getattr(resolved.controller, kind).port if kind else 0) or DEFAULT_CONTROLLER_PORT
        return cls(
            config=resolved,
            state_dir=state_dir.expanduser(),
            bundle_prefix=bundle_prefix or resolved.storage.bundle_prefix,
            host=host or ("127.0.0.1" if local is not None else "0.0.0.0"),
            port=port,
            advertise_host=advertise_host,
            config_path=config_path,
            input_limits=input_limits or limits_from_config(resolved.limits),
            scheduler_fallback_interval_s=scheduler_fallback_interval_s,
        )

    def controller_settings(self, advertised_address: str) -> ControllerSettings:
        timeouts = self.config.defaults.timeouts
        return ControllerSettings(
            advertised_address=advertised_address,
            heartbeat_interval_s=timeouts.heartbeat_interval.milliseconds / 1000,
            worker_timeout_s=timeouts.worker_timeout.milliseconds / 1000,
            scheduler_fallback_interval_s=self.scheduler_fallback_interval_s,
        )
