"""Callers waiting for a job to change state: GetJobStatus with `wait_ms`.

The store reports every change of a job's state, from whichever thread wrote it; this wakes the
callers waiting for that job on the controller's event loop, so a client waiting for its job
makes one call per change instead of one every few milliseconds. A caller waiting for the job to
finish is woken only by its end (or its deletion), not by its start: each wake-up costs a read
of the job's status on the event loop.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from contextlib import contextmanager

from iris.cluster.types import TERMINAL_JOB_STATES


class JobWatch:
    def __init__(self) -> None:
        self._loop: asyncio.AbstractEventLoop | None = None
        # job id -> each waiter's event and whether only the job's end wakes it
        self._waiters: dict[str, dict[asyncio.Event, bool]] = {}
        # job id -> how many of its waiters want every change (only changed on the loop)
        self._every_change: dict[str, int] = {}

    def bind(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop

    def job_changed(self, job_id: str, state: int | None) -> None:
        """From any thread: the job's state is now `state` (None: the job was deleted); wake the
        callers waiting for that, on the event loop."""
        loop = self._loop
        if job_id not in self._waiters or loop is None:
            return
        if not _ends(state) and job_id not in self._every_change:
            return
        try:
            loop.call_soon_threadsafe(self._wake, job_id, state)
        except RuntimeError:  # the loop has closed: nobody is waiting any more
            pass

    def is_watched(self, job_id: str) -> bool:
        """Whether a caller is waiting for `job_id` right now."""
        return job_id in self._waiters

    def _wake(self, job_id: str, state: int | None) -> None:
        ended = _ends(state)
        for event, until_finished in self._waiters.get(job_id, {}).items():
            if ended or not until_finished:
                event.set()

    @contextmanager
    def watching(self, job_id: str, until_finished: bool = False) -> Iterator[asyncio.Event]:
        """An event set whenever `job_id` changes state while the block runs (with
        `until_finished`: when it finishes or is deleted)."""
        event = asyncio.Event()
        self._waiters.setdefault(job_id, {})[event] = until_finished
        if not until_finished:
            self._every_change[job_id] = self._every_change.get(job_id, 0) + 1
        try:
            yield event
        finally:
            waiters = self._waiters[job_id]
            del waiters[event]
            if not waiters:
                del self._waiters[job_id]
            if not until_finished:
                self._every_change[job_id] -= 1
                if not self._every_change[job_id]:
                    del self._every_change[job_id]


def _ends(state: int | None) -> bool:
    return state is None or state in TERMINAL_JOB_STATES
