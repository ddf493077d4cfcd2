"""The worker's server (`worker_server`, on the lean Connect unary server) driven by the real
generated Connect client, the controller's heartbeat client and raw HTTP."""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest
from connectrpc.code import Code
from connectrpc.compat import google_protobuf_json_codec
from connectrpc.errors import ConnectError
from worker_support import run_on_a_thread_of_its_own, unregistered_worker

from iris.cluster.controller.worker_rpc import WorkerHeartbeatClient
from iris.cluster.listening_socket import bind_socket, url_for
from iris.cluster.worker.service import worker_server
from iris.cluster.worker.worker import Worker
from iris.rpc import cluster_pb2 as pb
from iris.rpc.cluster_connect import WorkerServiceClientSync
from iris.rpc.unary_server import UnaryServer, service_methods
from iris.time import wait_until


@contextlib.contextmanager
def _serve(server_for: Callable[[socket.socket], UnaryServer]) -> Iterator[str]:
    sock = bind_socket("127.0.0.1", 0)
    server = server_for(sock)
    server.start_in_thread()
    try:
        yield url_for(sock)
    finally:
        server.stop()


@pytest.fixture
def worker(tmp_path: Path) -> Worker:
    return unregistered_worker(tmp_path)


@pytest.fixture
def url(worker: Worker) -> Iterator[str]:
    with _serve(lambda sock: worker_server(worker, sock)) as served:
        yield served


def _echo_run(task_id: str) -> pb.RunTaskRequest:
    run = pb.RunTaskRequest(task_id=task_id, job_id=task_id.rsplit("/", 1)[0], attempt_id=0)
    run.entrypoint.command.argv.extend(["echo", "hello from the task"])
    return run


@pytest.mark.parametrize("codec", ["proto", "json"])
def test_worker_server_every_method_answers_the_connect_client(url: str, worker: Worker, codec: str) -> None:
    options = {"codec": google_protobuf_json_codec()} if codec == "json" else {}
    with WorkerServiceClientSync(url, timeout_ms=10_000, **options) as client:
        answer = client.heartbeat(pb.HeartbeatRequest(worker_id="w1", tasks_to_run=[_echo_run("/j/0")]))
        wait_until(lambda: all(a.finished for a in worker.attempts()), 30, 0.02, "the task to finish")
        status = client.get_task_status(pb.WorkerGetTaskStatusRequest(task_id="/j/0", attempt_id=0))
        listed = client.list_tasks(pb.WorkerListTasksRequest())
        logs = client.fetch_task_logs(pb.FetchTaskLogsRequest(task_id="/j/0", attempt_id=0))
        health = client.health_check(pb.HealthCheckRequest())

    assert answer.worker_id == "w1"
    assert status.state == pb.TASK_STATE_SUCCEEDED
    assert [t.task_id for t in listed.tasks] == ["/j/0"]
    assert "hello from the task" in [line.data for line in logs.lines]
    assert (health.healthy, health.worker_id, health.runtime) == (True, "w1", "process")


@pytest.mark.parametrize("codec", ["proto", "json"])
def test_worker_server_handler_refusals_reach_the_connect_client_with_their_code(
    url: str, codec: str
) -> None:
    options = {"codec": google_protobuf_json_codec()} if codec == "json" else {}
    with WorkerServiceClientSync(url, timeout_ms=10_000, **options) as client:
        with pytest.raises(ConnectError) as missing:
            client.get_task_status(pb.WorkerGetTaskStatusRequest(task_id="/nope/0", attempt_id=2))
        with pytest.raises(ConnectError) as elsewhere:
            client.heartbeat(pb.HeartbeatRequest(worker_id="w2"))

    assert missing.value.code == Code.NOT_FOUND
    assert missing.value.message == "attempt 2 of task /nope/0 is not on this worker"
    assert elsewhere.value.code == Code.FAILED_PRECONDITION
    assert "this is worker w1, not w2" in elsewhere.value.message


def test_worker_server_heartbeats_from_the_controller_client_share_one_connection(url: str) -> None:
    async def main() -> tuple[list[pb.HeartbeatResponse], Code, int]:
        client = WorkerHeartbeatClient()
        answers = [
            await client.heartbeat(url, pb.HeartbeatRequest(worker_id="w1"), {}, 5.0) for _ in range(3)
        ]
        with pytest.raises(ConnectError) as refused:
            await client.heartbeat(url, pb.HeartbeatRequest(worker_id="w2"), {}, 5.0)
        answers.append(await client.heartbeat(url, pb.HeartbeatRequest(worker_id="w1"), {}, 5.0))
        connections = sum(len(idle) for idle in client._idle.values())
        client.close()
        return answers, refused.value.code, connections

    answers, refusal, connections = run_on_a_thread_of_its_own(main())

    assert [a.worker_id for a in answers] == ["w1"] * 4
    assert refusal == Code.FAILED_PRECONDITION
    assert connections == 1


def test_worker_server_with_a_callback_token_refuses_other_callers(tmp_path: Path) -> None:
    worker = unregistered_worker(tmp_path, token="bootstrap-token")
    with _serve(lambda sock: worker_server(worker, sock)) as url:
        bearer = {"authorization": f"Bearer {worker.callback_token}"}
        with WorkerServiceClientSync(url, timeout_ms=10_000) as client:
            with pytest.raises(ConnectError) as anonymous:
                client.list_tasks(pb.WorkerListTasksRequest())
            with pytest.raises(ConnectError) as wrong:
                client.list_tasks(
                    pb.WorkerListTasksRequest(), headers={"authorization": "Bearer bootstrap-token"}
                )
            allowed = client.health_check(pb.HealthCheckRequest(), headers=bearer)

        async def heartbeat() -> pb.HeartbeatResponse:
            return await WorkerHeartbeatClient().heartbeat(
                url, pb.HeartbeatRequest(worker_id="w1"), bearer, 5.0
            )

        assert (anonymous.value.code, wrong.value.code) == (Code.UNAUTHENTICATED, Code.UNAUTHENTICATED)
        assert "bearer token does not match" in wrong.value.message
        assert allowed.worker_id == "w1"
        assert run_on_a_thread_of_its_own(heartbeat()).worker_id == "w1"
        # Readiness probes carry no token.
        health = httpx.get(f"{url}/health").json()
        assert (health["status"], health["worker_id"]) == ("ok", "w1")


class _SlowService:
    """A WorkerService whose heartbeat waits for `release`; the rest is not needed here."""

    def __init__(self) -> None:
        self.release = asyncio.Event()

    async def heartbeat(self, request: pb.HeartbeatRequest, ctx) -> pb.HeartbeatResponse:
        await self.release.wait()
        return pb.HeartbeatResponse(worker_id=request.worker_id)

    async def get_task_status(self, request: pb.WorkerGetTaskStatusRequest, ctx) -> pb.WorkerTaskStatus:
        return pb.WorkerTaskStatus(task_id=request.task_id)

    list_tasks = fetch_task_logs = health_check = get_task_status


@pytest.fixture
def slow_url() -> Iterator[str]:
    service = pb.DESCRIPTOR.services_by_name["WorkerService"]
    with _serve(lambda sock: UnaryServer(sock, service_methods(_SlowService(), service))) as served:
        yield served


def test_unary_server_deadline_passes_answers_deadline_exceeded(slow_url: str) -> None:
    request = pb.HeartbeatRequest(worker_id="w1")
    with WorkerServiceClientSync(slow_url) as client, pytest.raises(ConnectError) as generated:
        client.heartbeat(request, timeout_ms=200)
    # The server's own answer at its deadline, not the client giving up.
    answer = httpx.post(
        f"{slow_url}/iris.cluster.WorkerService/Heartbeat",
        content=request.SerializeToString(),
        headers={"content-type": "application/proto", "connect-timeout-ms": "100"},
        timeout=10,
    )

    async def lean() -> None:
        await WorkerHeartbeatClient().heartbeat(slow_url, request, {}, 0.2)

    with pytest.raises(ConnectError) as from_lean:
        run_on_a_thread_of_its_own(lean())
    assert generated.value.code == Code.DEADLINE_EXCEEDED
    assert (answer.status_code, answer.json()["code"]) == (504, "deadline_exceeded")
    assert from_lean.value.code == Code.DEADLINE_EXCEEDED


def _raw_exchange(url: str, data: bytes) -> list[bytes]:
    """The answers to raw requests on one connection; the last request asks the server to close it."""
    host, port = url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        sock.sendall(data)
        received = b""
        while chunk := sock.recv(65536):
            received += chunk
    return [b"HTTP/1.1 " + part for part in received.split(b"HTTP/1.1 ")[1:]]


def _post(
    path: str, body: bytes, content_type: str = "application/proto", extra: str = "connection: close\r\n"
) -> bytes:
    return (
        f"POST {path} HTTP/1.1\r\nhost: worker\r\ncontent-type: {content_type}\r\n"
        f"content-length: {len(body)}\r\n{extra}\r\n"
    ).encode() + body


def test_unary_server_pipelined_requests_on_one_connection_answered_in_order(slow_url: str) -> None:
    first = _post(
        "/iris.cluster.WorkerService/GetTaskStatus",
        pb.WorkerGetTaskStatusRequest(task_id="a").SerializeToString(),
        extra="",
    )
    second = _post("/iris.cluster.WorkerService/GetTaskStatus", b'{"taskId": "b"}', "application/json")

    answers = _raw_exchange(slow_url, first + second)

    assert [a.split(b"\r\n", 1)[0] for a in answers] == [b"HTTP/1.1 200 OK"] * 2
    assert pb.WorkerTaskStatus.FromString(answers[0].split(b"\r\n\r\n", 1)[1]).task_id == "a"
    assert json.loads(answers[1].split(b"\r\n\r\n", 1)[1]) == {"taskId": "b"}


def test_unary_server_requests_it_cannot_read_answer_their_reason(slow_url: str) -> None:
    method = "/iris.cluster.WorkerService/GetTaskStatus"
    garbled = _post(method, b"\xff\xff\xff")
    wrong_type = _post(method, b"", "text/plain")
    bad_version = _post(method, b"", extra="connect-protocol-version: 2\r\nconnection: close\r\n")
    unknown = _post("/iris.cluster.WorkerService/Nope", b"")

    [garbled_answer, wrong_type_answer, bad_version_answer, unknown_answer] = [
        _raw_exchange(slow_url, request)[0] for request in (garbled, wrong_type, bad_version, unknown)
    ]
    [malformed_answer] = _raw_exchange(slow_url, b"NOT HTTP AT ALL\r\n\r\n")

    assert garbled_answer.startswith(b"HTTP/1.1 400 ")
    assert json.loads(garbled_answer.split(b"\r\n\r\n", 1)[1])["code"] == "invalid_argument"
    assert wrong_type_answer.startswith(b"HTTP/1.1 415 ") and b"accept-post: " in wrong_type_answer
    assert (
        b'"invalid_argument"' in bad_version_answer
        and b"connect-protocol-version must be '1'" in bad_version_answer
    )
    assert unknown_answer.startswith(b"HTTP/1.1 404 ")
    assert malformed_answer.startswith(b"HTTP/1.1 400 ") and b"connection: close" in malformed_answer


def test_unary_server_request_expecting_continue_is_told_to_send_its_body(slow_url: str) -> None:
    body = pb.WorkerGetTaskStatusRequest(task_id="x" * 2000).SerializeToString()
    head = (
        "POST /iris.cluster.WorkerService/GetTaskStatus HTTP/1.1\r\nhost: worker\r\n"
        f"content-type: application/proto\r\ncontent-length: {len(body)}\r\nexpect: 100-continue\r\n"
        "connection: close\r\n\r\n"
    ).encode()
    host, port = slow_url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        sock.sendall(head)
        interim = sock.recv(65536)
        sock.sendall(body)
        received = b""
        while chunk := sock.recv(65536):
            received += chunk

    assert interim == b"HTTP/1.1 100 Continue\r\n\r\n"
    assert received.startswith(b"HTTP/1.1 200 OK")
    assert pb.WorkerTaskStatus.FromString(received.split(b"\r\n\r\n", 1)[1]).task_id == "x" * 2000
