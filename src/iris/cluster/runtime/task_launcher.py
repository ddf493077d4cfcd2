"""The compiled task launcher (task_launcher.c): built once per user and source, where a C
compiler is installed, into the user's cache directory.

Starting a task through it costs one exec before the command's instead of two (setpriv and a
shell). Without a compiler, or if the build or its check fails, there is no launcher and the
process runtime starts tasks the way it did before.
"""

from __future__ import annotations

import functools
import hashlib
import logging
import os
import platform
import shutil
import subprocess
import tempfile
import threading
from pathlib import Path

logger = logging.getLogger(__name__)

SOURCE = Path(__file__).with_name("task_launcher.c")
# A compile takes a fraction of a second; a compiler that hangs must not hold up the first task forever.
_COMPILE_TIMEOUT_SECONDS = 60.0
_OPTIMIZE = ["-O2", "-w"]
# Tried in order: the libc-free build where the source has a start for the architecture, then
# the ordinary one.
_BUILDS = (
    [*_OPTIMIZE, "-DIRIS_FREESTANDING", "-static", "-nostdlib", "-ffreestanding", "-fno-stack-protector"],
    _OPTIMIZE,
)


def default_cache_dir() -> Path:
    root = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(root) / "iris"


def launcher_name(source: bytes) -> str:
    """The cached program's name: another source, machine or C library (a home directory shared
    between hosts) gets another file, so a stale or foreign build is never run."""
    host = f"{platform.machine()} {_libc_version()}"
    digest = hashlib.sha256(source + b"\0" + host.encode()).hexdigest()[:16]
    return f"task-launcher-{digest}"


def _libc_version() -> str:
    try:
        return os.confstr("CS_GNU_LIBC_VERSION") or ""
    except (ValueError, OSError):
        return ""  # not glibc


_build_lock = threading.Lock()


@functools.cache
def _cached_launcher() -> str | None:
    return build_launcher(default_cache_dir())


def launcher() -> str | None:
    """The launcher for this process's tasks, built on first use; None when it cannot be."""
    # Tasks started together must not run one compiler each.
    with _build_lock:
        return _cached_launcher()


def build_launcher(cache_dir: Path) -> str | None:
    source = SOURCE.read_bytes()
    target = cache_dir / launcher_name(source)
    if os.access(target, os.X_OK):
        return str(target)
    compiler = shutil.which("cc")
    if compiler is None:
        return None
    try:
        cache_dir.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        logger.info("no task launcher: cannot create %s: %s", cache_dir, e)
        return None
    for flags in _BUILDS:
        if _build(compiler, flags, target):
            return str(target)
    logger.info("no task launcher: %s could not build %s; tasks start without it", compiler, SOURCE)
    return None


def _build(compiler: str, flags: list[str], target: Path) -> bool:
    """Compile to a file of our own and rename it into place once it works: workers starting
    together may all build, and every one of them only ever sees a finished launcher."""
    fd, scratch = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}-")
    os.close(fd)
    try:
        built = subprocess.run(
            [compiler, *flags, "-o", scratch, str(SOURCE)],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            timeout=_COMPILE_TIMEOUT_SECONDS,
        )
        if built.returncode != 0 or not _works(scratch):
            return False
        os.rename(scratch, target)
        return True
    except (OSError, subprocess.SubprocessError):
        return False
    finally:
        if os.path.exists(scratch):
            os.unlink(scratch)


def _works(path: str) -> bool:
    """Whether the program runs a command under its parent and refuses under another one (a
    build that compiles can still crash: a cache on a noexec mount, a foreign start routine)."""
    command = ["/bin/sh", "sh", "-c", "exit 7"]
    run = functools.partial(
        subprocess.run, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    under_parent = run([path, str(os.getpid()), *command]).returncode
    under_another = run([path, str(os.getppid()), *command]).returncode
    return under_parent == 7 and under_another == 127
