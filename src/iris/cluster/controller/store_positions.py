"""Where a ListJobs offset lands in a time order, found from the jobs counted per time block.

The store's triggers keep `job_blocks` (migration 13): jobs per submission-time block, state and
root flag, at a few block sizes. A page at offset N of a selection by state and root flag is
found by adding up block counts, coarsest first, until the block that holds row N; the page then
starts at that block's edge and skips only the selection's jobs inside it. The counts are read in
the same snapshot as the page, so the jump is exact.
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass

from iris.cluster.controller.schema import JOB_BLOCK_LEVELS
from iris.rpc import cluster_pb2 as pb

# The orders whose first key is the submission time: True where the newest comes first.
TIME_ORDERS: dict[int, bool] = {pb.JOB_ORDER_NEWEST: True, pb.JOB_ORDER_OLDEST: False}
# The orders whose offsets are found from the blocks: the time orders, and the state order (each
# state's jobs newest first).
JUMP_ORDERS = (*TIME_ORDERS, pb.JOB_ORDER_STATE)


@dataclass(frozen=True)
class OffsetSeek:
    """A page's start: the rows that satisfy `condition` (with `bound`), past the first `skip`."""

    condition: str
    bound: int
    skip: int


def _selection_sql(states: list[int], roots_only: bool) -> tuple[list[str], list[object]]:
    where: list[str] = []
    if states:
        where.append(f"state IN ({','.join('?' * len(states))})")
    if roots_only:
        where.append("is_root = 1")
    return where, list(states)


def count_in_blocks(db: sqlite3.Connection, states: list[int], roots_only: bool) -> int:
    """Jobs in `states` (all when empty), only root jobs with `roots_only`, from the coarsest blocks."""
    where, params = _selection_sql(states, roots_only)
    conditions = " AND ".join(["level = ?", *where])
    return db.execute(
        f"SELECT COALESCE(SUM(n), 0) FROM job_blocks WHERE {conditions}", [JOB_BLOCK_LEVELS[0], *params]
    ).fetchone()[0]


def seek_offset(
    db: sqlite3.Connection, order: int, states: list[int], roots_only: bool, offset: int
) -> OffsetSeek | None:
    """Where the page `offset` rows into the selection starts in the time order `order`; None when
    the selection holds no more than `offset` jobs."""
    newest_first = TIME_ORDERS[order]
    where, params = _selection_sql(states, roots_only)
    span: tuple[int, int] | None = None  # [first, end) ms of the block holding the row, once found
    skip = offset
    for level in JOB_BLOCK_LEVELS:
        conditions, level_params = ["level = ?", *where], [level, *params]
        if span is not None:
            conditions.append("block >= ? AND block < ?")
            level_params += [span[0] >> level, span[1] >> level]
        blocks = db.execute(
            f"SELECT block, SUM(n) FROM job_blocks WHERE {' AND '.join(conditions)}"
            f" GROUP BY block ORDER BY block {'DESC' if newest_first else 'ASC'}",
            level_params,
        ).fetchall()
        for block, n in blocks:
            if skip < n:
                span = (block << level, (block + 1) << level)
                break
            skip -= n
        else:
            return None
    assert span is not None
    if newest_first:
        return OffsetSeek("submitted_at_ms < ?", span[1], skip)
    return OffsetSeek("submitted_at_ms >= ?", span[0], skip)


def seek_state_order(
    db: sqlite3.Connection, states: list[int], roots_only: bool, offset: int
) -> tuple[int, OffsetSeek] | None:
    """Where the page `offset` rows into the selection starts in the state order: the state of its
    first row, and where that row is among the state's jobs newest first; None when the selection
    holds no more than `offset` jobs."""
    where, params = _selection_sql(states, roots_only)
    conditions = " AND ".join(["level = ?", *where])
    skip = offset
    for state, n in db.execute(
        f"SELECT state, SUM(n) FROM job_blocks WHERE {conditions} GROUP BY state ORDER BY state",
        [JOB_BLOCK_LEVELS[0], *params],
    ).fetchall():
        if skip < n:
            seek = seek_offset(db, pb.JOB_ORDER_NEWEST, [state], roots_only, skip)
            return None if seek is None else (state, seek)
        skip -= n
    return None
