"""The chaos module: seeded, counted, configured from the environment, raising the caller's error type."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pytest

from iris import chaos


@pytest.fixture(autouse=True)
def clean_chaos() -> Iterator[None]:
    chaos.reset()
    yield
    chaos.reset()


def _fires(point: str, draws: int) -> list[bool]:
    fired = []
    for _ in range(draws):
        try:
            chaos.maybe_fail(point)
            fired.append(False)
        except chaos.ChaosError:
            fired.append(True)
    return fired


def test_chaos_same_seed_same_point_fires_identically() -> None:
    chaos.seed(7)
    chaos.enable(chaos.CONTROLLER_DISPATCH, 0.3)
    first = _fires(chaos.CONTROLLER_DISPATCH, 200)
    chaos.reset()
    chaos.seed(7)
    chaos.enable(chaos.CONTROLLER_DISPATCH, 0.3)
    # Another point drawing in between must not change this point's sequence.
    chaos.enable(chaos.WORKER_REGISTER, 0.5)
    interleaved = []
    for _ in range(200):
        _fires(chaos.WORKER_REGISTER, 1)
        interleaved.extend(_fires(chaos.CONTROLLER_DISPATCH, 1))
    assert first == interleaved
    assert 30 < sum(first) < 90
    chaos.reset()
    chaos.seed(8)
    chaos.enable(chaos.CONTROLLER_DISPATCH, 0.3)
    assert _fires(chaos.CONTROLLER_DISPATCH, 200) != first
    chaos.reset()
    chaos.seed(7, stream="worker-2")
    chaos.enable(chaos.CONTROLLER_DISPATCH, 0.3)
    assert _fires(chaos.CONTROLLER_DISPATCH, 200) != first


def test_chaos_rule_raises_callers_error_type_and_counts() -> None:
    chaos.enable(chaos.CONTROLLER_STORE_WRITE, 1.0, count=2)
    for _ in range(2):
        with pytest.raises(sqlite3.OperationalError, match="controller.store_write"):
            chaos.maybe_fail(chaos.CONTROLLER_STORE_WRITE, sqlite3.OperationalError)
    chaos.maybe_fail(chaos.CONTROLLER_STORE_WRITE, sqlite3.OperationalError)  # the count is spent
    assert chaos.injections() == {chaos.CONTROLLER_STORE_WRITE: 2}


def test_chaos_unknown_point_or_bad_probability_refused() -> None:
    with pytest.raises(ValueError, match="unknown chaos point 'controller.dispatc'"):
        chaos.enable("controller.dispatc")
    with pytest.raises(ValueError, match="probability"):
        chaos.enable(chaos.CONTROLLER_DISPATCH, 1.5)


def test_chaos_load_from_env_enables_seeds_and_logs(tmp_path: Path) -> None:
    log = tmp_path / "injections.log"
    chaos.load_from_env(
        "worker-1",
        {
            chaos.ENV_RULES: f"{chaos.CONTAINER_CREATE}=1.0:3, {chaos.PLATFORM_CREATE_SLICE}=0.0",
            chaos.ENV_SEED: "42",
            chaos.ENV_LOG: str(log),
        }
    )
    assert sum(_fires(chaos.CONTAINER_CREATE, 5)) == 3
    assert not any(_fires(chaos.PLATFORM_CREATE_SLICE, 5))
    assert chaos.count_log(log) == {chaos.CONTAINER_CREATE: 3}


def test_chaos_load_from_env_bad_entry_names_it() -> None:
    with pytest.raises(ValueError, match="invalid IRIS_CHAOS entry 'controller.dispatch=often'"):
        chaos.load_from_env(environ={chaos.ENV_RULES: "controller.dispatch=often"})
    with pytest.raises(ValueError, match="IRIS_CHAOS_SEED"):
        chaos.load_from_env(environ={chaos.ENV_SEED: "x"})
