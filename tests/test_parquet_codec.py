"""Staged files are compressed as the table's properties say (Iceberg's default: zstd).

The codec is read back from the Parquet footers of the files the table's
snapshots reference; the rows are checked against the test's own model.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from airflow_provider_ct.core.catalog import CatalogConfig
from airflow_provider_ct.core.parquet import ParquetCodec, parquet_codec
from airflow_provider_ct.core.tables import create_managed_table
from airflow_provider_ct.exceptions import ConfigurationError
from airflow_provider_ct.operators.append import AppendOperator
from airflow_provider_ct.spark import stage_correction as write_job
from airflow_provider_ct.spark.write_job import run_write
from tests.conftest import SPARK_CATALOG_CONN as CONN
from tests.helpers import advance, local_path, mint_view_tick, replace_contents, rows_of

A = pa.schema([("id", pa.int64()), ("v", pa.int64())])


def test_codec_follows_the_table_properties() -> None:
    assert parquet_codec({}) == ParquetCodec("zstd")
    assert parquet_codec({}, deletes=True) == ParquetCodec("zstd")
    data = {"write.parquet.compression-codec": "GZIP", "write.parquet.compression-level": "5"}
    assert parquet_codec(data) == ParquetCodec("gzip", 5)
    assert parquet_codec(data, deletes=True) == ParquetCodec("gzip", 5)  # falls back to data's
    both = {**data, "write.delete.parquet.compression-codec": "snappy"}
    assert parquet_codec(both, deletes=True) == ParquetCodec("snappy", 5)
    assert ParquetCodec("uncompressed").arrow_kwargs() == {
        "compression": "none",
        "compression_level": None,
    }


@pytest.mark.parametrize(
    ("properties", "named"),
    [
        ({"write.parquet.compression-codec": "lzo"}, "write.parquet.compression-codec='lzo'"),
        ({"write.delete.parquet.compression-codec": "x"}, "write.delete.parquet.compression"),
        ({"write.parquet.compression-level": "high"}, "write.parquet.compression-level='high'"),
    ],
)
def test_a_codec_we_cannot_write_names_the_property(properties: dict[str, str], named: str) -> None:
    with pytest.raises(ConfigurationError, match=named.replace("(", r"\(")):
        parquet_codec(properties, deletes="delete" in named)


def _codecs(table: Any, content: str) -> set[str]:
    """Compression of every column chunk of the live files of one content kind."""
    table.refresh()
    files = table.inspect.delete_files() if content == "deletes" else table.inspect.data_files()
    out: set[str] = set()
    for path in files.column("file_path").to_pylist():
        meta = pq.read_metadata(local_path(path))
        for group in range(meta.num_row_groups):
            row_group = meta.row_group(group)
            out |= {row_group.column(c).compression for c in range(row_group.num_columns)}
    return out


def _tick(spark: Any, config: CatalogConfig, sql: str, time: int) -> dict[str, Any]:
    decision = mint_view_tick(config.load(), "codec.v", sql, time)
    assert decision.description is not None, decision.reason
    report = run_write(spark, config, sql, decision.description, refresh="full").to_json()
    AppendOperator(task_id="append", report=report, iceberg_conn_id=CONN).execute({})
    return report


@pytest.mark.spark
def test_staged_inserts_and_deletes_use_the_tables_codecs(
    spark: Any, spark_catalog_config: CatalogConfig, monkeypatch: pytest.MonkeyPatch
) -> None:
    catalog = spark_catalog_config.load()
    source = create_managed_table(catalog, "codec.a", A)
    sql = "SELECT id, v FROM codec.a"
    model = {i: i * 10 for i in range(50)}

    def feed(time: int) -> None:
        data = pa.table({"id": list(model), "v": list(model.values())}, schema=A)
        replace_contents(source, time, data)
        advance(source, time)

    feed(1_000)
    _tick(spark, spark_catalog_config, sql, 1_000)  # created with no codec property
    view = catalog.load_table("codec.v")
    assert _codecs(view, "data") == {"ZSTD"}

    with view.transaction() as tx:
        tx.set_properties(
            {
                "write.parquet.compression-codec": "gzip",
                "write.delete.parquet.compression-codec": "snappy",
            }
        )
    for i in range(0, 50, 5):
        model[i] = -i - 1  # ten rows change: ten retracted, ten inserted
    feed(2_000)
    report = _tick(spark, spark_catalog_config, sql, 2_000)
    assert (report["rows_to_insert"], report["rows_to_delete"]) == (10, 10)
    assert _codecs(view, "deletes") == {"SNAPPY"}
    assert _codecs(view, "data") == {"ZSTD", "GZIP"}  # the first tick's file and this one's

    # Inserts past ROWS_COLLECTED are written by Spark, not pyarrow: the same codec.
    monkeypatch.setattr(write_job, "ROWS_COLLECTED", 0)
    monkeypatch.setenv("CT_DRIVER_DIFF_ROWS", "0")
    with view.transaction() as tx:
        tx.set_properties({"write.parquet.compression-codec": "snappy"})
    model.update({i: i + 1 for i in range(50, 60)})
    feed(3_000)
    report = _tick(spark, spark_catalog_config, sql, 3_000)
    assert report["rows_to_insert"] == 10
    assert _codecs(view, "data") == {"ZSTD", "GZIP", "SNAPPY"}
    assert rows_of(catalog.load_table("codec.v")) == Counter(model.items())
