"""A throwaway local cluster, the controller and its workers as `IrisClient.local` starts them, in a
process of its own: for benchmarks whose clients must not share the controller's GIL, as the
clients of a running cluster (`iris cluster start`) do not.

Run by them as `python -m benchmarks.local_cluster_host --workers N`. It prints one JSON line,
{"url": ..., "pid": ..., "workers": [pid, ...]}, once every worker has registered, and stops the
cluster (workers included) when its stdin says `quit` or ends.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
from pathlib import Path

from benchmarks.common import JsonLineProcess
from iris.cluster.local_cluster import LocalCluster
from iris.cluster.platform.local import LocalWorkerSpec

START_TIMEOUT_S = 120.0


def start_local_cluster(workers: int, log_dir: Path) -> JsonLineProcess:
    """The host process, once its cluster serves; `close()` stops it."""
    return JsonLineProcess(
        [sys.executable, "-m", "benchmarks.local_cluster_host", "--workers", str(workers)],
        log_dir / "local_cluster.log",
        START_TIMEOUT_S,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, default=1)
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    cluster = LocalCluster(workers=[LocalWorkerSpec(f"local-{i}") for i in range(args.workers)])
    with cluster:
        workers = [process.pid for process in cluster.worker_processes.values()]
        print(json.dumps({"url": cluster.url, "pid": os.getpid(), "workers": workers}), flush=True)
        for line in sys.stdin:
            if line.strip() == "quit":
                break


if __name__ == "__main__":
    main()
