"""Every benchmark of Iris against Ray on this machine, as one markdown table.

Run: uv run --group bench python -m benchmarks.run [--quick] [--only STEP ...] [--output PATH]

Writes the table to docs/performance.md (between its markers, so notes below them stay) and
prints it. Without Ray installed (`uv sync --group bench`), the Iris rows still run and the Ray
columns say "not installed".

Each step runs in a process of its own with a time limit: a hung or crashed step costs its own
rows only, and every process it started (Ray's daemons included) is ended by PID when it is over.
Steps run one at a time, so no two measurements share the machine.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import psutil

from benchmarks.common import (
    REPO,
    Row,
    Target,
    become_subreaper,
    end_descendants,
    evaluate,
    kill_on_signal,
    stat,
)
from benchmarks.ray_local import INSTALL_HINT, ray_installed

DEFAULT_OUTPUT = REPO / "docs" / "performance.md"
BEGIN_MARK = "<!-- benchmarks:begin -->"
END_MARK = "<!-- benchmarks:end -->"
# Whole-run budgets, minus room for starting Python and writing the report: the scale steps of
# issue 19 (10,000 workers, a million jobs, 5,000 jobs) take most of an hour on 2 cores.
BUDGET_S = {True: 600.0, False: 3600.0}


# ---------------------------------------------------------------- steps


def job_rows(quick: bool, with_ray: bool) -> list[Row]:
    """Cold start, then submit latency and throughput on warm clusters.

    The Ray head of the last `ray start` cold-start sample stays up and is the warm head (a Ray
    head takes ~10 s to start here). The warm Ray measurements run first and the head is stopped
    before the warm Iris cluster starts: never both at once, so neither one's idle daemons slow
    the other.
    """
    from benchmarks import cold_start, submit_latency, throughput
    from iris.client import IrisClient

    iris_runs, ray_runs = cold_start.sizes(quick)
    latency_jobs, ray_latency_jobs = (30, 4) if quick else (100, 20)
    tp_jobs, tp_clients, tp_rounds, ray_tp_rounds = (8, 4, 3, 1) if quick else (32, 4, 5, 2)
    ray_note = "" if with_ray else "not installed"
    ray_latency: dict[str, list[float]] = {}
    ray_rates: list[float] = []
    try:
        cold, head = cold_start.measure(iris_runs, ray_runs, with_ray, keep_head=with_ray)
    except Exception as exc:
        if not with_ray:
            raise
        # A Ray failure must not cost the Iris numbers.
        ray_note = f"failed: {str(exc).splitlines()[0][:120]}"
        cold, head = cold_start.measure(iris_runs, 0, False)
    if head is not None:
        from benchmarks.ray_local import apply_ray_env

        apply_ray_env()
        try:
            ray_latency = submit_latency.measure_ray(head.job_client(), ray_latency_jobs)
            ray_rates = throughput.measure_ray(head.dashboard_url, tp_jobs, tp_clients, ray_tp_rounds)
        except Exception as exc:
            ray_note = f"failed: {str(exc).splitlines()[0][:120]}"
        finally:
            head.stop()
    with tempfile.TemporaryDirectory(prefix="iris-bench-warm-") as workspace:
        with IrisClient.local(workers=1, workspace=Path(workspace)) as client:
            latency = submit_latency.measure_iris(client, latency_jobs)
            rates = throughput.measure_iris(client.url, Path(workspace), tp_jobs, tp_clients, tp_rounds)
    return [
        *cold_start.rows_from(cold, ray_note if not cold["ray_jobs"] else ""),
        Row(
            "submit.running",
            "submit-to-running, warm cluster, trivial command (Ray: Ray Jobs)",
            "ms",
            latency["submit-to-running"],
            ray_latency.get("submit-to-running"),
            ray_note,
            [Target("p50 < 50 ms", "max", 50.0, strict=True), Target("p99 < 200 ms", "max", 200.0, "p99", strict=True)],
        ),
        Row(
            "submit.done",
            "submit-to-done, warm cluster, trivial command (Ray: Ray Jobs)",
            "ms",
            latency["submit-to-done"],
            ray_latency.get("submit-to-done"),
            ray_note,
        ),
        Row(
            "throughput",
            f"throughput, {tp_jobs} trivial jobs from {tp_clients} concurrent clients (Ray: Ray Jobs)",
            "jobs/s",
            rates,
            ray_rates or None,
            ray_note,
            [Target(">= 2x Ray", "ratio_min", 2.0)],
            higher_is_better=True,
            note=f"{tp_rounds} Iris rounds" + (f", {len(ray_rates)} Ray round(s)" if ray_rates else ""),
        ),
    ]


def scheduler_rows(quick: bool, with_ray: bool) -> list[Row]:
    from benchmarks import scheduler_pass

    return scheduler_pass.rows(quick, with_ray)


def controller_rows(quick: bool, with_ray: bool) -> list[Row]:
    from benchmarks import controller_scale

    return controller_scale.rows(quick, with_ray)


def controller_10k_rows(quick: bool, with_ray: bool) -> list[Row]:
    from benchmarks import controller_scale

    return controller_scale.rows(quick, with_ray, workers=2000 if quick else 10_000)


def store_rows(quick: bool, with_ray: bool) -> list[Row]:
    from benchmarks import store_scale

    return store_scale.rows(quick, with_ray)


def store_1m_rows(quick: bool, with_ray: bool) -> list[Row]:
    from benchmarks import store_scale

    return store_scale.rows(quick, with_ray, jobs=200_000 if quick else 1_000_000)


def sustained_rows(quick: bool, with_ray: bool) -> list[Row]:
    from benchmarks import sustained_throughput

    return sustained_throughput.rows(quick, with_ray)


def actor_rows(quick: bool, with_ray: bool) -> list[Row]:
    from benchmarks import actor_calls

    return actor_calls.rows(quick, with_ray)


def dashboard_rows(quick: bool, with_ray: bool) -> list[Row]:
    from benchmarks import dashboard_scale

    return dashboard_scale.rows(quick, with_ray)


@dataclass(frozen=True)
class Step:
    name: str
    title: str
    run: Callable[[bool, bool], list[Row]]
    # Time limit in seconds, (quick, full).
    limit_s: tuple[float, float]


STEPS = [
    Step("jobs", "1-3. cold start, submit latency, throughput", job_rows, (90, 420)),
    Step("scheduler_pass", "4. scheduler pass", scheduler_rows, (30, 60)),
    Step("controller_scale", "5. controller scale", controller_rows, (40, 120)),
    Step("controller_scale_10k", "5b. controller scale, 10,000 workers", controller_10k_rows, (120, 900)),
    Step("store_scale", "6. store at scale", store_rows, (40, 90)),
    Step("store_scale_1m", "6b. store at scale, 1,000,000 jobs", store_1m_rows, (120, 600)),
    Step("sustained_throughput", "9. sustained throughput", sustained_rows, (180, 900)),
    Step("actor_calls", "7. actor calls", actor_rows, (90, 240)),
    Step("dashboard_scale", "8. dashboard at scale", dashboard_rows, (120, 180)),
]


def run_step_here(name: str, quick: bool, with_ray: bool, json_out: Path) -> None:
    """The body of a step's own process."""
    become_subreaper()
    kill_on_signal()
    step = next(s for s in STEPS if s.name == name)
    try:
        rows = step.run(quick, with_ray)
    finally:
        end_descendants()
    json_out.write_text(json.dumps([r.to_json() for r in rows]))


def run_step(step: Step, quick: bool, with_ray: bool, limit_s: float, log_dir: Path) -> tuple[list[Row], str]:
    """Runs a step in its own process; returns its rows, or none and why."""
    json_out = log_dir / f"{step.name}.json"
    log_path = log_dir / f"{step.name}.log"
    command = [sys.executable, "-m", "benchmarks.run", "--step", step.name, "--json-out", str(json_out)]
    command += ["--quick"] if quick else []
    command += [] if with_ray else ["--no-ray"]
    with open(log_path, "wb") as log:
        process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, cwd=REPO)
        try:
            code = process.wait(limit_s)
        except subprocess.TimeoutExpired:
            # SIGTERM first so the step's own cleanup runs; the sweep below catches the rest.
            process.terminate()
            try:
                process.wait(15)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
            code = None
    leftovers = end_descendants()
    if code == 0 and json_out.exists():
        rows = [Row.from_json(r) for r in json.loads(json_out.read_text())]
        return rows, f"{leftovers} leftover process(es) ended" if leftovers else ""
    tail = log_path.read_text(errors="replace").strip().splitlines()[-12:]
    why = f"timed out after {limit_s:.0f}s" if code is None else f"exited with code {code}"
    return [], why + ("\n    " + "\n    ".join(tail) if tail else "")


# ---------------------------------------------------------------- report


def number(value: float) -> str:
    if value >= 100:
        return f"{value:,.0f}"
    if value >= 10:
        return f"{value:.1f}"
    return f"{value:.2f}"


def verdict(row: Row) -> str:
    if not row.targets:
        return ""
    outcomes = [evaluate(row, t) for t in row.targets]
    if any(passed is None for passed, _ in outcomes):
        return "n/a: " + next(detail for passed, detail in outcomes if passed is None)
    missed = [detail for passed, detail in outcomes if not passed]
    return "PASS" if not missed else "**MISS**"


def table(rows: list[Row]) -> str:
    lines = [
        "| measurement | unit | Iris median | Iris p99 | Ray median | Ray p99 | Iris/Ray | target | result |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for row in rows:
        iris_median = number(statistics.median(row.iris)) if row.iris else "failed"
        iris_p99 = number(stat(row.iris, "p99", row.higher_is_better)) if row.iris else "—"
        if row.ray:
            ray_median = number(statistics.median(row.ray))
            ray_p99 = number(stat(row.ray, "p99", row.higher_is_better))
            ratio = f"{statistics.median(row.iris) / statistics.median(row.ray):.3g}" if row.iris else "—"
        else:
            ray_median, ray_p99, ratio = row.ray_note or "—", "—", "—"
        target = "; ".join(t.text for t in row.targets) or "—"
        lines.append(
            f"| {row.label} | {row.unit} | {iris_median} | {iris_p99} | {ray_median} | {ray_p99} | {ratio} | "
            f"{target} | {verdict(row) or '—'} |"
        )
    return "\n".join(lines)


def misses(rows: list[Row]) -> list[str]:
    found = []
    for row in rows:
        for target in row.targets:
            passed, detail = evaluate(row, target)
            if passed is False:
                found.append(f"- {row.label}: target {target.text}; {detail}.")
    return found


def notes(rows: list[Row]) -> list[str]:
    return [f"- {row.label}: {row.note}." for row in rows if row.note]


def machine() -> str:
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    memory_gib = psutil.virtual_memory().total / 2**30
    return f"{os.cpu_count()} cores ({cpu}), {memory_gib:.0f} GiB RAM, {platform.system()} {platform.release()}"


def versions(with_ray: bool) -> str:
    text = f"Python {platform.python_version()}"
    if with_ray:
        from importlib.metadata import version

        text += f", Ray {version('ray')}"
    try:
        revision = subprocess.run(
            ["git", "describe", "--always", "--dirty"], cwd=REPO, capture_output=True, text=True, timeout=10
        ).stdout.strip()
    except (OSError, subprocess.TimeoutExpired):
        revision = ""
    return text + (f", Iris at {revision}" if revision else "")


def report(
    rows: list[Row], quick: bool, with_ray: bool, elapsed_s: float, failures: list[str], only: list[str] | None = None
) -> str:
    command = "uv run" + (" --group bench" if with_ray else "") + " python -m benchmarks.run"
    command += (" --quick" if quick else "") + "".join(f" --only {name}" for name in only or [])
    parts = [
        f"Measured {datetime.date.today().isoformat()} on {machine()}; {versions(with_ray)}.",
        f"Command: `{command}` ({'quick' if quick else 'full'} run, {elapsed_s:.0f} s).",
        "",
        "Medians and p99s over repeated runs (for rates, the p99 column is the slowest 1%: the 1st "
        "percentile). Iris/Ray is the ratio of the medians.",
        "",
        table(rows),
    ]
    if not with_ray:
        parts += ["", f"Ray is not installed, so only the Iris side ran: `{INSTALL_HINT}` adds it."]
    if failures:
        parts += ["", "Steps that failed:", "", *failures]
    if notes(rows):
        parts += ["", "Notes:", "", *notes(rows)]
    missed = misses(rows)
    parts += ["", "Targets missed:" if missed else "Every target with a result was met.", *([""] + missed if missed else [])]
    return "\n".join(parts)


def write_report(path: Path, body: str) -> None:
    block = f"{BEGIN_MARK}\n{body}\n{END_MARK}"
    if path.exists() and BEGIN_MARK in (text := path.read_text()) and END_MARK in text:
        head, rest = text.split(BEGIN_MARK, 1)
        tail = rest.split(END_MARK, 1)[1]
        path.write_text(head + block + tail)
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(
        "# Performance: Iris against Ray\n\n"
        "Everything between the markers below is written by `python -m benchmarks.run`; what follows "
        "them is kept.\n\n" + block + "\n"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer repetitions: the whole set in under 2 minutes")
    parser.add_argument("--only", action="append", choices=[s.name for s in STEPS], help="run only this step (repeatable)")
    parser.add_argument("--output", type=Path, default=DEFAULT_OUTPUT, help="markdown file to write (default docs/performance.md)")
    parser.add_argument("--no-write", action="store_true", help="print the table only")
    parser.add_argument("--no-ray", action="store_true", help="run the Iris side only")
    parser.add_argument("--step", help=argparse.SUPPRESS)
    parser.add_argument("--json-out", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    with_ray = not args.no_ray and ray_installed()
    if args.step:
        run_step_here(args.step, args.quick, with_ray, args.json_out)
        return

    become_subreaper()
    kill_on_signal()
    if not args.no_ray and not with_ray:
        print(f"Ray is not installed: the Ray columns will say so. Run `{INSTALL_HINT}` to compare against Ray.", file=sys.stderr)
    began = time.monotonic()
    budget_end = began + BUDGET_S[args.quick]
    rows: list[Row] = []
    failures: list[str] = []
    with tempfile.TemporaryDirectory(prefix="iris-bench-run-") as log_dir:
        try:
            for step in STEPS:
                if args.only and step.name not in args.only:
                    continue
                limit = min(step.limit_s[0 if args.quick else 1], budget_end - time.monotonic())
                if limit < 5:
                    failures.append(f"- {step.title}: skipped, the run's time budget was spent")
                    continue
                print(f"{step.title} ...", file=sys.stderr, flush=True)
                step_began = time.monotonic()
                step_rows, why = run_step(step, args.quick, with_ray, limit, Path(log_dir))
                print(f"{step.title}: {time.monotonic() - step_began:.0f} s {why}".rstrip(), file=sys.stderr, flush=True)
                if step_rows:
                    rows += step_rows
                else:
                    failures.append(f"- {step.title}: {why}")
        finally:
            end_descendants()
    body = report(rows, args.quick, with_ray, time.monotonic() - began, failures, args.only)
    print(body)
    if not args.no_write:
        write_report(args.output, body)
        print(f"\nwritten to {args.output}", file=sys.stderr)


if __name__ == "__main__":
    main()
