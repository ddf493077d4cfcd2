"""Fixtures for tests that reach hosts over SSH: a session-wide HostNetwork (see netns.py).

Outside CI a machine that cannot create the hosts skips these tests; under CI=true it fails them.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from netns import HostNetwork, HostsUnavailable, SshHost

# The runtime tests' private container engines (one per checkout) also serve the hosts' Docker path.
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "runtime"))
from engines import DockerEngine, session_docker_engine

NAMESPACE_HOSTS = 3


def _unavailable(reason: str) -> None:
    if os.environ.get("CI") == "true":
        pytest.fail(reason)
    pytest.skip(reason)


@pytest.fixture(scope="session")
def host_network(tmp_path_factory: pytest.TempPathFactory) -> Iterator[HostNetwork]:
    network = HostNetwork(tmp_path_factory.mktemp("hosts"), NAMESPACE_HOSTS)
    try:
        network.start()
    except HostsUnavailable as exc:
        _unavailable(f"cannot create the SSH test hosts: {exc}")
    try:
        yield network
    finally:
        network.stop()


@pytest.fixture(scope="session")
def ssh_key(host_network: HostNetwork) -> Path:
    assert host_network.key is not None
    return host_network.key


@pytest.fixture
def hosts(host_network: HostNetwork) -> Iterator[list[SshHost]]:
    """The namespace hosts, fresh again after the test (see HostNetwork.reset)."""
    yield host_network.hosts
    host_network.reset()


@pytest.fixture
def loopback_host(host_network: HostNetwork) -> Iterator[SshHost]:
    assert host_network.loopback is not None
    yield host_network.loopback
    host_network.reset()


@pytest.fixture(scope="session")
def docker_engine() -> Iterator[DockerEngine]:
    """The checkout's private dockerd, for the Docker path of the bootstrap."""
    with session_docker_engine("the Docker bootstrap tests") as engine:
        yield engine
