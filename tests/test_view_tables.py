"""Views' tables as lakehouse users have them: laid out, owned once, following their definitions.

Through ``dag.test()`` on the warm engine, over an input ``vt.events`` the
test creates with Spark SQL (partitioned by ``days(ts)``, merge-on-read).
The oracle is a Python model over the events the test wrote; layouts are
read back from the table's metadata and its files, never from what the
product recorded.
"""

from __future__ import annotations

import datetime as dt
import json
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

from airflow_provider_ct.core.catalog import CatalogConfig
from airflow_provider_ct.core.frontier import Frontier
from airflow_provider_ct.core.keys import TableKeys
from airflow_provider_ct.core.timeline import Timeline
from tests.helpers import fresh_events, rows_of, run_at_sealed_time

ROOT = Path(__file__).resolve().parent.parent
pytestmark = [pytest.mark.spark, pytest.mark.airflow, pytest.mark.slow]
EPOCH = dt.date(1970, 1, 1)
DAY = dt.datetime(2026, 3, 1, 8)

Event = tuple[dt.datetime, str, int]


@pytest.fixture
def lake(spark: Any, spark_lake: CatalogConfig) -> Any:
    """A fresh ``vt`` namespace with the input, in the Spark session's catalog."""
    fresh_events(spark, "vt", "ts TIMESTAMP, country STRING, amount BIGINT", "days(ts)")
    sys.path.insert(0, str(ROOT / "tests" / "dags"))
    return spark_lake.load()


def _insert(spark: Any, events: list[Event], rows: list[Event]) -> None:
    values = ", ".join(f"(TIMESTAMP '{ts:%Y-%m-%d %H:%M:%S}', '{c}', {a})" for ts, c, a in rows)
    spark.sql(f"INSERT INTO ct.vt.events (ts, country, amount) VALUES {values}")
    events.extend(rows)


def _tick(
    dag: Any, catalog: Any, conf: dict[str, Any] | None = None, state: str = "success"
) -> int:
    head = catalog.load_table("vt.events").metadata.current_snapshot()
    return run_at_sealed_time(dag, head.timestamp_ms, conf, state=state)


def _groups(events: list[Event]) -> dict[tuple[dt.date, str], list[int]]:
    groups: dict[tuple[dt.date, str], list[int]] = {}
    for ts, country, amount in events:
        groups.setdefault((ts.date(), country), []).append(amount)
    return groups


def _daily(events: list[Event]) -> Counter[tuple[Any, ...]]:
    return Counter((d, c, len(a), sum(a)) for (d, c), a in _groups(events).items())


def _partition_of_row(table: Any, spec_id: int, row: dict[str, Any]) -> tuple[Any, ...]:
    """A row's partition under spec ``spec_id`` of ``table``, by PyIceberg's own transforms."""
    from pyiceberg.partitioning import partition_record_value

    spec, schema = table.specs()[spec_id], table.schema()
    key = []
    for field in spec.fields:
        source = schema.find_field(field.source_id)
        value = partition_record_value(field, row[source.name], schema)
        key.append(field.transform.transform(source.field_type)(value))
    return tuple(key)


def _check_partitions(table: Any) -> int:
    """Each data file holds one partition (from its rows); deletes stay in theirs. Files seen."""
    partition_of: dict[str, tuple[Any, ...]] = {}
    deletes = []
    for task in table.scan().plan_files():
        data = task.file
        with table.io.new_input(data.file_path).open() as stream:
            rows = pq.read_table(stream, columns=["day", "country"]).to_pylist()
        seen = {_partition_of_row(table, data.spec_id, r) for r in rows}
        assert seen == {tuple(data.partition)}, data.file_path
        partition_of[data.file_path] = (data.spec_id, tuple(data.partition))
        deletes += list(task.delete_files)
    for delete in deletes:
        with table.io.new_input(delete.file_path).open() as stream:
            targets = set(pq.read_table(stream, columns=["file_path"]).column(0).to_pylist())
        spec_and_partition = (delete.spec_id, tuple(delete.partition))
        assert {partition_of[t] for t in targets if t in partition_of} == {spec_and_partition}
    return len(partition_of)


def _check_refresh_state(view: Any, source: Any) -> int:
    """The draft MV spec's refresh state names the source's uuid and the snapshot read."""
    summary = view.metadata.current_snapshot().summary.additional_properties
    state = json.loads(summary["refresh-state"])
    assert state["source-states"] == [
        {
            "type": "table",
            "namespace": ["vt"],
            "name": "events",
            "uuid": str(source.metadata.table_uuid),
            "snapshot-id": source.metadata.current_snapshot_id,
        }
    ]
    assert state["refresh-start-timestamp-ms"] <= view.metadata.current_snapshot().timestamp_ms
    return int(state["view-version-id"])


def test_partition_by_sort_by_and_properties_shape_the_created_target(
    lake: Any, spark: Any
) -> None:
    import view_tables

    events: list[Event] = []
    rows = [(DAY, "DE", 10), (DAY, "DE", 30), (DAY, "FR", 5), (DAY, "US", 7)]
    _insert(spark, events, [*rows, (DAY + dt.timedelta(days=40), "FR", 7)])
    _tick(view_tables.partitioned, lake)
    daily = lake.load_table("vt.daily")
    _check_refresh_state(daily, lake.load_table("vt.events"))
    spec = [(f.name, str(f.transform)) for f in daily.spec().fields]
    assert spec == [("day_month", "month"), ("country_bucket", "bucket[2]")]
    order = [
        (daily.schema().find_column_name(f.source_id), f.direction.name)
        for f in daily.sort_order().fields
    ]
    assert order == [("day", "DESC"), ("country", "ASC")]
    assert daily.properties["comment"] == "daily totals per country"
    assert rows_of(daily) == _daily(events)
    assert _check_partitions(daily) >= 3  # two months, two buckets: the check could fail

    spark.sql("UPDATE ct.vt.events SET amount = amount + 1 WHERE country = 'DE'")
    spark.sql("DELETE FROM ct.vt.events WHERE country = 'US'")
    events = [(t, c, a + 1 if c == "DE" else a) for t, c, a in events if c != "US"]
    _tick(view_tables.partitioned, lake)
    daily = lake.load_table("vt.daily")
    assert rows_of(daily) == _daily(events)
    assert any(t.delete_files for t in daily.scan().plan_files())  # retractions happened
    _check_partitions(daily)
    spark.sql("REFRESH TABLE ct.vt.daily")
    month = spark.sql("SELECT * FROM ct.vt.daily WHERE day < DATE '2026-04-01'").collect()
    assert Counter(tuple(r) for r in month) == Counter(
        r for r in _daily(events).elements() if r[0] < dt.date(2026, 4, 1)
    )


def test_a_second_definition_of_a_table_is_refused_and_writes_nothing(
    lake: Any, spark: Any
) -> None:
    import view_tables

    events: list[Event] = []
    _insert(spark, events, [(DAY, "DE", 10)])
    _tick(view_tables.partitioned, lake)
    daily = lake.load_table("vt.daily")
    props = daily.properties
    assert (props[TableKeys.OWNER_DAG], props[TableKeys.OWNER_GROUP]) == ("vt_partitioned", "daily")
    head = daily.metadata.current_snapshot_id
    _insert(spark, events, [(DAY, "FR", 3)])
    _tick(view_tables.rival, lake, state="failed")
    daily = lake.load_table("vt.daily")
    assert daily.metadata.current_snapshot_id == head  # nothing written
    assert daily.properties[TableKeys.OWNER_DAG] == "vt_partitioned"
    _tick(view_tables.partitioned, lake)  # the owner goes on
    assert rows_of(lake.load_table("vt.daily")) == _daily(events)


V1 = (
    "SELECT CAST(ts AS DATE) AS day, country, CAST(COUNT(*) AS INT) AS n, SUM(amount) AS total "
    "FROM vt.events GROUP BY CAST(ts AS DATE), country"
)
#: ``n`` widened to BIGINT, a column added (and the column order changed).
V2 = (
    "SELECT country, CAST(ts AS DATE) AS day, COUNT(*) AS n, SUM(amount) AS total, "
    "MAX(amount) AS biggest FROM vt.events GROUP BY CAST(ts AS DATE), country"
)
#: ``total`` dropped, ``n`` narrowed to a STRING.
V3 = (
    "SELECT CAST(ts AS DATE) AS day, country, CAST(COUNT(*) AS STRING) AS n, "
    "MAX(amount) AS biggest FROM vt.events GROUP BY CAST(ts AS DATE), country"
)


def _v2(events: list[Event]) -> Counter[tuple[Any, ...]]:
    """Rows of V2 in the table's column order (day, country, n, total, biggest)."""
    return Counter((d, c, len(a), sum(a), max(a)) for (d, c), a in _groups(events).items())


def _v3(events: list[Event]) -> Counter[tuple[Any, ...]]:
    return Counter((d, c, str(len(a)), max(a)) for (d, c), a in _groups(events).items())


def _columns(table: Any) -> list[tuple[str, str]]:
    return [(f.name, str(f.field_type)) for f in table.schema().fields]


def _v1(events: list[Event]) -> Counter[tuple[Any, ...]]:
    return Counter((d, c, len(a), sum(a)) for (d, c), a in _groups(events).items())


V1_COLUMNS = [("day", "date"), ("country", "string"), ("n", "int"), ("total", "long")]


def _commits(table: Any) -> tuple[int, int, int | None, int]:
    """Snapshots, metadata files (the log), the head and the current schema: what commits move."""
    metadata = table.metadata
    return (
        len(metadata.snapshots),
        len(metadata.metadata_log),
        metadata.current_snapshot_id,
        metadata.current_schema_id,
    )


def _one_commit(table: Any, before: tuple[int, int, int | None, int]) -> None:
    """The tick changed the schema and the rows in ONE commit: one snapshot, one metadata
    file, the new snapshot written under the new schema, the one before under the old."""
    snapshots, log, head, schema = before
    metadata = table.metadata
    assert (len(metadata.snapshots), len(metadata.metadata_log)) == (snapshots + 1, log + 1)
    new = metadata.current_snapshot()
    assert new.parent_snapshot_id == head
    assert new.schema_id == metadata.current_schema_id != schema
    assert metadata.snapshot_by_id(head).schema_id == schema


def _as_of(table: Any, snapshot_id: int) -> tuple[list[str], Counter[tuple[Any, ...]]]:
    """Columns and rows of a snapshot, read by PyIceberg under that snapshot's schema."""
    arrow = table.scan(snapshot_id=snapshot_id).to_arrow()
    rows = zip(*(c.to_pylist() for c in arrow.columns), strict=True)
    return arrow.column_names, Counter(rows)


def test_on_schema_change_evolve_adds_and_widens_then_refuses_a_drop(lake: Any, spark: Any) -> None:
    import view_tables

    events: list[Event] = []
    _insert(spark, events, [(DAY, "DE", 10), (DAY, "DE", 30), (DAY, "FR", 5)])
    _tick(view_tables.vt_evolve, lake, {"sql": V1})
    version = _check_refresh_state(lake.load_table("vt.shape_evolve"), lake.load_table("vt.events"))
    before = _commits(lake.load_table("vt.shape_evolve"))
    old_rows = _v1(events)
    _insert(spark, events, [(DAY, "FR", 50)])
    time = _tick(view_tables.vt_evolve, lake, {"sql": V2})
    table = lake.load_table("vt.shape_evolve")
    _one_commit(table, before)
    assert _as_of(table, before[2]) == ([c for c, _ in V1_COLUMNS], old_rows)
    assert _columns(table) == [
        ("day", "date"),
        ("country", "string"),
        ("n", "long"),
        ("total", "long"),
        ("biggest", "long"),
    ]
    assert rows_of(table) == _v2(events)
    assert Timeline.of(table).upper == Frontier.sealing(time)
    summary = table.metadata.current_snapshot().summary.additional_properties
    assert summary["ct.refresh"] == "full"  # a changed query is corrected in full
    assert _check_refresh_state(table, lake.load_table("vt.events")) != version
    head = table.metadata.current_snapshot_id
    _tick(view_tables.vt_evolve, lake, {"sql": V3}, state="failed")
    table = lake.load_table("vt.shape_evolve")
    assert table.metadata.current_snapshot_id == head and rows_of(table) == _v2(events)


def test_on_schema_change_fail_leaves_the_table_untouched(lake: Any, spark: Any) -> None:
    import view_tables

    events: list[Event] = []
    _insert(spark, events, [(DAY, "DE", 10)])
    _tick(view_tables.vt_fail, lake, {"sql": V1})
    table = lake.load_table("vt.shape_fail")
    before = (table.metadata.current_snapshot_id, _columns(table))
    _tick(view_tables.vt_fail, lake, {"sql": V2}, state="failed")
    table = lake.load_table("vt.shape_fail")
    assert (table.metadata.current_snapshot_id, _columns(table)) == before


def test_on_schema_change_recreate_replaces_columns_and_keeps_history(
    lake: Any, spark: Any
) -> None:
    import view_tables

    events: list[Event] = []
    _insert(spark, events, [(DAY, "DE", 10), (DAY, "DE", 30), (DAY, "FR", 5)])
    _tick(view_tables.vt_recreate, lake, {"sql": V1})
    before = _commits(lake.load_table("vt.shape_recreate"))
    old = before[2]
    old_rows = _v1(events)
    _insert(spark, events, [(DAY + dt.timedelta(days=1), "DE", 8)])
    time = _tick(view_tables.vt_recreate, lake, {"sql": V3})
    table = lake.load_table("vt.shape_recreate")
    _one_commit(table, before)
    assert _as_of(table, old) == ([c for c, _ in V1_COLUMNS], old_rows)
    assert _columns(table) == [
        ("day", "date"),
        ("country", "string"),
        ("n", "string"),
        ("biggest", "long"),
    ]
    assert rows_of(table) == _v3(events)
    assert Timeline.of(table).upper == Frontier.sealing(time)
    spark.sql("REFRESH TABLE ct.vt.shape_recreate")
    then = spark.sql(f"SELECT day, country, n, total FROM ct.vt.shape_recreate VERSION AS OF {old}")
    assert Counter(tuple(r) for r in then.collect()) == old_rows  # time travel: the old rows


def test_a_recreate_that_loses_its_race_leaves_the_schema_untouched(
    lake: Any, spark: Any, spark_lake: CatalogConfig
) -> None:
    """The write job stages the recreated batch; another run of the view lands first."""
    import view_tables

    from airflow_provider_ct.core.appending import land_staged
    from airflow_provider_ct.core.layout import TargetSettings
    from airflow_provider_ct.core.staging import list_manifests, referenced_files
    from airflow_provider_ct.spark.write_job import run_write
    from tests.helpers import local_path, mint_view_tick

    events: list[Event] = []
    _insert(spark, events, [(DAY, "DE", 10), (DAY, "FR", 5)])
    _tick(view_tables.vt_recreate, lake, {"sql": V1})
    _insert(spark, events, [(DAY, "DE", 30)])
    time = _sealed_time(lake)
    desc = mint_view_tick(lake, "vt.shape_recreate", V3, time).description
    assert desc is not None
    report = run_write(
        spark, spark_lake, V3, desc, target=TargetSettings(on_schema_change="recreate")
    )
    assert report.manifest is not None
    table = lake.load_table("vt.shape_recreate")
    staged = _files_under(table.location()) - referenced_files(table)
    assert staged  # the batch's files, staged under the new schema
    assert _columns(table) == V1_COLUMNS and len(table.metadata.schemas) == 1  # not committed
    _tick(view_tables.vt_recreate, lake, {"sql": V1})  # the rival: a later run lands first
    table = lake.load_table("vt.shape_recreate")
    before = _commits(table)
    outcome = land_staged(table, report.manifest, description=desc)
    assert not outcome.result.landed
    table = lake.load_table("vt.shape_recreate")
    assert _commits(table) == before and _columns(table) == V1_COLUMNS
    assert len(table.metadata.schemas) == 1
    assert rows_of(table) == _v1(events)
    assert list(list_manifests(table.location(), table.metadata.properties)) == []
    assert not any(local_path(f).exists() for f in staged)


def _sealed_time(catalog: Any) -> int:
    """A tick time the input ``vt.events`` has sealed (as ``run_at_sealed_time`` picks it)."""
    import time as _time

    from airflow_provider_ct.core.frontier import now_ms

    last = catalog.load_table("vt.events").metadata.current_snapshot().timestamp_ms
    while now_ms() < last + 1_100:
        _time.sleep(0.05)
    return now_ms() - 1_050


def _files_under(location: str) -> set[str]:
    from tests.helpers import local_path

    return {f"file://{p}" for p in local_path(location).rglob("*.parquet")}


def test_inputs_and_targets_that_evolve_keep_the_view_exact(lake: Any, spark: Any) -> None:
    """A column added to the input, its partition spec changed, the target's spec changed."""
    import view_tables

    events: list[Event] = []
    _insert(spark, events, [(DAY, "DE", 10), (DAY, "FR", 5), (DAY + dt.timedelta(days=3), "US", 4)])
    _tick(view_tables.partitioned, lake)
    spark.sql("ALTER TABLE ct.vt.events ADD COLUMN channel STRING")
    spark.sql("ALTER TABLE ct.vt.events REPLACE PARTITION FIELD ts_day WITH months(ts)")
    spark.sql("ALTER TABLE ct.vt.daily DROP PARTITION FIELD country_bucket")
    spark.sql(
        "INSERT INTO ct.vt.events VALUES (TIMESTAMP '2026-03-01 09:00:00', 'DE', 7, 'web'), "
        "(TIMESTAMP '2026-04-02 09:00:00', 'FR', 2, 'shop')"
    )
    events += [(DAY + dt.timedelta(hours=1), "DE", 7), (dt.datetime(2026, 4, 2, 9), "FR", 2)]
    spark.sql(
        "UPDATE ct.vt.events SET amount = amount * 10 WHERE country = 'US'"
    )  # an old-spec file
    events = [(t, c, a * 10 if c == "US" else a) for t, c, a in events]
    _tick(view_tables.partitioned, lake)
    daily = lake.load_table("vt.daily")
    assert rows_of(daily) == _daily(events)
    assert [f.name for f in daily.spec().fields] == ["day_month"]
    assert _check_partitions(daily) >= 2  # files of both specs, each in its partition
    spark.sql("INSERT INTO ct.vt.events VALUES (TIMESTAMP '2026-03-01 10:00:00', 'DE', 1, NULL)")
    events.append((DAY + dt.timedelta(hours=2), "DE", 1))  # a tick on the evolved input alone
    _tick(view_tables.partitioned, lake)
    assert rows_of(lake.load_table("vt.daily")) == _daily(events)
