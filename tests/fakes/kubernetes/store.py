"""The fake's object store: what etcd plus the API server's registry do for the served kinds.

Every write bumps one cluster-wide resourceVersion and appends a watch event to a bounded history,
so a watch can resume from any version still in the history and gets 410 Gone for older ones
(`compact()` drops the history, as etcd compaction does). Deletes honour finalizers,
`deletionTimestamp` for Pods on a node (their kubelet finishes the deletion after stopping the
containers) and ownerReference garbage collection with the three propagation policies.
"""

from __future__ import annotations

import copy
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from fakes.kubernetes.resources import (
    RESOURCES,
    Resource,
    apply_defaults,
    default_spec,
    find_resource,
    validate,
    validate_pod_update,
)
from fakes.kubernetes.selectors import Predicate

HISTORY_LIMIT = 10_000
FOREGROUND = "Foreground"
BACKGROUND = "Background"
ORPHAN = "Orphan"

Key = tuple[str, str, str, str]  # (group, plural, namespace, name)


class ApiError(Exception):
    """An error the HTTP layer returns as a `Status` object with this code and reason."""

    def __init__(
        self,
        code: int,
        reason: str,
        message: str,
        details: dict[str, Any] | None = None,
    ) -> None:
        super().__init__(message)
        self.code = code
        self.reason = reason
        self.message = message
        self.details = details or {}

    def status(self) -> dict[str, Any]:
        body: dict[str, Any] = {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "reason": self.reason,
            "code": self.code,
        }
        if self.details:
            body["details"] = self.details
        return body


def not_found(resource: Resource, name: str) -> ApiError:
    qualified = f"{resource.plural}.{resource.group}" if resource.group else resource.plural
    return ApiError(
        404,
        "NotFound",
        f'{qualified} "{name}" not found',
        {"name": name, "group": resource.group, "kind": resource.plural},
    )


def now_rfc3339() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass
class WatchEvent:
    resource_version: int
    group: str
    plural: str
    namespace: str
    type: str  # ADDED, MODIFIED, DELETED
    obj: dict[str, Any]


class Store:
    def __init__(self) -> None:
        self._lock = threading.RLock()
        self._changed = threading.Condition(self._lock)
        self._objects: dict[Key, dict[str, Any]] = {}
        self._version = 1
        self._history: list[WatchEvent] = []
        # Versions at or below this are gone from the history: watching from them is 410 Gone.
        self._compacted = 1
        self._listeners: list[Callable[[WatchEvent], None]] = []

    # -- reads ----------------------------------------------------------------------------------

    @property
    def resource_version(self) -> int:
        with self._lock:
            return self._version

    def get(self, resource: Resource, namespace: str, name: str) -> dict[str, Any]:
        with self._lock:
            obj = self._objects.get(self._key(resource, namespace, name))
            if obj is None:
                raise not_found(resource, name)
            return copy.deepcopy(obj)

    def find(self, resource: Resource, namespace: str, name: str) -> dict[str, Any] | None:
        with self._lock:
            obj = self._objects.get(self._key(resource, namespace, name))
            return copy.deepcopy(obj) if obj is not None else None

    def list(
        self, resource: Resource, namespace: str = "", predicate: Predicate | None = None
    ) -> tuple[list[dict[str, Any]], int]:
        with self._lock:
            items = [
                copy.deepcopy(obj)
                for (group, plural, ns, _), obj in sorted(self._objects.items())
                if (group, plural) == resource.key
                and (not namespace or ns == namespace)
                and (predicate is None or predicate(obj))
            ]
            return items, self._version

    # -- writes ---------------------------------------------------------------------------------

    def create(
        self, resource: Resource, namespace: str, obj: dict[str, Any], dry_run: bool = False
    ) -> dict[str, Any]:
        obj = copy.deepcopy(obj)
        obj["apiVersion"] = resource.group_version
        obj["kind"] = resource.kind
        metadata = obj.setdefault("metadata", {})
        if resource.namespaced:
            if metadata.get("namespace") and metadata["namespace"] != namespace:
                raise ApiError(
                    400,
                    "BadRequest",
                    "the namespace of the provided object does not match the namespace sent on the request",
                )
            metadata["namespace"] = namespace
        else:
            metadata.pop("namespace", None)
        if not metadata.get("name") and metadata.get("generateName"):
            metadata["name"] = metadata["generateName"] + uuid.uuid4().hex[:5]
        self._check_valid(resource, obj)
        apply_defaults(resource, obj)
        with self._lock:
            if resource.namespaced:
                self._check_namespace(namespace)
            key = self._key(resource, namespace, metadata["name"])
            if key in self._objects:
                raise ApiError(
                    409,
                    "AlreadyExists",
                    f'{self._qualified(resource)} "{metadata["name"]}" already exists',
                    {"name": metadata["name"], "group": resource.group, "kind": resource.plural},
                )
            metadata["uid"] = str(uuid.uuid4())
            metadata["creationTimestamp"] = now_rfc3339()
            metadata["generation"] = 1
            if dry_run:
                metadata["resourceVersion"] = str(self._version)
                return obj
            self._write(resource, key, obj, "ADDED")
            return copy.deepcopy(obj)

    def update(
        self,
        resource: Resource,
        namespace: str,
        name: str,
        obj: dict[str, Any],
        subresource: str = "",
        dry_run: bool = False,
    ) -> dict[str, Any]:
        """Replace an object; a resourceVersion in `obj` must be the current one (409 otherwise)."""
        obj = copy.deepcopy(obj)
        with self._lock:
            key = self._key(resource, namespace, name)
            current = self._objects.get(key)
            if current is None:
                raise not_found(resource, name)
            given = (obj.get("metadata") or {}).get("resourceVersion")
            if given and given != current["metadata"]["resourceVersion"]:
                raise ApiError(
                    409,
                    "Conflict",
                    f'Operation cannot be fulfilled on {self._qualified(resource)} "{name}": the object has been '
                    "modified; please apply your changes to the latest version and try again",
                    {"name": name, "group": resource.group, "kind": resource.plural},
                )
            if (obj.get("metadata") or {}).get("name", name) != name:
                raise ApiError(400, "BadRequest", "the name of the object does not match the name on the URL")
            merged = self._merge_update(resource, current, obj, subresource)
            self._check_valid(resource, merged)
            if resource.kind == "Pod" and subresource == "":
                errors = validate_pod_update(current, merged)
                if errors:
                    raise invalid(resource, name, errors)
            if merged == current:
                return copy.deepcopy(current)
            if dry_run:
                return merged
            self._write(resource, key, merged, "MODIFIED")
            if merged["metadata"].get("deletionTimestamp") and not merged["metadata"].get("finalizers"):
                self._finish_delete(resource, key)
            return copy.deepcopy(merged)

    def mutate(
        self,
        resource: Resource,
        namespace: str,
        name: str,
        change: Callable[[dict[str, Any]], None],
        subresource: str = "internal",
    ) -> dict[str, Any] | None:
        """Apply `change` to the current object atomically (controllers and the kubelet use this).

        Returns the new object, or None if it no longer exists.
        """
        with self._lock:
            current = self.find(resource, namespace, name)
            if current is None:
                return None
            change(current)
            return self.update(resource, namespace, name, current, subresource=subresource)

    def delete(
        self,
        resource: Resource,
        namespace: str,
        name: str,
        propagation: str = BACKGROUND,
        grace_seconds: int | None = None,
        preconditions: dict[str, str] | None = None,
        dry_run: bool = False,
    ) -> dict[str, Any]:
        with self._lock:
            key = self._key(resource, namespace, name)
            current = self._objects.get(key)
            if current is None:
                raise not_found(resource, name)
            expected_uid = (preconditions or {}).get("uid")
            if expected_uid and expected_uid != current["metadata"]["uid"]:
                raise ApiError(
                    409,
                    "Conflict",
                    f'Operation cannot be fulfilled on {self._qualified(resource)} "{name}": Precondition failed: '
                    f"UID in precondition: {expected_uid}, UID in object meta: {current['metadata']['uid']}",
                )
            if dry_run:
                return copy.deepcopy(current)
            metadata = current["metadata"]
            graceful = self._needs_graceful_delete(resource, current, grace_seconds)
            if metadata.get("finalizers") or graceful or propagation == FOREGROUND:
                if propagation == FOREGROUND:
                    self._delete_dependents(metadata["uid"], FOREGROUND)
                if not metadata.get("deletionTimestamp"):
                    updated = copy.deepcopy(current)
                    updated["metadata"]["deletionTimestamp"] = now_rfc3339()
                    if graceful:
                        grace = grace_seconds
                        if grace is None:
                            grace = int((current.get("spec") or {}).get("terminationGracePeriodSeconds", 30))
                        updated["metadata"]["deletionGracePeriodSeconds"] = grace
                    self._write(resource, key, updated, "MODIFIED")
                    current = updated
                if not current["metadata"].get("finalizers") and not graceful:
                    self._finish_delete(resource, key, propagation)
                return copy.deepcopy(current)
            deleted = self._finish_delete(resource, key, propagation)
            return deleted

    def finish_pod_deletion(self, resource: Resource, namespace: str, name: str, uid: str) -> None:
        """The kubelet stopped every container of a Pod being deleted: remove the object."""
        with self._lock:
            key = self._key(resource, namespace, name)
            current = self._objects.get(key)
            if current is not None and current["metadata"]["uid"] == uid:
                self._finish_delete(resource, key)

    def compact(self) -> None:
        """Forget the watch history, as etcd compaction does: older versions now answer 410 Gone."""
        with self._lock:
            self._history.clear()
            self._compacted = self._version

    # -- watch ----------------------------------------------------------------------------------

    def add_listener(self, listener: Callable[[WatchEvent], None]) -> None:
        """Called (under the store's lock, so keep it short) for every change; controllers wake on it."""
        with self._lock:
            self._listeners.append(listener)

    def events_after(self, version: int) -> list[WatchEvent]:
        """Events with a resourceVersion above `version`; ApiError 410 if that history is gone."""
        with self._lock:
            if version < self._compacted:
                raise ApiError(410, "Expired", f"too old resource version: {version} ({self._compacted})")
            return [event for event in self._history if event.resource_version > version]

    def wait_for_change(self, version: int, timeout: float) -> None:
        with self._changed:
            if self._version <= version:
                self._changed.wait(timeout)

    def iter_changes(self, version: int, deadline: float) -> Iterator[WatchEvent | None]:
        """Yield events after `version` as they happen; None on idle periods (time for a bookmark)."""
        cursor = version
        while time.monotonic() < deadline:
            events = self.events_after(cursor)
            if not events:
                self.wait_for_change(cursor, min(1.0, max(0.0, deadline - time.monotonic())))
                events = self.events_after(cursor)
                if not events:
                    yield None
                    continue
            for event in events:
                cursor = event.resource_version
                yield event

    # -- internals ------------------------------------------------------------------------------

    @staticmethod
    def _key(resource: Resource, namespace: str, name: str) -> Key:
        return (resource.group, resource.plural, namespace if resource.namespaced else "", name)

    @staticmethod
    def _qualified(resource: Resource) -> str:
        return f"{resource.plural}.{resource.group}" if resource.group else resource.plural

    def _check_valid(self, resource: Resource, obj: dict[str, Any]) -> None:
        errors = validate(resource, obj)
        if errors:
            raise invalid(resource, (obj.get("metadata") or {}).get("name", ""), errors)

    def _check_namespace(self, namespace: str) -> None:
        namespaces = find_resource("", "v1", "namespaces")
        assert namespaces is not None
        found = self._objects.get(self._key(namespaces, "", namespace))
        if found is None:
            raise ApiError(
                404,
                "NotFound",
                f'namespaces "{namespace}" not found',
                {"name": namespace, "kind": "namespaces"},
            )
        if found["metadata"].get("deletionTimestamp"):
            raise ApiError(
                403,
                "Forbidden",
                f"unable to create new content in namespace {namespace} because it is being terminated",
            )

    def _merge_update(
        self, resource: Resource, current: dict[str, Any], obj: dict[str, Any], subresource: str
    ) -> dict[str, Any]:
        """What a write may change.

        `status` sets only the status; a plain update leaves the status as it was when the kind has
        a status subresource; `internal` (the fake's own controllers) replaces everything but the
        system metadata.
        """
        if subresource == "status":
            merged = copy.deepcopy(current)
            merged["status"] = obj.get("status", {})
            return merged
        merged = copy.deepcopy(obj)
        merged["apiVersion"] = resource.group_version
        merged["kind"] = resource.kind
        metadata = merged.setdefault("metadata", {})
        for system_field in ("uid", "creationTimestamp", "deletionTimestamp", "deletionGracePeriodSeconds"):
            if system_field in current["metadata"]:
                metadata[system_field] = current["metadata"][system_field]
            else:
                metadata.pop(system_field, None)
        if resource.namespaced:
            metadata["namespace"] = current["metadata"]["namespace"]
        metadata["name"] = current["metadata"]["name"]
        metadata["generation"] = current["metadata"].get("generation", 1)
        if subresource != "internal" and "status" in resource.subresources:
            if "status" in current:
                merged["status"] = current["status"]
            else:
                merged.pop("status", None)
        if subresource == "":
            default_spec(resource, merged)
        if "spec" in current and current.get("spec") != merged.get("spec"):
            metadata["generation"] += 1
        return merged

    def _write(self, resource: Resource, key: Key, obj: dict[str, Any], event_type: str) -> None:
        self._version += 1
        obj["metadata"]["resourceVersion"] = str(self._version)
        if event_type == "DELETED":
            self._objects.pop(key, None)
        else:
            self._objects[key] = obj
        event = WatchEvent(
            self._version, resource.group, resource.plural, key[2], event_type, copy.deepcopy(obj)
        )
        self._history.append(event)
        if len(self._history) > HISTORY_LIMIT:
            dropped = self._history[: len(self._history) - HISTORY_LIMIT]
            self._history = self._history[len(dropped) :]
            self._compacted = dropped[-1].resource_version
        for listener in self._listeners:
            listener(event)
        self._changed.notify_all()

    def _needs_graceful_delete(
        self, resource: Resource, obj: dict[str, Any], grace_seconds: int | None
    ) -> bool:
        """A Pod on a node is stopped by its kubelet before it goes; 0 means force-delete."""
        if resource.kind != "Pod" or grace_seconds == 0:
            return False
        return bool((obj.get("spec") or {}).get("nodeName")) and (obj.get("status") or {}).get(
            "phase"
        ) not in (
            "Succeeded",
            "Failed",
        )

    def _finish_delete(self, resource: Resource, key: Key, propagation: str = BACKGROUND) -> dict[str, Any]:
        obj = self._objects[key]
        self._write(resource, key, copy.deepcopy(obj), "DELETED")
        uid = obj["metadata"]["uid"]
        if resource.kind == "Namespace":
            self._delete_namespace_contents(key[3])
        if propagation == ORPHAN:
            self._orphan_dependents(uid)
        else:
            self._delete_dependents(uid, propagation)
        return copy.deepcopy(obj)

    def _dependents(self, owner_uid: str) -> list[tuple[Resource, Key, dict[str, Any]]]:
        found = []
        for key, obj in list(self._objects.items()):
            owners = obj["metadata"].get("ownerReferences") or []
            if any(ref.get("uid") == owner_uid for ref in owners):
                resource = _resource_of(key)
                if resource is not None:
                    found.append((resource, key, obj))
        return found

    def _delete_dependents(self, owner_uid: str, propagation: str) -> None:
        for resource, key, obj in self._dependents(owner_uid):
            remaining = [ref for ref in obj["metadata"]["ownerReferences"] if ref.get("uid") != owner_uid]
            if remaining and any(self._uid_exists(ref.get("uid", "")) for ref in remaining):
                # Still owned by something alive: only this owner's reference goes.
                updated = copy.deepcopy(obj)
                updated["metadata"]["ownerReferences"] = remaining
                self._write(resource, key, updated, "MODIFIED")
                continue
            if key in self._objects:
                self.delete(resource, key[2], key[3], propagation)

    def _orphan_dependents(self, owner_uid: str) -> None:
        for resource, key, obj in self._dependents(owner_uid):
            updated = copy.deepcopy(obj)
            updated["metadata"]["ownerReferences"] = [
                ref for ref in obj["metadata"]["ownerReferences"] if ref.get("uid") != owner_uid
            ]
            self._write(resource, key, updated, "MODIFIED")

    def _uid_exists(self, uid: str) -> bool:
        return any(obj["metadata"]["uid"] == uid for obj in self._objects.values())

    def _delete_namespace_contents(self, namespace: str) -> None:
        for key in [key for key in self._objects if key[2] == namespace]:
            resource = _resource_of(key)
            if resource is not None and key in self._objects:
                self.delete(resource, namespace, key[3])


def _resource_of(key: Key) -> Resource | None:
    return next((r for r in RESOURCES if r.key == (key[0], key[1])), None)


def invalid(resource: Resource, name: str, errors: list[Any]) -> ApiError:
    causes = [{"reason": e.reason, "message": e.message.split(": ", 1)[1], "field": e.field} for e in errors]
    summary = ", ".join(e.message for e in errors)
    if len(errors) > 1:
        summary = "[" + summary + "]"
    return ApiError(
        422,
        "Invalid",
        f'{resource.kind}.{resource.group or "core"} "{name}" is invalid: {summary}'
        if resource.group
        else f'{resource.kind} "{name}" is invalid: {summary}',
        {"name": name, "group": resource.group, "kind": resource.kind, "causes": causes},
    )
