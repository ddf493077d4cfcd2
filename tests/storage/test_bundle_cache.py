from __future__ import annotations

import hashlib
import threading
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import ClassVar

import fsspec
import pytest
from fsspec.implementations.memory import MemoryFileSystem

from iris import storage
from iris.client.bundle import build_bundle
from iris.cluster.controller.bundle_store import BundleStore
from iris.cluster.worker.bundle_cache import BundleCache, BundleCorruptError

_WAIT_SECONDS = 10.0


class CountingStore(MemoryFileSystem):
    """An in-memory object store that counts downloads and can hold them until released."""

    protocol = "iriscounting"
    # fsspec's memory filesystem keeps its objects on the class; these shadow the shared memory://.
    store: ClassVar[dict[str, object]] = {}
    pseudo_dirs: ClassVar[list[str]] = [""]
    downloads: ClassVar[list[str]] = []
    changed = threading.Condition()
    release = threading.Event()

    def cat_file(
        self, path: str, start: int | None = None, end: int | None = None, **kwargs: object
    ) -> bytes:
        with CountingStore.changed:
            CountingStore.downloads.append(path)
            CountingStore.changed.notify_all()
        if not CountingStore.release.wait(_WAIT_SECONDS):
            raise TimeoutError("the test never released the download")
        return super().cat_file(path, start, end, **kwargs)


@pytest.fixture
def counting_store() -> Iterator[type[CountingStore]]:
    fsspec.register_implementation(CountingStore.protocol, CountingStore, clobber=True)
    CountingStore.store.clear()
    CountingStore.downloads.clear()
    CountingStore.release.set()
    yield CountingStore
    CountingStore.release.set()


def _upload(content: bytes) -> tuple[str, str]:
    uri = f"iriscounting://bundles/{uuid.uuid4().hex}.zip"
    storage.write_bytes_atomic(uri, content)
    return uri, hashlib.sha256(content).hexdigest()


def _wait_for(condition: threading.Condition, predicate: Callable[[], bool], what: str) -> None:
    with condition:
        if not condition.wait_for(predicate, timeout=_WAIT_SECONDS):
            pytest.fail(f"timed out waiting for {what}")


def test_bundle_cache_concurrent_fetch_downloads_once(
    counting_store: type[CountingStore], tmp_path: Path
) -> None:
    uri, sha = _upload(b"bundle bytes" * 1000)
    cache = BundleCache(tmp_path / "cache")
    counting_store.release.clear()
    callers = 8
    arrived = threading.Semaphore(0)
    results: list[bytes] = []
    errors: list[BaseException] = []

    def fetch() -> None:
        arrived.release()
        try:
            results.append(cache.fetch(uri, sha).read_bytes())
        except BaseException as exc:  # noqa: BLE001 - reported by the assertion below
            errors.append(exc)

    threads = [threading.Thread(target=fetch) for _ in range(callers)]
    for thread in threads:
        thread.start()
    for _ in range(callers):
        assert arrived.acquire(timeout=_WAIT_SECONDS)
    # Every caller is inside fetch while the first download is held open.
    _wait_for(counting_store.changed, lambda: len(counting_store.downloads) >= 1, "the first download")
    counting_store.release.set()
    for thread in threads:
        thread.join(_WAIT_SECONDS)

    assert errors == []
    assert results == [b"bundle bytes" * 1000] * callers
    assert len(counting_store.downloads) == 1


def test_bundle_cache_second_fetch_is_served_from_disk(
    counting_store: type[CountingStore], tmp_path: Path
) -> None:
    uri, sha = _upload(b"bundle")
    cache = BundleCache(tmp_path / "cache")

    first = cache.fetch(uri, sha)
    second = BundleCache(tmp_path / "cache").fetch(uri, sha)  # a restarted worker

    assert first == second
    assert second.read_bytes() == b"bundle"
    assert len(counting_store.downloads) == 1


def test_bundle_cache_corrupt_entry_is_downloaded_again(
    counting_store: type[CountingStore], tmp_path: Path
) -> None:
    uri, sha = _upload(b"the real bundle")
    cache = BundleCache(tmp_path / "cache")
    cached = cache.fetch(uri, sha)
    cached.write_bytes(b"the real bundlX")  # a flipped byte on disk

    assert cache.fetch(uri, sha).read_bytes() == b"the real bundle"
    assert len(counting_store.downloads) == 2


def test_bundle_cache_stored_object_with_wrong_digest_is_refused(
    counting_store: type[CountingStore], tmp_path: Path
) -> None:
    uri, _ = _upload(b"tampered")
    expected = hashlib.sha256(b"original").hexdigest()
    cache = BundleCache(tmp_path / "cache")

    with pytest.raises(
        BundleCorruptError, match=f"hashes to {hashlib.sha256(b'tampered').hexdigest()}, not {expected}"
    ):
        cache.fetch(uri, expected)

    assert list((tmp_path / "cache").iterdir()) == []


def test_bundle_cache_missing_bundle_raises_storage_error(tmp_path: Path) -> None:
    cache = BundleCache(tmp_path / "cache")
    uri = f"file://{tmp_path}/store/{'0' * 64}.zip"

    with pytest.raises(storage.StorageNotFoundError, match="cannot read bundle from"):
        cache.fetch(uri, "0" * 64)


def test_bundle_cache_over_limit_evicts_least_recently_used(
    counting_store: type[CountingStore], tmp_path: Path
) -> None:
    bundles = {name: _upload(name.encode() * 100) for name in ("a", "b", "c", "d")}  # 100 bytes each
    cache = BundleCache(tmp_path / "cache", max_bytes=300)
    for name in ("a", "b", "c"):
        cache.fetch(*bundles[name])
    cache.fetch(*bundles["a"])  # "b" is now the least recently used

    cache.fetch(*bundles["d"])

    cached = {path.stem for path in (tmp_path / "cache").glob("*.zip")}
    assert cached == {bundles[name][1] for name in ("a", "c", "d")}
    assert cache.total_bytes() == 300


def test_bundle_cache_checked_out_bundle_is_not_evicted(
    counting_store: type[CountingStore], tmp_path: Path
) -> None:
    first = _upload(b"1" * 100)
    second = _upload(b"2" * 100)
    third = _upload(b"3" * 100)
    cache = BundleCache(tmp_path / "cache", max_bytes=150)

    with cache.checkout(*first) as held:
        cache.fetch(*second)
        cache.fetch(*third)
        assert held.read_bytes() == b"1" * 100

    # Once released, it no longer holds the cache over its limit.
    assert cache.total_bytes() <= 150
    assert len(counting_store.downloads) == 3


def test_bundle_cache_restarted_with_a_lower_limit_evicts_at_its_first_hit(
    counting_store: type[CountingStore], tmp_path: Path
) -> None:
    bundles = [_upload(content * 100) for content in (b"1", b"2", b"3")]
    filled = BundleCache(tmp_path / "cache")
    for bundle in bundles:
        filled.fetch(*bundle)

    restarted = BundleCache(tmp_path / "cache", max_bytes=150)
    restarted.fetch(*bundles[2])  # served from disk: no download to prompt an eviction

    assert restarted.total_bytes() <= 150
    assert restarted.path_for(bundles[2][1]).exists()
    assert len(counting_store.downloads) == 3


def test_bundle_cache_bundle_larger_than_limit_is_still_returned(
    counting_store: type[CountingStore], tmp_path: Path
) -> None:
    cache = BundleCache(tmp_path / "cache", max_bytes=10)

    path = cache.fetch(*_upload(b"x" * 100))

    assert path.read_bytes() == b"x" * 100


def test_bundle_cache_extract_to_unpacks_into_dest(tmp_path: Path) -> None:
    (tmp_path / "ws").mkdir()
    (tmp_path / "ws" / "main.py").write_text("print('hi')\n")
    bundle = build_bundle(tmp_path / "ws")
    uri = BundleStore(f"file://{tmp_path}/store").put(bundle.blob, bundle.sha256)
    cache = BundleCache(tmp_path / "cache")

    for task in ("task-0", "task-1"):
        assert cache.extract_to(uri, bundle.sha256, tmp_path / task) == 1
        assert (tmp_path / task / "main.py").read_text() == "print('hi')\n"


def test_bundle_cache_empty_bundle_is_fetched_once_then_only_creates_dest(
    counting_store: type[CountingStore], tmp_path: Path
) -> None:
    (tmp_path / "ws").mkdir()
    uri, sha = _upload(build_bundle(tmp_path / "ws").blob)
    cache = BundleCache(tmp_path / "cache")
    assert cache.extract_to(uri, sha, tmp_path / "task-0") == 0
    cache.path_for(sha).unlink()

    assert cache.extract_to(uri, sha, tmp_path / "task-1") == 0

    assert (tmp_path / "task-1").is_dir()
    assert len(counting_store.downloads) == 1
