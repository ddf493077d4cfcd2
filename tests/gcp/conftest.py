"""Fixtures for the GCP tests: the fake Google APIs over namespace hosts, and the real gcloud.

    def test_x(fake_gcp: FakeGcp, gcloud: Gcloud) -> None:
        gcloud("compute", "tpus", "tpu-vm", "create", "n", "--zone", ZONE, ...)
        fake_gcp.nodes()

One HostNetwork (tests/hosts/netns.py) serves the whole session: enough hosts for a v5litepod-16
slice (4) plus a controller VM and a spare. Every test gets a fresh fake over it (hosts wiped and
given back when it stops) and a gcloud with its own HOME. A machine without gcloud or network
namespaces skips these tests; under CI=true the suite's conftest turns that skip into a failure.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "hosts"))
from fakes.gcp import FakeGcp
from netns import HostNetwork, HostsUnavailable

GCP_HOSTS = 6
GCLOUD_TIMEOUT_S = 180.0


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


@dataclass
class Gcloud:
    """The real gcloud CLI pointed at the fake; each call is one subprocess."""

    env: dict[str, str]

    def __call__(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            ["gcloud", *args],
            env=self.env,
            capture_output=True,
            text=True,
            timeout=GCLOUD_TIMEOUT_S,
            check=False,
        )

    def ok(self, *args: str) -> str:
        """Run, insist on success, return stdout."""
        result = self(*args)
        assert result.returncode == 0, f"gcloud {' '.join(args)} exited {result.returncode}:\n{result.stderr}"
        return result.stdout

    def json(self, *args: str) -> Any:
        return json.loads(self.ok(*args, "--format=json"))


@pytest.fixture
def gcloud(fake_gcp: FakeGcp, tmp_path: Path) -> Gcloud:
    if shutil.which("gcloud") is None:
        pytest.skip("gcloud is not installed")
    return Gcloud(fake_gcp.gcloud_env(tmp_path / "gcloud-home"))
