"""ListJobs' selections for the dashboard (job tree, name substring, orders), on a real store."""

from __future__ import annotations

import random
import threading
from pathlib import Path

import pytest

from iris.cluster.controller.store import ControllerStore
from iris.cluster.controller.store_reads import JOB_ORDER_KEYS, JobFilters
from iris.rpc import cluster_pb2 as pb

T0 = 1_700_000_000_000


def _request(name: str, parent: str = "") -> pb.LaunchJobRequest:
    return pb.LaunchJobRequest(
        name=name,
        parent_job_id=parent,
        entrypoint=pb.Entrypoint(command=pb.CommandEntrypoint(argv=["true"])),
        resources=pb.ResourceSpec(cpu_millicores=1000, memory_bytes=1 << 30),
        replicas=1,
    )


@pytest.fixture
def store(tmp_path: Path) -> ControllerStore:
    store = ControllerStore(tmp_path / "controller.sqlite3")
    # Submitted in this order, one millisecond apart.
    for i, (job_id, parent) in enumerate(
        [
            ("/alpha", ""),
            ("/alpha/eval-1", "/alpha"),
            ("/beta_100%", ""),
            ("/alpha/eval-2", "/alpha"),
            ("/gamma", ""),
            ("/alpha/eval-1/deep", "/alpha/eval-1"),
        ]
    ):
        store.create_job(job_id, _request(job_id, parent), T0 + i)
    store.terminate_job("/gamma", "done with it", T0 + 10)
    yield store
    store.close()


def _ids(store: ControllerStore, filters: JobFilters, states: list[int] | None = None, limit: int = 100, offset: int = 0):
    jobs, total = store.list_jobs(states or [], "", limit, offset, filters)
    return [j.job_id for j in jobs], total


def test_list_jobs_roots_only_returns_top_level_jobs_with_their_child_counts(store: ControllerStore) -> None:
    jobs, total = store.list_jobs([], "", 100, 0, JobFilters(roots_only=True))

    assert [(j.job_id, j.num_children) for j in jobs] == [("/gamma", 0), ("/beta_100%", 0), ("/alpha", 2)]
    assert total == 3


def test_list_jobs_parent_returns_direct_children_only(store: ControllerStore) -> None:
    assert _ids(store, JobFilters(parent_job_id="/alpha", order=pb.JOB_ORDER_OLDEST)) == (
        ["/alpha/eval-1", "/alpha/eval-2"],
        2,
    )
    jobs, _ = store.list_jobs([], "", 100, 0, JobFilters(parent_job_id="/alpha", order=pb.JOB_ORDER_OLDEST))
    assert [j.num_children for j in jobs] == [1, 0]


def test_list_jobs_name_contains_is_case_insensitive_and_treats_wildcards_as_text(store: ControllerStore) -> None:
    assert _ids(store, JobFilters(name_contains="EVAL"))[1] == 3
    assert _ids(store, JobFilters(name_contains="_100%")) == (["/beta_100%"], 1)
    assert _ids(store, JobFilters(name_contains="%")) == (["/beta_100%"], 1)


@pytest.mark.parametrize(
    ("order", "expected"),
    [
        (pb.JOB_ORDER_NEWEST, ["/gamma", "/beta_100%", "/alpha"]),
        (pb.JOB_ORDER_OLDEST, ["/alpha", "/beta_100%", "/gamma"]),
        (pb.JOB_ORDER_NAME, ["/alpha", "/beta_100%", "/gamma"]),
        (pb.JOB_ORDER_NAME_DESC, ["/gamma", "/beta_100%", "/alpha"]),
        # PENDING (1) sorts before KILLED (6); newest first within a state.
        (pb.JOB_ORDER_STATE, ["/beta_100%", "/alpha", "/gamma"]),
    ],
)
def test_list_jobs_order_sorts_the_roots(store: ControllerStore, order: int, expected: list[str]) -> None:
    assert _ids(store, JobFilters(roots_only=True, order=order))[0] == expected


def test_list_jobs_pages_through_filtered_jobs_with_the_full_total(store: ControllerStore) -> None:
    first = _ids(store, JobFilters(roots_only=True, order=pb.JOB_ORDER_NAME), limit=2)
    second = _ids(store, JobFilters(roots_only=True, order=pb.JOB_ORDER_NAME), limit=2, offset=2)

    assert first == (["/alpha", "/beta_100%"], 3)
    assert second == (["/gamma"], 3)


def test_list_jobs_state_filter_combines_with_name(store: ControllerStore) -> None:
    assert _ids(store, JobFilters(name_contains="a"), states=[pb.JOB_STATE_KILLED]) == (["/gamma"], 1)


def test_list_jobs_counts_follow_job_creation_state_changes_and_deletion(store: ControllerStore) -> None:
    killed = [pb.JOB_STATE_KILLED]
    assert _ids(store, JobFilters(), killed)[1] == 1

    store.terminate_job("/beta_100%", "stop", T0 + 20)
    assert _ids(store, JobFilters(), killed)[1] == 2
    store.create_job("/delta", _request("/delta"), T0 + 21)
    assert _ids(store, JobFilters())[1] == 7
    store.delete_job_tree("/gamma")
    assert _ids(store, JobFilters(), killed) == (["/beta_100%"], 1)
    assert _ids(store, JobFilters())[1] == 6


def test_count_by_state_follows_job_creation_state_changes_and_deletion(store: ControllerStore) -> None:
    def counted_by_sql() -> dict[int, int]:
        with store._read() as db:
            return dict(db.execute("SELECT state, COUNT(*) FROM jobs GROUP BY state").fetchall())

    assert store.count_by_state()[0] == counted_by_sql() == {pb.JOB_STATE_PENDING: 5, pb.JOB_STATE_KILLED: 1}

    store.terminate_job("/beta_100%", "stop", T0 + 20)
    store.create_job("/delta", _request("/delta"), T0 + 21)
    store.delete_job_tree("/gamma")

    assert store.count_by_state()[0] == counted_by_sql() == {pb.JOB_STATE_PENDING: 5, pb.JOB_STATE_KILLED: 1}
    store.delete_job_tree("/beta_100%")
    assert store.count_by_state()[0] == counted_by_sql() == {pb.JOB_STATE_PENDING: 5}


@pytest.mark.parametrize("prefix, carriers", [("/common-", 60), ("/rare-", 3), ("/none-", 0)])
def test_list_jobs_name_prefix_pages_newest_first_whether_many_or_few_jobs_carry_it(
    tmp_path: Path, prefix: str, carriers: int
) -> None:
    store = ControllerStore(tmp_path / "controller.sqlite3")
    names = [f"/common-{i:03d}" for i in range(60)] + [f"/rare-{i}" for i in range(3)] + ["/other"]
    for i, name in enumerate(names):
        # Submission times interleave the prefixes, so neither the name nor the time order alone
        # gives the answer.
        store.create_job(name, _request(name), T0 + (i * 37) % len(names))
    expected = sorted(
        (n for n in names if n.startswith(prefix)), key=lambda n: (-((names.index(n) * 37) % len(names)), n)
    )

    pages, after = [], ()
    while True:
        jobs, total = store.list_jobs([], prefix, 7, 0, JobFilters(), after)
        if not jobs:
            break
        pages += [j.job_id for j in jobs]
        after = (jobs[-1].submitted_at.epoch_ms, jobs[-1].job_id)
    deep, _ = store.list_jobs([], prefix, 7, 14, JobFilters())

    assert total == carriers
    assert pages == expected
    assert [j.job_id for j in deep] == expected[14:21]
    store.close()


@pytest.mark.parametrize("order", list(JOB_ORDER_KEYS))
@pytest.mark.parametrize(("states", "prefix"), [([], ""), ([pb.JOB_STATE_PENDING], ""), ([], "/job-1")])
def test_list_jobs_offset_pages_past_the_middle_match_the_whole_listing(
    tmp_path: Path, order: int, states: list[int], prefix: str
) -> None:
    store = ControllerStore(tmp_path / "controller.sqlite3")
    names = [f"/job-{i:02d}" for i in range(23)]
    for i, name in enumerate(names):
        # Two or three jobs share each millisecond, so ties fall to the name.
        store.create_job(name, _request(name), T0 + (i * 7) % 23 // 3)
    for name in names[::4]:
        store.terminate_job(name, "stop", T0 + 100)
    whole, total = store.list_jobs(states, prefix, 100, 0, JobFilters(order=order))
    listing = [j.job_id for j in whole]

    pages = {offset: store.list_jobs(states, prefix, 3, offset, JobFilters(order=order)) for offset in range(total + 2)}

    assert total == len(listing) > 3
    for offset, (jobs, page_total) in pages.items():
        assert ([j.job_id for j in jobs], page_total) == (listing[offset : offset + 3], total), offset
    store.close()


def test_list_jobs_and_job_status_answer_during_a_write_with_what_was_committed(store: ControllerStore) -> None:
    inside_write, finish_write = threading.Event(), threading.Event()

    def pause_inside_the_write(job_id: str, state: int | None) -> None:
        inside_write.set()
        assert finish_write.wait(10)

    store.on_job_state_change = pause_inside_the_write
    writer = threading.Thread(target=store.terminate_job, args=("/beta_100%", "stop", T0 + 20))
    writer.start()
    try:
        assert inside_write.wait(10)
        # The write holds the store's lock: these reads neither wait for it nor see it.
        during = (
            store.committed_job_status("/beta_100%").state,
            _ids(store, JobFilters(name_contains="beta"), [pb.JOB_STATE_KILLED]),
            _ids(store, JobFilters(), [pb.JOB_STATE_KILLED]),
        )
    finally:
        finish_write.set()
        writer.join()
    after = (
        store.committed_job_status("/beta_100%").state,
        _ids(store, JobFilters(name_contains="beta"), [pb.JOB_STATE_KILLED]),
        _ids(store, JobFilters(), [pb.JOB_STATE_KILLED]),
    )

    assert during == (pb.JOB_STATE_PENDING, ([], 0), (["/gamma"], 1))
    assert after == (pb.JOB_STATE_KILLED, (["/beta_100%"], 1), (["/gamma", "/beta_100%"], 2))


def _spread_jobs(store: ControllerStore, count: int) -> list[str]:
    """Jobs submitted over weeks, in bursts and alone, so that they fall in blocks of every size;
    every third is a child of the root before it, every fifth is killed."""
    rng = random.Random(3)
    names, roots, at = [], [], T0
    for i in range(count):
        at += rng.choice([0, 1, 7_000, 20_000, 5_000_000, 2_000_000_000])
        parent = roots[-1] if roots and i % 3 == 0 else ""
        name = f"{parent}/job-{i:03d}" if parent else f"/job-{i:03d}"
        store.create_job(name, _request(name, parent), at)
        if not parent:
            roots.append(name)
        names.append(name)
    for name in names[::5]:
        store.terminate_job(name, "stop", at + 1)
    return names


@pytest.mark.parametrize("order", [pb.JOB_ORDER_NEWEST, pb.JOB_ORDER_OLDEST, pb.JOB_ORDER_STATE])
@pytest.mark.parametrize("states", [[], [pb.JOB_STATE_KILLED], [pb.JOB_STATE_PENDING, pb.JOB_STATE_KILLED]])
@pytest.mark.parametrize("roots_only", [False, True])
def test_list_jobs_offset_pages_of_jobs_spread_over_weeks_match_the_whole_listing(
    tmp_path: Path, order: int, states: list[int], roots_only: bool
) -> None:
    store = ControllerStore(tmp_path / "controller.sqlite3")
    names = _spread_jobs(store, 90)
    store.delete_job_tree(names[0])
    store.create_job("/late", _request("/late"), T0)
    filters = JobFilters(order=order, roots_only=roots_only)
    whole, total = store.list_jobs(states, "", 1000, 0, filters)
    listing = [j.job_id for j in whole]

    pages = {offset: store.list_jobs(states, "", 4, offset, filters) for offset in range(total + 2)}

    assert total == len(listing) > 8
    for offset, (jobs, page_total) in pages.items():
        assert ([j.job_id for j in jobs], page_total) == (listing[offset : offset + 4], total), offset
    store.close()
