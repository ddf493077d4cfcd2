"""Fixtures for the GCP tests: the fake Google APIs over namespace hosts, and the real gcloud.

    def test_x(fake_gcp: FakeGcp, gcloud: Gcloud) -> None:
        gcloud("compute", "tpus", "tpu-vm", "create", "n", "--zone", ZONE, ...)
        fake_gcp.nodes()

One HostNetwork (tests/hosts/netns.py) serves the whole session: enough hosts for two v5litepod-16
slices (4 each) plus a controller VM. Every test gets a fresh fake over it (hosts wiped and
given back when it stops) and a gcloud with its own HOME. A machine without gcloud or network
namespaces skips these tests; under CI=true the suite's conftest turns that skip into a failure.
"""

from __future__ import annotations

import shutil
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "hosts"))
from fakes.gcp import FakeGcp
from fakes.gcp.gcloud import Gcloud
from netns import HostNetwork, HostsUnavailable

# Two v5litepod-16 slices (4 hosts each: the smoke test's concurrent jobs bring up both at once)
# and a controller VM.
GCP_HOSTS = 9


@pytest.fixture(scope="session")
def gcp_host_network(tmp_path_factory: pytest.TempPathFactory) -> Iterator[HostNetwork]:
    network = HostNetwork(tmp_path_factory.mktemp("gcp-hosts"), GCP_HOSTS)
    try:
        network.start()
    except HostsUnavailable as exc:
        pytest.skip(f"cannot create the SSH test hosts for the GCP fake: {exc}")
    try:
        yield network
    finally:
        network.stop()


@pytest.fixture
def fake_gcp(gcp_host_network: HostNetwork) -> Iterator[FakeGcp]:
    with FakeGcp(gcp_host_network.hosts) as fake:
        yield fake


@pytest.fixture
def gcloud(fake_gcp: FakeGcp, tmp_path: Path) -> Gcloud:
    if shutil.which("gcloud") is None:
        pytest.skip("gcloud is not installed")
    return Gcloud(fake_gcp.gcloud_env(tmp_path / "gcloud-home"))
