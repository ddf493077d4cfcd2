"""The bundle format both ends agree on: a zip of the workspace named by its SHA-256.

Clients build bundles (`iris.client.bundle`), the controller stores them and workers unpack
them; this module is the part all of them share: digest validation, entry shape and safe extraction.
"""

from __future__ import annotations

import io
import os
import re
import stat
import zipfile
from pathlib import Path, PurePosixPath
from typing import IO

DEFAULT_MAX_BUNDLE_BYTES = 64 * 1024 * 1024
# What a bundle may unpack to. The client bounds the files it zips by DEFAULT_MAX_BUNDLE_BYTES, so
# only a hand-made (or hostile) bundle comes near these: a zip bomb, or millions of empty entries.
DEFAULT_MAX_BUNDLE_ENTRIES = 100_000
DEFAULT_MAX_UNPACKED_BYTES = 4 * DEFAULT_MAX_BUNDLE_BYTES
COPY_CHUNK_BYTES = 1024 * 1024

# The earliest timestamp a zip entry can hold; mtimes would make every build hash differently.
_FIXED_DATE_TIME = (1980, 1, 1, 0, 0, 0)
_ZIP_CREATE_SYSTEM_UNIX = 3

_SHA256_HEX = re.compile(r"[0-9a-f]{64}")


def validate_digest(sha256: str) -> None:
    """Reject anything but a lowercase hex SHA-256; digests become file and object names."""
    if not _SHA256_HEX.fullmatch(sha256):
        raise ValueError(f"bundle digest {sha256!r} is not a lowercase hex SHA-256 (64 characters of 0-9a-f)")


class UnsafeBundleError(ValueError):
    """A bundle that must not be unpacked: an entry escaping the directory, a symlink, or a bomb."""


def is_within(path: Path, root: Path) -> bool:
    return path == root or root in path.parents


def zip_entry(arcname: str, size: int, executable: bool) -> zipfile.ZipInfo:
    info = zipfile.ZipInfo(arcname, date_time=_FIXED_DATE_TIME)
    info.create_system = _ZIP_CREATE_SYSTEM_UNIX
    # Only the executable bit survives: umask-dependent group/other bits would change the hash.
    info.external_attr = (stat.S_IFREG | (0o755 if executable else 0o644)) << 16
    info.compress_type = zipfile.ZIP_DEFLATED
    info.file_size = size  # lets zipfile choose zip64 up front for very large files
    return info


def _quote(name: str) -> str:
    return repr(name) if len(name) <= 80 else f"{name[:80]!r}... ({len(name)} chars)"


def _is_symlink(info: zipfile.ZipInfo) -> bool:
    return info.create_system == _ZIP_CREATE_SYSTEM_UNIX and stat.S_ISLNK(info.external_attr >> 16)


def _check_entry_name(name: str) -> None:
    parts = PurePosixPath(name).parts
    if not parts or name.startswith("/") or ".." in parts or "\0" in name:
        raise UnsafeBundleError(
            f"refusing to extract bundle entry {_quote(name)}: it would land outside the task's directory (an absolute "
            "path or a '..'); bundles built by the iris client never hold such entries"
        )


def inspect_bundle(
    archive: zipfile.ZipFile,
    max_entries: int = DEFAULT_MAX_BUNDLE_ENTRIES,
    max_unpacked_bytes: int = DEFAULT_MAX_UNPACKED_BYTES,
) -> list[zipfile.ZipInfo]:
    """The archive's entries, once every one is known safe to unpack; raises UnsafeBundleError.

    Reads only the central directory: nothing is decompressed, so a bomb is refused before any of
    it is inflated. Unpacking still counts the bytes, in case an entry lies about its size.
    """
    entries = archive.infolist()
    if len(entries) > max_entries:
        raise UnsafeBundleError(
            f"refusing to extract a bundle of {len(entries)} entries, over the limit of {max_entries}; add generated "
            "files to .gitignore or raise limits.max_bundle_entries in the cluster config"
        )
    declared = 0
    for info in entries:
        _check_entry_name(info.filename)
        if _is_symlink(info):
            raise UnsafeBundleError(
                f"refusing to extract bundle entry {_quote(info.filename)}: it is a symlink, which could point outside the "
                "task's directory; bundles hold regular files only (the iris client copies what a link points to)"
            )
        declared += info.file_size
    if declared > max_unpacked_bytes:
        raise UnsafeBundleError(
            f"refusing to extract a bundle that unpacks to {declared / 2**20:.1f} MiB, over the limit of "
            f"{max_unpacked_bytes / 2**20:.0f} MiB; pass large data through storage or raise "
            "limits.max_bundle_unpacked_bytes in the cluster config"
        )
    return entries


def check_bundle_blob(
    blob: bytes,
    max_entries: int = DEFAULT_MAX_BUNDLE_ENTRIES,
    max_unpacked_bytes: int = DEFAULT_MAX_UNPACKED_BYTES,
) -> None:
    """Refuse, with the reason, a submitted bundle that is not a zip or that unpacking would refuse."""
    try:
        with zipfile.ZipFile(io.BytesIO(blob)) as archive:
            inspect_bundle(archive, max_entries, max_unpacked_bytes)
    except zipfile.BadZipFile as exc:
        raise UnsafeBundleError(f"the bundle is not a valid zip archive: {exc}") from None


def _safe_target(root: Path, name: str) -> Path:
    _check_entry_name(name)
    target = root.joinpath(*PurePosixPath(name).parts)
    # A symlink already in dest could redirect the write; the entry itself is replaced, not followed.
    parent = target.parent.resolve()
    if not is_within(parent, root):
        raise UnsafeBundleError(
            f"refusing to extract bundle entry {_quote(name)}: its directory resolves to {parent}, outside the task's directory"
        )
    return target


def extract_bundle(
    blob_or_zip_path: bytes | str | os.PathLike[str],
    dest: Path,
    max_entries: int = DEFAULT_MAX_BUNDLE_ENTRIES,
    max_unpacked_bytes: int = DEFAULT_MAX_UNPACKED_BYTES,
) -> int:
    """Unpack a bundle into `dest`, restoring executable bits; returns the number of files written.

    Every entry is checked before anything is written, so a malicious bundle leaves `dest` untouched
    (but for an entry that turns out bigger than it said, which stops the unpacking there).
    """
    source = (
        io.BytesIO(blob_or_zip_path)
        if isinstance(blob_or_zip_path, (bytes, bytearray, memoryview))
        else Path(blob_or_zip_path)
    )
    dest = Path(dest)
    dest.mkdir(parents=True, exist_ok=True)
    root = dest.resolve()
    written = 0
    budget = _ByteBudget(max_unpacked_bytes)
    with zipfile.ZipFile(source) as archive:
        plan = [(info, _safe_target(root, info.filename)) for info in inspect_bundle(archive, max_entries, max_unpacked_bytes)]
        for info, target in plan:
            if info.is_dir():
                target.mkdir(parents=True, exist_ok=True)
                continue
            target.parent.mkdir(parents=True, exist_ok=True)
            # Replace rather than overwrite in place, so an existing symlink or hard link is never
            # written through.
            target.unlink(missing_ok=True)
            with archive.open(info) as entry, target.open("wb") as sink:
                budget.copy(info, entry, sink)
            executable = (info.external_attr >> 16) & 0o111
            target.chmod(0o755 if executable else 0o644)
            written += 1
    return written


class _ByteBudget:
    """Counts what unpacking writes, so an entry inflating past its declared size stops it."""

    def __init__(self, max_bytes: int) -> None:
        self.remaining = max_bytes

    def copy(self, info: zipfile.ZipInfo, source: IO[bytes], sink: IO[bytes]) -> None:
        allowed = min(info.file_size, self.remaining)
        written = 0
        while chunk := source.read(COPY_CHUNK_BYTES):
            written += len(chunk)
            if written > allowed:
                raise UnsafeBundleError(
                    f"refusing to extract bundle entry {_quote(info.filename)}: it unpacks to more than the "
                    f"{info.file_size} bytes it declares"
                )
            sink.write(chunk)
        self.remaining -= written
