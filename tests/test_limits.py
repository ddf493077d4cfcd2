"""The input limits as pure functions: property tests over LaunchJob messages and raw strings."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from iris.cluster.limits import (
    DEFAULT_INPUT_LIMITS,
    QUOTE_PREFIX_CHARS,
    InputLimits,
    JobPagePosition,
    check_launch_limits,
    check_worker_id,
    parse_job_page_token,
    parse_page_token,
    position_page_token,
    quote_prefix,
)
from iris.rpc import cluster_pb2 as pb

INT32 = st.integers(-(2**31), 2**31 - 1)
INT64 = st.integers(-(2**63), 2**63 - 1)


def _request(**fields) -> pb.LaunchJobRequest:
    request = pb.LaunchJobRequest(entrypoint=pb.Entrypoint(command=pb.CommandEntrypoint(argv=["true"])))
    for name, value in fields.items():
        setattr(request, name, value)
    return request


launch_requests = st.builds(
    pb.LaunchJobRequest,
    name=st.text(max_size=2000),
    replicas=INT32,
    priority=INT32,
    max_retries_failure=INT32,
    max_task_failures=INT32,
    entrypoint=st.builds(
        pb.Entrypoint, command=st.builds(pb.CommandEntrypoint, argv=st.lists(st.text(max_size=50), max_size=5))
    ),
    resources=st.builds(pb.ResourceSpec, cpu_millicores=INT64, memory_bytes=INT64, disk_bytes=INT64),
    ports=st.lists(st.text(max_size=300), max_size=3),
)


@settings(max_examples=300, deadline=None)
@given(launch_requests)
def test_check_launch_limits_any_request_passes_or_raises_a_short_value_error(request: pb.LaunchJobRequest) -> None:
    try:
        check_launch_limits(request)
    except ValueError as exc:
        assert len(str(exc)) < 400
        return
    assert 0 <= request.replicas <= DEFAULT_INPUT_LIMITS.max_replicas
    assert DEFAULT_INPUT_LIMITS.min_priority <= request.priority <= DEFAULT_INPUT_LIMITS.max_priority
    assert 0 <= request.resources.cpu_millicores <= DEFAULT_INPUT_LIMITS.max_cpu_millicores
    assert 0 <= request.resources.memory_bytes <= DEFAULT_INPUT_LIMITS.max_memory_bytes
    assert len(request.name) <= DEFAULT_INPUT_LIMITS.max_name_chars


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=400))
def test_check_launch_limits_raw_bodies_that_parse_are_checked_without_crashing(body: bytes) -> None:
    request = pb.LaunchJobRequest()
    try:
        request.ParseFromString(body)
    except Exception:
        return
    try:
        check_launch_limits(request)
    except ValueError as exc:
        assert len(str(exc)) < 400


@given(st.text(max_size=10_000) | st.binary(max_size=10_000))
def test_quote_prefix_any_value_is_cut_to_a_short_prefix(value: str | bytes) -> None:
    assert len(quote_prefix(value)) <= 6 * QUOTE_PREFIX_CHARS + 40


@given(st.text(max_size=40))
def test_parse_page_token_any_text_is_an_offset_or_a_value_error(token: str) -> None:
    try:
        offset = parse_page_token(token)
    except ValueError as exc:
        assert "next_page_token" in str(exc)
        return
    assert 0 <= offset < 2**63


@given(st.text(max_size=300))
def test_check_worker_id_accepts_only_short_printable_ids(worker_id: str) -> None:
    try:
        check_worker_id(worker_id)
    except ValueError:
        return
    assert 0 < len(worker_id) <= 253
    assert "\0" not in worker_id and " " not in worker_id and "/" not in worker_id


def test_check_launch_limits_max_int32_replicas_is_refused() -> None:
    with pytest.raises(ValueError, match="replicas must be between 0 and 10000, got 2147483647"):
        check_launch_limits(_request(replicas=2**31 - 1))


def test_check_launch_limits_raised_limit_accepts_more_replicas() -> None:
    check_launch_limits(_request(replicas=100_000), InputLimits(max_replicas=100_000))


def test_check_launch_limits_huge_argument_error_quotes_a_prefix() -> None:
    request = pb.LaunchJobRequest(
        entrypoint=pb.Entrypoint(command=pb.CommandEntrypoint(argv=["echo", "y" * (8 << 20)]))
    )

    with pytest.raises(ValueError) as raised:
        check_launch_limits(request)

    assert len(str(raised.value)) < 200
    assert "(8388608 chars)" in str(raised.value)


def test_check_worker_id_default_host_port_form_is_accepted() -> None:
    check_worker_id("worker-3.example:8081")


@given(st.text(max_size=300))
def test_parse_job_page_token_any_text_is_a_position_or_a_value_error(token: str) -> None:
    try:
        position = parse_job_page_token(token, pb.JOB_ORDER_NEWEST, (int, str))
    except ValueError as exc:
        assert "next_page_token" in str(exc)
        return
    assert 0 <= position.offset < 10**18
    assert position.after == () or [type(v) for v in position.after] == [int, str]


def test_parse_job_page_token_reads_back_a_position_token_of_its_order() -> None:
    token = position_page_token(pb.JOB_ORDER_NEWEST, 200, (1_700_000_000_000, "/train"))

    assert parse_job_page_token(token, pb.JOB_ORDER_NEWEST, (int, str)) == JobPagePosition(200, (1_700_000_000_000, "/train"))
    with pytest.raises(ValueError, match="same order"):
        parse_job_page_token(token, pb.JOB_ORDER_NAME, (str,))
