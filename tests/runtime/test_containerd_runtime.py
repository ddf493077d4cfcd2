"""ContainerdRuntime specifics, checked through the CRI API itself: one labelled sandbox per attempt
on the node's network, limits, TPU devices, cleanup of container and sandbox, pulls and an
unreachable endpoint."""

from __future__ import annotations

import socket
from pathlib import Path

import grpc
import pytest
from cri_api.v1 import api_pb2 as cri
from cri_api.v1 import api_pb2_grpc as cri_grpc
from engines import ContainerdEngine
from runtime_support import CreateContainer, lines, py, wait_for_line

from iris.cluster.runtime.types import ContainerError, ContainerPhase


@pytest.fixture
def runtime_kind() -> str:
    return "containerd"


@pytest.fixture
def cri_api(containerd_engine: ContainerdEngine):
    channel = grpc.insecure_channel(containerd_engine.endpoint)
    yield cri_grpc.RuntimeServiceStub(channel)
    channel.close()


def _sandboxes(cri_api, task_id: str) -> list:
    selector = cri.PodSandboxFilter(label_selector={"iris.task_id": task_id})
    return list(cri_api.ListPodSandbox(cri.ListPodSandboxRequest(filter=selector)).items)


def _containers(cri_api, task_id: str) -> list:
    selector = cri.ContainerFilter(label_selector={"iris.task_id": task_id})
    return list(cri_api.ListContainers(cri.ListContainersRequest(filter=selector)).containers)


def test_containerd_attempt_gets_one_labelled_sandbox_on_the_node_network(
    create_container: CreateContainer, cri_api
) -> None:
    handle = create_container(py("import socket; print(socket.gethostname())"))
    handle.run()
    handle.wait(timeout=30)

    [sandbox] = _sandboxes(cri_api, "/test-user/runtime-test/0")
    status = cri_api.PodSandboxStatus(cri.PodSandboxStatusRequest(pod_sandbox_id=sandbox.id)).status

    assert status.labels["iris.managed"] == "true"
    assert status.labels["iris.job_id"] == "/test-user/runtime-test"
    assert status.linux.namespaces.options.network == cri.NODE
    # The command sees the host's own name: a host-network sandbox sets none.
    assert lines(handle, "stdout") == [socket.gethostname()]


def test_containerd_container_gets_memory_and_cpu_limits(create_container: CreateContainer, cri_api) -> None:
    handle = create_container(py("pass"), memory_bytes=256 * 2**20, cpu_millicores=1500)

    [container] = _containers(cri_api, "/test-user/runtime-test/0")
    resources = cri_api.ContainerStatus(cri.ContainerStatusRequest(container_id=container.id)).status.resources.linux

    assert container.labels["iris.managed"] == "true"
    assert resources.memory_limit_in_bytes == 256 * 2**20
    assert resources.cpu_quota == 150_000 and resources.cpu_period == 100_000
    assert handle.status().phase == ContainerPhase.CREATED


def test_containerd_cleanup_removes_container_and_sandbox(create_container: CreateContainer, cri_api) -> None:
    handle = create_container(py("import time; print('ready', flush=True); time.sleep(600)"))
    handle.run()
    wait_for_line(handle, "ready")
    assert len(_sandboxes(cri_api, "/test-user/runtime-test/0")) == 1

    handle.cleanup()

    assert _sandboxes(cri_api, "/test-user/runtime-test/0") == []
    assert _containers(cri_api, "/test-user/runtime-test/0") == []


def test_containerd_tpu_task_on_a_host_without_tpu_fails_naming_the_device_and_leaves_nothing(
    create_container: CreateContainer, cri_api
) -> None:
    if Path("/dev/vfio").exists():
        pytest.skip("this host has /dev/vfio")

    with pytest.raises(ContainerError, match="/dev/vfio"):
        create_container(py("pass"), tpu_variant="v5litepod-16")

    assert _sandboxes(cri_api, "/test-user/runtime-test/0") == []


def test_containerd_image_missing_and_unpullable_raises_container_error(create_container: CreateContainer) -> None:
    # A registry on a closed local port: the pull is attempted and fails without leaving the host.
    with pytest.raises(ContainerError, match=r"cannot pull image 127\.0\.0\.1:9/iris/absent:1"):
        create_container(py("pass"), image="127.0.0.1:9/iris/absent:1")


def test_containerd_runtime_unreachable_endpoint_raises_container_error(tmp_path: Path) -> None:
    from iris.cluster.runtime.containerd import ContainerdRuntime

    with pytest.raises(ContainerError, match="cannot reach containerd"):
        ContainerdRuntime(tmp_path / "state", endpoint=str(tmp_path / "no-containerd.sock"))
