"""Targets the user created first, partitioned, are adopted and kept exact (through ``dag.test()``).

The user creates the input ``lake.events`` (partitioned by ``days(ts),
country``, merge-on-read) and the view's target ``lake.daily`` (partitioned
by ``day``) in Spark SQL, as teams do to choose partitioning and
properties, then ticks ``materialized_view(target="lake.daily", ...)``.
Before adoption the mint read such a target as an input (its upper the wall
clock), skipped every tick as "already sealed" and left it empty.

The oracle is a Python model over the events the test wrote; every data
file of the target must hold one partition (read back from the files
themselves), every delete file must stay in its data files' partition, and
Spark and PyIceberg must read the same rows under a partition filter.
"""

from __future__ import annotations

import datetime as dt
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

from airflow_provider_ct.core.catalog import CatalogConfig
from airflow_provider_ct.core.frontier import Frontier
from airflow_provider_ct.core.timeline import Timeline
from tests.helpers import rows_of, run_at_sealed_time

ROOT = Path(__file__).resolve().parent.parent
pytestmark = [pytest.mark.spark, pytest.mark.airflow, pytest.mark.slow]
EPOCH = dt.date(1970, 1, 1)

Event = tuple[dt.datetime, str, int]


@pytest.fixture
def lake(spark: Any, spark_lake: CatalogConfig) -> Any:
    """Fresh ``lake`` tables in the Spark session's catalog, Airflow's default."""
    spark.sql("CREATE NAMESPACE IF NOT EXISTS ct.lake")
    for name in ("events", "daily", "big_orders"):
        spark.sql(f"DROP TABLE IF EXISTS ct.lake.{name} PURGE")
    spark.sql(
        "CREATE TABLE ct.lake.events (ts TIMESTAMP, country STRING, amount BIGINT) USING iceberg "
        "PARTITIONED BY (days(ts), country) TBLPROPERTIES ('format-version'='2', "
        "'write.delete.mode'='merge-on-read', 'write.update.mode'='merge-on-read')"
    )
    return spark_lake.load()


def _insert(spark: Any, events: list[Event], rows: list[Event]) -> None:
    values = ", ".join(f"(TIMESTAMP '{ts:%Y-%m-%d %H:%M:%S}', '{c}', {a})" for ts, c, a in rows)
    spark.sql(f"INSERT INTO ct.lake.events VALUES {values}")
    events.extend(rows)


def _tick(dag: Any, catalog: Any, names: list[str]) -> int:
    """A run at a time every input's wall-clock upper has sealed, after its last commit."""
    heads = [catalog.load_table(name).metadata.current_snapshot() for name in names]
    return run_at_sealed_time(dag, max(h.timestamp_ms if h else 0 for h in heads))


def _daily(events: list[Event]) -> Counter[tuple[Any, ...]]:
    """The view over the test's own events: (day, country, n, total)."""
    groups: dict[tuple[dt.date, str], list[int]] = {}
    for ts, country, amount in events:
        groups.setdefault((ts.date(), country), []).append(amount)
    return Counter((d, c, len(a), sum(a)) for (d, c), a in groups.items())


def _check_partitions(table: Any) -> None:
    """Every data file holds one partition; every delete file stays in its data files' one."""
    partition_of: dict[str, Any] = {}
    deletes = []
    for task in table.scan().plan_files():
        data = task.file
        with table.io.new_input(data.file_path).open() as stream:
            days = set(pq.read_table(stream, columns=["day"]).column("day").to_pylist())
        assert [(d - EPOCH).days for d in days] == [data.partition[0]], data.file_path
        partition_of[data.file_path] = tuple(data.partition)
        deletes += list(task.delete_files)
    for delete in deletes:
        with table.io.new_input(delete.file_path).open() as stream:
            targets = set(pq.read_table(stream, columns=["file_path"]).column(0).to_pylist())
        assert {partition_of[t] for t in targets if t in partition_of} == {tuple(delete.partition)}


def _spark_equals_pyiceberg_for_one_day(spark: Any, table: Any, day: dt.date) -> None:
    from pyiceberg.expressions import EqualTo

    spark.sql("REFRESH TABLE ct.lake.daily")
    seen = spark.sql(f"SELECT * FROM ct.lake.daily WHERE day = DATE '{day}'").collect()
    scanned = table.scan(row_filter=EqualTo("day", day.isoformat())).to_arrow().to_pylist()
    assert Counter(tuple(r) for r in seen) == Counter(tuple(r.values()) for r in scanned)
    assert seen, f"no rows on {day}: the check could not fail"


@pytest.mark.parametrize("prefilled", [False, True], ids=["empty", "prefilled"])
def test_a_partitioned_target_the_user_created_is_adopted_and_kept_exact(
    lake: Any, spark: Any, prefilled: bool
) -> None:
    sys.path.insert(0, str(ROOT / "tests" / "dags"))
    import adoption

    spark.sql(
        "CREATE TABLE ct.lake.daily (day DATE, country STRING, n BIGINT, total BIGINT) "
        "USING iceberg PARTITIONED BY (day) TBLPROPERTIES ('format-version'='2')"
    )
    if prefilled:  # whatever the table holds, the first tick corrects it
        spark.sql(
            "INSERT INTO ct.lake.daily VALUES (DATE '2026-03-01', 'XX', 99, 99), "
            "(DATE '2026-03-01', 'DE', 1, 1), (DATE '2026-03-09', 'DE', 5, 5)"
        )
    events: list[Event] = []
    day = dt.datetime(2026, 3, 1, 8)
    _insert(spark, events, [(day, "DE", 10), (day, "DE", 30), (day, "FR", 5)])
    _insert(spark, events, [(day + dt.timedelta(days=1), "FR", 7), (day, "US", 120)])
    names = ["lake.events", "lake.daily"]

    tick = _tick(adoption.adopt_daily, lake, names)
    daily = lake.load_table("lake.daily")
    assert rows_of(daily) == _daily(events)
    timeline = Timeline.of(daily)
    assert timeline.managed and timeline.upper == Frontier.sealing(tick)
    _check_partitions(daily)
    _spark_equals_pyiceberg_for_one_day(spark, daily, day.date())

    # Merge-on-read changes of the input: the target's retractions stay in partition.
    spark.sql("UPDATE ct.lake.events SET amount = amount + 1 WHERE country = 'DE'")
    spark.sql("DELETE FROM ct.lake.events WHERE country = 'FR' AND amount < 6")
    events = [(t, c, a + 1 if c == "DE" else a) for t, c, a in events if not (c == "FR" and a < 6)]
    _insert(spark, events, [(day + dt.timedelta(days=2), "DE", 3)])
    _tick(adoption.adopt_daily, lake, names)
    daily = lake.load_table("lake.daily")
    assert rows_of(daily) == _daily(events)
    _check_partitions(daily)
    _spark_equals_pyiceberg_for_one_day(spark, daily, day.date())


def test_a_continual_task_output_the_user_created_is_adopted(lake: Any, spark: Any) -> None:
    sys.path.insert(0, str(ROOT / "tests" / "dags"))
    import adoption

    spark.sql(
        "CREATE TABLE ct.lake.big_orders (country STRING, amount BIGINT) USING iceberg "
        "PARTITIONED BY (country) TBLPROPERTIES ('format-version'='2')"
    )
    events: list[Event] = []
    day = dt.datetime(2026, 3, 1, 8)
    _insert(spark, events, [(day, "DE", 500)])  # before the as-of: not the task's
    names = ["lake.events"]
    _tick(adoption.adopt_task, lake, names)  # the as-of
    output = lake.load_table("lake.big_orders")
    assert rows_of(output) == Counter()
    _insert(spark, events, [(day, "DE", 150), (day, "FR", 20), (day, "US", 100)])
    _insert(spark, events, [(day, "FR", 300)])
    _tick(adoption.adopt_task, lake, names)
    output = lake.load_table("lake.big_orders")
    assert rows_of(output) == Counter({("DE", 150): 1, ("US", 100): 1, ("FR", 300): 1})
    for task in output.scan().plan_files():  # one country per data file, as partitioned
        with output.io.new_input(task.file.file_path).open() as stream:
            countries = set(pq.read_table(stream).column("country").to_pylist())
        assert countries == {task.file.partition[0]}
