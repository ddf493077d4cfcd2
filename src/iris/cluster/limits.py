"""Input limits at the API edge, as pure functions: what a request may hold, and how errors quote it.

Every size and range a request is checked against is a field of `InputLimits`, with its default
here and nowhere else. A request over a limit is refused before any other check runs, so no later
error can echo an oversized value, and no work proportional to an absurd value (one row per
replica, say) is ever started. Errors quote offending values through `quote_prefix` only.
"""

from __future__ import annotations

import base64
import json
import re
from dataclasses import dataclass, fields

from iris.bundle_format import (
    DEFAULT_MAX_BUNDLE_BYTES,
    DEFAULT_MAX_BUNDLE_ENTRIES,
    DEFAULT_MAX_UNPACKED_BYTES,
)
from iris.rpc import cluster_pb2 as pb
from iris.rpc import config_pb2

# An error quotes at most this many characters of a value the user sent.
QUOTE_PREFIX_CHARS = 40

# Worker ids name a host and port, a slice member or a configured name: no spaces, no control bytes.
_WORKER_ID_CHARS = re.compile(r"[A-Za-z0-9._:@-]+")
MAX_WORKER_ID_CHARS = 253

# A LaunchJob request id is a client-chosen token, a UUID in the Python client.
MAX_REQUEST_ID_CHARS = 128

# A ListJobs page token is the offset of the next page, a decimal number SQLite can hold, or a
# position token: "k" and, base64url-encoded, JSON [order, offset, sort key of the page's last row].
MAX_PAGE_TOKEN_DIGITS = 18
MAX_PAGE_TOKEN_CHARS = 2048
_POSITION_PREFIX = "k"


def quote_prefix(value: str | bytes, limit: int = QUOTE_PREFIX_CHARS) -> str:
    """repr() of the value, cut to its first `limit` characters with the full length noted."""
    if len(value) <= limit:
        return repr(value)
    unit = "bytes" if isinstance(value, bytes) else "chars"
    return f"{value[:limit]!r}... ({len(value)} {unit})"


@dataclass(frozen=True)
class InputLimits:
    """What one request may hold. Raise a limit for a cluster that needs more: the cluster config's
    `limits:` section names these fields (docs/limits.md)."""

    max_replicas: int = 10_000
    max_name_chars: int = 1024
    max_argv_items: int = 4096
    max_string_chars: int = 128 * 1024  # one argv item, env value, setup command or pip package
    max_strings_total_chars: int = 4 * 1024 * 1024  # argv, env, setup commands and pip packages together
    max_env_vars: int = 4096
    max_list_items: int = 1024  # ports, constraints, constraint values, pip packages, setup commands
    max_key_chars: int = 256  # env var names, port names, constraint keys, attribute names
    max_callable_bytes: int = 64 * 1024 * 1024
    max_cpu_millicores: int = 10_000_000  # ten thousand cores
    max_memory_bytes: int = 1 << 50  # one PiB
    max_disk_bytes: int = 1 << 50
    max_retries: int = 100_000
    max_timeout_ms: int = 365 * 24 * 3600 * 1000  # a year
    min_priority: int = -1_000_000
    max_priority: int = 1_000_000
    max_bundle_bytes: int = DEFAULT_MAX_BUNDLE_BYTES  # a bundle as uploaded (compressed)
    max_bundle_entries: int = DEFAULT_MAX_BUNDLE_ENTRIES
    max_bundle_unpacked_bytes: int = DEFAULT_MAX_UNPACKED_BYTES
    max_id_chars: int = 4096  # a job, task, endpoint, slice or worker id named in a request
    max_filter_chars: int = 1024  # ListJobs and ListEndpoints name filters


DEFAULT_INPUT_LIMITS = InputLimits()


def _check_range(what: str, value: int, low: int, high: int) -> None:
    if not low <= value <= high:
        raise ValueError(f"{what} must be between {low} and {high}, got {value}")


def _check_chars(what: str, value: str, limit: int) -> None:
    if len(value) > limit:
        raise ValueError(f"{what} {quote_prefix(value)} is longer than the limit of {limit} characters")


def _check_count(what: str, count: int, limit: int) -> None:
    if count > limit:
        raise ValueError(f"{what} has {count} entries, over the limit of {limit}")


def check_launch_limits(request: pb.LaunchJobRequest, limits: InputLimits = DEFAULT_INPUT_LIMITS) -> None:
    """Raise ValueError naming the first field over its limit."""
    _check_chars("job name", request.name, limits.max_name_chars)
    _check_chars("parent_job_id", request.parent_job_id, limits.max_name_chars)
    _check_chars("bundle_sha256", request.bundle_sha256, 64)
    _check_chars("bundle_uri", request.bundle_uri, limits.max_name_chars)
    _check_chars("request_id", request.request_id, MAX_REQUEST_ID_CHARS)
    _check_range("replicas", request.replicas, 0, limits.max_replicas)
    _check_range("max_retries_failure", request.max_retries_failure, 0, limits.max_retries)
    _check_range("max_retries_preemption", request.max_retries_preemption, 0, limits.max_retries)
    _check_range("max_task_failures", request.max_task_failures, 0, limits.max_retries)
    _check_range("priority", request.priority, limits.min_priority, limits.max_priority)
    _check_range("timeout (ms)", request.timeout.milliseconds, 0, limits.max_timeout_ms)
    _check_range("scheduling_timeout (ms)", request.scheduling_timeout.milliseconds, 0, limits.max_timeout_ms)
    resources = request.resources
    _check_range("cpu_millicores", resources.cpu_millicores, 0, limits.max_cpu_millicores)
    _check_range("memory_bytes", resources.memory_bytes, 0, limits.max_memory_bytes)
    _check_range("disk_bytes", resources.disk_bytes, 0, limits.max_disk_bytes)
    _check_chars("coscheduling group_by", request.coscheduling.group_by, limits.max_key_chars)

    entry = request.entrypoint
    strings: list[str] = []
    if entry.WhichOneof("kind") == "command":
        _check_count("command argv", len(entry.command.argv), limits.max_argv_items)
        strings.extend(entry.command.argv)
    elif entry.WhichOneof("kind") == "callable" and len(entry.callable.pickled) > limits.max_callable_bytes:
        raise ValueError(
            f"the pickled callable is {len(entry.callable.pickled)} bytes, over the limit of "
            f"{limits.max_callable_bytes}; pass large data through storage instead"
        )
    env = request.environment
    _check_count("environment env_vars", len(env.env_vars), limits.max_env_vars)
    for name, value in env.env_vars.items():
        _check_chars("environment variable name", name, limits.max_key_chars)
        strings.append(value)
    _check_count("pip_packages", len(env.pip_packages), limits.max_list_items)
    _check_count("setup_commands", len(env.setup_commands), limits.max_list_items)
    strings.extend(env.pip_packages)
    strings.extend(env.setup_commands)
    for text in strings:
        _check_chars("argument", text, limits.max_string_chars)
    total = sum(len(text) for text in strings)
    if total > limits.max_strings_total_chars:
        raise ValueError(
            f"argv, environment, pip packages and setup commands hold {total} characters together, over "
            f"the limit of {limits.max_strings_total_chars}; pass large inputs through storage instead"
        )

    _check_count("ports", len(request.ports), limits.max_list_items)
    for port in request.ports:
        _check_chars("port name", port, limits.max_key_chars)
    _check_count("constraints", len(request.constraints), limits.max_list_items)
    for constraint in request.constraints:
        _check_chars("constraint key", constraint.key, limits.max_key_chars)
        _check_count(f"constraint on {quote_prefix(constraint.key)}", len(constraint.values), limits.max_list_items)
        for value in [constraint.value, *constraint.values]:
            if value.WhichOneof("value") == "string_value":
                _check_chars("constraint value", value.string_value, limits.max_key_chars)


@dataclass(frozen=True)
class JobPagePosition:
    """Where a ListJobs page starts: `offset` rows into the selection, and, for a position token,
    just after the row whose sort key is `after` (so the listing seeks instead of skipping rows)."""

    offset: int = 0
    after: tuple[int | str, ...] = ()


def position_page_token(order: int, offset: int, after: tuple[int | str, ...]) -> str:
    payload = json.dumps([order, offset, *after], separators=(",", ":")).encode()
    return _POSITION_PREFIX + base64.urlsafe_b64encode(payload).decode().rstrip("=")


def parse_job_page_token(token: str, order: int, key_types: tuple[type, ...]) -> JobPagePosition:
    """A ListJobs page token of either form, for a listing in `order` whose sort key has these types."""
    if not token.startswith(_POSITION_PREFIX):
        return JobPagePosition(parse_page_token(token))
    invalid = ValueError(
        f"invalid page_token {quote_prefix(token)}: pass the next_page_token of a previous ListJobs answer "
        "with the same order"
    )
    if len(token) > MAX_PAGE_TOKEN_CHARS or not token.isascii():
        raise invalid
    body = token[len(_POSITION_PREFIX) :]
    try:
        decoded = json.loads(base64.urlsafe_b64decode(body + "=" * (-len(body) % 4)))
    except (ValueError, RecursionError):
        raise invalid from None
    if not isinstance(decoded, list) or len(decoded) != 2 + len(key_types):
        raise invalid
    token_order, offset, *after = decoded
    if (
        token_order != order
        or type(offset) is not int
        or not 0 <= offset < 10**MAX_PAGE_TOKEN_DIGITS
        or any(type(value) is not kind for value, kind in zip(after, key_types, strict=True))
    ):
        raise invalid
    return JobPagePosition(offset, tuple(after))


def parse_page_token(token: str) -> int:
    """The offset a ListJobs page token stands for; empty means the first page."""
    if not token:
        return 0
    if len(token) > MAX_PAGE_TOKEN_DIGITS or not token.isascii() or not token.isdigit():
        raise ValueError(
            f"invalid page_token {quote_prefix(token)}: pass the next_page_token of a previous ListJobs answer"
        )
    return int(token)


def check_worker_id(worker_id: str) -> None:
    """A worker id is 1 to 253 characters of letters, digits and . _ : @ -."""
    if not worker_id:
        raise ValueError("worker_id is required")
    if len(worker_id) > MAX_WORKER_ID_CHARS or not _WORKER_ID_CHARS.fullmatch(worker_id):
        raise ValueError(
            f"invalid worker_id {quote_prefix(worker_id)}: use at most {MAX_WORKER_ID_CHARS} letters, digits "
            "and the characters . _ : @ -"
        )


def limits_from_config(config: config_pb2.LimitsConfig) -> InputLimits:
    """The limits a cluster config asks for; a field it leaves unset keeps its default."""
    given = {field.name: getattr(config, field.name) for field in fields(InputLimits) if config.HasField(field.name)}
    limits = InputLimits(**given)
    for name, value in given.items():
        if value < 0 and name != "min_priority":
            raise ValueError(f"limits.{name} must be 0 or more, got {value}")
    if limits.min_priority > limits.max_priority:
        raise ValueError(f"limits.min_priority ({limits.min_priority}) is above limits.max_priority ({limits.max_priority})")
    return limits


# Which limit each user-supplied string of the other requests is held to.
_ID, _NAME, _FILTER, _KEY, _TEXT = "id", "name", "filter", "key", "text"
REQUEST_STRING_LIMITS: dict[type, dict[str, str]] = {
    pb.GetJobStatusRequest: {"job_id": _ID},
    pb.GetJobSpecRequest: {"job_id": _ID},
    pb.TerminateJobRequest: {"job_id": _ID, "reason": _TEXT},
    pb.DeleteJobRequest: {"job_id": _ID},
    pb.ListTasksRequest: {"job_id": _ID},
    pb.GetTaskStatusRequest: {"task_id": _ID},
    pb.GetTaskLogsRequest: {"id": _ID},
    pb.ListJobsRequest: {"name_prefix": _FILTER, "name_contains": _FILTER, "parent_job_id": _ID},
    pb.RegisterEndpointRequest: {"name": _NAME, "address": _NAME, "job_id": _ID},
    pb.UnregisterEndpointRequest: {"endpoint_id": _ID},
    pb.ListEndpointsRequest: {"prefix": _FILTER},
    pb.RegisterRequest: {"address": _NAME},
    pb.NotifyWorkerEventRequest: {"worker_id": _ID},
    pb.GetWorkerLogsRequest: {"worker_id": _ID},
    pb.GetTimeSeriesRequest: {"task_id": _ID},
    pb.ListSlicesRequest: {"scale_group": _KEY},
    pb.CreateSliceRequest: {"scale_group": _KEY},
    pb.GetSliceRequest: {"slice_id": _ID},
    pb.TerminateSliceRequest: {"slice_id": _ID},
}


def _limit_for(kind: str, limits: InputLimits) -> int:
    return {
        _ID: limits.max_id_chars,
        _NAME: limits.max_name_chars,
        _FILTER: limits.max_filter_chars,
        _KEY: limits.max_key_chars,
        _TEXT: limits.max_string_chars,
    }[kind]


def check_request_limits(request: object, limits: InputLimits = DEFAULT_INPUT_LIMITS) -> None:
    """Raise ValueError naming the first string of a request that is too long, or an id holding a
    control character. LaunchJob has `check_launch_limits`, a worker id `check_worker_id`."""
    for field_name, kind in REQUEST_STRING_LIMITS.get(type(request), {}).items():
        value = getattr(request, field_name)
        _check_chars(field_name, value, _limit_for(kind, limits))
        if kind == _ID and any(ord(char) < 32 or ord(char) == 127 for char in value):
            raise ValueError(f"{field_name} {quote_prefix(value)} holds a control character; ids never do")
    if isinstance(request, pb.ListJobsRequest):
        _check_count("states", len(request.states), limits.max_list_items)
    if isinstance(request, pb.RegisterEndpointRequest):
        _check_count("endpoint metadata", len(request.metadata), limits.max_list_items)
        for key, value in request.metadata.items():
            _check_chars("endpoint metadata key", key, limits.max_key_chars)
            _check_chars("endpoint metadata value", value, limits.max_string_chars)
