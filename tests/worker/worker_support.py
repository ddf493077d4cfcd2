"""A worker whose controller is nowhere: for tests that drive it directly (heartbeats, its server)."""

from __future__ import annotations

from pathlib import Path

from iris.cluster.runtime.process import ProcessRuntime
from iris.cluster.worker.worker import Worker, WorkerSettings
from iris.rpc import cluster_pb2 as pb

NOWHERE = "http://127.0.0.1:9"


def unregistered_worker(tmp_path: Path, token: str = "") -> Worker:
    settings = WorkerSettings(
        worker_id="w1",
        address=NOWHERE,
        controller_address=NOWHERE,
        cache_dir=tmp_path / "cache",
        metadata=pb.WorkerMetadata(hostname="w1", cpu_millicores=1000, memory_bytes=1 << 30),
        token=token,
    )
    return Worker(settings, ProcessRuntime(tmp_path / "runtime"))
