"""WorkerService: the RPC surface the controller (and operators) use to reach a worker, and the
server that carries it (with /health) on the worker's port."""

from __future__ import annotations

import socket

from connectrpc.code import Code
from connectrpc.errors import ConnectError

from iris.cluster.auth.server import RequireCallbackToken
from iris.cluster.listening_socket import IDLE_CONNECTION_TIMEOUT_S
from iris.cluster.worker.worker import Worker
from iris.rpc import cluster_pb2 as pb
from iris.rpc import time_pb2
from iris.rpc.unary_server import UnaryServer, service_methods
from iris.time import now_ms

MAX_FETCH_LINES = 10_000


class WorkerServiceImpl:
    def __init__(self, worker: Worker):
        self._worker = worker

    async def heartbeat(self, request: pb.HeartbeatRequest, ctx) -> pb.HeartbeatResponse:
        if request.worker_id and request.worker_id != self._worker.settings.worker_id:
            raise ConnectError(
                Code.FAILED_PRECONDITION,
                f"this is worker {self._worker.settings.worker_id}, not {request.worker_id}",
            )
        # Answered on the event loop: it only reads and writes the worker's memory (attempts start
        # on their own threads, which also measure their use) and moves finished attempts' empty
        # work directories, and a hop to a thread and back cost each round a few ms of waiting
        # for the interpreter while attempts start.
        return self._worker.heartbeat(request)

    def _attempt(self, task_id: str, attempt_id: int):
        attempt = self._worker.attempt(task_id, attempt_id)
        if attempt is None:
            which = f"attempt {attempt_id} of task" if attempt_id >= 0 else "task"
            raise ConnectError(Code.NOT_FOUND, f"{which} {task_id} is not on this worker")
        return attempt

    async def get_task_status(self, request: pb.WorkerGetTaskStatusRequest, ctx) -> pb.WorkerTaskStatus:
        return self._attempt(request.task_id, request.attempt_id).status(None, 0)

    async def list_tasks(self, request: pb.WorkerListTasksRequest, ctx) -> pb.WorkerListTasksResponse:
        return pb.WorkerListTasksResponse(tasks=[a.status(None, 0) for a in self._worker.attempts()])

    async def fetch_task_logs(self, request: pb.FetchTaskLogsRequest, ctx) -> pb.FetchTaskLogsResponse:
        lines = self._attempt(request.task_id, request.attempt_id).logs()
        limit = min(request.max_lines or MAX_FETCH_LINES, MAX_FETCH_LINES)
        window = lines[request.start_line : request.start_line + limit]
        return pb.FetchTaskLogsResponse(
            lines=[pb.LogLine(timestamp_ms=line.timestamp_ms, source=line.source, data=line.data) for line in window],
            next_line=request.start_line + len(window),
        )

    async def health_check(self, request: pb.HealthCheckRequest, ctx) -> pb.HealthCheckResponse:
        running = sum(1 for a in self._worker.attempts() if not a.finished)
        since_ms = int(self._worker.seconds_since_heartbeat() * 1000)
        return pb.HealthCheckResponse(
            healthy=True,
            worker_id=self._worker.settings.worker_id,
            running_tasks=running,
            runtime=self._worker.runtime.name,
            last_heartbeat=time_pb2.Timestamp(epoch_ms=now_ms() - since_ms),
        )


def worker_server(worker: Worker, sock: socket.socket) -> UnaryServer:
    """The worker's WorkerService and /health on `sock`. Only the controller that registered the
    worker may call it when the worker has a callback token; /health is open (readiness probes).
    Stopping the server (SIGTERM, SIGINT) stops the worker and kills its tasks."""

    def health() -> dict:
        return {"status": "ok", "worker_id": worker.settings.worker_id, "registered": worker.registered}

    async def on_shutdown() -> None:
        worker.stop(kill_tasks=True)

    return UnaryServer(
        sock,
        service_methods(WorkerServiceImpl(worker), pb.DESCRIPTOR.services_by_name["WorkerService"]),
        routes={"/health": health},
        interceptors=[RequireCallbackToken(worker.callback_token)] if worker.callback_token else [],
        on_shutdown=on_shutdown,
        idle_timeout_s=IDLE_CONNECTION_TIMEOUT_S,
    )
