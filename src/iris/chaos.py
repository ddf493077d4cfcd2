"""Named fault-injection points.

Production code calls `chaos.maybe_fail(POINT, SomeError)` where real failures happen; a rule that
fires raises `SomeError`, the type the real failure would raise, so the code's real recovery path
runs. With no rules enabled the call is one truth test of an empty dict.

Each rule has its own random generator seeded from the run's seed, the process's stream name (a
worker's id, "controller") and the point's name, so a run is reproducible point by point however
the points interleave, and two workers given the same seed still fail at different moments. Every injection is counted
(`injections()`), and when IRIS_CHAOS_LOG names a file, also appended to it as one line holding
the point's name: a daemon SIGKILLed by a test leaves its count behind.

Tests enable rules in-process with `enable()`; daemons started as subprocesses read them from the
environment (`load_from_env()`, called by both daemons at start):
    IRIS_CHAOS="point=probability[:count],..."   e.g. "controller.dispatch=0.2,worker.register=1.0:3"
    IRIS_CHAOS_SEED=1234                         the run's seed (default 0)
    IRIS_CHAOS_LOG=/path/to/injections.log       where injections are recorded
"""

from __future__ import annotations

import os
import random
import threading
import zlib
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass

# Where each point sits, and what it raises there.
CONTROLLER_DISPATCH = "controller.dispatch"  # a heartbeat carrying new attempts, before sending (ConnectError)
CONTROLLER_HEARTBEAT = "controller.heartbeat"  # any heartbeat, before sending (ConnectError)
CONTROLLER_HEARTBEAT_ANSWER = "controller.heartbeat_answer"  # the worker acted, its answer is lost (ConnectError)
CONTROLLER_STORE_WRITE = "controller.store_write"  # a store transaction fails (sqlite3.OperationalError)
CONTROLLER_BUNDLE_UPLOAD = "controller.bundle_upload"  # storing a submitted bundle (StorageError)
WORKER_BUNDLE_DOWNLOAD = "worker.bundle_download"  # fetching a task's bundle (StorageError)
WORKER_REGISTER = "worker.register"  # a worker's Register call (ConnectError)
CONTAINER_CREATE = "container.create"  # the runtime creating a task's container (ContainerError)
CONTAINER_START = "container.start"  # the runtime starting the task's command (ContainerError)
CONTAINER_KILL = "container.kill"  # the runtime stopping a container (ContainerError)
PLATFORM_CREATE_SLICE = "platform.create_slice"  # the autoscaler creating a slice (PlatformError)
PLATFORM_DESCRIBE_SLICE = "platform.describe_slice"  # the autoscaler polling a slice (PlatformError)
PLATFORM_TERMINATE_SLICE = "platform.terminate_slice"  # the autoscaler ending a slice (PlatformError)

POINTS = (
    CONTROLLER_DISPATCH,
    CONTROLLER_HEARTBEAT,
    CONTROLLER_HEARTBEAT_ANSWER,
    CONTROLLER_STORE_WRITE,
    CONTROLLER_BUNDLE_UPLOAD,
    WORKER_BUNDLE_DOWNLOAD,
    WORKER_REGISTER,
    CONTAINER_CREATE,
    CONTAINER_START,
    CONTAINER_KILL,
    PLATFORM_CREATE_SLICE,
    PLATFORM_DESCRIBE_SLICE,
    PLATFORM_TERMINATE_SLICE,
)

ENV_RULES = "IRIS_CHAOS"
ENV_SEED = "IRIS_CHAOS_SEED"
ENV_LOG = "IRIS_CHAOS_LOG"


class ChaosError(RuntimeError):
    """Raised at an injection point whose caller names no error type of its own."""


@dataclass
class _Rule:
    probability: float
    remaining: int | None  # None: unlimited
    rng: random.Random


_rules: dict[str, _Rule] = {}
_counts: Counter[str] = Counter()
_seed = 0
_stream = ""
_log_path: str | None = None
_lock = threading.Lock()


def _point_rng(point: str) -> random.Random:
    # crc32, not hash(): string hashes are salted per process, and daemons must draw alike.
    return random.Random(_seed * 1_000_003 + zlib.crc32(f"{_stream}/{point}".encode()))


def enable(point: str, probability: float = 1.0, count: int | None = None) -> None:
    """Make `point` fail with `probability`, `count` times at most (None: without end)."""
    if point not in POINTS:
        raise ValueError(f"unknown chaos point {point!r}; known points: {', '.join(POINTS)}")
    if not 0.0 <= probability <= 1.0:
        raise ValueError(f"probability must be within [0, 1], got {probability}")
    if count is not None and count < 1:
        raise ValueError(f"count must be at least 1, got {count}")
    with _lock:
        _rules[point] = _Rule(probability, count, _point_rng(point))


def seed(value: int, stream: str = "") -> None:
    """Seed the rules enabled from now on; `stream` tells apart processes sharing the seed."""
    global _seed, _stream
    with _lock:
        _seed, _stream = value, stream


def record_to(path: str | None) -> None:
    """Append one line per injection to `path` as well as counting it (None stops)."""
    global _log_path
    with _lock:
        _log_path = path


def reset() -> None:
    global _seed, _stream, _log_path
    with _lock:
        _rules.clear()
        _counts.clear()
        _seed, _stream, _log_path = 0, "", None


def injections() -> dict[str, int]:
    """How often each point has fired in this process since the last reset."""
    with _lock:
        return dict(_counts)


def maybe_fail(point: str, error: Callable[[str], BaseException] = ChaosError) -> None:
    """Raise `error(message)` if the rule for `point` fires."""
    if not _rules:
        return
    with _lock:
        rule = _rules.get(point)
        if rule is None or rule.rng.random() >= rule.probability:
            return
        if rule.remaining is not None:
            rule.remaining -= 1
            if rule.remaining <= 0:
                del _rules[point]
        _counts[point] += 1
        if _log_path is not None:
            with open(_log_path, "a") as log:
                log.write(point + "\n")
    raise error(f"chaos: injected failure at {point}")


def parse_rules(spec: str) -> list[tuple[str, float, int | None]]:
    """(point, probability, count) of each entry of an IRIS_CHAOS value."""
    rules = []
    for item in filter(None, (part.strip() for part in spec.split(","))):
        point, _, rest = item.partition("=")
        probability_text, _, count_text = rest.partition(":")
        try:
            rules.append((point.strip(), float(probability_text or 1.0), int(count_text) if count_text else None))
        except ValueError as exc:
            raise ValueError(f"invalid {ENV_RULES} entry {item!r}: {exc}") from None
    return rules


def load_from_env(stream: str = "", environ: dict[str, str] | None = None) -> None:
    """Enable the rules, seed and log the environment names, so daemons started by tests can fail;
    `stream` names this process among those sharing the seed."""
    env = os.environ if environ is None else environ
    seed_text = env.get(ENV_SEED, "")
    try:
        seed(int(seed_text) if seed_text else 0, stream)
    except ValueError:
        raise ValueError(f"invalid {ENV_SEED} {seed_text!r}: expected an integer") from None
    record_to(env.get(ENV_LOG) or None)
    for point, probability, count in parse_rules(env.get(ENV_RULES, "")):
        try:
            enable(point, probability, count)
        except ValueError as exc:
            raise ValueError(f"invalid {ENV_RULES} entry for {point!r}: {exc}") from None


def count_log(path: str | os.PathLike[str]) -> dict[str, int]:
    """Injections per point recorded in an IRIS_CHAOS_LOG file (by every process that shared it)."""
    try:
        with open(path) as log:
            return dict(Counter(line.strip() for line in log if line.strip()))
    except FileNotFoundError:
        return {}
