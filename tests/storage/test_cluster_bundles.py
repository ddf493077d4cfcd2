"""A job's workspace travels through an object store: the controller writes the bundle to S3 or
GCS (emulated) and a worker process downloads it from there."""

from __future__ import annotations

import subprocess
import sys

import pytest

from iris import storage
from iris.client import IrisClient
from iris.cluster.controller.main import ControllerDaemon
from iris.cluster.controller.settings import DaemonSettings
from iris.cluster.types import Entrypoint
from iris.time import wait_until


@pytest.fixture(params=["s3", "gcs"])
def object_store_prefix(request) -> str:
    fixture = "s3_server" if request.param == "s3" else "gcs_server"
    return f"{request.getfixturevalue(fixture)}/cluster-{request.node.name.split('[')[-1].rstrip(']')}"


def test_cluster_job_reads_workspace_shipped_through_object_store(object_store_prefix, tmp_path):
    workspace = tmp_path / "workspace"
    workspace.mkdir()
    (workspace / "message.txt").write_text("shipped through the object store\n")
    daemon = ControllerDaemon(
        DaemonSettings.from_config(
            state_dir=tmp_path / "state",
            bundle_prefix=object_store_prefix,
            host="127.0.0.1",
            port=0,
        )
    )
    daemon.start_in_thread()
    # The worker inherits the emulator endpoint and credentials the fixture put in the environment.
    worker = subprocess.Popen(
        [sys.executable, "-m", "iris.cluster.worker.main", "serve", "--controller-address", daemon.url,
         "--host", "127.0.0.1", "--port", "0", "--cache-dir", str(tmp_path / "cache"), "--worker-id", "w0"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        with IrisClient.remote(daemon.url, workspace=workspace) as client:
            wait_until(lambda: client.list_workers(), 30, 0.05, "the worker to register")
            job = client.submit(Entrypoint.from_command("cat", "message.txt"), name="reader")
            job.wait(timeout=60)
            assert [line.data for line in job.logs()] == ["shipped through the object store"]
        bundles = [uri for uri in _list(object_store_prefix) if uri.endswith(".zip")]
        assert len(bundles) == 1
        assert storage.exists(bundles[0])
    finally:
        worker.terminate()
        worker.wait(15)
        daemon.stop()


def _list(prefix: str) -> list[str]:
    fs, path = storage.filesystem_for(prefix)
    scheme = prefix.split("://", 1)[0]
    return [f"{scheme}://{entry}" for entry in fs.ls(path, detail=False)]
