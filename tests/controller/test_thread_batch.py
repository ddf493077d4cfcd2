"""ThreadBatch: the controller's group commit of submissions, one trip to a thread per batch."""

from __future__ import annotations

import asyncio
import threading

import pytest

from iris.cluster.controller.thread_batch import ThreadBatch


def test_thread_batch_calls_made_while_a_batch_runs_go_together_in_the_next_one() -> None:
    calls: list[list[int]] = []
    threads: set[int] = set()
    first_batch_running = threading.Event()
    release_first_batch = threading.Event()

    def run(items: list[int]) -> list[int]:
        calls.append(items)
        threads.add(threading.get_ident())
        if items == [0]:
            first_batch_running.set()
            release_first_batch.wait(10)
        return [i * 10 for i in items]

    async def main() -> list[int]:
        batch: ThreadBatch[int, int] = ThreadBatch(run)
        first = asyncio.ensure_future(batch.submit(0))
        await asyncio.to_thread(first_batch_running.wait, 10)
        later = [asyncio.ensure_future(batch.submit(i)) for i in (1, 2, 3)]
        await asyncio.sleep(0)
        release_first_batch.set()
        return list(await asyncio.gather(first, *later))

    results = asyncio.run(main())

    assert results == [0, 10, 20, 30]
    assert calls == [[0], [1, 2, 3]]
    assert threading.get_ident() not in threads


def test_thread_batch_failed_item_fails_only_its_caller() -> None:
    def run(items: list[int]) -> list[int | Exception]:
        return [ValueError(f"item {i} is bad") if i == 2 else i * 10 for i in items]

    async def main() -> list[int | BaseException]:
        batch: ThreadBatch[int, int] = ThreadBatch(run)
        return list(await asyncio.gather(*(batch.submit(i) for i in range(4)), return_exceptions=True))

    results = asyncio.run(main())

    assert results[:2] == [0, 10] and results[3] == 30
    assert isinstance(results[2], ValueError) and "item 2" in str(results[2])


def test_thread_batch_run_raising_reaches_every_caller_of_its_batch_and_the_next_batch_runs() -> None:
    def run(items: list[int]) -> list[int]:
        if 1 in items:
            raise RuntimeError("store is closed")
        return items

    async def main() -> int:
        batch: ThreadBatch[int, int] = ThreadBatch(run)
        with pytest.raises(RuntimeError, match="store is closed"):
            await asyncio.gather(batch.submit(1), batch.submit(2))
        return await batch.submit(3)

    assert asyncio.run(main()) == 3
