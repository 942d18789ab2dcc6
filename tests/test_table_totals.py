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
