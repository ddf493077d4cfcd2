"""What the bootstrap scripts ask of a host, checked on the script text (the runs over SSH are in
tests/hosts)."""

from __future__ import annotations

from iris.cluster.platform.bootstrap import controller_daemon, local_storage_dirs, start_script


def test_controller_from_image_mounts_the_file_storage_it_writes_bundles_and_logs_to() -> None:
    storage = local_storage_dirs("file:///shared/iris/bundles", "file:///shared/iris/logs", "s3://bucket/iris")
    daemon = controller_daemon("name: c\n", 10000, "10.0.0.1", image="iris-controller:latest", storage_dirs=storage)

    script = start_script(daemon)

    [docker_run] = [line for line in script.splitlines() if line.startswith("docker run")]
    for directory in ("/shared/iris/bundles", "/shared/iris/logs"):
        assert f"-v {directory}:{directory}" in docker_run
    assert "bucket" not in docker_run
