"""The bundle format both ends agree on: a zip of the workspace named by its SHA-256.

Clients build bundles (`iris.client.bundle`), the controller stores them and workers unpack
them; this module is the part all of them share: digest validation, entry shape and safe extraction.
"""

from __future__ import annotations

import io
import os
import re
import shutil
import stat
import zipfile
from pathlib import Path, PurePosixPath

DEFAULT_MAX_BUNDLE_BYTES = 64 * 1024 * 1024
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
    """A bundle entry would be written outside the extraction directory."""


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


def _safe_target(root: Path, name: str) -> Path:
    parts = PurePosixPath(name).parts
    if not parts or name.startswith("/") or ".." in parts:
        raise UnsafeBundleError(f"refusing to extract bundle entry {name!r}: it would land outside {root}")
    target = root.joinpath(*parts)
    # A symlink already in dest could redirect the write; the entry itself is replaced, not followed.
    parent = target.parent.resolve()
    if not is_within(parent, root):
        raise UnsafeBundleError(
            f"refusing to extract bundle entry {name!r}: its directory resolves to {parent}, outside {root}"
        )
    return target


def extract_bundle(blob_or_zip_path: bytes | str | os.PathLike[str], dest: Path) -> int:
    """Unpack a bundle into `dest`, restoring executable bits; returns the number of files written.

    Every entry is checked before anything is written, so a malicious bundle leaves `dest` untouched.
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
    with zipfile.ZipFile(source) as archive:
        plan = [(info, _safe_target(root, info.filename)) for info in archive.infolist()]
        for info, target in plan:
            if info.is_dir():
                target.mkdir(parents=True, exist_ok=True)
                continue
            target.parent.mkdir(parents=True, exist_ok=True)
            # Replace rather than overwrite in place, so an existing symlink or hard link is never
            # written through.
            target.unlink(missing_ok=True)
            with archive.open(info) as entry, target.open("wb") as sink:
                shutil.copyfileobj(entry, sink, COPY_CHUNK_BYTES)
            executable = (info.external_attr >> 16) & 0o111
            target.chmod(0o755 if executable else 0o644)
            written += 1
    return written
