"""A ControllerDaemon in a process of its own, for the scale benchmarks.

Run by them as `python -m benchmarks.controller_host --state-dir DIR`: its own process so that its
RSS and CPU are the controller's alone and the benchmark's clients do not share its GIL.

It prints one JSON line, {"url": ..., "pid": ...}, once it serves, then answers commands read
from stdin, one JSON line per command:

- `round`: heartbeat every live worker now through `Controller.heartbeat_live_workers`, which
  requests them as the periodic tick does and returns once each answer is reconciled. Answers
  the round's time (the call's), how many workers answered, and the controller's CPU time over
  the round.
- `stats`: RSS and CPU time of this process, and the workers the store knows.
- `quit`: stop the daemon and exit (so does the end of stdin).

The periodic tick is pushed out to an hour so that only `round` heartbeats the workers; nothing
else in the controller is changed.
"""

from __future__ import annotations

import argparse
import json
import logging
import sqlite3
import sys
import time
from pathlib import Path

import psutil

from iris.cluster.controller.main import ControllerDaemon
from iris.cluster.controller.settings import DaemonSettings
from iris.rpc import cluster_pb2 as pb
from iris.rpc import config_pb2
from iris.time import Duration

HOUR = Duration.from_seconds(3600)
ROUND_TIMEOUT_S = 60.0
LIVE = f"({pb.WORKER_STATE_HEALTHY},{pb.WORKER_STATE_UNHEALTHY})"


def cpu_seconds(process: psutil.Process) -> float:
    times = process.cpu_times()
    return times.user + times.system


class Host:
    def __init__(self, state_dir: Path):
        config = config_pb2.IrisClusterConfig()
        config.defaults.timeouts.heartbeat_interval.CopyFrom(HOUR.to_proto())
        config.defaults.timeouts.worker_timeout.CopyFrom(HOUR.to_proto())
        self.daemon = ControllerDaemon(
            DaemonSettings.from_config(
                config, state_dir=state_dir, bundle_prefix=f"file://{state_dir / 'bundles'}", host="127.0.0.1", port=0
            )
        )
        self.process = psutil.Process()
        # A connection of our own for `stats`: WAL lets it read without taking the store's lock
        # away from the controller's loop.
        self._db = sqlite3.connect(f"file:{state_dir / 'controller.sqlite3'}?mode=ro", uri=True, check_same_thread=False)

    def live_worker_ids(self) -> list[str]:
        return [r[0] for r in self._db.execute(f"SELECT worker_id FROM workers WHERE state IN {LIVE}")]

    def heartbeat_round(self) -> dict:
        cpu_before = cpu_seconds(self.process)
        started_ms = int(time.time() * 1000)
        started = time.perf_counter()
        try:
            answered = self.daemon.controller.heartbeat_live_workers_threadsafe(ROUND_TIMEOUT_S)
            workers, answers = len(answered), sum(answered.values())
        except TimeoutError:
            # An incomplete round: count the workers whose heartbeat was recorded since it began.
            workers = len(self.live_worker_ids())
            answers = self._db.execute(
                f"SELECT COUNT(*) FROM workers WHERE state IN {LIVE} AND last_heartbeat_ms >= ?", (started_ms,)
            ).fetchone()[0]
        return {
            "round_ms": (time.perf_counter() - started) * 1000,
            "workers": workers,
            "answered": answers,
            "cpu_s": cpu_seconds(self.process) - cpu_before,
        }

    def stats(self) -> dict:
        return {
            "rss_bytes": self.process.memory_info().rss,
            "cpu_s": cpu_seconds(self.process),
            "workers": len(self.live_worker_ids()),
        }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--state-dir", required=True, type=Path)
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    host = Host(args.state_dir)
    host.daemon.start_in_thread()
    print(json.dumps({"url": host.daemon.url, "pid": host.process.pid}), flush=True)
    try:
        for line in sys.stdin:
            command = line.strip()
            if command == "round":
                answer = host.heartbeat_round()
            elif command == "stats":
                answer = host.stats()
            elif command == "quit":
                break
            else:
                answer = {"error": f"unknown command {command!r}"}
            print(json.dumps(answer), flush=True)
    finally:
        host.daemon.stop()


if __name__ == "__main__":
    main()
