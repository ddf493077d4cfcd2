"""Helpers shared by the runtime tests."""

from __future__ import annotations

import textwrap
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import psutil

from iris.cluster.runtime.types import ContainerHandle
from iris.time import wait_until

T = TypeVar("T")
CreateContainer = Callable[..., ContainerHandle]

MIB = 1024 * 1024

SLEEPER_READY = """
import time
print("ready", flush=True)
time.sleep(600)
"""


def py(code: str) -> list[str]:
    return ["python3", "-c", textwrap.dedent(code)]


def poll_until(check: Callable[[], T | None], what: str, timeout: float = 20.0) -> T:
    try:
        return wait_until(check, timeout, 0.02, what)  # type: ignore[arg-type]
    except TimeoutError as exc:
        raise AssertionError(str(exc)) from None


def lines(handle: ContainerHandle, source: str) -> list[str]:
    return [line.data for line in handle.logs() if line.source == source]


def wait_for_line(handle: ContainerHandle, text: str) -> None:
    poll_until(lambda: any(line.data == text for line in handle.logs()), f"log line {text!r}")


def is_alive(proc: psutil.Process) -> bool:
    try:
        return proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def read_pid(path: Path) -> psutil.Process:
    pid = poll_until(lambda: path.read_text() if path.exists() else None, f"pid file {path.name}")
    return psutil.Process(int(pid))


def write_pid_code(name: str, pid_expr: str = "os.getpid()") -> str:
    """Code that atomically writes a pid file into the cwd, so readers never see it half-written."""
    return f"pathlib.Path('{name}.tmp').write_text(str({pid_expr})); os.replace('{name}.tmp', '{name}')"
