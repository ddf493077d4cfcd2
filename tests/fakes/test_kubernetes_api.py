"""The fake API server driven by the real clients: kubectl and the official Python client."""

from __future__ import annotations

import base64
import json
import subprocess
import threading
from typing import Any

import pytest
from kubernetes import client as k8s
from kubernetes import watch
from kubernetes.client.rest import ApiException

from fakes.kubernetes.cluster import FakeKubernetes
from iris.time import wait_until


def _ok(result: subprocess.CompletedProcess[str]) -> str:
    assert result.returncode == 0, result.stderr
    return result.stdout


def _configmap(name: str, data: dict[str, str], labels: dict[str, str] | None = None) -> str:
    return json.dumps(
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": name, "labels": labels or {}},
            "data": data,
        }
    )


# -- kubectl -------------------------------------------------------------------------------------


def test_kubectl_apply_creates_then_strategic_patches_and_get_reads_back(cluster: FakeKubernetes) -> None:
    assert "configmap/settings created" in _ok(
        cluster.kubectl("apply", "-f", "-", input=_configmap("settings", {"a": "1"}))
    )
    first = json.loads(_ok(cluster.kubectl("get", "configmap", "settings", "-o", "json")))

    out = _ok(cluster.kubectl("apply", "-f", "-", input=_configmap("settings", {"a": "2", "b": "3"})))
    second = json.loads(_ok(cluster.kubectl("get", "cm", "settings", "-o", "json")))

    assert "configmap/settings configured" in out
    assert second["data"] == {"a": "2", "b": "3"}
    assert second["metadata"]["uid"] == first["metadata"]["uid"]
    assert int(second["metadata"]["resourceVersion"]) > int(first["metadata"]["resourceVersion"])
    assert "kubectl.kubernetes.io/last-applied-configuration" in second["metadata"]["annotations"]


def test_kubectl_apply_server_side_creates_and_updates(cluster: FakeKubernetes) -> None:
    _ok(cluster.kubectl("apply", "--server-side", "-f", "-", input=_configmap("ssa", {"k": "v1"})))
    _ok(cluster.kubectl("apply", "--server-side", "-f", "-", input=_configmap("ssa", {"k": "v2"})))

    data = json.loads(_ok(cluster.kubectl("get", "configmap", "ssa", "-o", "jsonpath={.data}")))

    assert data == {"k": "v2"}


def test_kubectl_create_generators_send_protobuf_that_the_server_stores(
    cluster: FakeKubernetes, api_client: Any
) -> None:
    for args in (
        ("create", "namespace", "team"),
        ("create", "configmap", "settings", "-n", "team", "--from-literal=mode=fast"),
        ("create", "secret", "generic", "creds", "-n", "team", "--from-literal=token=s3cr3t"),
        ("create", "serviceaccount", "runner", "-n", "team"),
        ("create", "clusterrole", "pod-reader", "--verb=get,list", "--resource=pods"),
        (
            "create",
            "clusterrolebinding",
            "read-pods",
            "--clusterrole=pod-reader",
            "--serviceaccount=team:runner",
        ),
    ):
        _ok(cluster.kubectl(*args))
    core = k8s.CoreV1Api(api_client)
    rbac = k8s.RbacAuthorizationV1Api(api_client)

    assert core.read_namespace("team").metadata.name == "team"
    assert core.read_namespaced_config_map("settings", "team").data == {"mode": "fast"}
    secret = core.read_namespaced_secret("creds", "team")
    assert (secret.type, base64.b64decode(secret.data["token"])) == ("Opaque", b"s3cr3t")
    assert core.read_namespaced_service_account("runner", "team").metadata.namespace == "team"
    rule = rbac.read_cluster_role("pod-reader").rules[0]
    assert (rule.verbs, rule.resources, rule.api_groups) == (["get", "list"], ["pods"], [""])
    binding = rbac.read_cluster_role_binding("read-pods")
    assert (binding.role_ref.kind, binding.role_ref.name) == ("ClusterRole", "pod-reader")
    assert [(s.kind, s.namespace, s.name) for s in binding.subjects] == [("ServiceAccount", "team", "runner")]


def test_kubectl_create_existing_object_in_protobuf_reports_already_exists(cluster: FakeKubernetes) -> None:
    _ok(cluster.kubectl("create", "configmap", "once"))

    second = cluster.kubectl("create", "configmap", "once")

    assert second.returncode != 0
    assert 'configmaps "once" already exists' in second.stderr


def _managed(api_client: Any, name: str) -> dict[tuple[str, str], Any]:
    obj = k8s.CoreV1Api(api_client).read_namespaced_config_map(name, "default")
    return {(e.manager, e.operation): e.fields_v1 for e in obj.metadata.managed_fields or []}


def test_kubectl_apply_server_side_twice_is_a_no_op_and_owns_exactly_what_it_sent(
    cluster: FakeKubernetes, api_client: Any
) -> None:
    manifest = _configmap("owned", {"k": "v1"}, labels={"app": "demo"})
    _ok(cluster.kubectl("apply", "--server-side", "-f", "-", input=manifest))
    first = json.loads(_ok(cluster.kubectl("get", "configmap", "owned", "-o", "json")))

    _ok(cluster.kubectl("apply", "--server-side", "-f", "-", input=manifest))
    second = json.loads(_ok(cluster.kubectl("get", "configmap", "owned", "-o", "json")))

    _ok(
        cluster.kubectl(
            "apply", "--server-side", "-f", "-", input=_configmap("owned", {"k": "v1", "new": "n"})
        )
    )
    third = json.loads(_ok(cluster.kubectl("get", "configmap", "owned", "-o", "json")))

    assert second["metadata"]["resourceVersion"] == first["metadata"]["resourceVersion"]
    assert _managed(api_client, "owned") == {
        ("kubectl", "Apply"): {"f:data": {"f:k": {}, "f:new": {}}, "f:metadata": {"f:labels": {}}}
    }
    # What the manager applied before and no longer sends is removed.
    assert third["data"] == {"k": "v1", "new": "n"}
    assert third["metadata"].get("labels", {}) == {}


def test_kubectl_apply_server_side_conflicting_with_another_manager_needs_force(
    cluster: FakeKubernetes, api_client: Any
) -> None:
    _ok(
        cluster.kubectl(
            "apply", "--server-side", "-f", "-", input=_configmap("shared", {"k": "v1", "x": "1"})
        )
    )
    _ok(cluster.kubectl("patch", "configmap", "shared", "--type", "merge", "-p", '{"data": {"x": "2"}}'))

    same_value = cluster.kubectl(
        "apply",
        "--server-side",
        "--field-manager",
        "deployer",
        "-f",
        "-",
        input=_configmap("shared", {"k": "v1"}),
    )
    conflict = cluster.kubectl(
        "apply",
        "--server-side",
        "--field-manager",
        "deployer",
        "-f",
        "-",
        input=_configmap("shared", {"k": "v2"}),
    )
    update_conflict = cluster.kubectl(
        "apply", "--server-side", "-f", "-", input=_configmap("shared", {"x": "3"})
    )
    forced = cluster.kubectl(
        "apply",
        "--server-side",
        "--force-conflicts",
        "--field-manager",
        "deployer",
        "-f",
        "-",
        input=_configmap("shared", {"k": "v2"}),
    )

    assert same_value.returncode == 0, same_value.stderr
    assert conflict.returncode != 0
    assert 'Apply failed with 1 conflict: conflict with "kubectl": .data.k' in conflict.stderr
    assert (
        'Apply failed with 1 conflict: conflict with "kubectl-patch" using v1: .data.x'
        in update_conflict.stderr
    )
    assert forced.returncode == 0, forced.stderr
    data = json.loads(_ok(cluster.kubectl("get", "configmap", "shared", "-o", "jsonpath={.data}")))
    assert data == {"k": "v2", "x": "2"}
    # The patch took .data.x from kubectl's apply; the forced apply took .data.k. Both appliers
    # sent the (empty) labels with the same value, so they share them.
    labels = {"f:metadata": {"f:labels": {}}}
    assert _managed(api_client, "shared") == {
        ("kubectl", "Apply"): labels,
        ("kubectl-patch", "Update"): {"f:data": {"f:x": {}}},
        ("deployer", "Apply"): {"f:data": {"f:k": {}}, **labels},
    }


def test_kubectl_apply_dry_run_server_validates_without_storing(cluster: FakeKubernetes) -> None:
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "checked"},
        "spec": {"containers": [{"name": "main"}]},
    }
    missing_image = cluster.kubectl("apply", "--dry-run=server", "-f", "-", input=json.dumps(pod))
    pod["spec"]["containers"][0].update(image="busybox", imagePolicy="Always")
    unknown_field = cluster.kubectl("apply", "--dry-run=server", "-f", "-", input=json.dumps(pod))
    del pod["spec"]["containers"][0]["imagePolicy"]
    valid = cluster.kubectl("apply", "--dry-run=server", "-f", "-", input=json.dumps(pod))

    assert missing_image.returncode != 0
    assert 'The Pod "checked" is invalid: spec.containers[0].image: Required value' in missing_image.stderr
    assert unknown_field.returncode != 0
    assert 'unknown field "spec.containers[0].imagePolicy"' in unknown_field.stderr
    assert "pod/checked created (server dry run)" in _ok(valid)
    assert "NotFound" in cluster.kubectl("get", "pod", "checked").stderr


def test_kubectl_get_pods_watch_streams_later_changes(cluster: FakeKubernetes, api_client: Any) -> None:
    core = k8s.CoreV1Api(api_client)

    def pod(name: str) -> dict[str, Any]:
        return {"metadata": {"name": name}, "spec": {"containers": [{"name": "c", "image": "x"}]}}

    core.create_namespaced_pod("default", pod("before"))
    watcher = subprocess.Popen(
        [
            "kubectl",
            "get",
            "pods",
            "-w",
            "--output-watch-events",
            "-o",
            'jsonpath={.type} {.object.metadata.name} {.object.status.phase}{"\\n"}',
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=cluster.env(),
    )
    seen: list[str] = []

    def read() -> None:
        for line in watcher.stdout or []:
            seen.append(line.strip())

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        wait_until(lambda: "ADDED before Pending" in seen, 30, 0.05, "the initial list")
        core.create_namespaced_pod("default", pod("after"))
        core.delete_namespaced_pod("before", "default")

        wait_until(lambda: "DELETED before Pending" in seen, 30, 0.05, "the delete")
    finally:
        watcher.kill()
        watcher.wait()

    assert "ADDED after Pending" in seen


def test_kubectl_delete_deployment_garbage_collects_its_pods(
    cluster: FakeKubernetes, api_client: Any
) -> None:
    deployment = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "web"},
        "spec": {
            "replicas": 2,
            "selector": {"matchLabels": {"app": "web"}},
            "template": {
                "metadata": {"labels": {"app": "web"}},
                "spec": {"containers": [{"name": "c", "image": "x"}]},
            },
        },
    }
    _ok(cluster.kubectl("apply", "-f", "-", input=json.dumps(deployment)))
    core = k8s.CoreV1Api(api_client)
    wait_until(
        lambda: len(core.list_namespaced_pod("default", label_selector="app=web").items) == 2,
        30,
        0.05,
        "2 pods",
    )

    _ok(cluster.kubectl("delete", "deployment", "web"))

    wait_until(
        lambda: not core.list_namespaced_pod("default", label_selector="app=web").items, 30, 0.05, "pods gone"
    )


def test_kubectl_get_missing_object_reports_not_found(cluster: FakeKubernetes) -> None:
    result = cluster.kubectl("get", "pod", "nope")

    assert result.returncode == 1
    assert 'Error from server (NotFound): pods "nope" not found' in result.stderr


# -- the Python client ---------------------------------------------------------------------------


def test_client_list_filters_by_label_and_field_selectors(api_client: Any) -> None:
    core = k8s.CoreV1Api(api_client)
    for name, tier in (("a", "web"), ("b", "web"), ("c", "db")):
        core.create_namespaced_config_map("default", {"metadata": {"name": name, "labels": {"tier": tier}}})

    def names(**selectors: str) -> list[str]:
        return [cm.metadata.name for cm in core.list_namespaced_config_map("default", **selectors).items]

    assert names(label_selector="tier=web") == ["a", "b"]
    assert names(label_selector="tier in (db, cache)") == ["c"]
    assert names(label_selector="tier!=web,tier") == ["c"]
    assert names(field_selector="metadata.name=b") == ["b"]
    assert names(label_selector="tier=web", field_selector="metadata.name!=a") == ["b"]


def test_client_update_with_stale_resource_version_conflicts(api_client: Any) -> None:
    core = k8s.CoreV1Api(api_client)
    created = core.create_namespaced_config_map("default", {"metadata": {"name": "cm"}, "data": {"v": "1"}})
    core.patch_namespaced_config_map("cm", "default", {"data": {"v": "2"}})
    created.data = {"v": "3"}

    with pytest.raises(ApiException) as excinfo:
        core.replace_namespaced_config_map("cm", "default", created)

    assert excinfo.value.status == 409
    body = json.loads(excinfo.value.body)
    assert body["reason"] == "Conflict"
    assert "the object has been modified" in body["message"]
    assert core.read_namespaced_config_map("cm", "default").data == {"v": "2"}


def test_client_create_existing_and_read_missing_report_409_and_404(api_client: Any) -> None:
    core = k8s.CoreV1Api(api_client)
    core.create_namespaced_secret("default", {"metadata": {"name": "s"}, "stringData": {"k": "v"}})

    with pytest.raises(ApiException) as exists:
        core.create_namespaced_secret("default", {"metadata": {"name": "s"}})
    with pytest.raises(ApiException) as missing:
        core.read_namespaced_secret("nope", "default")
    with pytest.raises(ApiException) as no_namespace:
        core.create_namespaced_secret("nowhere", {"metadata": {"name": "s"}})

    assert (exists.value.status, json.loads(exists.value.body)["reason"]) == (409, "AlreadyExists")
    assert (missing.value.status, json.loads(missing.value.body)["message"]) == (
        404,
        'secrets "nope" not found',
    )
    assert json.loads(no_namespace.value.body)["message"] == 'namespaces "nowhere" not found'


def test_client_invalid_pod_reports_422_with_causes(api_client: Any) -> None:
    core = k8s.CoreV1Api(api_client)

    with pytest.raises(ApiException) as excinfo:
        core.create_namespaced_pod(
            "default",
            {
                "metadata": {"name": "Bad_Name", "labels": {"iris.task_id": "/a/b"}},
                "spec": {"containers": []},
            },
        )

    body = json.loads(excinfo.value.body)
    assert excinfo.value.status == 422 and body["reason"] == "Invalid"
    fields = {cause["field"] for cause in body["details"]["causes"]}
    assert fields == {"metadata.name", "metadata.labels", "spec.containers"}


def test_client_patch_formats_merge_strategic_json_and_apply(api_client: Any) -> None:
    apps = k8s.AppsV1Api(api_client)
    container = {"name": "main", "image": "img:1", "env": [{"name": "A", "value": "1"}]}
    apps.create_namespaced_deployment(
        "default",
        {
            "metadata": {"name": "d", "labels": {"keep": "yes", "drop": "yes"}},
            "spec": {
                "replicas": 0,
                "selector": {"matchLabels": {"app": "d"}},
                "template": {"metadata": {"labels": {"app": "d"}}, "spec": {"containers": [container]}},
            },
        },
    )

    # A dict goes as a strategic merge patch: containers merge by name, env by name.
    apps.patch_namespaced_deployment(
        "d",
        "default",
        {
            "spec": {
                "template": {"spec": {"containers": [{"name": "main", "env": [{"name": "B", "value": "2"}]}]}}
            }
        },
    )
    apps.patch_namespaced_deployment(
        "d", "default", {"metadata": {"labels": {"drop": None}}}, _content_type="application/merge-patch+json"
    )
    # A list goes as a JSON patch.
    apps.patch_namespaced_deployment(
        "d", "default", [{"op": "replace", "path": "/spec/replicas", "value": 0}]
    )
    apps.patch_namespaced_deployment(
        "d",
        "default",
        {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": "d", "annotations": {"by": "apply"}},
        },
        field_manager="tests",
        _content_type="application/apply-patch+yaml",
    )

    result = apps.read_namespaced_deployment("d", "default")
    env = {e.name: e.value for e in result.spec.template.spec.containers[0].env}
    assert env == {"A": "1", "B": "2"}
    assert result.spec.template.spec.containers[0].image == "img:1"
    assert result.metadata.labels == {"keep": "yes"}
    assert result.metadata.annotations == {"by": "apply"}
    assert result.metadata.generation == 2


def test_client_watch_resumes_from_resource_version_and_sends_bookmarks(api_client: Any) -> None:
    core = k8s.CoreV1Api(api_client)
    listed = core.list_namespaced_config_map("default")
    core.create_namespaced_config_map("default", {"metadata": {"name": "one"}})
    core.patch_namespaced_config_map("one", "default", {"data": {"x": "y"}})
    core.delete_namespaced_config_map("one", "default")

    events = list(
        watch.Watch().stream(
            core.list_namespaced_config_map,
            "default",
            resource_version=listed.metadata.resource_version,
            allow_watch_bookmarks=True,
            timeout_seconds=2,
        )
    )

    changes = [(e["type"], e["object"].metadata.name) for e in events if e["type"] != "BOOKMARK"]
    assert changes == [("ADDED", "one"), ("MODIFIED", "one"), ("DELETED", "one")]
    assert any(e["type"] == "BOOKMARK" for e in events)


def test_client_watch_from_compacted_version_gets_410_gone(cluster: FakeKubernetes, api_client: Any) -> None:
    core = k8s.CoreV1Api(api_client)
    old = core.list_namespaced_config_map("default").metadata.resource_version
    core.create_namespaced_config_map("default", {"metadata": {"name": "later"}})
    cluster.compact()

    with pytest.raises(ApiException) as excinfo:
        for _ in watch.Watch().stream(
            core.list_namespaced_config_map, "default", resource_version=old, timeout_seconds=2
        ):
            pass

    assert excinfo.value.status == 410


def test_client_delete_propagation_orphan_keeps_dependents_foreground_removes_them(api_client: Any) -> None:
    core = k8s.CoreV1Api(api_client)

    def owner_and_child(name: str) -> None:
        owner = core.create_namespaced_config_map("default", {"metadata": {"name": name}})
        reference = {"apiVersion": "v1", "kind": "ConfigMap", "name": name, "uid": owner.metadata.uid}
        core.create_namespaced_secret(
            "default", {"metadata": {"name": f"{name}-child", "ownerReferences": [reference]}}
        )

    owner_and_child("orphaning")
    owner_and_child("foreground")

    core.delete_namespaced_config_map("orphaning", "default", propagation_policy="Orphan")
    core.delete_namespaced_config_map("foreground", "default", propagation_policy="Foreground")

    kept = core.read_namespaced_secret("orphaning-child", "default")
    assert not kept.metadata.owner_references
    with pytest.raises(ApiException) as excinfo:
        core.read_namespaced_secret("foreground-child", "default")
    assert excinfo.value.status == 404


def test_client_delete_namespace_removes_its_objects(api_client: Any) -> None:
    core = k8s.CoreV1Api(api_client)
    core.create_namespace({"metadata": {"name": "scratch"}})
    core.create_namespaced_config_map("scratch", {"metadata": {"name": "cm"}})
    wait_until(
        lambda: core.list_namespaced_service_account("scratch").items, 10, 0.05, "the default service account"
    )

    core.delete_namespace("scratch")

    assert core.list_namespaced_config_map("scratch").items == []
    assert "scratch" not in [ns.metadata.name for ns in core.list_namespace().items]


def test_client_rbac_and_nodepool_crd_round_trip(api_client: Any) -> None:
    rbac = k8s.RbacAuthorizationV1Api(api_client)
    custom = k8s.CustomObjectsApi(api_client)
    rbac.create_cluster_role(
        {"metadata": {"name": "iris"}, "rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["*"]}]}
    )
    rbac.create_cluster_role_binding(
        {
            "metadata": {"name": "iris"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "iris"},
            "subjects": [{"kind": "ServiceAccount", "name": "iris", "namespace": "default"}],
        }
    )
    custom.create_cluster_custom_object(
        "compute.coreweave.com",
        "v1alpha1",
        "nodepools",
        {
            "apiVersion": "compute.coreweave.com/v1alpha1",
            "kind": "NodePool",
            "metadata": {"name": "cpu"},
            "spec": {"instanceType": "cd-gp-i64-erapids", "targetNodes": 0},
        },
    )

    assert rbac.read_cluster_role("iris").rules[0].resources == ["pods"]
    assert rbac.read_cluster_role_binding("iris").role_ref.name == "iris"
    assert (
        custom.get_cluster_custom_object("compute.coreweave.com", "v1alpha1", "nodepools", "cpu")["spec"][
            "targetNodes"
        ]
        == 0
    )


# -- control plane -------------------------------------------------------------------------------


def _nodepool(
    name: str, instance_type: str, labels: dict[str, str], minimum: int = 0, maximum: int = 3
) -> dict[str, Any]:
    return {
        "apiVersion": "compute.coreweave.com/v1alpha1",
        "kind": "NodePool",
        "metadata": {"name": name},
        "spec": {
            "instanceType": instance_type,
            "autoscaling": True,
            "minNodes": minimum,
            "maxNodes": maximum,
            "targetNodes": minimum,
            "nodeLabels": labels,
        },
    }


def test_nodepool_scales_up_for_pending_pod_after_provisioning_delay(
    cluster: FakeKubernetes, api_client: Any
) -> None:
    cluster.provisioning_delay = 1.0
    core = k8s.CoreV1Api(api_client)
    custom = k8s.CustomObjectsApi(api_client)
    custom.create_cluster_custom_object(
        "compute.coreweave.com",
        "v1alpha1",
        "nodepools",
        _nodepool("cpu", "cd-gp-i64-erapids", {"iris.group": "cpu"}),
    )
    core.create_namespaced_pod(
        "default",
        {
            "metadata": {"name": "p"},
            "spec": {"nodeSelector": {"iris.group": "cpu"}, "containers": [{"name": "c", "image": "x"}]},
        },
    )

    node = wait_until(
        lambda: core.read_namespaced_pod("p", "default").spec.node_name, 30, 0.05, "the pod bound"
    )

    labels = core.read_node(node).metadata.labels
    assert labels["compute.coreweave.com/node-pool"] == "cpu" and labels["iris.group"] == "cpu"
    reasons = [
        e.reason for e in core.list_namespaced_event("default", field_selector="involvedObject.name=p").items
    ]
    assert "FailedScheduling" in reasons and "Scheduled" in reasons
    pool = custom.get_cluster_custom_object("compute.coreweave.com", "v1alpha1", "nodepools", "cpu")
    assert pool["status"]["currentNodes"] == 1


def test_scheduler_gpu_pod_needs_toleration_and_free_gpus(cluster: FakeKubernetes, api_client: Any) -> None:
    core = k8s.CoreV1Api(api_client)
    cluster.add_node(
        "gpu-node",
        labels={"gpu": "yes"},
        capacity={"cpu": "8", "memory": "64Gi", "nvidia.com/gpu": "8", "pods": "110"},
        taints=[{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}],
    )

    def gpu_pod(name: str, gpus: int, tolerate: bool) -> None:
        spec: dict[str, Any] = {
            "nodeSelector": {"gpu": "yes"},
            "containers": [
                {"name": "c", "image": "x", "resources": {"limits": {"nvidia.com/gpu": str(gpus)}}}
            ],
        }
        if tolerate:
            spec["tolerations"] = [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]
        core.create_namespaced_pod("default", {"metadata": {"name": name}, "spec": spec})

    gpu_pod("untolerated", 1, tolerate=False)
    gpu_pod("six", 6, tolerate=True)
    wait_until(lambda: core.read_namespaced_pod("six", "default").spec.node_name, 30, 0.05, "six bound")
    gpu_pod("four", 4, tolerate=True)

    def scheduling_message(name: str) -> str | None:
        conditions = core.read_namespaced_pod(name, "default").status.conditions or []
        return next((c.message for c in conditions if c.type == "PodScheduled" and c.status == "False"), None)

    assert "untolerated taint {nvidia.com/gpu: present}" in wait_until(
        lambda: scheduling_message("untolerated"), 30, 0.05, "untolerated unschedulable"
    )
    assert "Insufficient nvidia.com/gpu" in wait_until(
        lambda: scheduling_message("four"), 30, 0.05, "four unschedulable"
    )


def test_nodepool_provisioning_failure_is_reported_on_its_status(
    cluster: FakeKubernetes, api_client: Any
) -> None:
    custom = k8s.CustomObjectsApi(api_client)
    cluster.fail_provisioning("gpu", "no capacity for gd-8xh100ib-i128")
    custom.create_cluster_custom_object(
        "compute.coreweave.com", "v1alpha1", "nodepools", _nodepool("gpu", "gd-8xh100ib-i128", {}, minimum=1)
    )

    def at_target_message() -> str | None:
        pool = custom.get_cluster_custom_object("compute.coreweave.com", "v1alpha1", "nodepools", "gpu")
        conditions = (pool.get("status") or {}).get("conditions") or []
        return next(
            (c["message"] for c in conditions if c["type"] == "AtTarget" and c["status"] == "False"), None
        )

    assert wait_until(at_target_message, 30, 0.05, "AtTarget false") == "no capacity for gd-8xh100ib-i128"
    cluster.restore_provisioning("gpu")
    wait_until(
        lambda: (
            k8s.CoreV1Api(api_client).list_node(label_selector="compute.coreweave.com/node-pool=gpu").items
        ),
        30,
        0.05,
        "a gpu node",
    )


CLUSTER_MANIFEST = """
apiVersion: v1
kind: Namespace
metadata: {name: iris}
---
apiVersion: v1
kind: ServiceAccount
metadata: {name: iris-controller, namespace: iris}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: iris-controller}
rules:
- apiGroups: [""]
  resources: [pods, pods/log, nodes]
  verbs: [get, list, watch, create, delete]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: iris-controller}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: iris-controller}
subjects:
- {kind: ServiceAccount, name: iris-controller, namespace: iris}
---
apiVersion: v1
kind: Service
metadata: {name: iris-controller-svc, namespace: iris}
spec:
  selector: {app: iris-controller}
  ports:
  - {port: 10000}
"""


def test_kubectl_apply_multi_document_manifest_creates_every_kind_in_order(cluster: FakeKubernetes) -> None:
    out = _ok(cluster.kubectl("apply", "-f", "-", input=CLUSTER_MANIFEST))
    service = json.loads(
        _ok(cluster.kubectl("get", "service", "-n", "iris", "iris-controller-svc", "-o", "json"))
    )
    binding = json.loads(_ok(cluster.kubectl("get", "clusterrolebinding", "iris-controller", "-o", "json")))
    again = _ok(cluster.kubectl("apply", "-f", "-", input=CLUSTER_MANIFEST))

    assert out.splitlines() == [
        "namespace/iris created",
        "serviceaccount/iris-controller created",
        "clusterrole.rbac.authorization.k8s.io/iris-controller created",
        "clusterrolebinding.rbac.authorization.k8s.io/iris-controller created",
        "service/iris-controller-svc created",
    ]
    assert service["spec"]["ports"] == [{"port": 10000, "protocol": "TCP", "targetPort": 10000}]
    assert service["spec"]["type"] == "ClusterIP" and service["spec"]["clusterIP"].startswith("10.96.")
    assert binding["subjects"][0]["namespace"] == "iris"
    assert all(line.endswith("unchanged") for line in again.splitlines())


def test_nodepool_scales_down_to_min_nodes_once_its_pods_are_gone(
    cluster: FakeKubernetes, api_client: Any
) -> None:
    core = k8s.CoreV1Api(api_client)
    custom = k8s.CustomObjectsApi(api_client)
    custom.create_cluster_custom_object(
        "compute.coreweave.com",
        "v1alpha1",
        "nodepools",
        _nodepool("burst", "cd-gp-i64-erapids", {"pool": "burst"}),
    )
    for name in ("one", "two"):
        core.create_namespaced_pod(
            "default",
            {
                "metadata": {"name": name},
                "spec": {
                    "nodeSelector": {"pool": "burst"},
                    "containers": [{"name": "c", "image": "x", "resources": {"requests": {"cpu": "40"}}}],
                },
            },
        )

    def pool_nodes() -> list[str]:
        nodes = core.list_node(label_selector="compute.coreweave.com/node-pool=burst").items
        return [n.metadata.name for n in nodes]

    wait_until(lambda: len(pool_nodes()) == 2, 30, 0.05, "a node per 40-cpu pod")
    # This cluster has no kubelet to finish a graceful delete, so the pods are force-deleted.
    core.delete_namespaced_pod("one", "default", grace_period_seconds=0)
    core.delete_namespaced_pod("two", "default", grace_period_seconds=0)

    wait_until(lambda: not pool_nodes(), 30, 0.05, "the pool back at minNodes=0")
