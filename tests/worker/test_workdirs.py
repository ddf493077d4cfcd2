"""Work directories recycled between attempts: each attempt starts in an empty directory, a
finished attempt's directory and contents go once released, and released directories are reused
instead of new ones being made."""

from __future__ import annotations

import os
from pathlib import Path

from iris.cluster.worker.workdirs import SPARES_DIRNAME, Workdirs
from iris.time import wait_until


def _entries(path: Path) -> list[str]:
    return sorted(os.listdir(path))


def test_workdirs_create_without_spares_makes_an_empty_directory(tmp_path: Path) -> None:
    workdirs = Workdirs(tmp_path / "tasks")
    workdirs.create(tmp_path / "tasks" / "a.a0")
    assert _entries(tmp_path / "tasks" / "a.a0") == []


def test_workdirs_released_empty_directory_becomes_the_next_attempts(tmp_path: Path) -> None:
    workdirs = Workdirs(tmp_path / "tasks")
    first = tmp_path / "tasks" / "a.a0"
    workdirs.create(first)
    inode = first.stat().st_ino
    workdirs.release(first)
    assert not first.exists()
    second = tmp_path / "tasks" / "b.a0"
    workdirs.create(second)
    assert second.stat().st_ino == inode
    assert workdirs.spares == 0


def test_workdirs_released_directory_with_outputs_is_emptied_before_reuse(tmp_path: Path) -> None:
    workdirs = Workdirs(tmp_path / "tasks")
    first = tmp_path / "tasks" / "a.a0"
    workdirs.create(first)
    (first / "out.txt").write_text("result")
    nested = first / "checkpoints" / "step-1"
    nested.mkdir(parents=True)
    (nested / "weights.bin").write_bytes(b"\0" * 1024)
    os.symlink("/etc", first / "link-to-etc")
    workdirs.release(first)
    wait_until(lambda: workdirs.spares == 1, 10, 0.01, "the released directory to be emptied and kept")
    assert not first.exists()
    assert os.path.isdir("/etc")  # a symlink's target is never followed
    second = tmp_path / "tasks" / "b.a0"
    workdirs.create(second)
    assert _entries(second) == []


def test_workdirs_release_of_a_directory_already_gone_keeps_nothing(tmp_path: Path) -> None:
    workdirs = Workdirs(tmp_path / "tasks")
    workdirs.release(tmp_path / "tasks" / "never-made.a0")
    assert workdirs.spares == 0


def test_workdirs_keep_at_most_max_spares_and_remove_the_rest(tmp_path: Path) -> None:
    workdirs = Workdirs(tmp_path / "tasks", max_spares=2)
    paths = [tmp_path / "tasks" / f"t{i}.a0" for i in range(4)]
    for path in paths:
        workdirs.create(path)
    for path in paths:
        workdirs.release(path)
    assert workdirs.spares == 2
    assert not any(path.exists() for path in paths)
    assert len(_entries(tmp_path / "tasks" / SPARES_DIRNAME)) == 2


def test_workdirs_create_over_an_existing_directory_uses_it_and_keeps_the_spare(tmp_path: Path) -> None:
    workdirs = Workdirs(tmp_path / "tasks")
    spare = tmp_path / "tasks" / "old.a0"
    workdirs.create(spare)
    workdirs.release(spare)
    leftover = tmp_path / "tasks" / "a.a0"
    leftover.mkdir()
    (leftover / "kept.txt").write_text("left by an earlier worker")
    workdirs.create(leftover)
    assert _entries(leftover) == ["kept.txt"]
    assert workdirs.spares == 1


def test_workdirs_spares_left_by_a_previous_worker_are_reused(tmp_path: Path) -> None:
    before = Workdirs(tmp_path / "tasks")
    for name in ("a.a0", "b.a0"):
        before.create(tmp_path / "tasks" / name)
    for name in ("a.a0", "b.a0"):
        before.release(tmp_path / "tasks" / name)
    # A task the previous worker left running wrote into a kept directory after it was kept.
    [written, _] = sorted((tmp_path / "tasks" / SPARES_DIRNAME).iterdir())
    (written / "stray.txt").write_text("late output")

    after = Workdirs(tmp_path / "tasks")
    wait_until(lambda: after.spares == 2, 10, 0.01, "the previous worker's spares to be taken over")
    for name in ("c.a0", "d.a0"):
        after.create(tmp_path / "tasks" / name)
        assert _entries(tmp_path / "tasks" / name) == []
    assert _entries(tmp_path / "tasks" / SPARES_DIRNAME) == []
