"""Discovery and OpenAPI documents: what clients read before they touch a resource.

kubectl maps kinds and short names to URLs from `/api`, `/apis` and the per-group-version
resource lists; `kubectl apply` reads `/openapi/v3` to learn which group-version-kind a PATCH path
serves and whether it takes `fieldValidation` (it then asks the server to validate strictly).
"""

from __future__ import annotations

import hashlib
from typing import Any

from fakes.kubernetes.resources import GROUP_VERSIONS, RESOURCES

SERVER_VERSION = {"major": "1", "minor": "32", "gitVersion": "v1.32.4", "platform": "linux/amd64"}


def version() -> dict[str, Any]:
    return {
        **SERVER_VERSION,
        "gitCommit": "fake",
        "gitTreeState": "clean",
        "buildDate": "2025-01-01T00:00:00Z",
        "goVersion": "go1.23",
        "compiler": "gc",
    }


def core_versions(server_address: str) -> dict[str, Any]:
    return {
        "kind": "APIVersions",
        "versions": ["v1"],
        "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": server_address}],
    }


def group_list() -> dict[str, Any]:
    return {
        "kind": "APIGroupList",
        "apiVersion": "v1",
        "groups": [group(name) for name in GROUP_VERSIONS if name],
    }


def group(name: str) -> dict[str, Any]:
    versions = [{"groupVersion": f"{name}/{v}", "version": v} for v in GROUP_VERSIONS[name]]
    return {
        "kind": "APIGroup",
        "apiVersion": "v1",
        "name": name,
        "versions": versions,
        "preferredVersion": versions[0],
    }


def resource_list(group_name: str, version_name: str) -> dict[str, Any] | None:
    served = [r for r in RESOURCES if (r.group, r.version) == (group_name, version_name)]
    if not served:
        return None
    entries: list[dict[str, Any]] = []
    for resource in served:
        entries.append(
            {
                "name": resource.plural,
                "singularName": resource.kind.lower(),
                "namespaced": resource.namespaced,
                "kind": resource.kind,
                "verbs": list(resource.verbs),
                "shortNames": list(resource.short_names),
                "storageVersionHash": hashlib.sha256(resource.plural.encode()).hexdigest()[:12],
            }
        )
        for sub in resource.subresources:
            verbs = {"status": ["get", "patch", "update"], "log": ["get"]}.get(sub, ["create", "get"])
            entries.append(
                {
                    "name": f"{resource.plural}/{sub}",
                    "singularName": "",
                    "namespaced": resource.namespaced,
                    "kind": "PodExecOptions" if sub == "exec" else resource.kind,
                    "verbs": verbs,
                }
            )
    group_version = f"{group_name}/{version_name}" if group_name else version_name
    return {
        "kind": "APIResourceList",
        "apiVersion": "v1",
        "groupVersion": group_version,
        "resources": entries,
    }


def _openapi_path(group_version: str) -> str:
    return "api/v1" if group_version == "v1" else f"apis/{group_version}"


def openapi_index() -> dict[str, Any]:
    paths = {}
    for group_name, versions in GROUP_VERSIONS.items():
        for version_name in versions:
            path = _openapi_path(f"{group_name}/{version_name}" if group_name else version_name)
            digest = hashlib.sha256(path.encode()).hexdigest()[:16].upper()
            paths[path] = {"serverRelativeURL": f"/openapi/v3/{path}?hash={digest}"}
    return {"paths": paths}


def openapi_document(path: str) -> dict[str, Any] | None:
    """One stub document per group-version: a PATCH operation per resource, enough for apply."""
    served = [r for r in RESOURCES if _openapi_path(r.group_version) == path and "patch" in r.verbs]
    if not served:
        return None
    paths: dict[str, Any] = {}
    for resource in served:
        prefix = "/" + path + ("/namespaces/{namespace}" if resource.namespaced else "")
        gvk = {"group": resource.group, "version": resource.version, "kind": resource.kind}
        parameters = [
            {"name": "fieldValidation", "in": "query", "schema": {"type": "string", "uniqueItems": True}},
            {"name": "dryRun", "in": "query", "schema": {"type": "string", "uniqueItems": True}},
            {"name": "fieldManager", "in": "query", "schema": {"type": "string", "uniqueItems": True}},
        ]
        paths[f"{prefix}/{resource.plural}/{{name}}"] = {
            "patch": {
                "operationId": f"patch{resource.kind}",
                "parameters": parameters,
                "x-kubernetes-action": "patch",
                "x-kubernetes-group-version-kind": gvk,
                "responses": {"200": {"description": "OK"}},
            }
        }
    return {
        "openapi": "3.0.0",
        "info": {"title": "Kubernetes", "version": SERVER_VERSION["gitVersion"]},
        "paths": paths,
        "components": {"schemas": {}},
    }
