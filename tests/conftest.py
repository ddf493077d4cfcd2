"""Suite-wide rules."""

from __future__ import annotations

import os
import signal

import pytest

# A suite started in the background by a non-interactive shell inherits SIGINT ignored, and so
# would every CLI it starts: the tests that press Ctrl-C on one would fail for the launcher's sake.
# Python's own handler is what a terminal user's `iris` has.
signal.signal(signal.SIGINT, signal.default_int_handler)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """In CI nothing may be skipped: a missing component is a failure, never a silent pass."""
    outcome = yield
    report = outcome.get_result()
    if os.environ.get("CI") == "true" and report.skipped and not hasattr(report, "wasxfail"):
        report.outcome = "failed"
        report.longrepr = f"skipped in CI, which is not allowed: {report.longrepr}"
