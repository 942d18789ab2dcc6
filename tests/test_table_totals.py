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


def test_changed_rows_sum_what_each_snapshot_touched_and_skip_compaction(
    sqlite_catalog_config: CatalogConfig,
) -> None:
    """The estimate the large-change rule uses, against the changes the test made itself."""
    import uuid

    import pyarrow.parquet as pq
    from pyiceberg.io.pyarrow import parquet_files_to_data_files

    from airflow_provider_ct.core.commit import replace_producer
    from airflow_provider_ct.core.tables import changed_rows, ensure_name_mapping
    from tests.helpers import local_path

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
    ensure_name_mapping(table)
    table.refresh()
    path = f"{table.location()}/data/compacted-{uuid.uuid4().hex}.parquet"
    local_path(path).parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(table.scan().to_arrow(), local_path(path))
    tx = table.transaction()
    producer = replace_producer(tx, {})
    for task in table.scan().plan_files():
        producer.delete_data_file(task.file)
    for data_file in parquet_files_to_data_files(table.io, tx.table_metadata, iter([path])):
        producer.append_data_file(data_file)
    producer.commit()
    tx.commit_transaction()
    assert table.metadata.current_snapshot().summary.operation.value == "replace"
    table.append(pa.table({"id": [500, 501], "s": ["z", "z"]}, schema=SCHEMA))
    end = table.metadata.current_snapshot_id
    assert changed_rows(table, start, end) == 10 + (10 + 7) + 2
    assert changed_rows(table, None, end) == live_rows(table, end) == 109
    assert changed_rows(table, end, start) == UNKNOWN_ROWS  # not an ancestor
    assert changed_rows(table, start, start) == 0
