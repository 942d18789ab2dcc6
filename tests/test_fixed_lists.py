"""Fixed ``[NOT] IN`` subqueries evaluated once, as literal lists the driver evaluates.

The list's semantics are checked against DuckDB running the subquery
itself, over values the test chose (NULLs, empty lists); the view's ticks
against DuckDB over the rows the test wrote.
"""

from __future__ import annotations

import random
from collections import Counter
from typing import Any

import pyarrow as pa
import pytest
from sqlglot import exp

from airflow_provider_ct.core.catalog import CatalogConfig
from airflow_provider_ct.core.tables import create_managed_table
from airflow_provider_ct.ivm.plan.rewrites import InlineKeys
from airflow_provider_ct.spark.ivm.fixed_lists import _in_list
from tests.helpers import advance, replace_contents, rows_of
from tests.test_incremental import _tick


@pytest.mark.parametrize("anti", [False, True])
def test_a_literal_list_filters_as_its_subquery(anti: bool) -> None:
    """Over random values and lists (NULLs, empty lists), ``WHERE x [NOT] IN (list)`` keeps
    the rows ``WHERE x [NOT] IN (SELECT ...)`` keeps."""
    import duckdb

    rng = random.Random(7 + anti)
    con = duckdb.connect()
    for _ in range(60):
        xs = [rng.choice([1, 2, 3, 4, None]) for _ in range(12)]
        listed = [rng.choice([1, 2, 5, None]) for _ in range(rng.randint(0, 3))]
        con.execute("CREATE OR REPLACE TABLE t AS SELECT * FROM (VALUES (0)) v(x) WHERE false")
        con.executemany("INSERT INTO t VALUES (?)", [(x,) for x in xs])
        con.execute("CREATE OR REPLACE TABLE l (y INTEGER)")
        for y in listed:
            con.execute("INSERT INTO l VALUES (?)", [y])
        op = "NOT IN" if anti else "IN"
        want = con.execute(f"SELECT x FROM t WHERE x {op} (SELECT y FROM l)").fetchall()
        keys = InlineKeys(tuple({y for y in listed if y is not None}), None in listed)
        condition = _in_list(exp.column("x"), keys, anti).sql(dialect="duckdb")
        got = con.execute(f"SELECT x FROM t WHERE {condition}").fetchall()
        assert Counter(got) == Counter(want), (xs, listed, condition)


F = pa.schema([("id", pa.int64()), ("k", pa.int64()), ("v", pa.int64())])
D = pa.schema([("k", pa.int64()), ("name", pa.string())])
BL = pa.schema([("bk", pa.int64()), ("note", pa.string())])


@pytest.mark.spark
@pytest.mark.slow
def test_a_not_in_blocklist_keeps_the_change_on_the_driver(
    spark: Any, spark_catalog_config: CatalogConfig
) -> None:
    """TPC-H q16's shape: a joined aggregate filtered by ``NOT IN`` a dimension's list.
    Ticks that change only the facts run on the driver (before, the subquery sent them to
    Spark's joins); one that changes the list runs in full; a list holding NULL empties
    the view; rows as DuckDB's."""
    import duckdb

    ns = "fixed_lists"
    catalog = spark_catalog_config.load()
    tables = {n: create_managed_table(catalog, f"{ns}.{n}", s) for n, s in (("f", F), ("d", D))}
    tables["bl"] = create_managed_table(catalog, f"{ns}.bl", BL)
    sql = (
        f"SELECT d.name, COUNT(*) AS n, SUM(f.v) AS t FROM {ns}.f f, {ns}.d d WHERE f.k = d.k"
        f" AND f.k NOT IN (SELECT bk FROM {ns}.bl WHERE note LIKE '%bad%')"
        " GROUP BY d.name"
    )
    rng = random.Random(16)
    rows: dict[str, list[dict[str, Any]]] = {"f": [], "d": [], "bl": []}
    lists = {1: [2, 5], 4: [3, None]}  # the blocklist's keys, from those ticks on
    seen = []
    for n in range(1, 7):
        time = 1_000 * n
        rows["f"] = [r for r in rows["f"] if rng.random() > 0.2]
        for _ in range(rng.randint(2, 5)):
            k = rng.choice([1, 2, 3, 4, 5, None])
            rows["f"].append({"id": len(rows["f"]) + 100 * n, "k": k, "v": rng.randint(0, 9)})
        written = ["f"]
        if n in (1, 3):
            rows["d"] = [{"k": k, "name": rng.choice(["x", "y", f"n{k}"])} for k in range(1, 6)]
            written.append("d")
        if n in lists:
            notes = ["bad", "fine"]
            rows["bl"] = [{"bk": k, "note": f"a {rng.choice(notes)} one"} for k in range(1, 6)]
            rows["bl"] += [{"bk": k, "note": "very bad"} for k in lists[n]]
            written.append("bl")
        for name in written:
            data = pa.Table.from_pylist(rows[name], tables[name].schema().as_arrow())
            replace_contents(tables[name], time - 500, data)
        for table in tables.values():
            advance(table, time)
        report = _tick(spark, spark_catalog_config, f"{ns}.view", sql, time)
        seen.append((report["strategy"], report.get("change_state_on"), report.get("reason")))
        con = duckdb.connect()
        for name, schema in (("f", F), ("d", D), ("bl", BL)):
            con.register(f"{name}_rows", pa.Table.from_pylist(rows[name], schema))
        duck = sql
        for name in ("f", "d", "bl"):
            duck = duck.replace(f"{ns}.{name} ", f"{name}_rows ")
        expected = Counter(tuple(r) for r in con.execute(duck).fetchall())
        assert rows_of(catalog.load_table(f"{ns}.view")) == expected, (n, report)
    on_driver = [i + 1 for i, (s, where, _) in enumerate(seen) if where == "driver"]
    # Tick 4 changes the list (full), 5 rebuilds the state that full tick left behind,
    # 6 filters every row (a NULL listed) on the driver.
    assert on_driver == [2, 3, 6], "\n".join(map(str, seen))
    assert not rows_of(catalog.load_table(f"{ns}.view"))
