"""The task Pod's workdir helper (`pod_workdir`), run as the Pod runs it but on local directories."""

from __future__ import annotations

import base64
import hashlib
import io
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from iris.cluster.runtime.pod_workdir import collect, fill, zip_tree


def _bundle_store(tmp_path: Path) -> tuple[str, str]:
    workspace = tmp_path / "workspace"
    (workspace / "pkg").mkdir(parents=True)
    (workspace / "pkg" / "tasks.py").write_text("VALUE = 42\n")
    (workspace / "run.sh").write_text("#!/bin/sh\necho hi\n")
    (workspace / "run.sh").chmod(0o755)
    data = zip_tree(workspace)
    sha256 = hashlib.sha256(data).hexdigest()
    store = tmp_path / "store"
    store.mkdir()
    (store / f"{sha256}.zip").write_bytes(data)
    return f"file://{store}/{sha256}.zip", sha256


def test_fill_unpacks_the_bundle_then_the_workers_files(tmp_path: Path) -> None:
    uri, sha256 = _bundle_store(tmp_path)
    worker_files = tmp_path / "worker"
    worker_files.mkdir()
    (worker_files / "_callable.pkl").write_bytes(b"pickled")
    files_zip = tmp_path / "files.zip"
    files_zip.write_bytes(zip_tree(worker_files))
    app = tmp_path / "app"

    written = fill(app, uri, sha256, files_zip)

    assert written == 3
    assert (app / "pkg" / "tasks.py").read_text() == "VALUE = 42\n"
    assert os.access(app / "run.sh", os.X_OK)
    assert (app / "_callable.pkl").read_bytes() == b"pickled"


def test_fill_bundle_with_another_digest_fails_naming_both(tmp_path: Path) -> None:
    uri, sha256 = _bundle_store(tmp_path)
    wrong = "0" * 64

    with pytest.raises(SystemExit) as excinfo:
        fill(tmp_path / "app", uri, wrong, None)

    assert f"hashes to {sha256}, not {wrong}" in str(excinfo.value)


def test_collect_returns_only_what_changed_after_fill_as_base64_zip(tmp_path: Path) -> None:
    uri, sha256 = _bundle_store(tmp_path)
    app = tmp_path / "app"
    fill(app, uri, sha256, None)
    stamp = (app / ".iris-pod" / "filled").stat().st_mtime_ns
    (app / "out").mkdir()
    (app / "out" / "result.pkl").write_bytes(b"result")
    (app / "pkg" / "tasks.py").write_text("VALUE = 43\n")
    # Whatever the clock's resolution, the task's writes come after the stamp.
    for path in (app / "out" / "result.pkl", app / "pkg" / "tasks.py"):
        os.utime(path, ns=(stamp + 1, stamp + 1))

    printed = subprocess.run(
        [sys.executable, "-m", "iris.cluster.runtime.pod_workdir", "collect", str(app)],
        capture_output=True,
        check=True,
    ).stdout

    with zipfile.ZipFile(io.BytesIO(base64.b64decode(printed))) as archive:
        assert sorted(archive.namelist()) == ["out/result.pkl", "pkg/tasks.py"]
        assert archive.read("out/result.pkl") == b"result"
    assert collect(app) == base64.b64decode(printed)


def test_fill_missing_bundle_fails_with_the_stores_reason(tmp_path: Path) -> None:
    missing = f"file://{tmp_path}/store/{'c' * 64}.zip"

    with pytest.raises(SystemExit) as excinfo:
        fill(tmp_path / "app", missing, "c" * 64, None)

    assert missing.removeprefix("file://") in str(excinfo.value)
