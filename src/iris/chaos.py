"""Named fault-injection points.

Production code calls `chaos.maybe_fail("worker.heartbeat")` at points where real failures happen
(dispatch, heartbeat, bundle download, container create, platform calls). With no rules enabled the
call is one dict lookup on an empty dict. Tests enable rules in-process with `enable()`, or for
daemons through the IRIS_CHAOS environment variable: "point=probability[:count],..." e.g.
"worker.heartbeat=1.0:3" fails the next three heartbeats.
"""

from __future__ import annotations

import os
import random
import threading
from dataclasses import dataclass


class ChaosError(RuntimeError):
    """Raised at an injection point whose rule fired."""


@dataclass
class _Rule:
    probability: float
    remaining: int | None  # None: unlimited


_rules: dict[str, _Rule] = {}
_lock = threading.Lock()


def enable(point: str, probability: float = 1.0, count: int | None = None) -> None:
    if not 0.0 <= probability <= 1.0:
        raise ValueError(f"probability must be within [0, 1], got {probability}")
    with _lock:
        _rules[point] = _Rule(probability, count)


def reset() -> None:
    with _lock:
        _rules.clear()


def maybe_fail(point: str) -> None:
    if not _rules:
        return
    with _lock:
        rule = _rules.get(point)
        if rule is None or random.random() >= rule.probability:
            return
        if rule.remaining is not None:
            rule.remaining -= 1
            if rule.remaining <= 0:
                del _rules[point]
    raise ChaosError(f"chaos: injected failure at {point}")


def load_from_env(value: str | None = None) -> None:
    """Parse IRIS_CHAOS so daemons started by tests can have faults injected."""
    spec = value if value is not None else os.environ.get("IRIS_CHAOS", "")
    for item in filter(None, (part.strip() for part in spec.split(","))):
        point, _, rest = item.partition("=")
        probability_text, _, count_text = rest.partition(":")
        try:
            enable(point, float(probability_text or 1.0), int(count_text) if count_text else None)
        except ValueError as exc:
            raise ValueError(f"invalid IRIS_CHAOS entry {item!r}: {exc}") from None
