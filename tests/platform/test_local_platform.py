"""LocalPlatform: slices of real worker daemon processes, recorded on disk."""

from __future__ import annotations

import os
import signal
import socket
from pathlib import Path

import psutil
import pytest

from iris.cluster.platform.base import CloudSliceState, Labels, ResourceNotFoundError, prepare_slice_config
from iris.cluster.platform.local import LocalPlatform
from iris.rpc import config_pb2
from iris.time import wait_until


def _closed_port_url() -> str:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{sock.getsockname()[1]}"


@pytest.fixture
def platform(tmp_path: Path):
    resources = {"cpu": config_pb2.ScaleGroupResources(cpu=2, ram=2 * 10**9)}
    local = LocalPlatform(tmp_path / "platform", "test", resources, kill_grace_s=1)
    yield local
    for handle in local.list_slices([]):
        handle.terminate()


def _template(num_vms: int = 2) -> config_pb2.SliceConfig:
    template = config_pb2.SliceConfig(num_vms=num_vms, accelerator_type=config_pb2.ACCELERATOR_TYPE_CPU)
    template.local.attributes["rack"] = "r1"
    return template


def _bootstrap() -> config_pb2.BootstrapConfig:
    # Nothing listens there: the workers keep trying to register, which is all these tests need.
    return config_pb2.BootstrapConfig(controller_address=_closed_port_url())


def _pids(handle) -> list[int]:
    return [w.pid for w in handle.workers()]


def test_local_slice_create_starts_workers_and_is_ready_at_once(platform):
    handle = platform.create_slice(prepare_slice_config(_template(), "cpu", "test"), _bootstrap())
    status = handle.describe()
    assert status.state == CloudSliceState.READY
    assert [w.worker_id for w in status.workers] == [f"{handle.slice_id}-0", f"{handle.slice_id}-1"]
    assert all(psutil.pid_exists(pid) for pid in _pids(handle))
    assert handle.scale_group == "cpu"
    assert handle.labels[Labels("test").managed] == "true"
    command_line = " ".join(psutil.Process(_pids(handle)[0]).cmdline())
    assert f"--worker-id {handle.slice_id}-0" in command_line
    assert f"--slice-id {handle.slice_id}" in command_line
    assert "--attribute rack=r1" in command_line and "--cpu 2.0" in command_line


def test_local_slice_list_filters_by_labels(platform):
    cpu = platform.create_slice(prepare_slice_config(_template(1), "cpu", "test"), _bootstrap())
    other = platform.create_slice(prepare_slice_config(_template(1), "other", "test"), _bootstrap())
    scale_group = Labels("test").scale_group
    assert [h.slice_id for h in platform.list_slices([], {scale_group: "cpu"})] == [cpu.slice_id]
    assert {h.slice_id for h in platform.list_slices([])} == {cpu.slice_id, other.slice_id}
    assert platform.list_slices([], {scale_group: "nope"}) == []


def test_local_slice_records_survive_a_new_platform_object(platform, tmp_path):
    handle = platform.create_slice(prepare_slice_config(_template(1), "cpu", "test"), _bootstrap())
    reopened = LocalPlatform(tmp_path / "platform", "test")
    (found,) = reopened.list_slices([])
    assert found.slice_id == handle.slice_id
    assert found.describe().state == CloudSliceState.READY


def test_local_slice_terminate_stops_every_worker_and_forgets_it(platform):
    handle = platform.create_slice(prepare_slice_config(_template(), "cpu", "test"), _bootstrap())
    pids = _pids(handle)
    handle.terminate()
    wait_until(lambda: not any(psutil.pid_exists(p) and psutil.Process(p).status() != psutil.STATUS_ZOMBIE for p in pids),
               20, 0.05, "the slice's workers to exit")
    assert platform.list_slices([]) == []
    with pytest.raises(ResourceNotFoundError, match="does not exist"):
        platform.get_slice(handle.slice_id)


def test_local_slice_with_a_dead_worker_reports_failed_with_the_reason(platform):
    handle = platform.create_slice(prepare_slice_config(_template(), "cpu", "test"), _bootstrap())
    os.kill(_pids(handle)[1], signal.SIGKILL)
    status = wait_until(
        lambda: (s := handle.describe()).state == CloudSliceState.FAILED and s, 20, 0.05, "the slice to fail"
    )
    assert f"{handle.slice_id}-1" in status.message and "exited" in status.message


def test_local_worker_logs_returns_the_daemons_output(platform):
    handle = platform.create_slice(prepare_slice_config(_template(1), "cpu", "test"), _bootstrap())
    worker_id = f"{handle.slice_id}-0"
    logs = wait_until(lambda: platform.worker_logs(worker_id, 50), 30, 0.1, "the worker to log something")
    assert "cannot register with controller" in logs
    with pytest.raises(ResourceNotFoundError):
        platform.worker_logs("no-such-worker", 10)


def test_local_platform_without_controller_address_refuses_with_reason(platform):
    with pytest.raises(Exception, match="no controller_address"):
        platform.create_slice(prepare_slice_config(_template(1), "cpu", "test"), config_pb2.BootstrapConfig())


def test_local_platform_shutdown_stops_what_it_started_but_not_adopted_slices(platform, tmp_path):
    adopted = platform.create_slice(prepare_slice_config(_template(1), "cpu", "test"), _bootstrap())
    later = LocalPlatform(tmp_path / "platform", "test")
    started = later.create_slice(prepare_slice_config(_template(1), "cpu", "test"), _bootstrap())
    started_pids = _pids(started)

    later.shutdown()

    wait_until(
        lambda: not any(psutil.pid_exists(p) and psutil.Process(p).status() != psutil.STATUS_ZOMBIE for p in started_pids),
        20, 0.05, "the started slice's workers to exit",
    )  # fmt: skip
    assert [h.slice_id for h in later.list_slices([])] == [adopted.slice_id]
    assert adopted.describe().state == CloudSliceState.READY
