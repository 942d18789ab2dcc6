"""Incremental view ticks: the strategy the planner picks, checked against DuckDB.

Inputs are kept as Python lists by the test (its model); every tick writes
them through ``replace_contents`` and the oracle is DuckDB over those same
lists, never over anything the product recorded or pinned.
"""

from __future__ import annotations

import datetime
import random
from collections import Counter
from collections.abc import Callable
from typing import Any

import pyarrow as pa
import pytest

from airflow_provider_ct.core.catalog import CatalogConfig
from airflow_provider_ct.core.file_cache import CACHE_MB_ENV
from airflow_provider_ct.core.query import parse_query
from airflow_provider_ct.core.tables import create_managed_table
from airflow_provider_ct.exceptions import QueryError
from airflow_provider_ct.ivm.plan.planner import plan_query
from airflow_provider_ct.operators.append import AppendOperator
from airflow_provider_ct.spark.write_job import run_write
from tests.conftest import SPARK_CATALOG_CONN as CONN
from tests.helpers import advance, mint_view_tick, replace_contents, rows_of, stamp

A = pa.schema([("id", pa.int64()), ("k", pa.int64()), ("v", pa.int64()), ("s", pa.string())])
B = pa.schema([("k", pa.int64()), ("name", pa.string())])

QUERIES = {
    "filter": ("linear", "SELECT id, v * 2 AS v2, s FROM {ns}.a WHERE v IS NULL OR v > 3"),
    "union_all": ("linear", "SELECT k, s FROM {ns}.a UNION ALL SELECT k, name FROM {ns}.b"),
    "inner_join": (
        "linear",
        "SELECT a.id, a.v, b.name FROM {ns}.a a JOIN {ns}.b b ON a.k = b.k WHERE a.v > 1",
    ),
    # Stars expanded on the driver as Spark expands them: each table's columns, in order.
    "star_join": (
        "linear",
        "SELECT b.*, a.id FROM {ns}.a a JOIN {ns}.b b ON a.k = b.k WHERE a.v > 2",
    ),
    "left_join": (
        "linear",
        "SELECT a.id, a.k, b.name FROM {ns}.a AS a LEFT JOIN {ns}.b AS b ON a.k = b.k",
    ),
    "group": (
        "group",
        "SELECT b.name, a.k, SUM(a.v) AS total, COUNT(*) AS n, COUNT(a.v) AS nv, AVG(a.v) AS av,"
        " MIN(a.s) AS lo, MAX(a.v) AS hi, COUNT(DISTINCT a.s) AS ds"
        " FROM {ns}.a a LEFT JOIN {ns}.b b ON a.k = b.k GROUP BY b.name, a.k",
    ),
    "aggregate": (
        "aggregate",
        "SELECT b.name, a.k, SUM(a.v) AS total, COUNT(*) AS n, COUNT(a.v) AS nv, AVG(a.v) AS av"
        " FROM {ns}.a a LEFT JOIN {ns}.b b ON a.k = b.k GROUP BY b.name, a.k",
    ),
    "scalar": (
        "aggregate",
        "SELECT SUM(v) AS total, COUNT(*) AS n, AVG(v) AS av, SUM(CAST(v AS DECIMAL(10, 2)))"
        " AS dec, COUNT(s) AS ns FROM {ns}.a WHERE v IS NULL OR v > 2",
    ),
    "in_place_exprs": (
        "aggregate",
        "SELECT k, s, COUNT(*) AS n, SUM(CAST(v AS DECIMAL(12, 2)) * 1.5 - id) AS x, AVG(v) AS av,"
        " SUM(CASE WHEN s LIKE 'x%' THEN v WHEN s IS NULL THEN -1 ELSE 0 END) AS xs,"
        " COUNT(v) AS nv FROM {ns}.a WHERE (v BETWEEN 1 AND 8 OR v IS NULL) AND NOT id = 3"
        " AND k IN (1, 2, 3, NULL) GROUP BY k, s",
    ),
    "joined_aggregate": (
        "aggregate",
        "SELECT b.name, a.s, COUNT(*) AS n, SUM(a.v) AS total, AVG(a.v) AS av, COUNT(a.v) AS nv"
        " FROM {ns}.a a, {ns}.b b WHERE a.k = b.k AND (a.v > 1 OR a.v IS NULL)"
        " GROUP BY b.name, a.s",
    ),
    # TPC-H q19's shape: the join equality sits in every branch of an OR.
    "or_joined": (
        "aggregate",
        "SELECT COUNT(*) AS n, SUM(a.v) AS t FROM {ns}.a a, {ns}.b b"
        " WHERE (a.k = b.k AND a.v > 2) OR (b.k = a.k AND b.name = 'same')",
    ),
    # Expressions over aggregates (TPC-H q14's shape), derived by Spark from kept
    # operands; DOUBLE at the end so that DuckDB's decimal division compares.
    "derived": (
        "aggregate",
        "SELECT k, CAST(100.00 * SUM(CASE WHEN s LIKE 'x%' THEN CAST(v AS DECIMAL(10, 2))"
        " ELSE 0 END) / NULLIF(SUM(CAST(v AS DECIMAL(10, 2))), 0) AS DOUBLE) AS share,"
        " COUNT(*) + SUM(v) AS m, AVG(v) * 2 AS av2"
        " FROM {ns}.a GROUP BY k",
    ),
    # HAVING: in place, its aggregates hidden columns of the kept state, the filter
    # over the groups' rows; with COUNT(DISTINCT), the affected groups recomputed.
    "having": (
        "aggregate",
        "SELECT k, SUM(v) AS total FROM {ns}.a GROUP BY k HAVING COUNT(*) > 1 AND"
        " (total > 2 OR k IS NULL OR MIN(s) < 'm')",
    ),
    # TPC-H q11: HAVING compares each group with a scalar over the same rows, which
    # is then an aggregate of the kept groups (a sum of sums, cast back to its type).
    "having_same_rows": (
        "aggregate",
        "SELECT a.k, SUM(CAST(a.v AS DECIMAL(10, 2))) AS t FROM {ns}.a a, {ns}.b b"
        " WHERE a.k = b.k AND b.name IS NOT NULL GROUP BY a.k"
        " HAVING SUM(CAST(a.v AS DECIMAL(10, 2))) > (SELECT SUM(CAST(a.v AS DECIMAL(10, 2)))"
        " * 0.15 FROM {ns}.a a, {ns}.b b WHERE a.k = b.k AND b.name IS NOT NULL)"
        " OR COUNT(*) * 4 > (SELECT COUNT(*) FROM {ns}.a a, {ns}.b b WHERE a.k = b.k"
        " AND b.name IS NOT NULL)",
    ),
    "having_group": (
        "group",
        "SELECT k, COUNT(DISTINCT v) AS dv, AVG(v) AS av FROM {ns}.a GROUP BY k"
        " HAVING COUNT(*) > 1",
    ),
    # DISTINCT and a GROUP BY without aggregates keep each group's row count in
    # place; a literal beside the aggregates is the same in every group. A DOUBLE
    # key (NaN and -0.0 group as Spark normalizes them) falls back to the groups.
    "distinct": ("aggregate", "SELECT DISTINCT k, s FROM {ns}.a"),
    "distinct_double_key": (
        "aggregate",
        "SELECT DISTINCT CAST(v AS DOUBLE) / 2 AS half, s FROM {ns}.a",
    ),
    "group_by_keys_and_literals": (
        "aggregate",
        "SELECT s, k, 'x' AS tag, CAST(NULL AS INT) AS nothing, -3 AS three FROM {ns}.a"
        " GROUP BY s, k",
    ),
    # USING: planned as the ON join it stands for once the inputs' columns are known
    # (the merged key is the left table's; a LEFT JOIN's unmatched rows keep theirs).
    "using_join": ("linear", "SELECT a.id, k, name FROM {ns}.a a JOIN {ns}.b b USING (k)"),
    "using_left_join_aggregate": (
        "aggregate",
        "SELECT k, name, SUM(v) AS t, COUNT(*) AS n FROM {ns}.a LEFT JOIN {ns}.b USING (k)"
        " GROUP BY k, name",
    ),
    # HAVING without GROUP BY: the one group kept in place, its row kept or dropped.
    "one_group_having": (
        "aggregate",
        "SELECT SUM(v) AS t, COUNT(*) AS n FROM {ns}.a HAVING COUNT(*) > 12 AND SUM(v) > 20",
    ),
    "literal_beside_sum": (
        "aggregate",
        "SELECT a.k, SUM(v) AS t, 'total' AS what FROM {ns}.a a JOIN {ns}.b b ON a.k = b.k"
        " GROUP BY a.k",
    ),
    # STDDEV and VARIANCE: a count and two sums kept in place, groups of 0, 1 and more values.
    "stddev_variance": (
        "aggregate",
        "SELECT b.name, STDDEV_SAMP(CAST(a.v AS INT)) AS sd, STDDEV_POP(CAST(a.v AS INT)) AS sp,"
        " VARIANCE(CAST(a.v AS SMALLINT)) AS vs, VAR_POP(CAST(a.v AS DECIMAL(9, 2)) * 1.5) AS vp,"
        " STDDEV(CAST(a.v AS INT)) / (AVG(a.v) + 1) AS cov, COUNT(*) AS n"
        " FROM {ns}.a a LEFT JOIN {ns}.b b ON a.k = b.k GROUP BY b.name",
    ),
    # A double's sum is not exact: the groups are recomputed (found at the tick).
    "stddev_double": (
        "aggregate",
        "SELECT k, STDDEV_SAMP(CAST(v AS DOUBLE)) AS sd FROM {ns}.a GROUP BY k",
    ),
    # A derived table that projects and filters (TPC-H q7, q8, q9's shape) is
    # merged into its reader and planned as the plain block it then is.
    "derived_table_aggregate": (
        "aggregate",
        "SELECT name, k2, SUM(w) AS total, COUNT(*) AS n FROM (SELECT b.name, a.k * 2 AS k2,"
        " a.v + 1 AS w FROM {ns}.a a, {ns}.b b WHERE a.k = b.k AND (a.v > 0 OR a.v IS NULL))"
        " AS d WHERE k2 < 8 GROUP BY name, k2",
    ),
    # A table read twice (TPC-H q7, q8: nation as n1 and n2): each read is an
    # input of its own in the delta rules, and b changes on every other tick.
    "self_join": (
        "linear",
        "SELECT a.id, b1.name AS n1, b2.name AS n2 FROM {ns}.a a JOIN {ns}.b b1 ON a.k = b1.k"
        " JOIN {ns}.b b2 ON a.v = b2.k",
    ),
    "self_join_aggregate": (
        "aggregate",
        "SELECT b1.name AS n1, b2.name AS n2, SUM(a.v) AS total, COUNT(*) AS n"
        " FROM {ns}.a a, {ns}.b b1, {ns}.b b2 WHERE a.k = b1.k AND b2.k = a.v"
        " GROUP BY b1.name, b2.name",
    ),
    "self_join_group": (
        "group",
        "SELECT b1.k, AVG(b2.k) AS ak, COUNT(DISTINCT a.s) AS ds FROM {ns}.a a, {ns}.b b1,"
        " {ns}.b b2 WHERE a.k = b1.k AND b2.k = a.v - 5 GROUP BY b1.k",
    ),
    # Windows partitioned by a key (a running total and a rank per k): the
    # partitions a change touches are recomputed whole.
    "window": (
        "group",
        "SELECT a.id, a.k, a.v, a.s, SUM(a.v) OVER (PARTITION BY a.k ORDER BY a.id NULLS FIRST)"
        " AS running, RANK() OVER (PARTITION BY a.k ORDER BY a.v DESC NULLS LAST) AS r,"
        " COUNT(*) OVER (PARTITION BY a.k, a.s) AS n FROM {ns}.a a WHERE a.v IS NOT NULL"
        " OR a.s = 'x'",
    ),
    "window_joined": (
        "group",
        "SELECT b.name, a.k, a.v, MAX(a.v) OVER (PARTITION BY a.k) AS hi FROM {ns}.a a"
        " JOIN {ns}.b b ON a.k = b.k",
    ),
    "derived_table_linear": (
        "linear",
        "SELECT x, s FROM (SELECT id AS x, s, v FROM {ns}.a WHERE v > 1) t WHERE s IS NOT NULL",
    ),
    # An aggregate kept in place under a query recomputed over its groups' rows:
    # a CTE read twice (TPC-H q15), a derived table with renamed columns under
    # another aggregate (q13's shape), and the top groups (ORDER BY ... LIMIT).
    "nested_cte": (
        "aggregate",
        "WITH rev(k, total, n) AS (SELECT k, SUM(v), COUNT(*) FROM {ns}.a GROUP BY k)"
        " SELECT b.name, rev.k, rev.total, rev.n FROM {ns}.b b JOIN rev ON b.k = rev.k"
        " WHERE rev.total = (SELECT MAX(total) FROM rev) OR rev.n > 3",
    ),
    "nested_derived": (
        "aggregate",
        "SELECT t.cnt, COUNT(*) AS dist, SUM(t.kk) AS ks FROM (SELECT a.k, COUNT(a.v)"
        " FROM {ns}.a a JOIN {ns}.b b ON a.k = b.k GROUP BY a.k) AS t(kk, cnt) GROUP BY t.cnt",
    ),
    "nested_top_k": (
        "aggregate",
        "SELECT a.k, a.s, SUM(a.v) AS t, COUNT(*) AS n FROM {ns}.a a GROUP BY a.k, a.s"
        " ORDER BY t DESC NULLS LAST, a.k NULLS FIRST, a.s NULLS FIRST LIMIT 3",
    ),
    # COUNT(DISTINCT x): the (group, x) pairs kept in place (NULL x a pair of its own),
    # counted again over their rows with the view's HAVING; and without GROUP BY.
    "count_distinct": (
        "aggregate",
        "SELECT b.name, COUNT(DISTINCT a.s) AS ds, COUNT(DISTINCT a.s) * 10 AS ds10"
        " FROM {ns}.a a JOIN {ns}.b b ON a.k = b.k WHERE a.v > 1 OR a.v IS NULL"
        " GROUP BY b.name HAVING COUNT(DISTINCT a.s) > 0 OR b.name IS NULL",
    ),
    "count_distinct_scalar": ("aggregate", "SELECT COUNT(DISTINCT v) AS dv FROM {ns}.a"),
    # Other calls beside it re-aggregate their values per pair (a decimal sum cast back to
    # its type).
    "count_distinct_partials": (
        "aggregate",
        "SELECT k, COUNT(*) AS n, COUNT(DISTINCT s) AS ds, SUM(CAST(v AS DECIMAL(10, 2))) AS t,"
        " COUNT(v) AS nv, MIN(s) AS lo, MAX(v) AS hi FROM {ns}.a GROUP BY k",
    ),
}

pytestmark = [pytest.mark.spark, pytest.mark.slow]

#: Nested views whose outer query the driver evaluates over the inner rows (no Spark query);
#: the top groups (``LIMIT``) are Spark's.
OUTER_ON_DRIVER = frozenset(
    {
        "count_distinct",
        "count_distinct_partials",
        "count_distinct_scalar",
        "having",
        "having_same_rows",
        "one_group_having",
        "nested_cte",
        "nested_derived",
    }
)


class Inputs:
    """Two inputs the test changes at random: inserts, updates, deletes, NULLs, duplicates."""

    def __init__(self, catalog: Any, ns: str, seed: int) -> None:
        self.rng = random.Random(seed)
        self.ns = ns
        self.a_t = create_managed_table(catalog, f"{ns}.a", A)
        self.b_t = create_managed_table(catalog, f"{ns}.b", B)
        self.a: list[tuple[Any, ...]] = []
        self.b: list[tuple[Any, ...]] = []
        self.next_id = 1
        self.b_changed = False

    def _a_row(self) -> tuple[Any, ...]:
        rng = self.rng
        row = (
            self.next_id,
            rng.choice([1, 2, 3, 4, None]),
            rng.choice([rng.randint(0, 9), None]),
            rng.choice(["x", "y", None]),
        )
        self.next_id += 1
        return row

    def mutate(self, time: int, change_b: bool = True, rewrite_b: bool = True) -> None:
        """Change ``a`` (and ``b`` with ``change_b``); an unchanged ``b`` is written again
        (new files, same rows) unless ``rewrite_b`` is false."""
        rng = self.rng
        kept = [r for r in self.a if rng.random() > 0.15]
        kept = [(r[0], r[1], rng.randint(0, 9), r[3]) if rng.random() < 0.15 else r for r in kept]
        for _ in range(rng.randint(1, 4)):
            row = self._a_row()
            kept.extend([row] * rng.choice([1, 1, 2]))
        self.a = kept
        change_b = change_b or not self.b  # an empty b is filled again
        self.b_changed = change_b
        if change_b:
            self.b = [(k, rng.choice([f"n{k}", "same", None])) for k in (1, 2, 3, None)]
            self.b = [r for r in self.b if rng.random() > 0.2]
        replace_contents(self.a_t, time, _arrow(self.a, A))
        if change_b or rewrite_b:
            replace_contents(self.b_t, time, _arrow(self.b, B))

    def seal(self, time: int) -> None:
        advance(self.a_t, time)
        advance(self.b_t, time)

    def oracle(self, sql: str) -> Counter[tuple[Any, ...]]:
        import duckdb

        con = duckdb.connect()
        con.register("a_rows", _arrow(self.a, A))
        con.register("b_rows", _arrow(self.b, B))
        duck = sql.replace(f"{self.ns}.a", "a_rows").replace(f"{self.ns}.b", "b_rows")
        return Counter(tuple(r) for r in con.execute(duck).fetchall())


def _inputs_of(config: CatalogConfig, name: str) -> tuple[str, Any, Inputs]:
    """A view test's namespace, catalog and inputs, seeded by the view's name."""
    ns = f"incr_{name}"
    catalog = config.load()
    return ns, catalog, Inputs(catalog, ns, seed=sum(map(ord, name)))


def _arrow(rows: list[tuple[Any, ...]], schema: pa.Schema) -> pa.Table:
    return pa.Table.from_pylist([dict(zip(schema.names, r, strict=True)) for r in rows], schema)


def _tick(
    spark: Any, config: CatalogConfig, target: str, sql: str, time: int, **kwargs: Any
) -> dict[str, Any]:
    decision = mint_view_tick(config.load(), target, sql, time)
    assert decision.description is not None, decision.reason
    report = run_write(spark, config, sql, decision.description, **kwargs).to_json()
    AppendOperator(task_id="append", report=report, iceberg_conn_id=CONN).execute({})
    return report


def _checked_tick(
    spark: Any, config: CatalogConfig, inputs: Inputs, sql: str, n: int, **mutate: Any
) -> tuple[str, str]:
    """Tick ``n`` (at ``1_000 * n``) after a change of the inputs: its strategy and reason.

    The view (``<ns>.view``) must then equal DuckDB's over the rows the test wrote.
    """
    inputs.mutate(1_000 * n - 500, **mutate)
    inputs.seal(1_000 * n)
    report = _tick(spark, config, f"{inputs.ns}.view", sql, 1_000 * n)
    got = rows_of(config.load().load_table(f"{inputs.ns}.view"))
    assert _normalized(got) == _normalized(inputs.oracle(sql)), (n, report)
    return report["strategy"], report.get("reason", "")


def _normalized(rows: Counter[tuple[Any, ...]]) -> Counter[tuple[Any, ...]]:
    """AVG's float: DuckDB and Spark may differ in the last bits."""
    return Counter(
        {tuple(round(v, 9) if isinstance(v, float) else v for v in r): n for r, n in rows.items()}
    )


@pytest.mark.parametrize("name", sorted(QUERIES))
def test_incremental_ticks_equal_oracle(
    spark: Any, spark_catalog_config: CatalogConfig, name: str
) -> None:
    strategy, template = QUERIES[name]
    ns, catalog, inputs = _inputs_of(spark_catalog_config, name)
    sql = template.format(ns=ns)
    columns = {f"{ns}.a": A.names, f"{ns}.b": B.names} if "USING" in sql else None
    assert plan_query(parse_query(sql), columns).strategy == strategy
    target = f"{ns}.view"
    seen = []
    for n in range(1, 6):
        time = 1_000 * n
        inputs.mutate(time - 500, change_b=n % 2 == 0)
        inputs.seal(time)
        report = _tick(spark, spark_catalog_config, target, sql, time)
        seen.append(report["strategy"])
        assert report["diffed_on"] == "driver", report  # a few rows: no Spark diff jobs
        if n > 1:  # the first tick rebuilds (the outer's tables are not opened for it)
            wanted = "driver" if name in OUTER_ON_DRIVER else None
            assert report.get("outer_on") == wanted, (name, n, report)
            if strategy == "linear":  # a few changed rows: joined and diffed in Arrow
                assert report.get("linear_on") == "driver", (name, n, report)
        got = rows_of(catalog.load_table(target))
        assert _normalized(got) == _normalized(inputs.oracle(sql)), (name, n, report)
    assert seen[0] == "full"  # the first tick has nothing to start from
    assert seen[1:] == [TICKED_AS.get(name, strategy)] * 4, seen


#: Views the write job runs by another strategy than the plan's (found at the tick).
TICKED_AS = {"distinct_double_key": "group", "stddev_double": "group"}


def test_distinct_pairs_that_cannot_stay_in_place_run_the_grouped_plan(
    spark: Any, spark_catalog_config: CatalogConfig
) -> None:
    """A double's sum is not kept in place (found at the tick): the view planned as pairs
    kept in place runs the plan it has without the split, not in full; rows as DuckDB's."""
    ns, catalog, inputs = _inputs_of(spark_catalog_config, "distinct_double")
    sql = f"SELECT k, COUNT(DISTINCT s) AS ds, SUM(CAST(v AS DOUBLE)) AS t FROM {ns}.a GROUP BY k"
    assert plan_query(parse_query(sql)).strategy == "aggregate"
    seen, reasons = [], []
    for n in range(1, 4):
        inputs.mutate(1_000 * n - 500)
        inputs.seal(1_000 * n)
        report = _tick(spark, spark_catalog_config, f"{ns}.view", sql, 1_000 * n)
        seen.append(report["strategy"])
        reasons.append(report["reason"])
        got = rows_of(catalog.load_table(f"{ns}.view"))
        assert _normalized(got) == _normalized(inputs.oracle(sql)), (n, report)
    assert seen == ["full", "group", "group"], (seen, reasons)
    assert "(not in place: SUM/AVG of" in reasons[1], reasons[1]


def test_a_window_tick_recomputes_whole_partitions(
    spark: Any, spark_catalog_config: CatalogConfig
) -> None:
    """A row inserted first in k=1's order moves the running total of every row of k=1,
    those of other ``s`` too: the partition, not the changed rows' keys, is recomputed."""
    ns = "incr_window_whole"
    catalog = spark_catalog_config.load()
    inputs = Inputs(catalog, ns, seed=1)
    sql = (
        f"SELECT a.id, a.k, a.s, a.v, SUM(a.v) OVER (PARTITION BY a.k ORDER BY a.id) AS run,"
        f" COUNT(*) OVER (PARTITION BY a.k, a.s) AS n FROM {ns}.a a"
    )
    assert plan_query(parse_query(sql)).key_sql == ("a.k",)
    inputs.a = [(10, 1, 1, "x"), (20, 1, 2, "y"), (30, 1, 4, "y"), (40, 2, 8, "x")]
    inputs.b = [(1, "one")]
    target, strategies = f"{ns}.view", []
    for n, rows in enumerate(([], [(5, 1, 100, "x")], [(6, 2, 1000, "y")]), start=1):
        inputs.a = inputs.a + rows
        replace_contents(inputs.a_t, 1_000 * n - 500, _arrow(inputs.a, A))
        replace_contents(inputs.b_t, 1_000 * n - 500, _arrow(inputs.b, B))
        inputs.seal(1_000 * n)
        report = _tick(spark, spark_catalog_config, target, sql, 1_000 * n)
        strategies.append(report["strategy"])
        got = rows_of(catalog.load_table(target))
        assert got == inputs.oracle(sql), (n, report)
    assert strategies == ["full", "group", "group"], strategies


#: Views whose subqueries read ``b`` only: fixed filters while ``b`` does not change
#: (none of them keyed: a ``NOT IN``, an untied scalar, a tie under ``NOT``).
FIXED_SUBQUERIES = {
    "fixed_not_in": (
        "linear",
        "SELECT a.id, a.v FROM {ns}.a a WHERE a.k NOT IN (SELECT k FROM {ns}.b WHERE name ="
        " 'same') AND a.v > (SELECT COUNT(*) FROM {ns}.b)",
    ),
    "fixed_exists": (
        "aggregate",
        # Tied by a column equality only to a non-key value: no key bounds the change.
        "SELECT a.s, COUNT(*) AS n, SUM(a.v) AS t FROM {ns}.a a WHERE EXISTS (SELECT 1 FROM"
        " {ns}.b b WHERE b.name > a.s) OR a.s IS NULL GROUP BY a.s",
    ),
    "fixed_in_group": (
        "group",
        "SELECT a.k, COUNT(DISTINCT a.s) AS ds, AVG(a.v) AS t FROM {ns}.a a WHERE NOT (a.k IN"
        " (SELECT k FROM {ns}.b) AND a.v > 2) GROUP BY a.k",
    ),
}


@pytest.mark.parametrize("name", sorted(FIXED_SUBQUERIES))
def test_subqueries_over_unchanged_tables_are_fixed_filters(
    spark: Any, spark_catalog_config: CatalogConfig, name: str
) -> None:
    """Ticks that change only ``a`` run the plan's strategy; a tick that changes ``b`` (read
    in a subquery no rule bounds: a NOT IN beside an untied value, an EXISTS tied by an
    inequality, an IN under NOT) runs in full, with the reason; every tick equals DuckDB's."""
    strategy, template = FIXED_SUBQUERIES[name]
    ns, catalog, inputs = _inputs_of(spark_catalog_config, name)
    sql = template.format(ns=ns)
    plan = plan_query(parse_query(sql))
    assert plan.fixed_inputs == {f"{ns}.b"} and not plan.keyed_inputs
    target = f"{ns}.view"
    seen, reasons, expected = [], [], []
    b_ticks, stateless = [], False
    for n in range(1, 9):
        time = 1_000 * n
        inputs.mutate(time - 500, change_b=n in (1, 4), rewrite_b=False)
        inputs.seal(time)
        if inputs.b_changed and n > 1:
            b_ticks.append(n)
        # An in-place view keeps no state through a tick that changed b: the next tick
        # rebuilds it (a full correction, whatever changed) before running in place.
        expected.append("full" if n == 1 or n in b_ticks or stateless else strategy)
        stateless = strategy == "aggregate" and n in b_ticks and not stateless
        report = _tick(spark, spark_catalog_config, target, sql, time)
        seen.append(report["strategy"])
        reasons.append(report.get("reason", ""))
        got = rows_of(catalog.load_table(target))
        assert _normalized(got) == _normalized(inputs.oracle(sql)), (name, n, report)
    assert seen == expected, (seen, reasons)
    assert expected.count(strategy) >= 3, expected  # most ticks ran the plan's strategy
    assert f"{ns}.b changed and is read in a subquery" in reasons[3], reasons[3]


#: Views with semi- and anti-joins kept in place: ``b`` changes on every tick.
SEMI_JOINS = {
    "semi_exists": (
        "SELECT a.s, COUNT(*) AS n, SUM(a.v) AS t FROM {ns}.a a WHERE EXISTS (SELECT 1 FROM"
        " {ns}.b b WHERE b.k = a.k AND b.name IS NOT NULL) GROUP BY a.s"
    ),
    "semi_not_exists": (
        "SELECT a.k, COUNT(*) AS n, SUM(a.v) AS t FROM {ns}.a a WHERE a.v > 1 AND NOT EXISTS"
        " (SELECT * FROM {ns}.b WHERE k = a.k AND name = 'same') GROUP BY a.k"
    ),
    "semi_in_joined": (
        "SELECT bb.name, COUNT(*) AS n, SUM(a.id) AS t FROM {ns}.a a JOIN {ns}.b bb ON a.k ="
        " bb.k WHERE a.v IN (SELECT k FROM {ns}.b WHERE name LIKE 'n%') GROUP BY bb.name"
    ),
}


@pytest.mark.parametrize("name", sorted(SEMI_JOINS))
def test_semi_and_anti_joins_are_kept_in_place(
    spark: Any, spark_catalog_config: CatalogConfig, name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Ticks that change ``a`` and the subquery's ``b`` run in place on the driver; with the
    driver's routes off, Spark recomputes the keys the changes hold (the subqueries are
    keyed); every tick equals DuckDB's."""
    ns, _, inputs = _inputs_of(spark_catalog_config, name)
    sql = SEMI_JOINS[name].format(ns=ns)
    plan = plan_query(parse_query(sql))
    assert (plan.strategy, plan.semi_inputs) == ("aggregate", {f"{ns}.b"})
    reports = _ticks_driver_off_at_5(spark, spark_catalog_config, inputs, sql, 6, monkeypatch)
    seen = [(r["strategy"], r.get("change_state_on")) for r in reports]
    in_place = ("aggregate", "driver")
    # semi_in_joined: b joins the block by k while the IN ties v; b's change is bridged.
    assert seen[1:4] == [in_place] * 3 and seen[4] == ("aggregate", "spark"), seen
    assert seen[5] == in_place, seen


def _ticks_driver_off_at_5(
    spark: Any,
    config: CatalogConfig,
    inputs: Inputs,
    sql: str,
    count: int,
    monkeypatch: pytest.MonkeyPatch,
) -> list[dict[str, Any]]:
    """``count`` ticks of ``<ns>.view`` after changes of ``a`` and ``b``, tick 5 with the
    driver's routes off; every tick equals DuckDB's. Their reports."""
    catalog, target, reports = config.load(), f"{inputs.ns}.view", []
    for n in range(1, count + 1):
        time = 1_000 * n
        inputs.mutate(time - 500, change_b=True)
        inputs.seal(time)
        if n == 5:
            monkeypatch.setenv("CT_DRIVER_DIFF_ROWS", "0")
        report = _tick(spark, config, target, sql, time)
        monkeypatch.delenv("CT_DRIVER_DIFF_ROWS", raising=False)
        reports.append(report)
        got = rows_of(catalog.load_table(target))
        assert _normalized(got) == _normalized(inputs.oracle(sql)), (n, report)
    return reports


#: Views comparing rows with an uncorrelated scalar subquery over a table that changes
#: (TPC-H q22's shape): the value moves on every tick, flipping the rows between its values.
PARAMETERS = {
    # q22 as written: a derived table that filters with the scalar and a NOT EXISTS
    # (one AVG over one table: computed on the driver from the cached columns).
    "param_derived_anti": (
        "SELECT c, COUNT(*) AS n, SUM(v) AS t FROM (SELECT SUBSTRING(s, 1, 1) AS c, v FROM"
        " {ns}.a a WHERE s IN ('x', 'y') AND CAST(v AS DECIMAL(10, 2)) > (SELECT"
        " AVG(CAST(v AS DECIMAL(10, 2))) FROM {ns}.a WHERE v > 0 AND s IN ('x', 'y')) AND"
        " NOT EXISTS (SELECT * FROM {ns}.b b WHERE b.k = a.k AND b.name = 'same')) AS d"
        " GROUP BY c",
        ["driver"],
    ),
    # Joined with b, an integer value over a (its MAX moves as rows come and go); an
    # expression around the aggregate is Spark's to compute.
    "param_joined": (
        "SELECT b.name, COUNT(*) AS n, SUM(a.v) AS t FROM {ns}.a a JOIN {ns}.b b ON a.k = b.k"
        " WHERE a.id >= (SELECT MAX(id) - 6 FROM {ns}.a WHERE v > 1) GROUP BY b.name",
        ["spark"],
    ),
    # Two values over both tables; b's MAX is NULL when b holds no key.
    "param_two": (
        "SELECT a.s, COUNT(*) AS n, SUM(a.v) AS t FROM {ns}.a a WHERE a.v + 0.5 < (SELECT"
        " AVG(CAST(v AS DECIMAL(10, 2))) + 1 FROM {ns}.a) AND a.k <= (SELECT MAX(k) FROM {ns}.b)"
        " GROUP BY a.s",
        ["driver", "spark"],
    ),
}


@pytest.mark.parametrize("name", sorted(PARAMETERS))
def test_scalar_subqueries_over_changing_tables_are_parameters(
    spark: Any, spark_catalog_config: CatalogConfig, name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Ticks that change ``a`` and ``b`` (and so the scalar subqueries' values) run in place
    on the driver, adding and removing the rows a moved value flips; with the driver's
    routes off, the tick stays in place by Spark's terms, each subquery by its own rule
    (the rows between the two values); every tick equals DuckDB's."""
    ns, _, inputs = _inputs_of(spark_catalog_config, name)
    template, computed_on = PARAMETERS[name]
    sql = template.format(ns=ns)
    plan = plan_query(parse_query(sql))
    assert plan.strategy == "aggregate" and plan.param_inputs, plan.explain()
    reports = _ticks_driver_off_at_5(spark, spark_catalog_config, inputs, sql, 8, monkeypatch)
    seen = [(r["strategy"], r.get("change_state_on")) for r in reports]
    flipped = sum(r.get("flipped_rows", 0) for r in reports)
    on = [r["parameters_on"] for r in reports if r.get("change_state_on") == "driver"]
    assert on and all(o == computed_on for o in on), on  # where the values were computed
    in_place = ("aggregate", "driver")
    # Tick 5 keeps the state by Spark's terms (the driver's routes off); then the driver's.
    assert seen[1:4] == [in_place] * 3 and seen[4] == ("aggregate", "spark"), seen
    assert "subquery_changes" in reports[4], reports[4]
    assert seen[5:] == [in_place] * 3, seen
    assert flipped > 0  # some tick moved a value across rows (the rule was exercised)


def test_a_value_that_flips_more_rows_than_the_driver_takes_runs_in_full(
    spark: Any, spark_catalog_config: CatalogConfig, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Only ``b`` changes, moving ``MAX(k)`` from 2 to 4: ``a``'s 8 rows of keys 3 and 4
    flip in. Under a driver row limit of 3 the tick stays in place by Spark's terms (the
    rows between the two values); under the default one it runs in place on the driver
    and reports them; every tick equals DuckDB's."""
    ns, catalog, inputs = _inputs_of(spark_catalog_config, "param_limit")
    sql = (
        f"SELECT a.s, COUNT(*) AS n, SUM(a.v) AS t FROM {ns}.a a"
        f" WHERE a.k <= (SELECT MAX(k) FROM {ns}.b) GROUP BY a.s"
    )
    inputs.a = [(i, i % 5, i, "x" if i % 2 else "y") for i in range(1, 21)]
    replace_contents(inputs.a_t, 100, _arrow(inputs.a, A))
    seen = []
    for n, top in ((1, 2), (2, 4), (3, 2), (4, 4)):
        time = 1_000 * n
        inputs.b = [(k, f"n{k}") for k in range(1, top + 1)]
        replace_contents(inputs.b_t, time - 500, _arrow(inputs.b, B))
        inputs.seal(time)
        if n == 2:
            monkeypatch.setenv("CT_DRIVER_DIFF_ROWS", "3")
        report = _tick(spark, spark_catalog_config, f"{ns}.view", sql, time)
        monkeypatch.delenv("CT_DRIVER_DIFF_ROWS", raising=False)
        seen.append((report["strategy"], report.get("flipped_rows")))
        got = rows_of(catalog.load_table(f"{ns}.view"))
        assert _normalized(got) == _normalized(inputs.oracle(sql)), (n, report)
    assert seen[1] == ("aggregate", None) and seen[3] == ("aggregate", 8), seen


#: Views whose subqueries are tied to the block by a key (TPC-H q17, q18, q21, q2's
#: shapes): ``a`` and ``b`` change on every tick, NULL keys and duplicates included.
KEYED = {
    "keyed_scalar": (  # q17: a correlated AVG of the table the block reads
        "aggregate",
        "SELECT SUM(a.v) AS t, COUNT(*) AS n FROM {ns}.a a WHERE a.v >= (SELECT AVG(a2.v)"
        " FROM {ns}.a a2 WHERE a2.k = a.k)",
    ),
    "keyed_scalar_decimal": (  # q17 as written: a multiple of a decimal AVG, on the driver
        "aggregate",
        "SELECT SUM(a.v) AS t, COUNT(*) AS n FROM {ns}.a a WHERE a.v * 2 >= (SELECT 0.5 *"
        " AVG(CAST(a2.v AS DECIMAL(12, 2))) FROM {ns}.a a2 WHERE a2.k = a.k AND a2.s <> 'z')",
    ),
    "keyed_count_of_none": (  # a COUNT over a key without rows is 0, not NULL (NULL keys too)
        "aggregate",
        "SELECT a.s, SUM(a.v) AS t, COUNT(*) AS n FROM {ns}.a a WHERE a.v >= (SELECT"
        " COUNT(*) * 2 FROM {ns}.b b WHERE b.k = a.k AND b.name <> 'same') GROUP BY a.s",
    ),
    "keyed_in_having": (  # q18: IN over a subquery grouped by its output, with HAVING
        "aggregate",
        "SELECT a.k, b.name, SUM(a.v) AS t, COUNT(*) AS n FROM {ns}.a a JOIN {ns}.b b"
        " ON a.k = b.k WHERE a.k IN (SELECT k FROM {ns}.a GROUP BY k HAVING SUM(v) > 12)"
        " GROUP BY a.k, b.name",
    ),
    "keyed_exists_inequality": (  # q21: EXISTS tied by a key and an inequality, NOT EXISTS
        "aggregate",
        "SELECT a1.s, COUNT(*) AS n FROM {ns}.a a1 WHERE EXISTS (SELECT 1 FROM {ns}.a a2"
        " WHERE a2.k = a1.k AND a2.id <> a1.id) AND NOT EXISTS (SELECT 1 FROM {ns}.b b"
        " WHERE b.k = a1.k AND b.name = 'same') GROUP BY a1.s",
    ),
    "keyed_exists_or": (  # TPC-DS q35: EXISTS over one table AND (EXISTS OR EXISTS)
        "aggregate",
        "SELECT a1.s, COUNT(*) AS n, SUM(a1.v) AS t FROM {ns}.a a1 WHERE EXISTS (SELECT 1"
        " FROM {ns}.b b WHERE b.k = a1.k) AND (EXISTS (SELECT 1 FROM {ns}.a a2 WHERE"
        " a2.k = a1.k AND a2.v > 6) OR NOT EXISTS (SELECT 1 FROM {ns}.b b2 WHERE b2.k = a1.k"
        " AND b2.name = 'same')) GROUP BY a1.s",
    ),
    "keyed_min_linear": (  # q2: the rows holding their key's minimum, tied through b
        "linear",
        "SELECT a.id, a.k, a.v, b.name FROM {ns}.a a JOIN {ns}.b b ON a.k = b.k"
        " WHERE a.v = (SELECT MIN(a2.v) FROM {ns}.a a2 WHERE a2.k = b.k)",
    ),
    "keyed_bridged": (  # q18's customer: b holds no key, but joins a by an equality
        "aggregate",
        "SELECT b.name, SUM(a.v) AS t, COUNT(*) AS n FROM {ns}.a a JOIN {ns}.b b ON a.v = b.k"
        " WHERE a.id > (SELECT MIN(a2.id) FROM {ns}.a a2 WHERE a2.k = a.k) GROUP BY b.name",
    ),
    "keyed_narrowed": (  # q17's filters: the keys narrowed by a's and b's own conditions
        "aggregate",
        "SELECT a.s, SUM(a.v) AS t, COUNT(*) AS n FROM {ns}.a a JOIN {ns}.b b ON a.k = b.k"
        " WHERE b.name <> 'same' AND a.s <> 'y' AND a.v >= (SELECT AVG(a2.v)"
        " FROM {ns}.a a2 WHERE a2.k = a.k) GROUP BY a.s",
    ),
    "keyed_distinct_group": (  # a grouped plan: its affected groups come from the terms
        "group",
        "SELECT a.s, COUNT(DISTINCT a.k) AS dk, AVG(a.v) AS t FROM {ns}.a a WHERE a.k IN"
        " (SELECT k FROM {ns}.b WHERE name IS NOT NULL) OR a.v = 0 GROUP BY a.s",
    ),
}


#: The views whose keyed blocks the driver evaluates itself (no Spark job; the linear one
#: diffed by its key column against the target);
#: ``keyed_scalar``'s AVG of integers is a double, which only Spark computes.
KEYED_ON_DRIVER = {
    "keyed_min_linear",
    "keyed_scalar_decimal",
    "keyed_count_of_none",
    "keyed_in_having",
    "keyed_exists_inequality",
    "keyed_exists_or",
    "keyed_bridged",
    "keyed_narrowed",
}


@pytest.mark.parametrize("name", sorted(KEYED))
def test_keyed_subqueries_recompute_the_keys_a_change_holds(
    spark: Any, spark_catalog_config: CatalogConfig, name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every tick after the first runs the plan's strategy though the subqueries' tables
    change, and equals DuckDB's: the keys' rows fetched by the driver, and on tick 4
    (the driver's file cache off) read by Spark; the in-place views' blocks evaluated by
    the driver itself but on tick 4."""
    strategy, template = KEYED[name]
    ns, catalog, inputs = _inputs_of(spark_catalog_config, name)
    sql = template.format(ns=ns)
    plan = plan_query(parse_query(sql))
    assert plan.strategy == strategy and plan.keyed_inputs, plan
    target, seen = f"{ns}.view", []
    for n in range(1, 6):
        time = 1_000 * n
        inputs.mutate(time - 500, change_b=True)
        inputs.seal(time)
        if n == 4:
            monkeypatch.setenv(CACHE_MB_ENV, "0")
        report = _tick(spark, spark_catalog_config, target, sql, time)
        monkeypatch.delenv(CACHE_MB_ENV, raising=False)
        seen.append((report["strategy"], report.get("keyed_rows_on"), report.get("keyed_on")))
        got = rows_of(catalog.load_table(target))
        assert _normalized(got) == _normalized(inputs.oracle(sql)), (name, n, report)
    assert [s for s, _, _ in seen[1:]] == [strategy] * 4, seen
    routes = [on for _, on, _ in seen[1:]]
    assert routes == [["driver"], ["driver"], ["spark"], ["driver"]], seen
    evaluated = [on for _, _, on in seen[1:]]
    driver = "driver" if name in KEYED_ON_DRIVER else None
    assert evaluated == [driver, driver, None, driver], seen


def test_keys_narrowed_by_a_filter_keep_those_whose_rows_passed_before(
    spark: Any, spark_catalog_config: CatalogConfig
) -> None:
    """The driver narrows the keys by ``d``'s own filter over its rows as they are and as
    they were: a key whose flag turns off must still be read (its old rows leave the
    view), one turning on too. Flags flip on every tick over 30 keys; every tick equals
    DuckDB's over the rows the test wrote, and each tick's keys were fetched on the
    driver."""
    import duckdb

    ns = "incr_keyed_narrowing"
    catalog = spark_catalog_config.load()
    f_schema = pa.schema([("id", pa.int64()), ("k", pa.int64()), ("v", pa.int64())])
    d_schema = pa.schema([("k", pa.int64()), ("flag", pa.string())])
    f_table = create_managed_table(catalog, f"{ns}.f", f_schema)
    d_table = create_managed_table(catalog, f"{ns}.d", d_schema)
    rng = random.Random(41)
    facts = [(i, rng.randint(0, 29), rng.randint(0, 20)) for i in range(300)]
    flags = {k: rng.choice(["y", "n"]) for k in range(30)}
    sql = (
        f"SELECT SUM(f.v) AS t, COUNT(*) AS n FROM {ns}.f f JOIN {ns}.d d ON f.k = d.k"
        f" WHERE d.flag = 'y' AND f.v >= (SELECT AVG(f2.v) FROM {ns}.f f2 WHERE f2.k = f.k)"
    )
    routes = []
    for n in range(1, 7):
        time = 1_000 * n
        if n > 1:
            flags.update({k: "n" if flags[k] == "y" else "y" for k in rng.sample(range(30), 6)})
            facts = [r for r in facts if rng.random() > 0.05]
            facts += [(1_000 * n + i, rng.randint(0, 29), rng.randint(0, 20)) for i in range(8)]
        fact_rows = pa.Table.from_pylist(
            [dict(zip(f_schema.names, r, strict=True)) for r in facts], f_schema
        )
        flag_rows = pa.Table.from_pylist([{"k": k, "flag": v} for k, v in flags.items()], d_schema)
        replace_contents(f_table, time - 500, fact_rows)
        replace_contents(d_table, time - 500, flag_rows)
        advance(f_table, time)
        advance(d_table, time)
        report = _tick(spark, spark_catalog_config, f"{ns}.view", sql, time)
        routes.append((report["strategy"], report.get("keyed_rows_on")))
        con = duckdb.connect()
        con.register("f_rows", fact_rows)
        con.register("d_rows", flag_rows)
        duck = sql.replace(f"{ns}.f", "f_rows").replace(f"{ns}.d", "d_rows")
        expected = Counter(tuple(r) for r in con.execute(duck).fetchall())
        got = rows_of(catalog.load_table(f"{ns}.view"))
        assert _normalized(got) == _normalized(expected), (n, report)
    assert routes[1:] == [("aggregate", ["driver"])] * 5, routes


def test_a_changed_table_without_the_key_ticks_by_the_subquerys_own_rule(
    spark: Any, spark_catalog_config: CatalogConfig
) -> None:
    """``b`` joins the block by an inequality, so the keyed rule does not hold for a tick
    that changes it: ``b``'s change runs by the delta rules and ``a``'s, read in the
    subquery, by the subquery's tie (its rows of the changed keys); one that changes only
    ``a`` recomputes its keys."""
    ns = "incr_keyed_unbounded"
    catalog = spark_catalog_config.load()
    inputs = Inputs(catalog, ns, seed=11)
    sql = (
        f"SELECT a.s, COUNT(*) AS n, SUM(a.id) AS t FROM {ns}.a a JOIN {ns}.b b ON a.v < b.k"
        f" WHERE a.id > (SELECT MIN(a2.id) FROM {ns}.a a2 WHERE a2.k = a.k) GROUP BY a.s"
    )
    seen = [
        _checked_tick(spark, spark_catalog_config, inputs, sql, n, change_b=b, rewrite_b=False)
        for n, b in enumerate((True, False, True), start=1)
    ]
    assert seen[1][0] == "aggregate" and seen[2][0] == "aggregate", seen


def test_drift_and_verification_fall_back_to_the_full_correction(
    spark: Any, spark_catalog_config: CatalogConfig
) -> None:
    ns = "incr_drift"
    catalog = spark_catalog_config.load()
    inputs = Inputs(catalog, ns, seed=3)
    sql = QUERIES["group"][1].format(ns=ns)
    target = f"{ns}.view"
    for n in (1, 2):
        inputs.mutate(1_000 * n - 500)
        inputs.seal(1_000 * n)
        _tick(spark, spark_catalog_config, target, sql, 1_000 * n)
    # Drift: a row deleted behind our back (a foreign commit on the target).
    spark.sql(f"DELETE FROM ct.{target} WHERE n = (SELECT MAX(n) FROM ct.{target})")
    inputs.mutate(2_500)
    inputs.seal(3_000)
    report = _tick(spark, spark_catalog_config, target, sql, 3_000, verify_every=2)
    assert report["strategy"] == "full"
    assert "foreign commit" in report["reason"], report
    assert _normalized(rows_of(catalog.load_table(target))) == _normalized(inputs.oracle(sql))
    # Incremental again; the second incremental tick since the full one is verified.
    strategies = []
    for n in (4, 5):
        inputs.mutate(1_000 * n - 500)
        inputs.seal(1_000 * n)
        report = _tick(spark, spark_catalog_config, target, sql, 1_000 * n, verify_every=2)
        strategies.append(report["strategy"])
        assert _normalized(rows_of(catalog.load_table(target))) == _normalized(inputs.oracle(sql))
    assert strategies == ["group", "full"], strategies
    assert report["verified"] is True and report["verify_fixed_rows"] == 0, report
    assert report["diffed_on"] == "spark"  # verification compares two Spark corrections


def test_refresh_modes(spark: Any, spark_catalog_config: CatalogConfig) -> None:
    ns = "incr_modes"
    catalog = spark_catalog_config.load()
    inputs = Inputs(catalog, ns, seed=5)
    window = f"SELECT id, RANK() OVER (ORDER BY v) AS r FROM {ns}.a"
    inputs.mutate(500)
    inputs.seal(1_000)
    decision = mint_view_tick(catalog, f"{ns}.w", window, 1_000)
    assert decision.description is not None
    with pytest.raises(QueryError, match="a window without PARTITION BY"):
        run_write(spark, spark_catalog_config, window, decision.description, refresh="incremental")
    sql = QUERIES["inner_join"][1].format(ns=ns)
    _tick(spark, spark_catalog_config, f"{ns}.v", sql, 1_000)
    inputs.mutate(1_500)
    inputs.seal(2_000)
    full = _tick(spark, spark_catalog_config, f"{ns}.v", sql, 2_000, refresh="full")
    assert full["strategy"] == "full" and full["reason"] == "refresh='full'"
    inputs.mutate(2_500)
    inputs.seal(3_000)
    decision = mint_view_tick(catalog, f"{ns}.v", sql, 3_000)
    assert decision.description is not None
    dry = run_write(spark, spark_catalog_config, sql, decision.description, dry_run=True)
    report = dry.to_json()
    assert report["status"] == "dry_run" and report["strategy"] == "linear"
    assert report["plan"][0] == "strategy: linear"
    assert set(report["input_changes"]) == {f"{ns}.a", f"{ns}.b"}


def _ticks_under_a_rule(
    spark: Any,
    config: CatalogConfig,
    ns: str,
    seed: int,
    set_rule: Callable[[int, int], None],
) -> dict[int, dict[str, Any]]:
    """Four ticks of the group view, each equal to the oracle; tick 2 must run in full.

    ``set_rule(tick, input_rows)`` sets the rule's variable before each tick,
    so that tick 2 falls under the rule, tick 3 not, and tick 4 (with
    ``refresh="incremental"``) would but ignores it. Returns the reports.
    """
    catalog = config.load()
    inputs = Inputs(catalog, ns, seed=seed)
    sql = QUERIES["group"][1].format(ns=ns)
    reports = {}
    for n in (1, 2, 3, 4):
        inputs.mutate(1_000 * n - 500)
        inputs.seal(1_000 * n)
        set_rule(n, len(inputs.a) + len(inputs.b))
        refresh = "incremental" if n == 4 else "auto"
        reports[n] = _tick(spark, config, f"{ns}.v", sql, 1_000 * n, refresh=refresh)
        table = catalog.load_table(f"{ns}.v")
        view = _normalized(rows_of(table))
        assert view == _normalized(inputs.oracle(sql))
        # Each batch records its cost and the rows it read: the view's history.
        summary = table.metadata.current_snapshot().summary.additional_properties
        assert int(summary["ct.input-rows"]) == len(inputs.a) + len(inputs.b)
        assert int(summary["ct.compute-ms"]) > 0
    # Tick 1 creates the view: always in full.
    for n in (2, 3, 4):
        expected = "full" if n == 2 else "group"
        assert reports[n]["strategy"] == expected, (n, reports[n])
    return reports


def test_auto_runs_small_inputs_in_full(
    spark: Any, spark_catalog_config: CatalogConfig, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Up to CT_FULL_BELOW_ROWS input rows, auto runs in full and says why; incremental never."""
    rows_at: dict[int, int] = {}

    def set_rule(n: int, rows: int) -> None:
        rows_at[n] = rows
        # Tick 2: the inputs are just at the limit; tick 3: one row past it.
        monkeypatch.setenv("CT_FULL_BELOW_ROWS", str(rows if n != 3 else rows - 1))

    reports = _ticks_under_a_rule(spark, spark_catalog_config, "incr_small", 11, set_rule)
    rows = rows_at[2]
    assert reports[2]["reason"].startswith(f"the inputs hold {rows:,} rows, at most {rows:,}")


def test_auto_runs_a_keyed_tick_over_few_rows_per_read_in_full(
    spark: Any, spark_catalog_config: CatalogConfig, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A tick that changes a keyed subquery's table evaluates the query twice in Spark
    when the driver does not (no file cache here): with at most CT_FULL_BELOW_ROWS rows
    per table read (two reads here), auto runs it in full and says why, though the plan
    keeps its aggregates in place; with fewer allowed, it recomputes the keys (the
    boundaries: tests/test_refresh_rules.py). Every tick equals DuckDB's."""
    ns, catalog, inputs = _inputs_of(spark_catalog_config, "keyed_per_read")
    sql = KEYED["keyed_scalar"][1].format(ns=ns)
    monkeypatch.setenv(CACHE_MB_ENV, "0")
    reports = {}
    for n in (1, 2, 3, 4):
        inputs.mutate(1_000 * n - 500, change_b=False)
        inputs.seal(1_000 * n)
        # Ticks 1-2: far more rows allowed than the inputs hold; 3-4: one row per read.
        monkeypatch.setenv("CT_FULL_BELOW_ROWS", "1000000" if n <= 2 else "1")
        reports[n] = _tick(spark, spark_catalog_config, f"{ns}.view", sql, 1_000 * n)
        got = rows_of(catalog.load_table(f"{ns}.view"))
        assert _normalized(got) == _normalized(inputs.oracle(sql)), (n, reports[n])
    assert reports[2]["strategy"] == "full", reports[2]
    assert (
        "evaluates the query twice in Spark, each time at about the fixed cost of its 2 "
        "table reads" in reports[2]["reason"]
    ), reports[2]
    assert reports[4]["strategy"] == "aggregate", [r.get("reason") for r in reports.values()]


def test_auto_keeps_in_place_a_keyed_tick_the_driver_evaluates(
    spark: Any, spark_catalog_config: CatalogConfig, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The same few rows per read, but a view whose keyed block the driver evaluates (a
    decimal AVG, a file cache): its tick costs its keys' rows, not two Spark runs of the
    query, so auto keeps it in place on the driver. Every tick equals DuckDB's."""
    ns, catalog, inputs = _inputs_of(spark_catalog_config, "keyed_per_read_driver")
    sql = KEYED["keyed_scalar_decimal"][1].format(ns=ns)
    monkeypatch.setenv("CT_FULL_BELOW_ROWS", "1000000")
    reports = []
    for n in (1, 2, 3):
        inputs.mutate(1_000 * n - 500, change_b=False)
        inputs.seal(1_000 * n)
        reports.append(_tick(spark, spark_catalog_config, f"{ns}.view", sql, 1_000 * n))
        got = rows_of(catalog.load_table(f"{ns}.view"))
        assert _normalized(got) == _normalized(inputs.oracle(sql)), (n, reports[-1])
    seen = [(r["strategy"], r.get("keyed_on")) for r in reports[1:]]
    assert seen == [("aggregate", "driver")] * 2, [r.get("reason") for r in reports]


def test_a_keyed_block_whose_in_list_is_inlined_stays_on_the_driver(
    spark: Any, spark_catalog_config: CatalogConfig
) -> None:
    """When ``b`` does not change, the ``IN`` over it is written into the driver's tree as
    a literal list, and the other subqueries' placeholders are numbered again: the types
    Spark gave them on a tick where ``b`` changed must not be reused under the wrong
    names. Every tick is evaluated on the driver and equals DuckDB's."""
    ns, catalog, inputs = _inputs_of(spark_catalog_config, "keyed_inlined")
    sql = (
        f"SELECT a.s, COUNT(*) AS n, SUM(a.v) AS t FROM {ns}.a a WHERE a.k IN (SELECT k FROM"
        f" {ns}.b GROUP BY k HAVING COUNT(*) > 0) AND EXISTS (SELECT 1 FROM {ns}.a a3 WHERE"
        f" a3.k = a.k AND a3.id <> a.id) AND CAST(a.v AS DECIMAL(12, 2)) >= (SELECT 0.5 *"
        f" AVG(CAST(a2.v AS DECIMAL(12, 2))) FROM {ns}.a a2 WHERE a2.k = a.k) GROUP BY a.s"
    )
    seen = []
    for n, change_b in enumerate((True, True, False, True), start=1):
        inputs.mutate(1_000 * n - 500, change_b=change_b)
        inputs.seal(1_000 * n)
        report = _tick(spark, spark_catalog_config, f"{ns}.view", sql, 1_000 * n)
        seen.append((report["strategy"], report.get("keyed_on")))
        got = rows_of(catalog.load_table(f"{ns}.view"))
        assert _normalized(got) == _normalized(inputs.oracle(sql)), (n, report)
    assert seen[1:] == [("aggregate", "driver")] * 3, seen


def test_auto_runs_a_large_change_of_a_group_view_in_full(
    spark: Any, spark_catalog_config: CatalogConfig, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Above CT_FULL_ABOVE_CHANGE of the inputs' rows changed, auto runs in full; incremental never.

    ``mutate`` replaces each input's contents (an overwrite of every row), so
    by the snapshots' summaries every tick changes about twice the inputs'
    rows: above a share of 0.1, below a share of 100.
    """

    def set_rule(n: int, rows: int) -> None:
        monkeypatch.setenv("CT_FULL_ABOVE_CHANGE", "0.1" if n in (2, 4) else "100")

    reports = _ticks_under_a_rule(spark, spark_catalog_config, "incr_large", 13, set_rule)
    assert reports[2]["reason"].startswith("the inputs changed by about "), reports[2]
    assert "above 10%, CT_FULL_ABOVE_CHANGE" in reports[2]["reason"]


@pytest.mark.parametrize(
    ("spark_type", "plus", "minus", "expected"),
    [
        ("bigint", [3, 1, None, 3], [1, 7], ("inline", (1, 3, 7), True)),
        ("string", ["b", "O'Brien"], ["b", None, None], ("inline", ("O'Brien", "b"), True)),
        ("date", [datetime.date(2026, 1, 2)], [], ("inline", (datetime.date(2026, 1, 2),), False)),
        ("int", [], [], ("inline", (), False)),
        ("bigint", list(range(600)), list(range(400, 1001)), ("view",)),  # 1001 distinct
        ("double", [1.0], [2.0], ("view",)),  # no exact literal: the keys view
    ],
)
def test_affected_keys_are_inlined_on_the_driver_as_spark_would(
    spark: Any, spark_type: str, plus: list[Any], minus: list[Any], expected: tuple[Any, ...]
) -> None:
    """The driver decides from the changes' Arrow tables what Spark's keys frame would decide."""
    from airflow_provider_ct.ivm.plan.rewrites import InlineKeys
    from airflow_provider_ct.spark.ivm.affected_keys import inline_from_arrow, inline_keys

    frame = spark.createDataFrame([(v,) for v in plus + minus], f"k {spark_type}")
    data_type = frame.schema.fields[0].dataType
    arrow_type = {"bigint": pa.int64(), "int": pa.int32(), "string": pa.string()}.get(
        spark_type, pa.date32() if spark_type == "date" else pa.float64()
    )
    columns = [pa.chunked_array([pa.array(side, arrow_type)]) for side in (plus, minus)]
    on_driver = inline_from_arrow(columns, data_type)
    if expected[0] == "view":
        assert on_driver is None
    else:
        assert on_driver == InlineKeys(expected[1], has_null=expected[2])
    assert on_driver == inline_keys(frame.distinct())


@pytest.mark.parametrize(
    "name",
    ["scalar", "in_place_exprs", "joined_aggregate", "derived", "or_joined", "stddev_variance"],
)
def test_in_place_on_the_driver_equals_spark(
    spark: Any, spark_catalog_config: CatalogConfig, monkeypatch: pytest.MonkeyPatch, name: str
) -> None:
    """The same ticks kept in place by Spark jobs and on the driver: equal, and the oracle's.

    A third target finds its rows of the affected groups by an integer key's
    index however few the keys (``by_key``), where the driver otherwise reads
    the files the keys prune to: equal too.
    """
    from airflow_provider_ct.spark.ivm import in_place_diff

    ns = f"incr_paths_{name}"
    catalog = spark_catalog_config.load()
    inputs = Inputs(catalog, ns, seed=11 + len(name))
    sql = QUERIES[name][1].format(ns=ns)
    lookups = set()
    for n in range(1, 6):
        time = 1_000 * n
        inputs.mutate(time - 500, change_b=name in ("joined_aggregate", "or_joined"))
        inputs.seal(time)
        monkeypatch.setenv("CT_DRIVER_DIFF_ROWS", "0")  # no driver: Spark's jobs
        by_spark = _tick(spark, spark_catalog_config, f"{ns}.by_spark", sql, time)
        monkeypatch.delenv("CT_DRIVER_DIFF_ROWS")
        with monkeypatch.context() as patched:
            patched.setattr(in_place_diff, "INLINE_KEYS", 0)
            by_key = _tick(spark, spark_catalog_config, f"{ns}.by_key", sql, time)
        lookups.add(by_key.get("target_rows_by"))
        assert rows_of(catalog.load_table(f"{ns}.by_key")) == rows_of(
            catalog.load_table(f"{ns}.by_spark")
        ), (name, n, by_key)
        on_driver = _tick(spark, spark_catalog_config, f"{ns}.on_driver", sql, time)
        if n > 1:
            assert by_spark["strategy"] == on_driver["strategy"] == "aggregate"
            assert by_spark["change_state_on"] == "spark", by_spark
            assert by_spark["diffed_on"] == "spark"
            assert on_driver["change_state_on"] == "driver", on_driver
            assert on_driver["diffed_on"] == "driver"
        spark_rows = rows_of(catalog.load_table(f"{ns}.by_spark"))
        assert spark_rows == rows_of(catalog.load_table(f"{ns}.on_driver")), (name, n)
        assert _normalized(spark_rows) == _normalized(inputs.oracle(sql)), (name, n)
    # Views grouped by an integer key looked their rows up in its index at least once.
    assert ("key index" in lookups) == (name in ("in_place_exprs", "derived")), lookups


def test_a_bigint_stddev_is_kept_in_place_where_its_sums_are_checked(
    spark: Any, spark_catalog_config: CatalogConfig, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A BIGINT's squares are summed on the driver (checked, exact) but not by Spark, whose
    overflowing sum of a change would be NULL unseen: that tick runs the fallback."""
    ns, catalog, inputs = _inputs_of(spark_catalog_config, "stddev_bigint")
    sql = f"SELECT k, STDDEV_SAMP(v) AS sd, VAR_POP(v) AS vp FROM {ns}.a GROUP BY k"
    seen = []
    for n in range(1, 5):
        if n == 3:
            monkeypatch.setenv("CT_DRIVER_DIFF_ROWS", "0")  # no driver: Spark's jobs
        inputs.mutate(1_000 * n - 500)
        inputs.seal(1_000 * n)
        report = _tick(spark, spark_catalog_config, f"{ns}.view", sql, 1_000 * n)
        monkeypatch.delenv("CT_DRIVER_DIFF_ROWS", raising=False)
        seen.append((report["strategy"], report.get("change_state_on")))
        got = rows_of(catalog.load_table(f"{ns}.view"))
        assert _normalized(got) == _normalized(inputs.oracle(sql)), (n, report)
        if n == 3:
            assert "when Spark sums the change" in report["reason"], report["reason"]
    assert seen[1] == ("aggregate", "driver") and seen[2][0] == "group", seen
    assert seen[3][0] in ("aggregate", "full"), seen  # the state is rebuilt or kept


def test_in_place_views_verify_every_nth_tick_through_their_fallback(
    spark: Any, spark_catalog_config: CatalogConfig
) -> None:
    """``verify_every=3``: two ticks in place, the third verified by the group strategy's
    full comparison, then the state (not kept that tick) rebuilt, then in place again."""
    ns = "incr_verify_in_place"
    catalog = spark_catalog_config.load()
    inputs = Inputs(catalog, ns, seed=23)
    sql = QUERIES["aggregate"][1].format(ns=ns)
    seen = []
    for n in range(1, 7):
        inputs.mutate(1_000 * n - 500)
        inputs.seal(1_000 * n)
        report = _tick(spark, spark_catalog_config, f"{ns}.v", sql, 1_000 * n, verify_every=3)
        seen.append((report["strategy"], report.get("verified", False)))
        got = _normalized(rows_of(catalog.load_table(f"{ns}.v")))
        assert got == _normalized(inputs.oracle(sql)), (n, report)
        if report.get("verified"):
            assert report["verify_fixed_rows"] == 0
            assert "not in place: verify_every=3" in report["plan"][1], report["plan"]
    assert seen == [
        ("full", False),  # the first tick: the state is built
        ("aggregate", False),
        ("aggregate", False),
        ("full", True),  # verified through the fallback (group)
        ("full", False),  # the state, not kept by the verified tick, is rebuilt
        ("aggregate", False),
    ], seen


def test_a_nested_view_whose_outer_reads_most_bytes_runs_in_full(
    spark: Any, spark_catalog_config: CatalogConfig, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Under ``auto`` with the read share on, the query around the kept aggregate reads
    ``b`` whole on every tick: past the share the tick runs in full, saying so; under it
    (the share set higher than ``b``'s part of the bytes) it runs in place. Every tick
    equals DuckDB's."""
    ns, _, inputs = _inputs_of(spark_catalog_config, "nested_priced")
    sql = QUERIES["nested_cte"][1].format(ns=ns)
    seen = []
    for n, share in enumerate(("0", "0.01", "0.999"), start=1):
        monkeypatch.setenv("CT_FULL_ABOVE_READ_SHARE", share)
        seen.append(_checked_tick(spark, spark_catalog_config, inputs, sql, n))
    assert seen[1][0] == "full" and seen[2][0] == "aggregate", seen
    reason = seen[1][1]
    assert f"the query around the kept aggregate reads {ns}.b whole on every tick" in reason


def test_keyed_reads_are_priced_by_the_files_their_keys_reach(
    spark: Any, spark_catalog_config: CatalogConfig, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Under ``auto`` with the read estimate on, a keyed tick whose keys lie in few files (one
    file per key here) runs incrementally; one whose keys reach every file runs in full,
    saying why, and so does the next one, on that batch's recorded share. Every tick
    equals DuckDB's over the rows the test appended. (Spark's reads: the driver's file
    cache is off, else the driver fetches the keys' rows and no scan is priced.)"""
    import duckdb

    monkeypatch.setenv("CT_FULL_ABOVE_READ_SHARE", "0.5")
    monkeypatch.setenv(CACHE_MB_ENV, "0")
    ns = "incr_keyed_priced"
    catalog = spark_catalog_config.load()
    schema = pa.schema([("k", pa.int64()), ("v", pa.int64())])
    table = create_managed_table(catalog, f"{ns}.p", schema)
    rng = random.Random(5)
    rows: list[tuple[int, int]] = []

    def append(keys: list[int], time: int) -> None:
        batch = [(k, rng.randint(0, 50)) for k in keys for _ in range(20)]
        rows.extend(batch)
        table.append(pa.Table.from_pylist([{"k": k, "v": v} for k, v in batch], schema))
        stamp(table, time)

    for k in range(1, 9):  # one file per key: its statistics hold that key alone
        append([k], 100 * k)
    advance(table, 1_000)
    sql = (
        f"SELECT p.k, SUM(p.v) AS t, COUNT(*) AS n FROM {ns}.p p WHERE p.v >= (SELECT AVG(q.v)"
        f" FROM {ns}.p q WHERE q.k = p.k) GROUP BY p.k"
    )
    seen = []
    for n, keys in enumerate(([], [3], list(range(1, 9)), [2, 5]), start=1):
        if keys:
            append(keys, 1_000 * n - 500)
        advance(table, 1_000 * n)
        report = _tick(spark, spark_catalog_config, f"{ns}.view", sql, 1_000 * n)
        seen.append((report["strategy"], report.get("reason", "")))
        con = duckdb.connect()
        con.register("p_rows", pa.Table.from_pylist([{"k": k, "v": v} for k, v in rows], schema))
        expected = Counter(
            tuple(r) for r in con.execute(sql.replace(f"{ns}.p", "p_rows")).fetchall()
        )
        got = rows_of(catalog.load_table(f"{ns}.view"))
        assert _normalized(got) == _normalized(expected), (n, report)
    assert seen[1][0] == "aggregate", seen
    assert seen[2][0] == "full" and "keyed subqueries' reads" in seen[2][1], seen
    # The next tick goes full at once on the share its predecessor recorded (its changes
    # are not read to price the keys again until CT_RETRY_INCREMENTAL_AFTER such batches).
    assert seen[3][0] == "full" and "the last 1 batch(es) of this view went full" in seen[3][1]


CUSTOMER = pa.schema([("c_custkey", pa.int64()), ("c_name", pa.string())])
ORDERS = pa.schema(
    [("o_orderkey", pa.int64()), ("o_custkey", pa.int64()), ("o_comment", pa.string())]
)


def test_a_bare_left_join_with_a_filter_in_on_is_kept_in_place(
    spark: Any, spark_catalog_config: CatalogConfig
) -> None:
    """TPC-H q13's shape, columns bare as q13 writes them: the job places ``c_custkey`` and
    ``o_custkey`` by the inputs' schemas, the ``NOT LIKE`` stays in ``ON``, and the count of
    orders per customer is kept in place under the count of customers per count, its change
    joined on the driver (``ivm/driver/left_join_rows.py``). Customers
    without orders, orders of no customer, NULL keys and NULL comments; rows as DuckDB's."""
    import duckdb

    ns = "incr_bare_left_join"
    catalog = spark_catalog_config.load()
    customer = create_managed_table(catalog, f"{ns}.customer", CUSTOMER)
    orders = create_managed_table(catalog, f"{ns}.orders", ORDERS)
    sql = (
        "SELECT c_count, COUNT(*) AS custdist FROM (SELECT c_custkey, COUNT(o_orderkey) FROM"
        f" {ns}.customer LEFT OUTER JOIN {ns}.orders ON c_custkey = o_custkey AND o_comment"
        " NOT LIKE '%special%' GROUP BY c_custkey) AS c_orders (c_custkey, c_count)"
        " GROUP BY c_count"
    )
    rng = random.Random(13)
    keys = [1, 2, 3, 4, 5, None]
    comments = ["ok", "a special one", None]
    custs: list[dict[str, Any]] = []
    ords: list[dict[str, Any]] = []
    seen = []
    for n in range(1, 5):
        if n % 2 == 1 or not custs:
            custs = [{"c_custkey": k, "c_name": f"c{k}"} for k in keys if rng.random() > 0.3]
            replace_contents(customer, 1_000 * n - 500, pa.Table.from_pylist(custs, CUSTOMER))
        ords = [o for o in ords if rng.random() > 0.3]
        for _ in range(rng.randint(2, 6)):
            row = {"o_custkey": rng.choice([*keys, 9]), "o_comment": rng.choice(comments)}
            ords.append({"o_orderkey": len(ords) + 100 * n, **row})
        replace_contents(orders, 1_000 * n - 500, pa.Table.from_pylist(ords, ORDERS))
        advance(customer, 1_000 * n)
        advance(orders, 1_000 * n)
        report = _tick(spark, spark_catalog_config, f"{ns}.view", sql, 1_000 * n)
        seen.append((report["strategy"], report.get("change_state_on")))
        con = duckdb.connect()
        con.register("c_rows", pa.Table.from_pylist(custs, CUSTOMER))
        con.register("o_rows", pa.Table.from_pylist(ords, ORDERS))
        duck = sql.replace(f"{ns}.customer", "c_rows").replace(f"{ns}.orders", "o_rows")
        expected = Counter(tuple(r) for r in con.execute(duck).fetchall())
        assert rows_of(catalog.load_table(f"{ns}.view")) == expected, (n, report)
    # The left join's terms joined on the driver (rows fetched by key), not by Spark.
    assert seen == [("full", None), *[("aggregate", "driver")] * 3], seen
