"""Fixtures for CLI tests; the helpers they use live in cli_support.py."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from cli_support import IrisRunner, LocalClusterConfig, write_local_config


@pytest.fixture(scope="session")
def iris_home(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """HOME for every iris subprocess, so no test can touch the real ~/.iris.

    Every config sets controller.local.state_dir, so nothing may appear under $HOME/.iris either.
    """
    home = tmp_path_factory.mktemp("home")
    yield home
    assert not (home / ".iris").exists(), (
        f"an iris command wrote to ~/.iris: {list((home / '.iris').rglob('*'))}"
    )


@pytest.fixture
def iris(iris_home: Path, tmp_path: Path) -> IrisRunner:
    """Runs iris with tmp_path/work as the working directory (and so as the bundled workspace)."""
    workdir = tmp_path / "work"
    workdir.mkdir()
    return IrisRunner(iris_home, workdir)


@pytest.fixture
def local_config(tmp_path: Path, iris: IrisRunner) -> Iterator[LocalClusterConfig]:
    """A local cluster config, not started; whatever the test starts is stopped afterwards."""
    directory = tmp_path / "cluster"
    directory.mkdir()
    path, state_dir = write_local_config(directory, "cli-test")
    config = LocalClusterConfig("cli-test", path, state_dir, iris)
    yield config
    config.stop()


@pytest.fixture(scope="module")
def background_cluster(
    tmp_path_factory: pytest.TempPathFactory, iris_home: Path
) -> Iterator[LocalClusterConfig]:
    """One running local cluster shared by the tests of a module; stopped when the module is done."""
    directory = tmp_path_factory.mktemp("background-cluster")
    workdir = directory / "work"
    workdir.mkdir()
    path, state_dir = write_local_config(directory, "cli-shared")
    config = LocalClusterConfig("cli-shared", path, state_dir, IrisRunner(iris_home, workdir))
    try:
        config.start()
        yield config
    finally:
        config.stop()
