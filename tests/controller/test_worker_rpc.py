"""The controller's heartbeat RPC client against the real WorkerService HTTP stack."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest
from connectrpc.code import Code
from connectrpc.errors import ConnectError
from worker_service_support import AnsweringWorker, serve_worker

from iris.cluster.controller.worker_rpc import WorkerHeartbeatClient
from iris.cluster.listening_socket import bind_socket, url_for
from iris.rpc import cluster_pb2 as pb


@pytest.fixture
def worker() -> Iterator[tuple[AnsweringWorker, str]]:
    answering = AnsweringWorker("w-1")
    server, url = serve_worker(answering)
    try:
        yield answering, url
    finally:
        server.stop()


def call(client: WorkerHeartbeatClient, url: str, request: pb.HeartbeatRequest, timeout_s: float = 5.0):
    return client.heartbeat(url, request, {"authorization": "Bearer secret"}, timeout_s)


def test_worker_heartbeat_client_answers_back_to_back_on_one_connection(
    worker: tuple[AnsweringWorker, str],
) -> None:
    answering, url = worker
    run = pb.RunTaskRequest(task_id="/job/0", attempt_id=3)

    async def main() -> tuple[list[pb.HeartbeatResponse], int]:
        client = WorkerHeartbeatClient()
        answers = [
            await call(client, url, pb.HeartbeatRequest(worker_id="w-1", tasks_to_run=[run]))
            for _ in range(3)
        ]
        return answers, sum(len(idle) for idle in client._idle.values())

    answers, connections = asyncio.run(main())

    assert [a.worker_id for a in answers] == ["w-1"] * 3
    assert [(s.task_id, s.attempt_id) for s in answers[0].running_tasks] == [("/job/0", 3)]
    assert answering.authorizations == ["Bearer secret"] * 3
    assert connections == 1


def test_worker_heartbeat_client_worker_refusal_raises_its_code_and_message(
    worker: tuple[AnsweringWorker, str],
) -> None:
    _, url = worker

    async def main() -> None:
        await call(WorkerHeartbeatClient(), url, pb.HeartbeatRequest(worker_id="w-2"))

    with pytest.raises(ConnectError) as refused:
        asyncio.run(main())

    assert refused.value.code == Code.FAILED_PRECONDITION
    assert refused.value.message == "this is worker w-1, not w-2"


def test_worker_heartbeat_client_silent_worker_times_out_and_next_call_answers(
    worker: tuple[AnsweringWorker, str],
) -> None:
    answering, url = worker

    async def main() -> tuple[ConnectError, pb.HeartbeatResponse]:
        client = WorkerHeartbeatClient()
        answering.hang = True
        try:
            await call(client, url, pb.HeartbeatRequest(worker_id="w-1"), timeout_s=0.3)
        except ConnectError as exc:
            timed_out = exc
        answering.hang = False
        return timed_out, await call(client, url, pb.HeartbeatRequest(worker_id="w-1"))

    timed_out, answer = asyncio.run(main())

    assert timed_out.code == Code.DEADLINE_EXCEEDED
    assert answer.worker_id == "w-1"


def test_worker_heartbeat_client_unreachable_or_non_http_address_is_unavailable() -> None:
    closed = bind_socket("127.0.0.1", 0)
    address = url_for(closed)
    closed.close()

    async def main(url: str) -> None:
        await call(WorkerHeartbeatClient(), url, pb.HeartbeatRequest(worker_id="w-1"))

    with pytest.raises(ConnectError) as refused:
        asyncio.run(main(address))
    with pytest.raises(ConnectError) as wrong_scheme:
        asyncio.run(main("https://127.0.0.1:1"))

    assert refused.value.code == Code.UNAVAILABLE
    assert wrong_scheme.value.code == Code.UNAVAILABLE
    assert "is not http://host:port" in wrong_scheme.value.message
