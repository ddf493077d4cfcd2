"""Task work directories, recycled: once the controller has taken in an attempt's end, its
directory is emptied and kept, and the next attempt's directory is a kept one renamed into place.

Making a directory allocates an inode, and that was the costliest call a trivial task made: on
ext4 without a journal every allocation steps over each inode of its group freed in the last
minutes (`recently_deleted`), so a worker that made a directory per attempt and removed it later
paid more for each new one the faster it ran (0.15-0.9 ms per directory measured on such a host,
against ~25 µs for the two renames of a recycled one). Removing them promptly also keeps a busy
worker from holding ten minutes of finished attempts' directories (300,000 at 500 jobs/s).
"""

from __future__ import annotations

import contextlib
import logging
import os
import secrets
import shutil
import threading
from itertools import count
from pathlib import Path

from iris.cluster.reused_threads import ReusedThreads

logger = logging.getLogger(__name__)

SPARES_DIRNAME = ".spare"
# Kept directories beyond this many are removed: enough for the attempts a worker ends between
# two heartbeats, and a bounded number of inodes left behind when the worker stops.
MAX_SPARES = 256


class Workdirs:
    """The work directories of the attempts under `root`; the kept ones wait in `root/.spare`."""

    def __init__(self, root: Path, max_spares: int = MAX_SPARES) -> None:
        self.root = root
        self._spares_dir = root / SPARES_DIRNAME
        self._spares_dir.mkdir(parents=True, exist_ok=True)
        self._max_spares = max_spares
        # Held across the renames into and out of `.spare`, so a name is never taken twice.
        self._lock = threading.Lock()
        self._spares: list[Path] = []
        self._names = (f"{secrets.token_hex(4)}-{n}" for n in count())
        self._emptiers = ReusedThreads("workdir-emptier")
        # A previous worker's kept directories: empty when kept, but a task it left running may
        # have written to one since, so each is checked like a released directory.
        for leftover in self._spares_dir.iterdir():
            self.release(leftover)

    @property
    def spares(self) -> int:
        with self._lock:
            return len(self._spares)

    def create(self, path: Path) -> None:
        """Make `path`, a directory under `root`, exist and be empty: a kept directory renamed into
        place, or a new one when none is kept or `path` already exists."""
        with self._lock:
            while self._spares:
                spare = self._spares.pop()
                try:
                    os.rename(spare, path)
                    return
                except FileNotFoundError:
                    continue  # removed by someone else: try the next
                except OSError:
                    # `path` exists and holds something (left by an earlier worker): it is used as it is.
                    self._spares.append(spare)
                    break
        path.mkdir(parents=True, exist_ok=True)

    def release(self, path: Path) -> None:
        """Nothing uses `path` any more: it is kept for a later attempt once empty. An empty one is
        kept at once; emptying one with contents (a task's outputs may be large) or removing one
        that cannot be read is left to a thread of its own, so the caller (the worker's event
        loop, answering a heartbeat) never waits for it."""
        try:
            with os.scandir(path) as entries:
                empty = next(entries, None) is None
        except FileNotFoundError:
            return
        except OSError as exc:
            logger.warning("cannot read work directory %s to recycle it: %s; removing it", path, exc)
            self._emptiers.run(lambda: shutil.rmtree(path, ignore_errors=True))
            return
        if empty:
            self._keep(path)
        else:
            self._emptiers.run(lambda: self._empty_and_keep(path))

    def _empty_and_keep(self, path: Path) -> None:
        try:
            with os.scandir(path) as entries:
                for entry in entries:
                    if entry.is_dir(follow_symlinks=False):
                        shutil.rmtree(entry.path)
                    else:
                        os.unlink(entry.path)
        except OSError as exc:
            # A task may leave what the worker cannot remove piecemeal (read-only directories).
            logger.debug("emptying work directory %s failed (%s); removing it whole", path, exc)
            shutil.rmtree(path, ignore_errors=True)
            return
        self._keep(path)

    def _keep(self, path: Path) -> None:
        with self._lock:
            if len(self._spares) < self._max_spares:
                if path.parent == self._spares_dir:  # a previous worker's: kept where it is
                    self._spares.append(path)
                    return
                spare = self._spares_dir / next(self._names)
                try:
                    os.rename(path, spare)
                except OSError as exc:
                    logger.debug("cannot keep work directory %s: %s", path, exc)
                else:
                    self._spares.append(spare)
                    return
        with contextlib.suppress(OSError):
            os.rmdir(path)
