"""Many simulated workers in one process, each speaking the real WorkerService over loopback.

Run by the controller scale benchmark as
`python -m benchmarks.fake_workers --controller URL --count 1000`.

One `UnaryServer` (the server a real worker serves its WorkerService on) hosts every worker under
its own path: worker `fake-0042` is at `http://127.0.0.1:PORT/w/fake-0042`, so the controller keeps
one address, one client and one connection per worker as it would for real hosts. Each path
prefix carries the WorkerService methods of a fake that runs nothing: it answers Heartbeat with no
tasks, refuses a heartbeat meant for another worker id like the real worker does, and knows no
task. The workers register through the controller's Register RPC, as real ones do.

Prints one JSON line, {"pid": ..., "registered": N}, once every worker is registered, then serves
until stdin closes or says `quit`.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import sys
import threading
from concurrent.futures import ThreadPoolExecutor

from connectrpc.code import Code
from connectrpc.errors import ConnectError

from iris.cluster.listening_socket import IDLE_CONNECTION_TIMEOUT_S, bind_socket
from iris.cluster.types import attribute_to_proto
from iris.rpc import cluster_pb2 as pb
from iris.rpc.cluster_connect import ControllerServiceClientSync
from iris.rpc.unary_server import UnaryServer, service_methods

GB = 1000**3
REGISTER_THREADS = 8


def worker_id(index: int) -> str:
    return f"fake-{index:04d}"


# The one worker that runs what it is sent, forever: jobs asking for all of it (HELD_POOL) could
# run, so the controller accepts them, but after the first they stay pending behind it.
HOLDING_WORKER_INDEX = 0
HELD_POOL = "held"
WORKER_CPU_MILLICORES = 32_000


def metadata(index: int) -> pb.WorkerMetadata:
    """A mid-size CPU host; attributes like a pool of scale groups in four zones."""
    meta = pb.WorkerMetadata(
        hostname=f"fake-host-{index:04d}",
        ip_address="127.0.0.1",
        cpu_millicores=WORKER_CPU_MILLICORES,
        memory_bytes=128 * GB,
        disk_bytes=500 * GB,
        runtime="process",
        iris_version="benchmark",
    )
    for key, value in {
        "zone": f"zone-{index % 4}",
        "scale-group": f"cpu-group-{index % 10}",
        "preemptible": "true" if index % 3 == 0 else "false",
        **({"pool": HELD_POOL} if index == HOLDING_WORKER_INDEX else {}),
    }.items():
        meta.attributes[key].CopyFrom(attribute_to_proto(value))
    return meta


class FakeWorker:
    """A worker with no tasks: everything it is asked to run or expected to hold, it does not have.

    A holding worker instead keeps every attempt it is sent running until it is told to kill it."""

    def __init__(self, worker_id: str, holds: bool = False):
        self.worker_id = worker_id
        self.holds = holds
        self.held: dict[tuple[str, int], str] = {}

    async def heartbeat(self, request: pb.HeartbeatRequest, ctx) -> pb.HeartbeatResponse:
        if request.worker_id and request.worker_id != self.worker_id:
            raise ConnectError(Code.FAILED_PRECONDITION, f"this is worker {self.worker_id}, not {request.worker_id}")
        response = pb.HeartbeatResponse(worker_id=self.worker_id)
        if self.holds:
            self.held.update(((run.task_id, run.attempt_id), run.job_id) for run in request.tasks_to_run)
            for kill in request.tasks_to_kill:
                self.held.pop((kill.task_id, kill.attempt_id), None)
            response.running_tasks.extend(
                pb.WorkerTaskStatus(task_id=task_id, attempt_id=attempt_id, job_id=job_id, state=pb.TASK_STATE_RUNNING)
                for (task_id, attempt_id), job_id in self.held.items()
            )
        return response

    async def get_task_status(self, request: pb.WorkerGetTaskStatusRequest, ctx) -> pb.WorkerTaskStatus:
        raise ConnectError(Code.NOT_FOUND, f"task {request.task_id} is not on this worker")

    async def list_tasks(self, request: pb.WorkerListTasksRequest, ctx) -> pb.WorkerListTasksResponse:
        return pb.WorkerListTasksResponse()

    async def fetch_task_logs(self, request: pb.FetchTaskLogsRequest, ctx) -> pb.FetchTaskLogsResponse:
        raise ConnectError(Code.NOT_FOUND, f"task {request.task_id} is not on this worker")

    async def health_check(self, request: pb.HealthCheckRequest, ctx) -> pb.HealthCheckResponse:
        return pb.HealthCheckResponse(healthy=True, worker_id=self.worker_id, runtime="process")


def serve(count: int, sock: socket.socket) -> UnaryServer:
    service = pb.DESCRIPTOR.services_by_name["WorkerService"]
    methods = {}
    for i in range(count):
        fake = FakeWorker(worker_id(i), holds=i == HOLDING_WORKER_INDEX)
        methods.update(service_methods(fake, service, prefix=f"/w/{worker_id(i)}"))
    # As a worker's server: the same keep-alive for idle connections between heartbeat rounds.
    server = UnaryServer(sock, methods, idle_timeout_s=IDLE_CONNECTION_TIMEOUT_S)
    server.start_in_thread()
    return server


def register_all(controller_url: str, base_url: str, count: int) -> None:
    local = threading.local()

    def register(index: int) -> None:
        if not hasattr(local, "client"):
            local.client = ControllerServiceClientSync(controller_url, send_compression=None)
        local.client.register(
            pb.RegisterRequest(worker_id=worker_id(index), address=f"{base_url}/w/{worker_id(index)}", metadata=metadata(index)),
            timeout_ms=30_000,
        )

    with ThreadPoolExecutor(REGISTER_THREADS) as pool:
        list(pool.map(register, range(count)))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--controller", required=True, help="controller URL")
    parser.add_argument("--count", type=int, default=1000)
    args = parser.parse_args()
    sock = bind_socket("127.0.0.1", 0)
    server = serve(args.count, sock)
    base_url = f"http://127.0.0.1:{sock.getsockname()[1]}"
    try:
        register_all(args.controller, base_url, args.count)
        print(json.dumps({"pid": os.getpid(), "registered": args.count}), flush=True)
        for line in sys.stdin:
            if line.strip() == "quit":
                break
    finally:
        server.stop()


if __name__ == "__main__":
    main()
