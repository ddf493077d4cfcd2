"""The controller's scheduling loop: after a pass, the next one waits at least as long as the pass
took of the controller's CPU, not as long as it took on the clock."""

from __future__ import annotations

import threading
import time
from pathlib import Path

from controller_support import running_controller

from iris.time import wait_until

# What the slow pass below spends waiting, as a pass does while heartbeats and requests take the
# interpreter's turns: the clock runs, the pass's CPU does not.
PASS_WAIT_S = 0.6


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

        # The start-up pass has run (it is what `resume` asks for) once the loop waits for a wake-up.
        event = controller._schedule_event
        assert event is not None
        wait_until(lambda: not event.is_set(), 10, 0.01, "the start-up pass")
        controller.core.schedule = schedule  # type: ignore[method-assign]
        loop = controller._loop
        assert loop is not None
        loop.call_soon_threadsafe(controller.wake_scheduler)
        assert slow_pass_started.wait(10)
        loop.call_soon_threadsafe(controller.wake_scheduler)  # a job's end, while the slow pass runs
        wait_until(lambda: len(passes) >= 2, 10, 0.01, "the pass after the slow one")

        (_, slow_ended), (next_started, _) = passes[:2]
        assert next_started - slow_ended < PASS_WAIT_S / 2
