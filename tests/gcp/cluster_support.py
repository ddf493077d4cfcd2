"""What the GCP cluster tests share: a cluster config over the fake, the `iris` CLI, and a relay that
lets a controller running on a fake VM (a namespace host) call the fake APIs, which listen on the
test host's loopback only."""

from __future__ import annotations

import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import yaml
from fakes.gcp import FakeGcp
from smoke_support import RunningIris, stop_group

IRIS = [sys.executable, "-m", "iris.cli.main"]
COMMAND_TIMEOUT_S = 240.0
REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "examples" / "eu-west4.yaml"
# What examples/eu-west4.yaml names.
CLUSTER = "eu-west4"
GROUP = "tpu_v5e_16"
# TPU chips of one slice of GROUP (v5litepod-16), what zone quotas are counted in.
V5E_16_CHIPS = 16
ZONES = ["europe-west4-a", "europe-west4-b"]
LABEL_PREFIX = "iris-euw4"
CONTROLLER_VM = f"{LABEL_PREFIX}-controller"
CONTROLLER_PORT = 10000


class ApiRelay:
    """Accepts TCP connections on `listen_host` (an address the namespace hosts reach) and pipes
    each to 127.0.0.1:`target_port`."""

    def __init__(self, listen_host: str, target_port: int):
        self._target_port = target_port
        self._server = socket.create_server((listen_host, 0))
        self.address = f"{listen_host}:{self._server.getsockname()[1]}"
        self._connections: list[socket.socket] = []
        self._lock = threading.Lock()
        threading.Thread(target=self._accept, name="api-relay", daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._server.accept()
            except OSError:
                return
            upstream = socket.create_connection(("127.0.0.1", self._target_port))
            with self._lock:
                self._connections += [client, upstream]
            threading.Thread(target=_pipe, args=(client, upstream), daemon=True).start()
            threading.Thread(target=_pipe, args=(upstream, client), daemon=True).start()

    def close(self) -> None:
        self._server.close()
        with self._lock:
            for connection in self._connections:
                connection.close()


def _pipe(source: socket.socket, sink: socket.socket) -> None:
    try:
        while data := source.recv(65536):
            sink.sendall(data)
        sink.shutdown(socket.SHUT_WR)
    except OSError:
        return


def controller_gcloud_env(fake: FakeGcp, relay: ApiRelay, home: Path) -> dict[str, str]:
    """The gcloud settings a controller on a fake VM runs with: the fake's, reached through the relay."""
    env = fake.gcloud_env(home)
    relayed = {key: value.replace(fake.url, f"http://{relay.address}") for key, value in env.items()}
    return {key: value for key, value in relayed.items() if key.startswith("CLOUDSDK_") or key == "HOME"}


def cluster_config(tmp_path: Path, controller_env: dict[str, str]) -> dict[str, Any]:
    """examples/eu-west4.yaml as a user would start it, with what this machine cannot give it
    replaced: workers and the controller run from this checkout's Python environment instead of
    images, bundles go to a directory every namespace host sees (they share this filesystem) instead
    of GCS, and timeouts are short so that tests are quick. Its project comes from IRIS_GCP_PROJECT."""
    config = yaml.safe_load(EXAMPLE.read_text())
    config["storage"] = {"bundle_prefix": f"file://{tmp_path}/bundles"}
    config["controller"]["gcp"]["port"] = CONTROLLER_PORT
    defaults = config["defaults"]
    defaults["bootstrap"].update(python_env=sys.prefix, runtime="process", env_vars=controller_env)
    defaults["ssh"] = {"connect_timeout": "20s"}
    defaults["timeouts"] = {
        "boot_timeout": "90s",
        "init_timeout": "90s",
        "ssh_poll_interval": "3s",
        "heartbeat_interval": "1s",
        "worker_timeout": "20s",
        "kill_grace_period": "2s",
    }
    defaults["autoscaler"] = {
        "evaluation_interval": "1s",
        "scale_up_delay": "0s",
        "scale_down_delay": "10m",
        # Longer than one zone's stockout takes to show, so that both zones are blocked at once.
        "quota_backoff": "60s",
    }
    return config


def write_config(config: dict[str, Any], path: Path) -> Path:
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return path


def iris(*args: str, cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    env = {**env}
    env.pop("IRIS_CONTROLLER_URL", None)
    return subprocess.run(
        [*IRIS, *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=COMMAND_TIMEOUT_S,
        check=False,
    )


@contextmanager
def running_iris(*args: str, cwd: Path, env: dict[str, str]) -> Iterator[RunningIris]:
    """Start `iris ARGS` in its own process group, stopped when the block ends."""
    env = {**env}
    env.pop("IRIS_CONTROLLER_URL", None)
    process = subprocess.Popen(
        [*IRIS, *args], cwd=cwd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
        start_new_session=True,
    )  # fmt: skip
    try:
        yield RunningIris(process)
    finally:
        stop_group(process)


def ok(result: subprocess.CompletedProcess[str]) -> str:
    assert result.returncode == 0, (
        f"exit {result.returncode}\nstdout:\n{result.stdout}\nstderr:\n{result.stderr}"
    )
    return result.stdout


def gcloud_settings(env: dict[str, str]) -> dict[str, str]:
    """The part of a gcloud environment that points gcloud at the fake (for os.environ)."""
    return {key: value for key, value in env.items() if key.startswith("CLOUDSDK_") or key == "HOME"}
