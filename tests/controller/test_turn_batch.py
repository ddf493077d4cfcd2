"""TurnBatch: the controller's per-turn batching of heartbeat store work."""

from __future__ import annotations

import asyncio

from iris.cluster.controller.heartbeat_rounds import TurnBatch


def _drive(run, added: list[list[int]], most_per_turn: int = 100) -> list[tuple[int, object]]:
    """Adds each inner list of items in one turn of a fresh loop; what `then` was given."""
    handled: list[tuple[int, object]] = []

    async def main() -> None:
        batch: TurnBatch[int, int] = TurnBatch(
            run, lambda item, result: handled.append((item, result)), most_per_turn
        )
        for items in added:
            for item in items:
                batch.add(item)
            await asyncio.sleep(0)  # one turn: the batch runs early in the next
            await asyncio.sleep(0)

    asyncio.run(main())
    return handled


def test_turn_batch_items_of_one_turn_run_together_and_a_failed_item_fails_only_itself() -> None:
    calls: list[list[int]] = []

    def run(items: list[int]) -> list[int | Exception]:
        calls.append(items)
        return [ValueError(f"item {i} is bad") if i == 2 else i * 10 for i in items]

    handled = _drive(run, [[0, 1, 2, 3], [5]])

    assert calls == [[0, 1, 2, 3], [5]]
    assert [item for item, _ in handled] == [0, 1, 2, 3, 5]
    assert [result for item, result in handled if item != 2] == [0, 10, 30, 50]
    assert isinstance(handled[2][1], ValueError) and "item 2" in str(handled[2][1])


def test_turn_batch_run_raising_reaches_every_item_of_that_turn() -> None:
    def run(items: list[int]) -> list[int]:
        raise RuntimeError("store is closed")

    handled = _drive(run, [[1, 2]])

    assert [item for item, _ in handled] == [1, 2]
    assert all(isinstance(result, RuntimeError) and "store is closed" in str(result) for _, result in handled)


def test_turn_batch_beyond_most_per_turn_waits_a_turn_and_other_callbacks_run_between() -> None:
    events: list[object] = []

    def run(items: list[int]) -> list[int]:
        events.append(list(items))
        return items

    async def main() -> None:
        loop = asyncio.get_running_loop()
        batch: TurnBatch[int, int] = TurnBatch(run, lambda item, result: None, 2)
        for item in range(5):
            batch.add(item)
        # Due in the same turn as the first batch: with no limit it would come after every item.
        loop.call_soon(events.append, "another request")
        for _ in range(6):
            await asyncio.sleep(0)

    asyncio.run(main())

    assert events == [[0, 1], "another request", [2, 3], [4]]
