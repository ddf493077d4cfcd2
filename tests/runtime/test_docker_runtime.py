"""DockerRuntime specifics, checked on the engine itself: labels, limits, host network, the workdir
mount, seed 004's TPU flags, GPU requests, pulls and an unreachable engine."""

from __future__ import annotations

from pathlib import Path

import docker
import pytest
from engines import DockerEngine
from runtime_support import CreateContainer, lines, py

from iris.cluster.runtime.types import ContainerError, ContainerPhase


@pytest.fixture
def runtime_kind() -> str:
    return "docker"


@pytest.fixture
def engine(docker_engine: DockerEngine):
    client = docker.DockerClient(base_url=docker_engine.url)
    yield client.api
    client.close()


def test_docker_container_carries_labels_limits_host_network_and_workdir_mount(
    create_container: CreateContainer, engine, workdir: Path
) -> None:
    handle = create_container(py("pass"), memory_bytes=256 * 2**20, cpu_millicores=500)

    inspected = engine.inspect_container(handle.container_id)

    labels = inspected["Config"]["Labels"]
    assert labels["iris.managed"] == "true"
    assert labels["iris.task_id"] == "/test-user/runtime-test/0"
    assert labels["iris.job_id"] == "/test-user/runtime-test"
    host = inspected["HostConfig"]
    assert host["NetworkMode"] == "host"
    assert host["Memory"] == host["MemorySwap"] == 256 * 2**20
    assert host["NanoCpus"] == 500_000_000
    assert f"{workdir}:{workdir}:rw" in host["Binds"]
    assert inspected["Config"]["WorkingDir"] == str(workdir)


def test_docker_tpu_task_gets_vfio_shm_caps_memlock_and_tpu_env(create_container: CreateContainer, engine) -> None:
    handle = create_container(py("pass"), tpu_variant="v5litepod-16")

    inspected = engine.inspect_container(handle.container_id)

    host = inspected["HostConfig"]
    assert host["Devices"] == [{"PathOnHost": "/dev/vfio", "PathInContainer": "/dev/vfio", "CgroupPermissions": "rwm"}]
    assert host["ShmSize"] == 100 * 2**30
    assert host["CapAdd"] == ["SYS_RESOURCE"]
    assert host["Ulimits"] == [{"Name": "memlock", "Soft": 68719476736, "Hard": 68719476736}]
    assert {"JAX_PLATFORMS=tpu,cpu", "PJRT_DEVICE=TPU"} <= set(inspected["Config"]["Env"])


def test_docker_tpu_task_on_a_host_without_tpu_fails_naming_the_device(create_container: CreateContainer) -> None:
    handle = create_container(py("pass"), tpu_variant="v5litepod-16")
    if Path("/dev/vfio").exists():
        pytest.skip("this host has /dev/vfio")

    with pytest.raises(ContainerError, match="/dev/vfio"):
        handle.run()

    status = handle.status()
    assert status.phase == ContainerPhase.EXITED
    assert "/dev/vfio" in status.error


def test_docker_gpu_task_requests_that_many_gpus(create_container: CreateContainer, engine) -> None:
    handle = create_container(py("pass"), gpu_count=4)

    [request] = engine.inspect_container(handle.container_id)["HostConfig"]["DeviceRequests"]

    assert request["Count"] == 4
    assert request["Capabilities"] == [["gpu"]]


def test_docker_build_steps_leave_only_the_main_container(create_container: CreateContainer, engine) -> None:
    handle = create_container(py("print('ran')"), setup_commands=["echo one", "echo two"])

    handle.build()
    remaining = engine.containers(all=True, filters={"label": "iris.task_id=/test-user/runtime-test/0"})

    assert [c["Names"] for c in remaining] == [[f"/{handle.container_id}"]]
    assert lines(handle, "build") == ["$ echo one", "one", "$ echo two", "two"]


def test_docker_image_missing_and_unpullable_raises_container_error(create_container: CreateContainer) -> None:
    # A registry on a closed local port: the pull is attempted and fails without leaving the host.
    with pytest.raises(ContainerError, match=r"cannot pull image 127\.0\.0\.1:9/iris/absent:1"):
        create_container(py("pass"), image="127.0.0.1:9/iris/absent:1")


def test_docker_runtime_unreachable_engine_raises_container_error(tmp_path: Path) -> None:
    from iris.cluster.runtime.docker import DockerRuntime

    with pytest.raises(ContainerError, match="cannot reach the Docker engine"):
        DockerRuntime(base_url=f"unix://{tmp_path / 'no-docker.sock'}")
