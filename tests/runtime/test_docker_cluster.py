"""End to end through Docker: a controller, a worker started with `--runtime docker`, and a bundle-based
Python callable that runs in a container of the image Dockerfile.task builds."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from engines import DockerEngine

from iris.client import IrisClient
from iris.cluster.types import Entrypoint
from iris.rpc import cluster_pb2 as pb
from iris.time import wait_until


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    """A user workspace whose module only exists in the bundle."""
    ws = tmp_path / "workspace"
    ws.mkdir()
    (ws / "where_am_i.py").write_text(
        "import os, sys\n\n\n"
        "def triple_and_describe(x):\n"
        "    return {'value': 3 * x, 'python': sys.executable, 'cwd': os.getcwd(),\n"
        "            'data': open('data.txt').read().strip()}\n"
    )
    (ws / "data.txt").write_text("payload from the workspace\n")
    return ws


def test_docker_worker_runs_bundle_callable_in_task_image_container(
    tmp_path: Path, workspace: Path, docker_engine: DockerEngine, task_image: str
) -> None:
    from iris.cluster.controller.main import ControllerDaemon
    from iris.cluster.controller.settings import DaemonSettings

    config = tmp_path / "cluster.yaml"
    config.write_text(
        f"name: docker-e2e\nplatform:\n  local: {{}}\ndefaults:\n  bootstrap:\n    task_image: {task_image}\n"
    )
    daemon = ControllerDaemon(
        DaemonSettings.from_config(
            state_dir=tmp_path / "state",
            bundle_prefix=f"file://{tmp_path}/bundles",
            host="127.0.0.1",
            port=0,
        )
    )
    daemon.start_in_thread()
    worker_log = tmp_path / "worker.log"
    with open(worker_log, "wb") as log:
        worker = subprocess.Popen(
            [sys.executable, "-m", "iris.cluster.worker.main", "serve", "--config", str(config),
             "--controller-address", daemon.url, "--runtime", "docker", "--host", "127.0.0.1", "--port", "0",
             "--cache-dir", str(tmp_path / "cache"), "--worker-id", "docker-w0"],
            stdout=log,
            stderr=subprocess.STDOUT,
            env={**os.environ, "DOCKER_HOST": docker_engine.url},
        )
    sys.path.insert(0, str(workspace))
    try:
        import where_am_i

        with IrisClient.remote(daemon.url, workspace=workspace) as client:
            [registered] = wait_until(client.list_workers, 60, 0.1, "the docker worker to register")
            job = client.submit(Entrypoint.from_callable(where_am_i.triple_and_describe, 14), name="in-docker")
            result = job.result(timeout=120)
            state = job.status().state
    except BaseException:
        print(worker_log.read_text(errors="replace"))
        raise
    finally:
        sys.path.remove(str(workspace))
        sys.modules.pop("where_am_i", None)
        worker.terminate()
        worker.wait(30)
        daemon.stop()

    assert registered.metadata.runtime == "docker"
    assert state == pb.JOB_STATE_SUCCEEDED
    assert result["value"] == 42
    assert result["data"] == "payload from the workspace"
    # The task image's interpreter, not this test's: the callable ran inside the container.
    assert result["python"] == "/opt/iris/bin/python3"
    assert result["cwd"].startswith(str(tmp_path / "cache"))
