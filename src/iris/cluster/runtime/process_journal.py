"""The record of a ProcessRuntime's containers that lets a later worker process find and kill what
an earlier one left running: one append-only journal per runtime, `<containers_dir>/<hex>.journal`.

A container gets a line before anything is forked for it, one with its pid and create time once
forked, and one when it was cleaned up. A file per container (created, rewritten with the pid,
deleted) cost a trivial task more than anything else the runtime did on the file system: ext4
allocates each new inode by scanning past the ones freed moments before. Lines are appended
without fsync, as the files were written; a line torn by a crash is skipped when read, which for
a pid line leaves the container recorded without its pid: its processes are still found by
their marker (CONTAINER_MARKER_ENV in process.py).
"""

from __future__ import annotations

import json
import os
import threading
import uuid
from pathlib import Path

JOURNAL_SUFFIX = ".journal"
# The journal is rewritten with only its open containers once this many have ended since the last
# rewrite (and they outnumber the open ones), so that it stays small on a worker that runs for weeks.
COMPACT_AFTER_ENDED = 1024


class ContainerJournal:
    """This runtime's journal, created with its first container. Thread-safe."""

    def __init__(self, containers_dir: Path) -> None:
        self.path = containers_dir / f"{uuid.uuid4().hex}{JOURNAL_SUFFIX}"
        self._lock = threading.Lock()
        self._fd: int | None = None
        # Each open container's latest line: what a rewrite keeps.
        self._open: dict[str, bytes] = {}
        self._ended_since_rewrite = 0

    def started(self, container_id: str) -> None:
        self._append(container_id, {"id": container_id})

    def forked(self, container_id: str, pid: int, create_time: float) -> None:
        self._append(container_id, {"id": container_id, "pid": pid, "create_time": create_time})

    def ended(self, container_id: str) -> None:
        with self._lock:
            if self._open.pop(container_id, None) is None:
                return
            self._write(_line({"id": container_id, "ended": True}))
            self._ended_since_rewrite += 1
            ended = self._ended_since_rewrite
            if ended >= COMPACT_AFTER_ENDED and ended > len(self._open):
                self._rewrite()

    def _append(self, container_id: str, record: dict) -> None:
        line = _line(record)
        with self._lock:
            self._open[container_id] = line
            self._write(line)

    def _write(self, line: bytes) -> None:
        if self._fd is None:
            self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o644)
        os.write(self._fd, line)

    def _rewrite(self) -> None:
        """Replace the journal with one of the open containers' lines (a rename: a reader sees
        the old file or the new one, never a part of either). The scratch file is named as a
        journal: one left by a crash holds only containers the journal also has, and goes with it."""
        scratch = self.path.with_name(f"{self.path.stem}-rewrite{JOURNAL_SUFFIX}")
        fd = os.open(scratch, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o644)
        try:
            os.write(fd, b"".join(self._open.values()))
            os.replace(scratch, self.path)
        except BaseException:
            os.close(fd)
            raise
        if self._fd is not None:
            os.close(self._fd)
        self._fd = fd
        self._ended_since_rewrite = 0


def _line(record: dict) -> bytes:
    return json.dumps(record).encode() + b"\n"


def open_containers(path: Path) -> dict[str, dict]:
    """The containers a journal records as started and not ended, each with its latest record
    (`pid` and `create_time` once it was forked)."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return {}
    containers: dict[str, dict] = {}
    for raw in data.splitlines():
        try:
            record = json.loads(raw)
            container_id = record["id"]
        except (ValueError, KeyError, TypeError):
            continue  # torn by a crash mid-append
        if record.get("ended"):
            containers.pop(container_id, None)
        else:
            containers[container_id] = record
    return containers
