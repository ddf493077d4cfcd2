"""Dashboard at scale: the Jobs page in a real browser against a controller whose store holds
100,000 jobs.

Run: uv run python -m benchmarks.dashboard_scale [--jobs N] [--loads L] [--pages P]

The store is filled as in `benchmarks.store_scale`, a real ControllerDaemon
(`benchmarks.controller_host`, its own process) serves it, and Debian's chromium (driven by
Playwright, headless) opens the dashboard. Two numbers, both read from marks the page itself sets
once the frame holding the new rows has been painted:

- first paint: from the start of navigation to the first painted table of jobs, over fresh loads;
- a page of the table: from the request for the page to its painted rows, for Next, Last (the
  deepest offset) and a state filter.

Ray's dashboard is the peer: its published many_tasks release test reports p99 553 ms for its
dashboard's API; there is no Ray run here.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from benchmarks.common import Row, Target, become_subreaper, owned_processes, percentile
from benchmarks.controller_scale import start_controller
from benchmarks.store_scale import build_store

CHROMIUM = Path("/usr/bin/chromium")
# Headless and quiet: no sandbox (tests run as root), no GPU, and nothing that reaches the network.
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
FIRST_PAINT_TARGET_MS = 1000.0
PAGE_TARGET_MS = 200.0
WARMUP_LOADS = 1
RAY_NOTE = "no Ray run; Ray's published many_tasks dashboard p99 is 553 ms"

FIRST_PAINT = "Jobs page first paint"
NEXT_PAGE = "Jobs table, next page"
LAST_PAGE = "Jobs table, last page (deepest offset)"
STATE_FILTER = "Jobs table, state filter"


def launch_chromium(playwright: Any) -> Any:
    return playwright.chromium.launch(executable_path=str(CHROMIUM), headless=True, args=CHROMIUM_ARGS)


def _rendered_count(page: Any) -> int:
    return page.evaluate("() => performance.getEntriesByName('iris:jobs-rendered').length")


def _last_page_ms(page: Any) -> float:
    return page.evaluate("() => performance.getEntriesByName('iris:jobs-page').at(-1).duration")


def _click_and_time(page: Any, button: str) -> float:
    """Clicks a pager button and returns how long the page took, once its rows are painted."""
    before = _rendered_count(page)
    page.locator(".pager").get_by_role("button", name=button).click()
    page.wait_for_function(f"() => performance.getEntriesByName('iris:jobs-rendered').length > {before}")
    return _last_page_ms(page)


def measure_jobs_page(browser: Any, url: str, loads: int, pages: int) -> dict[str, list[float]]:
    """Times in ms per measurement; `url` is the dashboard's root."""
    times: dict[str, list[float]] = {FIRST_PAINT: [], NEXT_PAGE: [], LAST_PAGE: [], STATE_FILTER: []}
    # One untimed load first, as store_scale warms up: a controller that has just opened its store
    # answers its very first query from a cold page cache.
    for load in range(WARMUP_LOADS + loads):
        # A fresh context per load: nothing cached, as for a person opening the dashboard.
        context = browser.new_context(viewport={"width": 1400, "height": 1000})
        page = context.new_page()
        page.goto(url + "#/jobs")
        page.wait_for_function("() => performance.getEntriesByName('iris:jobs-rendered').length > 0")
        first_paint = page.evaluate("() => performance.getEntriesByName('iris:jobs-rendered')[0].startTime")
        if load >= WARMUP_LOADS:
            times[FIRST_PAINT].append(first_paint)
        context.close()
    context = browser.new_context(viewport={"width": 1400, "height": 1000})
    page = context.new_page()
    page.goto(url + "#/jobs")
    page.wait_for_function("() => performance.getEntriesByName('iris:jobs-rendered').length > 0")
    for _ in range(pages):
        times[NEXT_PAGE].append(_click_and_time(page, "Next"))
    for _ in range(max(1, pages // 4)):
        _click_and_time(page, "First")  # back to the top, untimed
        times[LAST_PAGE].append(_click_and_time(page, "Last"))
    for state in ["RUNNING", "FAILED", "SUCCEEDED", "PENDING"] * max(1, pages // 8):
        before = _rendered_count(page)
        page.get_by_label("State", exact=True).select_option(state)
        page.wait_for_function(f"() => performance.getEntriesByName('iris:jobs-rendered').length > {before}")
        times[STATE_FILTER].append(_last_page_ms(page))
    context.close()
    return times


@contextmanager
def controller_with_jobs(jobs: int) -> Iterator[str]:
    """A controller in its own process over a store of `jobs` jobs; yields the dashboard URL."""
    with tempfile.TemporaryDirectory(prefix="iris-bench-dashboard-") as tmp, owned_processes():
        state_dir = Path(tmp) / "controller"
        state_dir.mkdir()
        build_store(state_dir / "controller.sqlite3", jobs)
        controller = start_controller(state_dir, Path(tmp))
        try:
            yield controller.hello["url"] + "/"
        finally:
            controller.close()


def measure(jobs: int, loads: int, pages: int) -> dict[str, list[float]]:
    from playwright.sync_api import sync_playwright

    with controller_with_jobs(jobs) as url, sync_playwright() as playwright:
        browser = launch_chromium(playwright)
        try:
            return measure_jobs_page(browser, url, loads, pages)
        finally:
            browser.close()


def rows(quick: bool, with_ray: bool, jobs: int = 100_000) -> list[Row]:
    times = measure(jobs, loads=5 if quick else 10, pages=20 if quick else 40)
    result = []
    for i, (name, values) in enumerate(times.items()):
        target = FIRST_PAINT_TARGET_MS if name == FIRST_PAINT else PAGE_TARGET_MS
        result.append(
            Row(
                f"dashboard_scale.{i}",
                f"{name}, {jobs:,} jobs in the store (headless chromium)",
                "ms",
                values,
                None,
                RAY_NOTE,
                [Target(f"p99 < {target:.0f} ms", "max", target, stat="p99", strict=True)],
            )
        )
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=100_000)
    parser.add_argument("--loads", type=int, default=10)
    parser.add_argument("--pages", type=int, default=40)
    args = parser.parse_args()
    become_subreaper()
    times = measure(args.jobs, args.loads, args.pages)
    print(f"{args.jobs:,} jobs in the store\n")
    print("| measurement | n | median (ms) | p99 (ms) | max (ms) |\n|---|---|---|---|---|")
    for name, values in times.items():
        print(
            f"| {name} | {len(values)} | {statistics.median(values):.1f} | {percentile(values, 99):.1f} "
            f"| {max(values):.1f} |"
        )


if __name__ == "__main__":
    main()
