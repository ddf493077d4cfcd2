"""Real S3 (moto) and GCS (gcp-storage-emulator) servers for the storage tests.

Each server runs once per session on a private port and is stopped by its PID. A missing binary
fails the tests that need it: skipping would hide that the object-store paths went untested.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

S3_BUCKET = "iris-test-bundles"
S3_REGION = "us-west-2"
GCS_BUCKET = "iris-test-bundles"
_STARTUP_TIMEOUT_SECONDS = 30.0


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture
def dead_endpoint() -> str:
    """An http:// endpoint on a port nothing listens on, so connections are refused."""
    return f"http://127.0.0.1:{free_port()}"


def _venv_binary(name: str, provided_by: str) -> Path:
    binary = Path(sys.executable).parent / name
    if not binary.exists():
        pytest.fail(
            f"{name} is not installed at {binary}; it comes with the dev dependency {provided_by}: run `uv sync`",
            pytrace=False,
        )
    return binary


def _start(command: list[str], log_path: Path) -> subprocess.Popen[bytes]:
    log = log_path.open("wb")
    try:
        return subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    finally:
        log.close()


def _wait_until_answers(process: subprocess.Popen[bytes], url: str, log_path: Path) -> None:
    deadline = time.monotonic() + _STARTUP_TIMEOUT_SECONDS
    while time.monotonic() < deadline:
        try:
            httpx.get(url, timeout=1.0)
            return
        except httpx.TransportError:
            pass
        try:
            # Doubles as the pause between polls and notices a server that died on startup.
            process.wait(timeout=0.05)
        except subprocess.TimeoutExpired:
            continue
        pytest.fail(
            f"{process.args[0]} exited with status {process.returncode} while starting:\n{log_path.read_text()}",
            pytrace=False,
        )
    pytest.fail(
        f"{process.args[0]} did not answer on {url} within {_STARTUP_TIMEOUT_SECONDS:.0f}s:\n"
        f"{log_path.read_text()}",
        pytrace=False,
    )


def _stop(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is None:
        os.kill(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            os.kill(process.pid, signal.SIGKILL)
            process.wait()


@pytest.fixture(scope="session")
def s3_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A moto S3 server with one bucket in us-west-2; yields `s3://<bucket>/<prefix>`.

    Sets AWS_ENDPOINT_URL, AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY and AWS_DEFAULT_REGION for the
    session, and points the AWS config files at nothing so the host's profiles cannot interfere.
    """
    binary = _venv_binary("moto_server", "moto[server]")
    port = free_port()
    endpoint = f"http://127.0.0.1:{port}"
    log_path = tmp_path_factory.mktemp("moto") / "moto_server.log"
    process = _start([str(binary), "-H", "127.0.0.1", "-p", str(port)], log_path)
    try:
        _wait_until_answers(process, endpoint, log_path)
        with pytest.MonkeyPatch.context() as env:
            empty = str(log_path.parent / "no-aws-config")
            for name in ("AWS_PROFILE", "AWS_SESSION_TOKEN", "FSSPEC_S3"):
                env.delenv(name, raising=False)
            env.setenv("AWS_CONFIG_FILE", empty)
            env.setenv("AWS_SHARED_CREDENTIALS_FILE", empty)
            env.setenv("AWS_ENDPOINT_URL", endpoint)
            env.setenv("AWS_ACCESS_KEY_ID", "testing")
            env.setenv("AWS_SECRET_ACCESS_KEY", "testing")
            env.setenv("AWS_DEFAULT_REGION", S3_REGION)
            # us-east-1 accepts buckets without a location constraint; real regions do not, so the
            # bucket is created the way production buckets are.
            response = httpx.put(
                f"{endpoint}/{S3_BUCKET}",
                content=(
                    "<CreateBucketConfiguration><LocationConstraint>"
                    f"{S3_REGION}</LocationConstraint></CreateBucketConfiguration>"
                ),
                timeout=10,
            )
            response.raise_for_status()
            yield f"s3://{S3_BUCKET}/bundles"
    finally:
        _stop(process)


@pytest.fixture(scope="session")
def gcs_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """An in-memory GCS emulator with one bucket; yields `gs://<bucket>/<prefix>`.

    Sets STORAGE_EMULATOR_HOST for the session.
    """
    binary = _venv_binary("gcp-storage-emulator", "gcp-storage-emulator")
    port = free_port()
    endpoint = f"http://127.0.0.1:{port}"
    log_path = tmp_path_factory.mktemp("gcs") / "gcp-storage-emulator.log"
    process = _start(
        [str(binary), "start", "--host", "127.0.0.1", "--port", str(port), "--in-memory"], log_path
    )
    try:
        _wait_until_answers(process, f"{endpoint}/storage/v1/b", log_path)
        response = httpx.post(
            f"{endpoint}/storage/v1/b", params={"project": "iris-test"}, json={"name": GCS_BUCKET}, timeout=10
        )
        response.raise_for_status()
        with pytest.MonkeyPatch.context() as env:
            env.setenv("STORAGE_EMULATOR_HOST", endpoint)
            yield f"gs://{GCS_BUCKET}/bundles"
    finally:
        _stop(process)
