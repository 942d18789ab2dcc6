"""Sizes read from snapshot summaries (``live_rows``, ``live_bytes``) against the table's files."""

from __future__ import annotations

import pyarrow as pa

from airflow_provider_ct.core.catalog import CatalogConfig
from airflow_provider_ct.core.tables import (
    UNKNOWN_ROWS,
    create_managed_table,
    live_bytes,
    live_rows,
)

SCHEMA = pa.schema([("id", pa.int64()), ("s", pa.string())])


def test_rows_and_bytes_follow_the_files_of_each_snapshot(
    sqlite_catalog_config: CatalogConfig,
) -> None:
    catalog = sqlite_catalog_config.load()
    table = create_managed_table(catalog, "totals.t", SCHEMA)
    assert (live_rows(table, None), live_bytes(table, None)) == (0, 0)  # no snapshot yet
    table.append(pa.table({"id": list(range(100)), "s": ["x"] * 100}, schema=SCHEMA))
    first = table.metadata.current_snapshot_id
    table.append(pa.table({"id": [7, 8], "s": ["y", None]}, schema=SCHEMA))
    sizes = table.inspect.files().column("file_size_in_bytes").to_pylist()
    assert live_rows(table, None) == 102
    assert live_bytes(table, None) == sum(sizes)
    assert live_rows(table, first) == 100
    assert 0 < live_bytes(table, first) < sum(sizes)
    assert live_rows(table, 12345) == live_bytes(table, 12345) == UNKNOWN_ROWS  # no such snapshot


def test_estimated_change_rows_sum_what_each_snapshot_touched_and_skip_compaction(
    sqlite_catalog_config: CatalogConfig,
) -> None:
    """The estimate the large-change rule uses, against the changes the test made itself."""
    from airflow_provider_ct.ivm.changes.table_changes import estimated_change_rows
    from tests.helpers import rewrite_files

    catalog = sqlite_catalog_config.load()
    table = create_managed_table(catalog, "totals.c", SCHEMA)
    table.append(pa.table({"id": list(range(100)), "s": ["x"] * 100}, schema=SCHEMA))
    start = table.metadata.current_snapshot_id
    table.append(pa.table({"id": list(range(10)), "s": ["y"] * 10}, schema=SCHEMA))
    # A copy-on-write delete of 3 rows of the 10-row file: that file (10 rows)
    # removed, a 7-row file added; reading the change costs 17 rows.
    table.delete("s = 'y' AND id < 3")
    assert table.scan().to_arrow().num_rows == 107
    # A compaction into one file (Iceberg's replace: the same rows) is no change.
    rewrite_files(table)
    table.append(pa.table({"id": [500, 501], "s": ["z", "z"]}, schema=SCHEMA))
    end = table.metadata.current_snapshot_id
    assert estimated_change_rows(table, start, end) == 10 + (10 + 7) + 2
    assert estimated_change_rows(table, None, end) == live_rows(table, end) == 109
    assert estimated_change_rows(table, end, start) == UNKNOWN_ROWS  # not an ancestor
    assert estimated_change_rows(table, start, start) == 0
