"""JobWatch: which changes of a job's state wake which waiting callers."""

from __future__ import annotations

import asyncio

from iris.cluster.controller.job_watch import JobWatch
from iris.rpc import cluster_pb2 as pb


async def _woken_by(changes: list[int | None], until_finished: bool) -> list[bool]:
    """After each change in turn, whether the waiter's event was set (then cleared again)."""
    watch = JobWatch()
    watch.bind(asyncio.get_running_loop())
    woken = []
    with watch.watching("/job", until_finished) as changed:
        for state in changes:
            watch.job_changed("/job", state)
            for _ in range(3):  # the wake-up is scheduled on the loop
                await asyncio.sleep(0)
            woken.append(changed.is_set())
            changed.clear()
    assert not watch.is_watched("/job")
    return woken


def test_job_watch_until_finished_waiter_wakes_only_on_end_or_deletion() -> None:
    changes = [pb.JOB_STATE_RUNNING, pb.JOB_STATE_SUCCEEDED, pb.JOB_STATE_RUNNING, None]
    assert asyncio.run(_woken_by(changes, until_finished=True)) == [False, True, False, True]


def test_job_watch_every_change_waiter_wakes_on_each_change() -> None:
    changes = [pb.JOB_STATE_RUNNING, pb.JOB_STATE_SUCCEEDED, None]
    assert asyncio.run(_woken_by(changes, until_finished=False)) == [True, True, True]


def test_job_watch_both_kinds_on_one_job_each_woken_as_asked() -> None:
    async def scenario() -> tuple[bool, bool]:
        watch = JobWatch()
        watch.bind(asyncio.get_running_loop())
        with watch.watching("/job", until_finished=True) as end, watch.watching("/job") as any_change:
            watch.job_changed("/job", pb.JOB_STATE_RUNNING)
            await asyncio.wait_for(any_change.wait(), 5)
            return end.is_set(), any_change.is_set()

    assert asyncio.run(scenario()) == (False, True)
