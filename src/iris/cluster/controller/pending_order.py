"""The pending tasks in scheduling order, kept between scheduling passes.

A full pass needs every pending task in order. Reading them all from SQLite (each joined to its
job for the order, then sorted) cost a pass over thousands of pending tasks several milliseconds,
and with a backlog a pass runs after nearly every job's end. A task's place in the order never
changes while it is pending (its job's priority and submission times are fixed), so the order is
kept here: the store removes the tasks that left pending since the last pass and inserts the ones
created since. A task that comes back to pending (a retry), a deleted job (row numbers may be
reused) or a rolled-back write loses the kept order, and the next pass reads it whole again.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right

from iris.cluster.controller.scheduling_types import TaskDemand

# (-priority, root job's submission ms, job's submission ms, job id, task index)
OrderKey = tuple[int, int, int, str, int]


class PendingOrder:
    def __init__(self) -> None:
        self._keys: list[OrderKey] = []
        self._demands: list[TaskDemand] = []
        # The newest task row the kept order covers; None when the order must be read again.
        self.through_row: int | None = None
        self._left: set[str] = set()
        self._key_of: dict[str, OrderKey] = {}

    def lose(self) -> None:
        self.through_row = None
        self._keys, self._demands = [], []
        self._left.clear()
        self._key_of = {}

    def left_pending(self, task_id: str) -> None:
        if self.through_row is not None:
            self._left.add(task_id)

    def reset(self, keys: list[OrderKey], demands: list[TaskDemand], through_row: int) -> None:
        """The whole order, as just read, covering task rows up to `through_row`."""
        self._keys, self._demands = keys, demands
        self._left.clear()
        self._key_of = {demand.task_id: key for key, demand in zip(keys, demands, strict=True)}
        self.through_row = through_row

    def advance(self, keys: list[OrderKey], demands: list[TaskDemand], through_row: int) -> None:
        """Drop the tasks that left pending, then add the pending tasks of rows created since
        (`keys`/`demands`, in order) and cover rows up to `through_row`."""
        for task_id in self._left:
            key = self._key_of.pop(task_id, None)
            if key is not None:  # else created and gone again between two passes
                at = bisect_left(self._keys, key)
                del self._keys[at], self._demands[at]
        self._left.clear()
        for key, demand in zip(keys, demands, strict=True):
            at = bisect_right(self._keys, key)
            self._keys.insert(at, key)
            self._demands.insert(at, demand)
            self._key_of[demand.task_id] = key
        self.through_row = through_row

    def demands(self) -> list[TaskDemand]:
        return list(self._demands)
