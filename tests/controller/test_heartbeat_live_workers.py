"""`Controller.heartbeat_live_workers`: one heartbeat to every live worker, answered per worker."""

from __future__ import annotations

import asyncio
import dataclasses
import threading
from pathlib import Path

import pytest
from controller_support import running_controller
from worker_service_support import AnsweringWorker, serve_worker

from iris.cluster.controller.settings import DaemonSettings
from iris.rpc import cluster_pb2 as pb
from iris.rpc.cluster_connect import ControllerServiceClientSync


def test_controller_heartbeat_live_workers_reports_who_answered(tmp_path: Path) -> None:
    with running_controller(tmp_path) as daemon:
        servers = {worker_id: serve_worker(AnsweringWorker(worker_id)) for worker_id in ("w-1", "w-2")}
        try:
            client = ControllerServiceClientSync(daemon.url)
            for worker_id, (_, url) in servers.items():
                metadata = pb.WorkerMetadata(
                    hostname=worker_id,
                    ip_address="127.0.0.1",
                    cpu_millicores=1000,
                    memory_bytes=1 << 30,
                    runtime="process",
                )
                client.register(pb.RegisterRequest(worker_id=worker_id, address=url, metadata=metadata))

            both = daemon.controller.heartbeat_live_workers_threadsafe(10)
            servers["w-2"][0].stop()
            one = daemon.controller.heartbeat_live_workers_threadsafe(10)

            assert both == {"w-1": True, "w-2": True}
            assert one == {"w-1": True, "w-2": False}
        finally:
            for server, _ in servers.values():
                server.stop()


def test_controller_heartbeat_live_workers_asked_while_a_round_waits_to_be_planned_is_answered_by_it(
    tmp_path: Path,
) -> None:
    with running_controller(tmp_path) as daemon:
        server, url = serve_worker(AnsweringWorker("w-1"))
        try:
            metadata = pb.WorkerMetadata(
                hostname="w-1", ip_address="127.0.0.1", cpu_millicores=1000, memory_bytes=1 << 30
            )
            ControllerServiceClientSync(daemon.url).register(
                pb.RegisterRequest(worker_id="w-1", address=url, metadata=metadata)
            )
            controller = daemon.controller
            assert controller.heartbeat_live_workers_threadsafe(10) == {"w-1": True}

            async def ask_as_a_round_starts() -> dict[str, bool]:
                # A round starts (a job's end asked for it) and, in the same turn, before it is
                # planned, all live workers are asked for one: that round answers them.
                controller.request_heartbeat("w-1")
                return await controller.heartbeat_live_workers()

            loop = controller._loop
            assert loop is not None
            answered = asyncio.run_coroutine_threadsafe(ask_as_a_round_starts(), loop).result(10)

            assert answered == {"w-1": True}
        finally:
            server.stop()


class _InFlightGauge:
    """How many heartbeats the workers are answering at once, and the most there ever were."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.now = 0
        self.most = 0

    def enter(self) -> None:
        with self._lock:
            self.now += 1
            self.most = max(self.most, self.now)

    def leave(self) -> None:
        with self._lock:
            self.now -= 1


class _SlowWorker(AnsweringWorker):
    """Takes a while over each heartbeat, so that the controller's calls overlap."""

    def __init__(self, worker_id: str, gauge: _InFlightGauge):
        super().__init__(worker_id)
        self.gauge = gauge

    async def heartbeat(self, request: pb.HeartbeatRequest, ctx) -> pb.HeartbeatResponse:
        self.gauge.enter()
        try:
            await asyncio.sleep(0.05)
            return await super().heartbeat(request, ctx)
        finally:
            self.gauge.leave()


def test_controller_heartbeat_round_keeps_at_most_max_in_flight_and_answers_all(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    limited = DaemonSettings.controller_settings
    monkeypatch.setattr(
        DaemonSettings,
        "controller_settings",
        lambda self, address: dataclasses.replace(limited(self, address), max_heartbeats_in_flight=2),
    )
    with running_controller(tmp_path) as daemon:
        gauge = _InFlightGauge()
        servers = {f"w-{i}": serve_worker(_SlowWorker(f"w-{i}", gauge)) for i in range(6)}
        try:
            client = ControllerServiceClientSync(daemon.url)
            for worker_id, (_, url) in servers.items():
                metadata = pb.WorkerMetadata(
                    hostname=worker_id, ip_address="127.0.0.1", cpu_millicores=1000, memory_bytes=1 << 30
                )
                client.register(pb.RegisterRequest(worker_id=worker_id, address=url, metadata=metadata))
            gauge.most = 0  # registration sends each worker its first heartbeat

            answered = daemon.controller.heartbeat_live_workers_threadsafe(30)

            assert answered == {worker_id: True for worker_id in servers}
            assert gauge.most == 2
        finally:
            for server, _ in servers.values():
                server.stop()
