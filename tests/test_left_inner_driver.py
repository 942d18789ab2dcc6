"""Aggregates kept in place over ``sales LEFT JOIN returns ON ..., items``: the driver's terms.

TPC-DS's sales-with-returns shape (q78, q80): a fact left-joined with its
returns by two keys, then comma-joined with a dimension by the fact's
column. The change's state is joined on the driver
(``ivm/driver/left_inner_rows.py``); the same ticks run by Spark's jobs
beside it, and both must equal DuckDB over the rows the test wrote:
unmatched sales, returns of no sale, NULL keys, duplicates, and changes
of every table (a dimension's too, which moves the sales of its items).
"""

from __future__ import annotations

import random
from collections import Counter
from typing import Any

import duckdb
import pyarrow as pa
import pytest

from airflow_provider_ct.core.catalog import CatalogConfig
from airflow_provider_ct.core.tables import create_managed_table
from tests.helpers import advance, replace_contents, rows_of
from tests.test_incremental import _normalized, _tick

SALES = pa.schema(
    [("id", pa.int64()), ("item", pa.int64()), ("ticket", pa.int64()), ("qty", pa.int64())]
)
RETURNS = pa.schema([("r_item", pa.int64()), ("r_ticket", pa.int64()), ("amt", pa.int64())])
ITEMS = pa.schema([("i_item", pa.int64()), ("cat", pa.string())])

QUERIES = {
    # q80's part: every sale, its returns' amounts beside it.
    "with_returns": (
        "SELECT i.cat, SUM(s.qty) AS q, SUM(r.amt) AS ret, COUNT(*) AS n, COUNT(r.amt) AS nr"
        " FROM {ns}.sales s LEFT JOIN {ns}.returns r ON s.item = r.r_item"
        " AND s.ticket = r.r_ticket, {ns}.items i WHERE s.item = i.i_item AND i.cat <> 'z'"
        " GROUP BY i.cat"
    ),
    # q78's part: the sales no return matched (the optional side's column in WHERE).
    "unreturned": (
        "SELECT i.cat, s.item, SUM(s.qty) AS q, COUNT(*) AS n"
        " FROM {ns}.sales s LEFT JOIN {ns}.returns r ON s.ticket = r.r_ticket"
        " AND s.item = r.r_item JOIN {ns}.items i ON s.item = i.i_item"
        " WHERE r.r_ticket IS NULL GROUP BY i.cat, s.item"
    ),
    # q75's: the dimension joined first, the returns left-joined after it.
    "returns_after_dimension": (
        "SELECT i.cat, SUM(s.qty - COALESCE(r.amt, 0)) AS net, COUNT(*) AS n"
        " FROM {ns}.sales s JOIN {ns}.items i ON s.item = i.i_item LEFT JOIN {ns}.returns r"
        " ON (s.ticket = r.r_ticket AND s.item = r.r_item) WHERE i.cat <> 'z' GROUP BY i.cat"
    ),
}

#: The same joins kept as rows (a linear view, or a composed view's linear part).
LINEAR = {
    "rows_with_returns": (
        "SELECT s.id, s.qty, r.amt, i.cat FROM {ns}.sales s LEFT JOIN {ns}.returns r"
        " ON s.item = r.r_item AND s.ticket = r.r_ticket, {ns}.items i WHERE s.item = i.i_item"
    ),
    "rows_returns_after_dimension": (
        "SELECT i.cat, s.item, s.qty - COALESCE(r.amt, 0) AS net FROM {ns}.sales s"
        " JOIN {ns}.items i ON s.item = i.i_item LEFT JOIN {ns}.returns r"
        " ON (s.ticket = r.r_ticket AND s.item = r.r_item) WHERE i.cat <> 'z'"
    ),
}


class Tables:
    """Three tables the test writes, kept as lists (the oracle's input)."""

    def __init__(self, catalog: Any, ns: str, seed: int) -> None:
        self.rng = random.Random(seed)
        self.ns = ns
        self.tables = {
            name: create_managed_table(catalog, f"{ns}.{name}", schema)
            for name, schema in (("sales", SALES), ("returns", RETURNS), ("items", ITEMS))
        }
        self.rows: dict[str, list[dict[str, Any]]] = {"sales": [], "returns": [], "items": []}
        self.next_id = 1

    def mutate(self, time: int) -> None:
        rng, rows = self.rng, self.rows
        sales = [r for r in rows["sales"] if rng.random() > 0.15]
        for _ in range(rng.randint(2, 6)):
            sale = {
                "id": self.next_id,
                "item": rng.choice([1, 2, 3, 4, None]),
                "ticket": rng.choice([10, 11, 12, None]),
                "qty": rng.choice([1, 5, None]),
            }
            self.next_id += 1
            sales.extend([sale] * rng.choice([1, 1, 2]))
        returns = [r for r in rows["returns"] if rng.random() > 0.25]
        for _ in range(rng.randint(0, 3)):
            item, ticket = rng.choice([1, 2, 3, 5, None]), rng.choice([10, 11, 12, None])
            returns.append({"r_item": item, "r_ticket": ticket, "amt": rng.choice([2, 7, None])})
        if rng.random() < 0.5 or not rows["items"]:
            cats = ["a", "b", "z", None]
            rows["items"] = [{"i_item": k, "cat": rng.choice(cats)} for k in (1, 2, 3, 4)]
        rows["sales"], rows["returns"] = sales, returns
        for name, schema in (("sales", SALES), ("returns", RETURNS), ("items", ITEMS)):
            data = pa.Table.from_pylist(rows[name], schema)
            replace_contents(self.tables[name], time - 500, data)
            advance(self.tables[name], time)

    def oracle(self, sql: str) -> Counter[tuple[Any, ...]]:
        con = duckdb.connect()
        for name, schema in (("sales", SALES), ("returns", RETURNS), ("items", ITEMS)):
            con.register(f"{name}_rows", pa.Table.from_pylist(self.rows[name], schema))
            sql = sql.replace(f"{self.ns}.{name}", f"{name}_rows")
        return Counter(tuple(r) for r in con.execute(sql).fetchall())


def _ticked_both_ways(
    spark: Any,
    config: CatalogConfig,
    monkeypatch: pytest.MonkeyPatch,
    ns: str,
    sql: str,
    check: Any,
) -> None:
    """Six ticks of ``sql`` by Spark's jobs (``<ns>.by_spark``) and with the driver
    (``<ns>.on_driver``), ``check(by_spark, on_driver)`` on each report after the
    first; both views equal DuckDB's over the rows the test wrote, every tick."""
    catalog = config.load()
    tables = Tables(catalog, ns, seed=sum(map(ord, ns)))
    for n in range(1, 7):
        time = 1_000 * n
        tables.mutate(time)
        monkeypatch.setenv("CT_DRIVER_DIFF_ROWS", "0")  # no driver: Spark's jobs
        by_spark = _tick(spark, config, f"{ns}.by_spark", sql, time)
        monkeypatch.delenv("CT_DRIVER_DIFF_ROWS")
        on_driver = _tick(spark, config, f"{ns}.on_driver", sql, time)
        if n > 1:
            check(by_spark, on_driver)
        expected = _normalized(tables.oracle(sql))
        assert _normalized(rows_of(catalog.load_table(f"{ns}.by_spark"))) == expected, n
        got = _normalized(rows_of(catalog.load_table(f"{ns}.on_driver")))
        assert got == expected, (n, on_driver)


@pytest.mark.parametrize("name", sorted(QUERIES))
def test_a_left_join_then_inner_joins_is_kept_in_place_on_the_driver(
    spark: Any, spark_catalog_config: CatalogConfig, monkeypatch: pytest.MonkeyPatch, name: str
) -> None:
    ns = f"left_inner_{name}"

    def check(by_spark: dict[str, Any], on_driver: dict[str, Any]) -> None:
        assert by_spark["strategy"] == on_driver["strategy"] == "aggregate", on_driver
        assert by_spark["change_state_on"] == "spark", by_spark
        assert on_driver["change_state_on"] == "driver", on_driver

    sql = QUERIES[name].format(ns=ns)
    _ticked_both_ways(spark, spark_catalog_config, monkeypatch, ns, sql, check)


@pytest.mark.parametrize("name", sorted(LINEAR))
def test_the_rows_of_a_left_join_beside_inner_joins_are_joined_on_the_driver(
    spark: Any, spark_catalog_config: CatalogConfig, monkeypatch: pytest.MonkeyPatch, name: str
) -> None:
    """A linear view of the same joins: the driver's rows (``linear_on``) and Spark's
    linear route both equal DuckDB's, tick after tick (duplicates, NULL keys included)."""
    ns = f"left_inner_rows_{name}"

    def check(by_spark: dict[str, Any], on_driver: dict[str, Any]) -> None:
        assert by_spark["strategy"] == on_driver["strategy"] == "linear", on_driver
        assert "linear_on" not in by_spark, by_spark
        assert on_driver["linear_on"] == "driver", on_driver

    sql = LINEAR[name].format(ns=ns)
    _ticked_both_ways(spark, spark_catalog_config, monkeypatch, ns, sql, check)
