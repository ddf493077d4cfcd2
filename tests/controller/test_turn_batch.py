"""TurnBatch: the controller's per-turn batching of heartbeat store work."""

from __future__ import annotations

import asyncio

import pytest

from iris.cluster.controller.controller import TurnBatch


def test_turn_batch_calls_of_one_turn_run_together_and_a_failed_item_fails_only_its_caller() -> None:
    calls: list[list[int]] = []

    def run(items: list[int]) -> list[int | Exception]:
        calls.append(items)
        return [ValueError(f"item {i} is bad") if i == 2 else i * 10 for i in items]

    async def main() -> list[int | BaseException]:
        batch: TurnBatch[int, int] = TurnBatch(run)
        first = await asyncio.gather(*(batch.submit(i) for i in range(4)), return_exceptions=True)
        second = await batch.submit(5)
        return [*first, second]

    results = asyncio.run(main())

    assert calls == [[0, 1, 2, 3], [5]]
    assert results[:2] == [0, 10] and results[3:] == [30, 50]
    assert isinstance(results[2], ValueError) and "item 2" in str(results[2])


def test_turn_batch_run_raising_reaches_every_caller_of_that_turn() -> None:
    def run(items: list[int]) -> list[int]:
        raise RuntimeError("store is closed")

    async def main() -> None:
        batch: TurnBatch[int, int] = TurnBatch(run)
        await asyncio.gather(batch.submit(1), batch.submit(2))

    with pytest.raises(RuntimeError, match="store is closed"):
        asyncio.run(main())
