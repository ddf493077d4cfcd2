"""Server-side printing: the `Table` responses `kubectl get` asks for (`Accept: ...;as=Table`).

The columns follow what the real server prints for each kind, so `kubectl get pods` shows
READY/STATUS/RESTARTS the way people read them.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from fakes.kubernetes.resources import Resource

Column = tuple[str, str, Callable[[dict[str, Any]], Any]]


def age(obj: dict[str, Any]) -> str:
    created = (obj.get("metadata") or {}).get("creationTimestamp")
    if not created:
        return "<unknown>"
    seconds = int((datetime.now(UTC) - datetime.fromisoformat(created)).total_seconds())
    seconds = max(seconds, 0)
    if seconds < 120:
        return f"{seconds}s"
    if seconds < 7200:
        return f"{seconds // 60}m"
    return f"{seconds // 3600}h"


def pod_status_reason(pod: dict[str, Any]) -> str:
    """What kubectl's STATUS column shows: a waiting/terminated reason beats the phase."""
    status = pod.get("status") or {}
    if (pod.get("metadata") or {}).get("deletionTimestamp"):
        return "Terminating"
    reason = status.get("reason") or status.get("phase") or "Pending"
    for init in status.get("initContainerStatuses") or []:
        state = init.get("state") or {}
        if (state.get("terminated") or {}).get("exitCode", 0) != 0:
            return "Init:" + (state["terminated"].get("reason") or "Error")
        if state.get("waiting") and state["waiting"].get("reason") not in (None, "PodInitializing"):
            return "Init:" + state["waiting"]["reason"]
        if not state.get("terminated"):
            total = len((pod.get("spec") or {}).get("initContainers") or [])
            done = sum(
                1
                for s in status.get("initContainerStatuses") or []
                if (s.get("state") or {}).get("terminated")
            )
            return f"Init:{done}/{total}"
    for container in status.get("containerStatuses") or []:
        state = container.get("state") or {}
        if state.get("waiting") and state["waiting"].get("reason"):
            reason = state["waiting"]["reason"]
        elif state.get("terminated"):
            terminated = state["terminated"]
            reason = terminated.get("reason") or (
                f"Signal:{terminated['signal']}"
                if terminated.get("signal")
                else f"ExitCode:{terminated.get('exitCode')}"
            )
    return reason


def _pod_ready(pod: dict[str, Any]) -> str:
    statuses = (pod.get("status") or {}).get("containerStatuses") or []
    total = len((pod.get("spec") or {}).get("containers") or [])
    return f"{sum(1 for s in statuses if s.get('ready'))}/{total}"


def _pod_restarts(pod: dict[str, Any]) -> int:
    return sum(s.get("restartCount", 0) for s in (pod.get("status") or {}).get("containerStatuses") or [])


def _node_status(node: dict[str, Any]) -> str:
    conditions = (node.get("status") or {}).get("conditions") or []
    ready = next((c for c in conditions if c.get("type") == "Ready"), None)
    status = "Ready" if ready and ready.get("status") == "True" else "NotReady"
    if (node.get("spec") or {}).get("unschedulable"):
        status += ",SchedulingDisabled"
    return status


def _deployment_ready(deployment: dict[str, Any]) -> str:
    status = deployment.get("status") or {}
    return f"{status.get('readyReplicas', 0)}/{(deployment.get('spec') or {}).get('replicas', 0)}"


def _name(obj: dict[str, Any]) -> str:
    return (obj.get("metadata") or {}).get("name", "")


_COLUMNS: dict[str, list[Column]] = {
    "Pod": [
        ("Name", "string", _name),
        ("Ready", "string", _pod_ready),
        ("Status", "string", pod_status_reason),
        ("Restarts", "string", _pod_restarts),
        ("Age", "string", age),
        ("IP", "string", lambda p: (p.get("status") or {}).get("podIP", "<none>")),
        ("Node", "string", lambda p: (p.get("spec") or {}).get("nodeName", "<none>")),
    ],
    "Node": [
        ("Name", "string", _name),
        ("Status", "string", _node_status),
        ("Age", "string", age),
    ],
    "Deployment": [
        ("Name", "string", _name),
        ("Ready", "string", _deployment_ready),
        ("Up-to-date", "integer", lambda d: (d.get("status") or {}).get("updatedReplicas", 0)),
        ("Available", "integer", lambda d: (d.get("status") or {}).get("availableReplicas", 0)),
        ("Age", "string", age),
    ],
    "NodePool": [
        ("Name", "string", _name),
        ("Instance Type", "string", lambda n: (n.get("spec") or {}).get("instanceType", "")),
        ("Target Nodes", "integer", lambda n: (n.get("spec") or {}).get("targetNodes", 0)),
        ("Current Nodes", "integer", lambda n: (n.get("status") or {}).get("currentNodes", 0)),
        ("Age", "string", age),
    ],
    "Event": [
        ("Last Seen", "string", lambda e: e.get("lastTimestamp", "")),
        ("Type", "string", lambda e: e.get("type", "")),
        ("Reason", "string", lambda e: e.get("reason", "")),
        (
            "Object",
            "string",
            lambda e: (
                f"{(e.get('involvedObject') or {}).get('kind', '').lower()}/"
                f"{(e.get('involvedObject') or {}).get('name', '')}"
            ),
        ),
        ("Message", "string", lambda e: e.get("message", "")),
    ],
}
_DEFAULT: list[Column] = [("Name", "string", _name), ("Age", "string", age)]
# Columns kubectl shows only with -o wide.
_WIDE = {"IP", "Node"}


def table(resource: Resource, items: list[dict[str, Any]], resource_version: str) -> dict[str, Any]:
    columns = _COLUMNS.get(resource.kind, _DEFAULT)
    return {
        "kind": "Table",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": {"resourceVersion": resource_version},
        "columnDefinitions": [
            {
                "name": name,
                "type": kind,
                "format": "name" if name == "Name" else "",
                "description": name,
                "priority": 1 if name in _WIDE else 0,
            }
            for name, kind, _ in columns
        ],
        "rows": [{"cells": [cell(item) for _, _, cell in columns], "object": item} for item in items],
    }
