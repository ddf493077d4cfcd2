"""End to end on a cluster whose workers look like two 4-host TPU slices plus one CPU host."""

from __future__ import annotations

import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from iris.client import InvalidRequestError, IrisClient, JobFailedError
from iris.cluster.types import Constraint, CoschedulingConfig, Entrypoint, ResourceSpec, tpu_device
from iris.rpc import cluster_pb2 as pb
from iris.time import wait_until

from .conftest import ProcessCluster

SLICES = ("slice-a", "slice-b")
PRINT_TPU_ENV = (
    "import os; print(os.environ['IRIS_TASK_INDEX'], os.environ['TPU_WORKER_ID'], os.environ['TPU_NAME'], "
    "os.environ['TPU_WORKER_HOSTNAMES'].count(',') + 1, os.environ['JAX_PLATFORMS'])"
)


@pytest.fixture(scope="module")
def tpu_cluster(tmp_path_factory) -> Iterator[ProcessCluster]:
    cluster = ProcessCluster(tmp_path_factory.mktemp("tpu-cluster"))
    try:
        cluster.start_controller()
        worker_ids = []
        for slice_name in SLICES:
            for host in range(4):
                worker_id = f"{slice_name}-{host}"
                cluster.start_worker(
                    worker_id, "--tpu", "v5litepod-16", "--attribute", f"tpu-name={slice_name}",
                    "--attribute", f"tpu-worker-id={host}", "--cpu", "4",
                )
                worker_ids.append(worker_id)
        cluster.start_worker("cpu-0", "--cpu", "4", "--attribute", "zone=local-a")
        cluster.wait_for_workers(*worker_ids, "cpu-0")
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture
def client(tpu_cluster, tmp_path) -> Iterator[IrisClient]:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    with IrisClient.remote(tpu_cluster.url, workspace=workspace) as client:
        yield client


def _workers_of(job) -> list[str]:
    return [task.worker_id for task in job.status(include_tasks=True).tasks]


def test_tpu_gang_runs_one_task_per_host_of_one_slice(client):
    job = client.submit(
        Entrypoint.from_command(sys.executable, "-c", PRINT_TPU_ENV),
        name="tpu-gang",
        resources=ResourceSpec(cpu=1, memory="100MB", device=tpu_device("v5litepod-16")),
    )
    job.wait(timeout=90)
    workers = _workers_of(job)
    assert len(workers) == 4
    slice_names = {w.rsplit("-", 1)[0] for w in workers}
    assert len(slice_names) == 1, f"gang split across slices: {workers}"
    (slice_name,) = slice_names
    lines = sorted(line.data for line in job.logs())
    assert lines == [f"{i} {i} {slice_name} 4 tpu,cpu" for i in range(4)]


def test_gang_that_fits_nowhere_stays_pending_with_reason_while_small_jobs_run(client):
    """Workers may still be registering, so a gang too big for those registered waits, saying why."""
    gang = client.submit(
        Entrypoint.from_command("true"),
        name="gang-of-5",
        replicas=5,
        coscheduling=CoschedulingConfig("tpu-name"),
        resources=ResourceSpec(cpu=1, memory="100MB"),
    )
    small = [
        client.submit(Entrypoint.from_command("true"), name=f"small-{i}", resources=ResourceSpec(cpu=1, memory="100MB"))
        for i in range(3)
    ]
    for job in small:
        assert job.wait(timeout=60).state == pb.JOB_STATE_SUCCEEDED
    status = gang.status()
    assert status.state == pb.JOB_STATE_PENDING
    assert "gang of 5 needs 5 workers sharing one 'tpu-name'; the largest group of suitable workers has 4" in (
        status.pending_reason
    )
    gang.terminate()


def test_constraint_places_tasks_only_on_matching_workers(client):
    job = client.submit(
        Entrypoint.from_command("true"),
        name="on-slice-b",
        replicas=3,
        constraints=[Constraint.parse("tpu-name=slice-b"), Constraint.parse("tpu-worker-id>=1")],
        resources=ResourceSpec(cpu=1, memory="100MB"),
    )
    job.wait(timeout=60)
    assert sorted(_workers_of(job)) == ["slice-b-1", "slice-b-2", "slice-b-3"]


def test_unsatisfiable_job_refused_at_submit_naming_the_missing_device(client):
    """A cluster without scale groups has only its workers: a job none of them could ever hold is
    refused at once, not left waiting."""
    with pytest.raises(InvalidRequestError) as raised:
        client.submit(
            Entrypoint.from_command("true"),
            name="wants-gpu",
            resources=ResourceSpec(
                cpu=1, memory="100MB", device=pb.DeviceConfig(gpu=pb.GpuDevice(variant="H100", count=8))
            ),
        )
    message = str(raised.value)
    assert "no worker of this cluster can ever run it" in message
    assert "no worker has 8x gpu H100 (workers have: 8 with tpu v5litepod-16 (4 chips))" in message
    assert "/wants-gpu" not in [job.job_id for job in client.list_jobs()]


def test_failed_job_error_quotes_its_last_output(client):
    script = "import sys; print('loading data'); print('loss is nan', file=sys.stderr); sys.exit(3)"
    job = client.submit(Entrypoint.from_command(sys.executable, "-c", script), name="diverges",
                        resources=ResourceSpec(cpu=1, memory="100MB"))
    with pytest.raises(JobFailedError) as raised:
        job.wait(timeout=60)
    error = raised.value.status.error
    assert "exited with code 3" in error
    # stdout and stderr are read separately, so their relative order is not guaranteed.
    quoted = error.split("last output: ", 1)[1]
    assert sorted(quoted.split(" | ")) == ["loading data", "loss is nan"]


def test_preempted_gang_member_restarts_the_gang_without_spending_failure_budget(client, tpu_cluster, tmp_path):
    # Attempt 0 of each task hangs until the test releases it; later attempts finish at once.
    script = textwrap.dedent(
        """
        import os, time
        if os.environ["IRIS_ATTEMPT_ID"] == "0":
            time.sleep(600)
        print("attempt", os.environ["IRIS_ATTEMPT_ID"], "on", os.environ["IRIS_WORKER_ID"])
        """
    )
    job = client.submit(
        Entrypoint.from_command(sys.executable, "-c", script),
        name="preempted-gang",
        resources=ResourceSpec(cpu=1, memory="100MB", device=tpu_device("v5litepod-16")),
    )
    wait_until(lambda: job.status().state == pb.JOB_STATE_RUNNING, 60, 0.05, "the gang to run")
    victim = _workers_of(job)[2]
    tpu_cluster.kill_worker(victim)
    status = job.wait(timeout=90)
    tasks = job.status(include_tasks=True).tasks
    assert status.state == pb.JOB_STATE_SUCCEEDED
    assert status.failure_count == 0
    assert sum(t.preemption_count for t in tasks) == 1
    final_workers = {t.worker_id for t in tasks}
    assert victim not in final_workers
    assert len({w.rsplit("-", 1)[0] for w in final_workers}) == 1, "the restarted gang must stay on one slice"
    assert all(len(t.attempts) == 2 for t in tasks), "every member restarts with the gang"


def test_task_serves_on_its_port_and_another_task_reaches_it_through_the_endpoint(client):
    server_script = textwrap.dedent(
        """
        import http.server, os
        from iris.client import iris_ctx
        ctx = iris_ctx()
        port = ctx.ports["http"]

        class Hello(http.server.BaseHTTPRequestHandler):
            def do_GET(self):
                body = f"hello from {ctx.task_id}".encode()
                self.send_response(200)
                self.end_headers()
                self.wfile.write(body)

        server = http.server.HTTPServer(("127.0.0.1", port), Hello)
        ctx.register_endpoint("http", f"127.0.0.1:{port}")
        server.serve_forever()
        """
    )
    client_script = textwrap.dedent(
        """
        import os, time, urllib.request
        from iris.client import IrisClient
        client = IrisClient.remote(os.environ["IRIS_CONTROLLER_ADDRESS"])
        for _ in range(600):
            endpoints = client.list_endpoints("/web-server/")
            if endpoints:
                break
            time.sleep(0.05)
        print(urllib.request.urlopen(f"http://{endpoints[0].address}/").read().decode())
        """
    )
    server = client.submit(
        Entrypoint.from_command(sys.executable, "-c", server_script),
        name="web-server",
        ports=["http"],
        resources=ResourceSpec(cpu=1, memory="100MB"),
    )
    caller = client.submit(
        Entrypoint.from_command(sys.executable, "-c", client_script),
        name="web-client",
        resources=ResourceSpec(cpu=1, memory="100MB"),
    )
    try:
        caller.wait(timeout=90)
        assert [line.data for line in caller.logs() if line.source == "stdout"] == [
            "hello from /web-server/0"
        ]
        task = server.status(include_tasks=True).tasks[0]
        assert set(task.ports) == {"http"} and task.ports["http"] > 0
    finally:
        server.terminate()
    assert client.list_endpoints("/web-server/") == []


def test_priority_job_submitted_later_runs_before_batch_jobs(client, tmp_path):
    marker = Path(tmp_path) / "order"
    # Fill the CPU host so the queue builds up, then release it.
    release = tmp_path / "release"
    hog_script = f"import pathlib, time\nwhile not pathlib.Path('{release}').exists(): time.sleep(0.05)\n"
    cpu_only = [Constraint.parse("zone=local-a")]
    hog = client.submit(Entrypoint.from_command(sys.executable, "-c", hog_script), name="hog",
                        resources=ResourceSpec(cpu=4, memory="100MB"), constraints=cpu_only)
    wait_until(lambda: hog.status().state == pb.JOB_STATE_RUNNING, 60, 0.05, "the hog to run")
    record = f"open('{marker}', 'a').write(__import__('os').environ['IRIS_JOB_ID'] + '\\n')"
    batch = client.submit(Entrypoint.from_command(sys.executable, "-c", record), name="batch-job",
                          resources=ResourceSpec(cpu=4, memory="100MB"), constraints=cpu_only, priority="batch")
    urgent = client.submit(Entrypoint.from_command(sys.executable, "-c", record), name="urgent-job",
                           resources=ResourceSpec(cpu=4, memory="100MB"), constraints=cpu_only, priority="production")
    release.touch()
    batch.wait(timeout=60)
    urgent.wait(timeout=60)
    assert marker.read_text().split() == ["/urgent-job", "/batch-job"]
