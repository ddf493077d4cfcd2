"""Run the test suite as two pytest sessions side by side, or as one when given test paths.

`scripts/test` calls this after installing what the suite needs. Most of the suite's time is spent
waiting for subprocesses, daemons and sockets, so on a two-core CI machine one session leaves a
core idle. The suite splits along what the tests share:

- "systems": the tests that start the session's own dockerd and containerd, the network-namespace
  hosts with their sshd, and the Google and Kubernetes fakes built on them. They share those
  session-wide daemons, so they stay in one session.
- "core": everything else (controller logic, storage, the CLI and end-to-end runs on local
  clusters, the dashboard, chaos), which binds only port 0 and private temporary directories.

Each session collects `tests` as a single session would, ignoring the other session's paths: a
directory's conftest.py then loads when its tests are collected, as it does in one session, instead
of every conftest.py at start-up (test modules that import from their own conftest rely on that).
Each line a session prints is prefixed with its name; the last line sums both up with each
session's pytest result line (what a daemon thread logs while the interpreter exits comes after it
and is not a result). The exit status is the first failing session's, or 0.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

TESTS = Path("tests")
SYSTEMS_PATHS = ("runtime", "hosts", "gcp", "coreweave")
# pytest's closing line, as -q prints it: "1438 passed in 477.57s (0:07:57)", "2 failed, 9 passed ...".
PYTEST_RESULT = re.compile(r"^=*\s*(\d+ (passed|failed|errors?|skipped|deselected)\b.* in [\d.]+s\b|no tests ran\b)")


def _names_test_paths(args: list[str]) -> bool:
    """Whether the arguments choose tests by path (then one session runs exactly those)."""
    return any(not arg.startswith("-") and ("::" in arg or Path(arg.split("::")[0]).exists()) for arg in args)


def _shards() -> dict[str, list[str]]:
    systems = [str(TESTS / name) for name in SYSTEMS_PATHS if (TESTS / name).exists()]
    core = sorted(
        str(path)
        for path in TESTS.iterdir()
        if path.name not in SYSTEMS_PATHS
        and (path.is_dir() and not path.name.startswith((".", "__")) or path.name.startswith("test_"))
    )
    return {"systems": systems, "core": core}


def _relay(name: str, stream, last_lines: dict[str, str], lock: threading.Lock) -> None:
    """Prints the session's lines; keeps its pytest result line (else its last line) for the summary."""
    found_result = False
    for raw in iter(stream.readline, b""):
        line = raw.decode(errors="replace").rstrip("\n")
        if PYTEST_RESULT.match(line):
            last_lines[name], found_result = line.strip("= "), True
        elif line.strip() and not found_result:
            last_lines[name] = line
        with lock:
            sys.stdout.write(f"[{name}] {line}\n")
            sys.stdout.flush()


def _run_side_by_side(args: list[str]) -> int:
    started = time.monotonic()
    shards = _shards()
    processes: dict[str, subprocess.Popen[bytes]] = {}
    for name in shards:
        ignored = [f"--ignore={path}" for other, paths in shards.items() if other != name for path in paths]
        processes[name] = subprocess.Popen(
            [sys.executable, "-m", "pytest", *args, *ignored, str(TESTS)],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )

    def forward(signum: int, _frame) -> None:
        for process in processes.values():
            if process.poll() is None:
                os.killpg(process.pid, signum)

    signal.signal(signal.SIGINT, forward)
    signal.signal(signal.SIGTERM, forward)

    last_lines: dict[str, str] = {}
    lock = threading.Lock()
    relays = [
        threading.Thread(target=_relay, args=(name, process.stdout, last_lines, lock), daemon=True)
        for name, process in processes.items()
    ]
    for relay in relays:
        relay.start()
    codes = {name: process.wait() for name, process in processes.items()}
    for relay in relays:
        relay.join()

    summary = "; ".join(f"{name}: {last_lines.get(name, 'no output')}" for name in processes)
    print(f"scripts/test: {summary}; both sessions took {time.monotonic() - started:.0f}s")
    return next((code for code in codes.values() if code != 0), 0)


def main() -> int:
    args = sys.argv[1:]
    if os.environ.get("IRIS_TEST_SHARDS") == "1" or _names_test_paths(args):
        os.execv(sys.executable, [sys.executable, "-m", "pytest", *args])
    return _run_side_by_side(args)


if __name__ == "__main__":
    sys.exit(main())
