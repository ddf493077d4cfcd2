"""Daemon threads that run one call after another, so that a short task attempt (and the monitor
of its process) does not pay for starting and ending a thread of its own.

A call never waits for a thread: with none idle, a new one starts. An idle thread ends after
IDLE_TIMEOUT_S without work. The threads are daemons, like the per-attempt threads they replace:
the worker's exit never waits for an attempt.
"""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Callable

logger = logging.getLogger(__name__)

IDLE_TIMEOUT_S = 60.0


class ReusedThreads:
    def __init__(self, name: str, idle_timeout_s: float = IDLE_TIMEOUT_S) -> None:
        self._name = name
        self._idle_timeout_s = idle_timeout_s
        self._lock = threading.Lock()
        self._calls: queue.SimpleQueue[Callable[[], None]] = queue.SimpleQueue()
        # Threads waiting for a call, less the calls already queued for them.
        self._idle = 0

    def run(self, call: Callable[[], None]) -> None:
        """Run `call` on an idle thread, or on a new one when none is idle."""
        with self._lock:
            if self._idle:
                self._idle -= 1
                self._calls.put(call)
                return
        threading.Thread(target=self._serve, args=(call,), name=self._name, daemon=True).start()

    def _serve(self, call: Callable[[], None]) -> None:
        while True:
            try:
                call()
            except Exception:
                logger.exception("a call on a %s thread failed", self._name)
            threading.current_thread().name = self._name  # a call may have named it for its work
            with self._lock:
                self._idle += 1
            try:
                call = self._calls.get(timeout=self._idle_timeout_s)
            except queue.Empty:
                with self._lock:
                    # A call may have been queued for this thread since the wait ended.
                    try:
                        call = self._calls.get_nowait()
                    except queue.Empty:
                        self._idle -= 1
                        return
