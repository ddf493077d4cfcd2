"""A WorkerService served over loopback on the server a worker serves on, for tests of the
controller's heartbeat RPC."""

from __future__ import annotations

import asyncio

from connectrpc.code import Code
from connectrpc.errors import ConnectError

from iris.cluster.listening_socket import bind_socket, url_for
from iris.rpc import cluster_pb2 as pb
from iris.rpc.cluster_connect import WorkerService
from iris.rpc.unary_server import UnaryServer, service_methods


class AnsweringWorker(WorkerService):
    """Answers a heartbeat with one running task per task it is asked to run; refuses one meant
    for another worker like the real worker does; never answers once `hang` is set."""

    def __init__(self, worker_id: str):
        self.worker_id = worker_id
        self.hang = False
        self.authorizations: list[str] = []

    async def heartbeat(self, request: pb.HeartbeatRequest, ctx) -> pb.HeartbeatResponse:
        self.authorizations.append(ctx.request_headers.get("authorization", ""))
        if self.hang:
            await asyncio.Event().wait()
        if request.worker_id != self.worker_id:
            raise ConnectError(
                Code.FAILED_PRECONDITION, f"this is worker {self.worker_id}, not {request.worker_id}"
            )
        return pb.HeartbeatResponse(
            worker_id=self.worker_id,
            running_tasks=[
                pb.WorkerTaskStatus(
                    task_id=run.task_id, attempt_id=run.attempt_id, state=pb.TASK_STATE_RUNNING
                )
                for run in request.tasks_to_run
            ],
        )


def serve_worker(worker: AnsweringWorker) -> tuple[UnaryServer, str]:
    sock = bind_socket("127.0.0.1", 0)
    server = UnaryServer(sock, service_methods(worker, pb.DESCRIPTOR.services_by_name["WorkerService"]))
    server.start_in_thread()
    return server, url_for(sock)
