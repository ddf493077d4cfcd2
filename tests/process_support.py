"""Stopping the daemons a test started as child processes."""

from __future__ import annotations

import signal
import subprocess
from collections.abc import Iterable


def stop_processes(processes: Iterable[subprocess.Popen], grace_s: float) -> None:
    """SIGTERM every process still running, then wait for each; one that is still there after
    `grace_s` is SIGKILLed. All are signalled first so that they shut down side by side."""
    processes = list(processes)
    for process in processes:
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
    for process in processes:
        try:
            process.wait(grace_s)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
