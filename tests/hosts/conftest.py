"""Fixtures for tests that reach hosts over SSH: a session-wide HostNetwork (see netns.py).

Outside CI a machine that cannot create the hosts skips these tests; under CI=true it fails them.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from netns import HostNetwork, HostsUnavailable, SshHost

NAMESPACE_HOSTS = 3


@pytest.fixture(scope="session")
def host_network(tmp_path_factory: pytest.TempPathFactory) -> Iterator[HostNetwork]:
    network = HostNetwork(tmp_path_factory.mktemp("hosts"), NAMESPACE_HOSTS)
    try:
        network.start()
    except HostsUnavailable as exc:
        if os.environ.get("CI") == "true":
            pytest.fail(f"cannot create the SSH test hosts: {exc}")
        pytest.skip(f"cannot create the SSH test hosts: {exc}")
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
