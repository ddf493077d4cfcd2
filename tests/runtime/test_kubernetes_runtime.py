"""What only the kubernetes runtime does: the task Pod's shape (read back with kubectl), early
failure with the kubelet's reason, and ownership by the worker Pod."""

from __future__ import annotations

import contextlib
import json
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from engines import DockerEngine
from fakes.kubernetes.cluster import FakeKubernetes
from kubernetes import client as k8s
from kubernetes import config
from runtime_support import lines, py

from iris.client import IrisClient
from iris.cluster.controller.main import ControllerDaemon
from iris.cluster.controller.settings import DaemonSettings
from iris.cluster.runtime.kubernetes import (
    KubernetesContainerHandle,
    KubernetesRuntime,
    KubernetesSettings,
    NodeRoom,
    label_value,
    pod_name,
    task_pod_manifest,
)
from iris.cluster.runtime.pod_workdir import zip_tree
from iris.cluster.runtime.types import ContainerConfig, ContainerError, ContainerPhase, managed_labels
from iris.cluster.worker.node_offer import node_offer_reader
from iris.cluster.worker.worker import Worker, WorkerSettings
from iris.rpc import cluster_pb2 as pb
from iris.time import wait_until

TASK_ID = "/alice/train/3"
JOB_ID = "/alice/train"


@pytest.fixture
def core(kubernetes_cluster: FakeKubernetes) -> Iterator[Any]:
    api_client = config.new_client_from_config(config_file=str(kubernetes_cluster.kubeconfig))
    yield k8s.CoreV1Api(api_client)
    api_client.close()


@pytest.fixture
def namespace(core: Any) -> Iterator[str]:
    name = f"rt-{uuid.uuid4().hex[:8]}"
    core.create_namespace({"metadata": {"name": name}})
    yield name
    core.delete_namespace(name)


def _config(workdir: Path, image: str, command: list[str], **overrides: Any) -> ContainerConfig:
    return ContainerConfig(
        command=command,
        workdir=workdir,
        task_id=TASK_ID,
        attempt_id=0,
        labels=managed_labels(TASK_ID, JOB_ID, 0),
        image=image,
        **overrides,
    )


# -- pure --------------------------------------------------------------------------------------


def test_label_value_keeps_valid_values_and_encodes_others_distinctly() -> None:
    assert label_value("true") == "true"
    assert label_value("/alice/train/3") == f"alice.train.3-{label_value('/alice/train/3').rsplit('-', 1)[1]}"
    assert label_value("/a/b") != label_value("/a.b")
    assert len(label_value("x" * 200)) <= 63


def test_pod_name_is_a_valid_lowercase_dns_name() -> None:
    config_ = _config(Path("/tmp"), "img", ["true"])
    name = pod_name(config_)

    assert name.startswith("iris-alice-train-3-0-")
    assert name == name.lower() and len(name) <= 63


def test_task_pod_manifest_without_gpus_claims_no_gpus_but_tolerates_gpu_nodes() -> None:
    manifest = task_pod_manifest(
        _config(Path("/w"), "img", ["python3", "x.py"], cpu_millicores=500, memory_bytes=2**30),
        "p",
        KubernetesSettings(namespace="iris"),
    )

    resources = manifest["spec"]["containers"][0]["resources"]
    assert resources == {
        "requests": {"cpu": "500m", "memory": str(2**30)},
        "limits": {"cpu": "500m", "memory": str(2**30)},
    }
    assert manifest["spec"]["tolerations"] == [
        {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
    ]
    assert "ownerReferences" not in manifest["metadata"]


def test_task_pod_manifest_brings_its_workdir_and_runs_build_steps_before_the_gated_task() -> None:
    workdir = Path("/var/cache/iris/tasks/alice-train-3")
    config = _config(
        workdir,
        "task-img",
        ["python3", "-m", "runner", f"{workdir}/_callable.pkl"],
        env={"PYTHONPATH": f"{workdir}:/opt/extra", "IRIS_WORKDIR": str(workdir)},
        setup_commands=["echo one", "echo two"],
        bundle_uri="file:///shared/bundles/" + "a" * 64 + ".zip",
        bundle_sha256="a" * 64,
    )

    spec = task_pod_manifest(
        config, "p", KubernetesSettings(namespace="iris"), "worker-img", with_files=True
    )["spec"]

    assert {"name": "workdir", "emptyDir": {}} in spec["volumes"]
    assert {"name": "worker-files", "configMap": {"name": "p"}} in spec["volumes"]
    fill, *steps = spec["initContainers"]
    assert fill["image"] == "worker-img"
    assert fill["command"] == [
        *("python3", "-m", "iris.cluster.runtime.pod_workdir", "fill", "/app"),
        *("--bundle", f"file:///shared/bundles/{'a' * 64}.zip", "--sha256", "a" * 64),
        *("--files", "/var/run/iris/worker-files/workdir.zip"),
    ]
    # Only the fill step sees the file:// store, read-only.
    assert {"name": "bundle-store", "mountPath": "/shared/bundles", "readOnly": True} in fill["volumeMounts"]
    assert [step["command"] for step in steps] == [["bash", "-c", "echo one"], ["bash", "-c", "echo two"]]
    task, keeper = spec["containers"]
    assert task["command"][:2] == ["sh", "-c"]
    assert task["command"][-4:] == ["python3", "-m", "runner", "/app/_callable.pkl"]
    assert (task["workingDir"], keeper["name"], keeper["image"]) == ("/app", "workdir", "worker-img")
    env = {e["name"]: e.get("value") for e in task["env"]}
    assert env["PYTHONPATH"] == "/app:/opt/extra" and env["IRIS_WORKDIR"] == "/app"
    assert not [
        v for v in spec["volumes"] if "hostPath" in v and v["hostPath"]["path"].startswith(str(workdir))
    ]


def test_task_pod_manifest_of_an_infiniband_worker_claims_rdma_and_gets_the_seed_env() -> None:
    settings = KubernetesSettings.from_env(
        {
            "IRIS_POD_NAMESPACE": "iris",
            "IRIS_INFINIBAND": "true",
            "IRIS_S3_SECRET_NAME": "iris-s3-credentials",
            "IRIS_SERVICE_ACCOUNT_NAME": "iris-tasks",
            "AWS_ENDPOINT_URL": "http://object-store.example:9000",
            "FSSPEC_S3": '{"endpoint_url": "http://object-store.example:9000"}',
        }
    )
    manifest = task_pod_manifest(
        _config(Path("/w"), "img", ["python3", "x.py"], cpu_millicores=500), "p", settings
    )

    container = manifest["spec"]["containers"][0]
    assert container["resources"]["limits"] == {"cpu": "500m", "rdma/ib": "1"}
    assert container["resources"]["requests"] == {"cpu": "500m", "rdma/ib": "1"}
    env = {e["name"]: e.get("value", e.get("valueFrom")) for e in container["env"]}
    # Seed 001 section 10: the task Pod learns about InfiniBand only through the claimed device.
    assert not [name for name in env if "INFINIBAND" in name]
    assert env["IRIS_S3_SECRET_NAME"] == "iris-s3-credentials"
    assert env["IRIS_SERVICE_ACCOUNT_NAME"] == "iris-tasks"
    assert env["AWS_ENDPOINT_URL"] == "http://object-store.example:9000"
    assert env["FSSPEC_S3"] == '{"endpoint_url": "http://object-store.example:9000"}'
    assert env["AWS_SECRET_ACCESS_KEY"] == {
        "secretKeyRef": {"name": "iris-s3-credentials", "key": "AWS_SECRET_ACCESS_KEY"}
    }
    assert manifest["spec"]["serviceAccountName"] == "iris-tasks"


# -- against the fake cluster ------------------------------------------------------------------


def test_gpu_task_pod_carries_gpus_toleration_host_network_env_and_owner(
    kubernetes_cluster: FakeKubernetes,
    core: Any,
    namespace: str,
    docker_engine: DockerEngine,
    tmp_path: Path,
    task_image: str,
) -> None:
    node = f"gpu-{uuid.uuid4().hex[:6]}"
    kubernetes_cluster.add_node(
        node,
        capacity={"cpu": "32", "memory": "128Gi", "nvidia.com/gpu": "8", "rdma/ib": "1", "pods": "110"},
        taints=[{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}],
    )
    core.create_namespaced_secret(
        namespace,
        {
            "metadata": {"name": "s3"},
            "stringData": {"AWS_ACCESS_KEY_ID": "key-id", "AWS_SECRET_ACCESS_KEY": "k"},
        },
    )
    worker = core.create_namespaced_pod(
        namespace,
        {
            "metadata": {"name": "worker"},
            "spec": {
                "nodeName": node,
                "tolerations": [{"operator": "Exists"}],
                # Task Pods fill their workdir with this Pod's image, which has iris.
                "containers": [{"name": "w", "image": task_image, "command": ["sleep", "600"]}],
            },
        },
    )
    settings = KubernetesSettings(
        namespace=namespace,
        owner_pod_name="worker",
        owner_pod_uid=worker.metadata.uid,
        node_name=node,
        s3_secret="s3",
        infiniband=True,
    )
    runtime = KubernetesRuntime(settings, kubeconfig=str(kubernetes_cluster.kubeconfig))
    workdir = tmp_path / "work"
    workdir.mkdir()
    handle = runtime.create_container(
        _config(
            workdir,
            docker_engine.base_image,
            py(
                "import os; print(os.environ['IRIS_POD_NAME'], os.environ['IRIS_WORKER_NODE_NAME'], "
                "os.environ['AWS_ACCESS_KEY_ID'], os.environ['IRIS_JOB'])"
            ),
            gpu_count=2,
            env={"IRIS_JOB": JOB_ID},
        )
    )
    try:
        handle.run()
        status = handle.wait(timeout=60)
        shown = kubernetes_cluster.kubectl("get", "pod", "-n", namespace, handle.container_id, "-o", "json")
        pod = json.loads(shown.stdout)
    finally:
        handle.cleanup()

    assert status.exit_code == 0, status.error
    assert lines(handle, "stdout") == [f"{handle.container_id} {node} key-id {JOB_ID}"]
    spec = pod["spec"]
    limits = spec["containers"][0]["resources"]["limits"]
    assert limits["nvidia.com/gpu"] == "2" and limits["rdma/ib"] == "1"
    assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in spec["tolerations"]
    assert spec["hostNetwork"] is True and spec["dnsPolicy"] == "ClusterFirstWithHostNet"
    assert spec["nodeName"] == node
    assert pod["metadata"]["ownerReferences"][0]["uid"] == worker.metadata.uid
    assert pod["metadata"]["labels"]["iris.managed"] == "true"
    assert pod["metadata"]["annotations"]["iris.task_id"] == TASK_ID
    env = {e["name"]: e for e in spec["containers"][0]["env"]}
    assert env["AWS_ACCESS_KEY_ID"]["valueFrom"]["secretKeyRef"] == {"name": "s3", "key": "AWS_ACCESS_KEY_ID"}
    assert env["IRIS_POD_UID"]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.uid"


def test_deleting_the_worker_pod_garbage_collects_its_task_pods(
    kubernetes_cluster: FakeKubernetes,
    core: Any,
    namespace: str,
    docker_engine: DockerEngine,
    tmp_path: Path,
    task_image: str,
) -> None:
    worker = core.create_namespaced_pod(
        namespace,
        {"metadata": {"name": "worker"}, "spec": {"containers": [{"name": "w", "image": task_image}]}},
    )
    settings = KubernetesSettings(
        namespace=namespace, owner_pod_name="worker", owner_pod_uid=worker.metadata.uid
    )
    runtime = KubernetesRuntime(settings, kubeconfig=str(kubernetes_cluster.kubeconfig))
    handle = runtime.create_container(_config(tmp_path, docker_engine.base_image, ["sleep", "600"]))
    try:
        handle.run()
        core.delete_namespaced_pod("worker", namespace, grace_period_seconds=0)

        status = handle.wait(timeout=30)
    finally:
        handle.cleanup()

    assert status.phase == ContainerPhase.EXITED
    with contextlib.suppress(Exception):
        core.read_namespaced_pod(handle.container_id, namespace)
        pytest.fail("the task Pod outlived its worker Pod")


def test_unpullable_image_fails_the_attempt_at_once_with_the_kubelets_reason(
    kubernetes_cluster: FakeKubernetes, namespace: str, tmp_path: Path, task_image: str
) -> None:
    runtime = KubernetesRuntime(
        KubernetesSettings(namespace=namespace, helper_image=task_image),
        kubeconfig=str(kubernetes_cluster.kubeconfig),
    )
    handle = runtime.create_container(_config(tmp_path, "iris-test/no-such-image:1", ["true"]))
    started = time.monotonic()
    try:
        with pytest.raises(ContainerError) as excinfo:
            handle.run()
        status = handle.status()
    finally:
        handle.cleanup()

    assert time.monotonic() - started < 10
    assert "ErrImagePull" in str(excinfo.value)
    assert status.phase == ContainerPhase.EXITED
    assert "ErrImagePull" in status.error and "no-such-image" in status.error


def test_missing_s3_secret_fails_with_create_container_config_error(
    kubernetes_cluster: FakeKubernetes,
    namespace: str,
    docker_engine: DockerEngine,
    tmp_path: Path,
    task_image: str,
) -> None:
    settings = KubernetesSettings(namespace=namespace, s3_secret="not-created", helper_image=task_image)
    runtime = KubernetesRuntime(settings, kubeconfig=str(kubernetes_cluster.kubeconfig))
    handle = runtime.create_container(_config(tmp_path, docker_engine.base_image, ["true"]))
    try:
        with pytest.raises(ContainerError) as excinfo:
            handle.run()
    finally:
        handle.cleanup()

    assert 'CreateContainerConfigError: secret "not-created" not found' in str(excinfo.value)


def test_runtime_without_a_reachable_api_server_says_where_it_looked(tmp_path: Path) -> None:
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        json.dumps(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "current-context": "c",
                "clusters": [{"name": "c", "cluster": {"server": "http://127.0.0.1:1"}}],
                "users": [{"name": "u", "user": {}}],
                "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}],
            }
        )
    )

    with pytest.raises(ContainerError) as excinfo:
        KubernetesRuntime(KubernetesSettings(namespace="iris"), kubeconfig=str(kubeconfig))

    assert "cannot list Pods in namespace 'iris' at http://127.0.0.1:1" in str(excinfo.value)


def test_task_pods_end_when_the_namespace_is_deleted(
    kubernetes_cluster: FakeKubernetes,
    core: Any,
    docker_engine: DockerEngine,
    tmp_path: Path,
    task_image: str,
) -> None:
    name = f"rt-{uuid.uuid4().hex[:8]}"
    core.create_namespace({"metadata": {"name": name}})
    runtime = KubernetesRuntime(
        KubernetesSettings(namespace=name, helper_image=task_image),
        kubeconfig=str(kubernetes_cluster.kubeconfig),
    )
    handle = runtime.create_container(_config(tmp_path, docker_engine.base_image, ["sleep", "600"]))
    try:
        handle.run()
        core.delete_namespace(name)
        status = handle.wait(timeout=30)
    finally:
        handle.cleanup()

    # The namespace's Pods are deleted gracefully: the task gets SIGTERM.
    assert status.phase == ContainerPhase.EXITED
    assert status.error == "killed by signal 15 (SIGTERM)"
    wait_until(
        lambda: name not in [n.metadata.name for n in core.list_namespace().items], 10, 0.1, "namespace gone"
    )


def test_bundle_that_does_not_match_its_digest_fails_the_attempt_with_the_init_containers_reason(
    kubernetes_cluster: FakeKubernetes,
    namespace: str,
    docker_engine: DockerEngine,
    tmp_path: Path,
    task_image: str,
) -> None:
    store = tmp_path / "bundles"
    store.mkdir()
    claimed = "ab" * 32
    (store / f"{claimed}.zip").write_bytes(
        zip_tree(Path(__file__).parent, lambda path: path.name == "engines.py")
    )
    runtime = KubernetesRuntime(
        KubernetesSettings(namespace=namespace, helper_image=task_image),
        kubeconfig=str(kubernetes_cluster.kubeconfig),
    )
    workdir = tmp_path / "work"
    workdir.mkdir()
    handle = runtime.create_container(
        _config(
            workdir,
            docker_engine.base_image,
            ["true"],
            bundle_uri=f"file://{store}/{claimed}.zip",
            bundle_sha256=claimed,
        )
    )
    try:
        with pytest.raises(ContainerError) as excinfo:
            handle.run()
    finally:
        handle.cleanup()

    assert "cannot materialise the task's workdir" in str(excinfo.value)
    assert f"not {claimed}: resubmit the job" in str(excinfo.value)


def test_task_claiming_every_core_of_its_node_runs_even_on_a_smaller_machine(
    kubernetes_cluster: FakeKubernetes,
    namespace: str,
    docker_engine: DockerEngine,
    tmp_path: Path,
    task_image: str,
) -> None:
    # A task that takes its whole worker claims all 64 cores of the node (the smoke test's
    # concurrent jobs do); the machine running the tests has fewer.
    runtime = KubernetesRuntime(
        KubernetesSettings(namespace=namespace, helper_image=task_image),
        kubeconfig=str(kubernetes_cluster.kubeconfig),
    )
    handle = runtime.create_container(
        _config(tmp_path, docker_engine.base_image, ["echo", "whole-node"], cpu_millicores=64_000)
    )
    try:
        handle.run()
        status = handle.wait(timeout=60)
    finally:
        handle.cleanup()

    assert status.phase == ContainerPhase.EXITED and status.exit_code == 0, status.error
    assert lines(handle, "stdout") == ["whole-node"]


def test_task_container_the_runtime_refuses_to_create_fails_with_create_container_error(
    kubernetes_cluster: FakeKubernetes,
    namespace: str,
    docker_engine: DockerEngine,
    tmp_path: Path,
    task_image: str,
) -> None:
    runtime = KubernetesRuntime(
        KubernetesSettings(namespace=namespace, helper_image=task_image),
        kubeconfig=str(kubernetes_cluster.kubeconfig),
    )
    # Below the smallest memory limit a container runtime accepts.
    handle = runtime.create_container(_config(tmp_path, docker_engine.base_image, ["true"], memory_bytes=1024 * 1024))
    started = time.monotonic()
    try:
        with pytest.raises(ContainerError) as excinfo:
            handle.run()
    finally:
        handle.cleanup()

    assert time.monotonic() - started < 30
    assert "CreateContainerError" in str(excinfo.value) and "memory" in str(excinfo.value).lower()


# -- sharing the worker's node -------------------------------------------------------------------

ABSENT_IMAGE = "iris-test/absent:1"


def _node_pod(
    name: str, node: str, resources: dict[str, Any], labels: dict[str, str] | None = None
) -> dict[str, Any]:
    """A Pod bound to `node` that only holds its requests (its image is never there to run)."""
    container = {"name": "c", "image": ABSENT_IMAGE, "resources": resources}
    spec = {"nodeName": node, "containers": [container]}
    return {"metadata": {"name": name, "labels": labels or {}}, "spec": spec}


@contextlib.contextmanager
def _node(kubernetes_cluster: FakeKubernetes, core: Any, capacity: dict[str, str]) -> Iterator[str]:
    name = f"shared-{uuid.uuid4().hex[:6]}"
    kubernetes_cluster.add_node(name, capacity={**capacity, "pods": "110"})
    try:
        yield name
    finally:
        core.delete_node(name)


def _runtime_on(
    kubernetes_cluster: FakeKubernetes, namespace: str, node: str, **settings: Any
) -> KubernetesRuntime:
    """A worker's runtime on `node`, as the worker Pod there would make it."""
    worker_settings = KubernetesSettings(namespace=namespace, node_name=node, **settings)
    return KubernetesRuntime(worker_settings, kubeconfig=str(kubernetes_cluster.kubeconfig))


@contextlib.contextmanager
def _task_beside(
    kubernetes_cluster: FakeKubernetes, core: Any, namespace: str, holder: tuple[str, str], grace_s: float,
    config: ContainerConfig, helper_image: str,
) -> Iterator[KubernetesContainerHandle]:
    """A task container on an 8-core node where Pod `holder` (name, cpu) already requests part of
    the cores; the task is created, not run, and is cleaned up at the end."""
    with _node(kubernetes_cluster, core, {"cpu": "8", "memory": "32Gi"}) as node:
        name, cpu = holder
        core.create_namespaced_pod(namespace, _node_pod(name, node, {"requests": {"cpu": cpu}}))
        runtime = _runtime_on(
            kubernetes_cluster, namespace, node, helper_image=helper_image, unschedulable_grace_s=grace_s
        )
        handle = runtime.create_container(config)
        try:
            yield handle
        finally:
            handle.cleanup()


def test_node_room_is_the_nodes_allocatable_less_what_other_live_pods_on_it_request(
    kubernetes_cluster: FakeKubernetes, core: Any, namespace: str, task_image: str
) -> None:
    with _node(kubernetes_cluster, core, {"cpu": "64", "memory": "256Gi", "nvidia.com/gpu": "8"}) as node:
        # The controller (requests equal to limits), a daemon giving only limits (its requests)
        # and holding a GPU, and a task Pod of this very worker, whose room is what the worker offers.
        guaranteed = {"cpu": "2", "memory": "4Gi"}
        core.create_namespaced_pod(
            namespace, _node_pod("controller", node, {"requests": guaranteed, "limits": guaranteed})
        )
        daemon = {"cpu": "500m", "memory": "256Mi", "nvidia.com/gpu": "1"}
        core.create_namespaced_pod(namespace, _node_pod("daemon", node, {"limits": daemon}))
        own = {"iris.managed": "true", "iris.owner": "worker"}
        own_task = {"requests": {"cpu": "10"}, "limits": {"nvidia.com/gpu": "4"}}
        core.create_namespaced_pod(namespace, _node_pod("own-task", node, own_task, own))
        runtime = _runtime_on(
            kubernetes_cluster, namespace, node, owner_pod_name="worker", helper_image=task_image
        )

        room = runtime.node_room()

    memory = (256 * 1024 - 4 * 1024 - 256) * 2**20
    assert room == NodeRoom(cpu_millicores=61_500, memory_bytes=memory, gpus=7)


@pytest.mark.timeout(120)
def test_worker_offer_follows_pods_arriving_on_and_leaving_its_node_after_it_registered(
    kubernetes_cluster: FakeKubernetes, core: Any, namespace: str, tmp_path: Path, task_image: str
) -> None:
    daemon = ControllerDaemon(
        DaemonSettings.from_config(
            state_dir=tmp_path / "state", bundle_prefix=f"file://{tmp_path}/bundles", host="127.0.0.1", port=0
        )
    )
    daemon.start_in_thread()
    with _node(kubernetes_cluster, core, {"cpu": "8", "memory": "32Gi"}) as node, IrisClient.remote(daemon.url) as client:
        runtime = _runtime_on(kubernetes_cluster, namespace, node, owner_pod_name="worker", helper_image=task_image)
        configured = pb.WorkerMetadata(hostname=node, cpu_millicores=8000, memory_bytes=32 << 30)
        worker = Worker(
            WorkerSettings(
                worker_id="w-shared", address="http://127.0.0.1:9", controller_address=daemon.url,
                cache_dir=tmp_path / "cache", metadata=configured,
                current_offer=node_offer_reader(runtime, configured), offer_check_interval_s=0.1,
            ),
            runtime,
        )  # fmt: skip

        def offered() -> tuple[int, int] | None:
            found = [w.metadata for w in client.list_workers() if w.worker_id == "w-shared"]
            return (found[0].cpu_millicores, found[0].memory_bytes) if found else None

        worker.start()
        try:
            wait_until(lambda: offered() == (8000, 32 << 30), 30, 0.05, "the worker's whole node offered")
            # The controller moves onto the node after the worker registered.
            core.create_namespaced_pod(
                namespace, _node_pod("controller", node, {"requests": {"cpu": "3", "memory": "4Gi"}})
            )
            wait_until(lambda: offered() == (5000, 28 << 30), 30, 0.05, "the offer less the controller's requests")
            core.delete_namespaced_pod("controller", namespace, grace_period_seconds=0)
            wait_until(lambda: offered() == (8000, 32 << 30), 30, 0.05, "the whole node offered again")
        finally:
            worker.stop()
            daemon.stop()


@pytest.mark.timeout(120)
def test_task_pod_its_node_cannot_fit_fails_the_attempt_with_the_schedulers_reason(
    kubernetes_cluster: FakeKubernetes,
    core: Any,
    namespace: str,
    docker_engine: DockerEngine,
    tmp_path: Path,
    task_image: str,
) -> None:
    task = _config(tmp_path, docker_engine.base_image, ["true"], cpu_millicores=8000)
    with _task_beside(kubernetes_cluster, core, namespace, ("controller", "2"), 2, task, task_image) as handle:
        started = time.monotonic()
        with pytest.raises(ContainerError) as excinfo:
            handle.run()
        status = handle.status()

    assert time.monotonic() - started < 30
    assert "could not be scheduled for 2s" in str(excinfo.value)
    assert "Insufficient cpu" in str(excinfo.value)
    assert status.phase == ContainerPhase.EXITED and "Insufficient cpu" in status.error


@pytest.mark.timeout(120)
def test_task_pod_runs_once_a_pod_leaving_its_node_makes_room_within_the_grace(
    kubernetes_cluster: FakeKubernetes,
    core: Any,
    namespace: str,
    docker_engine: DockerEngine,
    tmp_path: Path,
    task_image: str,
) -> None:
    def unschedulable() -> bool:
        pods = core.list_namespaced_pod(namespace, label_selector="iris.managed=true").items
        conditions = [c for pod in pods for c in pod.status.conditions or []]
        return any(c.type == "PodScheduled" and c.reason == "Unschedulable" for c in conditions)

    task = _config(tmp_path, docker_engine.base_image, ["echo", "ran-after-room"], cpu_millicores=4000)
    # An earlier attempt still holding the node, on its way out.
    with _task_beside(kubernetes_cluster, core, namespace, ("leaving", "6"), 60, task, task_image) as handle:
        runner = threading.Thread(target=handle.run, daemon=True)
        runner.start()
        wait_until(unschedulable, 30, 0.1, "the task Pod to be unschedulable")
        core.delete_namespaced_pod("leaving", namespace, grace_period_seconds=0)
        runner.join(60)
        status = handle.wait(timeout=60)

    assert status.phase == ContainerPhase.EXITED and status.exit_code == 0, status.error
    assert lines(handle, "stdout") == ["ran-after-room"]
