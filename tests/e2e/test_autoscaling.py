"""End to end: the autoscaler grows and shrinks a local cluster, adopts slices after a controller
crash, and fails tasks over when a slice dies."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import psutil
import pytest

from iris.client import IrisClient
from iris.cluster.local_cluster import LocalCluster
from iris.cluster.types import Entrypoint, ResourceSpec
from iris.config import load_and_validate
from iris.rpc import cluster_pb2 as pb
from iris.time import wait_until


def _config(tmp_path: Path, min_slices: int, max_slices: int, num_vms: int = 1, scale_down: str = "2s") -> Path:
    path = tmp_path / "cluster.yaml"
    path.write_text(
        textwrap.dedent(
            f"""
            name: autoscale-test
            platform:
              local: {{}}
            controller:
              local:
                state_dir: {tmp_path / "state"}
                port: 0
            defaults:
              timeouts:
                heartbeat_interval: 1s
                worker_timeout: 30s
                kill_grace_period: 1s
              autoscaler:
                evaluation_interval: 200ms
                scale_up_delay: 0s
                scale_down_delay: {scale_down}
            scale_groups:
              cpu:
                min_slices: {min_slices}
                max_slices: {max_slices}
                resources:
                  cpu: 2
                  ram: 2GB
                slice_template:
                  accelerator_type: cpu
                  num_vms: {num_vms}
                  local: {{}}
            """
        )
    )
    return path


def _actions(client: IrisClient) -> list[str]:
    status = client.call("get_autoscaler_status", pb.GetAutoscalerStatusRequest())
    return [a.action for a in reversed(status.recent_actions)]


def test_job_scales_a_group_up_from_zero_runs_and_the_idle_slice_is_removed(tmp_path):
    config_path = _config(tmp_path, min_slices=0, max_slices=2)
    cluster = LocalCluster(load_and_validate(config_path), state_dir=tmp_path / "state", config_path=str(config_path))
    cluster.start()
    workspace = tmp_path / "ws"
    workspace.mkdir()
    try:
        with IrisClient.remote(cluster.url, workspace=workspace) as client:
            assert client.list_workers() == []
            job = client.submit(
                Entrypoint.from_command("bash", "-c", "echo ran on $IRIS_WORKER_ID"),
                name="needs-capacity",
                resources=ResourceSpec(cpu=1, memory="100MB"),
            )
            assert job.wait(timeout=60).state == pb.JOB_STATE_SUCCEEDED
            (line,) = [line.data for line in job.logs()]
            assert line.startswith("ran on iris-cpu-")
            wait_until(lambda: "scale_down" in _actions(client), 60, 0.1, "the idle slice to be removed")
            assert _actions(client)[:3] == ["scale_up", "ready", "scale_down"]
            wait_until(
                lambda: [s.state for s in client.call("list_slices", pb.ListSlicesRequest(include_deleted=True)).slices]
                == ["DELETED"],
                30, 0.1, "the slice to be deleted",
            )  # fmt: skip
            wait_until(
                lambda: all(w.state == pb.WORKER_STATE_TERMINATED for w in client.list_workers()),
                30, 0.1, "the removed slice's workers to be gone",
            )  # fmt: skip
    finally:
        cluster.stop()


def test_dead_slice_fails_its_tasks_over_to_another_slice(tmp_path):
    config_path = _config(tmp_path, min_slices=2, max_slices=2, scale_down="1h")
    cluster = LocalCluster(load_and_validate(config_path), state_dir=tmp_path / "state", config_path=str(config_path))
    cluster.start()
    workspace = tmp_path / "ws"
    workspace.mkdir()
    script = "import os, time; print(os.environ['IRIS_WORKER_ID']); time.sleep(600 if os.environ['IRIS_ATTEMPT_ID'] == '0' else 0)"
    try:
        with IrisClient.remote(cluster.url, workspace=workspace) as client:
            job = client.submit(
                Entrypoint.from_command(sys.executable, "-c", script), name="survivor",
                resources=ResourceSpec(cpu=1, memory="100MB"),
            )  # fmt: skip
            wait_until(lambda: job.status().state == pb.JOB_STATE_RUNNING, 60, 0.05, "the job to run")
            first_worker = job.status(include_tasks=True).tasks[0].worker_id
            slice_id = first_worker.rsplit("-", 1)[0]
            worker_pid = next(
                p.pid for p in psutil.process_iter(["cmdline"]) if first_worker in " ".join(p.info["cmdline"] or [])
                and "iris.cluster.worker.main" in " ".join(p.info["cmdline"] or [])
            )
            os.kill(worker_pid, signal.SIGKILL)
            status = job.wait(timeout=60)
            task = job.status(include_tasks=True).tasks[0]
        assert status.state == pb.JOB_STATE_SUCCEEDED
        assert task.attempts[0].state == pb.TASK_STATE_WORKER_FAILED
        # The autoscaler noticed the dead slice, long before the 30s worker timeout would have.
        assert f"slice {slice_id} failed" in task.attempts[0].error
        assert not task.worker_id.startswith(slice_id)
    finally:
        cluster.stop()


def _iris(*args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "iris.cli.main", *args], capture_output=True, text=True, timeout=timeout
    )


@pytest.fixture
def background_cluster(tmp_path):
    config_path = _config(tmp_path, min_slices=1, max_slices=1, num_vms=2, scale_down="1h")
    yield config_path
    _iris("cluster", "--config", str(config_path), "stop")


def test_restarted_controller_adopts_running_slices_and_their_tasks(background_cluster, tmp_path):
    config = str(background_cluster)
    started = _iris("cluster", "--config", config, "start")
    assert started.returncode == 0, started.stderr
    assert "scale_up" in started.stdout and "2 worker(s)" in started.stdout
    state_dir = tmp_path / "state"
    release = tmp_path / "release"
    script = f"import pathlib, time\nwhile not pathlib.Path('{release}').exists(): time.sleep(0.05)\nprint('finished')"
    workspace = tmp_path / "ws"
    workspace.mkdir()
    url = (state_dir / "controller.url").read_text().strip()
    with IrisClient.remote(url, workspace=workspace) as client:
        job = client.submit(Entrypoint.from_command(sys.executable, "-c", script), name="long",
                            resources=ResourceSpec(cpu=1, memory="100MB"))
        wait_until(lambda: job.status().state == pb.JOB_STATE_RUNNING, 60, 0.05, "the job to run")
        slice_before = client.call("list_slices", pb.ListSlicesRequest()).slices[0].slice_id

    controller_pid = int((state_dir / "cluster.pid").read_text())
    os.kill(controller_pid, signal.SIGKILL)
    restarted = _iris("cluster", "--config", config, "start")
    assert restarted.returncode == 0, restarted.stderr + restarted.stdout
    release.touch()

    url = (state_dir / "controller.url").read_text().strip()
    with IrisClient.remote(url) as client:
        status = client.job("/long").wait(timeout=60)
        task = client.job("/long").status(include_tasks=True).tasks[0]
        slices = client.call("list_slices", pb.ListSlicesRequest()).slices
        actions = _actions(client)
    assert status.state == pb.JOB_STATE_SUCCEEDED
    assert len(task.attempts) == 1, "the adopted slice's running task must not be run again"
    assert [s.slice_id for s in slices] == [slice_before]
    assert "scale_up" not in actions
    status_out = _iris("cluster", "--config", config, "status")
    assert f"{slice_before}  ready" in status_out.stdout
