"""Fixtures for the dashboard's browser tests: Debian's chromium driven by Playwright, and a
place for screenshots that a person can look at after the run."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

# benchmarks/ is a top-level package beside src/, not installed with iris.
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from benchmarks.dashboard_scale import CHROMIUM, launch_chromium  # noqa: E402


@pytest.fixture(scope="session")
def browser() -> Iterator[object]:
    if not CHROMIUM.exists():
        message = f"{CHROMIUM} is missing: install Debian's chromium (scripts/ci_setup.sh does)"
        if os.environ.get("CI") == "true":
            pytest.fail(message)
        pytest.skip(message)
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        chromium = launch_chromium(playwright)
        try:
            yield chromium
        finally:
            chromium.close()


@pytest.fixture(scope="session")
def screenshots(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Where the tests save what a person would see, to be looked at after the run."""
    return tmp_path_factory.mktemp("dashboard-screenshots")


@pytest.fixture
def page(browser) -> Iterator[object]:
    context = browser.new_context(viewport={"width": 1400, "height": 1000})
    page = context.new_page()
    page.set_default_timeout(15_000)
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    page.page_errors = errors
    try:
        yield page
    finally:
        context.close()
