"""End to end on the fake Kubernetes cluster: a controller, a worker running as a Pod from the
worker image with `--runtime kubernetes`, and bundle-based callables each run in a task Pod of the
image Dockerfile.task builds (a GPU job's Pod is read back with `kubectl get pod -o json`)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from engines import DockerEngine
from fakes.kubernetes.cluster import FakeKubernetes

from iris.client import IrisClient
from iris.cluster.types import Entrypoint, ResourceSpec
from iris.rpc import cluster_pb2 as pb
from iris.time import wait_until

GPU_TAINT = {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    """A user workspace whose module only exists in the bundle."""
    ws = tmp_path / "workspace"
    ws.mkdir()
    (ws / "pod_tasks.py").write_text(
        "import os, pathlib, sys, time\n\n\n"
        "def triple(x):\n"
        "    return {'value': 3 * x, 'pod': os.environ.get('IRIS_POD_NAME'), 'python': sys.executable}\n\n\n"
        "def wait_for_release():\n"
        "    deadline = time.monotonic() + 60\n"
        "    while not pathlib.Path('release').exists() and time.monotonic() < deadline:\n"
        "        time.sleep(0.1)\n"
        "    return os.environ.get('IRIS_POD_NAME')\n"
    )
    return ws


def _worker_pod(
    image: str, controller_url: str, config_dir: Path, cache: Path, bundles: Path, node: str
) -> dict[str, Any]:
    hostpath = lambda name, path: {"name": name, "hostPath": {"path": str(path), "type": "DirectoryOrCreate"}}
    downward = {
        "IRIS_POD_NAME": "metadata.name",
        "IRIS_POD_UID": "metadata.uid",
        "IRIS_POD_NAMESPACE": "metadata.namespace",
        "IRIS_WORKER_NODE_NAME": "spec.nodeName",
    }
    env = [{"name": k, "valueFrom": {"fieldRef": {"fieldPath": v}}} for k, v in downward.items()]
    env.append({"name": "KUBECONFIG", "value": "/etc/iris/kubeconfig"})
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "iris-worker-0", "labels": {"app": "iris-worker"}},
        "spec": {
            "hostNetwork": True,
            "dnsPolicy": "ClusterFirstWithHostNet",
            "restartPolicy": "Never",
            "nodeSelector": {"kubernetes.io/hostname": node},
            "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
            "volumes": [
                {"name": "config", "configMap": {"name": "iris-cluster-config"}},
                hostpath("cache", cache),
                hostpath("bundles", bundles),
            ],
            "containers": [
                {
                    "name": "worker",
                    "image": image,
                    "command": [
                        "python",
                        "-m",
                        "iris.cluster.worker.main",
                        "serve",
                        "--config",
                        "/etc/iris/cluster.yaml",
                        "--controller-address",
                        controller_url,
                        "--runtime",
                        "kubernetes",
                        "--host",
                        "127.0.0.1",
                        "--port",
                        "0",
                        "--cache-dir",
                        str(cache),
                        "--worker-id",
                        "k8s-w0",
                        "--gpu",
                        "H100x8",
                    ],
                    "env": env,
                    "volumeMounts": [
                        {"name": "config", "mountPath": "/etc/iris"},
                        {"name": "cache", "mountPath": str(cache)},
                        {"name": "bundles", "mountPath": str(bundles)},
                    ],
                }
            ],
        },
    }


def test_kubernetes_worker_pod_runs_callables_in_task_pods_and_gpu_pod_claims_gpus(
    tmp_path: Path,
    workspace: Path,
    docker_engine: DockerEngine,
    kubernetes_cluster: FakeKubernetes,
    task_image: str,
    worker_image: str,
) -> None:
    from kubernetes import client as k8s
    from kubernetes import config as k8s_config

    from iris.cluster.controller.main import ControllerDaemon
    from iris.cluster.controller.settings import DaemonSettings

    node = "gpu-e2e"
    kubernetes_cluster.add_node(
        node,
        labels={"iris.scale_group": "h100"},
        capacity={"cpu": "64", "memory": "512Gi", "nvidia.com/gpu": "8", "rdma/ib": "1", "pods": "110"},
        taints=[GPU_TAINT],
    )
    bundles = tmp_path / "bundles"
    cache = tmp_path / "cache"
    daemon = ControllerDaemon(
        DaemonSettings.from_config(state_dir=tmp_path / "state", bundle_prefix=f"file://{bundles}", host="127.0.0.1", port=0)
    )
    daemon.start_in_thread()
    api_client = k8s_config.new_client_from_config(config_file=str(kubernetes_cluster.kubeconfig))
    core = k8s.CoreV1Api(api_client)
    cluster_config = yaml.safe_dump(
        {"name": "k8s-e2e", "platform": {"local": {}}, "defaults": {"bootstrap": {"task_image": task_image}}}
    )
    core.create_namespaced_config_map(
        "default",
        {
            "metadata": {"name": "iris-cluster-config"},
            "data": {"cluster.yaml": cluster_config, "kubeconfig": kubernetes_cluster.kubeconfig.read_text()},
        },
    )
    core.create_namespaced_pod(
        "default", _worker_pod(worker_image, daemon.url, tmp_path, cache, bundles, node)
    )
    sys.path.insert(0, str(workspace))
    try:
        import pod_tasks

        with IrisClient.remote(daemon.url, workspace=workspace) as client:
            [registered] = wait_until(client.list_workers, 120, 0.1, "the worker Pod to register")
            job = client.submit(Entrypoint.from_callable(pod_tasks.triple, 14), name="in-a-pod")
            result = job.result(timeout=120)
            gpu_job = client.submit(
                Entrypoint.from_callable(pod_tasks.wait_for_release),
                name="gpu-pod",
                resources=ResourceSpec(
                    cpu=1, memory="100MB", device=pb.DeviceConfig(gpu=pb.GpuDevice(variant="H100", count=2))
                ),
            )

            def gpu_task_pod() -> dict[str, Any] | None:
                shown = kubernetes_cluster.kubectl(
                    "get", "pods", "-l", "iris.managed=true,iris.role=main", "-o", "json"
                )
                pods = json.loads(shown.stdout)["items"] if shown.returncode == 0 else []
                running = [p for p in pods if (p.get("status") or {}).get("phase") == "Running"]
                return running[0] if running else None

            listed = wait_until(gpu_task_pod, 120, 0.2, "the GPU task Pod to run")
            name = listed["metadata"]["name"]
            pod = json.loads(kubernetes_cluster.kubectl("get", "pod", name, "-o", "json").stdout)
            # The task's workdir lives in its Pod: reach it the way an operator would.
            released = kubernetes_cluster.kubectl(
                "exec", name, "-c", "workdir", "--", "touch", "/app/release"
            )
            assert released.returncode == 0, released.stderr
            gpu_result = gpu_job.result(timeout=120)
    except BaseException:
        print(kubernetes_cluster.kubectl("logs", "iris-worker-0").stdout)
        raise
    finally:
        sys.path.remove(str(workspace))
        sys.modules.pop("pod_tasks", None)
        core.delete_namespaced_pod("iris-worker-0", "default", grace_period_seconds=5)
        core.delete_namespaced_config_map("iris-cluster-config", "default")
        wait_until(
            lambda: not core.list_namespaced_pod("default", label_selector="iris.managed=true").items,
            60,
            0.1,
            "the worker's task Pods to be garbage collected",
        )
        api_client.close()
        daemon.stop()

    assert registered.metadata.runtime == "kubernetes"
    assert result["value"] == 42
    # The task image's interpreter in a task Pod, not the worker's Pod.
    assert result["python"] == "/opt/iris/bin/python3"
    assert result["pod"].startswith("iris-") and result["pod"] != "iris-worker-0"
    assert gpu_result == name
    spec = pod["spec"]
    assert spec["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] == "2"
    assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in spec["tolerations"]
    assert spec["hostNetwork"] is True
    assert spec["nodeName"] == node
    assert pod["metadata"]["ownerReferences"][0]["name"] == "iris-worker-0"
    # The bundle reached the Pod by itself: an emptyDir at /app filled by the init container.
    assert {"name": "workdir", "emptyDir": {}} in spec["volumes"]
    fill = spec["initContainers"][0]
    assert fill["image"] == worker_image
    assert fill["command"][:5] == ["python3", "-m", "iris.cluster.runtime.pod_workdir", "fill", "/app"]
    assert fill["command"][fill["command"].index("--bundle") + 1].startswith(f"file://{bundles}/")
    assert not [v for v in spec["volumes"] if "hostPath" in v and str(cache) in v["hostPath"]["path"]]
