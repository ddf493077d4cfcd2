"""Actor calls, Iris against Ray: one caller making synchronous calls to one actor (1:1), and to a
pool of replicas round-robin, plus a broadcast to every replica.

Run: uv run --group bench python -m benchmarks.actor_calls [--quick] [--no-ray]

Iris: each actor is a real `ActorServer` in a process of its own on loopback (as a task would
host it), called from this process with `ActorClient` (1:1) and `ActorPool` (pool, broadcast).
Ray: a local Ray from `ray.init()` in this process; actors made with `@ray.remote`, called with
`ray.get(actor.method.remote(x))` (1:1), round-robin over a list of actors (pool), and
`ray.get([a.method.remote(x) for a in actors])` (broadcast), which is Ray's microbenchmark's
"1:1 actor calls sync" shape. Every call echoes the same 100-byte payload. Iris and Ray rounds
alternate, so load from anything else on the machine falls on both alike.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from benchmarks.common import REPO, Row, Target, become_subreaper, owned_processes, percentile
from benchmarks.ray_local import apply_ray_env, ray_installed

PAYLOAD = b"x" * 100
POOL_SIZE = 3
RAY_START_ATTEMPTS = 3
# The brief's absolute floor for 1:1 sync calls (Ray's published microbenchmark rate).
SYNC_RATE_FLOOR = 2000.0


@dataclass(frozen=True)
class Sizes:
    rounds: int
    calls: int
    broadcasts: int


def sizes(quick: bool) -> Sizes:
    return (
        Sizes(rounds=3, calls=500, broadcasts=100) if quick else Sizes(rounds=5, calls=2000, broadcasts=300)
    )


class Echo:
    """The actor both sides serve."""

    def echo(self, payload: bytes) -> bytes:
        return payload


def serve() -> None:
    """The body of one Iris actor server process: print the URL, serve until SIGTERM."""
    from iris.actor import ActorServer

    server = ActorServer(host="127.0.0.1")
    server.register("echo", Echo())
    server.start()
    print(server.url, flush=True)
    server.serve()


def start_iris_servers(count: int) -> list[str]:
    urls = []
    for _ in range(count):
        process = subprocess.Popen(
            [sys.executable, "-m", "benchmarks.actor_calls", "--serve"],
            cwd=REPO,
            stdout=subprocess.PIPE,
            stdin=subprocess.DEVNULL,
            text=True,
        )
        assert process.stdout is not None
        line = process.stdout.readline().strip()
        if not line.startswith("http://"):
            raise RuntimeError(f"actor server process exited ({process.poll()}) without printing its URL")
        urls.append(line)
    return urls


@dataclass
class Samples:
    sync_rate: list[float] = field(default_factory=list)
    sync_latency_ms: list[float] = field(default_factory=list)
    pool_rate: list[float] = field(default_factory=list)
    broadcast_ms: list[float] = field(default_factory=list)


def timed_calls(call: Callable[[], object], calls: int, latencies_ms: list[float] | None = None) -> float:
    """Calls per second over `calls` back-to-back calls; per-call latencies appended if asked."""
    began = time.perf_counter()
    if latencies_ms is None:
        for _ in range(calls):
            call()
    else:
        for _ in range(calls):
            start = time.perf_counter()
            call()
            latencies_ms.append((time.perf_counter() - start) * 1000)
    return calls / (time.perf_counter() - began)


class IrisSide:
    def __init__(self) -> None:
        from iris.actor import ActorClient, ActorPool, FixedResolver

        urls = start_iris_servers(POOL_SIZE)
        self.client = ActorClient(FixedResolver({"echo": urls[0]}), "echo")
        self.pool = ActorPool(FixedResolver({"echo": urls}), "echo")

    def one_to_one(self) -> None:
        if self.client.echo(PAYLOAD) != PAYLOAD:
            raise RuntimeError("the Iris actor answered the wrong payload")

    def pooled(self) -> None:
        self.pool.echo(PAYLOAD)

    def broadcast(self) -> None:
        results = self.pool.broadcast("echo", PAYLOAD)
        if not all(r.ok for r in results):
            raise RuntimeError(f"an Iris broadcast failed: {[r.error for r in results if not r.ok]}")

    def close(self) -> None:
        self.client.close()
        self.pool.close()


class RaySide:
    def __init__(self, temp_dir: str) -> None:
        import ray

        apply_ray_env()
        for attempt in range(1, RAY_START_ATTEMPTS + 1):
            try:
                ray.init(
                    num_cpus=POOL_SIZE + 1, include_dashboard=False, _temp_dir=temp_dir, log_to_driver=False
                )
                break
            except Exception:
                # Ray gives its raylet a fixed 30 s to register; on a busy machine it can miss that.
                ray.shutdown()
                if attempt == RAY_START_ATTEMPTS:
                    raise

        # A class of this function's own travels to Ray's workers by value, like a user's would.
        class RayEcho(Echo):
            pass

        actor_class = ray.remote(num_cpus=0)(RayEcho)
        self._ray = ray
        self.actors = [actor_class.remote() for _ in range(POOL_SIZE)]
        ray.get([a.echo.remote(PAYLOAD) for a in self.actors])
        self._turn = 0

    def one_to_one(self) -> None:
        if self._ray.get(self.actors[0].echo.remote(PAYLOAD)) != PAYLOAD:
            raise RuntimeError("the Ray actor answered the wrong payload")

    def pooled(self) -> None:
        self._turn += 1
        self._ray.get(self.actors[self._turn % POOL_SIZE].echo.remote(PAYLOAD))

    def broadcast(self) -> None:
        self._ray.get([a.echo.remote(PAYLOAD) for a in self.actors])

    def close(self) -> None:
        self._ray.shutdown()


def round_of(side: IrisSide | RaySide, size: Sizes, samples: Samples) -> None:
    samples.sync_rate.append(timed_calls(side.one_to_one, size.calls, samples.sync_latency_ms))
    samples.pool_rate.append(timed_calls(side.pooled, size.calls))
    timed_calls(side.broadcast, size.broadcasts, samples.broadcast_ms)


def measure(quick: bool, with_ray: bool) -> tuple[Samples, Samples | None]:
    size = sizes(quick)
    iris_samples = Samples()
    ray_samples = Samples() if with_ray else None
    with owned_processes(), tempfile.TemporaryDirectory(prefix="irb-", dir="/tmp") as temp_dir:
        iris = IrisSide()
        ray_side = RaySide(temp_dir) if with_ray else None
        try:
            # Warm-up: connections, code paths, Ray's worker leases.
            warm = Sizes(1, min(200, size.calls), min(20, size.broadcasts))
            round_of(iris, warm, Samples())
            if ray_side is not None:
                round_of(ray_side, warm, Samples())
            for _ in range(size.rounds):
                round_of(iris, size, iris_samples)
                if ray_side is not None and ray_samples is not None:
                    round_of(ray_side, size, ray_samples)
        finally:
            iris.close()
            if ray_side is not None:
                ray_side.close()
    return iris_samples, ray_samples


def rows(quick: bool, with_ray: bool) -> list[Row]:
    with_ray = with_ray and ray_installed()
    ray_note = "" if with_ray else "not installed"
    try:
        iris_samples, ray_samples = measure(quick, with_ray)
    except Exception as exc:
        if not with_ray:
            raise
        # A Ray failure must not cost the Iris numbers.
        ray_note = f"failed: {str(exc).splitlines()[0][:120]}"
        iris_samples, ray_samples = measure(quick, False)
    ray = ray_samples or Samples()
    size = sizes(quick)
    return [
        Row(
            "actor.sync_rate",
            "actor calls, 1:1 sync, 100-byte echo",
            "calls/s",
            iris_samples.sync_rate,
            ray.sync_rate or None,
            ray_note,
            [
                Target(">= Ray", "ratio_min", 1.0),
                Target(f">= {SYNC_RATE_FLOOR:,.0f}/s", "min", SYNC_RATE_FLOOR),
            ],
            higher_is_better=True,
            note=f"{size.rounds} rounds of {size.calls} calls each side, alternating",
        ),
        Row(
            "actor.sync_latency",
            "actor call latency, 1:1 sync, 100-byte echo",
            "ms",
            iris_samples.sync_latency_ms,
            ray.sync_latency_ms or None,
            ray_note,
        ),
        Row(
            "actor.pool_rate",
            f"actor calls, one caller round-robin over {POOL_SIZE} replicas (Iris: ActorPool)",
            "calls/s",
            iris_samples.pool_rate,
            ray.pool_rate or None,
            ray_note,
            [Target(">= Ray", "ratio_min", 1.0)],
            higher_is_better=True,
        ),
        Row(
            "actor.broadcast",
            f"broadcast to {POOL_SIZE} replicas, all results back (Iris: ActorPool.broadcast)",
            "ms",
            iris_samples.broadcast_ms,
            ray.broadcast_ms or None,
            ray_note,
        ),
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--no-ray", action="store_true")
    parser.add_argument("--serve", action="store_true", help=argparse.SUPPRESS)
    options = parser.parse_args()
    if options.serve:
        serve()
        return
    become_subreaper()
    for row in rows(options.quick, not options.no_ray):
        for side, values in (("iris", row.iris), ("ray", row.ray or [])):
            if values:
                low_is_bad = row.higher_is_better
                tail = percentile(values, 1 if low_is_bad else 99)
                print(
                    f"{row.label} [{side}]: median {statistics.median(values):,.2f} {row.unit}, p99 {tail:,.2f}"
                )


if __name__ == "__main__":
    main()
