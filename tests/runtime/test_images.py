"""`iris build`: the four Dockerfiles build here with their internet steps off (and with them on,
against a local stand-in for the release downloads), the images run what they are for, and
`iris build push` names images for each registry and fails clearly when the registry cannot be
reached."""

from __future__ import annotations

import functools
import http.server
import io
import platform
import re
import socket
import tarfile
import threading
from collections.abc import Iterator
from pathlib import Path

import docker
import pytest
from click.testing import CliRunner
from engines import REPO, DockerEngine, build_test_image, iris_build, offline_build

from iris.cli.app import iris


def _run(image: str, command: list[str]) -> str:
    client = docker.from_env()
    try:
        return client.containers.run(image, command, remove=True, network_mode="host").decode()
    finally:
        client.close()


def test_build_task_image_runs_the_callable_runner_with_iris_installed(task_image: str) -> None:
    output = _run(
        task_image,
        ["python3", "-c", "import sys, cloudpickle, iris.cluster.worker.callable_runner; print(sys.executable)"],
    )

    assert output.strip() == "/opt/iris/bin/python3"
    assert _run(task_image, ["iris", "--version"]).startswith("iris, version")


def test_build_worker_image_offline_answers_the_worker_entry_points_help(docker_engine: DockerEngine) -> None:
    # The session's one offline build of the worker image (the hosts' and runtime tests' too).
    result = offline_build("worker-image", docker_engine.base_image, "iris-test-worker:latest")
    assert result.returncode == 0, f"{result.stdout}\n{result.stderr}"
    assert "INSTALL_CRICTL=0" in result.stdout and "INSTALL_DOCKER_CLI=0" in result.stdout
    assert re.search(r"^Built iris-test-worker:latest", result.stdout, re.MULTILINE)

    help_text = _run("iris-test-worker:latest", ["python", "-m", "iris.cluster.worker.main", "serve", "--help"])

    assert "Register with the controller and run the tasks it sends." in help_text
    assert "--runtime" in help_text
    # One image for every runtime: the docker SDK, containerd's CRI stubs and the kubernetes client.
    assert _run("iris-test-worker:latest", ["python", "-c", "import docker, cri_api.v1.api_pb2, kubernetes; print('ok')"]) == "ok\n"


@pytest.fixture
def release_mirror(tmp_path: Path) -> Iterator[str]:
    """A local stand-in for the docker CLI, crictl and kubectl release downloads, each a tiny script."""
    root = tmp_path / "mirror"
    machine = platform.machine()
    arch = "arm64" if machine == "aarch64" else "amd64"
    _tarball(root / machine / "docker-27.5.1.tgz", "docker/docker", "echo docker-from-the-mirror")
    _tarball(root / "v1.32.0" / f"crictl-v1.32.0-linux-{arch}.tar.gz", "crictl", "echo crictl-from-the-mirror")
    kubectl = root / "v1.32.0" / "bin" / "linux" / arch / "kubectl"
    kubectl.parent.mkdir(parents=True)
    kubectl.write_text("#!/bin/sh\necho kubectl-from-the-mirror\n")
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(root))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    thread.join()


def _tarball(path: Path, member: str, script: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    data = f"#!/bin/sh\n{script}\n".encode()
    with tarfile.open(path, "w:gz") as tar:
        info = tarfile.TarInfo(member)
        info.size, info.mode = len(data), 0o755
        tar.addfile(info, io.BytesIO(data))


def test_build_worker_image_internet_steps_install_docker_cli_and_crictl(
    docker_engine: DockerEngine, release_mirror: str
) -> None:
    image = build_test_image(
        "worker-image",
        docker_engine.base_image,
        "iris-test-worker-online:latest",
        "--build-arg", "INSTALL_DOCKER_CLI=1", "--build-arg", f"DOCKER_CLI_URL={release_mirror}",
        "--build-arg", "INSTALL_CRICTL=1", "--build-arg", f"CRICTL_URL={release_mirror}",
        "--network", "host",
    )

    assert _run(image, ["docker"]) == "docker-from-the-mirror\n"
    assert _run(image, ["crictl"]) == "crictl-from-the-mirror\n"


def test_build_coreweave_controller_image_internet_step_installs_kubectl(
    docker_engine: DockerEngine, release_mirror: str
) -> None:
    image = build_test_image(
        "controller-image",
        docker_engine.base_image,
        "iris-test-controller-coreweave-online:latest",
        "--dockerfile", str(REPO / "Dockerfile.controller.coreweave"),
        "--build-arg", "INSTALL_KUBECTL=1", "--build-arg", f"KUBECTL_URL={release_mirror}",
        "--network", "host",
    )

    assert _run(image, ["kubectl"]) == "kubectl-from-the-mirror\n"


@pytest.mark.parametrize("dockerfile", ["Dockerfile.controller", "Dockerfile.controller.coreweave"])
def test_build_controller_image_answers_the_controller_entry_points_help(
    docker_engine: DockerEngine, dockerfile: str
) -> None:
    # iris-test-controller[-coreweave]:latest: the tags other tests build these images under, so
    # that the session builds each once (see offline_build).
    tag = f"iris-test-{dockerfile.lower().removeprefix('dockerfile.').replace('.', '-')}:latest"
    image = build_test_image(
        "controller-image", docker_engine.base_image, tag, "--dockerfile", str(REPO / dockerfile)
    )

    help_text = _run(image, ["python", "-m", "iris.cluster.controller.main", "serve", "--help"])

    assert "--config" in help_text


def test_build_missing_dockerfile_fails_with_one_line(tmp_path) -> None:
    result = CliRunner().invoke(iris, ["build", "task-image", "--dockerfile", str(tmp_path / "Dockerfile.nope")])

    assert result.exit_code == 1
    assert result.output.strip().splitlines() == [f"Error: no Dockerfile at {tmp_path / 'Dockerfile.nope'}"]


# -- push ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["iris-worker:latest", "--registry", "ghcr"], "ghcr.io/marin-community/iris-worker:latest"),
        (
            ["iris-controller:v3", "--registry", "ghcr", "--image-name", "iris-controller-coreweave", "--org", "my-fork"],
            "ghcr.io/my-fork/iris-controller-coreweave:v3",
        ),
        (
            ["iris-task", "--registry", "gcp", "--project", "my-project", "--region", "europe-west4"],
            "europe-west4-docker.pkg.dev/my-project/iris/iris-task:latest",
        ),
        (
            ["localhost:5000/iris-worker:v1", "--registry", "gcp", "--project", "p", "--repository", "marin"],
            "us-central1-docker.pkg.dev/p/marin/iris-worker:v1",
        ),
        (["iris-worker:v1", "--registry", "registry.internal:5000"], "registry.internal:5000/iris-worker:v1"),
    ],
)
def test_build_push_dry_run_prints_the_remote_name(args: list[str], expected: str) -> None:
    result = CliRunner().invoke(iris, ["build", "push", *args, "--dry-run"])

    assert result.exit_code == 0, result.output
    assert result.output.strip() == expected


def test_build_push_gcp_without_project_is_a_usage_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CLOUDSDK_CORE_PROJECT", raising=False)
    monkeypatch.delenv("GOOGLE_CLOUD_PROJECT", raising=False)

    result = CliRunner().invoke(iris, ["build", "push", "iris-task", "--registry", "gcp", "--dry-run"])

    assert result.exit_code == 2
    assert "--registry gcp needs the GCP project" in result.output


def test_build_push_unreachable_registry_fails_with_one_clear_line(docker_engine: DockerEngine) -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        closed_port = probe.getsockname()[1]
    registry = f"127.0.0.1:{closed_port}"

    remote = f"{registry}/iris-test:{docker_engine.base_image.split(':')[1]}"

    result = iris_build(["push", docker_engine.base_image, "--registry", registry, "--image-name", "iris-test"])
    docker.from_env().api.remove_image(remote)

    assert result.returncode == 1
    [line] = result.stderr.strip().splitlines()
    assert line.startswith(f"Error: push to {remote} failed: ")
    assert "connection refused" in line
    assert f"Pushing {docker_engine.base_image} to {registry}/iris-test" in result.stdout

