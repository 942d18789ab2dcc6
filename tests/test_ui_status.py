"""The status page's data (airflow_provider_ct.ui.status) on real Iceberg tables.

Every table is built here with the core's compare-and-append at times the
test chooses, and every expected value is one the test chose (times, rows,
holds, ``now``), never one read back through the module under test.
"""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from airflow_provider_ct.collections import CollectionKind, register_collection
from airflow_provider_ct.collections.holds import register_reader
from airflow_provider_ct.collections.registry import set_table_properties
from airflow_provider_ct.core.catalog import CatalogConfig
from airflow_provider_ct.core.deletes import write_position_deletes
from airflow_provider_ct.core.frontier import Frontier, now_ms
from airflow_provider_ct.core.producers import TimedChange
from airflow_provider_ct.core.staging import batch_data_dir
from airflow_provider_ct.core.tables import create_managed_table
from airflow_provider_ct.ui.catalog import CatalogMissing, open_read_only
from airflow_provider_ct.ui.status import (
    NotShown,
    catalog_status,
    table_asset_uri,
    table_history,
)
from tests.conftest import SCHEMA, sqlite_config
from tests.helpers import append_between, live_data_files, local_path, stage_rows

T0 = 1_700_000_000_000
VIEW, LOG, EXTERNAL = "ui.view", "ui.log", "ui.external"


_append = append_between


def _build_view(catalog: Any) -> tuple[int, int]:
    """The view's history, times chosen here; returns the wall clock around the commits.

    1. batch b1 at T0+100: 3 rows inserted (refresh full);
    2. a foreign commit: 2 rows appended by plain PyIceberg (drift);
    3. batch b2 at T0+200: the 2 foreign rows removed, 1 row inserted (incremental);
    4. batch b3: frontier only, upper T0+300;
    5. batch b4: two times in one commit, T0+400 (2 rows) and T0+450 (1 row
       retracted with a position delete), upper T0+500.
    """
    before = now_ms()
    table = create_managed_table(catalog, VIEW, SCHEMA)
    files = stage_rows(table, "b1", [(1, "a"), (2, "b"), (3, "c")])
    _append(table, 0, T0 + 101, "b1", add_files=files, extra_summary={"ct.refresh": "full"})
    mine = set(live_data_files(table))
    table.append(pa.table({"k": [8, 9], "v": ["x", "y"]}, schema=SCHEMA))
    foreign = sorted(set(live_data_files(table)) - mine)
    files = stage_rows(table, "b2", [(4, "d")])
    _append(
        table,
        T0 + 101,
        T0 + 201,
        "b2",
        add_files=files,
        remove_files=foreign,
        time=T0 + 200,
        extra_summary={"ct.refresh": "incremental"},
    )
    _append(table, T0 + 201, T0 + 300, "b3")
    delete = batch_data_dir(table.location(), "b4") + f"/del-{uuid.uuid4().hex}.parquet"
    write_position_deletes(table.io, delete, [(sorted(live_data_files(table))[0], 0)])
    changes = [
        TimedChange(T0 + 400, add_files=tuple(stage_rows(table, "b4", [(5, "e"), (6, "f")]))),
        TimedChange(T0 + 450, delete_files=(delete,)),
    ]
    _append(table, T0 + 300, T0 + 500, "b4", changes=changes)
    return before, now_ms()


def _build_catalog(root: Path) -> tuple[CatalogConfig, tuple[int, int]]:
    config = sqlite_config(root)
    catalog = config.load()
    clock = _build_view(catalog)
    log = register_collection(catalog, LOG, SCHEMA, CollectionKind.APPEND_ONLY)
    _append(log, 0, T0 + 1000, "tick")
    register_reader(catalog, VIEW, [LOG], since=T0)
    register_reader(catalog, "report.export", [LOG], since=T0 + 7, reader_is_table=False)
    set_table_properties(log, {"ct.since": str(T0 + 5)})
    external = catalog.create_table(EXTERNAL, schema=SCHEMA)
    external.append(pa.table({"k": [1], "v": ["z"]}, schema=SCHEMA))
    return config, clock


@pytest.fixture
def built(tmp_path: Path) -> tuple[CatalogConfig, tuple[int, int]]:
    return _build_catalog(tmp_path)


def test_every_managed_table_is_listed_with_its_frontier_lag_and_holds(
    built: tuple[CatalogConfig, tuple[int, int]],
) -> None:
    config, _ = built
    now = T0 + 10_000
    status = catalog_status(open_read_only(config), "ct", now=now)
    assert status.error is None
    assert [t.name for t in status.tables] == [LOG, VIEW]  # the external table is not managed
    assert status.unmanaged == 1
    log, view = status.tables
    assert (view.upper, view.lag_ms, view.newest_time) == (Frontier.at(T0 + 500), 9_500, T0 + 450)
    # b1, the foreign append, b2, b3 and b4's two snapshots
    assert view.snapshots == 6
    assert view.kind == "managed" and view.error is None and view.holds == ()
    assert view.asset_uri == "iceberg://ct/ui/view"
    assert (log.upper, log.lag_ms, log.newest_time) == (Frontier.at(T0 + 1000), 9_000, None)
    assert (log.kind, log.since, log.snapshots) == ("collection (append-only)", T0 + 5, 1)
    holds = {h.reader: h.time for h in log.holds}
    # the view is a table: it holds its upper - 1; the export holds its registered since
    assert holds == {VIEW: T0 + 499, "report.export": T0 + 7}


def test_lag_is_never_negative_and_zero_when_now_is_below_the_upper(
    built: tuple[CatalogConfig, tuple[int, int]],
) -> None:
    config, _ = built
    status = catalog_status(open_read_only(config), "ct", now=T0 + 200)
    assert {t.name: t.lag_ms for t in status.tables} == {LOG: 0, VIEW: 0}


def test_history_reports_each_batch_rows_strategy_and_drift(
    built: tuple[CatalogConfig, tuple[int, int]],
) -> None:
    config, (before, after) = built
    history = table_history(open_read_only(config), "ct", VIEW, now=T0 + 10_000)
    got = [
        (b.batch_id, b.time, b.upper, b.snapshots, b.inserted, b.retracted, b.strategy)
        for b in history.batches
    ]
    assert got == [
        ("b1", T0 + 100, Frontier.at(T0 + 101), 1, 3, 0, "full"),
        ("b2", T0 + 200, Frontier.at(T0 + 201), 1, 1, 2, "incremental"),
        ("b3", None, Frontier.at(T0 + 300), 1, 0, 0, ""),
        ("b4", T0 + 450, Frontier.at(T0 + 500), 2, 2, 1, ""),
    ]
    assert [(b.drift_rows, b.drift_commits) for b in history.batches] == [
        (0, 0),
        (2, 1),  # b2 corrected the 2 rows the foreign append added
        (0, 0),
        (0, 0),
    ]
    assert [b.corrected_rows for b in history.batches] == [3, 3, 0, 3]
    for batch in history.batches:  # committed on the wall clock, long after their times
        assert before <= batch.committed_at_ms <= after
        assert before - batch.upper.time <= batch.lag_ms <= after - batch.upper.time  # type: ignore[operator]
    assert history.status.upper == Frontier.at(T0 + 500)


def test_history_limit_keeps_the_newest_batches(
    built: tuple[CatalogConfig, tuple[int, int]],
) -> None:
    config, _ = built
    history = table_history(open_read_only(config), "ct", VIEW, limit=2)
    assert [b.batch_id for b in history.batches] == ["b3", "b4"]


def test_unknown_or_unmanaged_tables_have_no_history(
    built: tuple[CatalogConfig, tuple[int, int]],
) -> None:
    catalog = open_read_only(built[0])
    with pytest.raises(NotShown, match="does not exist"):
        table_history(catalog, "ct", "ui.nope")
    with pytest.raises(NotShown, match="not managed"):
        table_history(catalog, "ct", EXTERNAL)


def test_a_broken_table_is_an_error_row_and_the_others_still_show(
    built: tuple[CatalogConfig, tuple[int, int]],
) -> None:
    config, _ = built
    catalog = config.load()
    bad = create_managed_table(catalog, "ui.bad_summary", SCHEMA)
    bad.append(
        pa.table({"k": [1], "v": ["a"]}, schema=SCHEMA), snapshot_properties={"ct.upper": "soon"}
    )
    gone = create_managed_table(catalog, "ui.gone", SCHEMA)
    local_path(gone.metadata_location).unlink()  # its metadata file lost
    status = catalog_status(open_read_only(config), "ct", now=T0)
    rows = {t.name: t for t in status.tables}
    assert set(rows) == {LOG, VIEW, "ui.bad_summary", "ui.gone"}
    assert "MalformedSummaryError" in (rows["ui.bad_summary"].error or "")
    assert "'soon'" in (rows["ui.bad_summary"].error or "")
    assert rows["ui.gone"].error and rows["ui.gone"].upper is None
    assert rows[VIEW].error is None and rows[VIEW].upper == Frontier.at(T0 + 500)
    assert table_history(open_read_only(config), "ct", "ui.bad_summary").batches == ()


def test_a_catalog_that_cannot_be_listed_is_an_error_not_an_exception(
    built: tuple[CatalogConfig, tuple[int, int]],
) -> None:
    config, _ = built
    catalog = open_read_only(config)
    with config.sqlite_path().open("r+b") as db:  # the database file is destroyed in place
        db.write(b"this is not a database" * 100)
    status = catalog_status(catalog, "ct", now=T0)
    assert status.tables == () and status.error
    assert "DatabaseError" in status.error or "not a database" in status.error


def test_the_page_opens_catalogs_read_only(tmp_path: Path) -> None:
    config = sqlite_config(tmp_path / "never-written")
    with pytest.raises(CatalogMissing, match="no database yet"):
        open_read_only(config)
    assert not config.sqlite_path().exists()
    assert not (tmp_path / "never-written").exists()  # no folder created either
    config, _ = _build_catalog(tmp_path / "built")
    catalog = open_read_only(config)
    with pytest.raises(Exception, match="readonly|read-only"):
        catalog.create_namespace("ui_not_allowed")
    assert ("ui_not_allowed",) not in config.load().list_namespaces()


def test_asset_uri_is_the_views_asset_uri() -> None:
    from airflow_provider_ct.views import view_asset

    assert table_asset_uri("ct", "shop.revenue") == view_asset("shop.revenue", "ct").uri
    assert table_asset_uri("lake", "a.b") == view_asset("a.b", "lake").uri


def test_sql_catalogs_refuse_the_pages_writes(catalog_config: CatalogConfig) -> None:
    """SQLite (``mode=ro``) and PostgreSQL (read-only transactions) both refuse writes."""
    create_managed_table(catalog_config.load(), "ro.t", SCHEMA)
    catalog = open_read_only(catalog_config)
    assert [t.name for t in catalog_status(catalog, "ct", now=T0).tables] == ["ro.t"]
    with pytest.raises(Exception, match="readonly|read-only"):
        catalog.create_namespace("ro_not_allowed")
    with pytest.raises(Exception, match="readonly|read-only"):
        catalog.drop_table("ro.t")
    assert [".".join(i) for i in catalog_config.load().list_tables("ro")] == ["ro.t"]
