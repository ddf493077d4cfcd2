"""A worker whose controller is nowhere: for tests that drive it directly (heartbeats, its server)."""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, TypeVar

from iris.cluster.runtime.process import ProcessRuntime
from iris.cluster.worker.bundle_cache import BundleCache
from iris.cluster.worker.task_attempt import AttemptContext
from iris.cluster.worker.workdirs import Workdirs
from iris.cluster.worker.worker import Worker, WorkerSettings
from iris.rpc import cluster_pb2 as pb

NOWHERE = "http://127.0.0.1:9"
T = TypeVar("T")


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


def attempt_context(tmp_path: Path) -> AttemptContext:
    """What attempts share, on a real process runtime, for tests that drive one attempt."""
    return AttemptContext(
        runtime=ProcessRuntime(tmp_path / "runtime"),
        bundles=BundleCache(tmp_path / "bundles"),
        workdirs=Workdirs(tmp_path / "tasks"),
        kill_grace_s=1.0,
        task_image="",
        on_change=lambda: None,
    )


def run_on_a_thread_of_its_own(coroutine: Coroutine[Any, Any, T]) -> T:
    """`asyncio.run` on a new thread: a browser test's sync Playwright keeps an event loop running
    on the main thread for the rest of the session, where `asyncio.run` refuses to start."""
    with ThreadPoolExecutor(1) as pool:
        return pool.submit(asyncio.run, coroutine).result()
