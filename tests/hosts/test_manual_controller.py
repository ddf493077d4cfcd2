"""The controller of a manual cluster on one of its hosts: started over SSH by `create_vm`, found
again with its labels and metadata, reached from the test host through an SSH tunnel, and scaling
workers onto the other hosts itself."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest
from netns import HostNetwork, SshHost
from test_manual_platform import GROUP, cluster_config

from iris.client import IrisClient
from iris.cluster.platform.base import Labels
from iris.cluster.platform.manual import ManualPlatform
from iris.cluster.platform.remote_exec import AuthenticationRefusedError
from iris.cluster.types import Entrypoint
from iris.rpc import cluster_pb2 as pb
from iris.rpc import config_pb2
from iris.time import wait_until


def test_manual_controller_on_a_host_scales_workers_and_serves_jobs_through_a_tunnel(
    hosts: list[SshHost], ssh_key: Path, tmp_path: Path
) -> None:
    controller_host, worker_host = hosts[0], hosts[1]
    config = cluster_config([worker_host.address], ssh_key, "", tmp_path / "bundles")
    config.controller.manual.host = controller_host.address
    config.controller.manual.port = 10000
    config.scale_groups[GROUP].min_slices = 1
    config.defaults.autoscaler.evaluation_interval.milliseconds = 500
    platform = ManualPlatform(config)
    controller_label = Labels("iris").controller

    handle = platform.create_vm(
        config_pb2.VmConfig(name="iris-controller", labels={controller_label: "true"})
    )
    handle.set_metadata({"iris-controller-address-iris": f"http://{controller_host.address}:10000"})

    [found] = ManualPlatform(config).list_vms([], {controller_label: "true"})
    assert found.worker_id == "iris-controller"
    assert found.internal_address == controller_host.address
    assert found.metadata == {"iris-controller-address-iris": f"http://{controller_host.address}:10000"}
    url = platform.discover_controller(config)
    assert url == f"http://{controller_host.address}:10000"

    workspace = tmp_path / "workspace"
    workspace.mkdir()
    with platform.tunnel(url) as local_url:
        assert local_url.startswith("http://127.0.0.1:") and local_url != url
        assert httpx.get(f"{local_url}/health", timeout=5).json()["url"] == url
        with IrisClient.remote(local_url, workspace=workspace) as client:
            job = client.submit(
                Entrypoint.from_command("bash", "-c", "ip -4 -o addr show dev eth0"), name="far"
            )
            job.wait(timeout=120)
            output = "\n".join(entry.data for entry in job.logs())
            state = job.status().state
            [worker] = [w for w in client.list_workers() if w.state == pb.WORKER_STATE_HEALTHY]
    assert state == pb.JOB_STATE_SUCCEEDED
    # The controller's autoscaler bootstrapped the worker onto the other host over SSH.
    assert f"inet {worker_host.address}/24" in output
    assert worker.address == f"http://{worker_host.address}:10001"

    found.terminate()

    wait_until(lambda: not controller_host.processes(), 20, 0.1, "the controller to stop")
    assert ManualPlatform(config).list_vms([], {controller_label: "true"}) == []
    assert platform.discover_controller(config) is None


def test_manual_tunnel_with_wrong_key_raises_authentication_refused(
    hosts: list[SshHost], host_network: HostNetwork, tmp_path: Path
) -> None:
    assert host_network.wrong_key is not None
    config = cluster_config([hosts[1].address], host_network.wrong_key, "", tmp_path / "bundles")
    platform = ManualPlatform(config)

    tunnel = platform.tunnel(f"http://{hosts[0].address}:10000")
    with pytest.raises(AuthenticationRefusedError, match="refused the SSH key"), tunnel:
        pass
