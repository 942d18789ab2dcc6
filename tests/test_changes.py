"""table_changes against an independent oracle: DuckDB ``EXCEPT ALL`` over full scans.

Random histories of appends, Spark MERGE/UPDATE/DELETE in copy-on-write and
merge-on-read mode, PyIceberg overwrites and deletes, compaction, position and
equality deletes written here, and a view's batches; for random pairs of
snapshots the changes must equal contents(s2) - contents(s1) and the reverse,
computed by DuckDB over ``table.scan(snapshot_id=...).to_arrow()`` (Spark's
read where PyIceberg cannot read: equality deletes).

``CT_CHANGES_STEPS`` (default 8) sets the length of the random histories.
"""

from __future__ import annotations

import datetime
import math
import os
import random
import uuid
from collections import Counter
from decimal import Decimal
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from airflow_provider_ct.core.catalog import CatalogConfig
from airflow_provider_ct.core.deletes import attach_delete_files, write_position_deletes
from airflow_provider_ct.exceptions import ChangesUnavailableError, SchemaMismatchError
from airflow_provider_ct.ivm.changes.table_changes import TableChanges, net_changes, table_changes

STEPS = int(os.environ.get("CT_CHANGES_STEPS", "8"))

ROWS = pa.schema(
    [
        ("k", pa.int64()),
        ("v", pa.string()),
        ("n", pa.int32()),
        ("d", pa.decimal128(9, 2)),
        ("dt", pa.date32()),
    ]
)


def counter(arrow: pa.Table) -> Counter[tuple[Any, ...]]:
    return Counter(zip(*(arrow.column(n).to_pylist() for n in arrow.column_names), strict=True))


def oracle(before: pa.Table, after: pa.Table) -> tuple[Counter[Any], Counter[Any]]:
    """(after EXCEPT ALL before, before EXCEPT ALL after), computed by DuckDB."""
    import duckdb

    con = duckdb.connect()
    con.register("before_t", before)
    con.register("after_t", after)
    plus = con.sql("SELECT * FROM after_t EXCEPT ALL SELECT * FROM before_t").to_arrow_table()
    minus = con.sql("SELECT * FROM before_t EXCEPT ALL SELECT * FROM after_t").to_arrow_table()
    return counter(pa.table(plus)), counter(pa.table(minus))


def scan(table: Any, snapshot_id: int | None) -> pa.Table:
    if snapshot_id is None:
        return table.schema().as_arrow().empty_table()
    return table.scan(snapshot_id=snapshot_id).to_arrow()


def main_snapshots(table: Any) -> list[int]:
    """Snapshot ids on main, oldest first."""
    table.refresh()
    out: list[int] = []
    current = table.metadata.current_snapshot()
    while current is not None:
        out.append(current.snapshot_id)
        parent = current.parent_snapshot_id
        current = None if parent is None else table.metadata.snapshot_by_id(parent)
    return out[::-1]


def random_pairs(rng: random.Random, ids: list[int], count: int) -> list[tuple[int | None, int]]:
    pairs: list[tuple[int | None, int]] = list(zip([None, *ids[:-1]], ids, strict=True))
    for _ in range(count):
        i, j = sorted((rng.randrange(len(ids)), rng.randrange(len(ids))))
        pairs.append((None if rng.random() < 0.15 else ids[i], ids[j]))
    return pairs


def check_pairs(
    table: Any, pairs: list[tuple[int | None, int]], read: Any = scan
) -> list[TableChanges]:
    results = []
    contents: dict[int | None, pa.Table] = {}
    for old, new in pairs:
        for sid in (old, new):
            if sid not in contents:
                contents[sid] = read(table, sid)
        got = table_changes(table, old, new)
        expected = oracle(contents[old], contents[new])
        assert (counter(got.inserted), counter(got.deleted)) == expected, (old, new)
        assert got.inserted.schema == got.deleted.schema
        results.append(got)
    return results


def random_rows(rng: random.Random, count: int) -> list[dict[str, Any]]:
    rows = []
    for _ in range(count):
        row = {
            "k": rng.choice([None, *range(8)]),
            "v": rng.choice(["a", "b", None]),
            "n": rng.choice([None, 0, 1, 2]),
            "d": rng.choice([None, Decimal("1.50"), Decimal("-2.25")]),
            "dt": rng.choice([None, datetime.date(2024, 1, 1), datetime.date(2024, 2, 29)]),
        }
        rows.append(row)
        if rng.random() < 0.3:
            rows.append(dict(row))  # a duplicate
    return rows


def commit_deletes(table: Any, delete_files: list[Any], append: pa.Table | None = None) -> None:
    """One snapshot adding delete files (and optionally data files), like core/deletes does."""
    with table.transaction() as tx:
        producer = tx.update_snapshot().fast_append()
        if append is not None:
            from pyiceberg.io.pyarrow import _dataframe_to_data_files

            for data_file in _dataframe_to_data_files(tx.table_metadata, append, table.io):
                producer.append_data_file(data_file)
        attach_delete_files(producer, delete_files)
        producer.commit()
    table.refresh()


def position_delete(table: Any, positions: list[tuple[str, int]], data_file: Any = None) -> Any:
    """A position-delete file, in the partition of ``data_file`` (the one it names)."""
    from pyiceberg.manifest import DataFile

    from airflow_provider_ct.core.deletes import position_delete_data_file

    path = f"{table.location()}/data/pos-{uuid.uuid4().hex}.parquet"
    write_position_deletes(table.io, path, positions)
    from pyiceberg.typedef import Record

    spec_id = table.metadata.default_spec_id
    described = position_delete_data_file(table.io, path, lambda _path: (spec_id, Record()))
    if data_file is None:
        return described
    fields = {
        name: getattr(described, name)
        for name in ("content", "file_path", "file_format", "record_count", "file_size_in_bytes")
    }
    return DataFile.from_args(
        **fields,
        partition=data_file.partition,
        spec_id=data_file.spec_id,
        lower_bounds=described.lower_bounds,
        upper_bounds=described.upper_bounds,
        sort_order_id=None,
        equality_ids=None,
        key_metadata=None,
    )


def equality_delete(table: Any, keys: list[int | None]) -> Any:
    from pyiceberg.manifest import DataFile, DataFileContent, FileFormat
    from pyiceberg.typedef import Record

    field_id = table.schema().find_field("k").field_id
    schema = pa.schema(
        [pa.field("k", pa.int64(), metadata={b"PARQUET:field_id": str(field_id).encode()})]
    )
    path = f"{table.location()}/data/eq-{uuid.uuid4().hex}.parquet"
    with table.io.new_output(path).create(overwrite=True) as out:
        pq.write_table(pa.table({"k": keys}, schema), out)
    return DataFile.from_args(
        content=DataFileContent.EQUALITY_DELETES,
        file_path=path,
        file_format=FileFormat.PARQUET,
        partition=Record(),
        record_count=len(keys),
        file_size_in_bytes=len(table.io.new_input(path)),
        spec_id=table.metadata.default_spec_id,
        equality_ids=[field_id],
        sort_order_id=None,
        key_metadata=None,
    )


def new_table(config: CatalogConfig, name: str, **kwargs: Any) -> Any:
    catalog = config.load()
    namespace = name.split(".")[0]
    if (namespace,) not in catalog.list_namespaces():
        catalog.create_namespace(namespace)
    properties = {"format-version": "2", **kwargs.pop("properties", {})}
    return catalog.create_table(name, ROWS, properties=properties, **kwargs)


def live_files(table: Any) -> list[Any]:
    return [task.file for task in table.scan().plan_files()]


# -- without Spark --------------------------------------------------------------------------
def test_random_pyiceberg_history_with_position_deletes_partitioned(
    sqlite_catalog_config: CatalogConfig,
) -> None:
    rng = random.Random(101)
    table = new_table(sqlite_catalog_config, "chg.plain")
    spec_table = new_table(sqlite_catalog_config, "chg.parted")
    with spec_table.update_spec() as update:
        update.add_identity("v")
        update.add_identity("n")
    spec_table.refresh()
    for target in (table, spec_table):
        for _ in range(max(STEPS, 6)):
            _pyiceberg_step(rng, target)
        ids = main_snapshots(target)
        check_pairs(target, random_pairs(rng, ids, 2 * STEPS))


def _pyiceberg_step(rng: random.Random, table: Any) -> None:
    op = rng.choice(["append", "append", "delete", "overwrite", "positions"])
    table.refresh()
    if op == "append" or table.metadata.current_snapshot() is None:
        table.append(pa.Table.from_pylist(random_rows(rng, rng.randint(1, 6)), ROWS))
    elif op == "delete":
        table.delete(f"k = {rng.randrange(8)}")
    elif op == "overwrite":
        rows = pa.Table.from_pylist(random_rows(rng, rng.randint(0, 4)), ROWS)
        table.overwrite(rows, overwrite_filter=f"k = {rng.randrange(8)}")
    else:
        # Position deletes on an old file (some positions perhaps deleted already) with
        # an append in the same snapshot, then on a file that snapshot added.
        old = {f.file_path: f for f in live_files(table)}
        victim = old[rng.choice(sorted(old))]
        chosen = rng.sample(range(victim.record_count), min(victim.record_count, 2))
        delete = position_delete(table, [(victim.file_path, p) for p in chosen], victim)
        commit_deletes(table, [delete], pa.Table.from_pylist(random_rows(rng, 2), ROWS))
        added = [f for f in live_files(table) if f.file_path not in old]
        if added:
            delete = position_delete(table, [(added[0].file_path, 0)], added[0])
            commit_deletes(table, [delete])
    table.refresh()


def test_one_row_change_reads_only_the_touched_files(sqlite_catalog_config: CatalogConfig) -> None:
    table = new_table(sqlite_catalog_config, "chg.cost")
    for batch in range(12):
        rows = [{"k": batch * 100 + i, "v": "x", "n": i} for i in range(50)]
        table.append(pa.Table.from_pylist(rows, ROWS))
    base = main_snapshots(table)[-1]
    victim = next(f for f in live_files(table) if f.record_count == 50)
    commit_deletes(table, [position_delete(table, [(victim.file_path, 7)])])
    got = table_changes(table, base, main_snapshots(table)[-1])
    assert got.inserted.num_rows == 0 and got.deleted.num_rows == 1
    assert got.snapshots == 1
    assert got.files_read == 2  # the delete file and the one data file it names
    after_delete = main_snapshots(table)[-1]
    table.delete("k = 305")  # copy-on-write: one file rewritten
    got = table_changes(table, after_delete, main_snapshots(table)[-1])
    assert counter(got.deleted) == Counter({(305, "x", 5, None, None): 1})
    assert got.inserted.num_rows == 0
    assert got.files_read == 2  # the old file and its rewrite, nothing else
    assert got.bytes_read < sum(f.file_size_in_bytes for f in live_files(table)) / 3
    # Projection: only the asked columns, in the asked order.
    got = table_changes(table, base, main_snapshots(table)[-1], columns=["n", "k"])
    assert got.deleted.column_names == ["n", "k"]


def test_expired_or_unrelated_from_and_schema_changes_are_refused(
    sqlite_catalog_config: CatalogConfig,
) -> None:
    from pyiceberg.types import StringType

    table = new_table(sqlite_catalog_config, "chg.refused")
    for i in range(3):
        table.append(pa.Table.from_pylist([{"k": i}], ROWS))
    first, second, third = main_snapshots(table)
    with pytest.raises(ChangesUnavailableError, match="not an ancestor"):
        table_changes(table, third, first)
    with pytest.raises(ChangesUnavailableError, match="'nope' is not in the schema"):
        table_changes(table, first, third, columns=["k", "nope"])
    table.maintenance.expire_snapshots().by_id(first).commit()
    table.refresh()
    with pytest.raises(ChangesUnavailableError, match="expired"):
        table_changes(table, first, third)
    assert counter(table_changes(table, second, third).inserted) == Counter(
        {(2, None, None, None, None): 1}
    )
    with table.update_schema() as update:
        update.add_column("extra", StringType())
    table.refresh()
    table.append(table.schema().as_arrow().empty_table())  # a snapshot with the new schema
    table.append(pa.Table.from_pylist([{"k": 9, "extra": "e"}], table.schema().as_arrow()))
    fourth, fifth = main_snapshots(table)[-2:]
    with pytest.raises(ChangesUnavailableError, match="schema changed"):
        table_changes(table, third, fifth)
    got = table_changes(table, fourth, fifth, columns=["k", "extra"])
    assert counter(got.inserted) == Counter({(9, "e"): 1})


def test_netting_counts_multiplicity_nulls_nan_and_signed_zero() -> None:
    nan = float("nan")
    plus = pa.table({"x": [1.0, 1.0, nan, 0.0, None, None], "s": ["a", "a", "n", "z", None, None]})
    minus = pa.table({"x": [1.0, nan, -0.0, None], "s": ["a", "n", "z", None]})
    inserted, deleted = net_changes(plus, minus)
    assert sorted(map(str, counter(inserted).items())) == sorted(
        map(str, Counter({(1.0, "a"): 1, (0.0, "z"): 1, (None, None): 1}).items())
    )
    assert counter(deleted) == Counter({(-0.0, "z"): 1})
    assert math.copysign(1.0, deleted.column("x")[0].as_py()) == -1.0


# -- with Spark -----------------------------------------------------------------------------
MODES = ("copy-on-write", "merge-on-read")


def _sql_value(value: Any) -> str:
    if value is None:
        return "NULL"
    if isinstance(value, str):
        return f"'{value}'"
    if isinstance(value, Decimal):
        return f"CAST({value} AS DECIMAL(9,2))"
    if isinstance(value, datetime.date):
        return f"DATE'{value.isoformat()}'"
    return str(value)


def _values(rows: list[dict[str, Any]]) -> str:
    return ", ".join("(" + ", ".join(_sql_value(r.get(c)) for c in ROWS.names) + ")" for r in rows)


def _spark_step(rng: random.Random, spark: Any, table: Any, name: str) -> str:
    op = rng.choice(
        [
            "insert",
            "append",
            "delete",
            "update",
            "merge",
            "merge",
            "pydelete",
            "overwrite",
            "compact",
        ]
    )
    if rng.random() < 0.4:
        mode = rng.choice(MODES)
        spark.sql(
            f"ALTER TABLE {name} SET TBLPROPERTIES ('write.delete.mode'='{mode}', "
            f"'write.update.mode'='{mode}', 'write.merge.mode'='{mode}')"
        )
    key = rng.randrange(8)
    table.refresh()
    if op == "insert" or table.metadata.current_snapshot() is None:
        spark.sql(f"INSERT INTO {name} VALUES {_values(random_rows(rng, rng.randint(1, 6)))}")
    elif op == "append":
        table.append(pa.Table.from_pylist(random_rows(rng, rng.randint(1, 6)), ROWS))
    elif op == "delete":
        spark.sql(f"DELETE FROM {name} WHERE k = {key} OR (v IS NULL AND n = {key % 3})")
    elif op == "update":
        spark.sql(f"UPDATE {name} SET n = coalesce(n, 0) + 1, v = 'u' WHERE k = {key}")
    elif op == "merge":
        source = [
            {"k": k, "v": v, "n": rng.choice([None, 5])} for k in {key, key + 1, 9} for v in "ab"
        ]
        spark.sql(
            f"MERGE INTO {name} t USING (SELECT * FROM VALUES "
            + ", ".join(f"({r['k']}, '{r['v']}', {_sql_value(r['n'])})" for r in source)
            + " AS s(k, v, n)) s ON t.k = s.k AND t.v = s.v "
            "WHEN MATCHED AND s.n IS NULL THEN DELETE "
            "WHEN MATCHED THEN UPDATE SET t.n = s.n "
            "WHEN NOT MATCHED THEN INSERT (k, v, n, d, dt) VALUES (s.k, s.v, s.n, NULL, NULL)"
        )
    elif op == "pydelete":
        table.delete(f"k = {key}")
    elif op == "overwrite":
        rows = pa.Table.from_pylist(random_rows(rng, rng.randint(0, 3)), ROWS)
        table.overwrite(rows, overwrite_filter=f"k = {key}")
    else:
        short = name.split(".", 1)[1]
        spark.sql(
            f"CALL ct.system.rewrite_data_files(table => '{short}', "
            "options => map('min-input-files', '2', 'delete-file-threshold', '1'))"
        )
        spark.sql(
            f"CALL ct.system.rewrite_position_delete_files(table => '{short}', "
            "options => map('rewrite-all', 'true'))"
        )
    return op


@pytest.mark.spark
@pytest.mark.slow
def test_random_spark_history_matches_except_all(
    spark: Any, spark_catalog_config: CatalogConfig
) -> None:
    rng = random.Random(2024)
    table = new_table(spark_catalog_config, "chg.sparked")
    name = "ct.chg.sparked"
    ops = [_spark_step(rng, spark, table, name) for _ in range(max(STEPS, 6))]
    table.refresh()
    operations = {s.summary.operation.value for s in table.snapshots() if s.summary}
    assert {"append", "overwrite"} <= operations, (ops, operations)
    ids = main_snapshots(table)
    results = check_pairs(table, random_pairs(rng, ids, 2 * STEPS))
    deletes = [
        s
        for s in table.snapshots()
        if int(s.summary.additional_properties.get("added-position-delete-files", "0"))
    ]
    assert deletes, f"no merge-on-read delete in the history {ops}"
    # A compaction alone changes no row and reads nothing.
    for snapshot in table.snapshots():
        if snapshot.summary.operation.value == "replace" and snapshot.parent_snapshot_id:
            got = table_changes(table, snapshot.parent_snapshot_id, snapshot.snapshot_id)
            assert (got.snapshots, got.files_read, got.inserted.num_rows) == (0, 0, 0)
    assert sum(r.files_read for r in results) > 0


@pytest.mark.spark
@pytest.mark.slow
def test_merge_on_read_one_row_delete_reads_two_files(
    spark: Any, spark_catalog_config: CatalogConfig
) -> None:
    table = new_table(
        spark_catalog_config,
        "chg.mor_cost",
        properties={"write.delete.mode": "merge-on-read", "write.update.mode": "merge-on-read"},
    )
    for batch in range(8):
        table.append(pa.Table.from_pylist([{"k": batch * 10 + i} for i in range(10)], ROWS))
    before = main_snapshots(table)[-1]
    spark.sql("DELETE FROM ct.chg.mor_cost WHERE k = 42")
    spark.sql("UPDATE ct.chg.mor_cost SET v = 'u' WHERE k = 43")
    after = main_snapshots(table)[-1]
    got = table_changes(table, before, after)
    assert counter(got.deleted) == Counter(
        {(42, None, None, None, None): 1, (43, None, None, None, None): 1}
    )
    assert counter(got.inserted) == Counter({(43, "u", None, None, None): 1})
    # Delete files of both snapshots, the data file they name, the updated row's new file.
    assert got.snapshots == 2 and got.files_read <= 4, got


def test_equality_deletes_match_a_model_of_the_history(
    sqlite_catalog_config: CatalogConfig,
) -> None:
    """Equality deletes, written by hand (nothing here writes them), against a model.

    Neither PyIceberg nor Spark can be the oracle: PyIceberg's scan refuses
    equality deletes, and the manifests PyIceberg 0.12 writes for them store
    ``equality_ids`` as longs, which Iceberg's Java reader cannot load. So the
    expected contents per snapshot are modelled here: an append adds rows, an
    equality delete on ``k`` removes every older row with one of its keys
    (NULL matching NULL), and DuckDB takes the differences as usual.
    """
    rng = random.Random(7)
    schema = pa.schema([("k", pa.int64()), ("v", pa.string())])
    catalog = sqlite_catalog_config.load()
    catalog.create_namespace("chg")
    table = catalog.create_table("chg.eq", schema, properties={"format-version": "2"})
    model: dict[int, pa.Table] = {}
    rows: list[dict[str, Any]] = []
    for step in range(max(STEPS, 6)):
        added = [{"k": rng.choice([None, 1, 2, 3]), "v": rng.choice("ab")} for _ in range(4)]
        rows = rows + added + added[:1]
        table.append(pa.Table.from_pylist(added + added[:1], schema))
        model[main_snapshots(table)[-1]] = pa.Table.from_pylist(rows, schema)
        if step % 2:
            keys = rng.sample([None, 1, 2, 3], 2)
            commit_deletes(table, [equality_delete(table, keys)])
            rows = [r for r in rows if r["k"] not in keys]
            model[main_snapshots(table)[-1]] = pa.Table.from_pylist(rows, schema)
    ids = main_snapshots(table)
    assert sorted(model) == sorted(ids)

    def read(_: Any, snapshot_id: int | None) -> pa.Table:
        return schema.empty_table() if snapshot_id is None else model[snapshot_id]

    results = check_pairs(table, random_pairs(rng, ids, 2 * STEPS), read=read)
    assert any(r.deleted.num_rows for r in results)


@pytest.mark.spark
@pytest.mark.slow
def test_view_batches_history(spark: Any, spark_catalog_config: CatalogConfig) -> None:
    """A view's own batches (position-delete corrections, drift and its repair)."""
    from tests.test_view_correctness import DETAIL_SQL, Shop, _sql, tick

    ns = "chg_view"
    catalog = spark_catalog_config.load()
    shop = Shop(catalog, ns, seed=31)
    sql = _sql(DETAIL_SQL, ns)
    for n in (1, 2):
        shop.mutate(1000 * n - 500)
        shop.seal(1000 * n)
        assert tick(spark, spark_catalog_config, f"{ns}.view", sql, 1000 * n)["appended"]
    view = catalog.load_table(f"{ns}.view")
    view.append(
        pa.Table.from_pylist([{"customer_id": 999, "note": "ghost"}] * 2, view.schema().as_arrow())
    )
    view.refresh()
    view.delete("customer_id = 3")
    shop.seal(3000)
    assert tick(spark, spark_catalog_config, f"{ns}.view", sql, 3000)["appended"]
    ids = main_snapshots(view)
    assert len(ids) >= 5
    results = check_pairs(view, random_pairs(random.Random(5), ids, 2 * STEPS))
    assert any(r.deleted.num_rows for r in results)


@pytest.mark.spark
def test_changes_to_spark_is_exact(spark: Any, tmp_path: Any) -> None:
    from pyspark.sql.types import (
        BooleanType,
        DateType,
        DecimalType,
        IntegerType,
        LongType,
        StringType,
        StructField,
        StructType,
        TimestampNTZType,
        TimestampType,
    )

    from airflow_provider_ct.spark.frames import changes_to_spark

    utc = datetime.UTC
    data = pa.table(
        {
            "a": pa.array([1, None, 2**40], pa.int64()),
            "b": pa.array([None, 7, -1], pa.int32()),
            "c": pa.array([Decimal("12345678.91"), None, Decimal("-0.01")], pa.decimal128(10, 2)),
            "d": pa.array([datetime.date(1970, 1, 1), None, datetime.date(2400, 2, 29)]),
            "e": pa.array(
                [datetime.datetime(2024, 3, 1, 12, 0, 0, 123456, tzinfo=utc), None, None],
                pa.timestamp("us", tz="UTC"),
            ),
            "f": pa.array(
                [datetime.datetime(1900, 1, 1, 0, 0, 0, 1), None, None], pa.timestamp("us")
            ),
            "g": pa.array(["é", None, ""], pa.large_string()),
            "h": pa.array([True, None, False]),
        }
    )
    schema = StructType(
        [
            StructField("A", LongType()),
            StructField("B", IntegerType()),
            StructField("C", DecimalType(10, 2)),
            StructField("D", DateType()),
            StructField("E", TimestampType()),
            StructField("F", TimestampNTZType()),
            StructField("G", StringType()),
            StructField("H", BooleanType()),
        ]
    )
    frame = changes_to_spark(spark, data, schema, folder=str(tmp_path))
    assert frame.schema == schema
    got = [tuple(r) for r in frame.orderBy("B").collect()]
    expected = sorted(
        zip(*data.to_pydict().values(), strict=True), key=lambda r: (r[1] is not None, r[1])
    )
    naive = [
        tuple(
            v.astimezone(utc).replace(tzinfo=None) if i == 4 and v else v for i, v in enumerate(r)
        )
        for r in expected
    ]
    spark_e = [r[4] for r in got]
    assert [r[:4] + r[5:] for r in got] == [r[:4] + r[5:] for r in naive]
    # Spark gives session-time-zone (UTC here) naive datetimes for timestamp columns.
    assert spark_e == [r[4] for r in naive]
    assert changes_to_spark(spark, data.slice(0, 0), schema, folder=str(tmp_path)).count() == 0
    with pytest.raises(SchemaMismatchError, match="do not convert exactly"):
        changes_to_spark(spark, data.select(["g"]), StructType([StructField("G", LongType())]))
