"""The status page, a table's history and lineage on S3 behind a REST catalog.

The same view history as ``tests/test_ui_status.py`` (times, rows, drift
chosen there), built on SeaweedFS's REST catalog with its files on S3: the
page reads the catalog read-only and the tables' metadata through their
own FileIO, so nothing in it may assume a local folder.
"""

from __future__ import annotations

import contextlib
from typing import Any

import pytest

from airflow_provider_ct.core.frontier import Frontier
from airflow_provider_ct.core.tables import create_managed_table
from airflow_provider_ct.lineage import describe_tick, location_name
from airflow_provider_ct.ui.catalog import open_read_only
from airflow_provider_ct.ui.status import catalog_status, table_history
from tests.conftest import SCHEMA
from tests.helpers import advance, mint_view_tick
from tests.objectstore import ObjectStore
from tests.test_ui_status import T0, VIEW, _build_view

pytestmark = [pytest.mark.objectstore]


def _fresh(catalog: Any, *names: str) -> None:
    for name in names:
        with contextlib.suppress(Exception):
            catalog.drop_table(name)


def test_status_page_and_history_read_a_view_on_s3_behind_rest(object_store: ObjectStore) -> None:
    config = object_store.rest_config()
    catalog = config.load()
    _fresh(catalog, VIEW)
    _build_view(catalog)
    assert catalog.load_table(VIEW).location().startswith("s3://")
    status = catalog_status(open_read_only(config), config.name, now=T0 + 10_000)
    assert status.error is None
    (view,) = [t for t in status.tables if t.name == VIEW]
    assert (view.upper, view.lag_ms, view.newest_time) == (Frontier.at(T0 + 500), 9_500, T0 + 450)
    assert (view.snapshots, view.kind, view.error) == (6, "managed", None)
    history = table_history(open_read_only(config), config.name, VIEW, now=T0 + 10_000)
    got = [(b.batch_id, b.inserted, b.retracted, b.drift_rows) for b in history.batches]
    assert got == [("b1", 3, 0, 0), ("b2", 1, 2, 2), ("b3", 0, 0, 0), ("b4", 2, 1, 0)]


def test_lineage_names_s3_inputs_by_their_warehouse_path(object_store: ObjectStore) -> None:
    config = object_store.rest_config()
    catalog = config.load()
    _fresh(catalog, "uilin.src", "uilin.v")
    source = create_managed_table(catalog, "uilin.src", SCHEMA)
    advance(source, T0 + 100)
    description = mint_view_tick(catalog, "uilin.v", "SELECT k, v FROM uilin.src", T0 + 100)
    assert description.description is not None, description.reason
    tick = describe_tick(config, description.description, sql="SELECT k, v FROM uilin.src")
    ((table, snapshot),) = tick.inputs
    assert (table.table, snapshot) == ("uilin.src", None)  # no rows at T0+100: empty
    namespace, name = location_name(table.location)
    assert namespace == config.warehouse.rstrip(
        "/"
    )  # s3://<bucket>, as Spark's integration names it
    assert name.endswith("uilin.src")
