"""A real local cluster with auth on: the controller and a worker daemon talking Connect RPC,
called over HTTP without, with a bad, and with each role's token."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from iris.client.client import IrisClient, PermissionDeniedError, iris_ctx
from iris.cluster.controller.main import ControllerDaemon
from iris.cluster.controller.settings import DaemonSettings
from iris.cluster.local_cluster import LocalCluster
from iris.cluster.types import UNFINISHED_JOB_STATES, Entrypoint
from iris.rpc import cluster_pb2 as pb
from iris.rpc import config_pb2

SERVICE = "iris.cluster.ControllerService"
ADMIN_TOKEN = "admin-token-for-the-auth-tests"
ALICE_TOKEN = "alice-token-for-the-auth-tests"
BOB_TOKEN = "bob-token-for-the-auth-tests-x"
CONTROLLER_METHODS = [m.name for m in pb.DESCRIPTOR.services_by_name["ControllerService"].methods]
WORKER_METHODS = [m.name for m in pb.DESCRIPTOR.services_by_name["WorkerService"].methods]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    root: Path = tmp_path_factory.mktemp("auth-api")
    config = config_pb2.IrisClusterConfig()
    config.platform.local.SetInParent()
    config.storage.bundle_prefix = f"file://{root}/bundles"
    config.defaults.timeouts.heartbeat_interval.milliseconds = 500
    config.auth.mode = "static"
    for token, user, role in (
        (ADMIN_TOKEN, "root", "admin"),
        (ALICE_TOKEN, "alice", "user"),
        (BOB_TOKEN, "bob", "user"),
    ):
        config.auth.static_tokens.add(token=token, user=user, role=role)
    local = LocalCluster(config, state_dir=root / "state").start()
    try:
        yield local
    finally:
        local.stop()


def _post(
    url: str, method: str, token: str | None = None, body: dict | None = None, service: str = SERVICE
) -> httpx.Response:
    headers = {"Authorization": f"Bearer {token}"} if token is not None else {}
    return httpx.post(f"{url}/{service}/{method}", json=body or {}, headers=headers, timeout=30)


def _sleeping_job(client: IrisClient, name: str):
    return client.submit(Entrypoint.from_command("sleep", "300"), name=name)


@pytest.mark.parametrize("method", [m for m in CONTROLLER_METHODS if m != "Login"])
@pytest.mark.parametrize("token", [None, "not-a-token", "a.b.c"])
def test_every_rpc_without_a_valid_token_is_unauthenticated(
    cluster: LocalCluster, method: str, token: str | None
) -> None:
    response = _post(cluster.url, method, token)

    assert response.status_code == 401, response.text
    assert response.json()["code"] == "unauthenticated"
    assert "token" in response.json()["message"]


def test_health_stays_open_and_metrics_needs_a_token(cluster: LocalCluster) -> None:
    assert httpx.get(f"{cluster.url}/health", timeout=10).status_code == 200
    assert httpx.get(f"{cluster.url}/metrics", timeout=10).status_code == 401

    response = httpx.get(
        f"{cluster.url}/metrics", headers={"Authorization": f"Bearer {ALICE_TOKEN}"}, timeout=10
    )

    assert response.status_code == 200 and "iris_workers" in response.text


def test_login_exchanges_a_configured_token_for_a_session_token(cluster: LocalCluster) -> None:
    response = _post(cluster.url, "Login", body={"token": ALICE_TOKEN})
    assert response.status_code == 200, response.text
    session = response.json()

    listed = _post(cluster.url, "ListJobs", session["token"])

    assert session["user"] == "alice" and session["role"] == "user"
    assert listed.status_code == 200, listed.text


def test_login_with_an_unknown_token_is_unauthenticated(cluster: LocalCluster) -> None:
    response = _post(cluster.url, "Login", body={"token": "wrong-token-wrong-token"})

    assert response.status_code == 401
    assert "wrong-token" not in response.text


def test_user_token_cannot_kill_or_delete_another_users_job(cluster: LocalCluster) -> None:
    with (
        IrisClient.remote(cluster.url, token=ALICE_TOKEN) as alice,
        IrisClient.remote(cluster.url, token=BOB_TOKEN) as bob,
    ):
        job = _sleeping_job(alice, "alice-sleeps")

        with pytest.raises(PermissionDeniedError, match="belongs to user alice, not to bob"):
            bob.call("terminate_job", pb.TerminateJobRequest(job_id=job.job_id))
        with pytest.raises(PermissionDeniedError):
            bob.call("delete_job", pb.DeleteJobRequest(job_id=job.job_id, kill_running=True))
        still = alice.call("get_job_status", pb.GetJobStatusRequest(job_id=job.job_id)).job.state
        assert still in UNFINISHED_JOB_STATES

        terminated = alice.call("terminate_job", pb.TerminateJobRequest(job_id=job.job_id)).terminated_job_ids

    assert job.job_id in terminated


def test_admin_token_may_kill_any_users_job(cluster: LocalCluster) -> None:
    with (
        IrisClient.remote(cluster.url, token=ALICE_TOKEN) as alice,
        IrisClient.remote(cluster.url, token=ADMIN_TOKEN) as admin,
    ):
        job = _sleeping_job(alice, "alice-sleeps-for-admin")

        terminated = admin.call("terminate_job", pb.TerminateJobRequest(job_id=job.job_id)).terminated_job_ids

    assert job.job_id in terminated


def test_worker_token_cannot_launch_jobs(cluster: LocalCluster) -> None:
    assert cluster.daemon is not None
    worker_token = cluster.daemon.worker_token()
    body = {"name": "from-a-worker", "entrypoint": {"command": {"argv": ["true"]}}}

    response = _post(cluster.url, "LaunchJob", worker_token, body)

    assert response.status_code == 403, response.text
    assert response.json()["code"] == "permission_denied"
    assert "LaunchJob needs the admin or user role" in response.json()["message"]


def test_user_token_cannot_register_a_worker(cluster: LocalCluster) -> None:
    response = _post(
        cluster.url, "Register", ALICE_TOKEN, {"workerId": "fake", "address": "http://127.0.0.1:1"}
    )

    assert response.status_code == 403
    assert response.json()["code"] == "permission_denied"


def test_user_cannot_mint_tokens_but_admin_can(cluster: LocalCluster) -> None:
    body = {"user": "carol", "role": "user"}
    refused = _post(cluster.url, "CreateToken", ALICE_TOKEN, body)
    minted = _post(cluster.url, "CreateToken", ADMIN_TOKEN, body)

    assert refused.status_code == 403
    assert minted.status_code == 200
    assert _post(cluster.url, "ListWorkers", minted.json()["token"]).status_code == 200


def test_curl_with_the_bearer_header_lists_jobs(cluster: LocalCluster) -> None:
    def curl(*headers: str) -> tuple[str, dict]:
        args = ["curl", "-sS", "-w", "\n%{http_code}", "-X", "POST", "-H", "Content-Type: application/json"]
        for header in headers:
            args += ["-H", header]
        result = subprocess.run(
            [*args, "-d", "{}", f"{cluster.url}/{SERVICE}/ListJobs"],
            capture_output=True,
            text=True,
            timeout=30,
            check=True,
        )
        body, _, status = result.stdout.rpartition("\n")
        return status, json.loads(body)

    status, body = curl(f"Authorization: Bearer {ALICE_TOKEN}")
    refused_status, refused = curl()

    assert status == "200" and "totalCount" in body or body == {}, body
    assert refused_status == "401" and refused["code"] == "unauthenticated"


def test_worker_rpcs_need_the_secret_the_worker_gave_the_controller(cluster: LocalCluster) -> None:
    with IrisClient.remote(cluster.url, token=ADMIN_TOKEN) as admin:
        address = admin.list_workers()[0].address
    assert cluster.daemon is not None

    for method in WORKER_METHODS:
        for token in (None, cluster.daemon.worker_token(), ADMIN_TOKEN):
            response = _post(address, method, token, service="iris.cluster.WorkerService")
            assert response.status_code == 401, (method, response.text)


def test_task_calls_the_controller_as_its_jobs_owner(cluster: LocalCluster) -> None:
    def _launch_child() -> str:  # nested, so that it travels by value to the worker
        with iris_ctx().client as client:
            child = client.submit(Entrypoint.from_command("true"), name="child")
            child.wait(timeout=60)
            return child.job_id

    with (
        IrisClient.remote(cluster.url, token=ALICE_TOKEN) as alice,
        IrisClient.remote(cluster.url, token=BOB_TOKEN) as bob,
    ):
        parent = alice.submit(Entrypoint.from_callable(_launch_child), name="parent")
        parent.wait(timeout=90)
        child_id = parent.result()

        with pytest.raises(PermissionDeniedError, match="belongs to user alice"):
            bob.call("delete_job", pb.DeleteJobRequest(job_id=child_id))

    assert child_id == "/parent/child"


def test_controller_without_an_auth_config_takes_calls_without_a_token(tmp_path: Path) -> None:
    daemon = ControllerDaemon(
        DaemonSettings.from_config(
            state_dir=tmp_path / "state", bundle_prefix=f"file://{tmp_path}/bundles", host="127.0.0.1", port=0
        )
    )
    daemon.start_in_thread()
    try:
        listed = _post(daemon.url, "ListJobs")
        login = _post(daemon.url, "Login", body={"token": ALICE_TOKEN})
        metrics = httpx.get(f"{daemon.url}/metrics", timeout=10)
    finally:
        daemon.stop()

    assert listed.status_code == 200 and metrics.status_code == 200
    assert login.json()["code"] == "failed_precondition" and "auth.mode is none" in login.json()["message"]
    assert not (tmp_path / "state" / "auth").exists()
