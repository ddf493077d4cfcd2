"""The suite's split into two side-by-side sessions (scripts/test_shards.py)."""

from __future__ import annotations

import importlib.util
import io
import os
import re
import threading
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SHARED_DAEMON_IMPORTS = re.compile(r"^\s*(from|import)\s+(engines|netns|fakes\.gcp)\b", re.MULTILINE)


def _load_shards_module():
    spec = importlib.util.spec_from_file_location("test_shards_script", ROOT / "scripts" / "test_shards.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _shards() -> dict[str, list[str]]:
    cwd = os.getcwd()
    os.chdir(ROOT)
    try:
        return _load_shards_module()._shards()
    finally:
        os.chdir(cwd)


def test_shards_cover_every_test_path_exactly_once() -> None:
    shards = _shards()
    chosen = [path for paths in shards.values() for path in paths]
    expected = sorted(
        str(path.relative_to(ROOT))
        for path in (ROOT / "tests").iterdir()
        if (path.is_dir() and not path.name.startswith((".", "__"))) or path.name.startswith("test_")
    )
    assert sorted(chosen) == expected


def test_shards_keep_every_test_of_the_shared_daemons_in_the_systems_session() -> None:
    """Tests that start the session's dockerd/containerd or network-namespace hosts must share one
    session, or two sessions would start the same daemons on the same sockets."""
    systems = {Path(path) for path in _shards()["systems"]}
    outside = [
        str(path.relative_to(ROOT))
        for path in (ROOT / "tests").rglob("*.py")
        if (path.name.startswith("test_") or path.name == "conftest.py")
        and SHARED_DAEMON_IMPORTS.search(path.read_text())
        and not any(parent in systems for parent in path.relative_to(ROOT).parents)
    ]
    assert outside == []


def test_test_paths_on_the_command_line_run_one_session() -> None:
    module = _load_shards_module()
    cwd = os.getcwd()
    os.chdir(ROOT)
    try:
        assert module._names_test_paths(["-q", "tests/controller"])
        assert module._names_test_paths(["tests/test_time.py::test_anything"])
        assert not module._names_test_paths(["-q", "-k", "heartbeat", "-p", "no:cacheprovider"])
    finally:
        os.chdir(cwd)


def test_shards_summary_takes_the_pytest_result_line_over_later_teardown_output() -> None:
    module = _load_shards_module()
    output = (
        b"........ [100%]\n"
        b"1438 passed in 477.57s (0:07:57)\n"
        b"scheduling pass failed\n"
        b"RuntimeError: cannot schedule new futures after shutdown\n"
    )
    last_lines: dict[str, str] = {}
    module._relay("core", io.BytesIO(output), last_lines, threading.Lock())
    assert last_lines == {"core": "1438 passed in 477.57s (0:07:57)"}

    failed: dict[str, str] = {}
    module._relay("systems", io.BytesIO(b"=== 2 failed, 9 passed, 1 skipped in 3.10s ===\n"), failed, threading.Lock())
    assert failed == {"systems": "2 failed, 9 passed, 1 skipped in 3.10s"}

    crashed: dict[str, str] = {}
    module._relay("core", io.BytesIO(b"collecting ...\nImportError: no module named x\n"), crashed, threading.Lock())
    assert crashed == {"core": "ImportError: no module named x"}
