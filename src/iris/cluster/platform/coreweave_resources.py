"""What the CoreWeave platform creates in Kubernetes, as plain manifests built by pure functions,
and the pure decisions it takes from what it reads back (seed 001 sections 5, 8, 9, 10 and 12).

Nothing here talks to a cluster: `coreweave.py` applies these manifests and feeds Pod status and
Events to `pod_failure`, so every rule is testable without a network and the manifests under
infra/coreweave/k8s can be checked against the same builders.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from iris.cluster.runtime.kubernetes import DOWNWARD_ENV, S3_SECRET_KEYS

CONTROLLER_NAME = "iris-controller"
SERVICE_ACCOUNT = "iris-controller"
CONFIGMAP_NAME = "iris-cluster-config"
STATE_CLAIM_NAME = "iris-controller-state"
# The controller's SQLite state and logs: small, but it must follow the controller to any node.
STATE_CLAIM_SIZE = "10Gi"
S3_SECRET_NAME = "iris-s3-credentials"
CONFIG_KEY = "config.yaml"
CONFIG_DIR = "/etc/iris"
CONFIG_DIGEST_ANNOTATION = "iris-config-digest"
NODEPOOL_API_VERSION = "compute.coreweave.com/v1alpha1"
# Requests equal to limits give the controller Guaranteed QoS (seed 001 section 8).
CONTROLLER_RESOURCES = {"cpu": "2", "memory": "4Gi"}
R2_ENV = ("R2_ACCESS_KEY_ID", "R2_SECRET_ACCESS_KEY")
CRASH_LOOP_RESTARTS = 2
CRASH_LOG_LINES = 30
MOUNT_FAILURE_COUNT = 3
IMAGE_FAILURES = frozenset({"ErrImagePull", "ImagePullBackOff", "InvalidImageName"})
CONFIG_FAILURES = frozenset({"CreateContainerConfigError"})
POD_IP_ENV = "IRIS_POD_IP"
MOUNT_FAILURES = frozenset({"FailedMount", "FailedAttachVolume"})

# seed 001 section 5: the controller and the workers act through this role. One rule is beyond the
# seed's list: reading Events, which is how the controller learns why a worker Pod cannot mount
# its volumes or is still being pulled (a Pod's status does not say); without it the API server
# refuses those reads and a slice's failure shows no reason.
CLUSTER_ROLE_RULES: list[dict[str, list[str]]] = [
    {
        "apiGroups": ["compute.coreweave.com"],
        "resources": ["nodepools"],
        "verbs": ["get", "list", "watch", "create", "update", "patch", "delete"],
    },
    {
        "apiGroups": [""],
        "resources": ["pods", "pods/exec", "pods/log"],
        "verbs": ["get", "list", "watch", "create", "update", "patch", "delete"],
    },
    {"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "list", "watch"]},
    {"apiGroups": [""], "resources": ["events"], "verbs": ["get", "list", "watch"]},
    {
        "apiGroups": [""],
        "resources": ["configmaps"],
        "verbs": ["get", "list", "watch", "create", "update", "patch", "delete"],
    },
]


def nodepool_name(label_prefix: str, scale_group: str) -> str:
    return f"{label_prefix}-{scale_group}"


def service_dns(service_name: str, namespace: str) -> str:
    return f"{service_name}.{namespace}.svc.cluster.local"


def scale_group_label(label_prefix: str) -> str:
    """The node label each pool puts on its nodes, which worker Pods select."""
    return f"{label_prefix}-scale-group"


# ---------------------------------------------------------------- cluster-level resources


def namespace(name: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}


def cluster_role_name(namespace_name: str) -> str:
    """The ClusterRole and ClusterRoleBinding of the cluster in `namespace_name`: cluster-wide
    objects, so two Iris clusters in one Kubernetes cluster (namespaces of their own) need names
    of their own, or the second's binding would take the first's role away. The default namespace
    gives the seed's name, iris-controller."""
    return f"{namespace_name}-controller"


def rbac(namespace_name: str) -> list[dict[str, Any]]:
    """ServiceAccount, ClusterRole and ClusterRoleBinding (`ensure_rbac`)."""
    role = cluster_role_name(namespace_name)
    return [
        {
            "apiVersion": "v1",
            "kind": "ServiceAccount",
            "metadata": {"name": SERVICE_ACCOUNT, "namespace": namespace_name},
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRole",
            "metadata": {"name": role},
            "rules": CLUSTER_ROLE_RULES,
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRoleBinding",
            "metadata": {"name": role},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role},
            "subjects": [{"kind": "ServiceAccount", "name": SERVICE_ACCOUNT, "namespace": namespace_name}],
        },
    ]


def s3_secret(namespace_name: str, environ: dict[str, str]) -> dict[str, Any]:
    """The S3 credentials Secret from the operator's R2_* variables; ValueError naming what is missing."""
    missing = [name for name in R2_ENV if not environ.get(name)]
    if missing:
        raise ValueError(
            f"storage uses s3:// but {' and '.join(missing)} {'is' if len(missing) == 1 else 'are'} not set: "
            "export the object storage credentials before `iris cluster start`"
        )
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": S3_SECRET_NAME, "namespace": namespace_name},
        "type": "Opaque",
        "stringData": {key: environ[r2] for key, r2 in zip(S3_SECRET_KEYS, R2_ENV, strict=True)},
    }


def config_map(namespace_name: str, config_yaml: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": CONFIGMAP_NAME, "namespace": namespace_name},
        "data": {CONFIG_KEY: config_yaml},
    }


def nodepool(
    name: str, label_prefix: str, scale_group: str, instance_type: str, max_nodes: int, target_nodes: int
) -> dict[str, Any]:
    """One shared, autoscaling pool per scale group; its nodes carry the group's label."""
    return {
        "apiVersion": NODEPOOL_API_VERSION,
        "kind": "NodePool",
        "metadata": {
            "name": name,
            "labels": {f"{label_prefix}-managed": "true", scale_group_label(label_prefix): scale_group},
        },
        "spec": {
            "instanceType": instance_type,
            "autoscaling": True,
            "minNodes": 0,
            "maxNodes": max_nodes,
            "targetNodes": target_nodes,
            "nodeLabels": {scale_group_label(label_prefix): scale_group},
        },
    }


def clamped_target_nodes(existing: dict[str, Any] | None) -> int:
    """targetNodes for a pool being (re)applied: a new pool starts at zero; an existing one at
    min(currentNodes, 1), so system Pods cannot keep a large pool from scaling down."""
    if existing is None:
        return 0
    return min(int((existing.get("status") or {}).get("currentNodes", 0)), 1)


def stale_nodepools(pools: Sequence[dict[str, Any]], wanted: set[str], label_prefix: str) -> list[str]:
    """Names of this cluster's pools no scale group asks for any more (garbage)."""
    managed = f"{label_prefix}-managed"
    return sorted(
        p["metadata"]["name"]
        for p in pools
        if (p["metadata"].get("labels") or {}).get(managed) == "true" and p["metadata"]["name"] not in wanted
    )


def controller_deployment(
    config_digest: str,
    namespace_name: str,
    image: str,
    port: int,
    scale_group: str,
    label_prefix: str,
    advertise_host: str,
    state_dir: str,
    controller_label: str,
    s3: bool = False,
    object_storage_endpoint: str = "",
) -> dict[str, Any]:
    """The controller: one replica on its scale group's pool, reading the config from the
    ConfigMap, with its state on the state claim (so a replacement Pod on any node of the pool
    carries on from it) and the object storage credentials for bundles.
    `config_digest` (of the ConfigMap's config) goes on the Pod template, so applying a changed
    config rolls the controller out onto it and an unchanged one changes nothing."""
    labels = {"app": CONTROLLER_NAME, controller_label: "true"}
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": CONTROLLER_NAME, "namespace": namespace_name, "labels": labels},
        "spec": {
            "replicas": 1,
            # One controller owns the state at a time (and a ReadWriteOnce volume attaches to one
            # node): the old Pod goes before the new one starts.
            "strategy": {"type": "Recreate"},
            "selector": {"matchLabels": {"app": CONTROLLER_NAME}},
            "template": {
                "metadata": {"labels": labels, "annotations": {CONFIG_DIGEST_ANNOTATION: config_digest}},
                "spec": {
                    "serviceAccountName": SERVICE_ACCOUNT,
                    "nodeSelector": {scale_group_label(label_prefix): scale_group},
                    "containers": [
                        {
                            "name": "controller",
                            "image": image,
                            "command": [
                                "python",
                                "-m",
                                "iris.cluster.controller.main",
                                "serve",
                                "--config",
                                f"{CONFIG_DIR}/{CONFIG_KEY}",
                                "--port",
                                str(port),
                                "--advertise-host",
                                advertise_host,
                                "--state-dir",
                                state_dir,
                            ],
                            "env": storage_env(s3, object_storage_endpoint),
                            "ports": [{"name": "http", "containerPort": port}],
                            "resources": {"requests": dict(CONTROLLER_RESOURCES), "limits": dict(CONTROLLER_RESOURCES)},
                            "readinessProbe": {
                                "httpGet": {"path": "/health", "port": port},
                                "periodSeconds": 2,
                            },
                            "volumeMounts": [
                                {"name": "config", "mountPath": CONFIG_DIR, "readOnly": True},
                                {"name": "state", "mountPath": state_dir},
                            ],
                        }
                    ],
                    "volumes": [
                        {"name": "config", "configMap": {"name": CONFIGMAP_NAME}},
                        {"name": "state", "persistentVolumeClaim": {"claimName": STATE_CLAIM_NAME}},
                    ],
                },
            },
        },
    }


def controller_state_claim(namespace_name: str) -> dict[str, Any]:
    """The controller's state volume: network storage of the cluster's default class, so the
    state outlives the Pod and the node it ran on."""
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {"name": STATE_CLAIM_NAME, "namespace": namespace_name},
        "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": STATE_CLAIM_SIZE}}},
    }


def deployment_rolled_out(deployment: dict[str, Any], generation: int) -> bool:
    """`generation` of a one-replica Deployment is observed, its Pod is of that template, is
    available, and no Pod of an older template is left."""
    status = deployment.get("status") or {}
    updated = int(status.get("updatedReplicas", 0))
    return (
        int(status.get("observedGeneration", 0)) >= generation
        and updated >= 1
        and int(status.get("replicas", 0)) == updated
        and int(status.get("availableReplicas", 0)) >= 1
    )


def controller_service(namespace_name: str, service_name: str, port: int) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": service_name, "namespace": namespace_name},
        "spec": {
            "type": "ClusterIP",
            "selector": {"app": CONTROLLER_NAME},
            "ports": [{"name": "http", "port": port, "targetPort": port, "protocol": "TCP"}],
        },
    }


# ---------------------------------------------------------------- worker Pods


@dataclass(frozen=True)
class WorkerPodSpec:
    """Everything one worker Pod is made of; `worker_pod` turns it into a manifest."""

    name: str
    namespace: str
    labels: dict[str, str]
    node_selector: dict[str, str]
    image: str
    port: int
    cache_dir: str
    controller_address: str
    worker_id: str
    slice_id: str
    task_image: str
    # What the worker offers beyond what it probes (scale group, cpu, memory, GPUs): worker.main flags.
    offer_flags: tuple[str, ...]
    infiniband: bool
    s3_secret: bool
    object_storage_endpoint: str
    env: dict[str, str]


def fsspec_s3(endpoint: str) -> str:
    """The fsspec S3 settings for an endpoint: virtual-hosted addressing for CoreWeave's own object
    storage, path style elsewhere (seed 001 section 4)."""
    virtual = any(host in endpoint for host in ("cwobject.com", "cwlota.com"))
    return json.dumps(
        {
            "endpoint_url": endpoint,
            "config_kwargs": {"s3": {"addressing_style": "virtual" if virtual else "path"}},
        },
        sort_keys=True,
    )


def worker_env(spec: WorkerPodSpec) -> list[dict[str, Any]]:
    """seed 001 section 10: downward API values, the ServiceAccount and Secret names the worker's
    KubernetesRuntime passes on to task Pods, and the S3 settings."""
    env: list[dict[str, Any]] = [
        {"name": name, "valueFrom": {"fieldRef": {"fieldPath": path}}}
        for name, path in {**DOWNWARD_ENV, POD_IP_ENV: "status.podIP"}.items()
    ]
    plain = {"IRIS_SERVICE_ACCOUNT_NAME": SERVICE_ACCOUNT, **spec.env}
    if spec.infiniband:
        plain["IRIS_INFINIBAND"] = "true"
    if spec.s3_secret:
        plain["IRIS_S3_SECRET_NAME"] = S3_SECRET_NAME
    env += [{"name": name, "value": value} for name, value in plain.items()]
    return env + storage_env(spec.s3_secret, spec.object_storage_endpoint)


def storage_env(s3: bool, endpoint: str) -> list[dict[str, Any]]:
    """The object storage endpoint and, for s3:// storage, the credentials from the Secret."""
    env: list[dict[str, Any]] = []
    if endpoint:
        env += [
            {"name": "AWS_ENDPOINT_URL", "value": endpoint},
            {"name": "FSSPEC_S3", "value": fsspec_s3(endpoint)},
        ]
    if s3:
        env += [
            {"name": key, "valueFrom": {"secretKeyRef": {"name": S3_SECRET_NAME, "key": key}}}
            for key in S3_SECRET_KEYS
        ]
    return env


def worker_pod(spec: WorkerPodSpec) -> dict[str, Any]:
    """The light worker Pod: no GPU or RDMA requests (its task Pods claim them), host network,
    cache on the node's NVMe, config from the ConfigMap."""
    command = [
        "python",
        "-m",
        "iris.cluster.worker.main",
        "serve",
        "--config",
        f"{CONFIG_DIR}/{CONFIG_KEY}",
        "--controller-address",
        spec.controller_address,
        "--runtime",
        "kubernetes",
        "--port",
        str(spec.port),
        "--cache-dir",
        spec.cache_dir,
        "--worker-id",
        spec.worker_id,
        "--slice-id",
        spec.slice_id,
        # On the host network the Pod's IP is its node's: the address the controller dials.
        "--host",
        f"$({POD_IP_ENV})",
        "--advertise-host",
        f"$({POD_IP_ENV})",
        *spec.offer_flags,
    ]
    if spec.task_image:
        command += ["--task-image", spec.task_image]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": spec.name, "namespace": spec.namespace, "labels": dict(spec.labels)},
        "spec": {
            "serviceAccountName": SERVICE_ACCOUNT,
            "hostNetwork": True,
            "dnsPolicy": "ClusterFirstWithHostNet",
            "restartPolicy": "Always",
            "nodeSelector": dict(spec.node_selector),
            # GPU nodes are tainted; the worker itself claims no GPU but must run beside its tasks.
            "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
            "containers": [
                {
                    "name": "worker",
                    "image": spec.image,
                    "command": command,
                    "env": worker_env(spec),
                    "ports": [{"name": "http", "containerPort": spec.port}],
                    "readinessProbe": {"tcpSocket": {"port": spec.port}, "periodSeconds": 2},
                    "volumeMounts": [
                        {"name": "config", "mountPath": CONFIG_DIR, "readOnly": True},
                        {"name": "cache", "mountPath": spec.cache_dir},
                    ],
                }
            ],
            "volumes": [
                {"name": "config", "configMap": {"name": CONFIGMAP_NAME}},
                {"name": "cache", "hostPath": {"path": spec.cache_dir, "type": "DirectoryOrCreate"}},
            ],
        },
    }


# ---------------------------------------------------------------- early failure detection


@dataclass(frozen=True)
class PodFailure:
    """Why a Pod will not come up without someone changing something. `needs_logs` names the
    container whose last log lines belong in the message (a crash loop)."""

    reason: str
    message: str
    needs_logs: str = ""


def pod_failure(
    pod: dict[str, Any], events: Sequence[dict[str, Any]], age_s: float, mount_grace_s: float
) -> PodFailure | None:
    """seed 001 section 9: a fatal waiting reason, a crash loop of CRASH_LOOP_RESTARTS restarts, a
    mount failing MOUNT_FAILURE_COUNT times once the Pod is older than the grace, or a Pod that ended."""
    status = pod.get("status") or {}
    name = pod["metadata"]["name"]
    for container in (status.get("initContainerStatuses") or []) + (status.get("containerStatuses") or []):
        waiting = (container.get("state") or {}).get("waiting") or {}
        reason = waiting.get("reason", "")
        detail = waiting.get("message", "")
        if reason in IMAGE_FAILURES:
            return PodFailure(reason, f"Pod {name} cannot pull image {container.get('image', '')}: {detail or reason}")
        if reason in CONFIG_FAILURES:
            return PodFailure(
                reason,
                f"Pod {name} cannot start container {container['name']} (usually a missing Secret or "
                f"ConfigMap): {detail or reason}",
            )
        if reason == "CrashLoopBackOff" and int(container.get("restartCount", 0)) >= CRASH_LOOP_RESTARTS:
            return PodFailure(
                reason,
                f"Pod {name} container {container['name']} keeps crashing "
                f"({container.get('restartCount')} restarts)",
                needs_logs=container["name"],
            )
    if age_s >= mount_grace_s:
        for event in events:
            if event.get("reason") in MOUNT_FAILURES and int(event.get("count", 1)) >= MOUNT_FAILURE_COUNT:
                return PodFailure(
                    event["reason"],
                    f"Pod {name} cannot mount its volumes after {age_s:.0f}s: {event.get('message', '')}",
                )
    if status.get("phase") in ("Failed", "Succeeded"):
        ended = [
            (c["name"], (c.get("state") or {}).get("terminated") or {})
            for c in status.get("containerStatuses") or []
        ]
        detail = "; ".join(
            f"{cname} exited with {t.get('exitCode', '?')} ({t.get('reason', '')})" for cname, t in ended if t
        )
        return PodFailure(status["phase"], f"Pod {name} ended: {detail or status.get('message', status['phase'])}")
    return None


def pod_ready(pod: dict[str, Any]) -> bool:
    conditions = (pod.get("status") or {}).get("conditions") or []
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)


def with_log_tail(failure: PodFailure, log_text: str) -> str:
    lines = log_text.splitlines()[-CRASH_LOG_LINES:]
    return failure.message + ("; last log lines:\n" + "\n".join(lines) if lines else "; it printed nothing")
