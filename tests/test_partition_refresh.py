"""Partition-aware refresh: a tick reads and corrects only the days whose inputs changed.

Through ``dag.test()`` on the warm engine, over an input ``pr.events``
partitioned by ``days(ts)`` (merge-on-read updates and deletes, Spark
inserts) and a view keyed by ``CAST(ts AS DATE)`` whose target is
partitioned by ``day``. The oracle is the test's own list of events; the
evidence that other days were left alone is the target's ``files``
metadata (their data files and deletes unchanged) and the days the write
report says its reads were restricted to, compared with the days the test
changed.
"""

from __future__ import annotations

import datetime as dt
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from airflow_provider_ct.core.catalog import CatalogConfig
from tests.helpers import files_by_day, fresh_events, rows_of, task_xcom

ROOT = Path(__file__).resolve().parent.parent
pytestmark = [pytest.mark.spark, pytest.mark.airflow, pytest.mark.slow]
START = dt.datetime(2026, 3, 1, 6)

Event = tuple[int, dt.datetime, str, int]


@pytest.fixture
def lake(spark: Any, spark_lake: CatalogConfig) -> Any:
    """A fresh ``pr`` namespace with the partitioned input, in the Spark session's catalog."""
    columns = "id BIGINT, ts TIMESTAMP, country STRING, amount BIGINT"
    fresh_events(spark, "pr", columns, "days(ts)")
    sys.path.insert(0, str(ROOT / "tests" / "dags"))
    return spark_lake.load()


def _insert(spark: Any, events: list[Event], rows: list[Event]) -> None:
    values = ", ".join(
        f"({i}, TIMESTAMP '{ts:%Y-%m-%d %H:%M:%S}', '{c}', {a})" for i, ts, c, a in rows
    )
    spark.sql(f"INSERT INTO ct.pr.events VALUES {values}")
    events.extend(rows)


def _daily(events: list[Event]) -> Counter[tuple[Any, ...]]:
    groups: dict[tuple[dt.date, str], list[int]] = {}
    for _, ts, country, amount in events:
        groups.setdefault((ts.date(), country), []).append(amount)
    return Counter((d, c, len(a), sum(a), max(a)) for (d, c), a in groups.items())


def _tick(dag: Any, catalog: Any) -> dict[str, Any]:
    """Tick after the input's last commit; the write task's report (skipped: ``{}``)."""
    import time as _time

    from airflow_provider_ct.core.frontier import now_ms

    head = catalog.load_table("pr.events").metadata.current_snapshot()
    while now_ms() < head.timestamp_ms + 1_100:
        _time.sleep(0.05)
    run = dag.test(run_conf={"time": now_ms() - 1_050})
    assert run.state == "success", run.state
    return task_xcom(dag.dag_id, run.run_id, "daily.write")


def test_a_tick_reads_and_corrects_only_the_changed_days(lake: Any, spark: Any) -> None:
    import partition_refresh

    dag = partition_refresh.pr_daily
    events: list[Event] = []
    days = [START + dt.timedelta(days=d) for d in range(6)]
    rows = [
        (i, day + dt.timedelta(minutes=7 * i), country, i)
        for i, (day, country) in enumerate(
            (day, country) for day in days for country in ("DE", "FR", "US")
        )
    ]
    _insert(spark, events, rows)
    first = _tick(dag, lake)
    assert first["strategy"] == "full"  # the target had no rows yet
    daily = lake.load_table("pr.daily")
    assert rows_of(daily) == _daily(events)
    before = files_by_day(daily)
    assert set(before) == {d.date() for d in days}

    # Change two days that are not adjacent: an update (merge-on-read) on day 1,
    # a new row on day 4, a deleted one there too.
    spark.sql("UPDATE ct.pr.events SET amount = amount + 100 WHERE id = 4")
    spark.sql("DELETE FROM ct.pr.events WHERE id = 13")
    events = [(i, t, c, a + 100 if i == 4 else a) for i, t, c, a in events if i != 13]
    _insert(spark, events, [(99, days[4] + dt.timedelta(hours=3), "FR", 1000)])
    changed = {days[1].date(), days[4].date()}
    assert {t.date() for i, t, _, _ in rows if i in (4, 13)} == changed  # the test's own choice

    report = _tick(dag, lake)
    assert report["strategy"] == "partition", report
    assert report["restricted_days"] == {
        "events.ts": [f"{d}..{d + dt.timedelta(days=1)}" for d in sorted(changed)]
    }
    daily = lake.load_table("pr.daily")
    assert rows_of(daily) == _daily(events)
    after = files_by_day(daily)
    for day in {d.date() for d in days} - changed:
        assert after[day] == before[day], f"day {day} was rewritten"
    for day in changed:
        assert after[day] != before[day], f"day {day} was not corrected"

    # Readers prune by the target's day partition, and see the same rows.
    spark.sql("REFRESH TABLE ct.pr.daily")
    one_day = spark.sql(f"SELECT * FROM ct.pr.daily WHERE day = DATE '{days[4].date()}'")
    assert Counter(tuple(r) for r in one_day.collect()) == Counter(
        r for r in _daily(events).elements() if r[0] == days[4].date()
    )


def test_the_optional_side_of_a_left_join_losing_its_last_match_moves_rows_to_the_null_day(
    spark: Any, spark_catalog_config: CatalogConfig
) -> None:
    """Only the day's input changed, yet the NULL day changes too: it must be recomputed.

    ``b LEFT JOIN a``, keyed by the day of ``a.ts``: deleting the only ``a``
    row that matched ``b``'s row moves that row from the row's day to the
    NULL day, a day no changed row carries.
    """
    import pyarrow as pa

    from airflow_provider_ct.core.tables import create_managed_table
    from airflow_provider_ct.operators.append import AppendOperator
    from airflow_provider_ct.spark.write_job import run_write
    from tests.conftest import SPARK_CATALOG_CONN
    from tests.helpers import advance, mint_view_tick, replace_contents

    catalog = spark_catalog_config.load()
    catalog.create_namespace_if_not_exists("prlj")
    a_schema = pa.schema([("k", pa.int64()), ("ts", pa.timestamp("us"))])
    b_schema = pa.schema([("k", pa.int64()), ("w", pa.int64())])
    a = create_managed_table(catalog, "prlj.a", a_schema)
    b = create_managed_table(catalog, "prlj.b", b_schema)
    day = dt.datetime(2026, 3, 1, 12)
    a_rows = [(1, day), (2, day), (3, day + dt.timedelta(days=1))]
    b_rows = [(1, 10), (2, 20), (3, 30), (4, 40)]
    sql = (
        "SELECT CAST(a.ts AS DATE) AS day, COUNT(*) AS n, SUM(b.w) AS w, MAX(DISTINCT b.w) AS top "
        "FROM prlj.b AS b LEFT JOIN prlj.a AS a ON b.k = a.k GROUP BY CAST(a.ts AS DATE)"
    )

    def expected() -> Counter[tuple[Any, ...]]:
        days = {k: ts.date() for k, ts in a_rows}
        groups: dict[Any, list[int]] = {}
        for k, w in b_rows:
            groups.setdefault(days.get(k), []).append(w)
        return Counter((d, len(ws), sum(ws), max(ws)) for d, ws in groups.items())

    def tick(time: int) -> dict[str, Any]:
        decision = mint_view_tick(catalog, "prlj.daily", sql, time)
        assert decision.description is not None, decision.reason
        report = run_write(spark, spark_catalog_config, sql, decision.description).to_json()
        AppendOperator(task_id="append", report=report, iceberg_conn_id=SPARK_CATALOG_CONN).execute(
            {}
        )
        return report

    def table(rows: list[tuple[Any, ...]], schema: pa.Schema) -> pa.Table:
        return pa.Table.from_pylist([dict(zip(schema.names, r, strict=True)) for r in rows], schema)

    replace_contents(a, 1_000, table(a_rows, a_schema))
    replace_contents(b, 1_000, table(b_rows, b_schema))
    tick(1_000)
    assert rows_of(catalog.load_table("prlj.daily")) == expected()
    a_rows = [r for r in a_rows if r[0] != 3]  # b's k=3 row loses its only match
    replace_contents(a, 2_000, table(a_rows, a_schema))
    advance(b, 2_000)  # b did not change
    report = tick(2_000)
    assert report["strategy"] == "partition", report
    assert rows_of(catalog.load_table("prlj.daily")) == expected()
