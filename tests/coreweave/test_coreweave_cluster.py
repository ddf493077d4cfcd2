"""examples/coreweave.yaml end to end on the fake CKS cluster, driven as an operator drives a real
one, all on one cluster start: scripts/smoke-test.py starts the cluster (with the real `kubectl`
and `kubernetes` client, the controller running from its image in a Deployment Pod) and passes
every validation step, then keeps it up for the rest: `start` again (nothing changes), a GPU job
scaling its NodePool from zero into a task Pod, a changed config started mid-job with the
controller's node cordoned (the controller rolls out onto another node with its state and adopts
the task), early failures of a slice shown by `iris cluster slice list`, `debug cleanup`; then the
smoke test's cleanup stops the cluster.

Only what cannot be the same here is overridden: the kubeconfig, the object storage endpoint and
bucket (a moto server), the images (built from the Dockerfiles on the test base image), free
ports instead of 10000/10001 (Pods share this machine's network) and host directories."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from engines import DockerEngine, build_test_image
from fakes.kubernetes.cluster import FakeKubernetes
from smoke_support import SmokeTestRun

from iris.client.client import IrisClient
from iris.cluster.controller.lifecycle import controller_connection
from iris.cluster.platform.coreweave import CoreweavePlatform
from iris.config import load_and_validate
from iris.rpc import cluster_pb2 as pb
from iris.time import wait_until

REPO = Path(__file__).resolve().parents[2]
IRIS = Path(sys.executable).parent / "iris"
BUCKET = "iris-coreweave-e2e"
# examples/coreweave.yaml's label prefix (its NodePools are iris-<group>): the smoke test's prefix.
LABEL_PREFIX = "iris"
NAMESPACED = ("serviceaccount/iris-controller", "secret/iris-s3-credentials", "configmap/iris-cluster-config",
              "persistentvolumeclaim/iris-controller-state", "deployment/iris-controller",
              "service/iris-controller-svc")
CLUSTER_WIDE = ("namespace/iris", "clusterrole/iris-controller", "clusterrolebinding/iris-controller")


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture(scope="module")
def object_storage(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A moto S3 server on loopback with the cluster's bucket; yields its endpoint."""
    port = _free_port()
    endpoint = f"http://127.0.0.1:{port}"
    log = (tmp_path_factory.mktemp("moto") / "moto.log").open("wb")
    process = subprocess.Popen(
        [str(Path(sys.executable).parent / "moto_server"), "-H", "127.0.0.1", "-p", str(port)],
        stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
    )
    try:
        def answers() -> bool:
            try:
                return httpx.get(endpoint, timeout=1).status_code < 500
            except httpx.TransportError:
                return False

        wait_until(answers, 30, 0.1, "moto to answer")
        httpx.put(
            f"{endpoint}/{BUCKET}",
            content="<CreateBucketConfiguration><LocationConstraint>us-west-2</LocationConstraint></CreateBucketConfiguration>",
            timeout=10,
        ).raise_for_status()
        yield endpoint
    finally:
        os.killpg(process.pid, signal.SIGTERM)
        process.wait(10)
        log.close()


@pytest.fixture(scope="module")
def images(docker_engine: DockerEngine) -> dict[str, str]:
    base = docker_engine.base_image
    return {
        "controller": build_test_image(
            "controller-image", base, "iris-test-controller-coreweave:latest",
            "--dockerfile", str(REPO / "Dockerfile.controller.coreweave"),
        ),
        "worker": build_test_image("worker-image", base, "iris-test-worker:latest"),
        "task": build_test_image("task-image", base, "iris-test-task:latest"),
    }


@pytest.fixture(scope="module")
def cks(docker_engine: DockerEngine, tmp_path_factory: pytest.TempPathFactory) -> Iterator[FakeKubernetes]:
    # Each node has a disk of its own, as on CKS: what a Pod leaves on one is not on the next.
    with FakeKubernetes(
        tmp_path_factory.mktemp("cks"), docker_url=docker_engine.url, in_cluster=True, node_local_disks=True
    ) as cluster:
        yield cluster


def _config_file(directory: Path, cluster: FakeKubernetes, endpoint: str, images: dict[str, str]) -> Path:
    config = yaml.safe_load((REPO / "examples" / "coreweave.yaml").read_text())
    config["platform"]["coreweave"]["kubeconfig_path"] = str(cluster.kubeconfig)
    config["platform"]["coreweave"]["object_storage_endpoint"] = endpoint
    config["storage"]["bundle_prefix"] = f"s3://{BUCKET}/bundles"
    controller = config["controller"]["coreweave"]
    controller["port"] = _free_port()
    controller["image"] = images["controller"]
    bootstrap = config["defaults"]["bootstrap"]
    bootstrap.update(
        docker_image=images["worker"], task_image=images["task"], worker_port=_free_port(),
        cache_dir=str(directory / "nvme" / "iris-cache"),
    )
    config["defaults"]["autoscaler"].update(evaluation_interval="1s", scale_up_delay="0s")
    # A volume that cannot mount is fatal after this grace (90 s on CKS).
    config["platform"]["coreweave"]["mount_failure_grace"] = "3s"
    path = directory / "coreweave.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def _env(cluster: FakeKubernetes) -> dict[str, str]:
    return {**cluster.env(), "R2_ACCESS_KEY_ID": "e2e-key", "R2_SECRET_ACCESS_KEY": "e2e-secret"}


def _iris(cluster: FakeKubernetes, *args: str, timeout: float = 240) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(IRIS), *args], capture_output=True, text=True, env=_env(cluster), timeout=timeout, check=False
    )


def _get(cluster: FakeKubernetes, *what: str, namespace: str = "iris") -> list[dict[str, Any]]:
    shown = cluster.kubectl("get", *what, "-n", namespace, "-o", "json")
    assert shown.returncode == 0, shown.stderr
    found = json.loads(shown.stdout)
    return found["items"] if "items" in found else [found]


def _versions(cluster: FakeKubernetes) -> dict[str, str]:
    objects = _get(cluster, *NAMESPACED) + _get(cluster, *CLUSTER_WIDE)
    return {f"{o['kind']}/{o['metadata']['name']}": o["metadata"]["resourceVersion"] for o in objects}


@contextmanager
def _client(cluster: FakeKubernetes, config: str) -> Iterator[IrisClient]:
    """The Python client through the platform's port-forward, as the CLI reaches the controller."""
    resolved = load_and_validate(config)
    platform = CoreweavePlatform(resolved)
    with controller_connection(platform, resolved) as url, IrisClient.remote(url) as client:
        yield client


def _controller_pod(cluster: FakeKubernetes) -> dict[str, Any] | None:
    pods = [p for p in _get(cluster, "pods", "-l", "app=iris-controller") if not p["metadata"].get("deletionTimestamp")]
    ready = [p for p in pods if any(c["type"] == "Ready" and c["status"] == "True" for c in p["status"].get("conditions", []))]
    return ready[0] if ready else None


@pytest.mark.timeout(900)
def test_coreweave_example_passes_the_smoke_test_runs_a_gpu_job_survives_controller_move_and_stops(
    tmp_path: Path, cks: FakeKubernetes, object_storage: str, images: dict[str, str]
) -> None:
    user_config = _config_file(tmp_path, cks, object_storage, images)
    workspace = tmp_path / "workspace"
    workspace.mkdir()

    # The smoke test starts the cluster and passes every validation step (its concurrent jobs each
    # take a whole CPU worker, so more CPU nodes come up at once), then keeps the cluster up for
    # the scenarios below and, told to go on, deletes it. Its prefix is the example's label
    # prefix, and becomes the cluster's name.
    smoke = SmokeTestRun(user_config, LABEL_PREFIX, tmp_path / "smoke-logs", cwd=workspace, env=_env(cks))
    config = str(smoke.config_file)
    try:
        smoke.wait_until_paused()
        smoke.assert_every_step_passed()
        assert "accelerator=cpu" in smoke.output(), smoke.output()
        # Every resource of seed 001 section 13, read back with kubectl.
        versions = _versions(cks)
        pools = {p["metadata"]["name"]: p for p in _get(cks, "nodepools", namespace="")}
        assert {"iris-h100-8x", "iris-cpu-erapids"} <= set(pools)
        assert pools["iris-h100-8x"]["spec"]["autoscaling"] is True
        controller_pod = _controller_pod(cks)
        assert controller_pod is not None
        assert controller_pod["spec"]["containers"][0]["image"] == images["controller"]

        again = _iris(cks, "--config", config, "cluster", "start")
        assert again.returncode == 0, again.stdout + again.stderr
        assert "already running" in again.stdout and "rolled the controller out" not in again.stdout
        assert _versions(cks) == versions

        # A GPU job: its pool grows from zero, a worker Pod comes up, the task runs in its own Pod.
        assert pools["iris-h100-8x"].get("status", {}).get("currentNodes", 0) == 0
        submitted = _iris(
            cks, "--config", config, "run", "--no-wait", "--gpu", "H100x2", "--workspace", str(workspace),
            "--", "sh", "-c", "echo gpu-task-ran-on-$IRIS_POD_NAME; sleep 6; echo attempt-finished",
        )
        assert submitted.returncode == 0, submitted.stdout + submitted.stderr
        job_id = submitted.stdout.strip().splitlines()[-1]

        def gpu_task_pod() -> dict[str, Any] | None:
            pods = _get(cks, "pods", "-l", "iris.managed=true,iris.role=main")
            return next((p for p in pods if p["status"].get("phase") == "Running"), None)

        task = wait_until(gpu_task_pod, 240, 0.2, "the GPU task Pod to run")
        limits: dict[str, str] = {}
        for container in task["spec"]["containers"]:
            limits.update((container.get("resources") or {}).get("limits") or {})
        assert limits["nvidia.com/gpu"] == "2" and limits["rdma/ib"] == "1"
        assert task["spec"]["hostNetwork"] is True
        assert any(t.get("key") == "nvidia.com/gpu" for t in task["spec"]["tolerations"])
        assert _get(cks, "nodepool", "iris-h100-8x", namespace="")[0]["status"]["currentNodes"] >= 1

        # Each CPU worker offers what other Pods leave of its node: the one beside the controller
        # (if the autoscaler kept it) the controller's 2 cores less.
        worker_nodes = _worker_nodes(cks, "cpu-erapids")
        with _client(cks, config) as client:
            known = {job.job_id for job in client.list_jobs()}
            workers = client.list_workers()
        offers = {worker_nodes[w.worker_id]: w.metadata.cpu_millicores for w in workers
                  if w.worker_id in worker_nodes}
        controller_node = controller_pod["spec"]["nodeName"]
        assert offers == {node: 62_000 if node == controller_node else 64_000 for node in offers}, offers

        # Mid-job, the controller's node is cordoned and a changed config is started: start applies
        # it and rolls the controller out onto it, on another node, with the state of the old one,
        # and the new controller adopts the running task.
        cordoned = cks.kubectl("cordon", controller_pod["spec"]["nodeName"])
        assert cordoned.returncode == 0, cordoned.stderr
        changed = yaml.safe_load(Path(config).read_text())
        changed["scale_groups"]["h100-8x"]["max_slices"] = 6
        Path(config).write_text(yaml.safe_dump(changed))
        rolled = _iris(cks, "--config", config, "cluster", "start")
        assert rolled.returncode == 0, rolled.stdout + rolled.stderr
        assert "rolled the controller out" in rolled.stdout
        [configmap] = _get(cks, "configmap/iris-cluster-config")
        assert yaml.safe_load(configmap["data"]["config.yaml"])["scale_groups"]["h100-8x"]["max_slices"] == 6
        assert _get(cks, "nodepool", "iris-h100-8x", namespace="")[0]["spec"]["maxNodes"] == 6
        moved = _controller_pod(cks)
        assert moved is not None and moved["metadata"]["uid"] != controller_pod["metadata"]["uid"]
        assert moved["spec"]["nodeName"] != controller_pod["spec"]["nodeName"]
        with _client(cks, config) as client:
            groups = client.call("get_autoscaler_status", pb.GetAutoscalerStatusRequest()).groups
            assert {g.name: g.max_slices for g in groups}["h100-8x"] == 6
            # Every job, finished or not, is still known: the state came along to the new node.
            assert known <= {job.job_id for job in client.list_jobs()}
        logs = _iris(cks, "--config", config, "job", "logs", "-f", job_id)
        assert logs.returncode == 0, logs.stdout + logs.stderr
        assert logs.stdout.count(f"gpu-task-ran-on-{task['metadata']['name']}") == 1, logs.stdout
        assert "attempt-finished" in logs.stdout

        _early_failures_end_a_new_slice_shown_by_slice_list(cks, config)

        # debug cleanup: the dry run lists exactly what --no-dry-run then deletes.
        dry = _iris(cks, "--config", config, "cluster", "debug", "cleanup")
        assert dry.returncode == 0 and "dry run" in dry.stdout, dry.stdout + dry.stderr
        listed = [line for line in dry.stdout.splitlines() if line.startswith(("vm ", "slice "))]
        assert {line.split()[0] for line in listed} == {"vm", "slice"}
        cleaned = _iris(cks, "--config", config, "cluster", "debug", "cleanup", "--no-dry-run")
        assert cleaned.returncode == 0, cleaned.stdout + cleaned.stderr
        assert [line for line in cleaned.stdout.splitlines() if line.startswith(("vm ", "slice "))] == listed
        vms = sum(line.startswith("vm ") for line in listed)
        assert f"deleted {vms} VM(s) and {len(listed) - vms} slice(s)" in cleaned.stdout
        after = _iris(cks, "--config", config, "cluster", "debug", "cleanup")
        assert f"nothing of cluster '{LABEL_PREFIX}' found" in after.stdout, after.stdout + after.stderr

        # The smoke test's cleanup stops the controller and deletes what the cluster made.
        finished = smoke.finish()
        assert finished.returncode == 0, smoke.output()
        assert "PASS  cleanup " in smoke.output() and "smoke test passed" in smoke.output(), smoke.output()
    finally:
        if smoke.process.returncode != 0:
            # Whatever failed above, leave nothing behind for the next test.
            smoke.stop()
            _iris(cks, "--config", config, "cluster", "stop", "--yes")

    def only_pools_left() -> bool:
        kinds = "pods,services,deployments,configmaps,secrets,serviceaccounts,persistentvolumeclaims"
        everything = cks.kubectl("get", kinds, "-A", "-o", "json")
        leftovers = [o for o in json.loads(everything.stdout)["items"] if o["metadata"]["namespace"] == "iris"]
        wide = cks.kubectl("get", "namespace/iris", "clusterrole/iris-controller", "clusterrolebinding/iris-controller")
        return not leftovers and "NotFound" in wide.stderr and wide.stdout.strip() == ""

    wait_until(only_pools_left, 60, 0.5, "everything but the NodePools to go")
    assert {"iris-h100-8x", "iris-cpu-erapids"} <= {p["metadata"]["name"] for p in _get(cks, "nodepools", namespace="")}


def _worker_nodes(cks: FakeKubernetes, scale_group: str) -> dict[str, str]:
    """The node each worker of the group runs on, by worker id (its slice's id and -0)."""
    pods = _get(cks, "pods", "-l", f"app=iris-worker,{LABEL_PREFIX}-scale-group={scale_group}")
    return {f"{p['metadata']['labels'][f'{LABEL_PREFIX}-slice-id']}-0": p["spec"]["nodeName"] for p in pods}


def _early_failures_end_a_new_slice_shown_by_slice_list(cks: FakeKubernetes, config: str) -> None:
    """seed 001 section 9 through the controller: a slice whose worker Pod crash-loops, or cannot
    mount its config, ends FAILED with that reason, seen in `iris cluster slice list`. The second
    breakage is one the kubelet meets before the first (a mount before running), so each new
    slice fails for the newest one. The crash loop's reason carries the Pod's log and the mount's
    comes from its Events, both read by the controller in the cluster; a missing Secret and an
    image that cannot be pulled are the Pod's status alone, as a crash loop's restarts are: their
    reasons are in tests/coreweave/test_coreweave_slices.py."""
    breakages: list[tuple[Callable[[], Any], str]] = [
        (lambda: cks.kubectl("patch", "configmap", "iris-cluster-config", "-n", "iris", "--type", "merge",
                             "-p", json.dumps({"data": {"config.yaml": "scale_groups: ["}})),
         "keeps crashing"),
        (lambda: cks.kubectl("delete", "configmap", "iris-cluster-config", "-n", "iris"),
         "cannot mount its volumes"),
    ]
    failed: dict[str, str] = {}
    with _client(cks, config) as client:
        for breakage, reason in breakages:
            breakage()
            created = client.call("create_slice", pb.CreateSliceRequest(scale_group="h100-8x")).slice.slice_id

            def ended() -> str:
                slices = client.call("list_slices", pb.ListSlicesRequest(include_deleted=True)).slices
                ended = [s for s in slices if s.slice_id == created and s.state in ("FAILED", "DELETED")]
                return ended[0].error if ended else ""

            failed[created] = wait_until(ended, 60, 0.2, f"slice {created} to fail")
            assert reason in failed[created], failed[created]
    listed = _iris(cks, "--config", config, "cluster", "slice", "list", "--all")
    assert listed.returncode == 0, listed.stdout + listed.stderr
    lines = {line.split()[0]: line for line in listed.stdout.splitlines() if line.strip()}
    for (_, reason), slice_id in zip(breakages, failed, strict=True):
        assert reason in lines[slice_id], listed.stdout
    assert "last log lines" in lines[next(iter(failed))]


@pytest.mark.timeout(600)
def test_coreweave_smoke_test_with_a_broken_worker_image_fails_with_the_pull_error_and_leaves_nothing(
    tmp_path: Path, cks: FakeKubernetes, object_storage: str, images: dict[str, str]
) -> None:
    broken_image = "iris-test-worker:does-not-exist"
    config = _config_file(tmp_path, cks, object_storage, {**images, "worker": broken_image})
    workspace = tmp_path / "workspace"
    workspace.mkdir()
    # Its own prefix, so its own namespace, NodePools and cluster role beside any other run's.
    prefix = "broken-image"

    result = subprocess.run(
        [sys.executable, str(REPO / "scripts" / "smoke-test.py"), "--config", str(config), "--prefix", prefix,
         "--no-build-images", "--job-timeout", "240", "--log-dir", str(tmp_path / "logs")],
        cwd=workspace, env=_env(cks), capture_output=True, text=True, timeout=540, check=False,
        start_new_session=True,
    )  # fmt: skip

    output = f"{result.stdout}\n{result.stderr}"
    assert result.returncode == 1, output
    assert "PASS  start cluster" in result.stdout, output
    summary = result.stdout.split("smoke test FAILED", 1)[1].splitlines()[1:]
    assert summary and all(f"cannot pull image {broken_image}" in line for line in summary), output
    assert "PASS  cleanup" in result.stdout, output
    role = f"clusterrole/{prefix}-controller"
    left = cks.kubectl("get", f"namespace/{prefix}", role, f"clusterrolebinding/{prefix}-controller")
    assert left.stdout.strip() == "" and "NotFound" in left.stderr, left.stdout
    pods = json.loads(cks.kubectl("get", "pods", "-A", "-o", "json").stdout)["items"]
    assert not [p["metadata"]["name"] for p in pods if p["metadata"]["namespace"] == prefix]
