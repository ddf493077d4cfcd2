"""The controller's scheduling loop: after a pass, the next one waits at least as long as the pass
took of the controller's CPU, not as long as it took on the clock; short passes run on the event
loop, and after a long one the passes run on a thread while the controller answers requests."""

from __future__ import annotations

import asyncio
import threading
import time
from collections import deque
from collections.abc import Callable
from pathlib import Path

import httpx
from controller_support import running_controller

from iris.cluster.controller.controller import (
    INLINE_PASS_MAX_NEW_TASKS,
    INLINE_PASS_MAX_S,
    INLINE_PASS_MEMORY_S,
    Controller,
    pass_runs_on_loop,
)
from iris.cluster.controller.store import Effects
from iris.time import wait_until

# What the slow pass below spends waiting, as a pass does while heartbeats and requests take the
# interpreter's turns: the clock runs, the pass's CPU does not.
PASS_WAIT_S = 0.6


def _scheduling_with(controller: Controller, schedule: Callable[[], Effects]) -> asyncio.AbstractEventLoop:
    """Make `schedule` the controller's pass once the start-up pass has run (it is what `resume`
    asks for, and it has run once the loop waits for a wake-up); returns the controller's loop."""
    event = controller._schedule_event
    assert event is not None
    wait_until(lambda: not event.is_set(), 10, 0.01, "the start-up pass")
    controller.core.schedule = schedule  # type: ignore[method-assign]
    loop = controller._loop
    assert loop is not None
    return loop


def test_scheduler_loop_pass_that_waited_long_does_not_hold_back_the_next_pass(tmp_path: Path) -> None:
    with running_controller(tmp_path, scheduler_fallback_interval_s=60) as daemon:
        controller = daemon.controller
        original = controller.core.schedule
        passes: list[tuple[float, float]] = []
        slow_pass_started = threading.Event()

        def schedule():
            started = time.monotonic()
            if not passes:
                slow_pass_started.set()
                time.sleep(PASS_WAIT_S)
            effects = original()
            passes.append((started, time.monotonic()))
            return effects

        loop = _scheduling_with(controller, schedule)
        loop.call_soon_threadsafe(controller.wake_scheduler)
        assert slow_pass_started.wait(10)
        loop.call_soon_threadsafe(controller.wake_scheduler)  # a job's end, while the slow pass runs
        wait_until(lambda: len(passes) >= 2, 10, 0.01, "the pass after the slow one")

        (_, slow_ended), (next_started, _) = passes[:2]
        assert next_started - slow_ended < PASS_WAIT_S / 2


def test_pass_runs_on_loop_while_recent_passes_were_short_and_few_tasks_came() -> None:
    short, long = INLINE_PASS_MAX_S / 2, INLINE_PASS_MAX_S * 2
    assert pass_runs_on_loop(deque(), 0, 100.0)
    assert pass_runs_on_loop(deque([(99.0, short), (99.5, short)]), INLINE_PASS_MAX_NEW_TASKS, 100.0)
    recent = deque([(99.0 - INLINE_PASS_MEMORY_S, long), (99.5, short)])
    assert pass_runs_on_loop(recent, 3, 100.0)
    assert list(recent) == [(99.5, short)]  # the long pass is older than the memory
    assert not pass_runs_on_loop(deque([(99.0, long), (99.5, short)]), 3, 100.0)
    # A burst of submissions, or no pass yet to count from: its size is the pass's, unknown.
    assert not pass_runs_on_loop(deque([(99.5, short)]), INLINE_PASS_MAX_NEW_TASKS + 1, 100.0)
    assert not pass_runs_on_loop(deque(), None, 100.0)


def _on_event_loop() -> bool:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True


def test_scheduler_loop_short_passes_on_the_loop_after_a_long_one_on_a_thread_while_requests_answer(
    tmp_path: Path,
) -> None:
    with running_controller(tmp_path, scheduler_fallback_interval_s=60) as daemon:
        controller = daemon.controller
        original = controller.core.schedule
        passes: list[bool] = []  # whether each pass ran on the event loop
        waiting_pass_started = threading.Event()
        health_answered = threading.Event()

        def schedule():
            passes.append(_on_event_loop())
            if len(passes) == 2:  # long in CPU: the passes after it go to a thread
                spin_until = time.thread_time() + INLINE_PASS_MAX_S * 4
                while time.thread_time() < spin_until:
                    pass
            if len(passes) == 3:  # long on the clock, as a pass over a big queue is
                waiting_pass_started.set()
                health_answered.wait(PASS_WAIT_S)
            return original()

        loop = _scheduling_with(controller, schedule)
        for count in (1, 2):
            loop.call_soon_threadsafe(controller.wake_scheduler)
            wait_until(lambda count=count: len(passes) == count, 10, 0.01, f"pass {count}")
        loop.call_soon_threadsafe(controller.wake_scheduler)
        assert waiting_pass_started.wait(10)

        asked = time.monotonic()
        assert httpx.get(f"{daemon.url}/health", timeout=10).status_code == 200
        answered_in = time.monotonic() - asked
        health_answered.set()

        assert passes[:3] == [True, True, False]
        assert answered_in < PASS_WAIT_S / 2, f"/health took {answered_in:.2f}s while a pass ran"
