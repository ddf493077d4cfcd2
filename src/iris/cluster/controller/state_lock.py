"""One controller per state directory.

A controller keeps caches of its SQLite state in memory, so a second controller on the same
directory would silently undo the first one's writes. The lock is a `flock` on a file in the
directory: the kernel drops it when the process ends, however it ends, so a SIGKILLed controller
never leaves a stale lock behind.
"""

from __future__ import annotations

import fcntl
import os
from pathlib import Path

LOCK_FILE = "controller.lock"


class StateDirInUse(RuntimeError):
    """Another live controller holds the state directory."""


class StateDirLock:
    def __init__(self, state_dir: Path):
        self._path = state_dir / LOCK_FILE
        self._fd: int | None = os.open(self._path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            fcntl.flock(self._fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(self._fd, 32, 0).decode(errors="replace").strip() or "unknown"
            self.release()
            raise StateDirInUse(
                f"another controller (pid {holder}) is running on the state directory {state_dir}; "
                "stop it first, or give this controller a state directory of its own"
            ) from None
        os.ftruncate(self._fd, 0)
        os.pwrite(self._fd, f"{os.getpid()}\n".encode(), 0)

    def release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
