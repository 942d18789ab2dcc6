"""A linear view keyed by a correlated subquery over several tables (TPC-H q2's shape),
its ticks computed on the driver, checked against DuckDB over the rows the test wrote.

The test keeps the four inputs as Python lists (its model) and changes
``part`` and ``partsupp`` at random every tick: sizes that move parts in and
out of the view, costs with ties and NULLs, rows deleted, added and
duplicated, a NULL part key. ``supplier`` and ``nation`` (read by the
subquery, without the key) change on one tick only, which must run in
full; on another the driver's file cache is off and Spark computes it.
"""

from __future__ import annotations

import random
from collections import Counter
from datetime import date
from decimal import Decimal
from typing import Any

import pyarrow as pa
import pytest

from airflow_provider_ct.core.catalog import CatalogConfig
from airflow_provider_ct.core.file_cache import CACHE_MB_ENV
from airflow_provider_ct.core.tables import create_managed_table
from airflow_provider_ct.operators.append import AppendOperator
from airflow_provider_ct.spark.write_job import run_write
from tests.conftest import SPARK_CATALOG_CONN as CONN
from tests.helpers import advance, mint_view_tick, replace_contents, rows_of

SCHEMAS = {
    "part": pa.schema([("p_partkey", pa.int64()), ("p_size", pa.int32())]),
    "partsupp": pa.schema(
        [
            ("ps_partkey", pa.int64()),
            ("ps_suppkey", pa.int64()),
            ("ps_supplycost", pa.decimal128(12, 2)),
        ]
    ),
    "supplier": pa.schema(
        [("s_suppkey", pa.int64()), ("s_nationkey", pa.int32()), ("s_name", pa.string())]
    ),
    "nation": pa.schema([("n_nationkey", pa.int32()), ("n_name", pa.string())]),
}

#: TPC-H q2 in small: per part of size 15, the suppliers of one region whose cost is the
#: part's lowest among that region's suppliers; the subquery reads the block's tables again
#: under their own names, tied by ``p_partkey``, joined by its own equalities.
SQL = (
    "SELECT s_name, p_partkey, ps_suppkey, ps_supplycost FROM {ns}.part, {ns}.supplier,"
    " {ns}.partsupp, {ns}.nation WHERE p_partkey = ps_partkey AND s_suppkey = ps_suppkey"
    " AND p_size = 15 AND s_nationkey = n_nationkey AND n_name = 'EU' AND ps_supplycost ="
    " (SELECT MIN(ps_supplycost) FROM {ns}.partsupp, {ns}.supplier, {ns}.nation WHERE"
    " p_partkey = ps_partkey AND s_suppkey = ps_suppkey AND s_nationkey = n_nationkey"
    " AND n_name = 'EU')"
)

#: The same block aggregated per supplier: kept in place, its keyed block evaluated on the
#: driver with the same four-table subquery.
AGGREGATED = (
    "SELECT s_name, COUNT(*) AS n, SUM(ps_supplycost) AS cost FROM {ns}.part, {ns}.supplier,"
    " {ns}.partsupp, {ns}.nation WHERE p_partkey = ps_partkey AND s_suppkey = ps_suppkey"
    " AND p_size = 15 AND s_nationkey = n_nationkey AND n_name = 'EU' AND ps_supplycost ="
    " (SELECT MIN(ps_supplycost) FROM {ns}.partsupp, {ns}.supplier, {ns}.nation WHERE"
    " p_partkey = ps_partkey AND s_suppkey = ps_suppkey AND s_nationkey = n_nationkey"
    " AND n_name = 'EU') GROUP BY s_name"
)


class Model:
    """The four inputs as the test wrote them, and DuckDB's answer over them."""

    def __init__(self, catalog: Any, ns: str, seed: int) -> None:
        self.rng = random.Random(seed)
        self.ns = ns
        self.schemas = SCHEMAS
        self.tables = {n: create_managed_table(catalog, f"{ns}.{n}", s) for n, s in SCHEMAS.items()}
        rng = self.rng
        self.rows: dict[str, list[tuple[Any, ...]]] = {
            "part": [(k, rng.choice([15, 15, 16])) for k in range(30)] + [(None, 15)],
            "partsupp": [],
            "supplier": [(s, s % 4, f"supp{s}") for s in range(10)],
            "nation": [(0, "EU"), (1, "AS"), (2, "EU"), (3, "AM")],
        }
        for k in [*range(30), None]:
            for s in rng.sample(range(10), rng.randint(1, 4)):
                self.rows["partsupp"].append((k, s, self._cost()))
        self.changed = set(self.rows)

    def _cost(self) -> Decimal | None:
        return self.rng.choice([Decimal("1.50"), Decimal("2.25"), Decimal("3.00"), None])

    def mutate(self, *, suppliers: bool = False) -> None:
        """Change ``part`` and ``partsupp`` (and ``supplier`` when asked)."""
        rng = self.rng
        parts = [
            (k, rng.choice([15, 16])) if rng.random() < 0.15 else (k, s)
            for k, s in self.rows["part"]
        ]
        parts = [r for r in parts if rng.random() > 0.05]
        fresh = max(k for k, _ in parts if k is not None) + 1
        parts.append((fresh, 15))
        supplies = [
            (k, s, self._cost()) if rng.random() < 0.2 else (k, s, c)
            for k, s, c in self.rows["partsupp"]
        ]
        supplies = [r for r in supplies if rng.random() > 0.1]
        supplies += [(fresh, s, self._cost()) for s in rng.sample(range(10), 3)]
        supplies.append(rng.choice(supplies))  # a duplicate row: the view keeps both
        self.rows["part"], self.rows["partsupp"] = parts, supplies
        self.changed = {"part", "partsupp"}
        if suppliers:
            moved = rng.randrange(10)
            self.rows["supplier"] = [
                (s, (n + 1) % 4 if s == moved else n, name) for s, n, name in self.rows["supplier"]
            ]
            self.changed.add("supplier")

    def write(self, time: int) -> None:
        """Commit the changed inputs at ``time - 500``; every input's upper to ``time``."""
        for name, table in self.tables.items():
            if name in self.changed:
                replace_contents(table, time - 500, _arrow(self.rows[name], self.schemas[name]))
            advance(table, time)

    def oracle(self, query: str = SQL) -> Counter[tuple[Any, ...]]:
        import duckdb

        con = duckdb.connect()
        sql = query.format(ns="m")
        for name, rows in self.rows.items():
            con.register(f"{name}_rows", _arrow(rows, self.schemas[name]))
            sql = sql.replace(f"m.{name},", f"{name}_rows,").replace(f"m.{name} ", f"{name}_rows ")
        return Counter(tuple(r) for r in con.execute(sql).fetchall())


def _arrow(rows: list[tuple[Any, ...]], schema: pa.Schema) -> pa.Table:
    return pa.Table.from_pylist([dict(zip(schema.names, r, strict=True)) for r in rows], schema)


def _tick(spark: Any, config: CatalogConfig, target: str, sql: str, time: int) -> dict[str, Any]:
    decision = mint_view_tick(config.load(), target, sql, time)
    assert decision.description is not None, decision.reason
    report = run_write(spark, config, sql, decision.description).to_json()
    AppendOperator(task_id="append", report=report, iceberg_conn_id=CONN).execute({})
    return report


def test_a_linear_view_keyed_by_a_joined_subquery_ticks_on_the_driver(
    spark: Any, spark_catalog_config: CatalogConfig, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every tick equals DuckDB's over the test's rows. Ticks that change only ``part``
    and ``partsupp`` run linear on the driver (the keys' rows now, diffed with the
    target's rows of those keys); tick 5 changes ``supplier``, which holds no key: full,
    saying so; tick 6 has no file cache: Spark's keyed route, linear. On tick 8 the inputs
    are under ``CT_FULL_BELOW_ROWS`` (few rows per table read): a tick the driver evaluates
    costs its keys' rows, so auto still runs it on the driver. The same block aggregated
    per supplier is kept in place, its keyed block evaluated on the driver alike."""
    ns = "keyed_linear_q2"
    model = Model(spark_catalog_config.load(), ns, seed=2)
    sql, target, seen, grouped = SQL.format(ns=ns), f"{ns}.view", {}, {}
    for n in range(1, 9):
        if n > 1:
            model.mutate(suppliers=n == 5)
        model.write(1_000 * n)
        if n == 6:
            monkeypatch.setenv(CACHE_MB_ENV, "0")
        if n == 8:
            monkeypatch.setenv("CT_FULL_BELOW_ROWS", "1000000")
        report = _tick(spark, spark_catalog_config, target, sql, 1_000 * n)
        summed = _tick(
            spark, spark_catalog_config, f"{ns}.agg", AGGREGATED.format(ns=ns), 1_000 * n
        )
        monkeypatch.delenv(CACHE_MB_ENV, raising=False)
        got = rows_of(spark_catalog_config.load().load_table(target))
        assert got == model.oracle(), (n, report)
        got = rows_of(spark_catalog_config.load().load_table(f"{ns}.agg"))
        assert got == model.oracle(AGGREGATED), (n, summed)
        grouped[n] = (summed["strategy"], summed.get("keyed_on"))
        seen[n] = (report["strategy"], report.get("keyed_on"), report.get("reason", ""))
        if n > 1 and n not in (5, 6):
            assert report["keyed_keys"] > 0 and report["diffed_on"] == "driver", report
    assert sum(model.oracle().values()) > 3  # the view is not trivially empty
    assert [seen[n][:2] for n in (2, 3, 4, 7, 8)] == [("linear", "driver")] * 5, seen
    assert seen[5][0] == "full" and "supplier changed" in seen[5][2], seen
    assert seen[6][:2] == ("linear", None), seen
    assert [grouped[n] for n in (2, 3, 4, 7, 8)] == [("aggregate", "driver")] * 5, grouped


NESTED_SCHEMAS = {
    "supplier": pa.schema(
        [("s_suppkey", pa.int64()), ("s_name", pa.string()), ("s_nationkey", pa.int32())]
    ),
    "nation": pa.schema([("n_nationkey", pa.int32()), ("n_name", pa.string())]),
    "partsupp": pa.schema(
        [("ps_partkey", pa.int64()), ("ps_suppkey", pa.int64()), ("ps_availqty", pa.int32())]
    ),
    "part": pa.schema([("p_partkey", pa.int64()), ("p_name", pa.string())]),
    "lineitem": pa.schema(
        [
            ("l_partkey", pa.int64()),
            ("l_suppkey", pa.int64()),
            ("l_quantity", pa.decimal128(12, 2)),
            ("l_shipdate", pa.date32()),
        ]
    ),
}

#: TPC-H q20 in small: the suppliers of one nation with a forest part whose available
#: quantity exceeds half of what the supplier shipped of it in 1994. The ``IN`` over
#: ``partsupp`` holds an ``IN`` over ``part`` (bridged by ``ps_partkey``) and a scalar
#: over ``lineitem`` tied by two columns; the view does not output the key.
NESTED = (
    "SELECT s_name, s_nationkey FROM {ns}.supplier, {ns}.nation WHERE s_suppkey IN (SELECT"
    " ps_suppkey FROM {ns}.partsupp WHERE ps_partkey IN (SELECT p_partkey FROM {ns}.part"
    " WHERE p_name LIKE 'forest%') AND ps_availqty > (SELECT 0.5 * SUM(l_quantity) FROM"
    " {ns}.lineitem WHERE l_partkey = ps_partkey AND l_suppkey = ps_suppkey AND l_shipdate"
    " >= DATE '1994-01-01' AND l_shipdate < DATE '1995-01-01')) AND s_nationkey ="
    " n_nationkey AND n_name = 'CANADA'"
)
#: The same block counted per nation: kept in place, its nested parts on the driver alike.
NESTED_AGGREGATED = NESTED.replace("SELECT s_name, s_nationkey", "SELECT s_nationkey, COUNT(*)")
NESTED_AGGREGATED += " GROUP BY s_nationkey"


class NestedModel(Model):
    """q20's five inputs as the test wrote them, and DuckDB's answer over them."""

    def __init__(self, catalog: Any, ns: str, seed: int) -> None:
        self.rng = rng = random.Random(seed)
        self.ns = ns
        self.schemas = NESTED_SCHEMAS
        self.tables = {
            n: create_managed_table(catalog, f"{ns}.{n}", s) for n, s in NESTED_SCHEMAS.items()
        }
        names = ["ann", "bob", "ann", "cy", "dee", "bob", "eve", "fay", "gus", "hal", "ann", "ivy"]
        self.rows = {
            "supplier": [(s, names[s], s % 3) for s in range(12)],
            "nation": [(0, "CANADA"), (1, "PERU"), (2, "CANADA"), (3, "CHAD")],
            "part": [(p, rng.choice(["forest green", "forest", "red", "blue"])) for p in range(20)],
            "partsupp": [],
            "lineitem": [self._line() for _ in range(160)],
        }
        for p in [*range(20), None]:
            for s in rng.sample(range(12), 3):
                self.rows["partsupp"].append((p, s, rng.randint(0, 25)))
        self.changed = set(self.rows)

    def _line(self) -> tuple[Any, ...]:
        rng = self.rng
        part = rng.choice([*range(20), None])
        quantity = Decimal(rng.randint(1, 10)) + Decimal("0.50") * rng.randint(0, 1)
        day = date(rng.choice([1993, 1994, 1994, 1995]), rng.randint(1, 12), 1)
        return (part, rng.randrange(12), quantity, day)

    def mutate(
        self,
        *,
        suppliers: bool = False,
        nations: bool = False,
        only: str | None = None,
    ) -> None:
        """Change ``lineitem``, ``partsupp`` and ``part`` (``supplier``, ``nation`` if asked;
        ``only``: that one of the three alone, a part renamed for certain)."""
        rng = self.rng
        lines = [r for r in self.rows["lineitem"] if rng.random() > 0.1]
        lines += [self._line() for _ in range(15)]
        lines.append(rng.choice(lines))  # a duplicate line
        supplies = [
            (p, s, rng.randint(0, 25)) if rng.random() < 0.2 else (p, s, q)
            for p, s, q in self.rows["partsupp"]
        ]
        supplies = [r for r in supplies if rng.random() > 0.05]
        supplies.append((rng.randrange(20), rng.randrange(12), rng.randint(0, 25)))
        supplies.append(rng.choice(supplies))  # a duplicate row: both count alike
        parts = [
            (p, rng.choice(["forest", "red"])) if rng.random() < 0.15 else (p, n)
            for p, n in self.rows["part"]
        ]
        parts[0] = (parts[0][0], "red" if parts[0][1].startswith("forest") else "forest")
        changed = {"lineitem": lines, "partsupp": supplies, "part": parts}
        self.changed = {only} if only else set(changed)
        self.rows.update({n: changed[n] for n in self.changed})
        if suppliers:
            moved = rng.randrange(12)
            self.rows["supplier"] = [
                (s, name, (n + 1) % 4 if s == moved else n) for s, name, n in self.rows["supplier"]
            ]
            self.changed.add("supplier")
        if nations:
            self.rows["nation"] = [(k, "CANADA" if k == 1 else n) for k, n in self.rows["nation"]]
            self.changed.add("nation")


def test_a_subquery_inside_a_subquery_ticks_on_the_driver(
    spark: Any, spark_catalog_config: CatalogConfig, monkeypatch: pytest.MonkeyPatch
) -> None:
    """TPC-H q20's shape: every tick equals DuckDB's over the test's rows. The view does
    not output the key, so the driver moves the target by the keys' rows as they were and
    as they are (two sides); a change of ``supplier`` (the key's table) or ``nation``
    (bridged through it) stays on the driver; tick 7 has no file cache: Spark's keyed
    route. Tick 3 changes only ``part`` (bridged), tick 4 only ``lineitem`` (tied by the
    inner equality). The same block counted per nation is kept in place on the driver."""
    ns = "keyed_nested_q20"
    model = NestedModel(spark_catalog_config.load(), ns, seed=20)
    sql, target, seen, grouped = NESTED.format(ns=ns), f"{ns}.view", {}, {}
    alone = {3: "part", 4: "lineitem"}
    for n in range(1, 9):
        if n > 1:
            model.mutate(suppliers=n == 5, nations=n == 6, only=alone.get(n))
        model.write(1_000 * n)
        if n == 7:
            monkeypatch.setenv(CACHE_MB_ENV, "0")
        report = _tick(spark, spark_catalog_config, target, sql, 1_000 * n)
        summed = _tick(
            spark, spark_catalog_config, f"{ns}.agg", NESTED_AGGREGATED.format(ns=ns), 1_000 * n
        )
        monkeypatch.delenv(CACHE_MB_ENV, raising=False)
        got = rows_of(spark_catalog_config.load().load_table(target))
        assert got == model.oracle(NESTED), (n, report)
        got = rows_of(spark_catalog_config.load().load_table(f"{ns}.agg"))
        assert got == model.oracle(NESTED_AGGREGATED), (n, summed)
        grouped[n] = (summed["strategy"], summed.get("keyed_on"))
        seen[n] = (report["strategy"], report.get("keyed_on"), report.get("keyed_sides"))
    assert sum(model.oracle(NESTED).values()) > 2  # the view is not trivially empty
    driver = [n for n in range(2, 9) if n != 7]
    assert [seen[n] for n in driver] == [("linear", "driver", 2)] * len(driver), seen
    assert seen[7][:2] == ("linear", None), seen
    assert [grouped[n] for n in driver] == [("aggregate", "driver")] * len(driver), grouped
