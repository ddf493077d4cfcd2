"""`iris cluster start` on the fake CKS cluster when the controller cannot come up: each early
failure of seed 001 section 9 on the controller's path ends the command within seconds, exit 1,
with the reason on the terminal, instead of after the 2400 s Deployment timeout. No controller
runs in these tests, so they are fast."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import yaml
from click.testing import CliRunner, Result
from engines import DockerEngine
from fakes.kubernetes.cluster import FakeKubernetes

from iris.cli.app import iris
from iris.cluster.platform.coreweave import CoreweavePlatform
from iris.config import config_to_dict

# Far under the 2400 s default: only early detection ends a start this soon (the bound leaves room
# for a loaded machine).
EARLY_S = 60.0


def _start(cluster: FakeKubernetes, config: Any, tmp_path: Path, **env: str) -> tuple[Result, float]:
    """`iris --config F cluster start`, run in this process: the same command line, without paying
    for a fresh interpreter and imports on a loaded machine."""
    path = tmp_path / "cluster.yaml"
    path.write_text(yaml.safe_dump(config_to_dict(config)))
    began = time.monotonic()
    command = ["--config", str(path), "cluster", "start"]
    started = CliRunner().invoke(iris, command, env={**cluster.env(), **env})
    seconds = time.monotonic() - began
    # What the failed start left for the operator to inspect goes, so the Pod stops crash-looping.
    CoreweavePlatform(config).delete_controller_resources()
    return started, seconds


def _controller(image: str) -> dict[str, Any]:
    return {"coreweave": {"scale_group": "cpu", "image": image}}


def test_cluster_start_with_a_bad_controller_image_fails_at_once_with_the_pull_error(
    kube_cluster: FakeKubernetes, coreweave_config, tmp_path: Path
) -> None:
    config = coreweave_config(kube_cluster, controller=_controller("iris-test-missing:controller"))

    started, seconds = _start(kube_cluster, config, tmp_path)

    assert started.exit_code == 1, started.output
    assert "cannot pull image iris-test-missing:controller" in started.output
    assert seconds < EARLY_S


def test_cluster_start_without_the_object_storage_credentials_fails_before_creating_the_secret(
    kube_cluster: FakeKubernetes, coreweave_config, docker_engine: DockerEngine, tmp_path: Path
) -> None:
    config = coreweave_config(
        kube_cluster,
        controller=_controller(docker_engine.base_image),
        storage={"bundle_prefix": "s3://bucket/bundles"},
    )

    started, seconds = _start(kube_cluster, config, tmp_path, R2_ACCESS_KEY_ID="", R2_SECRET_ACCESS_KEY="")

    assert started.exit_code == 1, started.output
    assert "R2_ACCESS_KEY_ID and R2_SECRET_ACCESS_KEY are not set" in started.output
    assert seconds < EARLY_S


def test_cluster_start_with_a_crash_looping_controller_fails_with_its_last_log_lines(
    kube_cluster: FakeKubernetes, coreweave_config, docker_engine: DockerEngine, tmp_path: Path
) -> None:
    # The base image has no Iris: the controller command dies at once, again and again.
    config = coreweave_config(kube_cluster, controller=_controller(docker_engine.base_image))

    started, seconds = _start(kube_cluster, config, tmp_path)

    output = started.output
    assert started.exit_code == 1, output
    assert "the controller did not start" in output and "keeps crashing" in output
    # The container's own words: the image has no python to run the controller with.
    assert "exec python failed" in output.split("last log lines", 1)[1]
    assert seconds < EARLY_S
