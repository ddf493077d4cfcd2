"""What the GCP cluster tests share: a cluster config over the fake, the `iris` CLI, and a relay that
lets a controller running on a fake VM (a namespace host) call the fake APIs, which listen on the
test host's loopback only."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any

import yaml
from fakes.gcp import FakeGcp

from iris.time import wait_until

IRIS = [sys.executable, "-m", "iris.cli.main"]
COMMAND_TIMEOUT_S = 240.0
REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "examples" / "eu-west4.yaml"
SMOKE_TEST = REPO / "scripts" / "smoke-test.py"
SMOKE_JOB_TIMEOUT_S = 300
# Start, a slice from zero, a second one in parallel and four validation jobs, on a loaded machine.
SMOKE_PAUSE_TIMEOUT_S = 540
READER_JOIN_TIMEOUT_S = 10
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


class RunningIris:
    """A command left running; the lines of one of its outputs (stderr unless told) as they come."""

    def __init__(self, process: subprocess.Popen[str], stream: IO[str] | None = None):
        self.process = process
        self._stream = stream or process.stderr
        self._lines: list[str] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self._stream is not None
        for line in self._stream:
            self._lines.append(line.rstrip("\n"))

    def lines(self) -> list[str]:
        return list(self._lines)

    def done(self) -> None:
        """Wait until everything the command printed before it exited has been read."""
        self._reader.join(READER_JOIN_TIMEOUT_S)


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
        _stop_group(process)


def _stop_group(process: subprocess.Popen[str]) -> None:
    """SIGTERM to the process group a command leads, SIGKILL if it is still there after a while."""
    os.killpg(process.pid, signal.SIGTERM)
    try:
        process.wait(30)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()


class SmokeTestRun:
    """scripts/smoke-test.py with --pause-before-cleanup, started in its own process group: the
    cluster it validated stays up until `finish()` lets it go on to its cleanup."""

    def __init__(self, config: Path, prefix: str, log_dir: Path, cwd: Path, env: dict[str, str]):
        env = {**env}
        env.pop("IRIS_CONTROLLER_URL", None)
        self.config_file = log_dir / "cluster.yaml"
        self.process = subprocess.Popen(
            [sys.executable, str(SMOKE_TEST), "--config", str(config), "--prefix", prefix, "--no-build-images",
             "--job-timeout", str(SMOKE_JOB_TIMEOUT_S), "--log-dir", str(log_dir), "--pause-before-cleanup"],
            cwd=cwd, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
            start_new_session=True,
        )  # fmt: skip
        self._output = RunningIris(self.process, self.process.stdout)

    def output(self) -> str:
        return "\n".join(self._output.lines())

    def wait_until_paused(self) -> None:
        def paused() -> bool:
            if self.process.poll() is not None:
                raise AssertionError(f"the smoke test ended (exit {self.process.returncode}):\n{self.output()}")
            return "press Enter to clean up" in self.output()

        try:
            wait_until(paused, SMOKE_PAUSE_TIMEOUT_S, 0.5, "the smoke test to finish its jobs")
        except TimeoutError:
            raise AssertionError(f"the smoke test did not finish its jobs:\n{self.output()}") from None

    def finish(self) -> subprocess.Popen[str]:
        """Let it clean up and wait for it to exit."""
        assert self.process.stdin is not None
        self.process.stdin.write("\n")
        self.process.stdin.close()
        self.process.wait(COMMAND_TIMEOUT_S)
        self._output.done()
        return self.process

    def stop(self) -> None:
        if self.process.poll() is None:
            _stop_group(self.process)


def ok(result: subprocess.CompletedProcess[str]) -> str:
    assert result.returncode == 0, (
        f"exit {result.returncode}\nstdout:\n{result.stdout}\nstderr:\n{result.stderr}"
    )
    return result.stdout


def gcloud_settings(env: dict[str, str]) -> dict[str, str]:
    """The part of a gcloud environment that points gcloud at the fake (for os.environ)."""
    return {key: value for key, value in env.items() if key.startswith("CLOUDSDK_") or key == "HOME"}
