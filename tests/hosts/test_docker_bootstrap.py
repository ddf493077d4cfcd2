"""The production bootstrap path: a worker started over SSH from the worker image with Docker,
driving the host's engine through the mounted socket (`--runtime docker`)."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from pathlib import Path

import docker
import pytest
from engines import DockerEngine, build_test_image
from netns import SshHost

from iris.client import IrisClient
from iris.cluster.platform.bootstrap import (
    WorkerPlacement,
    container_name,
    list_markers_script,
    local_storage_dirs,
    parse_markers,
    start_script,
    stop_worker_script,
    worker_daemon,
    worker_daemon_name,
)
from iris.cluster.platform.remote_exec import DirectSshRemoteExec, RemoteExecWorkerBase
from iris.cluster.types import Entrypoint
from iris.rpc import cluster_pb2 as pb
from iris.rpc import config_pb2
from iris.time import Duration, wait_until


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture
def controller_url(tmp_path: Path) -> Iterator[str]:
    from iris.cluster.controller.main import ControllerDaemon
    from iris.cluster.controller.settings import DaemonSettings

    daemon = ControllerDaemon(

        DaemonSettings.from_config(

            state_dir=tmp_path / "controller",

            bundle_prefix=f"file://{tmp_path}/bundles",

            host="127.0.0.1",

            port=0,

        )

    )
    daemon.start_in_thread()
    try:
        yield daemon.url
    finally:
        daemon.stop()


def test_worker_bootstrapped_from_image_with_docker_runs_a_task_container(
    loopback_host: SshHost,
    ssh_key: Path,
    docker_engine: DockerEngine,
    controller_url: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("DOCKER_HOST", docker_engine.url)  # for `iris build`
    worker_image = build_test_image("worker-image", docker_engine.base_image, "iris-test-worker:latest")
    task_image = build_test_image("task-image", docker_engine.base_image, "iris-test-task:latest")
    port = _free_port()
    bootstrap = config_pb2.BootstrapConfig(
        controller_address=controller_url,
        worker_port=port,
        # A directory the engine sees at the same path as the host: task work dirs are mounted from it.
        cache_dir=str(tmp_path / "cache"),
        runtime="docker",
        docker_image=worker_image,
        task_image=task_image,
        env_vars={"DOCKER_HOST": docker_engine.url},
    )
    placement = WorkerPlacement("docker-w0", "slice-d", "cpu", "127.0.0.1")
    remote = DirectSshRemoteExec(loopback_host.address, "root", str(ssh_key), loopback_host.port)
    worker = RemoteExecWorkerBase("docker-w0", remote)
    engine = docker.DockerClient(base_url=docker_engine.url)
    try:
        daemon = worker_daemon(
            bootstrap, placement, storage_dirs=local_storage_dirs(f"file://{tmp_path}/bundles")
        )
        worker.bootstrap(start_script(daemon), timeout=Duration.from_seconds(180))
        container = engine.containers.get(container_name(worker_daemon_name("docker-w0")))
        with IrisClient.remote(controller_url, workspace=tmp_path) as client:
            [registered] = wait_until(client.list_workers, 30, 0.1, "the docker worker to register")
            job = client.submit(
                Entrypoint.from_command("python3", "-c", "import sys; print(sys.executable)"),
                name="in-container",
            )
            job.wait(timeout=120)
            status = job.status()
            lines = [entry.data for entry in job.logs()]
        [marker] = parse_markers(worker.run_command(list_markers_script()).stdout)
    finally:
        worker.bootstrap(stop_worker_script("docker-w0"))
    assert container.attrs["HostConfig"]["NetworkMode"] == "host"
    assert registered.worker_id == "docker-w0" and registered.metadata.runtime == "docker"
    assert status.state == pb.JOB_STATE_SUCCEEDED
    # The task image's interpreter: the command ran in a task container the worker created.
    assert lines == ["/opt/iris/bin/python3"]
    assert marker["mode"] == "docker"
    assert [c.name for c in engine.containers.list(all=True, filters={"name": container.name})] == []
    engine.close()
