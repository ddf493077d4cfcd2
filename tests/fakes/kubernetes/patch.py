"""The four patch formats a PATCH request can carry, by its Content-Type.

- application/merge-patch+json: RFC 7386 (null deletes, objects merge, lists replace);
- application/strategic-merge-patch+json: like merge, but lists of objects with a merge key
  (containers by name, ports by containerPort, ...) merge element-wise, with the `$patch`,
  `$setElementOrder/<list>`, `$retainKeys` and `$deleteFromPrimitiveList/<list>` directives
  kubectl's client-side apply sends;
- application/json-patch+json: RFC 6902 operations;
- application/apply-patch+yaml: server-side apply; the body is the full intent, merged like a
  strategic patch (the fake has no field ownership, so no apply conflicts).
"""

from __future__ import annotations

import copy
from typing import Any

MERGE_PATCH = "application/merge-patch+json"
STRATEGIC_MERGE_PATCH = "application/strategic-merge-patch+json"
JSON_PATCH = "application/json-patch+json"
APPLY_PATCH = "application/apply-patch+yaml"
PATCH_TYPES = (MERGE_PATCH, STRATEGIC_MERGE_PATCH, JSON_PATCH, APPLY_PATCH)

# Merge keys of the lists the fake's kinds carry (from the real types' patchMergeKey tags).
MERGE_KEYS = {
    "containers": "name",
    "initContainers": "name",
    "ephemeralContainers": "name",
    "volumes": "name",
    "env": "name",
    "volumeMounts": "mountPath",
    "ports": "containerPort",
    "imagePullSecrets": "name",
    "ownerReferences": "uid",
    "conditions": "type",
    "containerStatuses": "name",
    "initContainerStatuses": "name",
    "taints": "key",
    "hostAliases": "ip",
    "topologySpreadConstraints": "topologyKey",
}
# Service ports merge by port number rather than containerPort.
_SERVICE_PORT_KEY = "port"


class PatchError(ValueError):
    """A patch that cannot be applied; the server answers 422 (or 400 for a malformed one)."""


def merge_patch(target: Any, patch: Any) -> Any:
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    result = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result


def strategic_merge_patch(target: Any, patch: Any, list_name: str = "") -> Any:
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    if patch.get("$patch") == "replace":
        return {k: copy.deepcopy(v) for k, v in patch.items() if k != "$patch"}
    if patch.get("$patch") == "delete":
        return None
    result = dict(target) if isinstance(target, dict) else {}
    retain = patch.get("$retainKeys")
    for key, value in patch.items():
        if key.startswith("$setElementOrder/") or key in ("$retainKeys", "$patch"):
            continue
        if key.startswith("$deleteFromPrimitiveList/"):
            name = key.split("/", 1)[1]
            result[name] = [item for item in result.get(name) or [] if item not in value]
            continue
        if value is None:
            result.pop(key, None)
        elif isinstance(value, list):
            result[key] = _merge_list(result.get(key), value, key)
        else:
            merged = strategic_merge_patch(result.get(key), value, key)
            if merged is None:
                result.pop(key, None)
            else:
                result[key] = merged
    if isinstance(retain, list):
        result = {k: v for k, v in result.items() if k in retain}
    return result


def _merge_list(current: Any, patch: list[Any], name: str) -> list[Any]:
    key = MERGE_KEYS.get(name)
    if name == "ports" and all(isinstance(i, dict) and "containerPort" not in i for i in patch):
        key = _SERVICE_PORT_KEY
    if key is None or not all(isinstance(item, dict) for item in patch):
        return [copy.deepcopy(item) for item in patch if not (isinstance(item, dict) and "$patch" in item)]
    result = [copy.deepcopy(item) for item in current or []]
    for item in patch:
        if item.get("$patch") == "replace":
            return [
                copy.deepcopy({k: v for k, v in i.items() if k != "$patch"}) for i in patch if i is not item
            ]
        index = next((i for i, existing in enumerate(result) if existing.get(key) == item.get(key)), None)
        if item.get("$patch") == "delete":
            if index is not None:
                result.pop(index)
            continue
        if index is None:
            result.append(strategic_merge_patch({}, item, name))
        else:
            result[index] = strategic_merge_patch(result[index], item, name)
    return result


def json_patch(target: Any, operations: list[dict[str, Any]]) -> Any:
    document = copy.deepcopy(target)
    for operation in operations:
        op, path = operation.get("op"), operation.get("path", "")
        if op == "add":
            document = _add(document, path, copy.deepcopy(operation.get("value")))
        elif op == "remove":
            document = _remove(document, path)
        elif op == "replace":
            _get(document, path)
            document = _add(_remove(document, path), path, copy.deepcopy(operation.get("value")))
        elif op == "test":
            if _get(document, path) != operation.get("value"):
                raise PatchError(f"testing value {path} failed")
        elif op in ("move", "copy"):
            value = copy.deepcopy(_get(document, operation.get("from", "")))
            if op == "move":
                document = _remove(document, operation.get("from", ""))
            document = _add(document, path, value)
        else:
            raise PatchError(f"Unexpected kind: {op}")
    return document


def _pointer(path: str) -> list[str]:
    if path == "":
        return []
    if not path.startswith("/"):
        raise PatchError(f"JSON pointer must start with '/': {path}")
    return [part.replace("~1", "/").replace("~0", "~") for part in path[1:].split("/")]


def _parent(document: Any, parts: list[str], path: str) -> Any:
    node = document
    for part in parts[:-1]:
        node = _child(node, part, path)
    return node


def _child(node: Any, part: str, path: str) -> Any:
    if isinstance(node, dict) and part in node:
        return node[part]
    if isinstance(node, list) and part.isdigit() and int(part) < len(node):
        return node[int(part)]
    raise PatchError(f'doc is missing path: "{path}"')


def _get(document: Any, path: str) -> Any:
    node = document
    for part in _pointer(path):
        node = _child(node, part, path)
    return node


def _add(document: Any, path: str, value: Any) -> Any:
    parts = _pointer(path)
    if not parts:
        return value
    parent = _parent(document, parts, path)
    last = parts[-1]
    if isinstance(parent, dict):
        parent[last] = value
    elif isinstance(parent, list):
        if last == "-":
            parent.append(value)
        elif last.isdigit() and int(last) <= len(parent):
            parent.insert(int(last), value)
        else:
            raise PatchError(f'add operation does not apply: doc is missing path: "{path}"')
    else:
        raise PatchError(f'add operation does not apply: doc is missing path: "{path}"')
    return document


def _remove(document: Any, path: str) -> Any:
    parts = _pointer(path)
    parent = _parent(document, parts, path)
    last = parts[-1]
    if isinstance(parent, dict) and last in parent:
        del parent[last]
    elif isinstance(parent, list) and last.isdigit() and int(last) < len(parent):
        parent.pop(int(last))
    else:
        raise PatchError(f'remove operation does not apply: doc is missing path: "{path}"')
    return document


def apply_patch(content_type: str, current: dict[str, Any] | None, patch: Any) -> dict[str, Any]:
    """`current` is None only for server-side apply of an object that does not exist yet."""
    base = current or {}
    if content_type == MERGE_PATCH:
        result = merge_patch(base, patch)
    elif content_type in (STRATEGIC_MERGE_PATCH, APPLY_PATCH):
        if not isinstance(patch, dict):
            raise PatchError("patch body must be a JSON object")
        result = strategic_merge_patch(base, patch)
    elif content_type == JSON_PATCH:
        if not isinstance(patch, list):
            raise PatchError("json patch must be a list of operations")
        result = json_patch(base, patch)
    else:
        raise PatchError(f"unsupported patch type {content_type}")
    if not isinstance(result, dict):
        raise PatchError("the patched object is not a JSON object")
    return result
