"""Fixtures for the ContainerRuntime contract tests.

Tests use only `runtime`, `container_image` and `create_container`, so other runtimes (docker,
containerd, kubernetes) can be added by parametrizing these fixtures.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from iris.cluster.runtime.process import ProcessRuntime
from iris.cluster.runtime.types import ContainerConfig, ContainerHandle, ContainerRuntime, managed_labels

TEST_TASK_ID = "/test-user/runtime-test/0"
TEST_JOB_ID = "/test-user/runtime-test"

CreateContainer = Callable[..., ContainerHandle]


@pytest.fixture
def runtime(tmp_path: Path) -> Iterator[ContainerRuntime]:
    yield ProcessRuntime(tmp_path / "state")


@pytest.fixture
def container_image() -> str:
    """Image for image-based runtimes; it must provide python3 and bash. Unused by ProcessRuntime."""
    return ""


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
        config = ContainerConfig(
            command=command,
            workdir=workdir,
            task_id=TEST_TASK_ID,
            attempt_id=attempt_id,
            labels=managed_labels(TEST_TASK_ID, TEST_JOB_ID, attempt_id),
            image=container_image,
            **overrides,
        )
        handle = runtime.create_container(config)
        handles.append(handle)
        return handle

    yield create
    for handle in handles:
        handle.cleanup()
