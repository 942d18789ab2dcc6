"""Managed collections on real catalogs: registry, blind writes, desired state, ticks, read-only."""

from __future__ import annotations

import threading
import time as _time
from collections import Counter
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from airflow_provider_ct.collections import (
    AppendOnlyCollection,
    CollectionKind,
    DifferentialCollection,
    Ticker,
    close_collection,
    list_collections,
    register_collection,
    set_read_only,
    tick_collections,
)
from airflow_provider_ct.collections.differential import list_pending
from airflow_provider_ct.core.catalog import CatalogConfig
from airflow_provider_ct.core.commit import compare_and_append
from airflow_provider_ct.core.faults import ENV as FAILPOINTS
from airflow_provider_ct.core.frontier import Frontier, now_ms
from airflow_provider_ct.core.keys import SummaryKeys
from airflow_provider_ct.core.staging import batch_data_dir
from airflow_provider_ct.core.tables import create_managed_table
from airflow_provider_ct.core.timeline import Timeline
from airflow_provider_ct.exceptions import (
    CollectionClosedError,
    CollectionError,
    NotACollectionError,
    ReadOnlyError,
    RetractionError,
)
from tests.conftest import SCHEMA
from tests.helpers import rows_of, stage_rows

LOG, STATE = "col.log", "col.state"


def _setup(config: CatalogConfig) -> Any:
    catalog = config.load()
    register_collection(catalog, LOG, SCHEMA, CollectionKind.APPEND_ONLY)
    register_collection(catalog, STATE, SCHEMA, "differential")
    return catalog


def _fresh(catalog: Any, name: str) -> Any:
    return catalog.load_table(name)


# -- registry -------------------------------------------------------------------------------
def test_registration_is_idempotent_and_kinds_are_listed(catalog_config: CatalogConfig) -> None:
    catalog = _setup(catalog_config)
    register_collection(catalog, LOG, SCHEMA, "append-only")  # again: fine
    create_managed_table(catalog, "col.view_like", SCHEMA)  # managed, not a collection
    found = {c.name: c.kind for c in list_collections(catalog)}
    assert found == {LOG: CollectionKind.APPEND_ONLY, STATE: CollectionKind.DIFFERENTIAL}
    with pytest.raises(NotACollectionError, match="already a append-only collection"):
        register_collection(catalog, LOG, SCHEMA, "differential")
    with pytest.raises(NotACollectionError, match="not a registered collection"):
        AppendOnlyCollection.open(catalog, "col.view_like")
    with pytest.raises(NotACollectionError, match="not append-only"):
        AppendOnlyCollection.open(catalog, STATE)


def test_unmanaged_table_is_adopted_with_its_rows(sqlite_catalog_config: CatalogConfig) -> None:
    """Until 2026-11 refused; now adopted (more in tests/test_collection_adoption.py)."""
    catalog = sqlite_catalog_config.load()
    catalog.create_namespace("ext")
    table = catalog.create_table("ext.t", schema=SCHEMA)
    table.append(pa.table({"k": [1], "v": ["a"]}, schema=SCHEMA))
    adopted = register_collection(catalog, "ext.t", SCHEMA, "append-only")
    assert Timeline.of(adopted).managed
    assert rows_of(adopted) == Counter({(1, "a"): 1})


# -- append-only ------------------------------------------------------------------------------
def test_blind_writes_land_at_or_after_the_upper_with_retractions(
    catalog_config: CatalogConfig,
) -> None:
    catalog = _setup(catalog_config)
    table = _fresh(catalog, LOG)
    # Someone sealed the future: a blind write must still land, at the upper.
    far = now_ms() + 3_600_000
    assert compare_and_append(
        table, expected_upper=Frontier.minimum(), new_upper=Frontier.at(far), batch_id="seal"
    ).landed
    with AppendOnlyCollection.open(catalog, LOG, batch_interval_ms=0) as writer:
        first = writer.blind_write([{"k": 1, "v": "a"}, {"k": 2, "v": "b"}, (2, "b")])
        assert first.time == far and first.upper == Frontier.at(far + 1)
        second = writer.blind_write([(2, "b"), (3, None)], diffs=[-1, 1])
        assert second.time == far + 1
        with pytest.raises(RetractionError, match="does not hold"):
            writer.blind_write([(9, "never")], diffs=[-1])
        cancelled = writer.blind_write([(5, "x"), (5, "x")], diffs=[1, -1])
        assert cancelled.time is None  # nothing to commit
    table.refresh()
    assert rows_of(table) == Counter({(1, "a"): 1, (2, "b"): 1, (3, None): 1})
    timeline = Timeline.of(table)
    assert rows_of(table, timeline.snapshot_at(far)) == Counter(
        {(1, "a"): 1, (2, "b"): 2}
    )  # history is intact: the retraction landed later, at its own time
    assert timeline.upper == Frontier.at(far + 2)


def test_bad_rows_are_refused_before_queueing(sqlite_catalog_config: CatalogConfig) -> None:
    catalog = _setup(sqlite_catalog_config)
    with AppendOnlyCollection.open(catalog, LOG) as writer:
        with pytest.raises(CollectionError, match="unknown column"):
            writer.submit([{"k": 1, "nope": 2}])
        with pytest.raises(CollectionError, match="2 column"):
            writer.submit([(1,)])
        with pytest.raises(CollectionError, match="do not fit"):
            writer.submit([{"k": "not a number", "v": "a"}])
    assert _fresh(catalog, LOG).metadata.current_snapshot() is None


def test_close_writes_together_are_batched_one_commit_per_interval(
    sqlite_catalog_config: CatalogConfig,
) -> None:
    catalog = _setup(sqlite_catalog_config)
    interval_ms = 400
    receipts = []
    started = _time.monotonic()
    with AppendOnlyCollection.open(catalog, LOG, batch_interval_ms=interval_ms) as writer:
        futures = []
        for burst in range(3):
            futures += [writer.submit([(burst * 100 + i, "w")]) for i in range(15)]
            _time.sleep(0.05)
        receipts = [f.result(timeout=60) for f in futures]
    elapsed_ms = (_time.monotonic() - started) * 1000
    batches = {r.batch_id for r in receipts}
    assert len(batches) < len(receipts) / 3  # really batched
    # At most one commit per interval (plus the first).
    assert len(batches) <= elapsed_ms // interval_ms + 1
    table = _fresh(catalog, LOG)
    times = [e.time for e in Timeline.of(table).entries if e.time is not None]
    assert len(times) == len(batches)
    assert sum(rows_of(table).values()) == 45


class _SealBeforeCommit:
    """A real catalog wrapper: before our commit, another writer moves the upper (once each).

    With ``rows`` the other writer also adds them (a data file): the table's
    files change, not only its upper.
    """

    def __init__(
        self, real: Any, name: str, times: int, rows: list[tuple[int, str | None]] | None = None
    ) -> None:
        self._real, self._name, self._left, self._rows = real, name, times, rows
        self.snapshots: list[int] = []  # the interlopers' commits, as snapshot timestamps

    def commit_table(self, table: Any, requirements: Any, updates: Any) -> Any:
        if self._left > 0:
            self._left -= 1
            other = self._real.load_table(self._name)
            upper = Timeline.of(other).upper
            batch_id = f"interloper-{self._left}-{len(self.snapshots)}"
            files = stage_rows(other, batch_id, self._rows) if self._rows else []
            assert compare_and_append(
                other,
                expected_upper=upper,
                new_upper=Frontier.at(int(upper.time) + 1000),
                batch_id=batch_id,
                add_files=files,
            ).landed
            other.refresh()
            self.snapshots.append(other.metadata.current_snapshot().timestamp_ms)
        return self._real.commit_table(table, requirements, updates)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._real, name)


def _batch_files(table: Any, batch_id: str | None) -> dict[str, float]:
    """The files in a batch's staging folder, with their modification times (epoch ms)."""
    assert batch_id is not None
    folder = Path(batch_data_dir(table.location(), batch_id).removeprefix("file://"))
    return {str(p): p.stat().st_mtime * 1000 for p in folder.rglob("*.parquet")}


def _landed_files(table: Any, time: int | None) -> set[str]:
    assert time is not None
    snapshot = Timeline.of(table).snapshot_at(time)
    return {
        t.file.file_path.removeprefix("file://")
        for t in table.scan(snapshot_id=snapshot).plan_files()
    }


def test_contention_is_retried_at_a_new_time_never_reported(
    catalog_config: CatalogConfig,
) -> None:
    catalog = _setup(catalog_config)
    table = _fresh(catalog, LOG)
    table.catalog = _SealBeforeCommit(catalog, LOG, times=3)
    writer = AppendOnlyCollection(table, batch_interval_ms=0)
    receipt = writer.blind_write([(1, "once")])
    writer.shutdown()
    assert receipt.attempts == 4
    fresh = _fresh(catalog, LOG)
    assert rows_of(fresh) == Counter({(1, "once"): 1})  # not duplicated by the retries
    timeline = Timeline.of(fresh)
    assert [e.batch_id for e in timeline.entries].count(receipt.batch_id) == 1
    assert timeline.entry(timeline.snapshot_at(receipt.time)).batch_id == receipt.batch_id


def test_a_write_losing_to_ticks_keeps_its_staged_files_and_restages_when_files_change(
    sqlite_catalog_config: CatalogConfig,
) -> None:
    """A tick leaves the same files: the retry commits what was staged before it lost.

    Re-reading and staging again on every lost race made a writer on a busy
    machine lose to tick after tick. When the interloper changed the files
    (a data commit), the change is staged again and the lost files deleted.
    """
    catalog = _setup(sqlite_catalog_config)
    with AppendOnlyCollection.open(catalog, LOG, batch_interval_ms=0) as writer:
        writer.blind_write([(1, "a"), (2, "b")])
    table = _fresh(catalog, LOG)
    ticks = _SealBeforeCommit(catalog, LOG, times=2)
    table.catalog = ticks
    with AppendOnlyCollection(table, batch_interval_ms=0) as writer:
        receipt = writer.blind_write([(1, "a"), (3, "c")], [-1, 1])
    assert receipt.attempts == 3
    staged = _batch_files(table, receipt.batch_id)
    assert set(staged) <= _landed_files(_fresh(catalog, LOG), receipt.time)
    assert len(staged) == 1 and max(staged.values()) <= ticks.snapshots[0], (staged, ticks)
    assert rows_of(_fresh(catalog, LOG)) == Counter({(2, "b"): 1, (3, "c"): 1})

    table = _fresh(catalog, LOG)
    data = _SealBeforeCommit(catalog, LOG, times=1, rows=[(9, "z")])
    table.catalog = data
    with AppendOnlyCollection(table, batch_interval_ms=0) as writer:
        receipt = writer.blind_write([(2, "b")], [-1])
    assert receipt.attempts == 2
    staged = _batch_files(table, receipt.batch_id)
    assert set(staged) == _landed_files(_fresh(catalog, LOG), receipt.time) & set(staged)
    assert len(staged) == 1 and min(staged.values()) >= data.snapshots[0]  # staged again
    assert rows_of(_fresh(catalog, LOG)) == Counter({(3, "c"): 1, (9, "z"): 1})


# -- differential -----------------------------------------------------------------------------
def test_a_correction_losing_to_ticks_keeps_its_staged_files(
    sqlite_catalog_config: CatalogConfig,
) -> None:
    catalog = _setup(sqlite_catalog_config)
    DifferentialCollection.open(catalog, STATE).replace([(1, "a"), (2, "b")])
    writer = DifferentialCollection.open(catalog, STATE)
    ticks = _SealBeforeCommit(catalog, STATE, times=2)
    writer.table.catalog = ticks
    result = writer.replace([(1, "a"), (3, "c")])
    assert result.landed and result.attempts == 3
    staged = _batch_files(writer.table, result.batch_id)
    assert set(staged) <= _landed_files(_fresh(catalog, STATE), result.time)
    assert len(staged) == 1 and max(staged.values()) <= ticks.snapshots[0], (staged, ticks)
    assert rows_of(_fresh(catalog, STATE)) == Counter({(1, "a"): 1, (3, "c"): 1})


def test_replace_and_update_correct_the_table_with_a_multiset_diff(
    catalog_config: CatalogConfig,
) -> None:
    catalog = _setup(catalog_config)
    writer = DifferentialCollection.open(catalog, STATE)
    first = writer.replace([(1, "a"), (2, "b"), (2, "b")])
    assert first.landed and (first.inserted, first.retracted) == (3, 0)
    again = writer.replace([(2, "b"), (1, "a"), (2, "b")])  # same multiset: nothing to do
    assert again.status == "in-sync"
    upd = writer.update(retract=[(2, "b")], insert=[(3, "c")])
    assert upd.landed and (upd.inserted, upd.retracted) == (1, 1)
    table = _fresh(catalog, STATE)
    assert rows_of(table) == Counter({(1, "a"): 1, (2, "b"): 1, (3, "c"): 1})
    with pytest.raises(RetractionError):
        writer.update(retract=[(7, "zz")])
    # A fresh writer (another task) applies its update to the table's head.
    other = DifferentialCollection.open(catalog, STATE)
    other.update(retract=[(1, "a")], insert=[(1, "a2")])
    table.refresh()
    assert rows_of(table) == Counter({(1, "a2"): 1, (2, "b"): 1, (3, "c"): 1})
    timeline = Timeline.of(table)
    assert rows_of(table, timeline.snapshot_at(first.time)) == Counter({(1, "a"): 1, (2, "b"): 2})
    # Corrections rewrite files instead of writing delete files.
    assert all(not t.delete_files for t in table.scan().plan_files())


def test_conflicting_commit_makes_the_writer_resync_to_the_table(
    catalog_config: CatalogConfig,
) -> None:
    catalog = _setup(catalog_config)
    writer = DifferentialCollection.open(catalog, STATE)
    writer.replace([(1, "a"), (2, "b")])

    class _Drift:
        """Right before our commit, a foreign writer adds a row (real commit)."""

        def __init__(self, real: Any) -> None:
            self._real, self._done = real, False

        def commit_table(self, table: Any, requirements: Any, updates: Any) -> Any:
            if not self._done:
                self._done = True
                other = self._real.load_table(STATE)
                upper = Timeline.of(other).upper
                files = stage_rows(other, "foreign", [(99, "foreign")])
                assert compare_and_append(
                    other,
                    expected_upper=upper,
                    new_upper=Frontier.at(int(upper.time) + 5),
                    batch_id="foreign",
                    add_files=files,
                ).landed
            return self._real.commit_table(table, requirements, updates)

        def __getattr__(self, name: str) -> Any:
            return getattr(self._real, name)

    writer.table.catalog = _Drift(catalog)
    result = writer.replace([(1, "a"), (3, "c")])
    assert result.landed and result.attempts == 2
    table = _fresh(catalog, STATE)
    # The re-sync retracted the foreign row too: the table holds the desired state.
    assert rows_of(table) == Counter({(1, "a"): 1, (3, "c"): 1})
    # And a remembered desired state corrects later drift on sync().
    upper = Timeline.of(table).upper
    compare_and_append(
        table,
        expected_upper=upper,
        new_upper=Frontier.at(int(upper.time) + 5),
        batch_id="drift2",
        add_files=stage_rows(table, "drift2", [(42, "drift")]),
    )
    assert writer.sync().landed
    assert rows_of(_fresh(catalog, STATE)) == Counter({(1, "a"): 1, (3, "c"): 1})


def test_a_correction_whose_commit_outcome_was_unknown_reports_where_it_landed(
    sqlite_catalog_config: CatalogConfig, tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The commit lands, then the connection drops: the result must still say "landed at t"."""
    catalog = _setup(sqlite_catalog_config)
    writer = DifferentialCollection.open(catalog, STATE, clock=lambda: 5_000)
    writer.replace([(1, "a")])
    marker = tmp_path / "fired"
    monkeypatch.setenv(FAILPOINTS, f"commit.after-catalog-commit=raise@{marker}")
    result = writer.replace([(1, "a"), (2, "b")])
    assert marker.exists()  # the first commit landed and then reported an unknown outcome
    assert result.landed and result.time == 5_001 and result.attempts == 2, result
    assert (result.inserted, result.retracted) == (1, 0)
    table = _fresh(catalog, STATE)
    assert rows_of(table, Timeline.of(table).snapshot_at(5_001)) == Counter(
        {(1, "a"): 1, (2, "b"): 1}
    )
    assert [e.batch_id for e in Timeline.of(table).entries].count(result.batch_id) == 1


# -- ticking and closing ----------------------------------------------------------------------
def test_tick_advances_every_collection_best_effort(catalog_config: CatalogConfig) -> None:
    catalog = _setup(catalog_config)
    create_managed_table(catalog, "col.not_a_collection", SCHEMA)
    report = tick_collections(catalog, now=1_000)
    assert report.statuses() == {LOG: "advanced", STATE: "advanced"}
    for name in (LOG, STATE):
        timeline = Timeline.of(_fresh(catalog, name))
        assert timeline.upper == Frontier.at(1_000)
        assert timeline.entries[-1].time is None  # frontier-only: vouches for no time
    assert _fresh(catalog, "col.not_a_collection").metadata.current_snapshot() is None
    # A second ticker at the same time finds the work done.
    assert tick_collections(catalog, now=1_000).statuses() == {LOG: "current", STATE: "current"}
    # Another ticker that read the old upper loses the race, which is fine.
    stale = _fresh(catalog, LOG)
    tick_collections(catalog, now=2_000)
    lost = compare_and_append(
        stale, expected_upper=Frontier.at(1_000), new_upper=Frontier.at(1_500), batch_id="late"
    )
    assert not lost.landed and lost.upper == Frontier.at(2_000)


def test_a_ticker_leaves_a_collection_written_within_half_its_interval(
    sqlite_catalog_config: CatalogConfig,
) -> None:
    """As a write resets Materialize's tick interval: no tick races a busy writer."""
    catalog = _setup(sqlite_catalog_config)
    clock = [10_000]
    ticker = Ticker(catalog, interval_ms=1_000, clock=lambda: clock[0])
    assert ticker.tick().statuses() == {LOG: "advanced", STATE: "advanced"}
    with AppendOnlyCollection.open(catalog, LOG, clock=lambda: 10_700) as writer:
        assert writer.blind_write([(1, "a")]).upper == Frontier.at(10_701)
    clock[0] = 11_000  # the write moved LOG's upper 299 ms ago; STATE's last moved 1 s ago
    assert ticker.tick().statuses() == {LOG: "current", STATE: "advanced"}
    assert Timeline.of(_fresh(catalog, LOG)).upper == Frontier.at(10_701)
    clock[0] = 11_201  # 500 ms after the write: ticked again
    assert ticker.tick().statuses() == {LOG: "advanced", STATE: "current"}
    assert Timeline.of(_fresh(catalog, LOG)).upper == Frontier.at(11_201)
    # A tick at an explicit time (the tick DAG's) leaves nothing alone.
    assert tick_collections(catalog, now=11_202).statuses() == {LOG: "advanced", STATE: "advanced"}


def test_collection_left_alone_stays_readable_at_recent_times(
    sqlite_catalog_config: CatalogConfig,
) -> None:
    catalog = _setup(sqlite_catalog_config)
    with AppendOnlyCollection.open(catalog, LOG) as writer:
        landed = writer.blind_write([(1, "only write")])
    interval_ms = 500
    ticker = Ticker(catalog, interval_ms=interval_ms)
    durations: list[float] = []
    original = ticker.tick

    def timed_tick() -> Any:
        started = _time.monotonic()
        try:
            return original()
        finally:
            durations.append((_time.monotonic() - started) * 1000)

    ticker.tick = timed_tick  # type: ignore[method-assign]
    stop = threading.Event()
    thread = threading.Thread(target=ticker.run, args=(stop,))
    thread.start()
    staleness: list[int] = []
    try:
        _time.sleep(1.0)
        for _ in range(8):  # several intervals, sampled at arbitrary moments
            _time.sleep(0.37)
            table = _fresh(catalog, LOG)
            now = now_ms()
            timeline = Timeline.of(table)
            staleness.append(now - int(timeline.upper.time))
            # Readable at a recent time: sealed, and it is the only write.
            recent = int(timeline.upper.time) - 1
            assert timeline.snapshot_at(recent) is not None
            assert rows_of(table, timeline.snapshot_at(recent)) == Counter({(1, "only write"): 1})
    finally:
        stop.set()
        thread.join()
    assert len(durations) >= 4
    # Within one interval, plus the time a tick takes and some scheduling slack.
    assert max(staleness) <= interval_ms + max(durations) + 250, (staleness, durations)
    assert Timeline.of(_fresh(catalog, LOG)).upper.time > int(landed.time) + 2 * interval_ms


def test_closed_collection_refuses_writes_and_ticks_skip_it(
    catalog_config: CatalogConfig,
) -> None:
    catalog = _setup(catalog_config)
    DifferentialCollection.open(catalog, STATE).replace([(1, "a")])
    assert close_collection(catalog, LOG).is_empty
    assert close_collection(catalog, LOG).is_empty  # idempotent
    close_collection(catalog, STATE)
    with (
        AppendOnlyCollection.open(catalog, LOG) as writer,
        pytest.raises(CollectionClosedError, match="closed"),
    ):
        writer.blind_write([(1, "late")])
    with pytest.raises(CollectionClosedError, match="closed"):
        DifferentialCollection.open(catalog, STATE).replace([(2, "b")])
    assert tick_collections(catalog, now=now_ms()).statuses() == {LOG: "closed", STATE: "closed"}
    assert rows_of(_fresh(catalog, STATE)) == Counter({(1, "a"): 1})


# -- read-only mode ---------------------------------------------------------------------------
def test_read_only_deployment_writes_nothing_then_desired_state_lands(
    catalog_config: CatalogConfig, monkeypatch: pytest.MonkeyPatch
) -> None:
    catalog = _setup(catalog_config)
    DifferentialCollection.open(catalog, STATE).replace([(1, "before")])
    with AppendOnlyCollection.open(catalog, LOG) as writer:
        writer.blind_write([(1, "before")])
    locations = {n: _fresh(catalog, n).metadata_location for n in (LOG, STATE)}

    monkeypatch.setenv("CT_READ_ONLY", "true")
    with (
        AppendOnlyCollection.open(catalog, LOG) as writer,
        pytest.raises(ReadOnlyError, match="read-only"),
    ):
        writer.blind_write([(2, "during")])
    stated = DifferentialCollection.open(catalog, STATE)
    assert stated.replace([(1, "before"), (2, "during")]).status == "pending"
    # A second, separate task updates the desired state while still read-only.
    other = DifferentialCollection.open(catalog, STATE)
    assert other.update(retract=[(1, "before")], insert=[(3, "later")]).status == "pending"
    assert set(tick_collections(catalog).statuses().values()) == {"read-only"}
    with pytest.raises(ReadOnlyError):
        close_collection(catalog, LOG)
    # Nothing was committed: not a snapshot, not a property.
    assert {n: _fresh(catalog, n).metadata_location for n in (LOG, STATE)} == locations
    assert rows_of(_fresh(catalog, STATE)) == Counter({(1, "before"): 1})

    monkeypatch.delenv("CT_READ_ONLY")
    report = tick_collections(catalog)
    assert report.statuses() == {LOG: "advanced", STATE: "current"}
    assert report.outcomes[1].synced == "landed"
    table = _fresh(catalog, STATE)
    assert rows_of(table) == Counter({(2, "during"): 1, (3, "later"): 1})
    assert list_pending(table) == []


def test_read_only_collection_switch_is_per_collection(catalog_config: CatalogConfig) -> None:
    catalog = _setup(catalog_config)
    set_read_only(catalog, STATE, True)
    head = _fresh(catalog, STATE).metadata.current_snapshot()
    pending = DifferentialCollection.open(catalog, STATE).replace([(5, "wanted")])
    assert pending.status == "pending"
    assert tick_collections(catalog, now=10).statuses() == {LOG: "advanced", STATE: "read-only"}
    assert _fresh(catalog, STATE).metadata.current_snapshot() == head
    set_read_only(catalog, STATE, False)
    report = tick_collections(catalog, now=20)
    # The pending state landed at the tick's time, which sealed it already.
    assert report.statuses()[STATE] == "current"
    assert report.outcomes[1].synced == "landed"
    table = _fresh(catalog, STATE)
    assert rows_of(table) == Counter({(5, "wanted"): 1})
    assert Timeline.of(table).upper == Frontier.at(21)  # landed at 20, sealed through it
    entries = Timeline.of(table).entries
    assert entries[-1].summary[SummaryKeys.TIME] == "20"


def test_pending_state_of_a_closed_collection_does_not_break_ticks(
    sqlite_catalog_config: CatalogConfig,
) -> None:
    catalog = _setup(sqlite_catalog_config)
    set_read_only(catalog, STATE, True)
    assert DifferentialCollection.open(catalog, STATE).replace([(1, "x")]).status == "pending"
    set_read_only(catalog, STATE, False)
    close_collection(catalog, STATE)
    report = tick_collections(catalog, now=50)
    assert report.statuses() == {LOG: "advanced", STATE: "closed"}
    assert report.errors == {}
    assert rows_of(_fresh(catalog, STATE)) == Counter()
