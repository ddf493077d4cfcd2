"""Field ownership (`metadata.managedFields`) and server-side apply on top of it.

Every write records which manager set which fields, as `FieldsV1` sets per (manager, operation):
a create or update makes its manager own the fields it added or changed (taking them from the
others); a server-side apply makes its manager own exactly the fields it sent, answers 409 with
the API server's message when another manager owns one of them with a different value (unless
`force`), and removes the fields the manager applied before and no longer sends when nobody else
owns them. A write that changes nothing leaves the object, and so its resourceVersion, alone.

Simplification: lists are owned as a whole (the real server merges keyed lists such as containers
item by item); maps are owned key by key.
"""

from __future__ import annotations

import copy
from typing import Any

from fakes.kubernetes.store import ApiError, now_rfc3339

APPLY = "Apply"
UPDATE = "Update"
Path = tuple[str, ...]
# Identity and server-owned fields: nobody manages them.
_UNMANAGED_METADATA = {
    "name",
    "namespace",
    "uid",
    "resourceVersion",
    "generation",
    "creationTimestamp",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
    "managedFields",
    "selfLink",
    "generateName",
}
_MISSING = object()


def field_paths(obj: dict[str, Any]) -> set[Path]:
    """The leaf fields of `obj` a manager can own."""
    paths: set[Path] = set()

    def walk(node: Any, path: Path) -> None:
        if isinstance(node, dict) and node:
            for key, value in node.items():
                walk(value, (*path, key))
        else:
            paths.add(path)

    for key, value in obj.items():
        if key in ("apiVersion", "kind", "status"):
            continue
        if key == "metadata":
            for meta_key, meta_value in (value or {}).items():
                if meta_key not in _UNMANAGED_METADATA:
                    walk(meta_value, ("metadata", meta_key))
            continue
        walk(value, (key,))
    return paths


def to_fields_v1(paths: set[Path]) -> dict[str, Any]:
    tree: dict[str, Any] = {}
    for path in sorted(paths):
        node = tree
        for part in path:
            node = node.setdefault(f"f:{part}", {})
    return tree


def from_fields_v1(tree: dict[str, Any], prefix: Path = ()) -> set[Path]:
    paths: set[Path] = set()
    for key, child in tree.items():
        path = (*prefix, key.removeprefix("f:"))
        if child:
            paths |= from_fields_v1(child, path)
        else:
            paths.add(path)
    return paths


def path_text(path: Path) -> str:
    return "".join(f".{part}" for part in path)


def _get(obj: Any, path: Path) -> Any:
    for part in path:
        if not isinstance(obj, dict) or part not in obj:
            return _MISSING
        obj = obj[part]
    return obj


def _set(obj: dict[str, Any], path: Path, value: Any) -> None:
    for part in path[:-1]:
        if not isinstance(obj.get(part), dict):
            obj[part] = {}
        obj = obj[part]
    obj[path[-1]] = copy.deepcopy(value)


def _delete(obj: dict[str, Any], path: Path) -> None:
    parent = _get(obj, path[:-1])
    if isinstance(parent, dict):
        parent.pop(path[-1], None)


class _Entries:
    """The managedFields of one object as (manager, operation, apiVersion) -> (paths, time)."""

    def __init__(self, obj: dict[str, Any] | None) -> None:
        self.sets: dict[tuple[str, str, str], set[Path]] = {}
        self.times: dict[tuple[str, str, str], str] = {}
        for entry in ((obj or {}).get("metadata") or {}).get("managedFields") or []:
            key = (entry.get("manager", ""), entry.get("operation", UPDATE), entry.get("apiVersion", ""))
            self.sets[key] = from_fields_v1(entry.get("fieldsV1") or {})
            self.times[key] = entry.get("time", "")

    def take(self, key: tuple[str, str, str], paths: set[Path]) -> None:
        """`key` now owns `paths`, in addition to what it owned; no other manager does."""
        for other, owned in self.sets.items():
            if other != key:
                owned -= paths
        self.sets[key] = self.sets.get(key, set()) | paths

    def encode(self, previous: _Entries) -> list[dict[str, Any]]:
        """As the API shows them; an entry's time changes only when its fields did."""
        entries = []
        for key, paths in self.sets.items():
            if not paths:
                continue
            changed = previous.sets.get(key) != paths
            manager, operation, api_version = key
            entries.append(
                {
                    "manager": manager,
                    "operation": operation,
                    "apiVersion": api_version,
                    "time": now_rfc3339() if changed or not previous.times.get(key) else previous.times[key],
                    "fieldsType": "FieldsV1",
                    "fieldsV1": to_fields_v1(paths),
                }
            )
        return entries


def record_update(
    previous: dict[str, Any] | None, updated: dict[str, Any], manager: str, api_version: str
) -> None:
    """Set `updated`'s managedFields after a create, update or non-apply patch by `manager`."""
    before = _Entries(previous)
    entries = _Entries(previous)
    paths = field_paths(updated)
    changed = {path for path in paths if previous is None or _get(previous, path) != _get(updated, path)}
    for owned in entries.sets.values():
        owned &= paths
    entries.take((manager, UPDATE, api_version), changed)
    updated.setdefault("metadata", {})["managedFields"] = entries.encode(before)


def _manager_text(key: tuple[str, str, str]) -> str:
    manager, operation, api_version = key
    return f'"{manager}" using {api_version}' if operation == UPDATE else f'"{manager}"'


def _conflict_error(conflicts: list[tuple[tuple[str, str, str], Path]]) -> ApiError:
    causes = [
        {
            "reason": "FieldManagerConflict",
            "message": f"conflict with {_manager_text(key)}",
            "field": path_text(path),
        }
        for key, path in conflicts
    ]
    if len(conflicts) == 1:
        key, path = conflicts[0]
        message = f"Apply failed with 1 conflict: conflict with {_manager_text(key)}: {path_text(path)}"
    else:
        by_manager: dict[str, list[str]] = {}
        for key, path in conflicts:
            by_manager.setdefault(_manager_text(key), []).append(path_text(path))
        parts = []
        for manager, fields in by_manager.items():
            listed = f": {fields[0]}" if len(fields) == 1 else "".join(f"\n- {field}" for field in fields)
            parts.append(f"conflicts with {manager}{listed}")
        message = f"Apply failed with {len(conflicts)} conflicts: " + "\n".join(sorted(parts))
    return ApiError(409, "Conflict", message, {"causes": causes})


def server_side_apply(
    current: dict[str, Any] | None, applied: dict[str, Any], manager: str, api_version: str, force: bool
) -> dict[str, Any]:
    """The object after `manager` applies `applied`; ApiError 409 on conflicts unless `force`."""
    before = _Entries(current)
    entries = _Entries(current)
    key = (manager, APPLY, api_version)
    sent = field_paths(applied)
    conflicts = [
        (other, path)
        for other, owned in entries.sets.items()
        if other != key
        for path in sorted(sent & owned)
        if current is not None and _get(current, path) != _get(applied, path)
    ]
    if conflicts and not force:
        raise _conflict_error(conflicts)
    for other, path in conflicts:
        entries.sets[other].discard(path)
    result = copy.deepcopy(current) if current is not None else copy.deepcopy(applied)
    for path in sent:
        _set(result, path, _get(applied, path))
    others = set().union(*(owned for other, owned in entries.sets.items() if other != key))
    for path in entries.sets.get(key, set()) - sent - others:
        _delete(result, path)
    # Fields applied with the same value as another manager's are shared, not taken.
    entries.sets[key] = sent
    result.setdefault("metadata", {})["managedFields"] = entries.encode(before)
    return result
