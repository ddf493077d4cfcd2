"""A worker whose registration calls fail keeps trying until the controller has it."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from iris import chaos
from iris.client import IrisClient
from iris.cluster.controller.main import ControllerDaemon
from iris.cluster.controller.settings import DaemonSettings
from iris.cluster.runtime.process import ProcessRuntime
from iris.cluster.worker.worker import Worker, WorkerSettings
from iris.rpc import cluster_pb2 as pb
from iris.time import wait_until


@pytest.fixture
def controller_url(tmp_path: Path) -> Iterator[str]:
    daemon = ControllerDaemon(
        DaemonSettings.from_config(
            state_dir=tmp_path / "state", bundle_prefix=f"file://{tmp_path}/bundles", host="127.0.0.1", port=0
        )
    )
    daemon.start_in_thread()
    try:
        yield daemon.url
    finally:
        daemon.stop()


def test_worker_registration_failing_twice_registers_on_the_third_try(controller_url: str, tmp_path: Path) -> None:
    chaos.enable(chaos.WORKER_REGISTER, 1.0, count=2)
    settings = WorkerSettings(
        worker_id="w-flaky",
        address="http://127.0.0.1:9",
        controller_address=controller_url,
        cache_dir=tmp_path / "cache",
        metadata=pb.WorkerMetadata(hostname="w-flaky", cpu_millicores=1000, memory_bytes=1 << 30),
    )
    worker = Worker(settings, ProcessRuntime(tmp_path / "runtime"))
    try:
        worker.start()
        wait_until(lambda: worker.registered, 30, 0.05, "the worker to register")
        with IrisClient.remote(controller_url) as client:
            assert "w-flaky" in {w.worker_id for w in client.list_workers()}
        assert chaos.injections() == {chaos.WORKER_REGISTER: 2}
    finally:
        worker.stop()
        chaos.reset()
