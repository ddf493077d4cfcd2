"""Pieces every benchmark shares: percentiles, result rows and targets, and process cleanup.

A measurement module returns `Row`s: samples for Iris and, where a peer operation exists, for Ray,
plus the issue's targets. `benchmarks.run` turns rows into the markdown table.

Cleanup: Ray daemonizes its processes (`ray start` exits and leaves gcs_server, raylet, dashboard
... behind), so a benchmark process makes itself a child subreaper. Every process it starts,
directly or through such a daemon, then stays its descendant and is ended by PID at the end;
nothing is ever matched by name.
"""

from __future__ import annotations

import contextlib
import ctypes
import dataclasses
import json
import os
import queue
import signal
import socket
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import psutil

PR_SET_CHILD_SUBREAPER = 36
# Helper processes run `python -m benchmarks.<module>` from here: the benchmarks are a top-level
# package beside src/, importable from the repository root only.
REPO = Path(__file__).resolve().parent.parent
# How long a helper process (JsonLineProcess) may take to answer a command.
COMMAND_TIMEOUT_S = 90.0


def percentile(values: list[float], q: float) -> float:
    """Nearest-rank percentile; p99 of fewer than 100 samples is (close to) the largest."""
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, round(q / 100 * (len(ordered) - 1))))
    return ordered[index]


@dataclasses.dataclass(frozen=True)
class Target:
    """One of the issue's targets.

    kind "max": the Iris statistic `stat` must be below `value` (`strict`) or at most `value`.
    kind "min": the Iris statistic `stat` must be above `value` (`strict`) or at least `value`.
    kind "ratio_max" / "ratio_min": the ratio of the Iris and Ray medians must be at most / at
    least `value`.
    """

    text: str
    kind: str
    value: float
    stat: str = "median"
    strict: bool = False


@dataclasses.dataclass
class Row:
    key: str
    label: str
    unit: str
    iris: list[float]
    ray: list[float] | None = None
    # Why there is no Ray number: "no peer", "not installed", or the error that stopped it.
    ray_note: str = ""
    targets: list[Target] = dataclasses.field(default_factory=list)
    higher_is_better: bool = False
    note: str = ""

    def to_json(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_json(cls, data: dict) -> Row:
        data = dict(data)
        data["targets"] = [Target(**t) for t in data.get("targets", [])]
        return cls(**data)


def stat(values: list[float], name: str, higher_is_better: bool = False) -> float:
    if name == "median":
        return statistics.median(values)
    # For a rate the bad tail is the low end: its "p99" is the 1st percentile.
    return percentile(values, 1 if higher_is_better else 99)


def evaluate(row: Row, target: Target) -> tuple[bool | None, str]:
    """(passed, how far off); passed is None when the row lacks the numbers to decide."""
    if not row.iris:
        return None, "no Iris result"
    if target.kind == "max":
        value = stat(row.iris, target.stat, row.higher_is_better)
        passed = value < target.value if target.strict else value <= target.value
        return passed, f"{target.stat} {value:.4g} {row.unit} is {value / target.value:.2f}x the {target.value:g} {row.unit} limit"
    if target.kind == "min":
        value = stat(row.iris, target.stat, row.higher_is_better)
        passed = value > target.value if target.strict else value >= target.value
        return passed, f"{target.stat} {value:.4g} {row.unit} is {value / target.value:.2f}x the {target.value:g} {row.unit} floor"
    if not row.ray:
        return None, f"Ray {row.ray_note or 'not measured'}"
    ratio = statistics.median(row.iris) / statistics.median(row.ray)
    if target.kind == "ratio_max":
        return ratio <= target.value, f"Iris/Ray {ratio:.2f}, target at most {target.value:g}"
    if target.kind == "ratio_min":
        return ratio >= target.value, f"Iris/Ray {ratio:.2f}, target at least {target.value:g}"
    raise ValueError(f"unknown target kind {target.kind}")


# ---------------------------------------------------------------- processes


def become_subreaper() -> None:
    """Orphaned descendants (daemonized Ray processes) are re-parented to this process, so
    `end_descendants` can find and end them by PID."""
    if sys.platform.startswith("linux"):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)


def end_processes(processes: list[psutil.Process], grace_s: float = 3.0) -> None:
    """SIGTERM, then SIGKILL whatever is still there after `grace_s`; reaps what it can."""
    for process in processes:
        with contextlib.suppress(psutil.Error):
            process.terminate()
    _, alive = psutil.wait_procs(processes, timeout=grace_s)
    for process in alive:
        with contextlib.suppress(psutil.Error):
            process.kill()
    psutil.wait_procs(alive, timeout=grace_s)


def descendants() -> list[psutil.Process]:
    with contextlib.suppress(psutil.Error):
        return psutil.Process().children(recursive=True)
    return []


def end_descendants(grace_s: float = 3.0, keep: set[int] = frozenset()) -> int:
    """End every descendant of this process not in `keep`; returns how many there were."""
    found = [p for p in descendants() if p.pid not in keep]
    if found:
        end_processes(found, grace_s)
    _reap_zombies()
    return len(found)


def _reap_zombies() -> None:
    # Re-parented orphans that exited become our zombies; nobody else will wait for them.
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


@contextlib.contextmanager
def owned_processes(grace_s: float = 3.0) -> Iterator[None]:
    """Ends, on the way out, every descendant that appeared inside the block."""
    before = {p.pid for p in descendants()}
    try:
        yield
    finally:
        end_descendants(grace_s, keep=before)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def kill_on_signal() -> None:
    """Turn SIGTERM into SystemExit so `finally` blocks (and their cleanup) run when the harness
    ends a measurement that ran past its time limit."""

    def handler(signum, frame):
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, handler)


class Deadline:
    def __init__(self, seconds: float):
        self.end = time.monotonic() + seconds

    def left(self) -> float:
        return self.end - time.monotonic()

    def check(self, what: str) -> None:
        if self.left() <= 0:
            raise TimeoutError(f"{what} ran past its time limit")


class JsonLineProcess:
    """A helper process that answers one JSON line per line it is sent."""

    def __init__(self, command: list[str], log_path: Path, first_line_timeout: float):
        self._log = open(log_path, "ab")
        self.process = subprocess.Popen(
            command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._log, text=True, bufsize=1, cwd=REPO
        )
        self._lines: queue.Queue[str | None] = queue.Queue()
        threading.Thread(target=self._pump, daemon=True).start()
        self.hello = self.read(first_line_timeout)

    def _pump(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self._lines.put(line)
        self._lines.put(None)

    def read(self, timeout: float) -> dict:
        try:
            line = self._lines.get(timeout=timeout)
        except queue.Empty:
            raise TimeoutError(f"{self.process.args[2]} said nothing for {timeout:.0f}s") from None
        if line is None:
            raise RuntimeError(f"{self.process.args[2]} exited with code {self.process.wait()}; see {self._log.name}")
        return json.loads(line)

    def command(self, text: str, timeout: float = COMMAND_TIMEOUT_S) -> dict:
        assert self.process.stdin is not None
        self.process.stdin.write(text + "\n")
        self.process.stdin.flush()
        return self.read(timeout)

    def close(self) -> None:
        if self.process.poll() is None:
            try:
                assert self.process.stdin is not None
                self.process.stdin.write("quit\n")
                self.process.stdin.close()
                self.process.wait(15)
            except (OSError, subprocess.TimeoutExpired):
                self.process.kill()
                self.process.wait()
        self._log.close()
