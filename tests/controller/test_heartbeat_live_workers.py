"""`Controller.heartbeat_live_workers`: one heartbeat to every live worker, answered per worker."""

from __future__ import annotations

from pathlib import Path

from worker_service_support import AnsweringWorker, serve_worker

from iris.cluster.controller.main import ControllerDaemon
from iris.cluster.controller.settings import DaemonSettings
from iris.rpc import cluster_pb2 as pb
from iris.rpc.cluster_connect import ControllerServiceClientSync


def test_controller_heartbeat_live_workers_reports_who_answered(tmp_path: Path) -> None:
    daemon = ControllerDaemon(
        DaemonSettings.from_config(
            state_dir=tmp_path / "state", bundle_prefix=f"file://{tmp_path}/bundles", host="127.0.0.1", port=0
        )
    )
    daemon.start_in_thread()
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
        daemon.stop()
