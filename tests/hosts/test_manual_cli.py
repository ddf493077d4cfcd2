"""`iris cluster --config <manual config>` end to end over the namespace hosts: the controller on
one host, workers on the others through its autoscaler, jobs from the test host through the SSH
tunnel (the controller's port is firewalled from the test host), and nothing left running after
`stop`."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import httpx
import psutil
import pytest
import yaml
from netns import HostNetwork, SshHost
from test_manual_platform import GROUP, cluster_config

from iris.client import IrisClient
from iris.cluster.types import Entrypoint
from iris.config import config_to_dict
from iris.rpc import cluster_pb2 as pb
from iris.rpc import config_pb2
from iris.time import wait_until

IRIS = [sys.executable, "-m", "iris.cli.main"]
COMMAND_TIMEOUT_S = 180.0
CONTROLLER_PORT = 10000


def _iris(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "HOME": str(cwd)}
    env.pop("IRIS_CONTROLLER_URL", None)
    return subprocess.run(
        [*IRIS, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=COMMAND_TIMEOUT_S, check=False
    )


def _ok(result: subprocess.CompletedProcess[str]) -> str:
    assert result.returncode == 0, f"exit {result.returncode}\nstdout:\n{result.stdout}\nstderr:\n{result.stderr}"
    return result.stdout


def _is_worker_daemon(process: psutil.Process) -> bool:
    try:
        return "iris.cluster.worker" in " ".join(process.cmdline())
    except psutil.Error:  # exited (or a zombie) since it was listed
        return False


def _write_config(config: config_pb2.IrisClusterConfig, controller_host: SshHost, path: Path) -> Path:
    config.controller.manual.host = controller_host.address
    config.controller.manual.port = CONTROLLER_PORT
    config.defaults.autoscaler.evaluation_interval.milliseconds = 500
    # Demand is real from its first evaluation here: waiting the default delay out asserts nothing.
    config.defaults.autoscaler.scale_up_delay.milliseconds = 0
    path.write_text(yaml.safe_dump(config_to_dict(config), sort_keys=False))
    return path


def test_manual_cluster_cli_start_run_restart_stop_through_the_tunnel_leaves_no_host_running(
    hosts: list[SshHost], host_network: HostNetwork, ssh_key: Path, tmp_path: Path
) -> None:
    controller_host, worker_host = hosts[0], hosts[1]
    config = cluster_config([worker_host.address], ssh_key, "", tmp_path / "bundles")
    config.scale_groups[GROUP].min_slices = 1
    config_file = _write_config(config, controller_host, tmp_path / "manual.yaml")
    workspace = tmp_path / "workspace"
    workspace.mkdir()
    controller_url = f"http://{controller_host.address}:{CONTROLLER_PORT}"

    with controller_host.refusing(host_network.gateway, CONTROLLER_PORT):
        started = _ok(_iris("cluster", "--config", str(config_file), "start", cwd=workspace))
        assert f"controller {controller_url}, 1 worker(s)" in started

        status = _ok(_iris("cluster", "--config", str(config_file), "status", cwd=workspace))
        assert f"controller {controller_url}" in status
        assert worker_host.address in status

        slices = _ok(_iris("cluster", "--config", str(config_file), "slice", "list", cwd=workspace))
        assert "  ready  " in slices

        command = ["bash", "-c", "echo from-$(ip -4 -o addr show dev eth0 | awk '{print $4}')"]
        ran = _ok(_iris("run", "--config", str(config_file), "--", *command, cwd=workspace))
        assert f"from-{worker_host.address}/24" in ran

        with IrisClient.for_cluster(config_file, workspace=workspace) as client:
            tunnelled = client.url
            job = client.submit(Entrypoint.from_command(*command), name="from-the-library")
            job.wait(timeout=60)
            assert [entry.data for entry in job.logs()] == [f"from-{worker_host.address}/24"]
        assert tunnelled.startswith("http://127.0.0.1:")
        # Closing the client closed its tunnel.
        with pytest.raises(httpx.HTTPError):
            httpx.get(f"{tunnelled}/health", timeout=2)

        restarted = _ok(_iris("cluster", "--config", str(config_file), "restart", cwd=workspace))
        # The restarted controller adopts the running worker instead of bootstrapping another.
        assert f"controller {controller_url}, 1 worker(s)" in restarted
        ran_again = _ok(_iris("run", "--config", str(config_file), "--", *command, cwd=workspace))
        assert f"from-{worker_host.address}/24" in ran_again

        stopped = _ok(_iris("cluster", "--config", str(config_file), "stop", "--yes", cwd=workspace))
        assert "cluster 'manual-test' stopped" in stopped
        assert "terminated 1 slice(s)" in stopped
    wait_until(lambda: not any(host.processes() for host in hosts), 20, 0.2, "the hosts to run nothing of Iris")
    not_running = _iris("cluster", "--config", str(config_file), "status", cwd=workspace)
    assert not_running.returncode == 1
    assert "cluster 'manual-test' is not running" in not_running.stdout


def test_manual_multi_host_tpu_job_runs_one_task_per_host_with_the_peer_list(
    hosts: list[SshHost], ssh_key: Path, tmp_path: Path
) -> None:
    controller_host, gang = hosts[0], hosts[1:3]
    config = cluster_config([h.address for h in gang], ssh_key, "", tmp_path / "bundles", num_vms=2)
    template = config.scale_groups[GROUP].slice_template
    template.accelerator_type = config_pb2.ACCELERATOR_TYPE_TPU
    # A v4-16 slice is two hosts of four chips: one task per host, all placed at once.
    template.accelerator_variant = "v4-16"
    config_file = _write_config(config, controller_host, tmp_path / "manual.yaml")
    workspace = tmp_path / "workspace"
    workspace.mkdir()
    command = [
        "bash",
        "-c",
        "echo task=$TPU_WORKER_ID peers=$TPU_WORKER_HOSTNAMES on=$(ip -4 -o addr show dev eth0 | awk '{print $4}')",
    ]

    try:
        _ok(_iris("cluster", "--config", str(config_file), "start", cwd=workspace))
        ran = _ok(_iris("run", "--config", str(config_file), "--tpu", "v4-16", "--", *command, cwd=workspace))
    finally:
        _ok(_iris("cluster", "--config", str(config_file), "stop", "--yes", cwd=workspace))

    lines = sorted(line.split("] ")[-1] for line in ran.splitlines() if "task=" in line)
    assert len(lines) == 2, ran
    peers = lines[0].split("peers=")[1].split()[0].split(",")
    assert sorted(peers) == sorted(h.address for h in gang)
    # Task i runs on the i-th host of the peer list, and the two tasks share one list.
    for index, line in enumerate(lines):
        assert line == f"task={index} peers={','.join(peers)} on={peers[index]}/24"


def test_manual_slices_that_cannot_come_up_show_a_one_line_reason_in_the_cli(
    hosts: list[SshHost], host_network: HostNetwork, ssh_key: Path, tmp_path: Path
) -> None:
    assert host_network.wrong_key is not None
    controller_host, refusing_host, broken_host = hosts
    config = cluster_config([refusing_host.address], ssh_key, "", tmp_path / "bundles")
    groups = {
        "wrong-key": (refusing_host.address, str(host_network.wrong_key)),
        "unreachable": (host_network.unreachable_address, ""),
        "bad-bootstrap": (broken_host.address, ""),
    }
    for name, (address, key_file) in groups.items():
        group = config.scale_groups[name]
        group.CopyFrom(config.scale_groups[GROUP])
        group.name = name
        del group.slice_template.manual.hosts[:]
        group.slice_template.manual.hosts.append(address)
        group.slice_template.manual.ssh_key_file = key_file
    del config.scale_groups[GROUP]
    # The worker keeps its runtime's state in a directory of its cache: a file there stops it at start.
    broken_host.host_path("/var/cache/iris/runtime").write_text("not a directory\n")
    config_file = _write_config(config, controller_host, tmp_path / "manual.yaml")
    workspace = tmp_path / "workspace"
    workspace.mkdir()

    try:
        _ok(_iris("cluster", "--config", str(config_file), "start", cwd=workspace))
        for name in groups:
            _ok(_iris("cluster", "--config", str(config_file), "slice", "create", "--scale-group", name, cwd=workspace))

        # Waited for through one tunnel: each CLI call would open its own SSH connections.
        with IrisClient.for_cluster(config_file, workspace=workspace) as client:

            def failed_groups() -> set[str]:
                slices = client.call("list_slices", pb.ListSlicesRequest(include_deleted=True)).slices
                return {item.scale_group for item in slices if item.error}

            wait_until(lambda: set(groups) <= failed_groups(), 60, 0.2, "every slice to fail")
        listed = _iris("cluster", "--config", str(config_file), "slice", "list", "--all", "--json", cwd=workspace)
        failed = {item["scaleGroup"]: item.get("error", "") for item in json.loads(_ok(listed))}
        listing = _ok(_iris("cluster", "--config", str(config_file), "slice", "list", "--all", cwd=workspace))
        autoscaler = _ok(_iris("cluster", "--config", str(config_file), "autoscaler", "status", cwd=workspace))
    finally:
        _ok(_iris("cluster", "--config", str(config_file), "stop", "--yes", cwd=workspace))

    assert "refused the SSH key" in failed["wrong-key"] and refusing_host.address in failed["wrong-key"]
    assert "check that the host is up" in failed["unreachable"]
    assert host_network.unreachable_address in failed["unreachable"]
    assert f"the bootstrap script on {broken_host.address} exited 1: " in failed["bad-bootstrap"]
    assert "/var/cache/iris/runtime" in failed["bad-bootstrap"]
    for reason in failed.values():
        # One line each, shown as it is by both listings.
        assert "\n" not in reason
        assert reason in listing and reason in autoscaler
    wait_until(lambda: not any(host.processes() for host in hosts), 20, 0.2, "the hosts to run nothing of Iris")


def test_manual_controller_sigkilled_and_started_again_adopts_its_slice_and_running_task(
    hosts: list[SshHost], ssh_key: Path, tmp_path: Path
) -> None:
    controller_host, worker_host = hosts[0], hosts[1]
    config = cluster_config([worker_host.address], ssh_key, "", tmp_path / "bundles")
    config.scale_groups[GROUP].min_slices = 1
    config_file = _write_config(config, controller_host, tmp_path / "manual.yaml")
    workspace = tmp_path / "workspace"
    workspace.mkdir()
    controller_url = f"http://{controller_host.address}:{CONTROLLER_PORT}"
    # Hosts share the test's filesystem: the task records each start here and waits for `release`.
    starts, release = tmp_path / "starts", tmp_path / "release"
    script = f"echo started >> {starts}; while [ ! -e {release} ]; do sleep 0.1; done; echo done"

    try:
        _ok(_iris("cluster", "--config", str(config_file), "start", cwd=workspace))
        with IrisClient.remote(controller_url, workspace=workspace) as client:
            job = client.submit(Entrypoint.from_command("bash", "-c", script), name="survivor")
            wait_until(starts.exists, 60, 0.1, "the task to start")
            [worker] = [w.worker_id for w in client.list_workers() if w.state == pb.WORKER_STATE_HEALTHY]
        [daemon] = [p for p in controller_host.processes() if "iris.cluster.controller" in " ".join(p.cmdline())]
        daemon.kill()
        daemon.wait(10)

        restarted = _ok(_iris("cluster", "--config", str(config_file), "start", cwd=workspace))
        assert f"controller {controller_url}, 1 worker(s)" in restarted
        release.touch()
        with IrisClient.remote(controller_url, workspace=workspace) as client:
            client.job(job.job_id).wait(timeout=60)
            state = client.job(job.job_id).status().state
            slices = client.call("list_slices", pb.ListSlicesRequest()).slices
            workers = [w.worker_id for w in client.list_workers() if w.state == pb.WORKER_STATE_HEALTHY]
    finally:
        _ok(_iris("cluster", "--config", str(config_file), "stop", "--yes", cwd=workspace))

    assert state == pb.JOB_STATE_SUCCEEDED
    assert starts.read_text() == "started\n"
    # The same worker, on the same slice, carried on: nothing was bootstrapped again.
    assert workers == [worker]
    assert len(slices) == 1 and slices[0].worker_ids == [worker]


def test_manual_worker_killed_mid_task_fails_its_slice_and_task_reruns_on_replacement(
    hosts: list[SshHost], ssh_key: Path, tmp_path: Path
) -> None:
    controller_host, pool = hosts[0], hosts[1:3]
    config = cluster_config([h.address for h in pool], ssh_key, "", tmp_path / "bundles")
    config.scale_groups[GROUP].min_slices = 1
    config.defaults.timeouts.ssh_poll_interval.milliseconds = 1000
    config_file = _write_config(config, controller_host, tmp_path / "manual.yaml")
    workspace = tmp_path / "workspace"
    workspace.mkdir()
    controller_url = f"http://{controller_host.address}:{CONTROLLER_PORT}"
    # Hosts share the test's filesystem: each start appends its host's address; `release` ends the task.
    starts, release = tmp_path / "starts", tmp_path / "release"
    script = (
        f"ip -4 -o addr show dev eth0 | awk '{{print $4}}' >> {starts}; "
        f"while [ ! -e {release} ]; do sleep 0.1; done"
    )

    def slices() -> list[dict]:
        listing = _iris("cluster", "--config", str(config_file), "slice", "list", "--all", "--json", cwd=workspace)
        return json.loads(_ok(listing))

    try:
        _ok(_iris("cluster", "--config", str(config_file), "start", cwd=workspace))
        with IrisClient.remote(controller_url, workspace=workspace) as client:
            job = client.submit(Entrypoint.from_command("bash", "-c", script), name="outlives-its-host")
            wait_until(starts.exists, 60, 0.1, "the task to start")
            [first_address] = [line.split("/")[0] for line in starts.read_text().splitlines()]
            [first_host] = [h for h in pool if h.address == first_address]
            [spare_host] = [h for h in pool if h is not first_host]
            [worker_daemon] = [p for p in first_host.processes() if _is_worker_daemon(p)]
            worker_daemon.kill()

            wait_until(lambda: len(starts.read_text().splitlines()) == 2, 90, 0.2, "the task to run again")
            release.touch()
            job.wait(timeout=60)
            status = job.status(include_tasks=True)
        listed = slices()
    finally:
        release.touch()
        _ok(_iris("cluster", "--config", str(config_file), "stop", "--yes", cwd=workspace))

    assert status.state == pb.JOB_STATE_SUCCEEDED
    assert [line.split("/")[0] for line in starts.read_text().splitlines()] == [first_address, spare_host.address]
    # Losing the host spent the preemption budget, not the failure budget.
    [task] = status.tasks
    assert task.preemption_count == 1 and task.failure_count == 0
    failed = [s for s in listed if s.get("error")]
    assert len(failed) == 1 and "stopped running" in failed[0]["error"], listed
    # The autoscaler replaced the lost slice with one on the spare host.
    assert any(s["state"] == "READY" and "error" not in s for s in listed), listed
