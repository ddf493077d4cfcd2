"""The client's Connect transport (`ConnectClient`) against the lean unary server and raw sockets:
answers, Connect errors, unreachable and slow servers, compression, and connections the server
closed while they were idle."""

from __future__ import annotations

import asyncio
import contextlib
import socket
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from connectrpc.code import Code
from connectrpc.errors import ConnectError
from fakes.kubernetes.incluster import server_tls_context

from iris.client.connect_client import ConnectClient
from iris.cluster.listening_socket import bind_socket, url_for
from iris.rpc import cluster_pb2 as pb
from iris.rpc.unary_server import UnaryServer, service_methods

SERVICE = pb.DESCRIPTOR.services_by_name["ControllerService"]


class _Service:
    def __init__(self) -> None:
        self.headers: list[dict[str, str]] = []

    def __getattr__(self, name: str):
        async def unused(request, ctx):
            raise AssertionError(f"{name} was not expected")

        return unused

    async def get_job_status(self, request: pb.GetJobStatusRequest, ctx) -> pb.GetJobStatusResponse:
        self.headers.append(dict(ctx.request_headers.items()))
        if request.job_id == "/missing":
            raise ConnectError(Code.NOT_FOUND, "no job /missing")
        if request.job_id == "/slow":
            await asyncio.Event().wait()
        return pb.GetJobStatusResponse(job=pb.JobStatus(job_id=request.job_id, state=pb.JOB_STATE_RUNNING))

    async def list_jobs(self, request: pb.ListJobsRequest, ctx) -> pb.ListJobsResponse:
        self.headers.append(dict(ctx.request_headers.items()))
        return pb.ListJobsResponse(jobs=[pb.JobStatus(job_id=f"/job-{i}") for i in range(request.page_size)])


@pytest.fixture
def service() -> _Service:
    return _Service()


@pytest.fixture
def url(service: _Service) -> Iterator[str]:
    sock = bind_socket("127.0.0.1", 0)
    server = UnaryServer(sock, service_methods(service, SERVICE))
    server.start_in_thread()
    try:
        yield url_for(sock)
    finally:
        server.stop()


def test_connect_client_call_answers_with_the_message_and_sends_the_given_headers(
    url: str, service: _Service
) -> None:
    client = ConnectClient(url, SERVICE, 10_000, {"authorization": "Bearer t0ken"})

    first = client.call("get_job_status", pb.GetJobStatusRequest(job_id="/a"))
    second = client.call("get_job_status", pb.GetJobStatusRequest(job_id="/b"), timeout_ms=5_000)
    client.close()

    assert (first.job.job_id, second.job.job_id) == ("/a", "/b")
    assert [h["authorization"] for h in service.headers] == ["Bearer t0ken", "Bearer t0ken"]
    assert [h["connect-timeout-ms"] for h in service.headers] == ["10000", "5000"]


def test_connect_client_handler_error_raises_its_code_and_message(url: str) -> None:
    client = ConnectClient(url, SERVICE, 10_000)

    with pytest.raises(ConnectError) as refused:
        client.call("get_job_status", pb.GetJobStatusRequest(job_id="/missing"))
    answer = client.call("get_job_status", pb.GetJobStatusRequest(job_id="/after"))

    assert (refused.value.code, refused.value.message) == (Code.NOT_FOUND, "no job /missing")
    assert answer.job.job_id == "/after"


def test_connect_client_unreachable_server_raises_unavailable_request_failed() -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    client = ConnectClient(f"http://127.0.0.1:{port}", SERVICE, 10_000)

    with pytest.raises(ConnectError) as failed:
        client.call("get_job_status", pb.GetJobStatusRequest(job_id="/a"))

    assert failed.value.code == Code.UNAVAILABLE
    assert failed.value.message == "Request failed: Connection refused"


def test_connect_client_slow_answer_raises_deadline_exceeded(url: str) -> None:
    client = ConnectClient(url, SERVICE, 10_000)

    with pytest.raises(ConnectError) as late:
        client.call("get_job_status", pb.GetJobStatusRequest(job_id="/slow"), timeout_ms=200)
    answer = client.call("get_job_status", pb.GetJobStatusRequest(job_id="/after"))

    assert (late.value.code, late.value.message) == (Code.DEADLINE_EXCEEDED, "Request timed out")
    assert answer.job.job_id == "/after"


def test_connect_client_tls_server_that_never_answers_raises_deadline_exceeded(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A TLS connection keeps Python's own timeout: with the kernel's, CPython's TLS layer retries a
    # timed-out read for ever.
    context, cert_pem = server_tls_context(tmp_path)
    (tmp_path / "ca.pem").write_bytes(cert_pem)
    monkeypatch.setenv("SSL_CERT_FILE", str(tmp_path / "ca.pem"))
    listener = bind_socket("127.0.0.1", 0)
    done = threading.Event()

    def read_and_stay_silent() -> None:
        connection, _ = listener.accept()
        with context.wrap_socket(connection, server_side=True) as tls:
            tls.recv(65536)
            done.wait(30)

    threading.Thread(target=read_and_stay_silent, daemon=True).start()
    client = ConnectClient(f"https://127.0.0.1:{listener.getsockname()[1]}", SERVICE, 10_000)
    started = time.monotonic()
    try:
        with ThreadPoolExecutor(1) as pool:
            call = pool.submit(client.call, "get_job_status", pb.GetJobStatusRequest(job_id="/a"), 300)
            with pytest.raises(ConnectError) as late:
                call.result(timeout=10)
    finally:
        done.set()
        listener.close()

    assert (late.value.code, late.value.message) == (Code.DEADLINE_EXCEEDED, "Request timed out")
    assert time.monotonic() - started < 5


def test_connect_client_accept_gzip_long_answer_arrives_whole(url: str, service: _Service) -> None:
    client = ConnectClient(url, SERVICE, 10_000)

    plain = client.call("list_jobs", pb.ListJobsRequest(page_size=300))
    compressed = client.call("list_jobs", pb.ListJobsRequest(page_size=300), accept_gzip=True)

    assert len(plain.jobs) == len(compressed.jobs) == 300
    assert compressed.jobs[299].job_id == "/job-299"
    assert [h["accept-encoding"] for h in service.headers] == ["identity", "gzip"]


def test_connect_client_threads_sharing_a_client_each_get_their_own_answer(url: str) -> None:
    client = ConnectClient(url, SERVICE, 10_000)

    def ask(i: int) -> str:
        return client.call("get_job_status", pb.GetJobStatusRequest(job_id=f"/j{i}")).job.job_id

    with ThreadPoolExecutor(8) as pool:
        answers = list(pool.map(ask, range(200)))

    assert answers == [f"/j{i}" for i in range(200)]


@contextlib.contextmanager
def _answering_once_per_connection() -> Iterator[tuple[str, list[int]]]:
    """A server that answers one GetJobStatus per connection, then closes it without saying so
    (as a server closes a connection that sat idle too long)."""
    listener = bind_socket("127.0.0.1", 0)
    served: list[int] = []
    body = pb.GetJobStatusResponse(job=pb.JobStatus(job_id="/again")).SerializeToString()
    head = b"HTTP/1.1 200 OK\r\ncontent-type: application/proto\r\ncontent-length: %d\r\n\r\n" % len(body)
    answer = head + body

    def serve() -> None:
        with contextlib.suppress(OSError):
            while True:
                connection, _ = listener.accept()
                with connection:
                    request = b""
                    while not (b"\r\n\r\n" in request and request.endswith(b"/a")):
                        request += connection.recv(65536)
                    served.append(1)
                    connection.sendall(answer)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield url_for(listener), served
    finally:
        listener.close()


def test_connect_client_connection_closed_while_idle_request_sent_again_on_a_new_one() -> None:
    with _answering_once_per_connection() as (url, served):
        client = ConnectClient(url, SERVICE, 10_000)

        answers = [client.call("get_job_status", pb.GetJobStatusRequest(job_id="/a")) for _ in range(3)]

    assert [a.job.job_id for a in answers] == ["/again"] * 3
    assert len(served) == 3
