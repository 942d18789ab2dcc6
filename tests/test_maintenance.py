"""Snapshot expiry and compaction on real catalogs: holds, retention, carried frontiers."""

from __future__ import annotations

import threading
import time as _time
import uuid
from collections import Counter
from typing import Any

import pyarrow as pa
import pytest

from airflow_provider_ct.collections import (
    AppendOnlyCollection,
    CollectionKeys,
    MaintenanceSettings,
    Ticker,
    close_collection,
    compact,
    expire_snapshots,
    plan_expiry,
    read_holds,
    readable_since,
    register_collection,
    register_reader,
    release_reader,
)
from airflow_provider_ct.core.catalog import CatalogConfig
from airflow_provider_ct.core.commit import compare_and_append
from airflow_provider_ct.core.deletes import write_position_deletes
from airflow_provider_ct.core.frontier import Frontier, now_ms
from airflow_provider_ct.core.keys import SummaryKeys
from airflow_provider_ct.core.producers import TimedChange
from airflow_provider_ct.core.staging import batch_data_dir
from airflow_provider_ct.core.tables import create_managed_table
from airflow_provider_ct.core.timeline import Timeline
from tests.conftest import SCHEMA
from tests.helpers import advance, live_data_files, replace_contents, rows_of, stage_rows

INPUT, VIEW = "m.input", "m.view"
TIMES = [1_000 * i for i in range(1, 11)]


def _contents(i: int) -> pa.Table:
    return pa.table({"k": list(range(i)), "v": [f"t{i}"] * i}, schema=SCHEMA)


def _input_with_history(catalog: Any) -> tuple[Any, dict[int, int]]:
    """An input holding ``_contents(i)`` at time ``1000 * i``; {time: snapshot id}."""
    table = register_collection(catalog, INPUT, SCHEMA, "differential")
    for i, time in enumerate(TIMES, start=1):
        replace_contents(table, time, _contents(i))
        advance(table, time + 500)  # a tick between writes, as in production
    timeline = Timeline.of(table)
    return table, {t: timeline.snapshot_at(t) for t in TIMES}


def test_expiry_keeps_every_snapshot_a_registered_view_still_needs(
    catalog_config: CatalogConfig,
) -> None:
    catalog = catalog_config.load()
    table, at = _input_with_history(catalog)
    view = create_managed_table(catalog, VIEW, SCHEMA)
    advance(view, 4_000)  # the view has sealed through 4000: upper 4001
    # Without a hold, a zero retention would keep only the newest contents.
    unheld = plan_expiry(catalog, table, retention_ms=0, now=now_ms())
    assert at[4_000] in unheld.expire and at[5_000] in unheld.expire  # what holds must prevent

    register_reader(catalog, VIEW, [INPUT])
    assert [h.reader for h in read_holds(catalog.load_table(INPUT))] == [VIEW]
    files_at = {
        t: {f.file.file_path for f in table.scan(snapshot_id=at[t]).plan_files()} for t in TIMES
    }

    report = expire_snapshots(catalog, INPUT, retention_ms=0)
    assert report.status == "expired" and report.since == 4_000
    # Files only the expired snapshots used are deleted; the held ones' stay. (The
    # 3000 file is still named, as removed, by the 4000 snapshot: it goes with it.)
    assert report.files_deleted > 0
    assert not any(_local(p).exists() for t in TIMES[:2] for p in files_at[t])
    assert all(_local(p).exists() for t in TIMES[3:] for p in files_at[t])
    fresh = catalog.load_table(INPUT)
    kept = {s.snapshot_id for s in fresh.metadata.snapshots}
    # The view's next tick reads the input at times >= 4000: all of them are still there...
    for time in TIMES[3:]:
        assert at[time] in kept
        assert rows_of(fresh, at[time]) == Counter(
            (r["k"], r["v"]) for r in _contents(time // 1_000).to_pylist()
        )
    # ...and what only times before the hold needed is gone.
    assert not {at[t] for t in TIMES[:3]} & kept
    assert readable_since(fresh) == 4_000
    assert Timeline.of(fresh).snapshot_at(4_500) == at[4_000]

    # The hold follows the reader's upper as it ticks.
    advance(catalog.load_table(VIEW), 8_000)
    assert expire_snapshots(catalog, INPUT, retention_ms=0).since == 8_000
    kept = {s.snapshot_id for s in catalog.load_table(INPUT).metadata.snapshots}
    assert at[8_000] in kept and at[7_000] not in kept
    # A closed reader holds nothing.
    close_collection_like = catalog.load_table(VIEW)
    upper = Timeline.of(close_collection_like).upper
    compare_and_append(
        close_collection_like, expected_upper=upper, new_upper=Frontier.empty(), batch_id="c"
    )
    assert expire_snapshots(catalog, INPUT, retention_ms=0).since > 10_000


def test_expiry_keeps_what_a_task_registered_with_a_since_needs(
    catalog_config: CatalogConfig,
) -> None:
    catalog = catalog_config.load()
    _table, at = _input_with_history(catalog)
    # A continual task whose output does not exist yet will start at 3000.
    register_reader(catalog, "m.task_output", [INPUT], since=3_000)
    # A plain Airflow task that reads the input at 6000 (no table of its own).
    register_reader(catalog, "dag.report_task", [INPUT], since=6_000, reader_is_table=False)
    report = expire_snapshots(catalog, INPUT, retention_ms=0)
    assert report.since == 3_000
    assert set(report.holds) == {"m.task_output@3000", "dag.report_task@6000"}
    kept = {s.snapshot_id for s in catalog.load_table(INPUT).metadata.snapshots}
    assert {at[t] for t in TIMES[2:]} <= kept and at[2_000] not in kept
    # The task's output appears and seals through 6999: its hold moves to 6999.
    output = create_managed_table(catalog, "m.task_output", SCHEMA)
    advance(output, 6_999)
    assert expire_snapshots(catalog, INPUT, retention_ms=0).since == 6_000
    release_reader(catalog, "dag.report_task", [INPUT])
    assert expire_snapshots(catalog, INPUT, retention_ms=0).since == 6_999
    kept = {s.snapshot_id for s in catalog.load_table(INPUT).metadata.snapshots}
    assert at[6_000] in kept and at[5_000] not in kept


def test_retention_keeps_recent_heads_and_times(sqlite_catalog_config: CatalogConfig) -> None:
    catalog = sqlite_catalog_config.load()
    table, _at = _input_with_history(catalog)
    # Everything was committed a moment ago: a one-hour retention keeps it all.
    report = expire_snapshots(catalog, INPUT)
    assert report.status == "nothing-to-expire"
    assert len(catalog.load_table(INPUT).metadata.snapshots) == len(table.metadata.snapshots)


def test_expiry_in_read_only_mode_changes_nothing(
    sqlite_catalog_config: CatalogConfig, monkeypatch: pytest.MonkeyPatch
) -> None:
    catalog = sqlite_catalog_config.load()
    table, _ = _input_with_history(catalog)
    monkeypatch.setenv("CT_READ_ONLY", "1")
    assert expire_snapshots(catalog, INPUT, retention_ms=0).status == "read-only"
    assert compact(catalog, INPUT, min_files=2).status == "read-only"
    assert catalog.load_table(INPUT).metadata_location == table.metadata_location


def test_expiry_bounds_the_snapshot_count_of_a_ticking_collection(
    sqlite_catalog_config: CatalogConfig,
) -> None:
    catalog = sqlite_catalog_config.load()
    register_collection(catalog, "m.status", SCHEMA, "append-only")
    with AppendOnlyCollection.open(catalog, "m.status") as writer:
        writer.blind_write([(1, "up")])
    ticker = Ticker(
        catalog,
        interval_ms=40,
        maintenance=MaintenanceSettings(retention_ms=400, compact=False),
        maintenance_every=3,
        checkpoint_ms=200,
    )
    counts: list[int] = []
    stop = threading.Event()
    thread = threading.Thread(target=ticker.run, args=(stop,))
    thread.start()
    try:
        deadline = _time.monotonic() + 4
        while _time.monotonic() < deadline:
            _time.sleep(0.1)
            counts.append(len(catalog.load_table("m.status").metadata.snapshots))
    finally:
        stop.set()
        thread.join()
    advanced = (
        sum(1 for r in ticker.reports for o in r.outcomes if o.status == "advanced") + 1
    )  # + the write
    assert advanced >= 30, advanced  # enough ticks that an unbounded history would show
    assert max(counts[len(counts) // 2 :]) <= 20, counts
    expired = [e for r in ticker.reports if r.maintenance for e in r.maintenance.expiry]
    assert any(e.status == "expired" for e in expired)
    # Still readable at a recent time, and the write is still there.
    table = catalog.load_table("m.status")
    timeline = Timeline.of(table)
    assert rows_of(table, timeline.snapshot_at(int(timeline.upper.time) - 1)) == Counter(
        {(1, "up"): 1}
    )


# -- compaction -------------------------------------------------------------------------------
def _small_files_collection(catalog: Any, name: str, files: int) -> Any:
    register_collection(catalog, name, SCHEMA, "append-only")
    with AppendOnlyCollection.open(catalog, name, batch_interval_ms=0) as writer:
        for i in range(files):
            writer.blind_write([(i, f"r{i}"), (i, f"r{i}")])
    return catalog.load_table(name)


def test_compaction_rewrites_small_files_and_carries_the_upper_forward(
    catalog_config: CatalogConfig,
) -> None:
    catalog = catalog_config.load()
    table = _small_files_collection(catalog, "m.events", 6)
    before = Timeline.of(table)
    rows_before = rows_of(table)
    assert len(live_data_files(table)) == 6
    report = compact(catalog, "m.events", min_files=4)
    assert report.status == "compacted" and report.files_rewritten == 6
    assert report.files_written == 1 and report.records == 12
    table.refresh()
    assert len(live_data_files(table)) == 1
    assert rows_of(table) == rows_before
    head = table.metadata.current_snapshot()
    summary = head.summary.additional_properties
    assert summary[SummaryKeys.UPPER] == before.upper.to_summary()
    assert SummaryKeys.TIME not in summary and SummaryKeys.LOWER not in summary
    assert summary[CollectionKeys.MAINTENANCE] == "compaction"
    assert head.summary.operation.value == "replace"  # rows unchanged, by Iceberg's spec
    after = Timeline.of(table)  # would raise if the frontier keys were inconsistent
    assert after.upper == before.upper
    assert after.data_times() == before.data_times()  # compaction vouches for no time
    # The next write's ct.lower still equals the upper before it.
    with AppendOnlyCollection.open(catalog, "m.events") as writer:
        writer.blind_write([(100, "after")])
    table.refresh()
    last = Timeline.of(table).entries[-1]
    assert last.lower == before.upper
    assert rows_of(table) == rows_before + Counter({(100, "after"): 1})
    # Too few small files: nothing to do.
    assert compact(catalog, "m.events", min_files=4).status == "nothing-to-compact"


def test_compaction_leaves_files_with_position_deletes_alone(
    sqlite_catalog_config: CatalogConfig,
) -> None:
    catalog = sqlite_catalog_config.load()
    table = create_managed_table(catalog, "m.view_with_deletes", SCHEMA)
    upper = 0
    for i in range(4):
        files = stage_rows(table, f"w{i}", [(i, "a"), (i, "b")])
        compare_and_append(
            table,
            expected_upper=Frontier.at(upper),
            new_upper=Frontier.at(upper + 10),
            batch_id=f"w{i}",
            add_files=files,
        )
        upper += 10
    target = sorted(live_data_files(table))[0]
    delete_path = batch_data_dir(table.location(), "del") + f"/del-{uuid.uuid4().hex}.parquet"
    write_position_deletes(table.io, delete_path, [(target, 0)])
    assert compare_and_append(
        table,
        expected_upper=Frontier.at(upper),
        new_upper=Frontier.at(upper + 10),
        batch_id="del",
        changes=[TimedChange(upper + 5, delete_files=(delete_path,))],
    ).landed
    table.refresh()
    rows_before = rows_of(table)
    assert sum(rows_before.values()) == 7
    report = compact(catalog, "m.view_with_deletes", min_files=3)
    assert report.status == "compacted" and report.files_rewritten == 3
    table.refresh()
    assert target in live_data_files(table)  # the file with deletes was not touched
    assert rows_of(table) == rows_before


def test_compaction_that_loses_a_race_changes_nothing(sqlite_catalog_config: CatalogConfig) -> None:
    catalog = sqlite_catalog_config.load()
    table = _small_files_collection(catalog, "m.race", 5)
    rows_before = rows_of(table)

    class _TickFirst:
        def __init__(self, real: Any) -> None:
            self._real, self._done = real, False

        def commit_table(self, tbl: Any, requirements: Any, updates: Any) -> Any:
            if not self._done:
                self._done = True
                other = self._real.load_table("m.race")
                upper = Timeline.of(other).upper
                compare_and_append(
                    other,
                    expected_upper=upper,
                    new_upper=Frontier.at(int(upper.time) + 1),
                    batch_id="tick-in-between",
                )
            return self._real.commit_table(tbl, requirements, updates)

        def load_table(self, identifier: Any) -> Any:
            loaded = self._real.load_table(identifier)
            loaded.catalog = self
            return loaded

        def __getattr__(self, name: str) -> Any:
            return getattr(self._real, name)

    report = compact(_TickFirst(catalog), "m.race", min_files=2)
    assert report.status == "contended"
    fresh = catalog.load_table("m.race")
    assert fresh.metadata.current_snapshot().summary.additional_properties[
        SummaryKeys.BATCH_ID
    ] == ("tick-in-between")
    assert rows_of(fresh) == rows_before
    assert len(live_data_files(fresh)) == 5
    staged = list((_local(fresh.location()) / "data").glob("ct-batch=compact-*/*.parquet"))
    assert staged == []  # the loser's files are gone


def _local(uri: str) -> Any:
    from tests.helpers import local_path

    return local_path(uri)


def test_closed_collection_can_still_be_maintained(sqlite_catalog_config: CatalogConfig) -> None:
    catalog = sqlite_catalog_config.load()
    _small_files_collection(catalog, "m.closed", 4)
    close_collection(catalog, "m.closed")
    assert compact(catalog, "m.closed", min_files=2).status == "compacted"
    table = catalog.load_table("m.closed")
    assert Timeline.of(table).upper.is_empty
    assert table.metadata.current_snapshot().summary.additional_properties[SummaryKeys.UPPER] == (
        "empty"
    )


def test_expiry_keeps_the_snapshot_that_sets_the_upper_under_a_foreign_head(
    sqlite_catalog_config: CatalogConfig,
) -> None:
    """A frontier-only tick, then a foreign append: expiring the tick would lose the upper.

    Found by the model-checked run (seed 781668794): maintenance expired the
    tick's snapshot, main kept only the foreign one, and every later reader
    refused the table as regressed below its high-water upper.
    """
    catalog = sqlite_catalog_config.load()
    name = f"ns_{uuid.uuid4().hex[:8]}.state"
    catalog.create_namespace_if_not_exists(name.split(".")[0])
    table = create_managed_table(catalog, name, SCHEMA)
    advance(table, 1_000)  # the tick: ct.upper = 1001, no data
    table.refresh()
    table.append(pa.table({"k": [6], "v": ["foreign"]}, schema=SCHEMA))  # no ct.* keys
    expire_snapshots(catalog, name, retention_ms=0, now=now_ms() + 3_600_000)
    after = Timeline.of(catalog.load_table(name))
    assert after.upper == Frontier.at(1_001)
    assert rows_of(catalog.load_table(name)) == Counter({(6, "foreign"): 1})
