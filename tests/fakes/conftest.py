"""A fake Kubernetes cluster without a kubelet (Pods are scheduled, never run) for the API tests."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from fakes.kubernetes.cluster import FakeKubernetes


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[FakeKubernetes]:
    with FakeKubernetes(tmp_path / "cluster") as fake:
        yield fake


@pytest.fixture
def api_client(cluster: FakeKubernetes):
    from kubernetes import config

    client = config.new_client_from_config(config_file=str(cluster.kubeconfig))
    yield client
    client.close()
