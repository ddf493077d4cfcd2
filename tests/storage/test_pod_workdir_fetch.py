"""A task Pod's init container fetches the job bundle through fsspec from every kind of store."""

from __future__ import annotations

import hashlib
import uuid
from pathlib import Path

import pytest

from iris import storage
from iris.cluster.runtime.pod_workdir import fill, zip_tree


@pytest.mark.parametrize("scheme", ["file", "s3", "gs"])
def test_pod_workdir_fill_fetches_the_bundle_from_the_store(
    scheme: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    if scheme == "file":
        base = f"file://{tmp_path}/store"
    else:
        base = request.getfixturevalue("s3_server" if scheme == "s3" else "gcs_server")
    workspace = tmp_path / "workspace"
    workspace.mkdir()
    (workspace / "train.py").write_text("print('training')\n")
    data = zip_tree(workspace)
    sha256 = hashlib.sha256(data).hexdigest()
    uri = f"{base}/{uuid.uuid4().hex}/{sha256}.zip"
    storage.write_bytes_atomic(uri, data, what="bundle")

    written = fill(tmp_path / "app", uri, sha256, None)

    assert written == 1
    assert (tmp_path / "app" / "train.py").read_text() == "print('training')\n"
