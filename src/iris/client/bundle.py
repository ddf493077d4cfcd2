"""Workspace bundles: a deterministic zip of the user's workspace, addressed by its SHA-256.

The same tree always produces the same bytes (sorted entries, fixed timestamps, normalised
permissions), so resubmitting unchanged code uploads nothing new and workers reuse their cache.
"""

from __future__ import annotations

import hashlib
import io
import logging
import os
import shutil
import stat
import time
import zipfile
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

import pathspec

from iris.bundle_format import (
    COPY_CHUNK_BYTES,
    DEFAULT_MAX_BUNDLE_BYTES,
    is_within,
    zip_entry,
)

logger = logging.getLogger(__name__)

# Never useful on a worker, often huge, and rebuilt there anyway.
ALWAYS_EXCLUDED_NAMES = frozenset({".git", ".venv", "__pycache__", ".iris"})
ALWAYS_EXCLUDED_SUFFIXES = (".pyc",)

_LARGEST_ENTRIES_SHOWN = 5


class BundleTooLargeError(ValueError):
    """The workspace is bigger than the bundle limit; the message lists what to exclude."""


@dataclass(frozen=True)
class Bundle:
    blob: bytes
    sha256: str
    file_count: int
    size_bytes: int  # length of `blob`, the bytes uploaded and stored


@dataclass(frozen=True)
class _IgnoreFile:
    base: str  # directory holding the .gitignore, relative to the workspace ("" for the root)
    spec: pathspec.GitIgnoreSpec


@dataclass(frozen=True)
class _WorkspaceFile:
    arcname: str
    path: Path
    size: int
    executable: bool
    # (device, inode, mtime, ctime): any write, rename over or chmod changes the ctime
    identity: tuple[int, int, int, int]


def _read_ignore_file(children: list[os.DirEntry], base: str) -> _IgnoreFile | None:
    """The directory's .gitignore, found in its listing: a client walks its workspace on every
    submit, and a stat per directory for a file most directories lack is a system call apiece."""
    ignore = next((entry for entry in children if entry.name == ".gitignore"), None)
    if ignore is None or not ignore.is_file():
        return None
    lines = Path(ignore.path).read_text(encoding="utf-8", errors="replace").splitlines()
    return _IgnoreFile(base, pathspec.GitIgnoreSpec.from_lines(lines))


def _is_ignored(ignore_files: tuple[_IgnoreFile, ...], rel: str, is_dir: bool) -> bool:
    """Apply .gitignore files from the root down; a deeper file overrides a shallower one."""
    ignored = False
    for ignore_file in ignore_files:
        local = rel[len(ignore_file.base) + 1 :] if ignore_file.base else rel
        result = ignore_file.spec.check_file(f"{local}/" if is_dir else local)
        if result.include is not None:
            ignored = result.include
    return ignored


def _is_always_excluded(name: str) -> bool:
    return name in ALWAYS_EXCLUDED_NAMES or name.endswith(ALWAYS_EXCLUDED_SUFFIXES)


def _listing(directory: Path) -> list[os.DirEntry]:
    with os.scandir(directory) as entries:
        return sorted(entries, key=lambda entry: entry.name)


class _Root:
    """The workspace's real path and (device, inode), read when a symlink is met: only a symlink
    can lead out of the workspace or back up into it."""

    def __init__(self, workspace: Path) -> None:
        self._workspace = workspace
        self._real: Path | None = None
        self.identity: tuple[int, int] | None = None

    @property
    def real(self) -> Path:
        if self._real is None:
            self._real = self._workspace.resolve()
            info = self._real.stat()
            self.identity = (info.st_dev, info.st_ino)
        return self._real


def _collect_files(workspace: Path, top: list[os.DirEntry]) -> list[_WorkspaceFile]:
    """The files under `workspace`, whose listing `top` the caller has read."""
    root = _Root(workspace)
    files: list[_WorkspaceFile] = []
    skipped_links: list[str] = []
    # (directory as reached, its listing once read, its path relative to the workspace, .gitignores
    # in force, (device, inode) of the directories above it but the root, to stop symlink cycles)
    pending: list[tuple[Path, list[os.DirEntry] | None, str, tuple[_IgnoreFile, ...], frozenset[tuple[int, int]]]] = [
        (workspace, top, "", (), frozenset())
    ]
    while pending:
        directory, children, rel_dir, ignore_files, ancestors = pending.pop()
        if children is None:
            children = _listing(directory)
        own_ignore = _read_ignore_file(children, rel_dir)
        if own_ignore is not None:
            ignore_files = (*ignore_files, own_ignore)
        for entry in children:
            if _is_always_excluded(entry.name):
                continue
            rel = f"{rel_dir}/{entry.name}" if rel_dir else entry.name
            path = Path(entry.path)
            if entry.is_symlink():
                target = path.resolve()
                if not is_within(target, root.real) or not target.exists():
                    skipped_links.append(rel)
                    continue
            try:
                info = path.stat()
            except OSError as exc:
                raise OSError(
                    f"cannot read workspace entry {rel}: {exc.strerror}; add it to .gitignore"
                ) from exc
            is_dir = stat.S_ISDIR(info.st_mode)
            if not is_dir and not stat.S_ISREG(info.st_mode):
                continue  # sockets, fifos and devices cannot be shipped
            if _is_ignored(ignore_files, rel, is_dir):
                continue
            if is_dir:
                place = (info.st_dev, info.st_ino)
                if place not in ancestors and place != root.identity:
                    pending.append((path, None, rel, ignore_files, ancestors | {place}))
                continue
            identity = (info.st_dev, info.st_ino, info.st_mtime_ns, info.st_ctime_ns)
            files.append(_WorkspaceFile(rel, path, info.st_size, bool(info.st_mode & 0o111), identity))
    if skipped_links:
        # One line, not one per link: a workspace such as a home directory can hold thousands.
        examples = ", ".join(skipped_links[:3]) + (", ..." if len(skipped_links) > 3 else "")
        logger.warning(
            "bundle: skipped %d symlink(s) pointing outside the workspace or nowhere (%s)", len(skipped_links), examples
        )
    files.sort(key=lambda item: item.arcname)
    return files


def _format_size(size: int) -> str:
    if size < 1024:
        return f"{size} B"
    value = size / 1024
    for unit in ("KiB", "MiB"):
        if value < 1024:
            return f"{value:.1f} {unit}"
        value /= 1024
    return f"{value:.1f} GiB"


def _largest_entries(files: list[_WorkspaceFile]) -> list[tuple[str, int]]:
    """The biggest files and directories, leaving out directories that hold a single entry.

    A directory with one non-empty child is as big as that child, so listing both says nothing new;
    the deepest path that still names the bulk is the one worth putting in .gitignore.
    """
    dir_sizes: dict[str, int] = defaultdict(int)
    dir_children: dict[str, set[str]] = defaultdict(set)
    for item in files:
        if item.size == 0:
            continue
        parts = PurePosixPath(item.arcname).parts
        for depth in range(1, len(parts)):
            directory = "/".join(parts[:depth])
            dir_sizes[directory] += item.size
            dir_children[directory].add(parts[depth])
    candidates = [(item.arcname, item.size) for item in files]
    candidates += [(f"{name}/", size) for name, size in dir_sizes.items() if len(dir_children[name]) > 1]
    candidates.sort(key=lambda pair: (-pair[1], pair[0]))
    return candidates[:_LARGEST_ENTRIES_SHOWN]


def _too_large_message(workspace: Path, files: list[_WorkspaceFile], total: int, max_bytes: int) -> str:
    largest = _largest_entries(files)
    width = max(len(name) for name, _ in largest)
    lines = [
        (
            f"workspace {workspace} holds {_format_size(total)} in {len(files)} files, over the "
            f"{_format_size(max_bytes)} bundle limit. Largest files and directories:"
        )
    ]
    lines += [f"  {name:<{width}}  {_format_size(size)}" for name, size in largest]
    lines.append(
        f"Add what the job does not need to {workspace / '.gitignore'} (for example {largest[0][0]!r}), "
        "or bundle a smaller directory (iris run --workspace DIR, or workspace= in the Python API); large "
        "data belongs in storage the job reads at run time."
    )
    return "\n".join(lines)


def build_bundle(workspace: Path, max_bytes: int = DEFAULT_MAX_BUNDLE_BYTES) -> Bundle:
    """Zip `workspace` (honouring .gitignore files) into a content-addressed bundle.

    `max_bytes` bounds the total size of the files before compression, so an oversized workspace is
    rejected before any of it is read.
    """
    workspace = Path(workspace)
    return _zip_files(workspace, _workspace_files(workspace), max_bytes)


def _workspace_files(workspace: Path) -> list[_WorkspaceFile]:
    # The listing answers both checks: a client walks its workspace on every submit.
    try:
        top = _listing(workspace)
    except FileNotFoundError:
        raise FileNotFoundError(f"workspace {workspace} does not exist") from None
    except NotADirectoryError:
        raise NotADirectoryError(f"workspace {workspace} is not a directory") from None
    return _collect_files(workspace, top)


def _zip_files(workspace: Path, files: list[_WorkspaceFile], max_bytes: int) -> Bundle:
    total = sum(item.size for item in files)
    if total > max_bytes:
        raise BundleTooLargeError(_too_large_message(workspace, files, total, max_bytes))
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        for item in files:
            try:
                with (
                    item.path.open("rb") as source,
                    archive.open(zip_entry(item.arcname, item.size, item.executable), "w") as sink,
                ):
                    shutil.copyfileobj(source, sink, COPY_CHUNK_BYTES)
            except PermissionError as exc:
                raise PermissionError(
                    f"cannot read workspace file {item.arcname}: permission denied; add it to .gitignore"
                ) from exc
    blob = buffer.getvalue()
    return Bundle(
        blob=blob, sha256=hashlib.sha256(blob).hexdigest(), file_count=len(files), size_bytes=len(blob)
    )


# A file changed this shortly before a bundle was read could change again within the same
# timestamp tick of its filesystem without its ctime moving: such a bundle is not reused.
SETTLED_NS = 1_000_000_000


class WorkspaceBundles:
    """`build_bundle` for a client that submits many jobs from one workspace: the last bundle is
    reused while the workspace holds the same files (same paths, sizes, modes, inodes and change
    times) and none of them had changed within SETTLED_NS before it was read. The tree is walked
    each time, so .gitignore edits and new or deleted files are seen; only the zipping is saved."""

    def __init__(self, settled_ns: int = SETTLED_NS) -> None:
        self._settled_ns = settled_ns
        self._last: tuple[tuple, Bundle] | None = None

    def build(self, workspace: Path, max_bytes: int = DEFAULT_MAX_BUNDLE_BYTES) -> Bundle:
        workspace = Path(workspace)
        reading_ns = time.time_ns()
        files = _workspace_files(workspace)
        # Files are known by their inodes, so the same signature from another directory (a
        # symlinked workspace retargeted) still means the same bytes under the same names.
        signature = (
            max_bytes,
            tuple((item.arcname, item.size, item.executable, item.identity) for item in files),
        )
        last = self._last
        if last is not None and last[0] == signature:
            return last[1]
        bundle = _zip_files(workspace, files, max_bytes)
        settled = all(max(item.identity[2:]) < reading_ns - self._settled_ns for item in files)
        self._last = (signature, bundle) if settled else None
        return bundle
