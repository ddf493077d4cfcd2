"""ManualPlatform on namespace hosts: slices bootstrapped over real SSH, failures with reasons,
hosts returned to the pool, slices rebuilt from the hosts after a restart, and the autoscaler
driving it end to end."""

from __future__ import annotations

import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from netns import HostNetwork, SshHost

from iris.client import IrisClient
from iris.cluster.platform.base import CloudSliceState, QuotaExhaustedError, prepare_slice_config
from iris.cluster.platform.factory import create_platform
from iris.cluster.platform.manual import HostsExhaustedError, ManualPlatform, ManualSliceHandle
from iris.cluster.types import Entrypoint
from iris.config import apply_defaults, load_config_from_dict, validate_config
from iris.rpc import cluster_pb2 as pb
from iris.rpc import config_pb2
from iris.time import wait_until

GROUP = "cpu"
# Connect timeout of these clusters; failures must show within it plus a few seconds.
CONNECT_TIMEOUT_S = 2


def cluster_config(
    hosts: list[str], key: Path, controller_address: str, bundles: Path, num_vms: int = 1, **bootstrap: str
) -> config_pb2.IrisClusterConfig:
    data = {
        "name": "manual-test",
        "platform": {"manual": {}},
        "storage": {"bundle_prefix": f"file://{bundles}"},
        "defaults": {
            "ssh": {"user": "root", "key_file": str(key), "connect_timeout": f"{CONNECT_TIMEOUT_S}s"},
            "timeouts": {"init_timeout": "60s", "heartbeat_interval": "1s", "kill_grace_period": "2s"},
            "bootstrap": {
                "controller_address": controller_address,
                "runtime": "process",
                "python_env": sys.prefix,
                **bootstrap,
            },
        },
        "scale_groups": {
            GROUP: {
                "min_slices": 0,
                "max_slices": len(hosts) // num_vms,
                "resources": {"cpu": 1, "ram": "1GB"},
                "slice_template": {"num_vms": num_vms, "accelerator_type": "cpu", "manual": {"hosts": hosts}},
            }
        },
    }
    config = apply_defaults(load_config_from_dict(data))
    validate_config(config)
    return config


def slice_config(config: config_pb2.IrisClusterConfig) -> config_pb2.SliceConfig:
    return prepare_slice_config(config.scale_groups[GROUP].slice_template, GROUP, "iris")


@pytest.fixture
def controller(host_network: HostNetwork, tmp_path: Path) -> Iterator[str]:
    from iris.cluster.controller.main import ControllerDaemon
    from iris.cluster.controller.settings import DaemonSettings

    daemon = ControllerDaemon(
        DaemonSettings.from_config(
            state_dir=tmp_path / "controller", bundle_prefix=f"file://{tmp_path}/bundles", host=host_network.gateway, port=0
        )
    )
    daemon.start_in_thread()
    try:
        yield daemon.url
    finally:
        daemon.stop()


def wait_for_state(handle: ManualSliceHandle, state: CloudSliceState, timeout: float = 60) -> None:
    settling = (CloudSliceState.CREATING, CloudSliceState.BOOTSTRAPPING)
    wait_until(lambda: handle.describe().state not in settling, timeout, 0.1, f"{handle.slice_id} to settle")
    status = handle.describe()
    assert status.state == state, status.message


def test_manual_slice_bootstraps_workers_on_its_hosts_and_terminate_frees_them(
    hosts: list[SshHost], ssh_key: Path, controller: str, tmp_path: Path
) -> None:
    addresses = [h.address for h in hosts[:2]]
    config = cluster_config(addresses, ssh_key, controller, tmp_path / "bundles", num_vms=2)
    platform = create_platform(config, tmp_path / "state")
    assert isinstance(platform, ManualPlatform)

    started = time.monotonic()
    handle = platform.create_slice(slice_config(config), config.defaults.bootstrap)
    assert handle.describe().state == CloudSliceState.CREATING
    assert time.monotonic() - started < 1

    wait_for_state(handle, CloudSliceState.READY)
    status = handle.describe()
    assert [w.internal_address for w in status.workers] == addresses
    assert [state for state, _, _ in handle.history()] == ["CREATING", "BOOTSTRAPPING", "READY"]
    with IrisClient.remote(controller) as client:
        workers = wait_until(
            lambda: {w.worker_id: w for w in client.list_workers() if w.state == pb.WORKER_STATE_HEALTHY}
            if len(client.list_workers()) == 2 else None,
            30, 0.1, "both workers to register",
        )  # fmt: skip
    assert set(workers) == {f"{handle.slice_id}-0", f"{handle.slice_id}-1"}
    assert {w.metadata.attributes["slice-id"].string_value for w in workers.values()} == {handle.slice_id}
    assert {w.metadata.attributes["tpu-name"].string_value for w in workers.values()} == {handle.slice_id}
    assert "is healthy" in platform.worker_logs(f"{handle.slice_id}-1", 50)

    with pytest.raises(HostsExhaustedError, match="needs 2 free host"):
        platform.create_slice(slice_config(config), config.defaults.bootstrap)

    handle.terminate()

    wait_until(
        lambda: not any(h.processes() for h in hosts[:2]), 20, 0.1, "nothing of Iris to run on the hosts"
    )
    again = platform.create_slice(slice_config(config), config.defaults.bootstrap)
    wait_for_state(again, CloudSliceState.READY)
    assert [w.internal_address for w in again.describe().workers] == addresses
    again.terminate()


def test_manual_no_free_host_is_a_quota_error(hosts: list[SshHost], ssh_key: Path, tmp_path: Path) -> None:
    config = cluster_config([hosts[0].address], ssh_key, "http://127.0.0.1:1", tmp_path / "bundles")
    platform = ManualPlatform(config)
    first = platform.create_slice(slice_config(config), config.defaults.bootstrap)

    with pytest.raises(QuotaExhaustedError, match="0 of its 1 are free"):
        platform.create_slice(slice_config(config), config.defaults.bootstrap)

    first.terminate()


@pytest.mark.parametrize("failure", ["wrong key", "unreachable host", "cable cut"])
def test_manual_slice_that_cannot_connect_fails_within_the_connect_timeout(
    failure: str, hosts: list[SshHost], host_network: HostNetwork, tmp_path: Path
) -> None:
    assert host_network.key is not None and host_network.wrong_key is not None
    address = host_network.unreachable_address if failure == "unreachable host" else hosts[2].address
    key = host_network.wrong_key if failure == "wrong key" else host_network.key
    if failure == "cable cut":
        hosts[2].set_link(False)
    config = cluster_config([address], key, "http://127.0.0.1:1", tmp_path / "bundles")
    platform = ManualPlatform(config)
    started = time.monotonic()

    handle = platform.create_slice(slice_config(config), config.defaults.bootstrap)
    wait_for_state(handle, CloudSliceState.FAILED, timeout=CONNECT_TIMEOUT_S + 10)

    assert time.monotonic() - started < CONNECT_TIMEOUT_S + 5
    message = handle.describe().message
    assert "\n" not in message
    expected = "refused the SSH key" if failure == "wrong key" else "check that the host is up"
    assert expected in message and address in message
    handle.terminate()
    assert handle.slice_id not in [h.slice_id for h in platform.list_slices([])]


def test_manual_slice_whose_bootstrap_fails_ends_failed_with_nothing_left_running(
    hosts: list[SshHost], ssh_key: Path, controller: str, tmp_path: Path
) -> None:
    # No containerd runs on the hosts: the worker exits at start with a reason.
    config = cluster_config(
        [hosts[1].address], ssh_key, controller, tmp_path / "bundles", runtime="containerd"
    )
    platform = ManualPlatform(config)

    handle = platform.create_slice(slice_config(config), config.defaults.bootstrap)
    wait_for_state(handle, CloudSliceState.FAILED)

    message = handle.describe().message
    assert message.startswith(f"the bootstrap script on {hosts[1].address} exited 1")
    assert [state for state, _, _ in handle.history()] == ["CREATING", "BOOTSTRAPPING", "FAILED"]
    wait_until(lambda: not hosts[1].processes(), 10, 0.1, "nothing of Iris to run on the host")
    assert "--runtime containerd" in platform.worker_logs(f"{handle.slice_id}-0", 50)
    handle.terminate()


def test_manual_platform_restarted_rebuilds_slices_from_host_markers(
    hosts: list[SshHost], ssh_key: Path, controller: str, tmp_path: Path
) -> None:
    config = cluster_config([h.address for h in hosts], ssh_key, controller, tmp_path / "bundles")
    first = ManualPlatform(config)
    handle = first.create_slice(slice_config(config), config.defaults.bootstrap)
    wait_for_state(handle, CloudSliceState.READY)
    first.shutdown()

    restarted = ManualPlatform(config)
    [adopted] = restarted.list_slices([], {"iris-managed": "true"})

    assert adopted.slice_id == handle.slice_id
    assert adopted.scale_group == GROUP
    assert adopted.describe().state == CloudSliceState.READY
    assert [w.worker_id for w in adopted.describe().workers] == [f"{handle.slice_id}-0"]
    assert adopted.hosts == handle.hosts
    # The adopted slice's host is taken: a new slice goes to another host.
    other = restarted.create_slice(slice_config(config), config.defaults.bootstrap)
    assert other.hosts != handle.hosts
    other.terminate()
    adopted.terminate()
    assert restarted.list_slices([]) == []


def test_autoscaler_on_manual_platform_brings_up_a_host_and_runs_a_job(
    hosts: list[SshHost], ssh_key: Path, host_network: HostNetwork, tmp_path: Path
) -> None:
    from iris.cluster.controller.main import ControllerDaemon
    from iris.cluster.controller.settings import DaemonSettings

    config = cluster_config([hosts[0].address], ssh_key, "", tmp_path / "bundles")
    config.scale_groups[GROUP].min_slices = 1
    config.defaults.autoscaler.evaluation_interval.milliseconds = 500
    config.defaults.timeouts.heartbeat_interval.milliseconds = 1000
    daemon = ControllerDaemon(
        DaemonSettings.from_config(
            config,
            state_dir=tmp_path / "controller",
            bundle_prefix=f"file://{tmp_path}/bundles",
            host=host_network.gateway,
            port=0,
        )
    )
    daemon.start_in_thread()
    workspace = tmp_path / "workspace"
    workspace.mkdir()
    try:
        with IrisClient.remote(daemon.url, workspace=workspace) as client:
            job = client.submit(
                Entrypoint.from_command("bash", "-c", "ip -4 -o addr show dev eth0"), name="on-host"
            )
            job.wait(timeout=120)
            output = "\n".join(entry.data for entry in job.logs())
            state = job.status().state
    finally:
        daemon.stop()
        if daemon.platform is not None:
            for handle in daemon.platform.list_slices([]):
                handle.terminate()
    assert state == pb.JOB_STATE_SUCCEEDED
    assert f"inet {hosts[0].address}/24" in output


@pytest.mark.parametrize("loss", ["worker killed", "cable cut"])
def test_manual_ready_slice_fails_when_its_worker_or_host_goes_away(
    loss: str, hosts: list[SshHost], ssh_key: Path, controller: str, tmp_path: Path
) -> None:
    config = cluster_config([hosts[2].address], ssh_key, controller, tmp_path / "bundles")
    config.defaults.timeouts.ssh_poll_interval.milliseconds = 500
    platform = ManualPlatform(config)
    handle = platform.create_slice(slice_config(config), config.defaults.bootstrap)
    wait_for_state(handle, CloudSliceState.READY)

    if loss == "worker killed":
        for process in hosts[2].processes():
            process.kill()
    else:
        hosts[2].set_link(False)

    wait_until(lambda: handle.describe().state == CloudSliceState.FAILED, 30, 0.1, "the slice to fail")
    expected = "stopped running" if loss == "worker killed" else "stopped answering"
    assert expected in handle.describe().message and hosts[2].address in handle.describe().message
    assert [state for state, _, _ in handle.history()][-2:] == ["READY", "FAILED"]
    hosts[2].set_link(True)
    handle.terminate()
