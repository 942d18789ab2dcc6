"""Continual tasks on real Spark and Iceberg: the seed's examples, tick by tick."""

from __future__ import annotations

from collections import Counter
from typing import Any

import pyarrow as pa
import pytest

from airflow_provider_ct.core.catalog import CatalogConfig
from airflow_provider_ct.core.commit import compare_and_append
from airflow_provider_ct.core.continual import parse_continual_task
from airflow_provider_ct.core.frontier import Frontier
from airflow_provider_ct.core.mint import mint
from airflow_provider_ct.core.tables import create_managed_table
from airflow_provider_ct.core.timeline import Timeline
from airflow_provider_ct.exceptions import QueryError
from airflow_provider_ct.operators.continual import ContinualAppendOperator
from airflow_provider_ct.spark.continual_job import run_continual
from tests.conftest import SPARK_CATALOG_CONN as CONN
from tests.helpers import XComTI, advance, local_path, rows_of, stage_arrow

pytestmark = [pytest.mark.spark, pytest.mark.slow]

KV = pa.schema([("key", pa.int32()), ("val", pa.int32())])

UPSERT = """
CREATE CONTINUAL TASK upsert (key INT, val INT) ON INPUT append_only AS (
    DELETE FROM upsert WHERE key IN (SELECT key FROM append_only);
    INSERT INTO upsert SELECT key, max(val) FROM append_only GROUP BY key;
)
"""


def append_rows(table: Any, time: int, rows: list[tuple[Any, ...]], schema: pa.Schema) -> None:
    """Blind-append rows to a managed input at ``time`` (an Iceberg append snapshot)."""
    table.refresh()
    upper = Timeline.of(table).upper
    data = pa.Table.from_pylist([dict(zip(schema.names, r, strict=True)) for r in rows], schema)
    result = compare_and_append(
        table,
        expected_upper=upper,
        new_upper=Frontier.sealing(time),
        batch_id=f"in-{time}-{table.name()[-1]}",
        add_files=stage_arrow(table, f"in-{time}", data),
        time=time,
    )
    assert result.landed


def ct_mint(config: CatalogConfig, task_sql: str, ns: str, time: int) -> Any:
    """The description of a tick at ``time`` (the mint's rules over the tables now)."""
    catalog = config.load()
    task = parse_continual_task(task_sql, default_namespace=ns)
    try:
        out_tl = Timeline.of(catalog.load_table(task.name))
    except Exception:
        out_tl = None
    inputs = {n: Timeline.of(catalog.load_table(n)) for n in (task.input, *task.references)}
    decision = mint(target=task.name, target_timeline=out_tl, time=time, inputs=inputs)
    assert decision.description is not None, decision.reason
    return decision.description


def ct_append(report: Any, description: Any, task_sql: str, ns: str) -> dict:
    """The continual task's append of ``report``, checked against its ``description``."""
    append = ContinualAppendOperator(
        task_id="append",
        report=report.to_json(),
        description_task_id="mint",
        definition=task_sql,
        namespace=ns,
        iceberg_conn_id=CONN,
    )
    out: dict = append.execute({"ti": XComTI({"mint": description.to_json()})})
    return out


def ct_tick(spark: Any, config: CatalogConfig, task_sql: str, ns: str, time: int) -> dict:
    description = ct_mint(config, task_sql, ns, time)
    report = run_continual(spark, config, task_sql, ns, description)
    out = ct_append(report, description, task_sql, ns)
    out["report"] = report
    out["description"] = description
    return out


def test_upsert_over_an_append_only_input_matches_the_seed(
    spark: Any, spark_catalog_config: CatalogConfig
) -> None:
    ns = "ct_upsert"
    catalog = spark_catalog_config.load()
    source = create_managed_table(catalog, f"{ns}.append_only", KV)
    advance(source, 100)
    assert ct_tick(spark, spark_catalog_config, UPSERT, ns, 100)["appended"]  # as-of: no rows
    output = catalog.load_table(f"{ns}.upsert")
    assert rows_of(output) == Counter()

    append_rows(source, 200, [(1, 2), (1, 1)], KV)
    assert ct_tick(spark, spark_catalog_config, UPSERT, ns, 200)["appended"]
    assert rows_of(catalog.load_table(f"{ns}.upsert")) == Counter({(1, 2): 1})

    append_rows(source, 300, [(1, 3), (2, 4)], KV)
    out = ct_tick(spark, spark_catalog_config, UPSERT, ns, 300)
    assert out["appended"]
    # Only the new files were read: an incremental read, not a full input scan.
    assert out["report"].extra["input_reads"] == {"incremental": 1}
    output = catalog.load_table(f"{ns}.upsert")
    assert rows_of(output) == Counter({(1, 3): 1, (2, 4): 1})
    timeline = Timeline.of(output)
    assert [t for t, _ in timeline.data_times()] == [200, 300]
    assert rows_of(output, timeline.snapshot_at(250)) == Counter({(1, 2): 1})


def test_audit_log_records_an_anomaly_once(spark: Any, spark_catalog_config: CatalogConfig) -> None:
    ns = "ct_audit"
    catalog = spark_catalog_config.load()
    schema = pa.schema([("count", pa.int64())])
    anomalies = create_managed_table(catalog, f"{ns}.anomalies", schema)
    task = """CREATE CONTINUAL TASK audit_log (count INT8) ON INPUT anomalies AS (
        INSERT INTO audit_log SELECT * FROM anomalies;
    )"""
    advance(anomalies, 10)
    ct_tick(spark, spark_catalog_config, task, ns, 10)  # the as-of: an empty snapshot
    append_rows(anomalies, 20, [(7,)], schema)  # an anomaly appears
    ct_tick(spark, spark_catalog_config, task, ns, 20)
    append_rows(anomalies, 30, [(8,)], schema)  # unrelated rows arrive later
    ct_tick(spark, spark_catalog_config, task, ns, 30)
    advance(anomalies, 40)  # and a tick where nothing happened
    out = ct_tick(spark, spark_catalog_config, task, ns, 40)
    log = catalog.load_table(f"{ns}.audit_log")
    assert rows_of(log) == Counter({(7,): 1, (8,): 1})  # 7 recorded once, not again
    assert out["appended"] and Timeline.of(log).upper == Frontier.at(41)
    assert [t for t, _ in Timeline.of(log).data_times()] == [20, 30]


# Self-referencing: the first value seen per key wins, later ones are ignored;
# the running maximum is replaced (INSERT reads the output before the DELETE).
SELF_REF = """
CREATE CONTINUAL TASK totals (key INT, total BIGINT) ON INPUT events AS (
    INSERT INTO totals
      SELECT e.key, CAST(MIN(e.val) AS BIGINT) FROM events e
      WHERE e.key NOT IN (SELECT key FROM totals)
      GROUP BY e.key;
    INSERT INTO totals
      SELECT -e.key, COALESCE(MAX(t.total), 0) + SUM(e.val)
      FROM events e LEFT JOIN totals t ON t.key = -e.key
      GROUP BY e.key;
    DELETE FROM totals WHERE key < 0 AND total < (
      SELECT MAX(t2.total) FROM totals t2 WHERE t2.key = totals.key);
)
"""


def _run_self_ref(spark: Any, config: CatalogConfig, ns: str, batched: bool) -> Any:
    catalog = config.load()
    events = create_managed_table(catalog, f"{ns}.events", KV)
    advance(events, 5)
    ct_tick(spark, config, SELF_REF, ns, 5)
    batches = [(10, [(1, 1), (2, 5)]), (20, [(1, 2)]), (30, [(1, 3), (2, 1), (3, 9)])]
    for time, rows in batches:
        append_rows(events, time, rows, KV)
        if not batched:
            ct_tick(spark, config, SELF_REF, ns, time)
    if batched:
        out = ct_tick(spark, config, SELF_REF, ns, 30)
        assert out["report"].extra["input_times"] == [10, 20, 30]
    return catalog.load_table(f"{ns}.totals")


def test_several_input_times_in_one_batch_equal_one_batch_per_time(
    spark: Any, spark_catalog_config: CatalogConfig
) -> None:
    one_by_one = _run_self_ref(spark, spark_catalog_config, "ct_self_a", batched=False)
    batched = _run_self_ref(spark, spark_catalog_config, "ct_self_b", batched=True)
    # firsts: key 1 -> 1, key 2 -> 5, key 3 -> 9; running sums under -key.
    expected = Counter({(1, 1): 1, (2, 5): 1, (3, 9): 1, (-1, 6): 1, (-2, 6): 1, (-3, 9): 1})
    assert rows_of(one_by_one) == expected
    assert rows_of(batched) == expected
    a, b = Timeline.of(one_by_one), Timeline.of(batched)
    assert [t for t, _ in a.data_times()] == [t for t, _ in b.data_times()] == [10, 20, 30]
    for time in (10, 20, 30):
        assert rows_of(one_by_one, a.snapshot_at(time)) == rows_of(batched, b.snapshot_at(time))


def test_racing_duplicate_runs_and_retried_appends_never_write_a_time_twice(
    spark: Any, spark_catalog_config: CatalogConfig
) -> None:
    ns = "ct_race"
    catalog = spark_catalog_config.load()
    source = create_managed_table(catalog, f"{ns}.append_only", KV)
    advance(source, 100)
    ct_tick(spark, spark_catalog_config, UPSERT, ns, 100)
    append_rows(source, 200, [(1, 2), (5, 5)], KV)
    task = parse_continual_task(UPSERT, default_namespace=ns)
    out_tl = Timeline.of(catalog.load_table(task.name))
    inputs = {task.input: Timeline.of(catalog.load_table(task.input))}
    desc = mint(target=task.name, target_timeline=out_tl, time=200, inputs=inputs).description
    assert desc is not None
    first = run_continual(spark, spark_catalog_config, UPSERT, ns, desc)
    second = run_continual(spark, spark_catalog_config, UPSERT, ns, desc)  # a duplicate run
    win = ct_append(first, desc, UPSERT, ns)
    lose = ct_append(second, desc, UPSERT, ns)
    retry = ct_append(first, desc, UPSERT, ns)
    assert win["appended"] and not win["already_appended"]
    # Same description id: the duplicate sees its own batch on main and stages nothing new.
    assert lose["appended"] and lose["already_appended"]
    assert retry["already_appended"]
    output = catalog.load_table(task.name)
    assert rows_of(output) == Counter({(1, 2): 1, (5, 5): 1})
    assert [t for t, _ in Timeline.of(output).data_times()] == [200]
    for staged in (first, second):
        assert staged.manifest is None or not local_path(staged.manifest).exists()


SNAPSHOT_COPY = """
CREATE CONTINUAL TASK copy (key INT, val INT) ON INPUT src WITH (SNAPSHOT = true) AS (
    INSERT INTO copy SELECT key, val FROM src;
)
"""


def test_a_retried_first_snapshot_batch_still_takes_the_snapshot(
    spark: Any, spark_catalog_config: CatalogConfig
) -> None:
    """The first write created the output (with its as-of) and crashed before the append.

    The retry must still stage the input's contents at the as-of: whether a
    batch takes the snapshot depends on the batch covering the as-of, not on
    whether the output existed before the job.
    """
    ns = "ct_snapretry"
    catalog = spark_catalog_config.load()
    source = create_managed_table(catalog, f"{ns}.src", KV)
    append_rows(source, 50, [(1, 10), (2, 20)], KV)
    advance(source, 100)
    description = ct_mint(spark_catalog_config, SNAPSHOT_COPY, ns, 100)
    crashed = run_continual(spark, spark_catalog_config, SNAPSHOT_COPY, ns, description)
    assert crashed.rows_to_insert == 2  # staged, never appended
    retry = run_continual(spark, spark_catalog_config, SNAPSHOT_COPY, ns, description)
    assert retry.rows_to_insert == 2
    assert ct_append(retry, description, SNAPSHOT_COPY, ns)["appended"]
    output = catalog.load_table(f"{ns}.copy")
    assert rows_of(output) == Counter({(1, 10): 1, (2, 20): 1})
    assert [t for t, _ in Timeline.of(output).data_times()] == [100]
    # The snapshot is taken once: the next batch does not cover the as-of.
    append_rows(source, 150, [(3, 30)], KV)
    advance(source, 200)
    assert ct_tick(spark, spark_catalog_config, SNAPSHOT_COPY, ns, 200)["appended"]
    expected = Counter({(1, 10): 1, (2, 20): 1, (3, 30): 1})
    assert rows_of(catalog.load_table(f"{ns}.copy")) == expected


RETENTION = """
CREATE CONTINUAL TASK recent (key INT, ts INT8) ON INPUT events WITH (SNAPSHOT = true) AS (
    DELETE FROM recent WHERE ts < mz_now() - 100;
    INSERT INTO recent SELECT key, ts FROM events;
)
"""


def test_retention_window_relative_to_each_input_time(
    spark: Any, spark_catalog_config: CatalogConfig
) -> None:
    ns = "ct_retention"
    catalog = spark_catalog_config.load()
    schema = pa.schema([("key", pa.int32()), ("ts", pa.int64())])
    events = create_managed_table(catalog, f"{ns}.events", schema)
    append_rows(events, 50, [(1, 0), (2, 45)], schema)
    advance(events, 60)
    # First tick at 60: SNAPSHOT = true, so the input's contents at 60 count as inserts.
    ct_tick(spark, spark_catalog_config, RETENTION, ns, 60)
    recent = catalog.load_table(f"{ns}.recent")
    assert rows_of(recent) == Counter({(1, 0): 1, (2, 45): 1})
    append_rows(events, 120, [(3, 110)], schema)  # at 120 the window drops ts < 20
    append_rows(events, 160, [(4, 150)], schema)  # at 160 it drops ts < 60
    out = ct_tick(spark, spark_catalog_config, RETENTION, ns, 160)
    assert out["report"].extra["input_times"] == [120, 160]
    recent = catalog.load_table(f"{ns}.recent")
    assert rows_of(recent) == Counter({(3, 110): 1, (4, 150): 1})
    timeline = Timeline.of(recent)
    assert rows_of(recent, timeline.snapshot_at(130)) == Counter({(2, 45): 1, (3, 110): 1})


@pytest.mark.parametrize(
    ("sql", "message"),
    [
        ("CREATE CONTINUAL TASK t (a INT) ON INPUT t AS (INSERT INTO t SELECT 1)", "cannot also"),
        ("CREATE CONTINUAL TASK t (a INT) ON INPUT i AS (UPDATE t SET a = 1)", "must be DELETE"),
        (
            "CREATE CONTINUAL TASK t (a INT) ON INPUT i AS (INSERT INTO x SELECT a FROM i)",
            "must be DELETE",
        ),
        (
            "CREATE CONTINUAL TASK t (a INT) ON INPUT i AS (INSERT INTO t SELECT 1, 2 FROM i)",
            "INSERT has more expressions than target columns",
        ),
        (
            "CREATE CONTINUAL TASK t (a INT) ON INPUT i AS (INSERT INTO t (b) SELECT 1 FROM i)",
            "unknown columns",
        ),
        (
            "CREATE CONTINUAL TASK t (a INT) ON INPUT i WITH (FOO = 1) AS (DELETE FROM t)",
            "unknown continual task option",
        ),
        ("CREATE CONTINUAL TASK t () ON INPUT i AS (DELETE FROM t)", "at least one"),
        ("CREATE VIEW v AS SELECT 1", "expected CREATE CONTINUAL TASK"),
    ],
)
def test_bad_definitions_fail_before_spark(sql: str, message: str) -> None:
    with pytest.raises(QueryError, match=message):
        parse_continual_task(sql, default_namespace="ns")


ENRICH = """
CREATE CONTINUAL TASK enriched (order_id INT, name STRING) ON INPUT orders AS (
    INSERT INTO enriched SELECT o.key, c.name FROM orders o JOIN names c ON o.val = c.id;
)
"""


def test_output_does_not_change_when_references_change_later(
    spark: Any, spark_catalog_config: CatalogConfig
) -> None:
    ns = "ct_refs"
    catalog = spark_catalog_config.load()
    names_schema = pa.schema([("id", pa.int32()), ("name", pa.string())])
    orders = create_managed_table(catalog, f"{ns}.orders", KV)
    names = create_managed_table(catalog, f"{ns}.names", names_schema)
    append_rows(names, 5, [(1, "Ada")], names_schema)
    advance(orders, 5)
    ct_tick(spark, spark_catalog_config, ENRICH, ns, 5)
    append_rows(orders, 10, [(100, 1)], KV)  # order 100 by customer 1, named Ada at t=10
    advance(names, 10)
    ct_tick(spark, spark_catalog_config, ENRICH, ns, 10)
    from tests.helpers import replace_contents

    replace_contents(names, 20, pa.Table.from_pylist([{"id": 1, "name": "Grace"}], names_schema))
    advance(orders, 20)
    out = ct_tick(spark, spark_catalog_config, ENRICH, ns, 20)  # only the reference changed
    assert out["report"].extra["input_times"] == []
    enriched = catalog.load_table(f"{ns}.enriched")
    assert rows_of(enriched) == Counter({(100, "Ada"): 1})  # unlike a view: not rewritten
    append_rows(orders, 30, [(101, 1)], KV)
    advance(names, 30)
    ct_tick(spark, spark_catalog_config, ENRICH, ns, 30)
    enriched = catalog.load_table(f"{ns}.enriched")
    assert rows_of(enriched) == Counter({(100, "Ada"): 1, (101, "Grace"): 1})


def test_inserts_across_overwrites_and_deletes_read_only_the_changes(
    spark: Any, spark_catalog_config: CatalogConfig
) -> None:
    """An input that is overwritten: its inserts come from table_changes, not a full diff."""
    from tests.helpers import replace_contents

    ns = "ct_overwritten"
    catalog = spark_catalog_config.load()
    schema = pa.schema([("count", pa.int64())])
    source = create_managed_table(catalog, f"{ns}.anomalies", schema)
    task = """CREATE CONTINUAL TASK audit_log (count INT8) ON INPUT anomalies AS (
        INSERT INTO audit_log SELECT * FROM anomalies;
    )"""
    append_rows(source, 10, [(1,), (2,), (None,)], schema)
    ct_tick(spark, spark_catalog_config, task, ns, 10)  # the as-of: its snapshot is inserted
    # Keep 1 and the NULL, drop 2, add 3 twice and another NULL: inserted are 3, 3, NULL.
    rows = [{"count": c} for c in (1, None, 3, 3, None)]
    replace_contents(source, 20, pa.Table.from_pylist(rows, schema))
    out = ct_tick(spark, spark_catalog_config, task, ns, 20)
    assert out["report"].extra["input_reads"] == {"changes": 1}
    log = catalog.load_table(f"{ns}.audit_log")
    snapshot = Counter({(1,): 1, (2,): 1, (None,): 1})
    assert rows_of(log) == snapshot + Counter({(3,): 2, (None,): 1})
    # The Parquet file that handed the inserts to Spark is gone once the time ran.
    assert not list(local_path(log.location()).glob("data/**/scratch/*.parquet"))
    assert list(local_path(log.location()).glob("data/**/*.parquet"))
