"""Cold start to first output: from nothing to a one-line command's output, as a user sees it.

Run: uv run python -m benchmarks.cold_start [--runs N] [--ray-runs M]

- Iris: `iris run --local -- python -c "print('x')"`: a throwaway local cluster (the controller
  in a process the CLI forks, one worker forked from that one), the job, its output streamed back.
- Ray, driver: `python -c "import ray; ray.init(); <a task printing 'x'>"`: a fresh local Ray
  started by `ray.init()`, the task's print forwarded to the driver's stdout.
- Ray, jobs: `ray start --head` then `ray job submit -- python -c "print('x')"`, which tails the
  job's output.

Each sample is the time from starting the first command to the line `x` on stdout; the
teardown after it is not counted. Python's bytecode caches are warm, as on any machine where the
command ran before: the packages of both sides are compiled once before the first sample, and
the commands run without PYTHONDONTWRITEBYTECODE (set, every run would recompile every module it
imports: about 0.2 s of CPU for Iris, more for Ray). Runs of the three alternate, so a noisy moment on the machine
hits them alike. Every command runs in an empty directory (Iris ships the working directory as
the job's bundle; Ray ships nothing unless asked).

`--phases N` instead times N Iris runs phase by phase, from the progress lines `iris run --local`
writes to stderr (each ends a phase), the `x`, and the command's exit.
"""

from __future__ import annotations

import argparse
import compileall
import importlib.util
import os
import re
import selectors
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from benchmarks.common import Row, Target, become_subreaper, owned_processes, percentile
from benchmarks.ray_local import RayHead, ray_command, ray_env, ray_installed

LINE_TIMEOUT_S = 60.0
EXIT_TIMEOUT_S = 30.0
ANSI = re.compile(r"\x1b\[[0-9;]*m")
# Ray prefixes a task's output with "(f pid=1234) ".
RAY_PREFIX = re.compile(r"^\([^)]*\)\s*")

RAY_DRIVER = """
import ray
ray.init()

@ray.remote
def f():
    print("x", flush=True)

ray.get(f.remote())
ray.shutdown()
"""


def is_x(line: str) -> bool:
    return RAY_PREFIX.sub("", ANSI.sub("", line).strip()) == "x"


def iris_command() -> list[str]:
    script = Path(sys.executable).with_name("iris")
    launcher = [str(script)] if script.exists() else [sys.executable, "-m", "iris.cli.main"]
    return [*launcher, "run", "--local", "--", sys.executable, "-c", "print('x')"]


def time_to_line(
    command: list[str], env: dict[str, str], cwd: str, match: Callable[[str], bool], began: float | None = None
) -> float:
    """Seconds from `began` (default: now) until a line of the command's stdout matches; then
    waits for the command to exit, and ends it if it does not."""
    began = time.perf_counter() if began is None else began
    with tempfile.TemporaryFile() as stderr:
        process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=stderr, stdin=subprocess.DEVNULL, env=env, cwd=cwd)
        try:
            elapsed = _read_until(process, match, began)
            if elapsed is None:
                stderr.seek(0)
                tail = " | ".join(stderr.read().decode(errors="replace").strip().splitlines()[-3:])
                raise RuntimeError(f"{' '.join(command[:4])} ... printed no 'x' (exit {process.poll()}): {tail}")
            _drain(process, EXIT_TIMEOUT_S)
            return elapsed
        finally:
            if process.poll() is None:
                process.kill()
            process.wait()


def _read_until(process: subprocess.Popen, match: Callable[[str], bool], began: float) -> float | None:
    assert process.stdout is not None
    selector = selectors.DefaultSelector()
    selector.register(process.stdout, selectors.EVENT_READ)
    buffer = b""
    deadline = time.monotonic() + LINE_TIMEOUT_S
    try:
        while time.monotonic() < deadline:
            if not selector.select(timeout=max(0.0, deadline - time.monotonic())):
                continue
            chunk = os.read(process.stdout.fileno(), 65536)
            if not chunk:
                return None
            buffer += chunk
            *lines, buffer = buffer.split(b"\n")
            for line in lines:
                if match(line.decode(errors="replace")):
                    return time.perf_counter() - began
        return None
    finally:
        selector.close()


def _drain(process: subprocess.Popen, timeout: float) -> None:
    assert process.stdout is not None
    deadline = time.monotonic() + timeout
    selector = selectors.DefaultSelector()
    selector.register(process.stdout, selectors.EVENT_READ)
    try:
        while time.monotonic() < deadline:
            readable = selector.select(timeout=max(0.0, deadline - time.monotonic()))
            if readable and not os.read(process.stdout.fileno(), 65536):
                break
        process.wait(max(0.1, deadline - time.monotonic()))
    except subprocess.TimeoutExpired:
        pass
    finally:
        selector.close()


# What ends each phase of `iris run --local`, in order: a piece of a progress line on stderr,
# then the job's line on stdout and the command's exit.
IRIS_PHASES = (
    ("import the CLI", "iris: starting a local cluster"),
    ("start the controller (imports, build, serve)", "iris: controller listening"),
    ("its worker registered", "worker(s) registered"),
    ("submit the job", "iris: submitted"),
)
FIRST_OUTPUT = "job's first output"
EXIT = "teardown and exit"


def iris_phases_once(workdir: str) -> dict[str, float]:
    """Seconds each phase of one `iris run --local` took (see IRIS_PHASES)."""
    with owned_processes():
        began = time.perf_counter()
        process = subprocess.Popen(
            iris_command(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, cwd=workdir
        )
        try:
            ends = _phase_ends(process, began)
        finally:
            if process.poll() is None:
                process.kill()
            process.wait()
    names = [name for name, _ in IRIS_PHASES] + [FIRST_OUTPUT, EXIT]
    missing = [name for name in names if name not in ends]
    if missing:
        raise RuntimeError(f"`iris run --local` never reached: {', '.join(missing)}")
    durations, previous = {}, 0.0
    for name in names:
        durations[name] = ends[name] - previous
        previous = ends[name]
    return durations


def _phase_ends(process: subprocess.Popen, began: float) -> dict[str, float]:
    assert process.stdout is not None and process.stderr is not None
    selector = selectors.DefaultSelector()
    selector.register(process.stdout, selectors.EVENT_READ, "stdout")
    selector.register(process.stderr, selectors.EVENT_READ, "stderr")
    buffers = {"stdout": b"", "stderr": b""}
    ends: dict[str, float] = {}
    deadline = time.monotonic() + LINE_TIMEOUT_S + EXIT_TIMEOUT_S
    try:
        while selector.get_map() and time.monotonic() < deadline:
            for key, _ in selector.select(timeout=max(0.0, deadline - time.monotonic())):
                chunk = os.read(key.fileobj.fileno(), 65536)
                if not chunk:
                    selector.unregister(key.fileobj)
                    continue
                now = time.perf_counter() - began
                *lines, buffers[key.data] = (buffers[key.data] + chunk).split(b"\n")
                for line in (raw.decode(errors="replace") for raw in lines):
                    if key.data == "stdout" and is_x(line):
                        ends.setdefault(FIRST_OUTPUT, now)
                    for name, marker in IRIS_PHASES:
                        if key.data == "stderr" and marker in line:
                            ends.setdefault(name, now)
        process.wait(max(0.1, deadline - time.monotonic()))
        ends[EXIT] = time.perf_counter() - began
    except subprocess.TimeoutExpired:
        pass
    finally:
        selector.close()
    return ends


def warm_bytecode(with_ray: bool) -> None:
    """Let the commands use and write bytecode caches, and fill them for the packages they import."""
    os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
    packages = ["iris", "ray"] if with_ray else ["iris"]
    for name in packages:
        spec = importlib.util.find_spec(name)
        for location in (spec.submodule_search_locations or []) if spec else []:
            compileall.compile_dir(location, quiet=1, workers=0)


def print_phases(runs: int) -> None:
    warm_bytecode(with_ray=False)
    workdir = tempfile.mkdtemp(prefix="iris-bench-cold-")
    try:
        samples = [iris_phases_once(workdir) for _ in range(runs)]
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    print("| phase of `iris run --local` | median (ms) | min (ms) |\n|---|---|---|")
    for name in samples[0]:
        values = [sample[name] for sample in samples]
        print(f"| {name} | {percentile(values, 50) * 1000:.0f} | {min(values) * 1000:.0f} |")
    to_output = [sum(v for k, v in sample.items() if k != EXIT) for sample in samples]
    print(f"| to first output | {percentile(to_output, 50) * 1000:.0f} | {min(to_output) * 1000:.0f} |")


def iris_once(workdir: str) -> float:
    with owned_processes():
        return time_to_line(iris_command(), dict(os.environ), workdir, is_x)


def ray_driver_once(workdir: str) -> float:
    temp_dir = tempfile.mkdtemp(prefix="irb-", dir="/tmp")
    try:
        with owned_processes(grace_s=5.0):
            return time_to_line([sys.executable, "-c", RAY_DRIVER], ray_env(temp_dir), workdir, is_x)
    finally:
        shutil.rmtree(temp_dir, ignore_errors=True)


def ray_jobs_once(workdir: str, keep_head: bool = False) -> tuple[float, RayHead | None]:
    """Seconds to first output, and the head still running when `keep_head` (the caller stops it)."""
    head = RayHead()
    try:
        began = time.perf_counter()
        head.start()
        submit = [*ray_command(), "job", "submit", "--address", head.dashboard_url, "--", sys.executable, "-c", "print('x')"]
        elapsed = time_to_line(submit, head.env, workdir, is_x, began=began)
    except BaseException:
        head.stop()
        raise
    if keep_head:
        return elapsed, head
    head.stop()
    return elapsed, None


def measure(
    iris_runs: int, ray_runs: int, with_ray: bool, keep_head: bool = False
) -> tuple[dict[str, list[float]], RayHead | None]:
    """Seconds to first output, per variant; the variants take turns. With `keep_head`, the Ray
    head of the last `ray start` sample is left running (warm) and returned."""
    warm_bytecode(with_ray)
    results: dict[str, list[float]] = {"iris": [], "ray_driver": [], "ray_jobs": []}
    head = None
    workdir = tempfile.mkdtemp(prefix="iris-bench-cold-")
    try:
        cycles = max(iris_runs, ray_runs if with_ray else 0)
        for cycle in range(cycles):
            if cycle < iris_runs:
                results["iris"].append(iris_once(workdir))
            if with_ray and cycle < ray_runs:
                results["ray_driver"].append(ray_driver_once(workdir))
                elapsed, head = ray_jobs_once(workdir, keep_head and cycle == ray_runs - 1)
                results["ray_jobs"].append(elapsed)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    return results, head


TARGET = Target("<= 0.5x Ray", "ratio_max", 0.5)


def sizes(quick: bool) -> tuple[int, int]:
    """(Iris runs, runs of each Ray variant)."""
    return (2, 1) if quick else (8, 3)


def rows_from(results: dict[str, list[float]], ray_note: str) -> list[Row]:
    def ms(values: list[float]) -> list[float]:
        return [v * 1000 for v in values]

    return [
        Row(
            "cold_start.driver",
            "cold start to first output: `iris run --local` vs `ray.init()` + task",
            "ms",
            ms(results["iris"]),
            ms(results["ray_driver"]) or None,
            ray_note,
            [TARGET],
        ),
        Row(
            "cold_start.jobs",
            "cold start to first output: `iris run --local` vs `ray start --head` + `ray job submit`",
            "ms",
            ms(results["iris"]),
            ms(results["ray_jobs"]) or None,
            ray_note,
            [TARGET],
        ),
    ]


def rows(quick: bool, with_ray: bool) -> list[Row]:
    iris_runs, ray_runs = sizes(quick)
    try:
        results, _ = measure(iris_runs, ray_runs, with_ray)
        ray_note = "" if with_ray else "not installed"
    except Exception as exc:
        if not with_ray:
            raise
        # A Ray failure must not cost the Iris numbers.
        results, _ = measure(iris_runs, 0, False)
        ray_note = f"failed: {str(exc).splitlines()[0][:120]}"
    return rows_from(results, ray_note)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5, help="Iris runs (default 5)")
    parser.add_argument("--ray-runs", type=int, default=3, help="runs of each Ray variant (default 3; 0 skips Ray)")
    parser.add_argument("--phases", type=int, default=0, metavar="N", help="time N Iris runs phase by phase instead")
    args = parser.parse_args()
    become_subreaper()
    if args.phases:
        print_phases(args.phases)
        return
    with_ray = args.ray_runs > 0 and ray_installed()
    results, _ = measure(args.runs, args.ray_runs, with_ray)
    print("| variant | n | median (ms) | p99 (ms) |\n|---|---|---|---|")
    for name, values in results.items():
        if values:
            print(f"| {name} | {len(values)} | {percentile(values, 50) * 1000:.0f} | {percentile(values, 99) * 1000:.0f} |")


if __name__ == "__main__":
    main()
