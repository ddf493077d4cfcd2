"""What the bootstrap scripts ask of a host, checked on the script text (the runs over SSH are in
tests/hosts)."""

from __future__ import annotations

from iris.cluster.platform.bootstrap import (
    WorkerPlacement,
    controller_daemon,
    local_storage_dirs,
    start_script,
    worker_daemon,
)
from iris.rpc import config_pb2


def test_controller_from_image_mounts_the_file_storage_it_writes_bundles_and_logs_to() -> None:
    storage = local_storage_dirs("file:///shared/iris/bundles", "file:///shared/iris/logs", "s3://bucket/iris")
    daemon = controller_daemon("name: c\n", 10000, "10.0.0.1", image="iris-controller:latest", storage_dirs=storage)

    script = start_script(daemon)

    [docker_run] = [line for line in script.splitlines() if line.startswith("docker run")]
    for directory in ("/shared/iris/bundles", "/shared/iris/logs"):
        assert f"-v {directory}:{directory}" in docker_run
    assert "bucket" not in docker_run


def test_worker_redeploy_pulls_its_image_even_when_the_host_has_that_tag() -> None:
    bootstrap = config_pb2.BootstrapConfig(
        controller_address="http://10.0.0.1:10000", docker_image="iris-worker:latest"
    )
    daemon = worker_daemon(bootstrap, WorkerPlacement("w0", "s", "tpu", "10.0.0.2"))

    first, redeploy = start_script(daemon), start_script(daemon, pull=True)

    # A first start uses an image already there; a redeploy pulls, failing with the reason if it cannot.
    assert "docker image inspect iris-worker:latest >/dev/null 2>&1 || { say pulling" in first
    [pull] = [line for line in redeploy.splitlines() if "docker pull" in line]
    assert pull.startswith(
        "{ say pulling iris-worker:latest; docker pull -q iris-worker:latest || fail 'could not pull"
    )
    assert "docker image inspect" not in redeploy
