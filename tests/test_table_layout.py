"""Table layouts, schema changes and owners: the rules, without Spark (PyIceberg tables)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from airflow_provider_ct.core.catalog import CatalogConfig
from airflow_provider_ct.core.keys import TableKeys
from airflow_provider_ct.core.layout import TableLayout, TargetSettings, parse_partition
from airflow_provider_ct.core.owner import Owner, claim
from airflow_provider_ct.core.schema_change import change_schema, diff_schemas
from airflow_provider_ct.core.tables import create_managed_table
from airflow_provider_ct.exceptions import ConfigurationError, OwnershipError, SchemaMismatchError
from tests.conftest import sqlite_config

EVENTS = pa.schema(
    [("ts", pa.timestamp("us")), ("country", pa.string()), ("id", pa.int64()), ("n", pa.int32())]
)


@pytest.mark.parametrize(
    ("term", "column", "transform"),
    [
        ("country", "country", "identity"),
        ("`country`", "country", "identity"),
        ("day(ts)", "ts", "day"),
        ("days(ts)", "ts", "day"),
        ("HOURS(ts)", "ts", "hour"),
        ("months(ts)", "ts", "month"),
        ("year(ts)", "ts", "year"),
        ("bucket(16, id)", "id", "bucket[16]"),
        ("bucket(id, 16)", "id", "bucket[16]"),
        ("truncate(4, country)", "country", "truncate[4]"),
        ("identity(country)", "country", "identity"),
    ],
)
def test_partition_terms_parse_as_spark_sql_spells_them(
    term: str, column: str, transform: str
) -> None:
    field = parse_partition(term)
    assert (field.column, field.transform) == (column, transform)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"partition_by": ["weeks(ts)"]}, "unknown transform 'weeks'"),
        ({"partition_by": ["bucket(0, id)"]}, "positive width"),
        ({"partition_by": ["bucket(id)"]}, "positive width"),
        ({"partition_by": ["day(ts, x)"]}, "takes one column"),
        ({"partition_by": ["a b"]}, "not a column"),
        ({"partition_by": ["day(ts)", "days(ts)"]}, "repeats a field"),
        ({"partition_by": [3]}, "takes strings"),
        ({"table_properties": {"ct.managed": "false"}}, "cannot be set"),
        ({"table_properties": {"commit.retry.num-retries": "4"}}, "cannot be set"),
    ],
)
def test_bad_layouts_fail_naming_the_term(kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(ConfigurationError, match=message):
        TableLayout.parse(**kwargs)


def test_settings_survive_their_json_and_refuse_an_unknown_mode() -> None:
    layout = TableLayout.parse(
        ["day(ts)", "bucket(8, id)", "truncate(2, country)"],
        ["ts DESC", "country ASC NULLS LAST", "bucket(8, id)"],
        {"comment": "x"},
    )
    settings = TargetSettings(layout, "recreate")
    assert TargetSettings.from_json(settings.to_json()) == settings
    with pytest.raises(ConfigurationError, match="on_schema_change='drop'"):
        TargetSettings(layout, "drop")


def test_a_layout_naming_a_column_the_query_lacks_creates_nothing(tmp_path: Path) -> None:
    catalog = sqlite_config(tmp_path).load()
    with pytest.raises(ConfigurationError, match="names column 'tz'"):
        create_managed_table(catalog, "lake.t", EVENTS, layout=TableLayout.parse(["day(tz)"]))
    assert not catalog.table_exists("lake.t")
    table = create_managed_table(
        catalog, "lake.t", EVENTS, layout=TableLayout.parse(["month(ts)"], ["id DESC"])
    )
    assert [str(f.transform) for f in table.spec().fields] == ["month"]
    assert [f.direction.name for f in table.sort_order().fields] == ["DESC"]


def _table(tmp_path: Path, schema: pa.Schema = EVENTS) -> Any:
    config: CatalogConfig = sqlite_config(tmp_path)
    return create_managed_table(config.load(), "lake.t", schema)


def test_schema_diffs_tell_added_widened_dropped_and_narrowed_columns(tmp_path: Path) -> None:
    table = _table(tmp_path)
    query = pa.schema(
        [("country", pa.string()), ("ts", pa.timestamp("us")), ("n", pa.int64()), ("x", pa.bool_())]
    )
    diff = diff_schemas(table.schema(), query)
    assert diff.added == ("x",)
    assert diff.promoted == (("n", "int", "long"),)
    assert diff.dropped == ("id",)
    assert not diff.evolvable
    narrowed = pa.schema([*[f for f in EVENTS if f.name != "id"], pa.field("id", pa.int32())])
    assert diff_schemas(table.schema(), narrowed).changed == (("id", "long", "int"),)
    assert not diff_schemas(table.schema(), EVENTS)


def test_evolve_refuses_a_drop_naming_recreate_and_fail_names_itself(tmp_path: Path) -> None:
    table = _table(tmp_path)
    dropped = pa.schema([f for f in EVENTS if f.name != "id"])
    diff = diff_schemas(table.schema(), dropped)
    with pytest.raises(SchemaMismatchError, match='query lacks column id.*"recreate"'):
        change_schema(table, diff, dropped, "evolve", None)
    added = pa.schema([*EVENTS, pa.field("x", pa.bool_())])
    diff = diff_schemas(table.schema(), added)
    with pytest.raises(SchemaMismatchError, match='new column x.*on_schema_change="fail"'):
        change_schema(table, diff, added, "fail", None)
    assert [f.name for f in table.refresh().schema().fields] == ["ts", "country", "id", "n"]


def test_recreate_keeps_old_names_mapped_to_their_old_fields(tmp_path: Path) -> None:
    """Files without ids keep resolving a replaced column's name to the field they wrote."""
    from pyiceberg.table.name_mapping import parse_mapping_from_json

    table = _table(tmp_path)
    query = pa.schema([*[f for f in EVENTS if f.name != "n"], pa.field("n", pa.string())])
    diff = diff_schemas(table.schema(), query)
    table = change_schema(table, diff, query, "recreate", None)
    new_n = table.schema().find_field("n").field_id
    mapping = parse_mapping_from_json(table.properties["schema.name-mapping.default"])
    ids = {n: f.field_id for f in mapping for n in f.names}
    assert ids["n"] == 4 and new_n != 4


def test_the_first_definition_owns_a_table_and_a_second_is_refused(tmp_path: Path) -> None:
    table = _table(tmp_path)
    mine, theirs = Owner("daily_dag", "view_daily"), Owner("copy_dag", "view_daily")
    assert claim(table, mine, record=False) is table  # read-only: checks only
    assert Owner.of(table) is None
    table = claim(table, mine)
    assert table.properties[TableKeys.OWNER_DAG] == "daily_dag"
    assert claim(table, mine) is table
    with pytest.raises(OwnershipError) as err:
        claim(table, theirs)
    assert "'daily_dag'" in str(err.value) and "'copy_dag'" in str(err.value)
    assert TableKeys.OWNER_DAG in str(err.value)


def test_a_partitioned_collection_keeps_each_file_in_its_partition(tmp_path: Path) -> None:
    """Blind writes and retractions into ``bucket(2, k), v``: files and deletes per partition."""
    import pyarrow.parquet as pq
    from pyiceberg.transforms import BucketTransform

    from airflow_provider_ct.collections import AppendOnlyCollection, register_collection
    from tests.helpers import rows_of

    catalog = sqlite_config(tmp_path).load()
    schema = pa.schema([("k", pa.int64()), ("v", pa.string())])
    layout = TableLayout.parse(["bucket(2, k)", "v"], ["k"])
    table = register_collection(catalog, "lake.log", schema, "append-only", layout=layout)
    assert [str(f.transform) for f in table.spec().fields] == ["bucket[2]", "identity"]
    rows = [(k, v) for k in range(8) for v in ("a", "b")]
    with AppendOnlyCollection.open(catalog, "lake.log", batch_interval_ms=0) as writer:
        writer.blind_write(rows)
        writer.blind_write([(1, "a"), (6, "b")], diffs=[-1, -1])
    table = catalog.load_table("lake.log")
    expected = [r for r in rows if r not in {(1, "a"), (6, "b")}]
    assert sorted(rows_of(table).elements()) == sorted(expected)
    bucket = BucketTransform(2).transform(pa_type_long())
    partition_of, deletes = {}, []
    for task in table.scan().plan_files():
        with table.io.new_input(task.file.file_path).open() as stream:
            keys = {(bucket(r["k"]), r["v"]) for r in pq.read_table(stream).to_pylist()}
        assert keys == {tuple(task.file.partition)}
        partition_of[task.file.file_path] = tuple(task.file.partition)
        deletes += task.delete_files
    # Retractions rewrite small files or add position deletes: either stays in its partition.
    for delete in deletes:
        with table.io.new_input(delete.file_path).open() as stream:
            targets = set(pq.read_table(stream).column("file_path").to_pylist())
        assert {partition_of[t] for t in targets} == {tuple(delete.partition)}
    assert len(partition_of) == 4  # two buckets times two values: the check could fail


def pa_type_long() -> Any:
    from pyiceberg.types import LongType

    return LongType()
