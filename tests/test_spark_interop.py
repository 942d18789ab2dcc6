"""Spark (local mode, real Iceberg runtime) and the PyIceberg core see the same tables."""

from __future__ import annotations

import glob
from collections import Counter
from typing import Any

import pytest

from airflow_provider_ct.core.appending import append_batch
from airflow_provider_ct.core.catalog import CatalogConfig
from airflow_provider_ct.core.commit import compare_and_append
from airflow_provider_ct.core.frontier import Frontier, now_ms
from airflow_provider_ct.core.manifest import (
    StagedBatch,
    StagedFile,
    StagedTime,
    read_manifest,
    write_manifest,
)
from airflow_provider_ct.core.producers import TimedChange
from airflow_provider_ct.core.staging import batch_data_dir, manifest_path
from airflow_provider_ct.core.tables import create_managed_table
from airflow_provider_ct.core.timeline import Timeline
from tests.conftest import SCHEMA
from tests.helpers import local_path, rows_of, stage_rows

pytestmark = [pytest.mark.spark, pytest.mark.slow]


def _spark_rows(spark: Any, sql: str) -> Counter[tuple[Any, ...]]:
    return Counter(tuple(r) for r in spark.sql(sql).collect())


def test_spark_reads_core_commits_and_time_travels_to_each_ct_time(
    spark: Any, spark_catalog_config: CatalogConfig
) -> None:
    table = create_managed_table(spark_catalog_config.load(), "interop.core_written", SCHEMA)
    expected_at: dict[int, Counter[tuple[Any, ...]]] = {}
    contents: Counter[tuple[Any, ...]] = Counter()
    upper = Frontier.minimum()
    for tick, rows in enumerate([[(1, "a"), (1, "a")], [(2, None)], [], [(3, "c")]], start=1):
        time = tick * 1000
        files = stage_rows(table, f"tick{tick}", rows) if rows else []
        result = compare_and_append(
            table,
            expected_upper=upper,
            new_upper=Frontier.sealing(time),
            batch_id=f"tick{tick}",
            add_files=files,
            time=time,
        )
        assert result.landed
        upper = result.upper
        contents.update(rows)
        expected_at[time] = Counter(contents)

    spark.sql("REFRESH TABLE ct.interop.core_written")
    assert _spark_rows(spark, "SELECT k, v FROM ct.interop.core_written") == contents
    timeline = Timeline.of(table)
    for time, expected in expected_at.items():
        snapshot = timeline.snapshot_at(time)
        got = _spark_rows(
            spark, f"SELECT k, v FROM ct.interop.core_written VERSION AS OF {snapshot}"
        )
        assert got == expected, time
    # Spark sees our summary keys too (any engine can read the frontier).
    summaries = spark.sql(
        "SELECT summary['ct.time'] AS t, summary['ct.upper'] AS u "
        "FROM ct.interop.core_written.snapshots ORDER BY committed_at"
    ).collect()
    assert [(r.t, r.u) for r in summaries] == [
        ("1000", "1001"),
        ("2000", "2001"),
        ("3000", "3001"),
        ("4000", "4001"),
    ]


def test_core_commits_what_spark_staged(spark: Any, spark_catalog_config: CatalogConfig) -> None:
    table = create_managed_table(spark_catalog_config.load(), "interop.spark_staged", SCHEMA)
    first = stage_rows(table, "seed", [(1, "old"), (2, "keep")])
    assert compare_and_append(
        table,
        expected_upper=Frontier.minimum(),
        new_upper=Frontier.at(10),
        batch_id="seed",
        add_files=first,
    ).landed

    batch_id = "spark-batch"
    data_dir = batch_data_dir(table.location(), batch_id)
    df = spark.createDataFrame([(2, "keep"), (3, "new"), (3, "new"), (4, None)], "k long, v string")
    df.repartition(2).write.mode("overwrite").parquet(data_dir)
    parquet = sorted(glob.glob(str(local_path(data_dir) / "*.parquet")))
    assert parquet, "Spark wrote no Parquet files"
    staged = StagedBatch(
        batch_id=batch_id,
        target="interop.spark_staged",
        lower=Frontier.at(10),
        upper=Frontier.at(21),
        base_snapshot_id=table.metadata.current_snapshot().snapshot_id,
        data_dir=data_dir,
        times=(
            StagedTime(
                time=20,
                add=tuple(
                    StagedFile("file://" + p, -1, local_path("file://" + p).stat().st_size)
                    for p in parquet
                ),
                remove=tuple(first),
            ),
        ),
        created_at_ms=now_ms(),
    )
    path = manifest_path(table.location(), batch_id)
    write_manifest(staged, path)
    batch = read_manifest(path)
    result = append_batch(table, batch)
    assert result.landed
    expected = Counter({(2, "keep"): 1, (3, "new"): 2, (4, None): 1})
    assert rows_of(table) == expected
    spark.sql("REFRESH TABLE ct.interop.spark_staged")
    assert _spark_rows(spark, "SELECT k, v FROM ct.interop.spark_staged") == expected
    # Time travel to the seed's time still shows the seed (history is immutable).
    seed = Timeline.of(table).snapshot_at(9)
    assert _spark_rows(
        spark, f"SELECT k, v FROM ct.interop.spark_staged VERSION AS OF {seed}"
    ) == Counter({(1, "old"): 1, (2, "keep"): 1})


def test_spark_write_through_catalog_is_visible_to_the_timeline_as_drift(
    spark: Any, spark_catalog_config: CatalogConfig
) -> None:
    """A Spark INSERT behind our back is a foreign commit: it never moves the upper."""
    table = create_managed_table(spark_catalog_config.load(), "interop.drift", SCHEMA)
    compare_and_append(
        table,
        expected_upper=Frontier.minimum(),
        new_upper=Frontier.at(5),
        batch_id="b",
        changes=[TimedChange(4, tuple(stage_rows(table, "b", [(1, "x")])))],
    )
    spark.sql("INSERT INTO ct.interop.drift VALUES (9, 'drift')")
    table.refresh()
    timeline = Timeline.of(table)
    assert timeline.upper == Frontier.at(5)
    assert timeline.head_snapshot_id != timeline.snapshot_at(4)
    assert rows_of(table) == Counter({(1, "x"): 1, (9, "drift"): 1})
    assert rows_of(table, timeline.snapshot_at(4)) == Counter({(1, "x"): 1})
