"""The read estimate: what a restricted tick reads, priced by Iceberg's scan planning.

The tables are the test's own (PyIceberg appends of rows it chose), so the
files each restriction must keep are known before the product looks: the
expected counts come from the test's layout, never from the product.
"""

from __future__ import annotations

import datetime as dt
from collections import Counter
from typing import Any

import pyarrow as pa
import pytest

from airflow_provider_ct.core.catalog import CatalogConfig
from airflow_provider_ct.core.layout import TableLayout
from airflow_provider_ct.core.tables import create_managed_table
from airflow_provider_ct.ivm.plan.read_estimate import (
    ReadEstimate,
    Restriction,
    estimate_reads,
    not_cheaper_reason,
)
from airflow_provider_ct.operators.append import AppendOperator
from airflow_provider_ct.spark.write_job import run_write
from tests.conftest import SPARK_CATALOG_CONN as CONN
from tests.helpers import mint_view_tick, rows_of, stamp

EVENTS = pa.schema(
    [("id", pa.int64()), ("ts", pa.timestamp("us")), ("flag", pa.string()), ("v", pa.int64())]
)
DAYS = [dt.datetime(2026, 2, d, 9) for d in (1, 2, 3, 4)]


def _rows(ids: range, day: dt.datetime) -> pa.Table:
    return pa.Table.from_pylist(
        [{"id": i, "ts": day, "flag": "AB"[i % 2], "v": i} for i in ids], EVENTS
    )


def _events(catalog: Any, name: str, layout: TableLayout | None = None) -> Any:
    """One file per day (each appended on its own), 400 rows each, both flags in every file."""
    table = create_managed_table(catalog, name, EVENTS, layout=layout)
    for n, day in enumerate(DAYS):
        table.append(_rows(range(400 * n, 400 * (n + 1)), day))
    stamp(table, 1_000)
    return catalog.load_table(name)


def _estimate(table: Any, *restrictions: Restriction) -> ReadEstimate:
    head = table.metadata.current_snapshot().snapshot_id
    return estimate_reads({"t": (table, head)}, {"t": list(restrictions)})


def test_restrictions_keep_the_files_iceberg_would_read(
    sqlite_catalog_config: CatalogConfig,
) -> None:
    catalog = sqlite_catalog_config.load()
    catalog.create_namespace_if_not_exists("est")
    table = _events(catalog, "est.by_day", TableLayout.parse(partition_by=["day(ts)"]))
    whole = _estimate(table)
    assert (whole.restricted_files, whole.total_files) == (4, 4) and whole.share == 1.0
    one_day = Restriction("ts", days=((dt.date(2026, 2, 2), dt.date(2026, 2, 3)),))
    assert _estimate(table, one_day).restricted_files == 1
    two_days = Restriction("TS", days=((dt.date(2026, 2, 3), dt.date(2026, 2, 5)),))
    assert _estimate(table, two_days).restricted_files == 2  # names are case-insensitive
    # Column statistics prune too: ids are ranges per file, flags are in every file.
    assert _estimate(table, Restriction("id", (5, 7, 1203))).restricted_files == 2
    assert _estimate(table, Restriction("flag", ("A",))).restricted_files == 4
    assert _estimate(table, Restriction("id", (10_000,))).restricted_files == 0
    assert _estimate(table, Restriction("id", (), has_null=True)).restricted_files == 0


def test_the_rule_needs_a_large_share_and_a_small_result() -> None:
    most = ReadEstimate(restricted_bytes=90, total_bytes=100, restricted_files=9, total_files=10)
    reason = not_cheaper_reason(most, 0.5, result_rows=1_000, small_result=1_000)
    assert reason is not None and "9 of the inputs' 10 data files (90%" in reason
    assert not_cheaper_reason(most, 0.95, result_rows=10, small_result=1_000) is None  # share
    assert not_cheaper_reason(most, 0.5, result_rows=1_001, small_result=1_000) is None  # large
    assert not_cheaper_reason(most, 0.0, result_rows=0, small_result=1_000) is None  # off


def _tick(spark: Any, config: CatalogConfig, target: str, sql: str, time: int) -> dict[str, Any]:
    decision = mint_view_tick(config.load(), target, sql, time)
    assert decision.description is not None, decision.reason
    report = run_write(spark, config, sql, decision.description, refresh="auto").to_json()
    AppendOperator(task_id="append", report=report, iceberg_conn_id=CONN).execute({})
    return report


def _oracle(table: Any, sql_key: str) -> Counter[tuple[Any, ...]]:
    """The test's own aggregate of the input (PyIceberg rows, grouped in Python)."""
    groups: dict[Any, list[int]] = {}
    for row in table.scan().to_arrow().to_pylist():
        key = row["flag"] if sql_key == "flag" else row["ts"].date()
        groups.setdefault(key, []).append(row["v"])
    return Counter((k, len(v), sum(v), max(v)) for k, v in groups.items())


@pytest.mark.spark
def test_auto_runs_in_full_when_the_restricted_read_is_every_file(
    spark: Any, spark_catalog_config: CatalogConfig, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every file holds every flag: recomputing a flag's group reads all of them, so full."""
    monkeypatch.setenv("CT_FULL_ABOVE_READ_SHARE", "0.5")
    catalog = spark_catalog_config.load()
    catalog.create_namespace_if_not_exists("est_f")
    events = _events(catalog, "est_f.events", TableLayout.parse(partition_by=["day(ts)"]))
    # MAX(DISTINCT) keeps both off in-place aggregates: their groups are recomputed.
    flags = (
        "SELECT flag, COUNT(*) AS n, SUM(v) AS total, MAX(DISTINCT v) AS hi FROM est_f.events "
        "GROUP BY flag"
    )
    days = (
        "SELECT CAST(ts AS DATE) AS day, COUNT(*) AS n, SUM(v) AS total, MAX(DISTINCT v) AS hi "
        "FROM est_f.events GROUP BY CAST(ts AS DATE)"
    )
    for target, sql in (("est_f.flags", flags), ("est_f.days", days)):
        assert _tick(spark, spark_catalog_config, target, sql, 1_000)["strategy"] == "full"
    events.append(_rows(range(5_000, 5_010), DAYS[1]))  # ten rows more on day 2
    stamp(events, 2_000)
    events = catalog.load_table("est_f.events")

    by_flag = _tick(spark, spark_catalog_config, "est_f.flags", flags, 2_000)
    assert by_flag["strategy"] == "full", by_flag
    assert "of the inputs' 5 data files (100% of their bytes" in by_flag["reason"]
    assert by_flag["read_estimate"]["restricted_files"] == 5
    assert rows_of(catalog.load_table("est_f.flags")) == _oracle(events, "flag")

    # The next tick goes full at once: the last estimate said so (no change read).
    events.append(_rows(range(5_100, 5_102), DAYS[1]))
    stamp(events, 2_500)
    carried = _tick(spark, spark_catalog_config, "est_f.flags", flags, 2_500)
    assert carried["strategy"] == "full" and "input_changes" not in carried, carried
    assert carried["reason"].startswith("the last 1 batch(es) of this view went full because")
    assert carried["read_estimate"] == {"share": 1.0, "carried": True}
    events = catalog.load_table("est_f.events")
    assert rows_of(catalog.load_table("est_f.flags")) == _oracle(events, "flag")

    by_day = _tick(spark, spark_catalog_config, "est_f.days", days, 2_500)
    assert by_day["strategy"] == "partition", by_day  # day 2's three files of six: kept
    assert rows_of(catalog.load_table("est_f.days")) == _oracle(events, "day")

    monkeypatch.setenv("CT_FULL_ABOVE_READ_SHARE", "0")  # the rule off: the group strategy
    events.append(_rows(range(6_000, 6_004), DAYS[0]))
    stamp(events, 3_000)
    again = _tick(spark, spark_catalog_config, "est_f.flags", flags, 3_000)
    assert again["strategy"] == "group", again
    assert rows_of(catalog.load_table("est_f.flags")) == _oracle(
        catalog.load_table("est_f.events"), "flag"
    )
