"""Worker and controller bootstrap over SSH onto namespace hosts, with real daemons end to end."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from netns import HostNetwork, SshHost

from iris.client import IrisClient
from iris.cluster.platform.bootstrap import (
    WorkerPlacement,
    controller_daemon,
    list_markers_script,
    logs_script,
    parse_markers,
    start_script,
    stop_controller_script,
    stop_worker_script,
    worker_daemon,
    worker_daemon_name,
)
from iris.cluster.platform.remote_exec import (
    DirectSshRemoteExec,
    RemoteCommandFailedError,
    RemoteExecWorkerBase,
)
from iris.cluster.types import Entrypoint
from iris.rpc import cluster_pb2 as pb
from iris.rpc import config_pb2
from iris.time import Duration, wait_until

# The checkout's virtualenv: hosts share this machine's filesystem, so it is "installed" on each.
PYTHON_ENV = sys.prefix
WORKER_PORT = 10001


def on_host(host: SshHost, key: Path, worker_id: str = "probe") -> RemoteExecWorkerBase:
    remote = DirectSshRemoteExec(host.address, "root", str(key), host.port, Duration.from_seconds(5))
    return RemoteExecWorkerBase(worker_id, remote)


def worker_bootstrap(controller_url: str, **overrides: str) -> config_pb2.BootstrapConfig:
    fields = {
        "controller_address": controller_url,
        "worker_port": WORKER_PORT,
        "cache_dir": "/var/cache/iris",
        "runtime": "process",
        "python_env": PYTHON_ENV,
        **overrides,
    }
    return config_pb2.BootstrapConfig(**fields)


def placement(host: SshHost, worker_id: str, slice_id: str = "slice-a") -> WorkerPlacement:
    return WorkerPlacement(
        worker_id=worker_id,
        slice_id=slice_id,
        scale_group="cpu",
        advertise_host=host.address,
        labels={"iris-managed": "true", "iris-slice-id": slice_id},
        attributes={"rack": "r7"},
    )


@pytest.fixture
def controller(host_network: HostNetwork, tmp_path: Path) -> Iterator[str]:
    """A controller on the test host, listening where the namespace hosts reach it."""
    from iris.cluster.controller.main import ControllerDaemon
    from iris.cluster.controller.settings import DaemonSettings

    config = config_pb2.IrisClusterConfig()
    config.defaults.timeouts.heartbeat_interval.milliseconds = 1000
    config.defaults.timeouts.worker_timeout.milliseconds = 10_000
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
    try:
        yield daemon.url
    finally:
        daemon.stop()


def healthy_workers(client: IrisClient) -> dict[str, pb.WorkerInfo]:
    return {w.worker_id: w for w in client.list_workers() if w.state == pb.WORKER_STATE_HEALTHY}


def attribute(worker: pb.WorkerInfo, key: str) -> str:
    return worker.metadata.attributes[key].string_value


def test_worker_bootstrapped_over_ssh_registers_runs_a_job_and_stops_cleanly(
    hosts: list[SshHost], ssh_key: Path, controller: str, tmp_path: Path
) -> None:
    host = hosts[1]
    worker = on_host(host, ssh_key, "ssh-w1")
    streamed: list[str] = []

    worker.bootstrap(
        start_script(worker_daemon(worker_bootstrap(controller), placement(host, "ssh-w1"))), streamed.append
    )

    assert streamed[-1] == "[iris-bootstrap] worker-ssh-w1 is healthy on port 10001"
    workspace = tmp_path / "workspace"
    workspace.mkdir()
    with IrisClient.remote(controller, workspace=workspace) as client:
        registered = wait_until(lambda: healthy_workers(client).get("ssh-w1"), 30, 0.1, "ssh-w1 to register")
        job = client.submit(
            Entrypoint.from_command("bash", "-c", "ip -4 -o addr show dev eth0"), name="where"
        )
        job.wait(timeout=60)
        status = job.status()
        output = "\n".join(entry.data for entry in job.logs())
    assert registered.address == f"http://{host.address}:{WORKER_PORT}"
    assert attribute(registered, "slice-id") == "slice-a"
    assert attribute(registered, "scale-group") == "cpu"
    assert attribute(registered, "rack") == "r7"
    assert status.state == pb.JOB_STATE_SUCCEEDED
    assert f"inet {host.address}/24" in output  # the task ran on the namespace host

    [marker] = parse_markers(worker.run_command(list_markers_script()).stdout)
    assert (marker["kind"], marker["slice_id"], marker["worker_id"]) == ("worker", "slice-a", "ssh-w1")
    assert marker["labels"]["iris-slice-id"] == "slice-a"
    assert marker["mode"] == "process" and marker["alive"] is True

    worker.bootstrap(stop_worker_script("ssh-w1"))

    wait_until(lambda: not host.processes(), 20, 0.1, "nothing of Iris to run on the host")
    assert parse_markers(worker.run_command(list_markers_script()).stdout) == []
    logs = worker.run_command(logs_script(worker_daemon_name("ssh-w1"), 200)).stdout
    assert "worker-ssh-w1 is healthy" in logs and "ssh-w1" in logs


def test_worker_bootstrap_again_replaces_the_running_worker(
    hosts: list[SshHost], ssh_key: Path, controller: str
) -> None:
    host = hosts[0]
    worker = on_host(host, ssh_key, "ssh-w0")
    script = start_script(worker_daemon(worker_bootstrap(controller), placement(host, "ssh-w0")))
    worker.bootstrap(script)
    [first] = [p for p in host.processes() if "iris.cluster.worker.main" in " ".join(p.cmdline())]

    worker.bootstrap(script)

    workers = [p for p in host.processes() if "iris.cluster.worker.main" in " ".join(p.cmdline())]
    assert len(workers) == 1 and workers[0].pid != first.pid
    assert len(parse_markers(worker.run_command(list_markers_script()).stdout)) == 1


def test_worker_bootstrap_with_missing_python_env_fails_with_the_reason(
    hosts: list[SshHost], ssh_key: Path, controller: str
) -> None:
    worker = on_host(hosts[2], ssh_key)
    daemon = worker_daemon(
        worker_bootstrap(controller, python_env="/opt/no-such-env"), placement(hosts[2], "w-x")
    )

    with pytest.raises(RemoteCommandFailedError, match="exited 1") as caught:
        worker.bootstrap(start_script(daemon))

    assert "/opt/no-such-env is not a Python environment on this host" in str(caught.value)
    assert parse_markers(worker.run_command(list_markers_script()).stdout) == []


def test_worker_that_dies_during_startup_fails_bootstrap_with_its_last_output(
    hosts: list[SshHost], ssh_key: Path, controller: str
) -> None:
    worker = on_host(hosts[2], ssh_key)
    # No containerd runs on the host, so the worker refuses to start with this runtime.
    daemon = worker_daemon(worker_bootstrap(controller, runtime="containerd"), placement(hosts[2], "w-bad"))

    with pytest.raises(RemoteCommandFailedError) as caught:
        worker.bootstrap(start_script(daemon))

    message = str(caught.value)
    assert f"the bootstrap script on {hosts[2].address} exited 1" in message
    assert "worker-w-bad exited during startup" in message
    assert "--runtime containerd" in message
    wait_until(lambda: not hosts[2].processes(), 10, 0.1, "nothing of Iris to run on the host")
    assert parse_markers(worker.run_command(list_markers_script()).stdout) == []


def test_controller_bootstrapped_on_a_host_serves_a_worker_on_another_host(
    hosts: list[SshHost], ssh_key: Path, tmp_path: Path
) -> None:
    controller_host, worker_host = hosts[0], hosts[2]
    port = 10000
    config_yaml = (
        "name: ssh-test\n"
        "platform:\n  manual: {}\n"
        f"controller:\n  manual:\n    host: {controller_host.address}\n    port: {port}\n"
        # Workers read bundles from storage directly: a directory every host sees, like a shared mount.
        f"storage:\n  bundle_prefix: file://{tmp_path}/bundles\n"
        "defaults:\n  timeouts:\n    heartbeat_interval: 1s\n"
    )
    controller_remote = on_host(controller_host, ssh_key, "controller")
    controller_remote.bootstrap(
        start_script(controller_daemon(config_yaml, port, controller_host.address, python_env=PYTHON_ENV))
    )
    url = f"http://{controller_host.address}:{port}"
    assert httpx.get(f"{url}/health", timeout=5).status_code == 200

    worker = on_host(worker_host, ssh_key, "ssh-w2")
    worker.bootstrap(start_script(worker_daemon(worker_bootstrap(url), placement(worker_host, "ssh-w2"))))
    workspace = tmp_path / "workspace"
    workspace.mkdir()
    (workspace / "hello.txt").write_text("hello from the bundle\n")
    with IrisClient.remote(url, workspace=workspace) as client:
        wait_until(lambda: healthy_workers(client).get("ssh-w2"), 30, 0.1, "ssh-w2 to register")
        job = client.submit(Entrypoint.from_command("cat", "hello.txt"), name="hello")
        job.wait(timeout=60)
        lines = [entry.data for entry in job.logs()]
    assert lines == ["hello from the bundle"]

    [marker] = parse_markers(controller_remote.run_command(list_markers_script()).stdout)
    assert (marker["kind"], marker["port"]) == ("controller", port)

    controller_remote.bootstrap(stop_controller_script())

    wait_until(lambda: not controller_host.processes(), 20, 0.1, "the controller to stop")
    with pytest.raises(httpx.ConnectError):
        httpx.get(f"{url}/health", timeout=2)
