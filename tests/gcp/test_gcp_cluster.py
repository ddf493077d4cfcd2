"""examples/eu-west4.yaml end to end on the fake Google APIs, driven by the real gcloud: `iris
cluster start` creates the controller VM running the controller, the controller's autoscaler brings a
v5litepod-16 slice (four hosts) up from zero, jobs run one task per host with the TPU environment,
the CLI reaches the controller through the SSH tunnel (the controller's port is firewalled from
the test host), and `stop` leaves no labelled node or VM."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from cluster_support import (
    CLUSTER,
    CONTROLLER_PORT,
    CONTROLLER_VM,
    GROUP,
    LABEL_PREFIX,
    ZONES,
    ApiRelay,
    cluster_config,
    controller_gcloud_env,
    gcloud_settings,
    iris,
    ok,
    running_iris,
    write_config,
)
from conftest import Gcloud
from fakes.gcp import FakeGcp
from netns import HostNetwork

from iris.client import IrisClient
from iris.cluster.types import Entrypoint, ResourceSpec, tpu_device
from iris.rpc import cluster_pb2 as pb
from iris.time import wait_until

TPU_ENV_COMMAND = [
    "bash",
    "-c",
    (
        "echo task=$TPU_WORKER_ID name=$TPU_NAME hosts=$TPU_WORKER_HOSTNAMES bounds=$TPU_CHIPS_PER_HOST_BOUNDS "
        "jax=$JAX_PLATFORMS pjrt=$PJRT_DEVICE on=$(ip -4 -o addr show dev eth0 | awk '{print $4}')"
    ),
]
V5E_16 = ResourceSpec(cpu=0.5, memory="256MB", device=tpu_device("v5litepod-16"))


@pytest.fixture
def gcloud_environ(fake_gcp: FakeGcp, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """This process's environment points every gcloud at the fake (the CLI it starts inherits it)."""
    env = fake_gcp.gcloud_env(tmp_path / "home")
    for key, value in gcloud_settings(env).items():
        monkeypatch.setenv(key, value)
    monkeypatch.setenv("IRIS_GCP_PROJECT", fake_gcp.project)
    return env


@pytest.fixture
def relay(fake_gcp: FakeGcp, gcp_host_network: HostNetwork) -> Iterator[ApiRelay]:
    port = int(fake_gcp.url.rsplit(":", 1)[1])
    api = ApiRelay(gcp_host_network.gateway, port)
    yield api
    api.close()


@pytest.mark.timeout(900)
def test_gcp_cluster_cli_tpu_job_from_zero_quota_fallback_restart_preemption_stockout_and_stop_leaves_nothing(
    fake_gcp: FakeGcp,
    gcp_host_network: HostNetwork,
    gcloud_environ: dict[str, str],
    relay: ApiRelay,
    tmp_path: Path,
) -> None:
    controller_env = controller_gcloud_env(fake_gcp, relay, tmp_path / "controller-home")
    config = cluster_config(tmp_path, controller_env)
    config_file = write_config(config, tmp_path / "gcp.yaml")
    workspace = tmp_path / "workspace"
    workspace.mkdir()
    cli = dict(os.environ)
    fake_gcp.set_quota(ZONES[0], tpu_chips=0)
    # A TPU API that keeps answering 503: gcloud tries 5 times, backing off about 30 s in all, then
    # prints the API's status (what the platform's error table reads). It runs alongside the scenario.
    fake_gcp.fail_next("unavailable", method="GET", path="/nodes/ghost$", times=100)
    unavailable = subprocess.Popen(
        ["gcloud", "compute", "tpus", "tpu-vm", "describe", "ghost", f"--zone={ZONES[0]}"],
        env=gcloud_environ, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip

    def run_iris(*args: str) -> str:
        return ok(iris(*args, cwd=workspace, env=cli))

    started = run_iris("cluster", "--config", str(config_file), "start")
    vm = fake_gcp.instance(CONTROLLER_VM)
    assert vm.host is not None and vm.zone == ZONES[0]
    controller_url = f"http://{vm.host.address}:{CONTROLLER_PORT}"
    assert f"controller {controller_url}" in started
    try:
        with vm.host.refusing(gcp_host_network.gateway, CONTROLLER_PORT):
            # A TPU job scales the group up from zero: zone a refuses for quota, zone b takes it.
            ran = run_iris(
                "run", "--config", str(config_file), "--tpu", "v5litepod-16", "--", *TPU_ENV_COMMAND
            )
            [node] = fake_gcp.nodes()
            assert node.zone == ZONES[1] and node.labels[f"{LABEL_PREFIX}-scale-group"] == GROUP
            lines = sorted(line.split("] ")[-1] for line in ran.splitlines() if "task=" in line)
            assert len(lines) == 4, ran
            peers = lines[0].split("hosts=")[1].split()[0].split(",")
            assert sorted(peers) == sorted(host.address for host in node.hosts)
            for index, line in enumerate(lines):
                assert line == (
                    f"task={index} name={node.name} hosts={','.join(peers)} bounds=2,2,1 jax=tpu,cpu pjrt=TPU "
                    f"on={peers[index]}/24"
                )
            status = run_iris("cluster", "--config", str(config_file), "autoscaler", "status")
            quota_lines = [line for line in status.splitlines() if " quota " in line]
            assert quota_lines and all(ZONES[0] in line and "Quota limit" in line for line in quota_lines), (
                status
            )

            # Preempted mid-task: the slice fails at once, its tasks go back on the preemption
            # budget, and the autoscaler replaces the slice.
            starts, release = tmp_path / "starts", tmp_path / "release"
            script = (
                f'echo "$TPU_NAME $TPU_WORKER_ID" >> {starts}; while [ ! -e {release} ]; do sleep 0.1; done'
            )
            with IrisClient.for_cluster(config_file, workspace=workspace) as client:
                job = client.submit(
                    Entrypoint.from_command("bash", "-c", script), name="preempted", resources=V5E_16
                )

                def started_on() -> list[str]:
                    return starts.read_text().split("\n")[:-1] if starts.exists() else []

                wait_until(lambda: len(started_on()) == 4, 60, 0.2, "the four tasks to start")

                # A restart keeps the controller's VM and state: the running job carries on on the
                # adopted workers (none of its tasks starts again: see below), and the finished one
                # stays queryable.
                restarted = run_iris("cluster", "--config", str(config_file), "restart")
                assert f"restarting the controller on {CONTROLLER_VM}, keeping its state" in restarted
                assert fake_gcp.instance(CONTROLLER_VM).host == vm.host
                jobs = {j.job_id: j.state for j in client.list_jobs()}
                assert jobs[job.job_id] == pb.JOB_STATE_RUNNING
                assert sorted(jobs.values()) == [pb.JOB_STATE_RUNNING, pb.JOB_STATE_SUCCEEDED], jobs

                fake_gcp.preempt(node.name)
                wait_until(
                    lambda: len(started_on()) == 8, 180, 0.5, "the tasks to start again on a new slice"
                )
                release.touch()
                job.wait(timeout=60)
                finished = client.job(job.job_id).status()
                slices = client.call("list_slices", pb.ListSlicesRequest(include_deleted=True)).slices
            first, second = (
                {line.split()[0] for line in started_on()[:4]},
                {line.split()[0] for line in started_on()[4:]},
            )
            assert first == {node.name} and len(second) == 1 and second != first
            assert finished.state == pb.JOB_STATE_SUCCEEDED
            # The gang's loss is charged to the preemption budget (siblings killed with it are not
            # charged at all), never to the failure budget.
            assert finished.preemption_count >= 1 and finished.failure_count == 0
            [preempted] = [s for s in slices if s.slice_id == node.name]
            assert preempted.error == "preempted"

            # A stockout everywhere: the job waits, and `iris run` and `autoscaler status` say
            # which zones failed and why.
            fake_gcp.set_quota(ZONES[0], tpu_chips=None)
            for zone in ZONES:
                fake_gcp.set_capacity(zone, tpu_chips=0)
            run_iris("cluster", "--config", str(config_file), "slice", "terminate", "--all")
            with running_iris("run", "--config", str(config_file), "--tpu", "v5litepod-16", "--", "true",
                              cwd=workspace, env=cli) as waiting:  # fmt: skip

                def both_zones_out() -> list[str]:
                    return [
                        line
                        for line in waiting.lines()
                        if all(f'no more capacity in the zone "{zone}"' in line for zone in ZONES)
                    ]

                try:
                    wait_until(both_zones_out, 180, 0.5, "the waiting job to name both zones out of capacity")
                except TimeoutError:
                    status = iris(
                        "cluster",
                        "--config",
                        str(config_file),
                        "autoscaler",
                        "status",
                        cwd=workspace,
                        env=cli,
                    )
                    pytest.fail(
                        f"iris run said:\n{chr(10).join(waiting.lines()[-10:])}\nautoscaler:\n{status.stdout}"
                    )
                # The job's own pending reason (iris job status, GetJobStatus) names each zone and why.
                with IrisClient.for_cluster(config_file, workspace=workspace) as client:
                    [pending] = client.list_jobs(states=["pending"])

                    def reason_naming_both_zones() -> list[str]:
                        lines = client.job(pending.job_id).status().pending_reason.splitlines()
                        named = all(
                            any(line.startswith(f"  {zone}: ") and f'capacity in the zone "{zone}"' in line
                                for line in lines)
                            for zone in ZONES
                        )  # fmt: skip
                        return lines if named else []

                    reason = wait_until(reason_naming_both_zones, 30, 0.5, "the job's pending reason")
                assert f"{GROUP} can add no slice: every zone refused" in reason, reason
            assert f"{GROUP} has no zone with quota: {ZONES[0]} (" in both_zones_out()[0]
            status = run_iris("cluster", "--config", str(config_file), "autoscaler", "status")
            for zone in ZONES:
                assert any(" quota " in line and f'zone "{zone}"' in line for line in status.splitlines()), (
                    status
                )

            listed = run_iris("cluster", "--config", str(config_file), "debug", "cleanup")
            assert f"vm     {CONTROLLER_VM}" in listed and "dry run: 1 VM(s)" in listed
            assert fake_gcp.instances(), "a dry run deletes nothing"

            stopped = run_iris("cluster", "--config", str(config_file), "stop", "--yes")
        assert f"cluster '{CLUSTER}' stopped" in stopped
    finally:
        # Whatever failed above, leave nothing behind for the next test.
        iris(
            "cluster",
            "--config",
            str(config_file),
            "debug",
            "cleanup",
            "--no-dry-run",
            cwd=workspace,
            env=cli,
        )
    assert fake_gcp.nodes() == [] and fake_gcp.instances() == []
    assert f"nothing of cluster '{CLUSTER}' found" in run_iris(
        "cluster", "--config", str(config_file), "debug", "cleanup"
    )
    stderr = unavailable.communicate(timeout=120)[1]
    assert unavailable.returncode == 1
    assert "'status': 503}>" in stderr and '"status": "UNAVAILABLE"' in stderr
    assert fake_gcp.calls.count(("GET", f"/v2/projects/{fake_gcp.project}/locations/{ZONES[0]}/nodes/ghost")) == 5


def test_gcp_debug_cleanup_lists_then_deletes_every_labelled_node_and_vm(
    fake_gcp: FakeGcp, gcloud: Gcloud, gcloud_environ: dict[str, str], tmp_path: Path
) -> None:
    config_file = write_config(cluster_config(tmp_path, {}), tmp_path / "gcp.yaml")
    managed = f"--labels={LABEL_PREFIX}-managed=true,{LABEL_PREFIX}-scale-group={GROUP}"
    for zone, name in zip(ZONES, ("left-a", "left-b"), strict=True):
        gcloud.ok(
            "compute", "tpus", "tpu-vm", "create", name, f"--zone={zone}", "--accelerator-type=v5litepod-8",
            "--version=v2-alpha-tpuv5-lite", managed, "--async",
        )  # fmt: skip
    gcloud.ok(
        "compute", "instances", "create", CONTROLLER_VM, f"--zone={ZONES[0]}",
        f"--labels=iris-controller-{LABEL_PREFIX}=true,{LABEL_PREFIX}-managed=true",
    )  # fmt: skip
    gcloud.ok("compute", "tpus", "tpu-vm", "create", "someone-elses", f"--zone={ZONES[0]}",
              "--accelerator-type=v5litepod-8", "--version=v2-alpha-tpuv5-lite", "--async")  # fmt: skip
    cli = dict(os.environ)

    listed = ok(iris("cluster", "--config", str(config_file), "debug", "cleanup", cwd=tmp_path, env=cli))
    assert f"vm     {CONTROLLER_VM}" in listed
    assert f"slice  left-a  {GROUP}  {ZONES[0]}" in listed and f"slice  left-b  {GROUP}  {ZONES[1]}" in listed
    assert "someone-elses" not in listed
    assert len(fake_gcp.nodes()) == 3

    deleted = ok(
        iris(
            "cluster", "--config", str(config_file), "debug", "cleanup", "--no-dry-run", cwd=tmp_path, env=cli
        )
    )
    assert "deleted 1 VM(s) and 2 slice(s)" in deleted
    assert [n.name for n in fake_gcp.nodes()] == ["someone-elses"] and fake_gcp.instances() == []
