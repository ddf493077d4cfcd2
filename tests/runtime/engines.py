"""Private Docker and containerd engines for the runtime tests.

Each engine runs on its own socket with its data under the checkout's ignored .iris-test/ (so
images imported or built once are there for the next session) and its sockets and run state in a
short directory under the system temp dir (Unix socket paths are limited to 108 bytes). An engine
already answering on that socket is used as it is and left running; one this session started is
stopped by its PID when the session ends.

No image registry is reachable, so the images come from scripts/ci_setup.sh's debootstrap root
filesystem: `docker import`ed as iris-test-base:<key>, with a pause image for containerd's
sandboxes built on top, and both copied into containerd with `docker save | ctr images import`.
"""

from __future__ import annotations

import hashlib
import io
import os
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest

from iris.time import wait_until

REPO = Path(__file__).resolve().parents[2]
STATE_DIR = REPO / ".iris-test"
RUN_DIR = Path(tempfile.gettempdir()) / f"iris-test-{hashlib.sha256(str(REPO).encode()).hexdigest()[:10]}"
BASE_TARBALL = STATE_DIR / "images" / "iris-test-base.tar"
BASE_KEY_FILE = STATE_DIR / "images" / "iris-test-base.key"
CRI_NAMESPACE = "k8s.io"
START_TIMEOUT_S = 60.0
STOP_TIMEOUT_S = 30.0

# pause for the sandboxes: sleeps until told to stop and reaps what it inherits in the shared
# process namespace (the shell's wait collects any child).
PAUSE_DOCKERFILE = """FROM {base}
CMD ["/bin/sh", "-c", "trap 'exit 0' TERM INT; while :; do sleep 3600 & wait $!; done"]
"""


class EngineUnavailable(RuntimeError):
    """A component the engine needs is missing or would not start."""


_progress_sink: Callable[[str], None] = print


def show_progress_on(sink: Callable[[str], None]) -> None:
    """Send progress lines to `sink` (conftest: pytest's terminal, which output capture skips)."""
    global _progress_sink
    _progress_sink = sink


def log(message: str) -> None:
    _progress_sink(f"[engines] {message}")


@dataclass
class Daemon:
    name: str
    process: subprocess.Popen[bytes] | None

    def stop(self) -> None:
        """Stop the daemon if this session started it (by its PID; never one found running)."""
        if self.process is None or self.process.poll() is not None:
            return
        self.process.send_signal(signal.SIGTERM)
        try:
            self.process.wait(STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


@dataclass
class DockerEngine:
    url: str
    base_image: str
    pause_image: str
    daemon: Daemon


@dataclass
class ContainerdEngine:
    endpoint: str
    daemon: Daemon


def _binary(name: str) -> str:
    path = shutil.which(name) or shutil.which(name, path="/usr/sbin:/sbin:/usr/bin")
    if path is None:
        raise EngineUnavailable(f"{name} is not installed (scripts/ci_setup.sh installs it)")
    return path


def _require_root() -> None:
    if os.geteuid() != 0:
        raise EngineUnavailable("the engines need root")


def _base_key() -> str:
    """Run scripts/ci_setup.sh (quick when done already) and return its root filesystem's key."""
    setup = subprocess.run([str(REPO / "scripts" / "ci_setup.sh")], capture_output=True, text=True, check=False)
    if setup.returncode != 0 or not BASE_TARBALL.is_file() or not BASE_KEY_FILE.is_file():
        raise EngineUnavailable(f"scripts/ci_setup.sh could not prepare the base image: {setup.stderr.strip()}")
    return BASE_KEY_FILE.read_text().strip()


def _spawn(name: str, argv: list[str], log_path: Path) -> subprocess.Popen[bytes]:
    with open(log_path, "ab") as log_file:
        return subprocess.Popen(
            argv, stdout=log_file, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True
        )


def _wait_ready(name: str, process: subprocess.Popen[bytes], ready, log_path: Path) -> None:
    def check() -> bool:
        if process.poll() is not None:
            tail = log_path.read_text(errors="replace").splitlines()[-5:]
            raise EngineUnavailable(f"{name} exited with code {process.returncode}: {' | '.join(tail)}")
        return ready()

    try:
        wait_until(check, START_TIMEOUT_S, 0.1, f"{name} to answer")
    except TimeoutError as exc:
        process.kill()
        process.wait()
        raise EngineUnavailable(str(exc)) from None


# -- docker ------------------------------------------------------------------------------------


def _docker_ping(url: str) -> bool:
    import docker
    import docker.errors
    import requests.exceptions

    try:
        client = docker.DockerClient(base_url=url, timeout=5)
        try:
            return bool(client.ping())
        finally:
            client.close()
    except (docker.errors.DockerException, requests.exceptions.RequestException):
        return False


@contextmanager
def session_docker_engine(who: str) -> Iterator[DockerEngine]:
    """The checkout's private dockerd (started here unless it already runs), with DOCKER_HOST pointing
    at it while the block runs (`iris build` finds it there); stopped afterwards if this started it.
    Without an engine the test fails in CI and is skipped elsewhere, naming `who` needed it."""
    try:
        engine = start_docker()
    except EngineUnavailable as exc:
        if os.environ.get("CI") == "true":
            pytest.fail(f"{who} need the docker engine: {exc}")
        pytest.skip(f"docker engine: {exc}")
    previous = os.environ.get("DOCKER_HOST")
    os.environ["DOCKER_HOST"] = engine.url
    try:
        yield engine
    finally:
        if previous is None:
            os.environ.pop("DOCKER_HOST", None)
        else:
            os.environ["DOCKER_HOST"] = previous
        engine.daemon.stop()


def start_docker() -> DockerEngine:
    _require_root()
    key = _base_key()
    RUN_DIR.mkdir(parents=True, exist_ok=True)
    socket = RUN_DIR / "docker.sock"
    url = f"unix://{socket}"
    process = None
    if _docker_ping(url):
        log(f"using the dockerd already serving {socket}")
    else:
        dockerd = _binary("dockerd")
        _binary("runc")
        pidfile = RUN_DIR / "docker.pid"
        pidfile.unlink(missing_ok=True)
        data_root = STATE_DIR / "docker"
        data_root.mkdir(parents=True, exist_ok=True)
        log_path = STATE_DIR / "dockerd.log"
        log(f"starting dockerd on {socket}")
        # No bridge and no iptables: tests use the host network, and this daemon must not touch
        # the host's docker0 or firewall in case another engine runs on the machine.
        process = _spawn(
            "dockerd",
            [dockerd, "--data-root", str(data_root), "--exec-root", str(RUN_DIR / "docker-exec"), "--host", url,
             "--pidfile", str(pidfile), "--bridge=none", "--iptables=false", "--ip6tables=false"],
            log_path,
        )
        _wait_ready("dockerd", process, lambda: _docker_ping(url), log_path)
    daemon = Daemon("dockerd", process)
    try:
        base, pause = _docker_images(url, key)
    except Exception:
        daemon.stop()
        raise
    return DockerEngine(url=url, base_image=base, pause_image=pause, daemon=daemon)


def _docker_images(url: str, key: str) -> tuple[str, str]:
    import docker
    import docker.errors

    client = docker.DockerClient(base_url=url, timeout=600)
    base, pause = f"iris-test-base:{key}", f"iris-test-pause:{key}"
    try:
        # Every session rebuilds the test images; what the rebuilds replaced only takes disk.
        client.api.prune_images(filters={"dangling": True})
        try:
            client.api.inspect_image(base)
        except docker.errors.ImageNotFound:
            started = time.monotonic()
            log(f"importing {base} from {BASE_TARBALL.name}")
            client.api.import_image_from_file(
                str(BASE_TARBALL), repository="iris-test-base", tag=key, changes=['CMD ["/bin/bash"]']
            )
            log(f"imported {base} in {time.monotonic() - started:.0f}s")
        try:
            client.api.inspect_image(pause)
        except docker.errors.ImageNotFound:
            dockerfile = io.BytesIO(PAUSE_DOCKERFILE.format(base=base).encode())
            for chunk in client.api.build(fileobj=dockerfile, tag=pause, rm=True, decode=True):
                if "error" in chunk:
                    raise EngineUnavailable(f"building {pause} failed: {chunk['error']}")
    finally:
        client.close()
    return base, pause


# -- containerd --------------------------------------------------------------------------------

CONTAINERD_CONFIG = """version = 2
root = "{root}"
state = "{state}"
disabled_plugins = [
  "io.containerd.internal.v1.opt",
  "io.containerd.snapshotter.v1.aufs",
  "io.containerd.snapshotter.v1.btrfs",
  "io.containerd.snapshotter.v1.devmapper",
  "io.containerd.snapshotter.v1.zfs",
]

[grpc]
  address = "{socket}"

[ttrpc]
  address = "{socket}.ttrpc"

[debug]
  address = "{socket}.debug"

[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "{pause}"
  # Keeps containers' oom_score_adj at or above containerd's own: lowering it takes privileges a
  # sandboxed test machine may not grant.
  restrict_oom_score_adj = true
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = "{cni}"
"""


def _cri_ready(endpoint: str) -> bool:
    import grpc
    from cri_api.v1 import api_pb2, api_pb2_grpc

    channel = grpc.insecure_channel(endpoint)
    try:
        api_pb2_grpc.RuntimeServiceStub(channel).Version(api_pb2.VersionRequest(), timeout=2)
        return True
    except grpc.RpcError:
        return False
    finally:
        channel.close()


def _cri_has_image(endpoint: str, image: str) -> bool:
    import grpc
    from cri_api.v1 import api_pb2, api_pb2_grpc

    channel = grpc.insecure_channel(endpoint)
    try:
        stub = api_pb2_grpc.ImageServiceStub(channel)
        return bool(stub.ImageStatus(api_pb2.ImageStatusRequest(image=api_pb2.ImageSpec(image=image)), timeout=10).image.id)
    finally:
        channel.close()


def start_containerd(docker_engine: DockerEngine) -> ContainerdEngine:
    _require_root()
    RUN_DIR.mkdir(parents=True, exist_ok=True)
    socket = RUN_DIR / "containerd.sock"
    endpoint = f"unix://{socket}"
    pause = f"docker.io/library/{docker_engine.pause_image}"
    process = None
    if _cri_ready(endpoint):
        log(f"using the containerd already serving {socket}")
    else:
        containerd = _binary("containerd")
        _binary("runc")
        root = STATE_DIR / "containerd"
        cni = STATE_DIR / "cni"
        for directory in (root, cni):
            directory.mkdir(parents=True, exist_ok=True)
        config = RUN_DIR / "containerd.toml"
        config.write_text(
            CONTAINERD_CONFIG.format(root=root, state=RUN_DIR / "containerd-state", socket=socket, pause=pause, cni=cni)
        )
        log_path = STATE_DIR / "containerd.log"
        log(f"starting containerd on {socket}")
        process = _spawn("containerd", [containerd, "--config", str(config)], log_path)
        _wait_ready("containerd", process, lambda: _cri_ready(endpoint), log_path)
    daemon = Daemon("containerd", process)
    try:
        for image in (docker_engine.base_image, docker_engine.pause_image):
            if not _cri_has_image(endpoint, image):
                _copy_image_to_containerd(docker_engine, image, socket)
    except Exception:
        daemon.stop()
        raise
    return ContainerdEngine(endpoint=endpoint, daemon=daemon)


def _copy_image_to_containerd(docker_engine: DockerEngine, image: str, socket: Path) -> None:
    import docker

    started = time.monotonic()
    log(f"copying {image} from dockerd into containerd")
    ctr = _binary("ctr")
    client = docker.DockerClient(base_url=docker_engine.url, timeout=600)
    try:
        importer = subprocess.Popen(
            [ctr, "--address", str(socket), "--namespace", CRI_NAMESPACE, "images", "import", "-"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
        )
        assert importer.stdin is not None and importer.stdout is not None
        for chunk in client.api.get_image(image):
            importer.stdin.write(chunk)
        importer.stdin.close()
        output = importer.stdout.read().decode(errors="replace")
        if importer.wait() != 0:
            raise EngineUnavailable(f"ctr images import of {image} failed: {output.strip()}")
    finally:
        client.close()
    log(f"copied {image} in {time.monotonic() - started:.0f}s")


# -- images built with `iris build` ------------------------------------------------------------


def iris_build(args: list[str], timeout: float = 600.0) -> subprocess.CompletedProcess[str]:
    """Run `iris build ARGS` against the session's engine (DOCKER_HOST) and report how long it took."""
    import sys

    started = time.monotonic()
    log(f"iris build {' '.join(args)}")
    result = subprocess.run(
        [sys.executable, "-m", "iris.cli.main", "build", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    log(f"iris build {args[0]}: exit {result.returncode} after {time.monotonic() - started:.0f}s")
    return result


# `iris build` runs of this process, by their arguments and engine: the hosts' and the runtime
# tests' fixtures and the image tests want the same worker and task images, and one build of each
# per session is enough.
_offline_builds: dict[tuple[str, ...], subprocess.CompletedProcess[str]] = {}


def offline_build(kind: str, base_image: str, tag: str, *extra: str) -> subprocess.CompletedProcess[str]:
    """`iris build <kind> --offline` on the test base image, run once per session for the same
    arguments; later calls return the first run's result."""
    args = [kind, "--offline", "--base-image", base_image, "--tag", tag, *extra]
    key = (os.environ.get("DOCKER_HOST", ""), *args)
    if key not in _offline_builds:
        _offline_builds[key] = iris_build(args)
    return _offline_builds[key]


def build_test_image(kind: str, base_image: str, tag: str, *extra: str) -> str:
    """`offline_build`'s image; fails loudly with the build's output."""
    result = offline_build(kind, base_image, tag, *extra)
    if result.returncode != 0:
        raise AssertionError(f"iris build {kind} failed:\n{result.stdout}\n{result.stderr}")
    return tag
