"""The kinds the fake API server serves, and the validation the real server applies to them.

Validation errors are returned as `FieldError`s; the HTTP layer turns them into the 422 `Status`
the real server sends (reason `Invalid`, one cause per field), which kubectl prints as
`The Pod "x" is invalid: spec.containers: Required value`.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass
from typing import Any

ALL_VERBS = ["create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"]
READ_VERBS = ["get", "list"]


@dataclass(frozen=True)
class Resource:
    group: str
    version: str
    plural: str
    kind: str
    namespaced: bool
    short_names: tuple[str, ...] = ()
    subresources: tuple[str, ...] = ()
    verbs: tuple[str, ...] = tuple(ALL_VERBS)
    singular: str = ""

    @property
    def group_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def key(self) -> tuple[str, str]:
        return (self.group, self.plural)


RESOURCES = [
    Resource("", "v1", "namespaces", "Namespace", False, ("ns",), ("status",)),
    Resource("", "v1", "pods", "Pod", True, ("po",), ("status", "log", "exec", "portforward", "binding")),
    Resource("", "v1", "configmaps", "ConfigMap", True, ("cm",)),
    Resource("", "v1", "secrets", "Secret", True),
    Resource("", "v1", "services", "Service", True, ("svc",), ("status",)),
    Resource("", "v1", "serviceaccounts", "ServiceAccount", True, ("sa",)),
    Resource("", "v1", "nodes", "Node", False, ("no",), ("status",)),
    Resource("", "v1", "events", "Event", True, ("ev",)),
    Resource("", "v1", "persistentvolumeclaims", "PersistentVolumeClaim", True, ("pvc",), ("status",)),
    Resource("", "v1", "persistentvolumes", "PersistentVolume", False, ("pv",), ("status",)),
    Resource("apps", "v1", "deployments", "Deployment", True, ("deploy",), ("status", "scale")),
    Resource("rbac.authorization.k8s.io", "v1", "clusterroles", "ClusterRole", False),
    Resource("rbac.authorization.k8s.io", "v1", "clusterrolebindings", "ClusterRoleBinding", False),
    Resource("compute.coreweave.com", "v1alpha1", "nodepools", "NodePool", False, ("np",), ("status",)),
    # metrics-server's API: read-only, computed from the kubelet's container stats on each read.
    Resource("metrics.k8s.io", "v1beta1", "pods", "PodMetrics", True, verbs=tuple(READ_VERBS)),
]

GROUP_VERSIONS: dict[str, list[str]] = {}
for _resource in RESOURCES:
    GROUP_VERSIONS.setdefault(_resource.group, [])
    if _resource.version not in GROUP_VERSIONS[_resource.group]:
        GROUP_VERSIONS[_resource.group].append(_resource.version)


def find_resource(group: str, version: str, plural: str) -> Resource | None:
    for resource in RESOURCES:
        if (resource.group, resource.version, resource.plural) == (group, version, plural):
            return resource
    return None


def resource_for_kind(api_version: str, kind: str) -> Resource | None:
    group, _, version = api_version.rpartition("/")
    for resource in RESOURCES:
        if (resource.group, resource.version, resource.kind) == (group, version, kind):
            return resource
    return None


@dataclass
class FieldError:
    field: str
    reason: str  # the real server's cause type, e.g. FieldValueRequired
    detail: str = ""
    value: Any = None

    @property
    def message(self) -> str:
        label = {
            "FieldValueRequired": "Required value",
            "FieldValueInvalid": "Invalid value",
            "FieldValueNotSupported": "Unsupported value",
            "FieldValueForbidden": "Forbidden",
            "FieldValueNotFound": "Not found",
        }[self.reason]
        if self.reason in ("FieldValueInvalid", "FieldValueNotSupported", "FieldValueNotFound"):
            label += f": {_quote(self.value)}"
        return f"{self.field}: {label}" + (f": {self.detail}" if self.detail else "")


def _quote(value: Any) -> str:
    return f'"{value}"' if isinstance(value, str) else str(value)


_DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
_DNS_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
_QUALIFIED_NAME = re.compile(r"([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]")
_LABEL_VALUE = re.compile(r"(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?")
_DNS_LABEL_MESSAGE = (
    "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start "
    "and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for validation is "
    "'[a-z0-9]([-a-z0-9]*[a-z0-9])?')"
)
_DNS_SUBDOMAIN_MESSAGE = (
    "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must "
    "start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is "
    "'[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')"
)
_LABEL_VALUE_MESSAGE = (
    "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must "
    "start and end with an alphanumeric character (e.g. 'MyValue',  or 'my_value',  or '12345', regex used for "
    "validation is '(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')"
)
# Kinds whose names must be DNS labels rather than subdomains.
_LABEL_NAMED = {"Namespace", "Service"}
RESTART_POLICIES = ("Always", "OnFailure", "Never")


def validate(resource: Resource, obj: dict[str, Any]) -> list[FieldError]:
    errors = _validate_metadata(resource, obj.get("metadata") or {})
    if resource.kind == "Pod":
        errors += _validate_pod_spec(obj.get("spec"), "spec")
    elif resource.kind == "Deployment":
        errors += _validate_deployment(obj.get("spec"))
    elif resource.kind == "NodePool":
        spec = obj.get("spec") or {}
        if not spec.get("instanceType"):
            errors.append(FieldError("spec.instanceType", "FieldValueRequired"))
    return errors


def _validate_metadata(resource: Resource, metadata: dict[str, Any]) -> list[FieldError]:
    errors: list[FieldError] = []
    name = metadata.get("name")
    if not name:
        if not metadata.get("generateName"):
            errors.append(
                FieldError("metadata.name", "FieldValueRequired", "name or generateName is required")
            )
    elif resource.kind in _LABEL_NAMED:
        if len(name) > 63 or not _DNS_LABEL.fullmatch(name):
            errors.append(FieldError("metadata.name", "FieldValueInvalid", _DNS_LABEL_MESSAGE, name))
    elif len(name) > 253 or not _DNS_SUBDOMAIN.fullmatch(name):
        errors.append(FieldError("metadata.name", "FieldValueInvalid", _DNS_SUBDOMAIN_MESSAGE, name))
    for key, value in (metadata.get("labels") or {}).items():
        errors += _validate_qualified_name(key, "metadata.labels")
        if not isinstance(value, str) or len(value) > 63 or not _LABEL_VALUE.fullmatch(value):
            errors.append(FieldError("metadata.labels", "FieldValueInvalid", _LABEL_VALUE_MESSAGE, value))
    for key in metadata.get("annotations") or {}:
        errors += _validate_qualified_name(key, "metadata.annotations")
    return errors


def _validate_qualified_name(key: str, path: str) -> list[FieldError]:
    prefix, _, name = key.rpartition("/")
    if prefix and (len(prefix) > 253 or not _DNS_SUBDOMAIN.fullmatch(prefix)):
        return [FieldError(path, "FieldValueInvalid", "prefix part " + _DNS_SUBDOMAIN_MESSAGE, key)]
    if len(name) > 63 or not _QUALIFIED_NAME.fullmatch(name):
        return [
            FieldError(
                path,
                "FieldValueInvalid",
                "name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end "
                "with an alphanumeric character",
                key,
            )
        ]
    return []


def _validate_pod_spec(spec: Any, path: str) -> list[FieldError]:
    if not isinstance(spec, dict):
        return [FieldError(path, "FieldValueRequired")]
    errors: list[FieldError] = []
    containers = spec.get("containers") or []
    if not containers:
        errors.append(FieldError(f"{path}.containers", "FieldValueRequired"))
    seen: set[str] = set()
    for kind in ("initContainers", "containers"):
        for index, container in enumerate(spec.get(kind) or []):
            where = f"{path}.{kind}[{index}]"
            name = container.get("name")
            if not name:
                errors.append(FieldError(f"{where}.name", "FieldValueRequired"))
            elif len(name) > 63 or not _DNS_LABEL.fullmatch(name):
                errors.append(FieldError(f"{where}.name", "FieldValueInvalid", _DNS_LABEL_MESSAGE, name))
            elif name in seen:
                errors.append(FieldError(f"{where}.name", "FieldValueInvalid", "Duplicate value", name))
            seen.add(name or "")
            if not container.get("image"):
                errors.append(FieldError(f"{where}.image", "FieldValueRequired"))
    policy = spec.get("restartPolicy")
    if policy is not None and policy not in RESTART_POLICIES:
        errors.append(
            FieldError(
                f"{path}.restartPolicy",
                "FieldValueNotSupported",
                "supported values: " + ", ".join(f'"{p}"' for p in RESTART_POLICIES),
                policy,
            )
        )
    volume_names = {volume.get("name") for volume in spec.get("volumes") or []}
    for kind in ("initContainers", "containers"):
        for index, container in enumerate(spec.get(kind) or []):
            for mount_index, mount in enumerate(container.get("volumeMounts") or []):
                if mount.get("name") not in volume_names:
                    errors.append(
                        FieldError(
                            f"{path}.{kind}[{index}].volumeMounts[{mount_index}].name",
                            "FieldValueNotFound",
                            "",
                            mount.get("name"),
                        )
                    )
    return errors


def _validate_deployment(spec: Any) -> list[FieldError]:
    if not isinstance(spec, dict):
        return [FieldError("spec", "FieldValueRequired")]
    errors: list[FieldError] = []
    selector = (spec.get("selector") or {}).get("matchLabels")
    if not selector:
        errors.append(FieldError("spec.selector", "FieldValueRequired"))
    template = spec.get("template") or {}
    labels = (template.get("metadata") or {}).get("labels") or {}
    if selector and any(labels.get(k) != v for k, v in selector.items()):
        errors.append(
            FieldError(
                "spec.template.metadata.labels",
                "FieldValueInvalid",
                "`selector` does not match template `labels`",
                labels,
            )
        )
    errors += _validate_pod_spec(template.get("spec"), "spec.template.spec")
    return errors


# Pod fields the real server lets an update change; anything else is 422 Forbidden.
_MUTABLE_POD_SPEC = ("activeDeadlineSeconds", "tolerations", "terminationGracePeriodSeconds")


def validate_pod_update(old: dict[str, Any], new: dict[str, Any]) -> list[FieldError]:
    def comparable(spec: dict[str, Any]) -> dict[str, Any]:
        copy = {k: v for k, v in spec.items() if k not in _MUTABLE_POD_SPEC}
        copy["containers"] = [
            {k: v for k, v in c.items() if k != "image"} for c in spec.get("containers") or []
        ]
        copy["initContainers"] = [
            {k: v for k, v in c.items() if k != "image"} for c in spec.get("initContainers") or []
        ]
        return copy

    if comparable(old.get("spec") or {}) != comparable(new.get("spec") or {}):
        return [
            FieldError(
                "spec",
                "FieldValueForbidden",
                "pod updates may not change fields other than `spec.containers[*].image`,"
                "`spec.initContainers[*].image`,`spec.activeDeadlineSeconds`,`spec.tolerations` "
                "(only additions to existing tolerations),`spec.terminationGracePeriodSeconds` "
                "(allow it to be set to 1 if it was previously negative)",
            )
        ]
    return []


def apply_defaults(resource: Resource, obj: dict[str, Any]) -> None:
    """A new object's defaults and initial status, as the API server sets them on create."""
    default_spec(resource, obj)
    if resource.kind == "Pod":
        obj.setdefault("status", {"phase": "Pending", "qosClass": _qos_class(obj["spec"])})
    elif resource.kind in ("Deployment", "NodePool"):
        obj.setdefault("status", {})
    elif resource.kind == "Namespace":
        obj.setdefault("spec", {"finalizers": ["kubernetes"]})
        obj["status"] = {"phase": "Active"}
    elif resource.kind == "Service":
        obj.setdefault("status", {"loadBalancer": {}})


def default_spec(resource: Resource, obj: dict[str, Any]) -> None:
    """The defaults of the fields a client writes, which the API server fills on every write (so
    re-applying a manifest that leaves them out changes nothing)."""
    if resource.kind == "Pod":
        _default_pod_spec(obj.setdefault("spec", {}))
    elif resource.kind == "Deployment":
        spec = obj.setdefault("spec", {})
        spec.setdefault("replicas", 1)
        spec.setdefault("strategy", {"type": "RollingUpdate"})
        _default_pod_spec(spec.setdefault("template", {}).setdefault("spec", {}))
    elif resource.kind == "Service":
        spec = obj.setdefault("spec", {})
        spec.setdefault("type", "ClusterIP")
        spec.setdefault("sessionAffinity", "None")
        if spec.get("clusterIP") != "None":
            # A stable address in the service range; nothing ever connects to it.
            digest = hashlib.sha256(json.dumps(obj.get("metadata"), sort_keys=True).encode()).digest()
            spec.setdefault("clusterIP", f"10.96.{digest[0]}.{digest[1] or 1}")
            spec.setdefault("clusterIPs", [spec["clusterIP"]])
        for port in spec.get("ports") or []:
            port.setdefault("protocol", "TCP")
            port.setdefault("targetPort", port.get("port"))
    elif resource.kind == "Secret":
        obj.setdefault("type", "Opaque")


def _default_pod_spec(spec: dict[str, Any]) -> None:
    spec.setdefault("restartPolicy", "Always")
    spec.setdefault("terminationGracePeriodSeconds", 30)
    spec.setdefault("dnsPolicy", "ClusterFirst")
    spec.setdefault("schedulerName", "default-scheduler")
    spec.setdefault("serviceAccountName", spec.get("serviceAccount") or "default")
    spec.setdefault("enableServiceLinks", True)
    spec.setdefault("securityContext", {})
    for kind in ("initContainers", "containers"):
        for container in spec.get(kind) or []:
            for port in container.get("ports") or []:
                port.setdefault("protocol", "TCP")
                if spec.get("hostNetwork") and "containerPort" in port:
                    # On the host network a container port is a port of the node.
                    port.setdefault("hostPort", port["containerPort"])
            container.setdefault("terminationMessagePath", "/dev/termination-log")
            container.setdefault("terminationMessagePolicy", "File")
            container.setdefault(
                "imagePullPolicy",
                "Always" if container.get("image", "").endswith(":latest") else "IfNotPresent",
            )
            container.setdefault("resources", {})
            resources = container["resources"]
            # Limits without requests request the limit.
            if resources.get("limits"):
                requests = resources.setdefault("requests", {})
                for name, quantity in resources["limits"].items():
                    requests.setdefault(name, quantity)


def _qos_class(spec: dict[str, Any]) -> str:
    containers = spec.get("containers") or []
    resources = [c.get("resources") or {} for c in containers]
    if not any(r.get("requests") or r.get("limits") for r in resources):
        return "BestEffort"
    guaranteed = all(
        (r.get("limits") or {}).get(name)
        and (r.get("requests") or {}).get(name) == (r.get("limits") or {}).get(name)
        for r in resources
        for name in ("cpu", "memory")
    )
    return "Guaranteed" if guaranteed else "Burstable"
