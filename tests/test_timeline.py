"""Timelines of managed and external tables, on a real SQLite catalog."""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pytest

from airflow_provider_ct.core.catalog import CatalogConfig
from airflow_provider_ct.core.commit import compare_and_append
from airflow_provider_ct.core.frontier import Frontier
from airflow_provider_ct.core.tables import create_managed_table
from airflow_provider_ct.core.timeline import SummaryKeyUpper, Timeline, WallClockUpper
from airflow_provider_ct.exceptions import (
    FrontierRegressionError,
    MalformedSummaryError,
    TimeNotSealedError,
)
from tests.conftest import SCHEMA
from tests.helpers import rows_of, stage_rows

ROW = pa.table({"k": [1], "v": ["x"]}, schema=SCHEMA)


def _managed(config: CatalogConfig, name: str = "ns.t") -> Any:
    return create_managed_table(config.load(), name, SCHEMA)


def _raw_commit(table: Any, **summary: str) -> int:
    """A commit with hand-written ct.* keys (as a buggy or hostile writer would)."""
    table.append(ROW, snapshot_properties=summary)
    return int(table.metadata.current_snapshot().snapshot_id)


def test_managed_timeline_reads_upper_times_and_batches(
    sqlite_catalog_config: CatalogConfig,
) -> None:
    table = _managed(sqlite_catalog_config)
    first = compare_and_append(
        table,
        expected_upper=Frontier.minimum(),
        new_upper=Frontier.at(11),
        batch_id="b10",
        time=10,
        add_files=stage_rows(table, "b10", [(10, "a")]),
        inputs={"ns.in": 42, "ns.empty": None},
    )
    frontier_only = compare_and_append(
        table, expected_upper=Frontier.at(11), new_upper=Frontier.at(20), batch_id="tick"
    )
    second = compare_and_append(
        table,
        expected_upper=Frontier.at(20),
        new_upper=Frontier.at(31),
        batch_id="b30",
        time=30,
        add_files=stage_rows(table, "b30", [(30, "b")]),
    )
    timeline = Timeline.of(table)
    assert timeline.managed
    assert timeline.upper == Frontier.at(31)
    assert timeline.upper_snapshot_id == second.snapshot_ids[-1] == timeline.head_snapshot_id
    assert timeline.data_times() == [(10, first.snapshot_ids[0]), (30, second.snapshot_ids[0])]
    assert timeline.snapshot_at(9) is None  # empty before the first data time
    assert timeline.snapshot_at(10) == first.snapshot_ids[0]
    # The frontier-only snapshot vouches for no time: contents at 25 are those of t=10.
    assert timeline.snapshot_at(25) == first.snapshot_ids[0]
    assert frontier_only.snapshot_ids[0] not in {s for _, s in timeline.data_times()}
    assert timeline.snapshot_at(30) == second.snapshot_ids[0]
    with pytest.raises(TimeNotSealedError, match="time 31 is not sealed"):
        timeline.snapshot_at(31)
    assert timeline.snapshot_at(31, require_sealed=False) == second.snapshot_ids[0]
    found = timeline.find_batch("b10")
    assert found is not None and found.inputs == {"ns.in": 42, "ns.empty": None}
    assert timeline.find_batch("nope") is None


def test_foreign_commits_on_a_managed_table_do_not_move_the_timeline(
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
    table.append(pa.table({"k": [9], "v": ["drift"]}, schema=SCHEMA))  # no ct.* keys
    timeline = Timeline.of(table)
    assert timeline.upper == Frontier.at(5)
    assert timeline.head_snapshot_id != landed.snapshot_ids[0]
    assert timeline.snapshot_at(4) == landed.snapshot_ids[0]
    assert rows_of(table, timeline.snapshot_at(4)) == {(4, "ours"): 1}


def test_an_upper_that_goes_backwards_is_refused(sqlite_catalog_config: CatalogConfig) -> None:
    table = _managed(sqlite_catalog_config)
    good = _raw_commit(table, **{"ct.lower": "0", "ct.upper": "20", "ct.time": "10"})
    bad = _raw_commit(table, **{"ct.lower": "20", "ct.upper": "15", "ct.time": "12"})
    with pytest.raises(FrontierRegressionError) as info:
        Timeline.of(table)
    assert str(good) in str(info.value) and str(bad) in str(info.value)
    assert "never go backwards" in str(info.value)


def test_a_lower_that_does_not_continue_the_upper_is_refused(
    sqlite_catalog_config: CatalogConfig,
) -> None:
    table = _managed(sqlite_catalog_config)
    _raw_commit(table, **{"ct.lower": "0", "ct.upper": "20", "ct.time": "10"})
    gap = _raw_commit(table, **{"ct.lower": "25", "ct.upper": "30", "ct.time": "26"})
    with pytest.raises(FrontierRegressionError, match=f"snapshot {gap} claims ct.lower=25"):
        Timeline.of(table)


@pytest.mark.parametrize(
    ("summary", "key"),
    [
        ({"ct.upper": "abc"}, "ct.upper"),
        ({"ct.upper": "20", "ct.time": "-1"}, "ct.time"),
        ({"ct.upper": "20", "ct.lower": "1.5"}, "ct.lower"),
        ({"ct.upper": "20", "ct.inputs": "not json"}, "ct.inputs"),
        ({"ct.upper": "20", "ct.inputs": '{"a": "x"}'}, "ct.inputs"),
        ({"ct.upper": "20", "ct.time": "20"}, "ct.time"),
        ({"ct.managed-marker": "1", "ct.time": "5"}, "ct.upper"),
    ],
)
def test_malformed_summary_values_name_the_key_and_the_snapshot(
    sqlite_catalog_config: CatalogConfig, summary: dict[str, str], key: str
) -> None:
    table = _managed(sqlite_catalog_config)
    snapshot = _raw_commit(table, **summary)
    with pytest.raises(MalformedSummaryError) as info:
        Timeline.of(table)
    assert key in str(info.value) and f"snapshot {snapshot}" in str(info.value)


def test_only_mains_ancestry_counts(sqlite_catalog_config: CatalogConfig) -> None:
    table = _managed(sqlite_catalog_config)
    keep = compare_and_append(
        table, expected_upper=Frontier.minimum(), new_upper=Frontier.at(10), batch_id="keep"
    )
    compare_and_append(
        table, expected_upper=Frontier.at(10), new_upper=Frontier.at(20), batch_id="rolled-back"
    )
    assert Timeline.of(table).upper == Frontier.at(20)
    table.manage_snapshots().rollback_to_snapshot(keep.snapshot_ids[0]).commit()
    timeline = Timeline.of(table)
    assert timeline.upper == Frontier.at(10)
    assert timeline.find_batch("rolled-back") is None


def test_external_tables_use_commit_times_and_an_upper_policy(
    sqlite_catalog_config: CatalogConfig,
) -> None:
    catalog = sqlite_catalog_config.load()
    catalog.create_namespace("ext")
    table = catalog.create_table("ext.events", schema=SCHEMA)
    table.append(ROW)
    first = table.metadata.current_snapshot()
    table.append(ROW, snapshot_properties={"my.watermark": "123"})
    second = table.metadata.current_snapshot()
    wall = Timeline.of(table, policy=WallClockUpper(500), now=second.timestamp_ms + 10_000)
    assert not wall.managed
    assert wall.upper == Frontier.at(second.timestamp_ms + 9_500)
    assert wall.data_times() == [
        (first.timestamp_ms, first.snapshot_id),
        (second.timestamp_ms, second.snapshot_id),
    ]
    assert wall.snapshot_at(first.timestamp_ms - 1) is None
    assert wall.snapshot_at(first.timestamp_ms) == first.snapshot_id
    assert wall.snapshot_at(second.timestamp_ms + 1) == second.snapshot_id
    # Not yet final: within the allowance.
    with pytest.raises(TimeNotSealedError):
        wall.snapshot_at(second.timestamp_ms + 9_600)
    watermark = Timeline.of(table, policy=SummaryKeyUpper("my.watermark"))
    assert watermark.upper == Frontier.at(123)
    assert Timeline.of(table, policy=SummaryKeyUpper("absent")).upper == Frontier.minimum()
    table.append(ROW, snapshot_properties={"my.watermark": "soon"})
    with pytest.raises(MalformedSummaryError, match="'my.watermark'"):
        Timeline.of(table, policy=SummaryKeyUpper("my.watermark"))
