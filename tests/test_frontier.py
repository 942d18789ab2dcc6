from __future__ import annotations

import datetime as dt

import pytest

from airflow_provider_ct.core.frontier import (
    MAX_TIMESTAMP,
    Frontier,
    check_timestamp,
    parse_summary_timestamp,
    timestamp_from_datetime,
)
from airflow_provider_ct.exceptions import FrontierError, MalformedSummaryError


def test_frontier_seals_exactly_the_times_below_it() -> None:
    upper = Frontier.at(10)
    assert upper.seals(9)
    assert not upper.seals(10)
    assert upper.less_equal(10) and upper.less_equal(11)
    assert not upper.less_equal(9)


def test_empty_frontier_is_beyond_every_time_and_frontier() -> None:
    closed = Frontier.empty()
    assert closed.is_empty
    assert closed.seals(MAX_TIMESTAMP)
    assert Frontier.at(MAX_TIMESTAMP) < closed
    assert closed.join(Frontier.at(5)) == closed
    assert closed.meet(Frontier.at(5)) == Frontier.at(5)


def test_frontier_order_join_meet() -> None:
    a, b = Frontier.at(3), Frontier.at(7)
    assert a < b and a <= b and b > a and b >= a and not b < a
    assert a.join(b) == b and a.meet(b) == a
    assert Frontier.minimum() == Frontier.at(0)


def test_sealing_a_time_gives_the_next_frontier() -> None:
    assert Frontier.sealing(41) == Frontier.at(42)
    assert Frontier.sealing(MAX_TIMESTAMP).is_empty


@pytest.mark.parametrize("bad", [-1, MAX_TIMESTAMP + 1, 1.5, True, "12", None])
def test_bad_timestamps_are_refused_with_the_value_named(bad: object) -> None:
    with pytest.raises(FrontierError, match="epoch milliseconds"):
        check_timestamp(bad, "tick time")


def test_summary_round_trip_including_the_empty_frontier() -> None:
    for frontier in (Frontier.at(0), Frontier.at(1_700_000_000_123), Frontier.empty()):
        assert Frontier.from_summary(frontier.to_summary()) == frontier
        assert Frontier.from_json(frontier.to_json()) == frontier


@pytest.mark.parametrize("bad", ["", "-5", "1.5", "abc", "0x10", str(MAX_TIMESTAMP + 1)])
def test_malformed_summary_values_name_key_and_snapshot(bad: str) -> None:
    with pytest.raises(MalformedSummaryError, match=r"'ct.upper' in snapshot 7"):
        Frontier.from_summary(bad, where="snapshot 7")
    with pytest.raises(MalformedSummaryError):
        parse_summary_timestamp(bad, key="ct.time")


def test_datetime_conversion_requires_a_time_zone() -> None:
    aware = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
    assert timestamp_from_datetime(aware) == 1_767_225_600_000
    with pytest.raises(FrontierError, match="no time zone"):
        timestamp_from_datetime(dt.datetime(2026, 1, 1))
