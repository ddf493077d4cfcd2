"""The Jobs page over 100,000 jobs, timed in the browser: first paint under 1 s, each page of the
table under 200 ms (the same measurement as `benchmarks.dashboard_scale`)."""

from __future__ import annotations

import json
import re
import statistics
from pathlib import Path

import pytest
from playwright.sync_api import expect

from benchmarks.common import percentile
from benchmarks.dashboard_scale import (
    FIRST_PAINT,
    FIRST_PAINT_TARGET_MS,
    PAGE_TARGET_MS,
    controller_with_jobs,
    measure_jobs_page,
)

JOBS = 100_000
pytestmark = pytest.mark.timeout(300)


def test_dashboard_jobs_page_over_100k_jobs_paints_within_targets(browser, screenshots: Path, capsys) -> None:
    with controller_with_jobs(JOBS) as url:
        context = browser.new_context(viewport={"width": 1400, "height": 1000})
        page = context.new_page()
        page.goto(url + "#/jobs")
        expect(page.locator("table.jobs tbody tr")).to_have_count(50)
        expect(page.locator(".page-info")).to_contain_text(re.compile(r"Page 1 of 1,9\d\d · 9\d,\d{3} top-level jobs"))
        page.locator(".pager").get_by_role("button", name="Last").click()
        expect(page.locator(".page-info")).to_contain_text(re.compile(r"Page 1,9\d\d of 1,9\d\d"))
        page.screenshot(path=screenshots / "jobs-100k.png", full_page=True)
        context.close()

        times = measure_jobs_page(browser, url, loads=5, pages=12)

    summary = {
        name: {"n": len(values), "median_ms": statistics.median(values), "p99_ms": percentile(values, 99)}
        for name, values in times.items()
    }
    (screenshots / "jobs-100k-times.json").write_text(json.dumps(summary, indent=2))
    with capsys.disabled():
        for name, stats in summary.items():
            print(f"\n{name}: median {stats['median_ms']:.0f} ms, p99 {stats['p99_ms']:.0f} ms (n={stats['n']})", end="")
    # Medians: the test machine is shared, and one stalled sample is a neighbour's doing; the
    # benchmark row holds the p99s to the same targets.
    for name, stats in summary.items():
        target = FIRST_PAINT_TARGET_MS if name == FIRST_PAINT else PAGE_TARGET_MS
        assert stats["median_ms"] < target, f"{name}: median {stats['median_ms']:.0f} ms, target {target:.0f} ms"
