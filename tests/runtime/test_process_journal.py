"""The process runtime's journal of containers, read as a later worker process reads it."""

from __future__ import annotations

from pathlib import Path

import pytest

from iris.cluster.runtime import process_journal
from iris.cluster.runtime.process_journal import ContainerJournal, open_containers


def test_journal_started_forked_and_ended_containers_leave_only_the_unended(tmp_path: Path) -> None:
    journal = ContainerJournal(tmp_path)
    journal.started("a")
    journal.forked("a", pid=11, create_time=1.5)
    journal.started("b")
    journal.started("c")
    journal.forked("c", pid=13, create_time=2.5)
    journal.ended("c")

    assert open_containers(journal.path) == {
        "a": {"id": "a", "pid": 11, "create_time": 1.5},
        "b": {"id": "b"},
    }


def test_journal_torn_last_line_is_skipped(tmp_path: Path) -> None:
    journal = ContainerJournal(tmp_path)
    journal.started("a")
    with open(journal.path, "a") as torn:
        torn.write('{"id": "a", "pid": 1')

    assert open_containers(journal.path) == {"a": {"id": "a"}}


def test_journal_no_container_yet_creates_no_file(tmp_path: Path) -> None:
    journal = ContainerJournal(tmp_path)

    assert list(tmp_path.iterdir()) == []
    assert open_containers(journal.path) == {}


def test_journal_many_ended_containers_is_rewritten_with_the_open_ones(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(process_journal, "COMPACT_AFTER_ENDED", 4)
    journal = ContainerJournal(tmp_path)
    journal.started("kept")
    journal.forked("kept", pid=7, create_time=3.0)
    for i in range(4):
        journal.started(f"done-{i}")
        journal.ended(f"done-{i}")
    journal.started("after")

    assert journal.path.read_text().count("\n") == 2
    assert open_containers(journal.path) == {
        "kept": {"id": "kept", "pid": 7, "create_time": 3.0},
        "after": {"id": "after"},
    }
    assert [path.name for path in tmp_path.iterdir()] == [journal.path.name]
