"""Hostile bundles, built by hand as an attacker would: refused at upload (the controller, through
LaunchJob) and at unpack (the worker), with a reason the user can act on."""

from __future__ import annotations

import hashlib
import io
import stat
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from iris.bundle_format import UnsafeBundleError, extract_bundle
from iris.client import IrisClient
from iris.client.client import InvalidRequestError
from iris.cluster.controller.main import ControllerDaemon
from iris.cluster.controller.settings import DaemonSettings
from iris.cluster.limits import InputLimits
from iris.cluster.types import Entrypoint
from iris.rpc import cluster_pb2 as pb

LIMITS = InputLimits(max_bundle_entries=50, max_bundle_unpacked_bytes=1 << 20)


def _zip(entries: list[tuple[str, bytes]], symlinks: dict[str, str] | None = None) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        for name, data in entries:
            archive.writestr(name, data)
        for name, target in (symlinks or {}).items():
            info = zipfile.ZipInfo(name)
            info.create_system = 3
            info.external_attr = (stat.S_IFLNK | 0o777) << 16
            archive.writestr(info, target)
    return buffer.getvalue()


def _lying_zip(declared: int, actual: bytes) -> bytes:
    """A zip whose one entry declares `declared` bytes but inflates to `actual` (CRC kept honest)."""
    blob = bytearray(_zip([("data.bin", actual)]))
    real = len(actual).to_bytes(4, "little")
    fake = declared.to_bytes(4, "little")
    # The uncompressed size sits in the local header (offset 22) and the central directory (offset 24).
    local = blob.index(b"PK\x03\x04")
    central = blob.index(b"PK\x01\x02")
    assert blob[local + 22 : local + 26] == real and blob[central + 24 : central + 28] == real
    blob[local + 22 : local + 26] = fake
    blob[central + 24 : central + 28] = fake
    return bytes(blob)


HOSTILE = {
    "dot-dot": (_zip([("ok.txt", b"x"), ("../escaped.txt", b"x")]), "would land outside"),
    "absolute": (_zip([("/etc/iris-owned", b"x")]), "would land outside"),
    "symlink-out": (_zip([("ok.txt", b"x")], {"link": "/etc/passwd"}), "is a symlink"),
    "symlink-up": (_zip([], {"lib/up": "../../.."}), "is a symlink"),
    "bomb": (_zip([("zeros.bin", bytes(4 << 20))]), "unpacks to 4.0 MiB, over the limit of 1 MiB"),
    "many-entries": (_zip([(f"f{i}", b"") for i in range(51)]), "51 entries, over the limit of 50"),
}


@pytest.mark.parametrize("case", sorted(HOSTILE))
def test_extract_bundle_hostile_zip_is_refused_and_writes_nothing(tmp_path: Path, case: str) -> None:
    blob, reason = HOSTILE[case]
    dest = tmp_path / "work" / "task"

    with pytest.raises(UnsafeBundleError, match=reason):
        extract_bundle(blob, dest, LIMITS.max_bundle_entries, LIMITS.max_bundle_unpacked_bytes)

    assert list(dest.iterdir()) == []
    assert not (tmp_path / "work" / "escaped.txt").exists()


def test_extract_bundle_entry_inflating_past_its_declared_size_is_stopped(tmp_path: Path) -> None:
    blob = _lying_zip(declared=100, actual=bytes(64 << 10))

    with pytest.raises((UnsafeBundleError, zipfile.BadZipFile)):
        extract_bundle(blob, tmp_path / "dest", LIMITS.max_bundle_entries, LIMITS.max_bundle_unpacked_bytes)

    written = tmp_path / "dest" / "data.bin"
    assert not written.exists() or written.stat().st_size <= 100


@pytest.fixture(scope="module")
def controller_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    root = tmp_path_factory.mktemp("bundle-safety")
    daemon = ControllerDaemon(
        DaemonSettings.from_config(
            state_dir=root / "state", bundle_prefix=f"file://{root}/bundles", host="127.0.0.1", port=0, input_limits=LIMITS
        )
    )
    daemon.start_in_thread()
    try:
        yield daemon.url
    finally:
        daemon.stop()


@pytest.mark.parametrize("case", sorted(HOSTILE))
def test_launch_job_hostile_bundle_is_refused_before_it_is_stored(controller_url: str, case: str) -> None:
    blob, reason = HOSTILE[case]
    request = pb.LaunchJobRequest(
        name=f"hostile-{case}",
        entrypoint=Entrypoint.from_command("true").proto,
        bundle_blob=blob,
        bundle_sha256=hashlib.sha256(blob).hexdigest(),
    )
    with IrisClient.remote(controller_url) as client:
        with pytest.raises(InvalidRequestError, match=reason):
            client.call("launch_job", request)
        assert not [job for job in client.list_jobs() if job.name.endswith(f"hostile-{case}")]


def test_launch_job_hostile_bundle_is_refused_again_after_a_good_one(controller_url: str) -> None:
    good = _zip([("main.py", b"print(1)\n")])
    blob, reason = HOSTILE[sorted(HOSTILE)[0]]
    with IrisClient.remote(controller_url) as client:
        for name, bundle in (("good-1", good), ("good-2", good)):
            request = pb.LaunchJobRequest(
                name=name,
                entrypoint=Entrypoint.from_command("true").proto,
                bundle_blob=bundle,
                bundle_sha256=hashlib.sha256(bundle).hexdigest(),
            )
            client.call("launch_job", request)
        for attempt in range(2):
            request = pb.LaunchJobRequest(
                name=f"hostile-again-{attempt}",
                entrypoint=Entrypoint.from_command("true").proto,
                bundle_blob=blob,
                bundle_sha256=hashlib.sha256(blob).hexdigest(),
            )
            with pytest.raises(InvalidRequestError, match=reason):
                client.call("launch_job", request)


def test_launch_job_bundle_that_is_not_a_zip_is_refused(controller_url: str) -> None:
    blob = b"not a zip at all"
    request = pb.LaunchJobRequest(
        name="not-a-zip",
        entrypoint=Entrypoint.from_command("true").proto,
        bundle_blob=blob,
        bundle_sha256=hashlib.sha256(blob).hexdigest(),
    )
    with IrisClient.remote(controller_url) as client, pytest.raises(InvalidRequestError, match="not a valid zip"):
        client.call("launch_job", request)
