"""The worker's local bundle cache: each bundle is downloaded once, verified, and evicted LRU."""

from __future__ import annotations

import hashlib
import io
import logging
import os
import tempfile
import threading
import time
import zipfile
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from iris import chaos, storage
from iris.bundle_format import extract_bundle, validate_digest
from iris.cluster.limits import DEFAULT_INPUT_LIMITS, InputLimits

logger = logging.getLogger(__name__)

DEFAULT_CACHE_MAX_BYTES = 10 * 1024**3
_PARTIAL_SUFFIX = ".partial"


class BundleCorruptError(RuntimeError):
    """The stored bundle does not hash to the digest it is filed under."""


class BundleCache:
    """Bundles cached as `<cache_dir>/<sha256>.zip`, bounded by `max_bytes`.

    Eviction removes the least recently used bundles (by file access time, which the cache sets
    itself so that it survives worker restarts) once the total passes `max_bytes`, but never one
    that a `checkout` or `extract_to` is using.
    """

    def __init__(
        self, cache_dir: Path, max_bytes: int = DEFAULT_CACHE_MAX_BYTES, limits: InputLimits = DEFAULT_INPUT_LIMITS
    ) -> None:
        self.cache_dir = Path(cache_dir)
        self.max_bytes = max_bytes
        self.limits = limits
        self.cache_dir.mkdir(parents=True, exist_ok=True)
        for leftover in self.cache_dir.glob(f"*{_PARTIAL_SUFFIX}"):
            leftover.unlink(missing_ok=True)  # a download interrupted by a crash
        self._lock = threading.Lock()
        self._download_locks: dict[str, threading.Lock] = {}
        self._pins: Counter[str] = Counter()
        # Only a download adds bytes, so the cache is listed for eviction only after one, or while
        # an eviction left it over the limit (pinned bundles); at start a previous worker (or a
        # lower limit) may have left it over.
        self._may_be_over_limit = True
        # Digests of verified bundles with no entries: they unpack to nothing, so there is nothing
        # to read, check or unpack for them again (jobs submitted from a directory with no files).
        self._empty: set[str] = set()

    def path_for(self, sha256: str) -> Path:
        validate_digest(sha256)
        return self.cache_dir / f"{sha256}.zip"

    def fetch(self, uri: str, sha256: str) -> Path:
        """Return the local path of the verified bundle, downloading it if it is not cached.

        The file may be evicted once later fetches push the cache past its limit; use `checkout`
        or `extract_to` to hold it while reading.
        """
        with self._pinned(sha256):
            self._fetch_pinned(uri, sha256)
        # Kept even when it alone exceeds the limit: the caller is about to read it.
        self._evict(keep=sha256)
        return self.path_for(sha256)

    @contextmanager
    def checkout(self, uri: str, sha256: str) -> Iterator[Path]:
        """Yield the local path of the verified bundle, protected from eviction until exit."""
        with self._pinned(sha256):
            self._fetch_pinned(uri, sha256)
            yield self.path_for(sha256)
        self._evict(keep=None)

    def extract_to(self, uri: str, sha256: str, dest: Path) -> int:
        """Unpack the bundle into `dest`, creating it (and fetching the bundle if needed); returns
        the number of files."""
        if sha256 in self._empty:
            dest.mkdir(parents=True, exist_ok=True)
            return 0
        with self._pinned(sha256):
            # Unpacked from the bytes just verified, so the file is read once, not again by zipfile.
            blob = self._fetch_pinned(uri, sha256)
        self._evict(keep=None)
        limits = self.limits
        written = extract_bundle(blob, dest, limits.max_bundle_entries, limits.max_bundle_unpacked_bytes)
        if not written and not zipfile.ZipFile(io.BytesIO(blob)).namelist():
            self._empty.add(sha256)
        return written

    def total_bytes(self) -> int:
        return sum(size for _, _, size, _ in self._entries())

    @contextmanager
    def _pinned(self, sha256: str) -> Iterator[None]:
        validate_digest(sha256)
        with self._lock:
            self._pins[sha256] += 1
        try:
            yield
        finally:
            with self._lock:
                self._pins[sha256] -= 1
                if self._pins[sha256] == 0:
                    del self._pins[sha256]

    def _download_lock(self, sha256: str) -> threading.Lock:
        with self._lock:
            return self._download_locks.setdefault(sha256, threading.Lock())

    def _fetch_pinned(self, uri: str, sha256: str) -> bytes:
        """The verified bundle's bytes, from its cached copy when that is intact, else downloaded."""
        path = self.path_for(sha256)
        with self._download_lock(sha256):
            cached = self._read_intact(path, sha256)
            if cached is not None:
                return cached
            return self._download(uri, sha256, path)

    @staticmethod
    def _read_intact(path: Path, sha256: str) -> bytes | None:
        """The cached copy's bytes, its access time set; None when there is none or it is damaged.

        Re-hashing on every hit costs well under a second for the largest bundles and catches a
        cached file damaged on disk, which no cheaper check (size, mtime) would notice.
        """
        try:
            handle = open(path, "rb", buffering=0)
        except FileNotFoundError:
            return None
        with handle:
            data = handle.readall()
            if hashlib.sha256(data).hexdigest() == sha256:
                # Set explicitly because relatime/noatime mounts do not record reads reliably; the
                # mtime keeps recording when the bundle was downloaded.
                os.utime(handle.fileno(), ns=(time.time_ns(), os.fstat(handle.fileno()).st_mtime_ns))
                return data
        logger.warning("cached bundle %s does not match its digest; downloading it again", path)
        path.unlink(missing_ok=True)
        return None

    def _download(self, uri: str, sha256: str, path: Path) -> bytes:
        chaos.maybe_fail(chaos.WORKER_BUNDLE_DOWNLOAD, storage.StorageError)
        started = time.monotonic()
        data = storage.read_bytes(uri, what="bundle")
        actual = hashlib.sha256(data).hexdigest()
        if actual != sha256:
            raise BundleCorruptError(
                f"bundle {uri} hashes to {actual}, not {sha256}: the stored object is corrupt or was "
                "replaced; resubmit the job so the client uploads the bundle again"
            )
        fd, partial = tempfile.mkstemp(dir=self.cache_dir, prefix=f".{sha256}.", suffix=_PARTIAL_SUFFIX)
        try:
            with os.fdopen(fd, "wb") as handle:
                handle.write(data)
            os.replace(partial, path)
        except BaseException:
            Path(partial).unlink(missing_ok=True)
            raise
        with self._lock:
            self._may_be_over_limit = True
        logger.info("downloaded bundle %s (%d bytes) in %.2fs", uri, len(data), time.monotonic() - started)
        return data

    def _entries(self) -> list[tuple[int, Path, int, str]]:
        """(access time, path, size, digest) of every cached bundle."""
        entries = []
        for path in self.cache_dir.glob("*.zip"):
            try:
                validate_digest(path.stem)
                info = path.stat()
            except (ValueError, FileNotFoundError):
                continue  # not a bundle this cache wrote, or evicted meanwhile
            entries.append((info.st_atime_ns, path, info.st_size, path.stem))
        return entries

    def _evict(self, keep: str | None) -> None:
        with self._lock:
            if not self._may_be_over_limit:
                return
            entries = sorted(self._entries())
            total = sum(size for _, _, size, _ in entries)
            for _, path, size, sha256 in entries:
                if total <= self.max_bytes:
                    break
                if sha256 == keep or self._pins[sha256] > 0:
                    continue
                path.unlink(missing_ok=True)
                self._download_locks.pop(sha256, None)
                total -= size
                logger.info("evicted bundle %s (%d bytes) from the cache", sha256, size)
            self._may_be_over_limit = total > self.max_bytes
