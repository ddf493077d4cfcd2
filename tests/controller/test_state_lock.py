"""One controller per state directory: a second one is refused with the first one's pid, and the
directory is free again once the first stops or is killed."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from iris.cluster.controller.main import ControllerDaemon
from iris.cluster.controller.settings import DaemonSettings
from iris.cluster.controller.state_lock import StateDirInUse


def _settings(root: Path) -> DaemonSettings:
    return DaemonSettings.from_config(
        state_dir=root / "state", bundle_prefix=f"file://{root}/bundles", host="127.0.0.1", port=0
    )


def test_controller_second_on_same_state_dir_is_refused_until_the_first_stops(tmp_path: Path) -> None:
    first = ControllerDaemon(_settings(tmp_path))
    try:
        with pytest.raises(StateDirInUse, match=rf"another controller \(pid {os.getpid()}\) is running"):
            ControllerDaemon(_settings(tmp_path))
    finally:
        first.stop()

    second = ControllerDaemon(_settings(tmp_path))
    second.stop()


def test_controller_killed_holder_leaves_the_state_dir_free(tmp_path: Path) -> None:
    (tmp_path / "state").mkdir()
    holder = subprocess.Popen(
        [
            sys.executable, "-c",
            "import sys; from pathlib import Path; from iris.cluster.controller.state_lock import StateDirLock; "
            f"lock = StateDirLock(Path({str(tmp_path / 'state')!r})); print('held', flush=True); sys.stdin.read()",
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )  # fmt: skip
    try:
        assert holder.stdout is not None and holder.stdout.readline() == "held\n"
        with pytest.raises(StateDirInUse, match=rf"pid {holder.pid}\)"):
            ControllerDaemon(_settings(tmp_path))
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait(30)

    daemon = ControllerDaemon(_settings(tmp_path))
    daemon.stop()
