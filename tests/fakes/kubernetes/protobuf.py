"""Request bodies in the API server's protobuf encoding, for the kinds kubectl's generators send that way.

kubectl's typed clients (`kubectl create namespace|configmap|secret|serviceaccount|clusterrole|
clusterrolebinding`) POST `application/vnd.kubernetes.protobuf` and never fall back to JSON after a
415, so the fake decodes them: the 4-byte magic `k8s\\x00`, then a `runtime.Unknown` whose `raw` is
the object in the proto2 messages of `k8s.io/api` (field numbers from their generated.proto).

Only the messages those kinds use are known. A field the table does not know is refused with the
field's number, so a new kubectl that sends more fails loudly instead of losing data. Replies stay
JSON, which kubectl accepts as well (its Accept header lists both).
"""

from __future__ import annotations

import base64
import datetime
from typing import Any

PROTOBUF = "application/vnd.kubernetes.protobuf"
MAGIC = b"k8s\x00"

# A field: (JSON name, type). Types: "string", "bytes" (base64 in JSON), "int", "bool", "time",
# ("map", value type), ("list", element type) or a message name from _MESSAGES.
FieldType = Any
_MESSAGES: dict[str, dict[int, tuple[str, FieldType]]] = {
    "Unknown": {
        1: ("typeMeta", "TypeMeta"),
        2: ("raw", "raw"),
        3: ("contentEncoding", "string"),
        4: ("contentType", "string"),
    },
    "TypeMeta": {1: ("apiVersion", "string"), 2: ("kind", "string")},
    "ObjectMeta": {
        1: ("name", "string"),
        2: ("generateName", "string"),
        3: ("namespace", "string"),
        4: ("selfLink", "string"),
        5: ("uid", "string"),
        6: ("resourceVersion", "string"),
        7: ("generation", "int"),
        8: ("creationTimestamp", "time"),
        9: ("deletionTimestamp", "time"),
        10: ("deletionGracePeriodSeconds", "int"),
        11: ("labels", ("map", "string")),
        12: ("annotations", ("map", "string")),
        13: ("ownerReferences", ("list", "OwnerReference")),
        14: ("finalizers", ("list", "string")),
    },
    "OwnerReference": {
        1: ("kind", "string"),
        3: ("name", "string"),
        4: ("uid", "string"),
        5: ("apiVersion", "string"),
        6: ("controller", "bool"),
        7: ("blockOwnerDeletion", "bool"),
    },
    "Namespace": {
        1: ("metadata", "ObjectMeta"),
        2: ("spec", "NamespaceSpec"),
        3: ("status", "NamespaceStatus"),
    },
    "NamespaceSpec": {1: ("finalizers", ("list", "string"))},
    "NamespaceStatus": {1: ("phase", "string")},
    "ConfigMap": {
        1: ("metadata", "ObjectMeta"),
        2: ("data", ("map", "string")),
        3: ("binaryData", ("map", "bytes")),
        4: ("immutable", "bool"),
    },
    "Secret": {
        1: ("metadata", "ObjectMeta"),
        2: ("data", ("map", "bytes")),
        3: ("type", "string"),
        4: ("stringData", ("map", "string")),
        5: ("immutable", "bool"),
    },
    "ServiceAccount": {
        1: ("metadata", "ObjectMeta"),
        2: ("secrets", ("list", "ObjectReference")),
        3: ("imagePullSecrets", ("list", "LocalObjectReference")),
        4: ("automountServiceAccountToken", "bool"),
    },
    "ObjectReference": {
        1: ("kind", "string"),
        2: ("namespace", "string"),
        3: ("name", "string"),
        4: ("uid", "string"),
        5: ("apiVersion", "string"),
        6: ("resourceVersion", "string"),
        7: ("fieldPath", "string"),
    },
    "LocalObjectReference": {1: ("name", "string")},
    "ClusterRole": {1: ("metadata", "ObjectMeta"), 2: ("rules", ("list", "PolicyRule"))},
    "PolicyRule": {
        1: ("verbs", ("list", "string")),
        2: ("apiGroups", ("list", "string")),
        3: ("resources", ("list", "string")),
        4: ("resourceNames", ("list", "string")),
        5: ("nonResourceURLs", ("list", "string")),
    },
    "ClusterRoleBinding": {
        1: ("metadata", "ObjectMeta"),
        2: ("subjects", ("list", "Subject")),
        3: ("roleRef", "RoleRef"),
    },
    "Subject": {
        1: ("kind", "string"),
        2: ("apiGroup", "string"),
        3: ("name", "string"),
        4: ("namespace", "string"),
    },
    "RoleRef": {1: ("apiGroup", "string"), 2: ("kind", "string"), 3: ("name", "string")},
    "Time": {1: ("seconds", "int"), 2: ("nanos", "int")},
}
DECODABLE_KINDS = ("Namespace", "ConfigMap", "Secret", "ServiceAccount", "ClusterRole", "ClusterRoleBinding")


class ProtobufError(ValueError):
    """The body is not protobuf the fake can decode; the message says what it met."""


def _varint(data: bytes, pos: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        if pos >= len(data):
            raise ProtobufError("truncated varint")
        byte = data[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return result, pos
        shift += 7


def _fields(data: bytes) -> list[tuple[int, int | bytes]]:
    """(field number, value) in wire order: ints for varints and fixed widths, bytes for the rest."""
    fields: list[tuple[int, int | bytes]] = []
    pos = 0
    while pos < len(data):
        key, pos = _varint(data, pos)
        number, wire = key >> 3, key & 7
        value: int | bytes
        if wire == 0:
            value, pos = _varint(data, pos)
        elif wire == 2:
            length, pos = _varint(data, pos)
            value, pos = data[pos : pos + length], pos + length
        elif wire in (1, 5):
            width = 8 if wire == 1 else 4
            value, pos = int.from_bytes(data[pos : pos + width], "little"), pos + width
        else:
            raise ProtobufError(f"unsupported wire type {wire} for field {number}")
        fields.append((number, value))
    return fields


def _scalar(kind: str, value: int | bytes, where: str) -> Any:
    if kind == "string":
        if not isinstance(value, bytes):
            raise ProtobufError(f"{where}: expected a string")
        return value.decode()
    if kind == "bytes":
        if not isinstance(value, bytes):
            raise ProtobufError(f"{where}: expected bytes")
        return base64.b64encode(value).decode()
    if kind == "raw":
        return value
    if kind == "int":
        if not isinstance(value, int):
            raise ProtobufError(f"{where}: expected an integer")
        return value - (1 << 64) if value >= 1 << 63 else value
    if kind == "bool":
        return bool(value)
    if not isinstance(value, bytes):
        raise ProtobufError(f"{where}: expected a message")
    if kind == "time":
        seconds = decode_message("Time", value).get("seconds", 0)
        stamp = datetime.datetime.fromtimestamp(seconds, datetime.UTC)
        return stamp.strftime("%Y-%m-%dT%H:%M:%SZ") if seconds else None
    return decode_message(kind, value)


def decode_message(message: str, data: bytes) -> dict[str, Any]:
    """One message as the dict its JSON form would be (unset and empty values left out)."""
    schema = _MESSAGES[message]
    out: dict[str, Any] = {}
    for number, value in _fields(data):
        if number not in schema:
            raise ProtobufError(f"field {number} of {message} is not known to the fake; send JSON instead")
        name, kind = schema[number]
        where = f"{message}.{name}"
        if isinstance(kind, tuple) and kind[0] == "map":
            if not isinstance(value, bytes):
                raise ProtobufError(f"{where}: expected a map entry")
            entry = dict(_fields(value))
            key = entry.get(1, b"")
            out.setdefault(name, {})[_scalar("string", key, where)] = _scalar(
                kind[1], entry.get(2, b""), where
            )
        elif isinstance(kind, tuple):
            out.setdefault(name, []).append(_scalar(kind[1], value, where))
        else:
            out[name] = _scalar(kind, value, where)
    # gogo-protobuf writes every non-pointer string and embedded message, set or not; JSON omits them.
    return {k: v for k, v in out.items() if v not in ("", None, {})}


def decode_object(body: bytes) -> dict[str, Any]:
    """The object in a protobuf request body, as JSON would have carried it."""
    if not body.startswith(MAGIC):
        raise ProtobufError("the body does not start with the protobuf magic number")
    envelope = decode_message("Unknown", body[len(MAGIC) :])
    type_meta = envelope.get("typeMeta") or {}
    kind = type_meta.get("kind", "")
    if kind not in DECODABLE_KINDS:
        raise ProtobufError(
            f"the fake decodes protobuf only for {', '.join(DECODABLE_KINDS)}, not {kind or 'an untyped body'}; "
            "send JSON instead"
        )
    obj = decode_message(kind, envelope.get("raw") or b"")
    return {"apiVersion": type_meta.get("apiVersion", ""), "kind": kind, **obj}
