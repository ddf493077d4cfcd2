"""The controller's and the autoscaler's settings, built from a resolved cluster config.

Every default comes from `iris.config.DEFAULT_*` (which `apply_defaults` also writes into a
config), so a setting has one source whether the daemon was started from a config or not.
"""

from __future__ import annotations

from dataclasses import dataclass

from iris.config import (
    DEFAULT_EVALUATION_INTERVAL,
    DEFAULT_FAILURE_BACKOFF_MAX,
    DEFAULT_HEARTBEAT_INTERVAL,
    DEFAULT_QUOTA_BACKOFF,
    DEFAULT_SCALE_DOWN_DELAY,
    DEFAULT_SCALE_UP_DELAY,
    DEFAULT_STARTUP_GRACE_PERIOD,
    DEFAULT_WORKER_TIMEOUT,
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
