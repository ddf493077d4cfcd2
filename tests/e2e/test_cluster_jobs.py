"""End to end: real controller and worker processes, jobs submitted through the client."""

from __future__ import annotations

import importlib
import json
import os
import socket
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import cloudpickle
import httpx
import pytest

from iris.client import IrisClient, JobFailedError
from iris.cluster.types import Entrypoint, ResourceSpec
from iris.rpc import cluster_pb2 as pb
from iris.rpc import config_pb2
from iris.time import wait_until

from .conftest import ProcessCluster

# Callables defined here travel by value: the workers cannot import this test module.
cloudpickle.register_pickle_by_value(sys.modules[__name__])


@pytest.fixture(scope="module")
def shared_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ProcessCluster]:
    """One controller and one roomy worker for the tests here that neither kill a daemon nor need a
    config of their own: each of them names its jobs apart from the others'."""
    cluster = ProcessCluster(tmp_path_factory.mktemp("shared-cluster"))
    try:
        cluster.start_controller()
        cluster.start_worker("w0", "--cpu", "8")
        cluster.wait_for_workers("w0")
        yield cluster
    finally:
        cluster.stop()


def _import_from(workspace: Path, module: str):
    sys.path.insert(0, str(workspace))
    try:
        return importlib.import_module(module)
    finally:
        sys.path.remove(str(workspace))
        sys.modules.pop(module, None)


def test_callable_from_workspace_module_returns_its_value(shared_cluster, workspace):
    mathlib = _import_from(workspace, "mathlib")
    with IrisClient.remote(shared_cluster.url, workspace=workspace) as client:
        job = client.submit(Entrypoint.from_callable(mathlib.triple, 14), name="triple")
        assert job.result(timeout=60) == 42
        assert job.status().state == pb.JOB_STATE_SUCCEEDED


def test_callable_that_raises_surfaces_the_remote_traceback(shared_cluster, workspace):
    mathlib = _import_from(workspace, "mathlib")
    with IrisClient.remote(shared_cluster.url, workspace=workspace) as client:
        job = client.submit(Entrypoint.from_callable(mathlib.explode, "the reactor is on fire"), name="explode")
        with pytest.raises(ValueError, match="the reactor is on fire") as raised:
            job.result(timeout=60)
        notes = "\n".join(raised.value.__notes__)
        assert "remote traceback" in notes
        assert "mathlib.py" in notes and "explode" in notes
        status = job.status()
        assert status.state == pb.JOB_STATE_FAILED
        assert "exited with code 1" in status.error


def test_command_job_sees_bundle_but_not_ignored_files(shared_cluster, workspace):
    script = "import os; print(open('data.txt').read().strip()); print('log bundled:', os.path.exists('secret.log'))"
    with IrisClient.remote(shared_cluster.url, workspace=workspace) as client:
        job = client.submit(Entrypoint.from_command(sys.executable, "-c", script), name="reader")
        job.wait(timeout=60)
        lines = [line.data for line in job.logs()]
    assert "payload from the workspace" in lines
    assert "log bundled: False" in lines


def test_job_from_a_workspace_without_files_ships_no_bundle_and_runs_in_an_empty_directory(
    shared_cluster, workspace, tmp_path
):
    empty = tmp_path / "empty-workspace"
    empty.mkdir()
    with IrisClient.remote(shared_cluster.url, workspace=empty) as client:
        bare = client.submit(Entrypoint.from_command("ls", "-A"), name="no-bundle")
        bare.wait(timeout=60)
        bare_spec = client.call("get_job_spec", pb.GetJobSpecRequest(job_id=bare.job_id))
        listed = [line.data for line in bare.logs()]
    with IrisClient.remote(shared_cluster.url, workspace=workspace) as client:
        bundled = client.submit(Entrypoint.from_command("true"), name="with-bundle")
        bundled.wait(timeout=60)
        bundled_spec = client.call("get_job_spec", pb.GetJobSpecRequest(job_id=bundled.job_id))

    assert (bare_spec.bundle_uri, bare_spec.bundle_sha256) == ("", "")
    assert listed == []
    assert bundled_spec.bundle_uri and bundled_spec.bundle_sha256


def test_command_failure_reports_exit_code_and_stderr(shared_cluster, workspace):
    with IrisClient.remote(shared_cluster.url, workspace=workspace) as client:
        job = client.submit(
            Entrypoint.from_command("bash", "-c", "echo to-stdout; echo to-stderr >&2; exit 7"), name="exit7"
        )
        with pytest.raises(JobFailedError, match="exited with code 7"):
            job.wait(timeout=60)
        status = job.status(include_tasks=True)
        sources = {(line.source, line.data) for line in job.logs()}
    assert status.exit_code == 7
    assert status.tasks[0].exit_code == 7
    assert ("stdout", "to-stdout") in sources and ("stderr", "to-stderr") in sources


def test_terminate_running_job_kills_its_process(shared_cluster, workspace, tmp_path, pid_alive):
    pid_file = tmp_path / "task.pid"
    with IrisClient.remote(shared_cluster.url, workspace=workspace) as client:
        job = client.submit(
            Entrypoint.from_command("bash", "-c", f"echo $$ > {pid_file}; exec sleep 600"), name="sleeper"
        )
        wait_until(lambda: job.status().state == pb.JOB_STATE_RUNNING and pid_file.exists(), 60, 0.05, "sleeper running")
        pid = int(pid_file.read_text())
        assert job.terminate() == ["/sleeper"]
        assert job.status().state == pb.JOB_STATE_KILLED
        wait_until(lambda: not pid_alive(pid), 30, 0.05, "the killed task's process to exit")


def test_terminate_parent_cascades_to_child_jobs(shared_cluster, workspace):
    parent_script = textwrap.dedent(
        """
        import os, time
        from iris.client import IrisClient
        from iris.cluster.types import Entrypoint
        client = IrisClient.remote(os.environ["IRIS_CONTROLLER_ADDRESS"])
        child = client.submit(Entrypoint.from_command("sleep", "600"), name="child", resources=None)
        print("child", child.job_id, flush=True)
        time.sleep(600)
        """
    )
    with IrisClient.remote(shared_cluster.url, workspace=workspace) as client:
        parent = client.submit(Entrypoint.from_command(sys.executable, "-c", parent_script), name="parent")
        wait_until(
            lambda: any(j.job_id == "/parent/child" and j.state == pb.JOB_STATE_RUNNING for j in client.list_jobs()),
            60,
            0.05,
            "the child job to run",
        )
        terminated = parent.terminate()
        assert set(terminated) == {"/parent", "/parent/child"}
        child = client.job("/parent/child").status()
        assert child.state == pb.JOB_STATE_KILLED
        assert "parent job /parent ended" in child.error


def test_controller_sigkill_restart_readopts_running_tasks(process_cluster, workspace, tmp_path):
    process_cluster.start_controller()
    process_cluster.start_worker("w0")
    process_cluster.start_worker("w1")
    process_cluster.wait_for_workers("w0", "w1")
    marks = tmp_path / "marks"
    marks.mkdir()
    release = tmp_path / "release"
    script = (
        f"import os, pathlib, time; name = os.environ['IRIS_JOB_ID'].strip('/'); "
        f"open('{marks}/' + name, 'a').write('start\\n'); "
        f"[time.sleep(0.05) for _ in iter(lambda: pathlib.Path('{release}').exists(), True)]; print('done', name)"
    )
    with IrisClient.remote(process_cluster.url, workspace=workspace) as client:
        jobs = [client.submit(Entrypoint.from_command(sys.executable, "-c", script), name=f"survivor-{i}") for i in range(3)]
        wait_until(lambda: all(j.status().state == pb.JOB_STATE_RUNNING for j in jobs), 60, 0.05, "jobs running")

    process_cluster.kill_controller()
    process_cluster.start_controller()
    release.touch()

    with IrisClient.remote(process_cluster.url) as client:
        assert {j.job_id for j in client.list_jobs()} == {f"/survivor-{i}" for i in range(3)}
        for i in range(3):
            status = client.job(f"/survivor-{i}").wait(timeout=60)
            assert status.state == pb.JOB_STATE_SUCCEEDED
            task = client.job(f"/survivor-{i}").status(include_tasks=True).tasks[0]
            assert len(task.attempts) == 1, "a re-adopted task must not be run a second time"
    for i in range(3):
        assert (marks / f"survivor-{i}").read_text() == "start\n"


def test_worker_sigkill_fails_over_task_to_another_worker(process_cluster, workspace):
    process_cluster.start_controller()
    process_cluster.start_worker("w0")
    process_cluster.wait_for_workers("w0")
    # The first attempt hangs; a retry finishes at once, so success proves the retry ran.
    script = "import os, time; print('attempt', os.environ['IRIS_ATTEMPT_ID'], 'on', os.environ['IRIS_WORKER_ID']); " \
             "time.sleep(600 if os.environ['IRIS_ATTEMPT_ID'] == '0' else 0)"
    with IrisClient.remote(process_cluster.url, workspace=workspace) as client:
        job = client.submit(Entrypoint.from_command(sys.executable, "-c", script), name="failover")
        wait_until(lambda: job.status().state == pb.JOB_STATE_RUNNING, 60, 0.05, "the job to run on w0")
        process_cluster.start_worker("w1")
        process_cluster.wait_for_workers("w1")
        process_cluster.kill_worker("w0")
        status = job.wait(timeout=60)
        task = job.status(include_tasks=True).tasks[0]
    assert status.state == pb.JOB_STATE_SUCCEEDED
    assert [a.worker_id for a in task.attempts] == ["w0", "w1"]
    assert task.attempts[0].state == pb.TASK_STATE_WORKER_FAILED
    assert "w0" in task.attempts[0].error
    assert task.preemption_count == 1 and task.failure_count == 0


def test_submit_dispatches_without_waiting_for_a_tick(tmp_path, workspace):
    """With the heartbeat tick and the scheduler's fallback both at 60s, a job can only finish
    quickly if the submit itself woke the scheduler and the placement sent the heartbeat."""
    from iris.cluster.controller.main import ControllerDaemon
    from iris.cluster.controller.settings import DaemonSettings

    config = config_pb2.IrisClusterConfig()
    config.defaults.timeouts.heartbeat_interval.milliseconds = 60_000
    daemon = ControllerDaemon(
        DaemonSettings.from_config(
            config,
            state_dir=tmp_path / "state",
            bundle_prefix=f"file://{tmp_path}/bundles",
            host="127.0.0.1",
            port=0,
            scheduler_fallback_interval_s=60,
        )
    )
    daemon.start_in_thread()
    worker = subprocess.Popen(
        [sys.executable, "-m", "iris.cluster.worker.main", "serve", "--controller-address", daemon.url,
         "--host", "127.0.0.1", "--port", "0", "--cache-dir", str(tmp_path / "cache"), "--worker-id", "w0"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        with IrisClient.remote(daemon.url, workspace=workspace) as client:
            wait_until(lambda: client.list_workers(), 30, 0.05, "the worker to register")
            started = time.monotonic()
            job = client.submit(Entrypoint.from_command("true"), name="quick")
            job.wait(timeout=30)
            assert time.monotonic() - started < 30
    finally:
        worker.terminate()
        worker.wait(15)
        daemon.stop()


def test_connect_api_answers_curl_json(shared_cluster, workspace):
    with IrisClient.remote(shared_cluster.url, workspace=workspace) as client:
        client.submit(Entrypoint.from_command("true"), name="visible")
    result = subprocess.run(
        ["curl", "-sS", "-X", "POST", "-H", "Content-Type: application/json", "-d", '{"name_prefix": "/vis"}',
         f"{shared_cluster.url}/iris.cluster.ControllerService/ListJobs"],
        capture_output=True,
        text=True,
        check=True,
    )
    body = json.loads(result.stdout)
    assert [job["jobId"] for job in body["jobs"]] == ["/visible"]


def test_bad_requests_get_clear_errors_and_the_controller_keeps_serving(shared_cluster):
    base = f"{shared_cluster.url}/iris.cluster.ControllerService"
    json_headers = {"Content-Type": "application/json"}
    malformed = httpx.post(f"{base}/LaunchJob", content=b'{"name": ', headers=json_headers)
    assert malformed.status_code == 400 and malformed.json()["code"] == "invalid_argument"
    garbage = httpx.post(f"{base}/LaunchJob", content=b"\xff\xfe\x00garbage", headers={"Content-Type": "application/proto"})
    assert garbage.json()["code"] == "invalid_argument"
    unknown = httpx.post(f"{base}/GetJobStatus", json={"job_id": "/no-such-job"}, headers=json_headers)
    assert unknown.json() == {"code": "not_found", "message": "job /no-such-job not found"}
    no_entrypoint = httpx.post(f"{base}/LaunchJob", json={"name": "empty"}, headers=json_headers)
    assert no_entrypoint.json()["code"] == "invalid_argument"
    assert "entrypoint is required" in no_entrypoint.json()["message"]
    bad_name = httpx.post(
        f"{base}/LaunchJob", json={"name": "has space", "entrypoint": {"command": {"argv": ["true"]}}}, headers=json_headers
    )
    assert "invalid job name" in bad_name.json()["message"]
    assert httpx.post(f"{base}/ListJobs", json={}, headers=json_headers).status_code == 200


def test_oversized_bundle_is_refused_with_its_size(shared_cluster):
    oversized = os.urandom(65 * 1024 * 1024)
    request = pb.LaunchJobRequest(
        name="huge", entrypoint=pb.Entrypoint(command=pb.CommandEntrypoint(argv=["true"])), bundle_blob=oversized
    )
    response = httpx.post(
        f"{shared_cluster.url}/iris.cluster.ControllerService/LaunchJob",
        content=request.SerializeToString(),
        headers={"Content-Type": "application/proto"},
        timeout=60,
    )
    error = response.json()
    assert error["code"] == "invalid_argument"
    assert "over the controller's limit of 64 MiB" in error["message"]
    assert httpx.get(f"{shared_cluster.url}/health").status_code == 200


def test_controller_with_typo_in_config_exits_naming_the_key(tmp_path):
    config = tmp_path / "bad.yaml"
    config.write_text("platform:\n  local: {}\ndefaults:\n  timeouts:\n    heartbeat_intervall: 2s\n")
    result = subprocess.run(
        [sys.executable, "-m", "iris.cluster.controller.main", "serve", "--config", str(config), "--port", "0"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode != 0
    assert "defaults.timeouts.heartbeat_intervall" in result.stderr
    assert "heartbeat_interval" in result.stderr
    assert "Traceback" not in result.stderr


def test_endpoints_visible_while_job_runs_and_hidden_after(shared_cluster, workspace, tmp_path):
    release = tmp_path / "release"
    script = f"import pathlib, time\nwhile not pathlib.Path('{release}').exists(): time.sleep(0.05)\n"
    with IrisClient.remote(shared_cluster.url, workspace=workspace) as client:
        job = client.submit(Entrypoint.from_command(sys.executable, "-c", script), name="server")
        client.call(
            "register_endpoint",
            pb.RegisterEndpointRequest(name="http", address="127.0.0.1:8080", job_id=job.job_id),
        )
        listed = client.call("list_endpoints", pb.ListEndpointsRequest(prefix="/server/")).endpoints
        assert [(e.name, e.address) for e in listed] == [("/server/http", "127.0.0.1:8080")]
        release.touch()
        job.wait(timeout=60)
        assert list(client.call("list_endpoints", pb.ListEndpointsRequest(prefix="/server/")).endpoints) == []


def test_replicas_get_their_task_index(shared_cluster, workspace):
    with IrisClient.remote(shared_cluster.url, workspace=workspace) as client:
        job = client.submit(
            Entrypoint.from_command("bash", "-c", "echo index=$IRIS_TASK_INDEX of $IRIS_NUM_TASKS"),
            name="fanout",
            replicas=3,
            resources=ResourceSpec(cpu=1, memory="100MB"),
        )
        job.wait(timeout=60)
        lines = sorted(line.data for line in job.logs())
    assert lines == ["index=0 of 3", "index=1 of 3", "index=2 of 3"]


def test_child_job_submitted_from_a_task_runs_with_the_parents_bundle(shared_cluster, workspace):
    parent_script = textwrap.dedent(
        """
        import mathlib
        from iris.client import iris_ctx
        from iris.cluster.types import Entrypoint, ResourceSpec
        ctx = iris_ctx()
        child = ctx.client.submit(
            Entrypoint.from_callable(mathlib.triple, 5), name="child", resources=ResourceSpec(cpu=1, memory="100MB")
        )
        print("child", child.job_id, "returned", child.result(timeout=60))
        """
    )
    with IrisClient.remote(shared_cluster.url, workspace=workspace) as client:
        parent = client.submit(
            Entrypoint.from_command(sys.executable, "-c", parent_script),
            name="bundle-parent",
            resources=ResourceSpec(cpu=1, memory="100MB"),
        )
        parent.wait(timeout=90)
        assert [line.data for line in parent.logs()] == ["child /bundle-parent/child returned 15"]
        child = client.job("/bundle-parent/child").status()
        assert child.parent_job_id == "/bundle-parent"
        assert child.state == pb.JOB_STATE_SUCCEEDED


def test_worker_with_its_own_id_and_a_bootstrap_slice_id_registers_in_that_slice(tmp_path):
    """A worker started outside the local platform keeps its default id (host:port) and is told
    its slice at bootstrap (`--slice-id`): the controller's store counts it as a member of that slice."""
    from iris.cluster.controller.main import ControllerDaemon
    from iris.cluster.controller.settings import DaemonSettings

    daemon = ControllerDaemon(

        DaemonSettings.from_config(

            state_dir=tmp_path / "state",

            bundle_prefix=f"file://{tmp_path}/bundles",

            host="127.0.0.1",

            port=0,

        )

    )
    daemon.start_in_thread()
    worker = subprocess.Popen(
        [sys.executable, "-m", "iris.cluster.worker.main", "serve", "--controller-address", daemon.url,
         "--host", "127.0.0.1", "--port", "0", "--cache-dir", str(tmp_path / "cache"), "--slice-id", "remote-7"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        members = wait_until(
            lambda: daemon.store.slice_members().get("remote-7"), 30, 0.05, "the worker to register in its slice"
        )
        (member,) = members
        assert member["state"] == pb.WORKER_STATE_HEALTHY
        assert member["worker_id"].startswith(f"{socket.gethostname()}:")
    finally:
        worker.terminate()
        worker.wait(15)
        daemon.stop()
