"""Time values that cross the wire (Duration, Timestamp) and helpers for waiting and retrying.

Protos carry plain milliseconds; these wrappers give them units, parsing ("1h30m") and a compact
printed form so that configs, logs and the CLI agree on one spelling.
"""

from __future__ import annotations

import datetime
import random
import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from decimal import Decimal
from typing import TypeVar

from iris.rpc import time_pb2

T = TypeVar("T")

# A source of "now" in epoch milliseconds; components that decide by time take one so tests can
# drive them with a clock they advance.
Clock = Callable[[], int]


def now_ms() -> int:
    """Wall-clock time in epoch milliseconds: the one clock the daemons read."""
    return time.time_ns() // 1_000_000

_MS_PER_UNIT: dict[str, int] = {
    "d": 86_400_000,
    "h": 3_600_000,
    "m": 60_000,
    "s": 1_000,
    "ms": 1,
}
_DURATION_PART = re.compile(r"(\d+(?:\.\d+)?)\s*(ms|d|h|m|s)")
_DURATION_TEXT = re.compile(rf"(?:{_DURATION_PART.pattern}\s*)+")


@dataclass(frozen=True, order=True)
class Duration:
    """A span of time with millisecond resolution."""

    milliseconds: int

    @classmethod
    def from_ms(cls, milliseconds: int) -> Duration:
        return cls(int(milliseconds))

    @classmethod
    def from_seconds(cls, seconds: float) -> Duration:
        return cls(round(seconds * 1000))

    @classmethod
    def from_proto(cls, proto: time_pb2.Duration) -> Duration:
        return cls(proto.milliseconds)

    def to_proto(self) -> time_pb2.Duration:
        return time_pb2.Duration(milliseconds=self.milliseconds)

    @property
    def seconds(self) -> float:
        return self.milliseconds / 1000

    @classmethod
    def parse(cls, text: str) -> Duration:
        """Parse "250ms", "30s", "5m", "1h30m", "2d" or "1.5s".

        A bare number is rejected: whether "30" means seconds or milliseconds is exactly the kind
        of guess that turns a 30 second timeout into a 30 millisecond one.
        """
        stripped = text.strip()
        if re.fullmatch(r"\d+(?:\.\d+)?", stripped):
            raise ValueError(
                f"duration {text!r} has no unit; write e.g. '{stripped}s' or '{stripped}ms' "
                "(units: ms, s, m, h, d)"
            )
        if not stripped or not _DURATION_TEXT.fullmatch(stripped):
            raise ValueError(
                f"invalid duration {text!r}; expected a number with a unit such as "
                "'250ms', '30s', '5m', '1h30m' or '2d'"
            )
        total = Decimal(0)
        for amount, unit in _DURATION_PART.findall(stripped):
            total += Decimal(amount) * _MS_PER_UNIT[unit]
        if total != total.to_integral_value():
            raise ValueError(f"duration {text!r} is finer than the 1ms resolution")
        return cls(int(total))

    def __str__(self) -> str:
        if self.milliseconds < 0:
            return f"-{Duration(-self.milliseconds)}"
        if self.milliseconds < 1000:
            return f"{self.milliseconds}ms"
        remaining = self.milliseconds
        parts: list[str] = []
        for unit in ("d", "h", "m"):
            count, remaining = divmod(remaining, _MS_PER_UNIT[unit])
            if count:
                parts.append(f"{count}{unit}")
        whole_seconds, millis = divmod(remaining, 1000)
        if millis:
            parts.append(f"{whole_seconds}.{millis:03d}".rstrip("0") + "s")
        elif whole_seconds:
            parts.append(f"{whole_seconds}s")
        return "".join(parts)


@dataclass(frozen=True, order=True)
class Timestamp:
    """A point in wall-clock time, milliseconds since the Unix epoch."""

    epoch_ms: int

    @classmethod
    def now(cls) -> Timestamp:
        return cls(now_ms())

    @classmethod
    def from_seconds(cls, epoch_seconds: float) -> Timestamp:
        return cls(round(epoch_seconds * 1000))

    @classmethod
    def from_proto(cls, proto: time_pb2.Timestamp) -> Timestamp:
        return cls(proto.epoch_ms)

    def to_proto(self) -> time_pb2.Timestamp:
        return time_pb2.Timestamp(epoch_ms=self.epoch_ms)

    @property
    def seconds(self) -> float:
        return self.epoch_ms / 1000

    def age(self) -> Duration:
        return Duration(Timestamp.now().epoch_ms - self.epoch_ms)

    def isoformat(self) -> str:
        moment = datetime.datetime.fromtimestamp(self.epoch_ms / 1000, tz=datetime.UTC)
        return moment.isoformat(timespec="milliseconds")


class Deadline:
    """A point in monotonic time, immune to wall-clock jumps."""

    def __init__(self, expires_at_monotonic: float) -> None:
        self._expires_at = expires_at_monotonic

    @classmethod
    def from_now(cls, timeout: Duration | float) -> Deadline:
        seconds = timeout.seconds if isinstance(timeout, Duration) else float(timeout)
        return cls(time.monotonic() + seconds)

    def expired(self) -> bool:
        return time.monotonic() >= self._expires_at

    def remaining_seconds(self) -> float:
        return max(0.0, self._expires_at - time.monotonic())


class ExponentialBackoff:
    """Delays that grow by `factor` up to `maximum`, jittered so that retries do not synchronise."""

    def __init__(self, initial: float, maximum: float, factor: float = 2.0, jitter: float = 0.1) -> None:
        if initial <= 0:
            raise ValueError(f"initial delay must be positive, got {initial}")
        if maximum < initial:
            raise ValueError(f"maximum delay {maximum} is below the initial delay {initial}")
        if factor < 1:
            raise ValueError(f"factor must be at least 1, got {factor}")
        if not 0 <= jitter < 1:
            raise ValueError(f"jitter must be in [0, 1), got {jitter}")
        self._initial = initial
        self._maximum = maximum
        self._factor = factor
        self._jitter = jitter
        self._current = initial

    def next_delay(self) -> float:
        base = self._current
        self._current = min(self._current * self._factor, self._maximum)
        spread = base * self._jitter
        return min(self._maximum, base + random.uniform(-spread, spread))

    def reset(self) -> None:
        self._current = self._initial


def wait_until(
    predicate: Callable[[], T],
    timeout: float,
    poll_interval: float = 0.05,
    description: str = "condition",
) -> T:
    """Poll `predicate` until it returns something truthy and return that value.

    The predicate is checked once more at the deadline, so a condition that becomes true during
    the last sleep is not reported as a timeout.
    """
    deadline = Deadline.from_now(timeout)
    while True:
        value = predicate()
        if value:
            return value
        if deadline.expired():
            raise TimeoutError(f"timed out after {timeout}s waiting for {description}")
        time.sleep(min(poll_interval, deadline.remaining_seconds()))
