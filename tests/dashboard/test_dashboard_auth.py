"""The dashboard in a real browser against a local cluster with auth on: the login form, a
token passed once in the address, and a refused token."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.sync_api import expect

from iris.client import IrisClient
from iris.cluster.local_cluster import LocalCluster
from iris.cluster.types import Entrypoint
from iris.rpc import config_pb2

ALICE_TOKEN = "dashboard-alice-token-5e1f"
JOB_NAME = "dashboard-auth-job"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    root: Path = tmp_path_factory.mktemp("dashboard-auth")
    config = config_pb2.IrisClusterConfig()
    config.platform.local.SetInParent()
    config.storage.bundle_prefix = f"file://{root}/bundles"
    config.auth.mode = "static"
    config.auth.static_tokens.add(token=ALICE_TOKEN, user="alice", role="user")
    local = LocalCluster(config, state_dir=root / "state").start()
    try:
        with IrisClient.remote(local.url, token=ALICE_TOKEN) as client:
            client.submit(Entrypoint.from_command("true"), name=JOB_NAME).wait(timeout=60)
        yield local
    finally:
        local.stop()


def test_dashboard_without_a_token_asks_for_one_then_shows_the_jobs(cluster: LocalCluster, page) -> None:
    page.goto(cluster.url + "/")
    expect(page.locator("#login")).to_be_visible()

    page.fill("#login input[name=token]", ALICE_TOKEN)
    page.click("#login button")

    expect(page.get_by_text(JOB_NAME).first).to_be_visible()
    assert not page.page_errors


def test_dashboard_token_in_the_address_is_kept_and_taken_out_of_the_address(
    cluster: LocalCluster, page
) -> None:
    page.goto(f"{cluster.url}/?token={ALICE_TOKEN}#/jobs")

    expect(page.get_by_text(JOB_NAME).first).to_be_visible()
    assert ALICE_TOKEN not in page.url
    assert page.evaluate("sessionStorage.getItem('iris.token')") == ALICE_TOKEN


def test_dashboard_with_a_refused_token_says_so(cluster: LocalCluster, page) -> None:
    page.goto(f"{cluster.url}/?token=not-the-right-token#/jobs")

    expect(page.locator("#login")).to_contain_text("The token was refused")
