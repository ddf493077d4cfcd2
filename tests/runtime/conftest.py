"""Fixtures for the ContainerRuntime tests.

Contract tests use only `runtime`, `make_runtime`, `container_image` and `create_container`, which
are parametrized over every runtime these machines can run: process, docker, containerd and
kubernetes. The image-based runtimes use private engines the session starts (see engines.py);
kubernetes runs its Pods on the fake API server whose kubelet uses the private Docker engine. A module of
runtime-specific tests pins the runtime by overriding `runtime_kind`.

Outside CI a missing engine skips the tests that need it; under CI=true it fails them.
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from engines import (
    ContainerdEngine,
    DockerEngine,
    EngineUnavailable,
    build_test_image,
    session_docker_engine,
    show_progress_on,
    start_containerd,
)
from fakes.kubernetes.cluster import FakeKubernetes

from iris.cluster.runtime.process import ProcessRuntime
from iris.cluster.runtime.types import ContainerConfig, ContainerHandle, ContainerRuntime, managed_labels

TEST_TASK_ID = "/test-user/runtime-test/0"
TEST_JOB_ID = "/test-user/runtime-test"
RUNTIME_KINDS = ("process", "docker", "containerd", "kubernetes")

CreateContainer = Callable[..., ContainerHandle]


def unavailable(reason: str) -> None:
    if os.environ.get("CI") == "true":
        pytest.fail(f"a component the runtime tests need is missing: {reason}")
    pytest.skip(reason)


@pytest.fixture(scope="session", autouse=True)
def _progress_on_terminal(request: pytest.FixtureRequest) -> None:
    """Engine starts and image builds take a while on a cold cache; say what is happening."""
    reporter = request.config.pluginmanager.get_plugin("terminalreporter")
    capture = request.config.pluginmanager.get_plugin("capturemanager")
    if reporter is None or capture is None:
        return

    def show(line: str) -> None:
        with capture.global_and_fixture_disabled():
            reporter.write_line(line)

    show_progress_on(show)


@pytest.fixture(scope="session")
def docker_engine() -> Iterator[DockerEngine]:
    """A private dockerd with the test base image; DOCKER_HOST points at it for the session."""
    with session_docker_engine("the runtime tests") as engine:
        yield engine


@pytest.fixture(scope="session")
def containerd_engine(docker_engine: DockerEngine) -> Iterator[ContainerdEngine]:
    try:
        engine = start_containerd(docker_engine)
    except EngineUnavailable as exc:
        unavailable(f"containerd: {exc}")
    yield engine
    engine.daemon.stop()


@pytest.fixture(scope="session")
def kubernetes_cluster(docker_engine: DockerEngine, tmp_path_factory: pytest.TempPathFactory) -> Iterator[FakeKubernetes]:
    """The fake API server with one roomy node whose kubelet runs Pods on the private dockerd."""
    with FakeKubernetes(tmp_path_factory.mktemp("kubernetes"), docker_url=docker_engine.url) as cluster:
        cluster.add_node("node-a", capacity={"cpu": "64", "memory": "256Gi", "pods": "110"})
        yield cluster


@pytest.fixture(scope="session")
def task_image(docker_engine: DockerEngine) -> str:
    """The image Dockerfile.task builds (internet steps off), on the test base image."""
    return build_test_image("task-image", docker_engine.base_image, "iris-test-task:latest")


@pytest.fixture(scope="session")
def worker_image(docker_engine: DockerEngine) -> str:
    """The image Dockerfile.worker builds (internet steps off), on the test base image."""
    return build_test_image("worker-image", docker_engine.base_image, "iris-test-worker:latest")


@pytest.fixture(params=RUNTIME_KINDS)
def runtime_kind(request: pytest.FixtureRequest) -> str:
    return request.param


@pytest.fixture
def make_runtime(runtime_kind: str, tmp_path: Path, request: pytest.FixtureRequest) -> Callable[[], ContainerRuntime]:
    """Builds a runtime of the kind under test; every call is a fresh instance (a "new worker")
    on the same host and state dir."""
    if runtime_kind == "process":
        return lambda: ProcessRuntime(tmp_path / "state")
    if runtime_kind == "docker":
        from iris.cluster.runtime.docker import DockerRuntime

        docker_engine: DockerEngine = request.getfixturevalue("docker_engine")
        return lambda: DockerRuntime(base_url=docker_engine.url)
    if runtime_kind == "containerd":
        from iris.cluster.runtime.containerd import ContainerdRuntime

        containerd_engine: ContainerdEngine = request.getfixturevalue("containerd_engine")
        return lambda: ContainerdRuntime(tmp_path / "state", endpoint=containerd_engine.endpoint)
    if runtime_kind == "kubernetes":
        from iris.cluster.runtime.kubernetes import KubernetesRuntime, KubernetesSettings

        cluster: FakeKubernetes = request.getfixturevalue("kubernetes_cluster")
        # The Pod's workdir containers run iris; outside a worker Pod the runtime is told which image.
        settings = KubernetesSettings(namespace="default", helper_image=request.getfixturevalue("task_image"))
        return lambda: KubernetesRuntime(settings, kubeconfig=str(cluster.kubeconfig))
    raise ValueError(f"unknown runtime kind {runtime_kind!r}")


@pytest.fixture
def runtime(make_runtime: Callable[[], ContainerRuntime]) -> Iterator[ContainerRuntime]:
    yield make_runtime()


@pytest.fixture
def container_image(runtime_kind: str, request: pytest.FixtureRequest) -> str:
    """Image for image-based runtimes; it provides python3, pip and bash. Unused by ProcessRuntime."""
    if runtime_kind == "process":
        return ""
    docker_engine: DockerEngine = request.getfixturevalue("docker_engine")
    return docker_engine.base_image


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    path = tmp_path / "workdir"
    path.mkdir()
    return path


@pytest.fixture
def create_container(
    runtime: ContainerRuntime, container_image: str, workdir: Path
) -> Iterator[CreateContainer]:
    """Create containers in `workdir`; every one is cleaned up after the test."""
    handles: list[ContainerHandle] = []
    attempts = itertools.count()

    def create(command: list[str], **overrides: Any) -> ContainerHandle:
        attempt_id = next(attempts)
        settings: dict[str, Any] = {"image": container_image, **overrides}
        config = ContainerConfig(
            command=command,
            workdir=workdir,
            task_id=TEST_TASK_ID,
            attempt_id=attempt_id,
            labels=managed_labels(TEST_TASK_ID, TEST_JOB_ID, attempt_id),
            **settings,
        )
        handle = runtime.create_container(config)
        handles.append(handle)
        return handle

    yield create
    for handle in handles:
        handle.cleanup()
