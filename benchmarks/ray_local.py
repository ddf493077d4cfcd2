"""A local Ray head for the benchmarks' Ray side, started and ended like a user would (`ray start
--head`), with every process it leaves behind ended by PID.

Ray is optional (`uv sync --group bench`); `ray_installed()` tells whether the Ray rows can run.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.common import end_descendants, free_port

INSTALL_HINT = "uv sync --group bench"


def ray_installed() -> bool:
    return importlib.util.find_spec("ray") is not None


def ray_env(temp_dir: str) -> dict[str, str]:
    env = dict(os.environ)
    env.update(
        {
            "RAY_TMPDIR": temp_dir,
            # No phoning home: this machine reaches no network beyond the package registries.
            "RAY_USAGE_STATS_ENABLED": "0",
            # Single-node mode, as on a laptop: every Ray process binds and talks on 127.0.0.1
            # instead of the host's network address.
            "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0",
            # A throwaway local cluster; a token would only be one more file to clean up.
            "RAY_AUTH_MODE": "disabled",
            # The benchmarks run under `uv run`; Ray would notice and ship the working directory
            # to every worker, run it through `uv run` there and re-sync the project's
            # environment against that copy: slower than plain Ray and harmful to the venv.
            "RAY_ENABLE_UV_RUN_RUNTIME_ENV": "0",
        }
    )
    return env


def apply_ray_env() -> None:
    """Give this process (a Ray client) the same settings as the Ray processes it talks to."""
    os.environ.update({k: v for k, v in ray_env("").items() if k.startswith("RAY_") and k != "RAY_TMPDIR"})


def ray_command() -> list[str]:
    script = Path(sys.executable).with_name("ray")
    return [str(script)] if script.exists() else [sys.executable, "-m", "ray.scripts.scripts"]


class RayHead:
    """`ray start --head` on free ports; `stop()` ends every process it started, by PID.

    Requires the calling process to be a child subreaper (`become_subreaper()`): `ray start`
    exits at once and its daemons would otherwise be re-parented out of reach.
    """

    def __init__(self) -> None:
        # Short: Ray puts unix sockets under it, and socket paths are limited to 107 bytes.
        self.temp_dir = tempfile.mkdtemp(prefix="irb-", dir="/tmp")
        self.env = ray_env(self.temp_dir)
        self.dashboard_port = free_port()
        self.gcs_port = free_port()
        self.dashboard_url = f"http://127.0.0.1:{self.dashboard_port}"
        self._existing: set[int] = set()

    def command(self) -> list[str]:
        return [
            *ray_command(),
            "start",
            "--head",
            "--port",
            str(self.gcs_port),
            "--dashboard-host",
            "127.0.0.1",
            "--dashboard-port",
            str(self.dashboard_port),
            "--ray-client-server-port",
            str(free_port()),
            "--dashboard-agent-listen-port",
            str(free_port()),
            "--disable-usage-stats",
            "--temp-dir",
            self.temp_dir,
        ]

    def start(self, timeout: float = 90.0) -> float:
        """Start the head; returns the seconds `ray start` took."""
        import psutil

        self._existing = {p.pid for p in psutil.Process().children(recursive=True)}
        began = time.perf_counter()
        result = subprocess.run(
            self.command(), env=self.env, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=timeout
        )
        if result.returncode != 0:
            tail = " | ".join((result.stderr or result.stdout).strip().splitlines()[-5:])
            raise RuntimeError(f"ray start failed ({result.returncode}): {tail}")
        return time.perf_counter() - began

    def job_client(self):
        from ray.job_submission import JobSubmissionClient

        return JobSubmissionClient(self.dashboard_url)

    def stop(self) -> None:
        # Twice: a daemon killed in the first sweep may orphan workers it was still starting.
        for _ in range(2):
            end_descendants(grace_s=2.0, keep=self._existing)
        shutil.rmtree(self.temp_dir, ignore_errors=True)

    def __enter__(self) -> RayHead:
        try:
            self.start()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc_info) -> None:
        self.stop()
