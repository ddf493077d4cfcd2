"""The pure rules of the CoreWeave platform: early failure detection (seed 001 section 9), the
targetNodes clamp and stale pools (section 8), and what the manifests contain (sections 5, 10)."""

from __future__ import annotations

from typing import Any

import pytest

from iris.cluster.platform import coreweave_resources as res


def _pod(waiting: str = "", restarts: int = 0, phase: str = "Pending", message: str = "") -> dict[str, Any]:
    state = {"waiting": {"reason": waiting, "message": message}} if waiting else {"running": {}}
    return {
        "metadata": {"name": "iris-worker-x"},
        "status": {
            "phase": phase,
            "containerStatuses": [
                {"name": "worker", "image": "img:1", "restartCount": restarts, "state": state}
            ],
        },
    }


@pytest.mark.parametrize("reason", ["ErrImagePull", "ImagePullBackOff", "InvalidImageName"])
def test_pod_failure_image_errors_fail_at_once(reason: str) -> None:
    failure = res.pod_failure(_pod(reason, message="manifest unknown"), [], 0.0, 90.0)

    assert failure is not None and failure.reason == reason
    assert "cannot pull image img:1: manifest unknown" in failure.message


def test_pod_failure_config_error_names_the_missing_secret() -> None:
    failure = res.pod_failure(
        _pod("CreateContainerConfigError", message='secret "iris-s3-credentials" not found'), [], 0.0, 90.0
    )

    assert failure is not None and 'secret "iris-s3-credentials" not found' in failure.message


def test_pod_failure_crash_loop_needs_two_restarts_and_asks_for_logs() -> None:
    assert res.pod_failure(_pod("CrashLoopBackOff", restarts=1), [], 0.0, 90.0) is None

    failure = res.pod_failure(_pod("CrashLoopBackOff", restarts=2), [], 0.0, 90.0)

    assert failure is not None and failure.needs_logs == "worker"
    text = res.with_log_tail(failure, "\n".join(f"line {i}" for i in range(50)))
    assert text.splitlines()[-30:] == [f"line {i}" for i in range(20, 50)]


def test_pod_failure_failed_mount_counts_only_after_the_grace_and_three_times() -> None:
    event = {"reason": "FailedMount", "count": 3, "message": 'configmap "iris-cluster-config" not found'}

    assert res.pod_failure(_pod(), [event], 89.0, 90.0) is None
    assert res.pod_failure(_pod(), [{**event, "count": 2}], 120.0, 90.0) is None
    failure = res.pod_failure(_pod(), [event], 91.0, 90.0)
    assert failure is not None and failure.reason == "FailedMount"
    assert "iris-cluster-config" in failure.message


def test_pod_failure_running_pod_is_fine() -> None:
    assert res.pod_failure(_pod(phase="Running"), [], 1000.0, 90.0) is None


def test_clamped_target_nodes_new_pool_zero_existing_at_most_one() -> None:
    assert res.clamped_target_nodes(None) == 0
    assert res.clamped_target_nodes({"status": {"currentNodes": 0}}) == 0
    assert res.clamped_target_nodes({"status": {"currentNodes": 7}}) == 1


def test_stale_nodepools_only_this_clusters_pools_of_removed_groups() -> None:
    pools = [
        {"metadata": {"name": "iris-cpu", "labels": {"iris-managed": "true"}}},
        {"metadata": {"name": "iris-old", "labels": {"iris-managed": "true"}}},
        {"metadata": {"name": "someone-elses", "labels": {}}},
    ]

    assert res.stale_nodepools(pools, {"iris-cpu"}, "iris") == ["iris-old"]


def test_s3_secret_without_credentials_names_the_variables() -> None:
    with pytest.raises(ValueError, match="R2_SECRET_ACCESS_KEY is not set"):
        res.s3_secret("iris", {"R2_ACCESS_KEY_ID": "a"})

    secret = res.s3_secret("iris", {"R2_ACCESS_KEY_ID": "a", "R2_SECRET_ACCESS_KEY": "b"})
    assert secret["stringData"] == {"AWS_ACCESS_KEY_ID": "a", "AWS_SECRET_ACCESS_KEY": "b"}


def test_cluster_role_has_the_seed_permissions_and_reading_events_only() -> None:
    [_, role, binding] = res.rbac("iris")

    granted = {(g, r, v) for rule in role["rules"] for g in rule["apiGroups"] for r in rule["resources"] for v in rule["verbs"]}
    writes = {"get", "list", "watch", "create", "update", "patch", "delete"}
    expected = (
        {("compute.coreweave.com", "nodepools", v) for v in writes}
        | {("", r, v) for r in ("pods", "pods/exec", "pods/log", "configmaps") for v in writes}
        | {("", r, v) for r in ("nodes", "events") for v in ("get", "list", "watch")}
    )
    assert granted == expected
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "iris-controller", "namespace": "iris"}]
    assert role["metadata"]["name"] == binding["metadata"]["name"] == binding["roleRef"]["name"] == "iris-controller"


def test_clusters_in_two_namespaces_bind_cluster_roles_of_their_own() -> None:
    [_, first_role, first_binding] = res.rbac("iris")
    [_, second_role, second_binding] = res.rbac("smoke-1")

    assert first_role["metadata"]["name"] != second_role["metadata"]["name"]
    assert first_binding["metadata"]["name"] != second_binding["metadata"]["name"]
    assert second_binding["roleRef"]["name"] == second_role["metadata"]["name"]


def test_worker_pod_is_light_on_host_network_with_the_section_10_env() -> None:
    spec = res.WorkerPodSpec(
        name="iris-worker-s1", namespace="iris", labels={"iris-slice-id": "s1"},
        node_selector={"iris-scale-group": "h100"}, image="worker:1", port=10001,
        cache_dir="/mnt/local/iris-cache", controller_address="http://c:10000", worker_id="s1-0",
        slice_id="s1", task_image="task:1", offer_flags=("--gpu", "H100x8"), infiniband=True, s3_secret=True,
        object_storage_endpoint="https://cwobject.com", env={},
    )

    pod = res.worker_pod(spec)

    container = pod["spec"]["containers"][0]
    assert pod["spec"]["hostNetwork"] and pod["spec"]["dnsPolicy"] == "ClusterFirstWithHostNet"
    assert "resources" not in container  # task Pods claim the GPUs and RDMA
    command = container["command"]
    assert command[command.index("--runtime") + 1] == "kubernetes"
    assert command[command.index("--gpu") + 1] == "H100x8"
    assert command[command.index("--advertise-host") + 1] == "$(IRIS_POD_IP)"
    assert {"name": "cache", "hostPath": {"path": "/mnt/local/iris-cache", "type": "DirectoryOrCreate"}} in pod["spec"]["volumes"]
    env = {e["name"]: e for e in container["env"]}
    assert env["IRIS_POD_NAME"]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.name"
    assert env["IRIS_WORKER_NODE_NAME"]["valueFrom"]["fieldRef"]["fieldPath"] == "spec.nodeName"
    assert env["IRIS_SERVICE_ACCOUNT_NAME"]["value"] == "iris-controller"
    assert env["IRIS_S3_SECRET_NAME"]["value"] == "iris-s3-credentials"
    assert env["AWS_ACCESS_KEY_ID"]["valueFrom"]["secretKeyRef"] == {"name": "iris-s3-credentials", "key": "AWS_ACCESS_KEY_ID"}
    assert env["AWS_ENDPOINT_URL"]["value"] == "https://cwobject.com"
    assert '"addressing_style": "virtual"' in env["FSSPEC_S3"]["value"]
    assert env["IRIS_INFINIBAND"]["value"] == "true"


def test_controller_deployment_is_guaranteed_qos_on_its_scale_group() -> None:
    deployment = res.controller_deployment(
        "0123abcd", "iris", "ctl:1", 10000, "cpu", "iris", "svc.iris.svc.cluster.local", "/mnt/local/s",
        "iris-controller-iris",
    )

    spec = deployment["spec"]["template"]["spec"]
    resources = spec["containers"][0]["resources"]
    assert deployment["spec"]["replicas"] == 1
    assert resources["requests"] == resources["limits"] == {"cpu": "2", "memory": "4Gi"}
    assert spec["nodeSelector"] == {"iris-scale-group": "cpu"}
    assert spec["serviceAccountName"] == "iris-controller"


def test_deployment_rolled_out_only_once_its_generation_runs_alone_and_available() -> None:
    def deployment(**status: int) -> dict:
        return {"status": status}

    done = deployment(observedGeneration=3, updatedReplicas=1, replicas=1, availableReplicas=1)
    assert res.deployment_rolled_out(done, 3)
    assert not res.deployment_rolled_out(done, 4)  # the new template is not observed yet
    no_new_pod = deployment(observedGeneration=4, updatedReplicas=0, replicas=1, availableReplicas=1)
    assert not res.deployment_rolled_out(no_new_pod, 4)
    old_pod_left = deployment(observedGeneration=4, updatedReplicas=1, replicas=2, availableReplicas=1)
    assert not res.deployment_rolled_out(old_pod_left, 4)
    assert not res.deployment_rolled_out(deployment(observedGeneration=4, updatedReplicas=1, replicas=1), 4)
    assert not res.deployment_rolled_out({}, 1)
