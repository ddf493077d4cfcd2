"""Hostile and extreme requests against a real controller over HTTP: each is refused with a clear,
short reason and the controller keeps serving."""

from __future__ import annotations

import asyncio
import socket
import sqlite3
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest
from connectrpc.code import Code
from connectrpc.errors import ConnectError
from controller_support import local_controller_settings, running_controller

from iris import chaos
from iris.client import IrisClient
from iris.client.client import InvalidRequestError
from iris.cluster.controller.main import ControllerDaemon
from iris.cluster.controller.service import _rpc
from iris.cluster.controller.settings import DaemonSettings
from iris.cluster.limits import DEFAULT_INPUT_LIMITS, InputLimits
from iris.cluster.types import Entrypoint
from iris.config import ConfigError, load_and_validate
from iris.rpc import cluster_pb2 as pb

SERVICE = "iris.cluster.ControllerService"


@pytest.fixture(scope="module")
def controller_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with running_controller(tmp_path_factory.mktemp("api-edge")) as daemon:
        yield daemon.url


def _call(url: str, method: str, body: dict) -> httpx.Response:
    return httpx.post(f"{url}/{SERVICE}/{method}", json=body, timeout=30)


@pytest.mark.parametrize("token", ["99999999999999999999", "-1", "garbage", "1e3", "١٢"])
def test_list_jobs_out_of_range_page_token_is_invalid_argument(controller_url: str, token: str) -> None:
    response = _call(controller_url, "ListJobs", {"pageToken": token})

    assert response.status_code == 400, response.text
    assert response.json()["code"] == "invalid_argument"
    assert "next_page_token" in response.json()["message"]


def test_list_jobs_valid_page_token_past_the_end_returns_an_empty_page(controller_url: str) -> None:
    response = _call(controller_url, "ListJobs", {"pageToken": "999999999999999999"})

    assert response.status_code == 200, response.text
    assert response.json().get("jobs", []) == []


@pytest.mark.parametrize("worker_id", ["bad\u0000id", "has space", "x" * 300, "slash/in/it"])
def test_register_invalid_worker_id_is_refused_with_a_short_quote(controller_url: str, worker_id: str) -> None:
    response = _call(controller_url, "Register", {"workerId": worker_id, "address": "http://127.0.0.1:1"})

    assert response.status_code == 400, response.text
    assert "invalid worker_id" in response.json()["message"]
    assert len(response.json()["message"]) < 300
    listed = _call(controller_url, "ListWorkers", {}).json().get("workers", [])
    assert worker_id not in [w["workerId"] for w in listed]


def test_launch_job_huge_job_id_error_quotes_only_a_prefix(controller_url: str) -> None:
    huge_name = "bad name " + "x" * (8 << 20)

    response = _call(
        controller_url,
        "GetJobStatus",
        {"jobId": huge_name},
    )

    assert response.status_code == 400, response.text
    assert len(response.content) < 1000
    assert "bad name" in response.json()["message"]


def _command_job(name: str, replicas: int) -> dict:
    return {
        "name": name,
        "replicas": replicas,
        "entrypoint": {"command": {"argv": ["true"]}},
        "resources": {"cpuMillicores": "1000", "memoryBytes": str(1 << 30)},
    }


def test_launch_job_max_int32_replicas_is_refused_at_once(controller_url: str) -> None:
    response = _call(controller_url, "LaunchJob", _command_job("too-many", 2**31 - 1))

    assert response.status_code == 400, response.text
    assert response.elapsed.total_seconds() < 1
    assert "replicas must be between 0 and 10000" in response.json()["message"]
    assert _call(controller_url, "GetJobStatus", {"jobId": "/too-many"}).json()["code"] == "not_found"


def test_launch_job_of_100000_tasks_keeps_health_answering(tmp_path: Path) -> None:
    with running_controller(tmp_path, input_limits=InputLimits(max_replicas=100_000)) as daemon:
        with ThreadPoolExecutor(1) as pool:
            launch = pool.submit(_call, daemon.url, "LaunchJob", _command_job("wide", 100_000))
            slowest = 0.0
            with httpx.Client(timeout=10) as http:
                while not launch.done():
                    started = time.monotonic()
                    assert http.get(f"{daemon.url}/health").status_code == 200
                    slowest = max(slowest, time.monotonic() - started)
            response = launch.result()

        assert response.status_code == 200, response.text
        assert slowest < 1.0, f"/health took {slowest:.2f}s while the job was created"
        status = _call(daemon.url, "GetJobStatus", {"jobId": "/wide"}).json()
        assert status["job"]["numTasks"] == 100_000


def test_launch_job_same_request_id_twice_returns_the_first_job(controller_url: str) -> None:
    body = {**_command_job("", 1), "requestId": "retry-me-1"}
    del body["name"]

    first = _call(controller_url, "LaunchJob", body)
    second = _call(controller_url, "LaunchJob", body)

    assert first.status_code == second.status_code == 200, (first.text, second.text)
    assert first.json()["jobId"] == second.json()["jobId"]
    listed = _call(controller_url, "ListJobs", {"pageSize": 1000}).json().get("jobs", [])
    assert [j["jobId"] for j in listed].count(first.json()["jobId"]) == 1
    assert sum(1 for j in listed if j["jobId"].startswith("/job-")) == 1


def test_launch_job_named_job_same_request_id_twice_returns_the_first_job_while_a_new_request_is_refused(
    controller_url: str,
) -> None:
    body = {**_command_job("named-retry", 1), "requestId": "retry-me-2"}

    first = _call(controller_url, "LaunchJob", body)
    retry = _call(controller_url, "LaunchJob", body)
    another = _call(controller_url, "LaunchJob", {**body, "requestId": "another-submit"})

    assert first.status_code == retry.status_code == 200, (first.text, retry.text)
    assert retry.json()["jobId"] == first.json()["jobId"] == "/named-retry"
    # The job is still pending: a submission of its name that is not a retry is refused.
    assert another.status_code == 409 and "is still pending" in another.text, another.text


class AnswerDroppingProxy:
    """Forwards HTTP requests to the controller, but after forwarding the first request whose path
    contains `drop_path` it closes the connection instead of sending the answer back."""

    def __init__(self, upstream_port: int, drop_path: bytes):
        self._upstream_port = upstream_port
        self._drop_path = drop_path
        self.dropped = 0
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self._listener.getsockname()[1]}"
        threading.Thread(target=self._accept, daemon=True).start()

    def close(self) -> None:
        self._listener.close()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(client,), daemon=True).start()

    @staticmethod
    def _read_message(sock: socket.socket) -> bytes:
        data = b""
        while b"\r\n\r\n" not in data:
            chunk = sock.recv(65536)
            if not chunk:
                return b""
            data += chunk
        head, _, body = data.partition(b"\r\n\r\n")
        headers = {}
        for line in head.split(b"\r\n")[1:]:
            name, _, value = line.partition(b":")
            headers[name.strip().lower()] = value.strip().lower()
        if headers.get(b"transfer-encoding") == b"chunked":
            while not body.endswith(b"0\r\n\r\n"):
                body += sock.recv(65536)
        length = int(headers.get(b"content-length", b"0"))
        while len(body) < length:
            body += sock.recv(65536)
        return head + b"\r\n\r\n" + body

    def _serve(self, client: socket.socket) -> None:
        with client, socket.create_connection(("127.0.0.1", self._upstream_port)) as upstream:
            while True:
                request = self._read_message(client)
                if not request:
                    return
                upstream.sendall(request)
                answer = self._read_message(upstream)
                if self._drop_path in request.split(b"\r\n", 1)[0] and self.dropped == 0:
                    self.dropped += 1
                    return
                client.sendall(answer)


def test_client_submit_whose_answer_is_lost_retries_into_the_same_job(controller_url: str, tmp_path: Path) -> None:
    (tmp_path / "main.py").write_text("print('hello')\n")
    proxy = AnswerDroppingProxy(int(controller_url.rsplit(":", 1)[1]), b"/LaunchJob")
    try:
        with IrisClient.remote(proxy.url) as client:
            before = {j.job_id for j in client.list_jobs()}
            job = client.submit(Entrypoint.from_command("true"), workspace=tmp_path)
            created = {j.job_id for j in client.list_jobs()} - before
    finally:
        proxy.close()

    assert proxy.dropped == 1
    assert created == {job.job_id}


def test_get_job_status_huge_job_id_is_invalid_argument_quoting_a_prefix(controller_url: str) -> None:
    response = _call(controller_url, "GetJobStatus", {"jobId": "/" + "x" * (8 << 20)})

    assert response.status_code == 400, response.text[:300]
    assert response.json()["code"] == "invalid_argument"
    assert "longer than the limit of 4096" in response.json()["message"]
    assert len(response.text) < 400


@pytest.mark.parametrize(
    ("method", "body", "field"),
    [
        ("TerminateJob", {"jobId": "/job\u0000"}, "job_id"),
        ("GetTaskLogs", {"id": "/" + "y" * 5000}, "id"),
        ("ListJobs", {"nameContains": "z" * 2000}, "name_contains"),
        ("RegisterEndpoint", {"name": "n" * 2000, "address": "a", "jobId": "/j"}, "name"),
        ("ListEndpoints", {"prefix": "p" * 2000}, "prefix"),
    ],
)
def test_other_rpcs_oversized_or_control_character_strings_are_refused(
    controller_url: str, method: str, body: dict, field: str
) -> None:
    response = _call(controller_url, method, body)

    assert response.status_code == 400, response.text[:300]
    assert response.json()["message"].startswith(field + " ")
    assert len(response.text) < 400


def test_controller_from_config_applies_its_limits_section(tmp_path: Path) -> None:
    config_path = tmp_path / "cluster.yaml"
    config_path.write_text(
        f"name: limited\nplatform:\n  local: {{}}\nstorage:\n  bundle_prefix: file://{tmp_path}/bundles\n"
        f"controller:\n  local:\n    state_dir: {tmp_path}/state\nlimits:\n  max_replicas: 3\n"
    )
    daemon = ControllerDaemon(DaemonSettings.from_config(load_and_validate(config_path), port=0))
    daemon.start_in_thread()
    try:
        with IrisClient.remote(daemon.url) as client:
            with pytest.raises(InvalidRequestError, match="replicas must be between 0 and 3, got 4"):
                client.submit(Entrypoint.from_command("true"), name="wide", replicas=4, workspace=tmp_path / "state")
    finally:
        daemon.stop()


def test_config_negative_limit_is_a_config_error(tmp_path: Path) -> None:
    config_path = tmp_path / "cluster.yaml"
    config_path.write_text("platform:\n  local: {}\nlimits:\n  max_bundle_entries: -5\n")

    with pytest.raises(ConfigError, match="limits.max_bundle_entries must be 0 or more, got -5"):
        load_and_validate(config_path)


def test_controller_start_whose_store_write_fails_retries_and_serves(tmp_path: Path) -> None:
    daemon = ControllerDaemon(local_controller_settings(tmp_path))
    chaos.enable(chaos.CONTROLLER_STORE_WRITE, 1.0, count=2)
    try:
        daemon.start_in_thread()
        assert httpx.get(f"{daemon.url}/health", timeout=10).status_code == 200
        assert chaos.injections() == {chaos.CONTROLLER_STORE_WRITE: 2}
    finally:
        chaos.reset()
        daemon.stop()


def test_rpc_whose_store_write_fails_answers_unavailable_so_clients_retry() -> None:
    class Service:
        _limits = DEFAULT_INPUT_LIMITS

        @_rpc
        async def launch_job(self, request, ctx):
            raise sqlite3.OperationalError("database is locked")

    with pytest.raises(ConnectError) as raised:
        asyncio.run(Service().launch_job(pb.LaunchJobRequest(), None))

    assert raised.value.code == Code.UNAVAILABLE
    assert "could not update its state: database is locked" in raised.value.message


def test_list_jobs_next_page_tokens_walk_every_job_once_while_new_jobs_arrive(tmp_path: Path) -> None:
    with running_controller(tmp_path) as daemon:
        for i in range(7):
            _call(daemon.url, "LaunchJob", {"name": f"page-{i}", "entrypoint": {"command": {"argv": ["true"]}}})
        before = [job["jobId"] for job in _call(daemon.url, "ListJobs", {}).json()["jobs"]]
        seen, token = [], ""
        while True:
            page = _call(daemon.url, "ListJobs", {"pageSize": 3, "pageToken": token}).json()
            seen += [job["jobId"] for job in page.get("jobs", [])]
            # Newest first: a job submitted mid-walk sorts before the pages still to come.
            _call(daemon.url, "LaunchJob", {"name": f"late-{len(seen)}", "entrypoint": {"command": {"argv": ["true"]}}})
            token = page.get("nextPageToken", "")
            if not token:
                break

    assert sorted(before) == [f"/page-{i}" for i in range(7)]
    assert seen == before


@pytest.mark.parametrize("order", ["JOB_ORDER_NAME", "JOB_ORDER_STATE"])
def test_list_jobs_position_token_of_another_order_or_tampered_is_invalid_argument(controller_url: str, order: str) -> None:
    for i in range(3):
        _call(controller_url, "LaunchJob", {"name": f"token-{i}", "entrypoint": {"command": {"argv": ["true"]}}})
    token = _call(controller_url, "ListJobs", {"pageSize": 1}).json()["nextPageToken"]

    other_order = _call(controller_url, "ListJobs", {"pageSize": 1, "pageToken": token, "order": order})
    tampered = _call(controller_url, "ListJobs", {"pageSize": 1, "pageToken": token[:-3] + "xyz"})

    for response in (other_order, tampered):
        assert response.status_code == 400, response.text
        assert response.json()["code"] == "invalid_argument"
        assert "next_page_token" in response.json()["message"]
