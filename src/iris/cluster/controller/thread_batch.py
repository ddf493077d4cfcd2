"""Calls batched into one trip to a thread: group commit for work the event loop must not do itself.

A LaunchJob's store work (checks, bundle, a transaction) runs off the event loop. One thread hop
and one commit per submission cost more than the job's rows, so submissions share them: those made
while no batch runs go together in the next turn of the loop, and those made while a batch runs in
its thread go together in the batch after it. Under load the batches grow by themselves; alone, a
call waits for nothing but its own hop.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from typing import Generic, TypeVar

Item = TypeVar("Item")
Result = TypeVar("Result")


class ThreadBatch(Generic[Item, Result]):
    """`run` gets the items in submission order, on a worker thread, and returns one result, or the
    exception for that item, per item; an exception raised by `run` reaches every item of its batch."""

    def __init__(self, run: Callable[[list[Item]], Sequence[Result | Exception]]):
        self._run = run
        self._queue: list[tuple[Item, asyncio.Future]] = []
        self._drain_task: asyncio.Task | None = None

    async def submit(self, item: Item) -> Result:
        loop = asyncio.get_running_loop()
        future = loop.create_future()
        self._queue.append((item, future))
        if self._drain_task is None:
            self._drain_task = loop.create_task(self._drain())
        result = await future
        if isinstance(result, Exception):
            raise result
        return result

    async def _drain(self) -> None:
        batch: list[tuple[Item, asyncio.Future]] = []
        try:
            while self._queue:
                batch, self._queue = self._queue, []
                try:
                    results = await asyncio.to_thread(self._run, [item for item, _ in batch])
                except Exception as exc:  # noqa: BLE001 - handed to every caller of the batch
                    results = [exc] * len(batch)
                for (_, future), result in zip(batch, results, strict=True):
                    if not future.done():  # its caller was cancelled while it waited
                        future.set_result(result)
                batch = []
        finally:
            self._drain_task = None
            for _, future in batch + self._queue:  # cancelled (the loop is stopping): nobody answers
                future.cancel()
            self._queue = []
