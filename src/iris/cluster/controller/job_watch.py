"""Callers waiting for a job to change state: GetJobStatus with `wait_ms`.

The store reports every change of a job's state, from whichever thread wrote it; this wakes the
callers waiting for that job on the controller's event loop, so a client waiting for its job
makes one call per change instead of one every few milliseconds.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from contextlib import contextmanager


class JobWatch:
    def __init__(self) -> None:
        self._loop: asyncio.AbstractEventLoop | None = None
        self._waiters: dict[str, set[asyncio.Event]] = {}

    def bind(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop

    def job_changed(self, job_id: str) -> None:
        """From any thread: wake the callers waiting for `job_id`, on the event loop."""
        loop = self._loop
        if job_id not in self._waiters or loop is None:
            return
        try:
            loop.call_soon_threadsafe(self._wake, job_id)
        except RuntimeError:  # the loop has closed: nobody is waiting any more
            pass

    def is_watched(self, job_id: str) -> bool:
        """Whether a caller is waiting for `job_id` right now."""
        return job_id in self._waiters

    def _wake(self, job_id: str) -> None:
        for event in self._waiters.get(job_id, ()):
            event.set()

    @contextmanager
    def watching(self, job_id: str) -> Iterator[asyncio.Event]:
        """An event set whenever `job_id` changes state while the block runs."""
        event = asyncio.Event()
        self._waiters.setdefault(job_id, set()).add(event)
        try:
            yield event
        finally:
            waiters = self._waiters[job_id]
            waiters.discard(event)
            if not waiters:
                del self._waiters[job_id]
