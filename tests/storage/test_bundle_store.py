from __future__ import annotations

import hashlib
import json
import os
import time
import uuid
from pathlib import Path

import pytest

from iris import storage
from iris.client.bundle import build_bundle
from iris.cluster.controller.bundle_store import BundleStore
from iris.cluster.worker.bundle_cache import BundleCache

_FAST_FAILURE_SECONDS = 10.0


def _blob(text: str) -> tuple[bytes, str]:
    data = text.encode()
    return data, hashlib.sha256(data).hexdigest()


@pytest.fixture(params=["file", "s3", "gs"])
def prefix(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A fresh, empty bundle prefix on each backend."""
    if request.param == "file":
        return f"file://{tmp_path}/bundles"
    base = request.getfixturevalue("s3_server" if request.param == "s3" else "gcs_server")
    return f"{base}/{uuid.uuid4().hex}"


@pytest.fixture(params=["s3", "gs"])
def object_store_prefix(request: pytest.FixtureRequest) -> str:
    base = request.getfixturevalue("s3_server" if request.param == "s3" else "gcs_server")
    return f"{base}/{uuid.uuid4().hex}"


def test_bundle_store_put_new_bundle_stores_it_under_its_digest(prefix: str) -> None:
    blob, sha = _blob("bundle contents")
    store = BundleStore(prefix)

    uri = store.put(blob, sha)

    assert uri == f"{prefix}/{sha}.zip"
    assert uri == store.uri_for(sha)
    assert store.exists(sha)
    assert storage.read_bytes(uri) == blob


def test_bundle_store_put_existing_bundle_does_not_rewrite_it(prefix: str) -> None:
    blob, sha = _blob("bundle contents")
    store = BundleStore(prefix)
    uri = store.put(blob, sha)
    # Replace the stored object behind the store's back: a second put that rewrote the object
    # would restore the original bytes.
    storage.write_bytes_atomic(uri, b"marker left by the test")

    assert store.put(blob, sha) == uri
    assert storage.read_bytes(uri) == b"marker left by the test"


def test_bundle_store_put_digest_mismatch_is_rejected(prefix: str) -> None:
    blob, _ = _blob("what was sent")
    _, claimed = _blob("what the client hashed")
    store = BundleStore(prefix)

    with pytest.raises(ValueError, match="digest mismatch") as caught:
        store.put(blob, claimed)

    assert hashlib.sha256(blob).hexdigest() in str(caught.value)
    assert not store.exists(claimed)


def test_bundle_store_malformed_digest_is_rejected(prefix: str) -> None:
    store = BundleStore(prefix)

    with pytest.raises(ValueError, match="not a lowercase hex SHA-256"):
        store.put(b"x", "../../etc/passwd")


def test_bundle_cache_fetch_from_store_round_trips_bytes(prefix: str, tmp_path: Path) -> None:
    workspace = tmp_path / "workspace"
    (workspace / "pkg").mkdir(parents=True)
    (workspace / "pkg" / "train.py").write_text("print('training')\n")
    (workspace / "run.sh").write_text("#!/bin/sh\n")
    (workspace / "run.sh").chmod(0o755)
    bundle = build_bundle(workspace)
    uri = BundleStore(prefix).put(bundle.blob, bundle.sha256)
    cache = BundleCache(tmp_path / "cache")

    assert cache.fetch(uri, bundle.sha256).read_bytes() == bundle.blob
    assert cache.extract_to(uri, bundle.sha256, tmp_path / "task") == 2
    assert (tmp_path / "task" / "pkg" / "train.py").read_text() == "print('training')\n"
    assert (tmp_path / "task" / "run.sh").stat().st_mode & 0o111


def test_storage_read_missing_object_raises_not_found(prefix: str) -> None:
    uri = storage.join_uri(prefix, "absent.zip")

    with pytest.raises(
        storage.StorageNotFoundError, match=f"cannot read bundle from {uri}: it does not exist"
    ):
        storage.read_bytes(uri, what="bundle")
    assert not storage.exists(uri)


def test_bundle_store_missing_bucket_raises_storage_error_naming_bucket(object_store_prefix: str) -> None:
    scheme = object_store_prefix.split("://")[0]
    store = BundleStore(f"{scheme}://no-such-bucket-{uuid.uuid4().hex[:8]}/bundles")
    bucket = store.prefix.split("/")[2]
    blob, sha = _blob("bundle")

    with pytest.raises(storage.StorageError) as caught:
        store.put(blob, sha)

    assert str(caught.value) == (
        f"cannot write bundle to {store.uri_for(sha)}: bucket '{bucket}' does not exist "
        "(create it or fix the bucket name)"
    )


def test_storage_read_from_missing_bucket_names_the_bucket(object_store_prefix: str) -> None:
    scheme = object_store_prefix.split("://")[0]
    uri = f"{scheme}://no-such-bucket-{uuid.uuid4().hex[:8]}/bundles/x.zip"

    with pytest.raises(storage.StorageNotFoundError, match=r"bucket 'no-such-bucket-\w+' does not exist"):
        storage.read_bytes(uri)


def test_bundle_store_unreachable_endpoint_fails_fast_with_clear_error(
    object_store_prefix: str, dead_endpoint: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    if object_store_prefix.startswith("s3://"):
        monkeypatch.setenv("AWS_ENDPOINT_URL", dead_endpoint)
    else:
        monkeypatch.setenv("STORAGE_EMULATOR_HOST", dead_endpoint)
    store = BundleStore(object_store_prefix)
    blob, sha = _blob("bundle")

    started = time.monotonic()
    with pytest.raises(storage.StorageError) as caught:
        store.put(blob, sha)
    elapsed = time.monotonic() - started

    assert str(caught.value).endswith(
        f"could not reach the storage endpoint {dead_endpoint}: connection refused"
    ), str(caught.value)
    assert str(caught.value).startswith(f"cannot check for bundle at {store.uri_for(sha)}")
    assert elapsed < _FAST_FAILURE_SECONDS


def test_storage_s3_endpoint_from_fsspec_s3_json(s3_server: str, monkeypatch: pytest.MonkeyPatch) -> None:
    endpoint = os.environ["AWS_ENDPOINT_URL"]
    monkeypatch.delenv("AWS_ENDPOINT_URL")
    monkeypatch.setenv("FSSPEC_S3", json.dumps({"endpoint_url": endpoint}))
    uri = f"{s3_server}/{uuid.uuid4().hex}/object"

    storage.write_bytes_atomic(uri, b"via FSSPEC_S3")

    assert storage.read_bytes(uri) == b"via FSSPEC_S3"


def test_storage_plain_absolute_path_is_a_local_file(tmp_path: Path) -> None:
    target = tmp_path / "nested" / "object.bin"

    storage.write_bytes_atomic(str(target), b"local")

    assert target.read_bytes() == b"local"
    assert storage.read_bytes(f"file://{target}") == b"local"
    assert storage.exists(str(target))
    assert [p.name for p in target.parent.iterdir()] == ["object.bin"]  # no temp file left behind


def test_storage_relative_path_is_rejected_with_guidance() -> None:
    with pytest.raises(storage.StorageError, match="neither an absolute path nor a URI"):
        storage.read_bytes("bundles/x.zip")


def test_storage_join_uri_uses_exactly_one_separator() -> None:
    assert storage.join_uri("s3://bucket/prefix/", "/name.zip") == "s3://bucket/prefix/name.zip"
    assert storage.join_uri("/var/cache", "name.zip") == "/var/cache/name.zip"
