from __future__ import annotations

import datetime

import pytest

from iris.rpc import time_pb2
from iris.time import Deadline, Duration, ExponentialBackoff, Timestamp, wait_until


@pytest.mark.parametrize(
    ("text", "milliseconds"),
    [
        ("250ms", 250),
        ("30s", 30_000),
        ("5m", 300_000),
        ("1h", 3_600_000),
        ("1h30m", 5_400_000),
        ("2d", 172_800_000),
        ("1.5s", 1_500),
        (" 1h 30m ", 5_400_000),
        ("0s", 0),
    ],
)
def test_duration_parse_valid_text_returns_milliseconds(text: str, milliseconds: int) -> None:
    assert Duration.parse(text) == Duration.from_ms(milliseconds)


def test_duration_parse_bare_number_raises_asking_for_unit() -> None:
    with pytest.raises(ValueError, match=r"duration '30' has no unit; write e\.g\. '30s' or '30ms'"):
        Duration.parse("30")


@pytest.mark.parametrize("text", ["", "30 seconds", "5x", "1h-30m", "s", "-5s"])
def test_duration_parse_malformed_text_raises_with_examples(text: str) -> None:
    with pytest.raises(ValueError, match="invalid duration .*'250ms', '30s', '5m', '1h30m' or '2d'"):
        Duration.parse(text)


def test_duration_parse_sub_millisecond_raises() -> None:
    with pytest.raises(ValueError, match="finer than the 1ms resolution"):
        Duration.parse("0.5ms")


@pytest.mark.parametrize(
    ("milliseconds", "text"),
    [
        (0, "0ms"),
        (250, "250ms"),
        (30_000, "30s"),
        (90_000, "1m30s"),
        (5_400_000, "1h30m"),
        (90_061_500, "1d1h1m1.5s"),
        (-90_000, "-1m30s"),
    ],
)
def test_duration_str_returns_compact_form(milliseconds: int, text: str) -> None:
    assert str(Duration.from_ms(milliseconds)) == text


@pytest.mark.parametrize("milliseconds", [1, 999, 1_000, 1_001, 61_250, 86_400_000, 123_456_789])
def test_duration_str_then_parse_returns_same_duration(milliseconds: int) -> None:
    duration = Duration.from_ms(milliseconds)
    assert Duration.parse(str(duration)) == duration


def test_duration_proto_round_trip_preserves_milliseconds() -> None:
    proto = Duration.from_seconds(2.5).to_proto()
    assert proto == time_pb2.Duration(milliseconds=2500)
    assert Duration.from_proto(proto).seconds == 2.5


def test_duration_comparison_orders_by_length() -> None:
    assert Duration.parse("59s") < Duration.parse("1m") < Duration.parse("1m1s")


def test_timestamp_from_seconds_isoformat_returns_utc_with_milliseconds() -> None:
    assert Timestamp.from_seconds(1_700_000_000.25).isoformat() == "2023-11-14T22:13:20.250+00:00"


def test_timestamp_now_matches_wall_clock() -> None:
    before = datetime.datetime.now(datetime.UTC).timestamp()
    now = Timestamp.now()
    after = datetime.datetime.now(datetime.UTC).timestamp()
    assert before - 0.001 <= now.seconds <= after + 0.001


def test_timestamp_age_of_past_instant_returns_elapsed_duration() -> None:
    an_hour_ago = Timestamp(Timestamp.now().epoch_ms - 3_600_000)
    assert Duration.parse("1h") <= an_hour_ago.age() < Duration.parse("1h1m")


def test_timestamp_proto_round_trip_preserves_epoch_ms() -> None:
    stamp = Timestamp(1_700_000_000_123)
    assert stamp.to_proto() == time_pb2.Timestamp(epoch_ms=1_700_000_000_123)
    assert Timestamp.from_proto(stamp.to_proto()) == stamp


def test_deadline_zero_timeout_is_expired_immediately() -> None:
    deadline = Deadline.from_now(0)
    assert deadline.expired()
    assert deadline.remaining_seconds() == 0.0


def test_deadline_from_duration_reports_remaining_time() -> None:
    deadline = Deadline.from_now(Duration.parse("1m"))
    assert not deadline.expired()
    assert 59 < deadline.remaining_seconds() <= 60


def test_backoff_without_jitter_doubles_up_to_maximum() -> None:
    backoff = ExponentialBackoff(initial=1.0, maximum=8.0, jitter=0.0)
    assert [backoff.next_delay() for _ in range(6)] == [1.0, 2.0, 4.0, 8.0, 8.0, 8.0]


def test_backoff_reset_restarts_from_initial_delay() -> None:
    backoff = ExponentialBackoff(initial=0.5, maximum=10.0, factor=3.0, jitter=0.0)
    backoff.next_delay()
    backoff.next_delay()
    backoff.reset()
    assert backoff.next_delay() == 0.5


def test_backoff_with_jitter_stays_within_band_and_maximum() -> None:
    backoff = ExponentialBackoff(initial=1.0, maximum=4.0, jitter=0.25)
    delays = [backoff.next_delay() for _ in range(50)]
    assert 0.75 <= delays[0] <= 1.25
    assert 1.5 <= delays[1] <= 2.5
    assert all(delay <= 4.0 for delay in delays)
    assert all(delay >= 3.0 for delay in delays[3:])


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"initial": 0.0, "maximum": 1.0}, "initial delay must be positive"),
        ({"initial": 2.0, "maximum": 1.0}, "maximum delay 1.0 is below the initial delay 2.0"),
        ({"initial": 1.0, "maximum": 2.0, "factor": 0.5}, "factor must be at least 1"),
        ({"initial": 1.0, "maximum": 2.0, "jitter": 1.0}, r"jitter must be in \[0, 1\)"),
    ],
)
def test_backoff_invalid_arguments_raise(kwargs: dict[str, float], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        ExponentialBackoff(**kwargs)


def test_wait_until_predicate_becomes_true_returns_its_value() -> None:
    calls: list[int] = []

    def third_call_succeeds() -> str | None:
        calls.append(1)
        return "ready" if len(calls) >= 3 else None

    assert wait_until(third_call_succeeds, timeout=5.0, poll_interval=0.001) == "ready"
    assert len(calls) == 3


def test_wait_until_predicate_never_true_raises_timeout_naming_condition() -> None:
    with pytest.raises(TimeoutError, match=r"^timed out after 0\.05s waiting for worker registration$"):
        wait_until(lambda: False, timeout=0.05, poll_interval=0.01, description="worker registration")


def test_wait_until_zero_timeout_still_checks_predicate_once() -> None:
    assert wait_until(lambda: 42, timeout=0) == 42
