"""Timelines of managed and external tables, on a real SQLite catalog (no mocks)."""

from __future__ import annotations

import time as _time
from typing import Any

import pyarrow as pa
import pytest

from airflow_provider_ct.core.catalog import CatalogConfig
from airflow_provider_ct.core.commit import (
    TimedChange,
    accept_frontier_regression,
    compare_and_append,
)
from airflow_provider_ct.core.frontier import MAX_TIMESTAMP, Frontier, now_ms
from airflow_provider_ct.core.keys import SummaryKeys, TableKeys
from airflow_provider_ct.core.tables import create_managed_table
from airflow_provider_ct.core.timeline import (
    DEFAULT_LATE_COMMIT_ALLOWANCE_MS,
    SummaryKeyUpper,
    Timeline,
    WallClockUpper,
)
from airflow_provider_ct.exceptions import (
    FrontierRegressionError,
    MalformedSummaryError,
    TimeNotSealedError,
)
from tests.conftest import SCHEMA
from tests.helpers import rows_of, stage_rows

IDENT = "ns.t"


def _row(k: int, v: str) -> pa.Table:
    return pa.table({"k": [k], "v": [v]}, schema=SCHEMA)


def _managed(config: CatalogConfig, name: str = IDENT) -> Any:
    return create_managed_table(config.load(), name, SCHEMA)


def _external(config: CatalogConfig, name: str = "ext.events") -> Any:
    catalog = config.load()
    catalog.create_namespace(name.split(".")[0])
    return catalog.create_table(name, schema=SCHEMA)


def _head(table: Any) -> int:
    return int(table.metadata.current_snapshot().snapshot_id)


def _raw_commit(table: Any, k: int = 0, **summary: str) -> int:
    """A plain PyIceberg append carrying hand-written summary keys; returns its snapshot id."""
    table.append(_row(k, f"raw-{k}"), snapshot_properties=summary)
    return _head(table)


def _ct(lower: str, upper: str, time: str | None, batch: str) -> dict[str, str]:
    summary = {"ct.lower": lower, "ct.upper": upper, "ct.batch-id": batch}
    if time is not None:
        summary["ct.time"] = time
    return summary


def _append_after_clock_moves(table: Any, k: int, **summary: str) -> Any:
    """Append once the wall clock is past the head's commit time, so commit times differ."""
    head = table.metadata.current_snapshot()
    if head is not None:
        while now_ms() <= head.timestamp_ms:
            _time.sleep(0.002)
    table.append(_row(k, f"e{k}"), snapshot_properties=summary)
    return table.metadata.current_snapshot()


# -- managed tables ------------------------------------------------------------------
def test_empty_managed_table_has_minimum_upper_and_no_snapshot(
    sqlite_catalog_config: CatalogConfig,
) -> None:
    timeline = Timeline.of(_managed(sqlite_catalog_config))
    assert timeline.managed
    assert timeline.table == IDENT
    assert timeline.head_snapshot_id is None
    assert timeline.entries == ()
    assert timeline.upper == Frontier.minimum()
    assert timeline.upper_snapshot_id is None
    with pytest.raises(TimeNotSealedError, match=f"table {IDENT}: time 0 is not sealed"):
        timeline.snapshot_at(0)
    assert timeline.snapshot_at(0, require_sealed=False) is None


def test_managed_upper_times_and_snapshot_at(sqlite_catalog_config: CatalogConfig) -> None:
    table = _managed(sqlite_catalog_config)
    first = compare_and_append(
        table,
        expected_upper=Frontier.minimum(),
        new_upper=Frontier.at(11),
        batch_id="b10",
        time=10,
        add_files=stage_rows(table, "b10", [(10, "a")]),
    )
    second = compare_and_append(
        table,
        expected_upper=Frontier.at(11),
        new_upper=Frontier.at(31),
        batch_id="b30",
        time=30,
        add_files=stage_rows(table, "b30", [(30, "b")]),
    )
    [s10], [s30] = first.snapshot_ids, second.snapshot_ids
    timeline = Timeline.of(table)

    assert timeline.managed
    assert timeline.upper == Frontier.at(31)
    assert timeline.upper_snapshot_id == s30 == timeline.head_snapshot_id
    assert [e.snapshot_id for e in timeline.entries] == [s10, s30]
    assert timeline.data_times() == [(10, s10), (30, s30)]
    # Before the first data time the table held nothing.
    assert timeline.snapshot_at(0) is None
    assert timeline.snapshot_at(9) is None
    # The newest snapshot whose ct.time <= t, on both sides of each data time.
    assert timeline.snapshot_at(10) == s10
    assert timeline.snapshot_at(29) == s10
    assert timeline.snapshot_at(30) == s30
    # The largest sealed time is upper - 1.
    assert timeline.snapshot_at(30) == timeline.snapshot_at(31 - 1)
    assert rows_of(table, timeline.snapshot_at(20)) == {(10, "a"): 1}
    assert rows_of(table, timeline.snapshot_at(30)) == {(10, "a"): 1, (30, "b"): 1}


def test_managed_entries_carry_their_summary_keys(sqlite_catalog_config: CatalogConfig) -> None:
    table = _managed(sqlite_catalog_config)
    result = compare_and_append(
        table,
        expected_upper=Frontier.minimum(),
        new_upper=Frontier.at(8),
        batch_id="b7",
        time=7,
        add_files=stage_rows(table, "b7", [(7, "x")]),
        inputs={"ns.in": 42, "ns.empty": None},
    )
    timeline = Timeline.of(table)
    [entry] = timeline.entries
    snapshot = table.metadata.snapshot_by_id(result.snapshot_ids[0])
    assert entry.snapshot_id == snapshot.snapshot_id
    assert entry.committed_at_ms == snapshot.timestamp_ms
    assert entry.time == 7
    assert entry.lower == Frontier.minimum()
    assert entry.upper == Frontier.at(8)
    assert entry.batch_id == "b7"
    assert entry.inputs == {"ns.in": 42, "ns.empty": None}
    assert entry.operation == "append"
    assert entry.summary[SummaryKeys.BATCH_ID] == "b7"
    assert timeline.entry(entry.snapshot_id) == entry
    assert timeline.entry(entry.snapshot_id + 1) is None


def test_snapshot_at_refuses_unsealed_times_unless_asked_not_to(
    sqlite_catalog_config: CatalogConfig,
) -> None:
    table = _managed(sqlite_catalog_config)
    landed = compare_and_append(
        table,
        expected_upper=Frontier.minimum(),
        new_upper=Frontier.at(21),
        batch_id="b20",
        time=20,
        add_files=stage_rows(table, "b20", [(20, "a")]),
    )
    timeline = Timeline.of(table)
    assert timeline.snapshot_at(20) == landed.snapshot_ids[0]
    for unsealed in (21, 22, 10**12):
        with pytest.raises(TimeNotSealedError, match=f"time {unsealed} is not sealed.*upper is 21"):
            timeline.snapshot_at(unsealed)
        assert timeline.snapshot_at(unsealed, require_sealed=False) == landed.snapshot_ids[0]


def test_a_closed_table_seals_every_time(sqlite_catalog_config: CatalogConfig) -> None:
    table = _managed(sqlite_catalog_config)
    landed = compare_and_append(
        table,
        expected_upper=Frontier.minimum(),
        new_upper=Frontier.empty(),
        batch_id="last",
        time=5,
        add_files=stage_rows(table, "last", [(5, "z")]),
    )
    timeline = Timeline.of(table)
    assert timeline.upper.is_empty
    assert timeline.entries[-1].summary[SummaryKeys.UPPER] == SummaryKeys.EMPTY_FRONTIER
    assert timeline.snapshot_at(4) is None
    assert timeline.snapshot_at(MAX_TIMESTAMP) == landed.snapshot_ids[0]


def test_frontier_only_snapshots_are_skipped_by_snapshot_at(
    sqlite_catalog_config: CatalogConfig,
) -> None:
    table = _managed(sqlite_catalog_config)
    data = compare_and_append(
        table,
        expected_upper=Frontier.minimum(),
        new_upper=Frontier.at(11),
        batch_id="b10",
        time=10,
        add_files=stage_rows(table, "b10", [(10, "a")]),
    )
    tick = compare_and_append(
        table, expected_upper=Frontier.at(11), new_upper=Frontier.at(50), batch_id="tick"
    )
    timeline = Timeline.of(table)
    [tick_id] = tick.snapshot_ids
    tick_entry = timeline.entry(tick_id)
    assert tick_entry is not None and tick_entry.time is None
    assert tick_entry.upper == Frontier.at(50)
    # The tick moved the upper ...
    assert timeline.upper == Frontier.at(50) and timeline.upper_snapshot_id == tick_id
    # ... but vouches for no time: the contents up to 49 are those of t=10.
    assert timeline.head_snapshot_id == tick_id
    assert timeline.snapshot_at(49) == data.snapshot_ids[0]
    assert timeline.data_times() == [(10, data.snapshot_ids[0])]


def test_one_batch_with_several_times_chains_its_snapshots(
    sqlite_catalog_config: CatalogConfig,
) -> None:
    table = _managed(sqlite_catalog_config)
    result = compare_and_append(
        table,
        expected_upper=Frontier.minimum(),
        new_upper=Frontier.at(100),
        batch_id="multi",
        changes=[
            TimedChange(10, tuple(stage_rows(table, "multi", [(10, "a")]))),
            TimedChange(40, tuple(stage_rows(table, "multi", [(40, "b")]))),
        ],
    )
    s10, s40 = result.snapshot_ids
    timeline = Timeline.of(table)
    first, second = timeline.entries
    assert (first.lower, first.upper) == (Frontier.minimum(), Frontier.at(40))
    assert (second.lower, second.upper) == (Frontier.at(40), Frontier.at(100))
    assert timeline.snapshot_at(39) == s10
    assert timeline.snapshot_at(40) == s40
    found = timeline.find_batch("multi")
    assert found is not None and found.snapshot_id == s40  # the newest of the batch


def test_find_batch(sqlite_catalog_config: CatalogConfig) -> None:
    table = _managed(sqlite_catalog_config)
    one = compare_and_append(
        table, expected_upper=Frontier.minimum(), new_upper=Frontier.at(5), batch_id="one"
    )
    two = compare_and_append(
        table,
        expected_upper=Frontier.at(5),
        new_upper=Frontier.at(9),
        batch_id="two",
        time=7,
        add_files=stage_rows(table, "two", [(7, "x")]),
    )
    timeline = Timeline.of(table)
    found_one = timeline.find_batch("one")
    found_two = timeline.find_batch("two")
    assert found_one is not None and found_one.snapshot_id == one.snapshot_ids[0]
    assert found_two is not None and found_two.snapshot_id == two.snapshot_ids[0]
    assert found_two.time == 7
    assert timeline.find_batch("three") is None


def test_a_foreign_commit_on_a_managed_table_changes_neither_upper_nor_snapshot_at(
    sqlite_catalog_config: CatalogConfig,
) -> None:
    table = _managed(sqlite_catalog_config)
    landed = compare_and_append(
        table,
        expected_upper=Frontier.minimum(),
        new_upper=Frontier.at(5),
        batch_id="b",
        time=4,
        add_files=stage_rows(table, "b", [(4, "ours")]),
    )
    before = Timeline.of(table)
    table.append(_row(9, "drift"))  # a writer that knows nothing of ct.* keys
    after = Timeline.of(table)
    foreign = after.entries[-1]

    assert after.head_snapshot_id == foreign.snapshot_id != landed.snapshot_ids[0]
    assert (foreign.time, foreign.lower, foreign.upper, foreign.batch_id) == (
        None,
        None,
        None,
        None,
    )
    assert after.managed
    assert after.upper == before.upper == Frontier.at(5)
    assert after.upper_snapshot_id == landed.snapshot_ids[0]
    assert after.snapshot_at(4) == before.snapshot_at(4) == landed.snapshot_ids[0]
    assert after.snapshot_at(3) is None
    assert after.data_times() == before.data_times()
    assert rows_of(table, after.snapshot_at(4)) == {(4, "ours"): 1}


def test_an_unflagged_table_carrying_ct_upper_is_managed(
    sqlite_catalog_config: CatalogConfig,
) -> None:
    table = _external(sqlite_catalog_config, "plain.t")
    assert table.metadata.properties.get("ct.managed") is None
    landed = _raw_commit(table, 2, **_ct("0", "3", "2", "b"))
    timeline = Timeline.of(table, policy=WallClockUpper(0), now=10**12)
    assert timeline.managed
    assert timeline.upper == Frontier.at(3)  # not the wall clock
    assert timeline.upper_snapshot_id == landed
    assert timeline.snapshot_at(2) == landed
    assert timeline.snapshot_at(1) is None


# -- histories that break the rules ------------------------------------------------
@pytest.mark.parametrize(
    ("good_upper", "bad_upper"),
    [("20", "15"), ("20", "0"), ("empty", "30")],
)
def test_an_upper_that_goes_backwards_is_refused_naming_both_snapshots(
    sqlite_catalog_config: CatalogConfig, good_upper: str, bad_upper: str
) -> None:
    table = _managed(sqlite_catalog_config)
    good = _raw_commit(table, 1, **_ct("0", good_upper, "10", "good"))
    Timeline.of(table)  # the history is fine so far
    bad = _raw_commit(table, 2, **_ct(good_upper, bad_upper, None, "bad"))
    with pytest.raises(FrontierRegressionError) as info:
        Timeline.of(table)
    message = str(info.value)
    assert f"table {IDENT}" in message
    assert f"snapshot {bad} sets ct.upper={bad_upper}" in message
    assert f"behind {good_upper} set by snapshot {good}" in message


@pytest.mark.parametrize("wrong_lower", ["25", "15", "0"])
def test_a_lower_that_does_not_continue_the_upper_is_refused(
    sqlite_catalog_config: CatalogConfig, wrong_lower: str
) -> None:
    table = _managed(sqlite_catalog_config)
    _raw_commit(table, 1, **_ct("0", "20", "10", "first"))
    gap = _raw_commit(table, 2, **_ct(wrong_lower, "30", "26", "second"))
    with pytest.raises(FrontierRegressionError) as info:
        Timeline.of(table)
    assert f"snapshot {gap} claims ct.lower={wrong_lower}" in str(info.value)
    assert "the upper before it was 20" in str(info.value)


def test_a_history_whose_lowers_continue_the_uppers_is_accepted(
    sqlite_catalog_config: CatalogConfig,
) -> None:
    table = _managed(sqlite_catalog_config)
    a = _raw_commit(table, 1, **_ct("0", "20", "10", "a"))
    b = _raw_commit(table, 2, **_ct("20", "30", "25", "b"))
    timeline = Timeline.of(table)
    assert timeline.upper == Frontier.at(30) and timeline.upper_snapshot_id == b
    assert timeline.data_times() == [(10, a), (25, b)]


def test_a_time_below_the_snapshots_lower_is_refused(
    sqlite_catalog_config: CatalogConfig,
) -> None:
    table = _managed(sqlite_catalog_config)
    _raw_commit(table, 1, **_ct("0", "20", "10", "a"))
    assert Timeline.of(table).snapshot_at(5) is None  # sealed: the table was empty at 5
    _raw_commit(table, 2, **_ct("20", "30", "5", "rewrites-the-past"))
    with pytest.raises((MalformedSummaryError, FrontierRegressionError)):
        Timeline.of(table)


@pytest.mark.parametrize(
    ("summary", "key"),
    [
        ({"ct.upper": "abc"}, "ct.upper"),
        ({"ct.upper": ""}, "ct.upper"),
        ({"ct.upper": "20", "ct.time": "-1"}, "ct.time"),
        ({"ct.upper": "20", "ct.time": "1.5"}, "ct.time"),
        ({"ct.upper": "20", "ct.lower": "x"}, "ct.lower"),
        ({"ct.upper": str(2**63)}, "ct.upper"),
        ({"ct.upper": "20", "ct.inputs": "not json"}, "ct.inputs"),
        ({"ct.upper": "20", "ct.inputs": '{"a": "x"}'}, "ct.inputs"),
        ({"ct.upper": "20", "ct.inputs": '{"a": true}'}, "ct.inputs"),
        ({"ct.upper": "20", "ct.inputs": '{"a": 1.5}'}, "ct.inputs"),
        ({"ct.upper": "20", "ct.inputs": "[1, 2]"}, "ct.inputs"),
        ({"ct.upper": "20", "ct.time": "20"}, "ct.time"),
        ({"ct.upper": "20", "ct.time": "21"}, "ct.time"),
        ({"ct.batch-id": "b", "ct.time": "5"}, "ct.upper"),
        pytest.param(
            {"ct.upper": "\u00b2"},
            "ct.upper",
            id="superscript-digit",
        ),
    ],
)
def test_malformed_summary_values_name_the_key_and_the_snapshot(
    sqlite_catalog_config: CatalogConfig, summary: dict[str, str], key: str
) -> None:
    table = _managed(sqlite_catalog_config)
    snapshot = _raw_commit(table, 1, **summary)
    with pytest.raises(MalformedSummaryError) as info:
        Timeline.of(table)
    assert key in str(info.value)
    assert f"snapshot {snapshot}" in str(info.value)


def test_a_malformed_old_snapshot_is_reported_even_under_a_good_head(
    sqlite_catalog_config: CatalogConfig,
) -> None:
    table = _managed(sqlite_catalog_config)
    bad = _raw_commit(table, 1, **{"ct.upper": "20", "ct.inputs": "{broken"})
    _raw_commit(table, 2, **_ct("20", "30", "25", "fine"))
    with pytest.raises(MalformedSummaryError, match=f"'ct.inputs' in snapshot {bad} is not JSON"):
        Timeline.of(table)


def test_ct_inputs_json_is_parsed_into_the_entry(sqlite_catalog_config: CatalogConfig) -> None:
    table = _managed(sqlite_catalog_config)
    big = 2**62 + 7
    _raw_commit(
        table,
        1,
        **_ct("0", "20", "10", "b"),
        **{"ct.inputs": f'{{"ns.a": {big}, "ns.b": null}}'},
    )
    _raw_commit(table, 2, **_ct("20", "30", "25", "c"), **{"ct.inputs": "{}"})
    first, second = Timeline.of(table).entries
    assert first.inputs == {"ns.a": big, "ns.b": None}
    assert second.inputs == {}


# -- external tables ---------------------------------------------------------------
def test_external_times_are_commit_times(sqlite_catalog_config: CatalogConfig) -> None:
    table = _external(sqlite_catalog_config)
    first = _append_after_clock_moves(table, 1)
    second = _append_after_clock_moves(table, 2)
    third = _append_after_clock_moves(table, 3)
    assert first.timestamp_ms < second.timestamp_ms < third.timestamp_ms

    timeline = Timeline.of(table, policy=WallClockUpper(0), now=third.timestamp_ms + 1)
    assert not timeline.managed
    assert timeline.head_snapshot_id == third.snapshot_id
    assert timeline.data_times() == [
        (s.timestamp_ms, s.snapshot_id) for s in (first, second, third)
    ]
    assert all(e.committed_at_ms == e.time for e in timeline.entries)
    assert all(e.upper is None and e.batch_id is None for e in timeline.entries)
    assert timeline.snapshot_at(first.timestamp_ms - 1) is None
    assert timeline.snapshot_at(first.timestamp_ms) == first.snapshot_id
    assert timeline.snapshot_at(second.timestamp_ms - 1) == first.snapshot_id
    assert timeline.snapshot_at(second.timestamp_ms) == second.snapshot_id
    assert timeline.snapshot_at(third.timestamp_ms - 1) == second.snapshot_id
    assert timeline.snapshot_at(third.timestamp_ms) == third.snapshot_id
    later = third.timestamp_ms + 10_000
    assert timeline.snapshot_at(later, require_sealed=False) == third.snapshot_id
    with pytest.raises(TimeNotSealedError):
        timeline.snapshot_at(later)
    assert rows_of(table, timeline.snapshot_at(second.timestamp_ms)) == {
        (1, "e1"): 1,
        (2, "e2"): 1,
    }


def test_wall_clock_upper_is_now_minus_the_allowance(
    sqlite_catalog_config: CatalogConfig,
) -> None:
    table = _external(sqlite_catalog_config)
    snapshot = _append_after_clock_moves(table, 1)
    now = snapshot.timestamp_ms + 10_000
    timeline = Timeline.of(table, policy=WallClockUpper(500), now=now)
    assert timeline.upper == Frontier.at(now - 500)
    assert timeline.upper_snapshot_id is None
    assert timeline.snapshot_at(now - 501) == snapshot.snapshot_id
    with pytest.raises(TimeNotSealedError):
        timeline.snapshot_at(now - 500)
    # The default policy is a wall clock with the default allowance.
    default = Timeline.of(table, now=now)
    assert default.upper == Frontier.at(now - DEFAULT_LATE_COMMIT_ALLOWANCE_MS)
    # A clock earlier than the allowance clamps to the minimum frontier.
    assert Timeline.of(table, policy=WallClockUpper(500), now=100).upper == Frontier.minimum()


def test_empty_external_table(sqlite_catalog_config: CatalogConfig) -> None:
    timeline = Timeline.of(_external(sqlite_catalog_config), policy=WallClockUpper(10), now=1_000)
    assert not timeline.managed
    assert timeline.head_snapshot_id is None and timeline.entries == ()
    assert timeline.upper == Frontier.at(990)
    assert timeline.snapshot_at(989) is None


def test_summary_key_upper_reads_the_newest_watermark(
    sqlite_catalog_config: CatalogConfig,
) -> None:
    table = _external(sqlite_catalog_config)
    policy = SummaryKeyUpper("my.watermark")
    _append_after_clock_moves(table, 1)
    # No snapshot carries the key yet: nothing is sealed.
    assert Timeline.of(table, policy=policy).upper == Frontier.minimum()
    _append_after_clock_moves(table, 2, **{"my.watermark": "100"})
    newest = _append_after_clock_moves(table, 3, **{"my.watermark": "250"})
    _append_after_clock_moves(table, 4)  # a later commit without a watermark
    timeline = Timeline.of(table, policy=policy)
    assert not timeline.managed
    assert timeline.upper == Frontier.at(250)
    assert newest.summary.additional_properties["my.watermark"] == "250"
    assert Timeline.of(table, policy=SummaryKeyUpper("other.key")).upper == Frontier.minimum()


def test_summary_key_upper_accepts_the_empty_frontier(
    sqlite_catalog_config: CatalogConfig,
) -> None:
    table = _external(sqlite_catalog_config)
    last = _append_after_clock_moves(table, 1, **{"my.watermark": "empty"})
    timeline = Timeline.of(table, policy=SummaryKeyUpper("my.watermark"))
    assert timeline.upper.is_empty
    assert timeline.snapshot_at(MAX_TIMESTAMP) == last.snapshot_id


@pytest.mark.parametrize("value", ["soon", "-5", "12.5", ""])
def test_summary_key_upper_refuses_a_bad_watermark(
    sqlite_catalog_config: CatalogConfig, value: str
) -> None:
    table = _external(sqlite_catalog_config)
    _append_after_clock_moves(table, 1, **{"my.watermark": "100"})
    bad = _append_after_clock_moves(table, 2, **{"my.watermark": value})
    with pytest.raises(MalformedSummaryError) as info:
        Timeline.of(table, policy=SummaryKeyUpper("my.watermark"))
    assert "'my.watermark'" in str(info.value)
    assert f"snapshot {bad.snapshot_id}" in str(info.value)


# -- only main's ancestry counts -----------------------------------------------------
def _two_batches_then_rollback(config: CatalogConfig) -> tuple[Any, Any, Any]:
    table = _managed(config)
    keep = compare_and_append(
        table,
        expected_upper=Frontier.minimum(),
        new_upper=Frontier.at(10),
        batch_id="keep",
        time=5,
        add_files=stage_rows(table, "keep", [(5, "kept")]),
    )
    gone = compare_and_append(
        table,
        expected_upper=Frontier.at(10),
        new_upper=Frontier.at(20),
        batch_id="rolled-back",
        time=15,
        add_files=stage_rows(table, "rolled-back", [(15, "gone")]),
    )
    before = Timeline.of(table)
    assert before.upper == Frontier.at(20)
    assert before.snapshot_at(15) == gone.snapshot_ids[0]
    table.manage_snapshots().rollback_to_snapshot(keep.snapshot_ids[0]).commit()
    # The snapshot is still in the metadata, just no longer on main.
    assert table.metadata.snapshot_by_id(gone.snapshot_ids[0]) is not None
    return table, keep, gone


def test_a_rollback_that_lowers_the_upper_is_refused(sqlite_catalog_config: CatalogConfig) -> None:
    table, _, gone = _two_batches_then_rollback(sqlite_catalog_config)
    with pytest.raises(FrontierRegressionError, match="rolled back") as info:
        Timeline.of(table)
    message = str(info.value)
    assert "already reached 20" in message and "main's upper is 10" in message
    assert "set_current_snapshot" in message and "accept_frontier_regression" in message
    # Writing on top of it is refused and changes nothing.
    head = table.metadata.current_snapshot_id
    with pytest.raises(FrontierRegressionError):
        compare_and_append(
            table, expected_upper=Frontier.at(10), new_upper=Frontier.at(12), batch_id="redo"
        )
    table.refresh()
    assert table.metadata.current_snapshot_id == head
    # Moving main forward again recovers the timeline as it was.
    table.manage_snapshots().set_current_snapshot(gone.snapshot_ids[0]).commit()
    after = Timeline.of(table)
    assert after.upper == Frontier.at(20)
    assert after.snapshot_at(15) == gone.snapshot_ids[0]
    assert rows_of(table) == {(5, "kept"): 1, (15, "gone"): 1}


def test_a_rollback_is_refused_from_the_snapshot_log_without_the_property(
    sqlite_catalog_config: CatalogConfig,
) -> None:
    """Tables written before the high-water property: the snapshot log still tells."""
    table, _, gone = _two_batches_then_rollback(sqlite_catalog_config)
    with table.transaction() as tx:
        tx.remove_properties(TableKeys.UPPER_HIGH_WATER)
    assert TableKeys.UPPER_HIGH_WATER not in table.metadata.properties
    with pytest.raises(FrontierRegressionError, match=f"snapshot {gone.snapshot_ids[0]}"):
        Timeline.of(table)


def test_an_accepted_regression_reopens_the_times_explicitly(
    sqlite_catalog_config: CatalogConfig,
) -> None:
    table, keep, gone = _two_batches_then_rollback(sqlite_catalog_config)
    assert accept_frontier_regression(table) == Frontier.at(10)
    after = Timeline.of(table)
    assert after.head_snapshot_id == keep.snapshot_ids[0]
    assert after.upper == Frontier.at(10)
    assert after.find_batch("rolled-back") is None
    assert after.entry(gone.snapshot_ids[0]) is None
    assert after.snapshot_at(15, require_sealed=False) == keep.snapshot_ids[0]
    # A new batch continues from the accepted upper.
    redo = compare_and_append(
        table, expected_upper=Frontier.at(10), new_upper=Frontier.at(12), batch_id="redo"
    )
    assert redo.landed
    assert Timeline.of(table).upper == Frontier.at(12)
    assert table.metadata.properties[TableKeys.UPPER_HIGH_WATER] == "12"


def test_a_rolled_back_watermark_no_longer_counts(sqlite_catalog_config: CatalogConfig) -> None:
    table = _external(sqlite_catalog_config)
    keep = _append_after_clock_moves(table, 1, **{"my.watermark": "100"})
    gone = _append_after_clock_moves(table, 2, **{"my.watermark": "900"})
    policy = SummaryKeyUpper("my.watermark")
    assert Timeline.of(table, policy=policy).upper == Frontier.at(900)
    table.manage_snapshots().rollback_to_snapshot(keep.snapshot_id).commit()
    after = Timeline.of(table, policy=policy)
    assert after.upper == Frontier.at(100)
    assert [e.snapshot_id for e in after.entries] == [keep.snapshot_id]
    assert after.snapshot_at(gone.timestamp_ms, require_sealed=False) == keep.snapshot_id


def test_commits_on_another_branch_do_not_count(sqlite_catalog_config: CatalogConfig) -> None:
    table = _managed(sqlite_catalog_config)
    landed = compare_and_append(
        table, expected_upper=Frontier.minimum(), new_upper=Frontier.at(10), batch_id="main"
    )
    table.manage_snapshots().create_branch(landed.snapshot_ids[0], "audit").commit()
    table.append(_row(1, "side"), snapshot_properties=_ct("10", "99", "50", "side"), branch="audit")
    assert table.metadata.refs["audit"].snapshot_id != landed.snapshot_ids[0]
    timeline = Timeline.of(table)
    assert timeline.head_snapshot_id == landed.snapshot_ids[0]
    assert timeline.upper == Frontier.at(10)
    assert timeline.find_batch("side") is None
