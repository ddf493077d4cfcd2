"""Fixtures for the CoreWeave platform tests: the fake Kubernetes API server whose kubelet runs
Pods on the session's private dockerd (engines.py of the runtime tests), and a config for it."""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "runtime"))

from engines import DockerEngine, session_docker_engine  # noqa: E402
from fakes.kubernetes.cluster import FakeKubernetes  # noqa: E402

from iris.config import apply_defaults, load_config_from_dict  # noqa: E402
from iris.rpc import config_pb2  # noqa: E402


@pytest.fixture(scope="session")
def docker_engine() -> Iterator[DockerEngine]:
    """The session's private dockerd, on which the fake cluster's kubelet runs Pods."""
    with session_docker_engine("the CoreWeave tests") as engine:
        yield engine


@pytest.fixture(scope="module")
def kube_cluster(docker_engine: DockerEngine, tmp_path_factory: pytest.TempPathFactory) -> Iterator[FakeKubernetes]:
    with FakeKubernetes(tmp_path_factory.mktemp("coreweave"), docker_url=docker_engine.url) as cluster:
        yield cluster


CoreweaveConfig = Callable[..., config_pb2.IrisClusterConfig]


@pytest.fixture
def coreweave_config(tmp_path: Path) -> CoreweaveConfig:
    """A resolved CoreWeave cluster config pointed at `cluster`, with overrides merged in."""

    def make(cluster: FakeKubernetes, **overrides: Any) -> config_pb2.IrisClusterConfig:
        data: dict[str, Any] = {
            "name": "cw-test",
            "platform": {
                "label_prefix": "iris",
                "coreweave": {
                    "region": "US-TEST-01A",
                    "namespace": f"iris-{tmp_path.name[-12:].lower().replace('_', '-').strip('-')}",
                    "kubeconfig_path": str(cluster.kubeconfig),
                    "mount_failure_grace": "2s",
                    "pod_ready_timeout": "60s",
                },
            },
            "storage": {"bundle_prefix": f"file://{tmp_path / 'bundles'}"},
            "defaults": {"bootstrap": {"worker_port": 0, "cache_dir": str(tmp_path / "cache")}},
            "scale_groups": {
                "cpu": {"slice_template": {"num_vms": 1, "coreweave": {"instance_type": "cd-gp-i64-erapids"}}},
            },
        }
        for key, value in overrides.items():
            data[key] = value
        return apply_defaults(load_config_from_dict(data))

    return make
