"""The input limits as pure functions: property tests over LaunchJob messages and raw strings."""

from __future__ import annotations

from dataclasses import fields
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from iris.cluster.limits import (
    DEFAULT_INPUT_LIMITS,
    QUOTE_PREFIX_CHARS,
    REQUEST_STRING_LIMITS,
    InputLimits,
    JobPagePosition,
    check_launch_limits,
    check_request_limits,
    check_worker_id,
    limits_from_config,
    parse_job_page_token,
    parse_page_token,
    position_page_token,
    quote_prefix,
)
from iris.rpc import cluster_pb2 as pb
from iris.rpc import config_pb2

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


# ---------------------------------------------------------------- the other requests' strings

STRING_FIELDS = [(message, field_name) for message, limits in REQUEST_STRING_LIMITS.items() for field_name in limits]


@settings(max_examples=40, deadline=None)
@given(field=st.sampled_from(STRING_FIELDS), value=st.text(max_size=300) | st.text(min_size=5000, max_size=6000))
def test_check_request_limits_any_string_passes_or_raises_a_short_value_error(field, value: str) -> None:
    message, field_name = field
    request = message(**{field_name: value})
    limits = InputLimits(max_id_chars=200, max_name_chars=200, max_filter_chars=200, max_key_chars=200, max_string_chars=200)
    try:
        check_request_limits(request, limits)
    except ValueError as exc:
        assert len(str(exc)) < 400
        assert field_name in str(exc)
        return
    assert len(value) <= 200
    if REQUEST_STRING_LIMITS[message][field_name] == "id":
        assert not any(ord(c) < 32 or ord(c) == 127 for c in value)


@settings(max_examples=100, deadline=None)
@given(st.binary(max_size=400), st.sampled_from(sorted(REQUEST_STRING_LIMITS, key=lambda m: m.__name__)))
def test_check_request_limits_raw_bodies_that_parse_are_checked_without_crashing(body: bytes, message) -> None:
    try:
        request = message.FromString(body)
    except Exception:
        return
    try:
        check_request_limits(request)
    except ValueError as exc:
        assert len(str(exc)) < 400


def test_check_request_limits_huge_job_id_is_refused_with_a_prefix() -> None:
    with pytest.raises(ValueError, match=r"job_id 'xxxx.*\(8388608 chars\) is longer than the limit of 4096") as info:
        check_request_limits(pb.GetJobStatusRequest(job_id="x" * (8 << 20)))
    assert len(str(info.value)) < 200


def test_check_request_limits_nul_in_a_task_id_is_refused() -> None:
    with pytest.raises(ValueError, match="control character"):
        check_request_limits(pb.GetTaskStatusRequest(task_id="/job/0\x00"))


def test_check_request_limits_too_many_listjobs_states_is_refused() -> None:
    with pytest.raises(ValueError, match="states has 2000 entries"):
        check_request_limits(pb.ListJobsRequest(states=[1] * 2000))


# ---------------------------------------------------------------- limits from the cluster config


@settings(max_examples=100, deadline=None)
@given(st.dictionaries(st.sampled_from([f.name for f in fields(InputLimits)]), st.integers(0, 2**40), max_size=6))
def test_limits_from_config_set_fields_override_and_unset_keep_defaults(given_fields: dict[str, int]) -> None:
    config = config_pb2.LimitsConfig(**given_fields)
    try:
        limits = limits_from_config(config)
    except ValueError as exc:
        assert "min_priority" in str(exc)  # a min above the max is the one inconsistency left
        return
    for field in fields(InputLimits):
        expected = given_fields.get(field.name, getattr(DEFAULT_INPUT_LIMITS, field.name))
        assert getattr(limits, field.name) == expected


def test_limits_from_config_negative_limit_is_refused() -> None:
    with pytest.raises(ValueError, match="limits.max_replicas must be 0 or more, got -1"):
        limits_from_config(config_pb2.LimitsConfig(max_replicas=-1))


def test_limits_from_config_empty_section_is_the_defaults() -> None:
    assert limits_from_config(config_pb2.LimitsConfig()) == DEFAULT_INPUT_LIMITS


def test_input_limits_every_field_is_in_the_config_and_the_docs() -> None:
    docs = (Path(__file__).parent.parent / "docs" / "limits.md").read_text()
    config_fields = {f.name for f in config_pb2.LimitsConfig.DESCRIPTOR.fields}
    for field in fields(InputLimits):
        assert field.name in config_fields
        assert f"`{field.name}`" in docs


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
