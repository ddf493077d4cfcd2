"""Long-running operations of both APIs: one record, finished lazily once its delay has passed.

Nothing runs in the background: every request and every inspection first calls
`Operations.advance()`, which finishes, in order, each operation whose time has come (its `finish`
callback changes the world and says how the operation ended). A `wait` request sleeps on the same
condition until its operation is done, so gcloud sees exactly the delays the test configured.
"""

from __future__ import annotations

import itertools
import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

# How long a wait call blocks at most before answering with a still-running operation, as Compute's.
COMPUTE_WAIT_LIMIT_S = 120.0


@dataclass(frozen=True)
class OperationError:
    """How an operation failed: the google.rpc code (TPU) and Compute's error code, one message."""

    rpc_code: int
    compute_code: str
    message: str


# What an operation's `finish` returns: the TPU response resource, or the error it ended with.
Outcome = dict[str, Any] | OperationError | None


@dataclass
class Operation:
    api: str  # "tpu" or "compute"
    name: str  # TPU: the full resource path; Compute: the short name
    id: str
    verb: str
    target: str  # resource path of what the operation acts on, from "projects/"
    target_id: str
    zone: str | None  # None for Compute's global operations
    created: datetime
    due: float  # time.monotonic() at which it finishes
    finish: Callable[[], Outcome]
    done: bool = False
    ended: datetime | None = None
    response: dict[str, Any] | None = None
    error: OperationError | None = None


def timestamp(moment: datetime) -> str:
    return moment.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def numeric_id() -> str:
    """A 19-digit id like the ones Google gives resources and operations."""
    return str(random.randrange(10**18, 10**19))


class Operations:
    def __init__(self, lock: threading.Condition) -> None:
        self._lock = lock
        self._by_name: dict[str, Operation] = {}
        self._sequence = itertools.count(1)

    def start(
        self,
        api: str,
        verb: str,
        target: str,
        target_id: str,
        zone: str | None,
        delay: float,
        finish: Callable[[], Outcome],
        project: str,
    ) -> Operation:
        """Begin an operation (caller holds the lock); it finishes `delay` seconds from now."""
        now = datetime.now(UTC)
        short = f"operation-{int(now.timestamp() * 1000)}-{next(self._sequence):06d}-{random.randrange(16**8):08x}"
        if api == "tpu":
            name = f"projects/{project}/locations/{zone}/operations/{short}"
        else:
            name = short
        operation = Operation(
            api=api,
            name=name,
            id=numeric_id(),
            verb=verb,
            target=target,
            target_id=target_id,
            zone=zone,
            created=now,
            due=time.monotonic() + delay,
            finish=finish,
        )
        self._by_name[self._key(api, zone, name)] = operation
        return operation

    def find(self, api: str, zone: str | None, name: str) -> Operation | None:
        return self._by_name.get(self._key(api, zone, name))

    def advance(self) -> None:
        """Finish every operation that is due, oldest first (caller holds the lock)."""
        now = time.monotonic()
        due = sorted(
            (op for op in self._by_name.values() if not op.done and op.due <= now), key=lambda op: op.due
        )
        for operation in due:
            outcome = operation.finish()
            if isinstance(outcome, OperationError):
                operation.error = outcome
            else:
                operation.response = outcome
            operation.done = True
            operation.ended = datetime.now(UTC)
        if due:
            self._lock.notify_all()

    def wait(self, operation: Operation, limit: float) -> None:
        """Block until `operation` is done or `limit` seconds passed (caller holds the lock)."""
        deadline = time.monotonic() + limit
        while True:
            self.advance()
            remaining = min(deadline, operation.due) - time.monotonic()
            if operation.done or time.monotonic() >= deadline:
                return
            self._lock.wait(max(remaining, 0.01))

    @staticmethod
    def _key(api: str, zone: str | None, name: str) -> str:
        return f"{api}/{zone or 'global'}/{name}"


def tpu_operation_json(operation: Operation) -> dict[str, Any]:
    body: dict[str, Any] = {
        "name": operation.name,
        "metadata": {
            "@type": "type.googleapis.com/google.cloud.tpu.v2.OperationMetadata",
            "createTime": timestamp(operation.created),
            "target": operation.target,
            "verb": operation.verb,
            "cancelRequested": False,
            "apiVersion": "v2",
        },
        "done": operation.done,
    }
    if operation.done:
        body["metadata"]["endTime"] = timestamp(operation.ended or operation.created)
        if operation.error is not None:
            body["error"] = {"code": operation.error.rpc_code, "message": operation.error.message}
        else:
            body["response"] = operation.response or {"@type": "type.googleapis.com/google.protobuf.Empty"}
    return body


def compute_operation_json(operation: Operation, base_url: str, project: str) -> dict[str, Any]:
    if operation.zone:
        scope = f"projects/{project}/zones/{operation.zone}"
    else:
        scope = f"projects/{project}/global"
    body: dict[str, Any] = {
        "kind": "compute#operation",
        "id": operation.id,
        "name": operation.name,
        "operationType": operation.verb,
        "targetLink": f"{base_url}{operation.target}",
        "targetId": operation.target_id,
        "status": "DONE" if operation.done else "RUNNING",
        "user": "iris-test@example.com",
        "progress": 100 if operation.done else 0,
        "insertTime": timestamp(operation.created),
        "startTime": timestamp(operation.created),
        "selfLink": f"{base_url}{scope}/operations/{operation.name}",
    }
    if operation.zone:
        body["zone"] = f"{base_url}projects/{project}/zones/{operation.zone}"
    if operation.done:
        body["endTime"] = timestamp(operation.ended or operation.created)
        if operation.error is not None:
            body["error"] = {
                "errors": [{"code": operation.error.compute_code, "message": operation.error.message}]
            }
            body["httpErrorStatusCode"] = (
                503 if operation.error.compute_code == "ZONE_RESOURCE_POOL_EXHAUSTED" else 400
            )
            body["httpErrorMessage"] = (
                "SERVICE UNAVAILABLE" if body["httpErrorStatusCode"] == 503 else "BAD REQUEST"
            )
    return body
