"""Building and caching the compiled task launcher; how tasks run through it is tested with the
process runtime (test_process_runtime.py)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from iris.cluster.runtime import task_launcher

needs_cc = pytest.mark.skipif(shutil.which("cc") is None, reason="no C compiler")


@needs_cc
def test_task_launcher_host_with_compiler_has_a_launcher() -> None:
    launcher = task_launcher.launcher()

    assert launcher is not None
    assert Path(launcher).parent == task_launcher.default_cache_dir()


@needs_cc
def test_task_launcher_built_launcher_runs_command_with_its_arguments(tmp_path: Path) -> None:
    launcher = task_launcher.build_launcher(tmp_path / "cache")
    assert launcher is not None

    code = "import sys; print(sys.orig_argv[0], sys.argv[1:])"
    done = subprocess.run(
        [launcher, str(os.getpid()), sys.executable, "named-zero", "-c", code, "one"],
        capture_output=True,
        text=True,
    )

    assert (done.returncode, done.stdout) == (0, "named-zero ['one']\n")


@needs_cc
def test_task_launcher_file_that_cannot_execute_exits_127_with_message(tmp_path: Path) -> None:
    launcher = task_launcher.build_launcher(tmp_path / "cache")
    assert launcher is not None

    done = subprocess.run(
        [launcher, str(os.getpid()), str(tmp_path / "missing"), "missing"], capture_output=True, text=True
    )

    assert done.returncode == 127
    assert done.stderr == f"task-launcher: cannot execute {tmp_path / 'missing'}\n"


@needs_cc
def test_task_launcher_second_build_reuses_the_first(tmp_path: Path) -> None:
    first = task_launcher.build_launcher(tmp_path)
    assert first is not None
    inode = os.stat(first).st_ino

    second = task_launcher.build_launcher(tmp_path)

    assert second == first
    assert os.stat(second).st_ino == inode


def test_task_launcher_name_changes_with_the_source() -> None:
    source = task_launcher.SOURCE.read_bytes()

    assert task_launcher.launcher_name(source) == task_launcher.launcher_name(source)
    assert task_launcher.launcher_name(source) != task_launcher.launcher_name(source + b"\n")


@needs_cc
def test_task_launcher_concurrent_builds_all_get_the_finished_launcher(tmp_path: Path) -> None:
    results: list[str | None] = []
    def build() -> None:
        results.append(task_launcher.build_launcher(tmp_path))

    threads = [threading.Thread(target=build) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    expected = str(tmp_path / task_launcher.launcher_name(task_launcher.SOURCE.read_bytes()))
    assert results == [expected] * 4
    # No scratch file of any build is left behind.
    assert os.listdir(tmp_path) == [Path(expected).name]


def test_task_launcher_without_compiler_is_none(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))

    assert task_launcher.build_launcher(tmp_path / "cache") is None


def _fake_compiler(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, script: str) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "cc").write_text(f"#!/bin/sh\n{script}\n")
    (bin_dir / "cc").chmod(0o755)
    monkeypatch.setenv("PATH", str(bin_dir))


def test_task_launcher_compiler_that_fails_is_none_and_leaves_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _fake_compiler(tmp_path, monkeypatch, "exit 1")

    assert task_launcher.build_launcher(tmp_path / "cache") is None
    assert os.listdir(tmp_path / "cache") == []


def test_task_launcher_build_that_ignores_the_parent_check_is_rejected(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A "launcher" that runs the command whoever its parent is would let a task outlive its worker.
    _fake_compiler(
        tmp_path,
        monkeypatch,
        'while [ $# -gt 0 ]; do [ "$1" = -o ] && out=$2; shift; done\n'
        'printf \'#!/bin/sh\\nshift 2\\nexec "$@"\\n\' > "$out" && chmod +x "$out"',
    )

    assert task_launcher.build_launcher(tmp_path / "cache") is None
    assert os.listdir(tmp_path / "cache") == []


def test_task_launcher_first_uses_together_build_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    builds: list[Path] = []
    release = threading.Event()

    def slow_build(cache_dir: Path) -> str | None:
        builds.append(cache_dir)
        release.wait(timeout=10)
        return None

    monkeypatch.setattr(task_launcher, "build_launcher", slow_build)
    task_launcher._cached_launcher.cache_clear()
    try:
        threads = [threading.Thread(target=task_launcher.launcher) for _ in range(4)]
        for thread in threads:
            thread.start()
        release.set()
        for thread in threads:
            thread.join()
    finally:
        task_launcher._cached_launcher.cache_clear()

    assert len(builds) == 1
