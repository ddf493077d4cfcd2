"""examples/eu-west4.yaml end to end on the fake Google APIs, driven by the real gcloud:
scripts/smoke-test.py starts the cluster (the controller VM running the controller), passes every
validation step (its jobs bring v5litepod-16 slices, four hosts each, up from zero, two at once) and
keeps the cluster up for the CLI's scenarios: jobs run one task per host with the TPU environment,
the CLI reaches the controller through the SSH tunnel (the controller's port is firewalled from the
test host), `reload` redeploys the daemons on the same nodes, `restart` keeps the jobs, preemption
and stockouts are reported; then the smoke test's cleanup leaves nothing labelled."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from cluster_support import (
    CONTROLLER_PORT,
    CONTROLLER_VM,
    GROUP,
    LABEL_PREFIX,
    V5E_16_CHIPS,
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
from smoke_support import SmokeTestRun

from iris.client import IrisClient
from iris.cluster.types import Entrypoint, ResourceSpec, tpu_device
from iris.rpc import cluster_pb2 as pb
from iris.time import Timestamp, wait_until

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
def test_gcp_cluster_smoke_test_passes_then_cli_tpu_job_reload_restart_preemption_stockout_and_cleanup_leaves_nothing(
    fake_gcp: FakeGcp,
    gcp_host_network: HostNetwork,
    gcloud: Gcloud,
    gcloud_environ: dict[str, str],
    relay: ApiRelay,
    tmp_path: Path,
) -> None:
    controller_env = controller_gcloud_env(fake_gcp, relay, tmp_path / "controller-home")
    user_config = write_config(cluster_config(tmp_path, controller_env), tmp_path / "gcp.yaml")
    workspace = tmp_path / "workspace"
    workspace.mkdir()
    cli = dict(os.environ)
    # Zone a refuses for quota, so the first slice comes up in zone b, which takes two slices at a
    # time: the smoke test's concurrent jobs make the autoscaler create both at once.
    fake_gcp.set_quota(ZONES[0], tpu_chips=0)
    fake_gcp.set_quota(ZONES[1], tpu_chips=2 * V5E_16_CHIPS)
    # A TPU API that keeps answering 503: gcloud tries 5 times, backing off about 30 s in all, then
    # prints the API's status (what the platform's error table reads). It runs alongside the scenario.
    fake_gcp.fail_next("unavailable", method="GET", path="/nodes/ghost$", times=100)
    unavailable = subprocess.Popen(
        ["gcloud", "compute", "tpus", "tpu-vm", "describe", "ghost", f"--zone={ZONES[0]}"],
        env=gcloud_environ, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip

    def run_iris(*args: str) -> str:
        return ok(iris(*args, cwd=workspace, env=cli))

    # The smoke test starts the cluster and runs every validation step, then keeps the cluster up
    # for the scenarios below (--pause-before-cleanup) and, once told to go on, deletes it.
    smoke = SmokeTestRun(user_config, LABEL_PREFIX, tmp_path / "smoke-logs", cwd=workspace, env=cli)
    try:
        smoke.wait_until_paused()
        smoke.assert_every_step_passed()
        assert "4 tasks placed together on" in smoke.output() and "accelerator=tpu" in smoke.output()
        # The smoke test's config: the user's with the run's prefix as the cluster's name.
        config_file = smoke.config_file
        vm = fake_gcp.instance(CONTROLLER_VM)
        assert vm.host is not None and vm.zone == ZONES[0]
        nodes = fake_gcp.nodes()
        assert len(nodes) == 2 and {node.zone for node in nodes} == {ZONES[1]}, nodes
        assert all(node.labels[f"{LABEL_PREFIX}-scale-group"] == GROUP for node in nodes)
        with vm.host.refusing(gcp_host_network.gateway, CONTROLLER_PORT):
            # The CLI reaches the firewalled controller through the SSH tunnel; a TPU job gets one
            # task per host of a slice, with the TPU environment.
            ran = run_iris("run", "--config", str(config_file), "--tpu", "v5litepod-16", "--", *TPU_ENV_COMMAND)
            lines = sorted(line.split("] ")[-1] for line in ran.splitlines() if "task=" in line)
            assert len(lines) == 4, ran
            [node] = [n for n in nodes if f"name={n.name} " in lines[0]]
            peers = lines[0].split("hosts=")[1].split()[0].split(",")
            assert sorted(peers) == sorted(host.address for host in node.hosts)
            for index, line in enumerate(lines):
                assert line == (
                    f"task={index} name={node.name} hosts={','.join(peers)} bounds=2,2,1 jax=tpu,cpu pjrt=TPU "
                    f"on={peers[index]}/24"
                )
            status = run_iris("cluster", "--config", str(config_file), "autoscaler", "status")
            quota_lines = [line for line in status.splitlines() if " quota " in line]
            assert any(ZONES[0] in line and "Quota limit" in line for line in quota_lines), status

            check_reload_redeploys_on_the_same_nodes(fake_gcp, config_file, workspace, run_iris)

            # A job on the redeployed workers, preempted mid-task: the slice fails at once, its
            # tasks go back on the preemption budget and start again on another slice.
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
                [running_on] = {line.split()[0] for line in started_on()}
                finished_before = {j.job_id for j in client.list_jobs() if j.state == pb.JOB_STATE_SUCCEEDED}

                # A restart keeps the controller's VM and state: the running job carries on on the
                # adopted workers (none of its tasks starts again: see below), and the finished
                # ones stay queryable.
                restarted = run_iris("cluster", "--config", str(config_file), "restart")
                assert f"restarting the controller on {CONTROLLER_VM}, keeping its state" in restarted
                assert fake_gcp.instance(CONTROLLER_VM).host == vm.host
                jobs = {j.job_id: j.state for j in client.list_jobs()}
                assert jobs[job.job_id] == pb.JOB_STATE_RUNNING
                assert {j for j, state in jobs.items() if state == pb.JOB_STATE_SUCCEEDED} == finished_before

                fake_gcp.preempt(running_on)
                wait_until(
                    lambda: len(started_on()) == 8, 180, 0.5, "the tasks to start again on another slice"
                )
                release.touch()
                job.wait(timeout=60)
                finished = client.job(job.job_id).status()
                slices = client.call("list_slices", pb.ListSlicesRequest(include_deleted=True)).slices
            second = {line.split()[0] for line in started_on()[4:]}
            assert len(second) == 1 and second != {running_on}
            assert finished.state == pb.JOB_STATE_SUCCEEDED
            # The gang's loss is charged to the preemption budget (siblings killed with it are not
            # charged at all), never to the failure budget.
            assert finished.preemption_count >= 1 and finished.failure_count == 0
            [preempted] = [s for s in slices if s.slice_id == running_on]
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
                        "cluster", "--config", str(config_file), "autoscaler", "status", cwd=workspace, env=cli
                    ).stdout
                    pytest.fail(f"iris run said:\n{chr(10).join(waiting.lines()[-10:])}\nautoscaler:\n{status}")
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

        # The smoke test goes on: its cleanup deletes the controller VM and every slice.
        finished_smoke = smoke.finish()
        assert finished_smoke.returncode == 0, smoke.output()
        assert "PASS  cleanup " in smoke.output() and "smoke test passed" in smoke.output(), smoke.output()
    finally:
        if smoke.process.returncode != 0:
            # Whatever failed above, leave nothing behind for the next test.
            smoke.stop()
            iris("cluster", "--config", str(user_config), "debug", "cleanup", "--no-dry-run", cwd=workspace, env=cli)
    # Nothing labelled is left, as gcloud itself lists the project.
    assert gcloud.json("compute", "tpus", "tpu-vm", "list", "--zone=-") == []
    assert gcloud.json("compute", "instances", "list") == []
    stderr = unavailable.communicate(timeout=120)[1]
    assert unavailable.returncode == 1
    assert "'status': 503}>" in stderr and '"status": "UNAVAILABLE"' in stderr
    assert fake_gcp.calls.count(("GET", f"/v2/projects/{fake_gcp.project}/locations/{ZONES[0]}/nodes/ghost")) == 5


def check_reload_redeploys_on_the_same_nodes(
    fake_gcp: FakeGcp, config_file: Path, workspace: Path, run_iris: Callable[..., str]
) -> None:
    """`iris cluster reload` restarts the controller on its VM and the worker daemons on the TPU
    nodes the cluster has: the same nodes and worker ids, new daemons that registered again, and
    the jobs kept (the next job of the caller runs on the redeployed workers)."""
    nodes = sorted(node.name for node in fake_gcp.nodes())
    # One client (one tunnel) for before and after: the controller comes back on the same port.
    with IrisClient.for_cluster(config_file, workspace=workspace) as client:

        def every_slice_up() -> list[str]:
            # The smoke test's second slice may still be coming up.
            healthy = sorted(w.worker_id for w in client.list_workers() if w.state == pb.WORKER_STATE_HEALTHY)
            return healthy if len(healthy) == 4 * len(nodes) else []

        workers_before = wait_until(every_slice_up, 180, 0.5, "every slice's workers to be up")
        jobs_before = {j.job_id: j.state for j in client.list_jobs()}
        creates = _node_creates(fake_gcp)
        hosts = [host for node in fake_gcp.nodes() for host in node.hosts]
        daemons_before = {host.address: {p.pid for p in host.processes()} for host in hosts}
        reload_began = Timestamp.now()

        reloaded = run_iris("cluster", "--config", str(config_file), "reload", "--yes", "--no-build")

        assert f"restarting the controller on {CONTROLLER_VM}, keeping its state" in reloaded, reloaded
        for name in nodes:
            assert f"redeploying the workers of slice {name} on its hosts" in reloaded, reloaded
        assert sorted(node.name for node in fake_gcp.nodes()) == nodes and _node_creates(fake_gcp) == creates
        for host in hosts:
            assert not daemons_before[host.address] & {p.pid for p in host.processes()}, host.address

        def registered_again() -> list[str]:
            workers = [w for w in client.list_workers() if w.state == pb.WORKER_STATE_HEALTHY]
            fresh = sorted(w.worker_id for w in workers if w.registered_at.epoch_ms >= reload_began.epoch_ms)
            return fresh if fresh == workers_before else []

        wait_until(registered_again, 60, 0.5, "the redeployed workers to register")
        assert {j.job_id: j.state for j in client.list_jobs()} == jobs_before


def _node_creates(fake_gcp: FakeGcp) -> int:
    return sum(1 for method, path in fake_gcp.calls if method == "POST" and path.endswith("/nodes"))


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

    dry = ok(iris("cluster", "--config", str(config_file), "debug", "cleanup", cwd=tmp_path, env=cli))
    listed = _resource_lines(dry)
    assert sorted(line.split()[:2] for line in listed) == [
        ["slice", "left-a"], ["slice", "left-b"], ["vm", CONTROLLER_VM]
    ], dry
    assert f"slice  left-a  {GROUP}  {ZONES[0]}" in listed and f"slice  left-b  {GROUP}  {ZONES[1]}" in listed
    assert len(fake_gcp.nodes()) == 3 and len(fake_gcp.instances()) == 1, "a dry run deletes nothing"

    deleted = ok(
        iris(
            "cluster", "--config", str(config_file), "debug", "cleanup", "--no-dry-run", cwd=tmp_path, env=cli
        )
    )
    # Exactly what the dry run listed is deleted, and nothing else.
    assert _resource_lines(deleted) == listed, deleted
    assert deleted.strip().endswith("deleted 1 VM(s) and 2 slice(s)")
    assert [n.name for n in fake_gcp.nodes()] == ["someone-elses"] and fake_gcp.instances() == []


def _resource_lines(cleanup_output: str) -> list[str]:
    """The `vm ...` and `slice ...` lines of `iris cluster debug cleanup`, without trailing blanks."""
    return [line.rstrip() for line in cleanup_output.splitlines() if line.startswith(("vm ", "slice "))]
