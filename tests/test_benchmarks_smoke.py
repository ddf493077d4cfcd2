"""The benchmark harness at toy sizes, so it cannot rot unnoticed between full runs.

Runs the Iris-only paths in-process (table and report, scheduler pass, store at scale, controller
scale with its helper processes); none of it needs Ray.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

# benchmarks/ is a top-level package beside src/, not installed with iris.
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks import (  # noqa: E402
    actor_calls,
    cold_start,
    controller_scale,
    run,
    scheduler_pass,
    store_scale,
    sustained_throughput,
)
from benchmarks.common import Row, Target, evaluate, percentile  # noqa: E402

pytestmark = pytest.mark.timeout(60)


def test_percentile_is_nearest_rank() -> None:
    assert percentile([3.0, 1.0, 2.0], 50) == 2.0
    assert percentile(list(map(float, range(1, 101))), 99) == 99.0
    assert percentile([5.0], 99) == 5.0


def test_targets_pass_miss_and_need_ray() -> None:
    latency = Row("a", "latency", "ms", [10.0, 20.0, 300.0], targets=[Target("p99 < 200 ms", "max", 200.0, "p99", strict=True)])
    assert evaluate(latency, latency.targets[0])[0] is False
    assert "1.50x" in evaluate(latency, latency.targets[0])[1]
    faster = Row("b", "cold", "ms", [1.0, 1.0], [4.0, 4.0], targets=[Target("<= 0.5x Ray", "ratio_max", 0.5)])
    assert evaluate(faster, faster.targets[0]) == (True, "Iris/Ray 0.25, target at most 0.5")
    rate = Row("c", "rate", "jobs/s", [10.0], None, "not installed", [Target(">= 2x Ray", "ratio_min", 2.0)], True)
    assert evaluate(rate, rate.targets[0])[0] is None


def test_table_and_report(tmp_path: Path) -> None:
    rows = [
        Row("cold", "cold start", "ms", [1000.0, 1200.0], [8000.0, 9000.0], targets=[Target("<= 0.5x Ray", "ratio_max", 0.5)]),
        Row("rate", "throughput", "jobs/s", [90.0, 100.0], None, "not installed", [Target(">= 2x Ray", "ratio_min", 2.0)], True),
        Row("pass", "scheduler pass", "ms", [150.0], None, "no peer", [Target("<= 100 ms", "max", 100.0)], note="slow"),
    ]
    text = run.table(rows)
    lines = text.splitlines()
    assert len(lines) == 2 + len(rows)
    assert "| cold start | ms | 1,100 | 1,200 | 8,500 | 9,000 | 0.129 | <= 0.5x Ray | PASS |" in lines
    assert "not installed" in lines[3] and "n/a" in lines[3]
    assert lines[4].endswith("| **MISS** |")
    body = run.report(rows, quick=True, with_ray=False, elapsed_s=1.0, failures=[])
    assert "uv sync --group bench" in body
    assert "- scheduler pass: target <= 100 ms; median 150 ms is 1.50x the 100 ms limit." in body
    output = tmp_path / "performance.md"
    run.write_report(output, body)
    output.write_text(output.read_text() + "\n## Analysis\n\nkept by hand\n")
    run.write_report(output, "second run")
    text = output.read_text()
    assert "second run" in text and "scheduler pass" not in text and "kept by hand" in text


def test_row_survives_json() -> None:
    row = Row("k", "label", "ms", [1.0], [2.0], "", [Target("t", "max", 3.0, "p99", True)], note="n")
    assert Row.from_json(row.to_json()) == row


def test_scheduler_pass_rows() -> None:
    rows = scheduler_pass.rows(quick=True, with_ray=False, task_count=200, worker_count=50)
    assert [r.key for r in rows] == ["scheduler_pass.mixed", "scheduler_pass.full"]
    assert all(len(r.iris) == 3 and r.ray_note == "no peer" for r in rows)


def test_scheduler_pass_digests_name_each_seed_and_scenario_and_repeat() -> None:
    lines = scheduler_pass.digests([1, 2], task_count=200, worker_count=50)
    assert [line.split(":")[0] for line in lines] == ["seed 1 mixed", "seed 1 full", "seed 2 mixed", "seed 2 full"]
    assert lines[0] != lines[2]  # another seed, another pass
    assert scheduler_pass.digests([1, 2], task_count=200, worker_count=50) == lines


def test_store_scale_rows() -> None:
    rows = store_scale.rows(quick=True, with_ray=False, jobs=500)
    labels = [row.label for row in rows]
    assert len(rows) == 10
    # Every kind of offset jump the dashboard makes: unfiltered, by state, and the root-job tree.
    assert sum("by offset token" in label for label in labels) == 3
    for row in rows:
        assert len(row.iris) == 100 and all(t > 0 for t in row.iris)
        assert row.targets[0].stat == "p99"


def test_controller_scale_measures_rounds_and_launches() -> None:
    m = controller_scale.measure(workers=20, rounds=2, load_seconds=1.0, clients=2)
    assert m["incomplete_rounds"] == 0
    assert len(m["round_ms"]) == 2 and m["loaded_round_ms"] and m["paced_round_ms"]
    assert m["launched"] > 0 and m["paced_launched"] > 0 and m["rss_mb"]


def test_actor_call_rows_iris_only() -> None:
    rows = actor_calls.rows(quick=True, with_ray=False)
    assert [r.key for r in rows] == ["actor.sync_rate", "actor.sync_latency", "actor.pool_rate", "actor.broadcast"]
    size = actor_calls.sizes(quick=True)
    assert len(rows[0].iris) == size.rounds and all(rate > 0 for rate in rows[0].iris)
    assert len(rows[1].iris) == size.rounds * size.calls
    assert all(r.ray_note == "not installed" and r.ray is None for r in rows)


def test_sustained_throughput_measures_rate_and_submit_to_done_iris_only() -> None:
    # Enough jobs that the worker's CPU, read in 10 ms clock ticks at ~2 ms a job, cannot round to 0.
    m = sustained_throughput.measure(jobs=40, clients=2, ray_jobs=0, ray_tasks=0, with_ray=False)
    assert m["iris_rate"] > 0
    assert len(m["iris_latency"]) == 40 and all(ms >= 0 for ms in m["iris_latency"])
    # The cluster runs in a process of its own: the clients' CPU and the controller's are apart.
    assert all(m["cpu_per_job_ms"][name] > 0 for name in ("clients", "controller", "worker"))


def test_cold_start_phases_of_one_run_each_timed_in_order(tmp_path: Path) -> None:
    phases = cold_start.iris_phases_once(str(tmp_path))

    names = [name for name, _ in cold_start.IRIS_PHASES] + [cold_start.FIRST_OUTPUT, cold_start.EXIT]
    assert list(phases) == names
    assert all(seconds >= 0 for seconds in phases.values()), phases
