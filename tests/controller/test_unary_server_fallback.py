"""The lean unary server with an ASGI application behind it, as the controller serves its port:
Connect methods answered by the server, every other request by the application."""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import Iterator

import httpx
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response
from starlette.routing import Route

from iris.cluster.listening_socket import bind_socket, url_for
from iris.rpc import cluster_pb2 as pb
from iris.rpc.unary_server import UnaryServer, service_methods
from iris.time import wait_until

SERVICE = pb.DESCRIPTOR.services_by_name["ControllerService"]


class _Service:
    """GetJobStatus answers at once, or never for the job "/slow"; no other method is called."""

    def __init__(self) -> None:
        self.waiting = 0
        self.cancelled = 0

    def __getattr__(self, name: str):
        async def unused(request, ctx):
            raise AssertionError(f"{name} was not expected")

        return unused

    async def get_job_status(self, request: pb.GetJobStatusRequest, ctx) -> pb.GetJobStatusResponse:
        if request.job_id == "/slow":
            self.waiting += 1
            try:
                await asyncio.Event().wait()
            except asyncio.CancelledError:
                self.cancelled += 1
                raise
        return pb.GetJobStatusResponse(job=pb.JobStatus(job_id=request.job_id, state=pb.JOB_STATE_RUNNING))


async def _echo(request: Request) -> Response:
    return JSONResponse(
        {
            "method": request.method,
            "path": request.url.path,
            "query": request.url.query,
            "body": (await request.body()).decode(),
            "accept": request.headers.get("accept"),
            "client": request.client.host if request.client else None,
        },
        headers={"x-from": "starlette"},
    )


async def _cached(request: Request) -> Response:
    if request.headers.get("if-none-match") == '"v1"':
        return Response(status_code=304, headers={"etag": '"v1"'})
    return PlainTextResponse("fresh", headers={"etag": '"v1"'})


async def _broken(request: Request) -> Response:
    raise RuntimeError("this route fails")


_APP = Starlette(
    routes=[
        Route("/echo/{rest:path}", _echo, methods=["GET", "POST", "HEAD"]),
        Route("/cached", _cached),
        Route("/broken", _broken),
    ]
)


@contextlib.contextmanager
def _serving(service: _Service, started: list[str]) -> Iterator[str]:
    async def on_startup() -> None:
        started.append("started")

    sock = bind_socket("127.0.0.1", 0)
    server = UnaryServer(sock, service_methods(service, SERVICE), fallback=_APP, on_startup=on_startup)
    server.start_in_thread()
    try:
        yield url_for(sock)
    finally:
        server.stop()


@pytest.fixture
def service() -> _Service:
    return _Service()


@pytest.fixture
def started() -> list[str]:
    return []


@pytest.fixture
def url(service: _Service, started: list[str]) -> Iterator[str]:
    with _serving(service, started) as served:
        yield served


def test_unary_server_fallback_other_paths_reach_the_asgi_app_with_their_request(url: str) -> None:
    with httpx.Client(base_url=url, timeout=10) as http:
        answer = http.post("/echo/a%20b?x=1&y=2", content=b"payload", headers={"accept": "text/plain"})

    assert answer.status_code == 200
    assert answer.headers["x-from"] == "starlette"
    assert answer.json() == {
        "method": "POST",
        "path": "/echo/a b",
        "query": "x=1&y=2",
        "body": "payload",
        "accept": "text/plain",
        "client": "127.0.0.1",
    }


def test_unary_server_fallback_connect_methods_and_pages_share_a_kept_alive_connection(url: str) -> None:
    with httpx.Client(base_url=url, timeout=10) as http:
        page = http.get("/echo/first")
        rpc = http.post(
            f"/{SERVICE.full_name}/GetJobStatus",
            content=pb.GetJobStatusRequest(job_id="/j").SerializeToString(),
            headers={"content-type": "application/proto"},
        )
        again = http.get("/echo/second")

    assert page.json()["path"] == "/echo/first"
    assert pb.GetJobStatusResponse.FromString(rpc.content).job.job_id == "/j"
    assert again.json()["path"] == "/echo/second"


def test_unary_server_fallback_head_and_not_modified_answers_carry_no_body(url: str) -> None:
    host, port = url.split("//")[1].split(":")
    with socket.create_connection((host, int(port)), 10) as sock:
        sock.sendall(b"HEAD /echo/x HTTP/1.1\r\nhost: x\r\n\r\n")
        sock.sendall(b'GET /cached HTTP/1.1\r\nhost: x\r\nif-none-match: "v1"\r\n\r\n')
        sock.sendall(b"GET /cached HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n")
        received = b""
        while chunk := sock.recv(65536):
            received += chunk

    head, not_modified, fresh = received.split(b"HTTP/1.1 ")[1:]
    assert head.startswith(b"200 OK\r\n") and head.endswith(b"\r\n\r\n")
    assert b"content-length: " in head
    assert not_modified.startswith(b"304 Not Modified\r\n") and not_modified.endswith(b"\r\n\r\n")
    assert b"content-length" not in not_modified
    assert fresh.startswith(b"200 OK\r\n") and fresh.endswith(b"\r\n\r\nfresh")
    assert b"connection: close" in fresh


def test_unary_server_fallback_failing_route_answers_500_and_unknown_path_404(url: str) -> None:
    with httpx.Client(base_url=url, timeout=10) as http:
        broken = http.get("/broken")
        unknown = http.get("/no/such/page")
        still_serving = http.get("/echo/after")

    assert broken.status_code == 500
    assert broken.headers["connection"] == "close"
    assert unknown.status_code == 404
    assert still_serving.status_code == 200


def test_unary_server_on_startup_runs_before_the_first_request(url: str, started: list[str]) -> None:
    assert started == ["started"]


def test_unary_server_request_in_flight_cancelled_when_its_client_goes_away(
    url: str, service: _Service
) -> None:
    body = pb.GetJobStatusRequest(job_id="/slow").SerializeToString()
    host, port = url.split("//")[1].split(":")
    with socket.create_connection((host, int(port)), 10) as sock:
        sock.sendall(
            b"POST /%s/GetJobStatus HTTP/1.1\r\nhost: x\r\ncontent-type: application/proto\r\n"
            b"content-length: %d\r\n\r\n%s" % (SERVICE.full_name.encode(), len(body), body)
        )
        wait_until(lambda: service.waiting == 1, 10, 0.01, "the handler to start waiting")

    wait_until(lambda: service.cancelled == 1, 10, 0.01, "the handler to be cancelled")
