"""Controller scale: one controller, 1,000 simulated workers speaking the real WorkerService over
loopback.

Run: uv run python -m benchmarks.controller_scale [--workers N] [--rounds R] [--load-seconds S]

Three processes, so that no two share a GIL: the controller (`benchmarks.controller_host`, a
real ControllerDaemon), the simulated workers (`benchmarks.fake_workers`, registered through the
Register RPC) and this one, which drives and measures.

- Heartbeat round: the controller heartbeats every live worker at once, as its periodic tick does,
  and the round ends when the last worker's answer is reconciled in the store.
- LaunchJob accepted per second: client threads here submit trivial jobs as fast as the controller
  accepts them, first while rounds run back to back (a saturated controller), then while a round
  starts every heartbeat interval, as in a cluster (paced). The jobs ask for all of the one simulated worker
  that keeps what it runs (a job nothing could ever run is refused at submission): the first runs
  there, the rest stay pending (the scheduler still considers them on every pass) and the other
  simulated workers keep running nothing.
- RSS of the controller process, sampled every 100 ms from the workers' registration on.

On this 2-core machine the simulated workers' server competes with the controller for CPU; its CPU
time per round is reported beside the round so the two can be told apart.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

import psutil

from benchmarks.common import JsonLineProcess, Row, Target, become_subreaper, owned_processes
from benchmarks.fake_workers import HELD_POOL, WORKER_CPU_MILLICORES
from iris.config import DEFAULT_HEARTBEAT_INTERVAL
from iris.cluster.types import Constraint, Entrypoint, ResourceSpec
from iris.rpc import cluster_pb2 as pb
from iris.rpc.cluster_connect import ControllerServiceClientSync

MB = 1024 * 1024
STARTUP_TIMEOUT_S = 60.0
REGISTER_TIMEOUT_S = 180.0
# Round time targets by worker count (issue 19), and the controller's memory limit.
ROUND_TARGET_MS = {1000: 150.0, 10_000: 2000.0}
RSS_TARGET_MB = 1000.0
# A cluster's rounds start once per heartbeat interval: the paced load runs them so.
HEARTBEAT_INTERVAL_S = DEFAULT_HEARTBEAT_INTERVAL.seconds


def start_controller(state_dir: Path, log_dir: Path) -> JsonLineProcess:
    return JsonLineProcess(
        [sys.executable, "-m", "benchmarks.controller_host", "--state-dir", str(state_dir)],
        log_dir / "controller.log",
        STARTUP_TIMEOUT_S,
    )


class RssSampler:
    def __init__(self, pid: int, interval_s: float = 0.1):
        self._process = psutil.Process(pid)
        self._interval = interval_s
        self._stop = threading.Event()
        self.samples: list[float] = []
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.samples.append(self._process.memory_info().rss / MB)
            except psutil.Error:
                return
            self._stop.wait(self._interval)

    def stop(self) -> list[float]:
        self._stop.set()
        self._thread.join()
        return self.samples


def launch_request(name: str) -> pb.LaunchJobRequest:
    return pb.LaunchJobRequest(
        name=name,
        entrypoint=Entrypoint.from_command("true").proto,
        # All of the one holding worker: accepted (a worker could run it), then pending behind the
        # first such job, which that worker keeps running.
        resources=ResourceSpec(cpu=WORKER_CPU_MILLICORES / 1000, memory="10MB").to_proto(),
        constraints=[Constraint.parse(f"pool={HELD_POOL}").to_proto()],
    )


def launch_load(url: str, clients: int, seconds: float, name_prefix: str) -> list[float]:
    """Seconds since the load began at which each LaunchJob was accepted."""
    began = time.perf_counter()
    accepted: list[list[float]] = [[] for _ in range(clients)]

    def client_thread(index: int) -> None:
        client = ControllerServiceClientSync(url, timeout_ms=30_000)
        try:
            i = 0
            while time.perf_counter() - began < seconds:
                client.launch_job(launch_request(f"{name_prefix}-{index}-{i}"))
                accepted[index].append(time.perf_counter() - began)
                i += 1
        finally:
            client.close()

    threads = [threading.Thread(target=client_thread, args=(i,), daemon=True) for i in range(clients)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(seconds + 60)
    return sorted(t for times in accepted for t in times)


def per_second(times: list[float], seconds: float) -> list[float]:
    """Accepted per whole second of the load."""
    windows = [0.0] * int(seconds)
    for t in times:
        if int(t) < len(windows):
            windows[int(t)] += 1
    return windows


def rounds_during_load(
    controller: JsonLineProcess, clients: int, seconds: float, interval_s: float | None
) -> tuple[list[dict], list[float]]:
    """Rounds while the clients submit for `seconds`: back to back (`interval_s` None), or one
    every `interval_s` as the controller's periodic tick starts them. The rounds' answers, and
    the seconds since the load began at which each LaunchJob was accepted."""
    rounds: list[dict] = []
    accepted: list[float] = []
    name_prefix = "back-to-back" if interval_s is None else "paced"
    load_thread = threading.Thread(
        target=lambda: accepted.extend(launch_load(controller.hello["url"], clients, seconds, name_prefix)),
        daemon=True,
    )
    began = time.perf_counter()
    load_thread.start()
    while load_thread.is_alive():
        rounds.append(controller.command("round"))
        if interval_s is not None:
            next_round = began + len(rounds) * interval_s
            load_thread.join(max(0.0, next_round - time.perf_counter()))
    load_thread.join()
    return rounds, accepted


def measure(workers: int, rounds: int, load_seconds: float, clients: int) -> dict:
    with tempfile.TemporaryDirectory(prefix="iris-bench-scale-") as tmp, owned_processes():
        tmp_path = Path(tmp)
        controller = start_controller(tmp_path / "controller", tmp_path)
        fakes = None
        try:
            idle_rss_mb = controller.command("stats")["rss_bytes"] / MB
            fakes = JsonLineProcess(
                [sys.executable, "-m", "benchmarks.fake_workers", "--controller", controller.hello["url"], "--count", str(workers)],
                tmp_path / "fake_workers.log",
                REGISTER_TIMEOUT_S,
            )
            fake_process = psutil.Process(fakes.hello["pid"])
            sampler = RssSampler(controller.hello["pid"])
            warmup = controller.command("round")
            if warmup["answered"] < workers:
                raise RuntimeError(f"only {warmup['answered']} of {workers} workers answered the first round")
            idle, fake_cpu = [], []
            for _ in range(rounds):
                before = fake_process.cpu_times()
                idle.append(controller.command("round"))
                after = fake_process.cpu_times()
                fake_cpu.append(after.user + after.system - before.user - before.system)

            loaded, launched = rounds_during_load(controller, clients, load_seconds, None)
            paced, paced_launched = rounds_during_load(controller, clients, load_seconds, HEARTBEAT_INTERVAL_S)
            rss = sampler.stop()
            final = controller.command("stats")
        finally:
            if fakes is not None:
                fakes.close()
            controller.close()
    return {
        "workers": workers,
        "idle_rss_mb": idle_rss_mb,
        "round_ms": [r["round_ms"] for r in idle],
        "round_cpu_ms": [r["cpu_s"] * 1000 for r in idle],
        "fake_cpu_ms": [c * 1000 for c in fake_cpu],
        "loaded_round_ms": [r["round_ms"] for r in loaded],
        "launch_per_s": per_second(launched, load_seconds),
        "launched": len(launched),
        "paced_round_ms": [r["round_ms"] for r in paced],
        "paced_launch_per_s": per_second(paced_launched, load_seconds),
        "paced_launched": len(paced_launched),
        "rss_mb": rss,
        "final_rss_mb": final["rss_bytes"] / MB,
        "incomplete_rounds": sum(1 for r in idle + loaded + paced if r["answered"] < r["workers"]),
    }


def rows(quick: bool, with_ray: bool, workers: int = 1000) -> list[Row]:
    rounds, load_seconds, clients = (4, 4.0, 4) if quick else (20, 15.0, 4)
    m = measure(workers, rounds, load_seconds, clients)
    target = ROUND_TARGET_MS.get(workers)
    cpu = statistics.median(m["round_cpu_ms"])
    fake = statistics.median(m["fake_cpu_ms"])
    return [
        Row(
            "controller_scale.round",
            f"heartbeat round over {workers:,} simulated workers (idle controller)",
            "ms",
            m["round_ms"],
            None,
            "no peer",
            [Target(f"< {target:,.0f} ms", "max", target, strict=True)] if target else [],
            note=f"controller CPU {cpu:.0f} ms and simulated workers' CPU {fake:.0f} ms per round (medians)",
        ),
        Row(
            "controller_scale.round_loaded",
            f"heartbeat round over {workers:,} workers during the LaunchJob load",
            "ms",
            m["loaded_round_ms"],
            None,
            "no peer",
        ),
        Row(
            "controller_scale.launch",
            f"LaunchJob accepted per second while rounds run ({clients} clients, {workers:,} workers)",
            "jobs/s",
            m["launch_per_s"],
            None,
            "no peer",
            higher_is_better=True,
            note=(
                f"{m['launched']:,} jobs accepted in {load_seconds:.0f} s; they stay pending. "
                f"{len(m['loaded_round_ms'])} rounds ran back to back meanwhile (faster rounds leave "
                "the controller less time for LaunchJob in the same window)"
            ),
        ),
        Row(
            "controller_scale.round_paced",
            f"heartbeat round over {workers:,} workers, one per {HEARTBEAT_INTERVAL_S:g} s, during the LaunchJob load",
            "ms",
            m["paced_round_ms"],
            None,
            "no peer",
        ),
        Row(
            "controller_scale.launch_paced",
            f"LaunchJob accepted per second while a round starts every {HEARTBEAT_INTERVAL_S:g} s "
            f"({clients} clients, {workers:,} workers)",
            "jobs/s",
            m["paced_launch_per_s"],
            None,
            "no peer",
            higher_is_better=True,
            note=f"{m['paced_launched']:,} jobs accepted in {load_seconds:.0f} s, after the back-to-back load's",
        ),
        Row(
            "controller_scale.rss",
            f"controller RSS with {workers:,} workers, sampled every 100 ms",
            "MB",
            m["rss_mb"],
            None,
            "no peer",
            [Target(f"< {RSS_TARGET_MB:,.0f} MB", "max", RSS_TARGET_MB, stat="p99", strict=True)],
            note=f"{m['idle_rss_mb']:.0f} MB before any worker registered; {m['final_rss_mb']:.0f} MB at the end",
        ),
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--load-seconds", type=float, default=10.0)
    parser.add_argument("--clients", type=int, default=4)
    args = parser.parse_args()
    become_subreaper()
    m = measure(args.workers, args.rounds, args.load_seconds, args.clients)
    keys = ("round_ms", "round_cpu_ms", "fake_cpu_ms", "loaded_round_ms", "launch_per_s")
    for key in (*keys, "paced_round_ms", "paced_launch_per_s", "rss_mb"):
        values = m[key]
        if values:
            print(f"{key}: median {statistics.median(values):.1f}, max {max(values):.1f} (n={len(values)})")
    print(
        f"idle RSS {m['idle_rss_mb']:.0f} MB, launched {m['launched']} back to back and "
        f"{m['paced_launched']} paced, incomplete rounds {m['incomplete_rounds']}"
    )


if __name__ == "__main__":
    main()
