"""The planner: strategy from the SQL alone, and the SQL that restricts a query to affected keys."""

from __future__ import annotations

import datetime
from typing import Any

import pytest
import sqlglot

from airflow_provider_ct.core.query import parse_query
from airflow_provider_ct.exceptions import ConfigurationError, QueryError
from airflow_provider_ct.ivm.plan.columns import referenced_columns
from airflow_provider_ct.ivm.plan.having import INNER_VIEW, typed_outer
from airflow_provider_ct.ivm.plan.in_place import in_place_shape
from airflow_provider_ct.ivm.plan.modes import RefreshMode
from airflow_provider_ct.ivm.plan.planner import GROUP, choose_plan, plan_query
from airflow_provider_ct.ivm.plan.rewrites import (
    InlineKeys,
    day_ranges,
    restrict_columns_to_keys,
    restrict_to_days,
    restrict_to_keys,
)

CASES = [
    ("SELECT id, v FROM s.a WHERE v > 1", "linear", "projection and filter"),
    ("SELECT a.id FROM s.a a JOIN s.b b ON a.k = b.k JOIN s.c c ON c.k = b.k", "linear", "3"),
    ("SELECT a.id FROM s.a a, s.b b WHERE a.k = b.k", "linear", "inner join of 2"),
    ("SELECT a.id, b.n FROM s.a a LEFT JOIN s.b b ON a.k = b.k AND a.j = b.j", "linear", "LEFT"),
    ("SELECT k FROM s.a UNION ALL SELECT k FROM s.b", "linear", "UNION ALL of 2"),
    (
        "SELECT k, SUM(v) AS t, MAX(v) FROM s.a GROUP BY k HAVING COUNT(*) > 2",
        "aggregate",
        "HAVING over an aggregate kept in place",
    ),
    ("SELECT k, COUNT(DISTINCT v) FROM s.a GROUP BY k HAVING COUNT(*) > 2", "group", "k"),
    ("SELECT k, COUNT(*) FROM s.a GROUP BY k HAVING MAX(b)", "aggregate", "HAVING over"),
    (
        "SELECT k, COUNT(*) FROM s.a GROUP BY k HAVING SUM(v) > (SELECT SUM(v) FROM s.a)",
        "aggregate",
        "HAVING over",
    ),
    ("SELECT k + 1, SUM(v) FROM s.a GROUP BY k + 1 HAVING k + 1 > 2", "group", "k"),
    ("SELECT UPPER(s) AS u, COUNT(DISTINCT v) FROM s.a GROUP BY u", "group", "UPPER(s)"),
    ("SELECT k, MAX(v) FROM s.a GROUP BY 1", "aggregate", "MAX kept in place"),
    ("SELECT k, MIN(s), MAX(v) FROM s.a GROUP BY 1", "aggregate", "MIN/MAX a deletion removed"),
    ("SELECT k, COUNT(DISTINCT v) FROM s.a GROUP BY 1", "group", "GROUP BY k"),
    ("SELECT k, MAX(DISTINCT v) FROM s.a GROUP BY 1", "group", "GROUP BY k"),
    ("SELECT k, MAX(v, w) FROM s.a GROUP BY 1", "group", "GROUP BY k"),
    ("SELECT k, COUNT(*) FROM s.a GROUP BY 1", "aggregate", "COUNT(*) kept in place"),
    ("SELECT k, SUM(v) AS t, AVG(v), COUNT(v) FROM s.a GROUP BY k", "aggregate", "SUM, AVG, COUNT"),
    ("SELECT k, SUM(v) FILTER (WHERE v > 1) FROM s.a GROUP BY k", "group", "GROUP BY k"),
    ("SELECT k, SUM(DISTINCT v) FROM s.a GROUP BY k", "group", "GROUP BY k"),
    ("SELECT k, 100 * SUM(v) / SUM(w) FROM s.a GROUP BY k", "aggregate", "SUM kept in place"),
    ("SELECT k, SUM(v) / MAX(w) FROM s.a GROUP BY k", "aggregate", "SUM, MAX kept in place"),
    ("SELECT k, SUM(v) / COUNT(DISTINCT w) FROM s.a GROUP BY k", "group", "GROUP BY k"),
    ("SELECT k, SUM(v) + k FROM s.a GROUP BY k", "group", "GROUP BY k"),
    (
        "SELECT DISTINCT k, v FROM s.a",
        "aggregate",
        "SELECT DISTINCT k, v: each group's row count kept in place",
    ),
    ("SELECT CAST(ts AS DATE) AS d, COUNT(DISTINCT v) FROM s.a GROUP BY 1", "partition", "days"),
    (
        "SELECT to_date(a.ts), b.n, COUNT(DISTINCT v) FROM s.a a JOIN s.b b ON a.k = b.k "
        "GROUP BY 1, 2",
        "partition",
        "days",
    ),
    ("SELECT to_date(ts, 'yyyy-MM') AS d, SUM(DISTINCT v) FROM s.a GROUP BY 1", "group", "TO_"),
    ("SELECT CAST(ts AS STRING) AS d, SUM(DISTINCT v) FROM s.a GROUP BY 1", "group", "CAST"),
    ("SELECT DISTINCT CAST(ts AS DATE) FROM s.a", "aggregate", "DISTINCT"),
    ("SELECT COUNT(*) FROM s.a", "aggregate", "one group (no GROUP BY)"),
    ("SELECT MAX(v) FROM s.a", "aggregate", "one group (no GROUP BY)"),
    ("SELECT COUNT(DISTINCT v) FROM s.a", "full", "without GROUP BY"),
    ("SELECT SUM(v) / COUNT(*) FROM s.a", "aggregate", "one group (no GROUP BY)"),
    ("SELECT SUM(v) / COUNT(DISTINCT v) FROM s.a", "full", "COUNT(DISTINCT v) in an expression"),
    ("SELECT SUM(v) FROM s.a LIMIT 1", "full", "LIMIT"),
    ("SELECT k, SUM(v) FROM s.a GROUP BY k, v", "full", "not an output column"),
    ("SELECT id, RANK() OVER (PARTITION BY k ORDER BY v) FROM s.a", "full", "not an output"),
    ("SELECT id, k, RANK() OVER (PARTITION BY k ORDER BY v) FROM s.a", "group", "PARTITION BY k"),
    ("SELECT id, RANK() OVER (ORDER BY v) FROM s.a", "full", "without PARTITION BY"),
    (
        "SELECT k, s, SUM(v) OVER (PARTITION BY k), MAX(v) OVER (PARTITION BY s) FROM s.a",
        "full",
        "share no PARTITION BY",
    ),
    (
        "SELECT k, SUM(v), RANK() OVER (PARTITION BY k ORDER BY SUM(v)) FROM s.a GROUP BY k",
        "full",
        "over an aggregate",
    ),
    (
        "SELECT k, v FROM s.a UNION ALL SELECT k, RANK() OVER (PARTITION BY k ORDER BY v) FROM s.b",
        "full",
        "inside a UNION ALL",
    ),
    ("SELECT k, v, SUM(v) OVER (PARTITION BY k) FROM s.a LIMIT 3", "full", "LIMIT"),
    (
        "SELECT CAST(ts AS DATE) AS d, ROW_NUMBER() OVER (PARTITION BY CAST(ts AS DATE) ORDER BY v)"
        " FROM s.a",
        "partition",
        "days",
    ),
    ("SELECT id FROM s.a WHERE k IN (SELECT k FROM s.b)", "linear", "projection and filter"),
    ("SELECT id FROM s.a a WHERE NOT EXISTS (SELECT 1 FROM s.b b WHERE a.k = b.k)", "linear", ""),
    # a projection's select-list subquery is a value of the row; a grouped select's is not
    ("SELECT id, (SELECT MAX(k) FROM s.b) AS m FROM s.a", "linear", "projection and filter"),
    ("SELECT k, SUM(v), (SELECT MAX(k) FROM s.b) FROM s.a GROUP BY k", "full", "outside WHERE"),
    ("SELECT DISTINCT k, (SELECT MAX(k) FROM s.b) FROM s.a", "full", "outside WHERE"),
    (  # TPC-H q20's nesting: keyed, s.c's changes bridged through s.b
        "SELECT id FROM s.a WHERE k IN (SELECT k FROM s.b WHERE w IN (SELECT w FROM s.c))",
        "linear",
        "projection and filter",
    ),
    (
        "SELECT id FROM s.a WHERE k IN (SELECT (SELECT MAX(w) FROM s.c) FROM s.b)",
        "full",
        "a subquery outside WHERE",
    ),
    ("SELECT k, SUM(v) FROM s.a GROUP BY k HAVING SUM(v) > (SELECT 1)", "full", "outside WHERE"),
    # Beside outer joins a subquery is a fixed filter of each row (its tables' ticks: full).
    (
        "SELECT a.id FROM s.a a LEFT JOIN s.c c ON a.k = c.k WHERE a.k IN (SELECT k FROM s.b)",
        "linear",
        "with outer joins",
    ),
    ("SELECT id FROM s.a WHERE v > (SELECT AVG(v) FROM s.b)", "linear", "projection and filter"),
    ("SELECT COUNT(*) FROM s.a WHERE v > (SELECT AVG(v) FROM s.b)", "aggregate", "one group"),
    ("WITH x AS (SELECT id FROM s.a) SELECT id FROM x", "full", "WITH x is recomputed in full"),
    ("WITH x AS (SELECT k, SUM(v) AS t FROM s.a GROUP BY k) SELECT * FROM x", "aggregate", "x"),
    (
        "WITH x AS (SELECT k, SUM(v) AS t FROM s.a GROUP BY k), y AS (SELECT 1 AS o)"
        " SELECT * FROM x, y",
        "full",
        "2 CTEs",
    ),
    (
        "WITH x AS (SELECT k, COUNT(DISTINCT v) AS t FROM s.a GROUP BY k) SELECT * FROM x",
        "full",
        "WITH x is recomputed in full: it holds COUNT(DISTINCT ...) over an aggregate itself",
    ),
    ("WITH x AS (SELECT k FROM s.a) SELECT 1 AS o FROM s.b", "full", "never read"),
    (
        "WITH x(kk, t) AS (SELECT k, SUM(v) FROM s.a GROUP BY k) SELECT kk FROM x WHERE t > 1",
        "aggregate",
        "WITH x over",
    ),
    (
        "SELECT k, SUM(v) AS t FROM s.a GROUP BY k ORDER BY t DESC LIMIT 3",
        "aggregate",
        "ORDER BY ... LIMIT over an aggregate kept in place",
    ),
    ("SELECT k, SUM(v) AS t FROM s.a GROUP BY k ORDER BY COUNT(*) LIMIT 3", "full", "ORDER BY"),
    ("SELECT k, SUM(v) AS t FROM s.a GROUP BY k LIMIT 3 OFFSET 1", "full", "OFFSET"),
    ("SELECT id FROM s.a LIMIT 5", "full", "LIMIT"),
    ("SELECT k FROM s.a UNION SELECT k FROM s.b", "full", "UNION (without ALL)"),
    ("SELECT a.id FROM s.a a JOIN s.a b ON a.k = b.k", "linear", "inner join of 2"),
    # A table joined with itself, and FULL joins: the outer joins' rule per read.
    ("SELECT a.id FROM s.a a LEFT JOIN s.a b ON a.k = b.k", "linear", "with outer joins"),
    (
        "SELECT k, SUM(w) FROM (SELECT k, v * 2 AS w FROM s.a WHERE v > 1) t GROUP BY k",
        "aggregate",
        "SUM kept in place",
    ),
    (
        "SELECT k FROM (SELECT k, SUM(v) AS t FROM s.a GROUP BY k) t WHERE t > 1",
        "aggregate",
        "derived table t over an aggregate kept in place",
    ),
    (
        "SELECT x.k FROM (SELECT k, SUM(v) AS t FROM s.a GROUP BY k) x, (SELECT k, MAX(v) AS m"
        " FROM s.b GROUP BY k) y WHERE x.k = y.k",
        "full",
        "more than one derived table",
    ),
    ("SELECT t.k FROM (SELECT k FROM s.a) t JOIN s.b b ON t.k = b.k", "full", "derived table"),
    ("SELECT a.id FROM s.a a FULL OUTER JOIN s.b b ON a.k = b.k", "linear", "outer joins"),
    ("SELECT a.id FROM s.a a LEFT JOIN s.b b ON a.k > b.k", "full", "no equality of a column"),
    # Conjuncts beside the equalities only narrow a preserved row's partners (TPC-H q13).
    (
        "SELECT a.id, b.n FROM s.a a LEFT JOIN s.b b ON a.k = b.k AND b.c NOT LIKE '%x%'"
        " AND a.v > 0",
        "linear",
        "LEFT",
    ),
    (
        "SELECT a.id FROM s.a a LEFT JOIN s.b b ON a.k = b.k AND b.k IN (SELECT k FROM s.c)",
        "full",
        "a subquery outside WHERE",
    ),
    ("SELECT id, rand() FROM s.a", "full", "nondeterministic"),
    ("SELECT k, SUM(v) FROM s.a GROUP BY ROLLUP(k)", "full", "ROLLUP"),
    # A kept aggregate under two queries (its own HAVING or LIMIT, then a CTE or a derived
    # table around it): one is maintained, so both run in full, never one dropped.
    (
        "WITH r AS (SELECT k, SUM(v) AS s FROM s.a GROUP BY k HAVING SUM(v) > 10) SELECT * FROM r",
        "full",
        "WITH r is recomputed in full: it holds HAVING over an aggregate itself",
    ),
    (
        "SELECT k2, COUNT(*) AS n FROM (SELECT k AS k2, SUM(v) AS s FROM s.a GROUP BY k"
        " ORDER BY s DESC LIMIT 3) AS d GROUP BY k2",
        "full",
        "it holds ORDER BY ... LIMIT over an aggregate itself",
    ),
]


@pytest.mark.parametrize(("sql", "strategy", "why"), CASES)
def test_strategy_and_reason(sql: str, strategy: str, why: str) -> None:
    plan = plan_query(parse_query(sql))
    assert plan.strategy == strategy, plan
    assert why in plan.reason, plan.reason
    assert plan.explain()[:2] == [f"strategy: {strategy}", f"why: {plan.reason}"]


def test_a_derived_table_is_merged_into_its_reader() -> None:
    """The merged block reads the inner tables; the outer names and order stay."""
    plan = plan_query(
        parse_query(
            "SELECT y, SUM(w) AS total FROM (SELECT a.k AS y, a.v * b.n AS w FROM s.a a, s.b b"
            " WHERE a.k = b.k) AS d WHERE w > 0 GROUP BY y"
        )
    )
    assert plan.strategy == "aggregate"
    (block,) = plan.blocks
    assert block.inputs == ("s.a", "s.b")
    names = [e.alias_or_name for e in block.tree.expressions]
    assert names == ["y", "total"]
    assert "(a.v * b.n) > 0" in block.tree.sql(dialect="spark")


def test_a_filtering_derived_table_with_subqueries_is_merged_by_substitution() -> None:
    """TPC-H q22: the derived table filters by a scalar and a NOT EXISTS; its reader's
    columns become their defining expressions, the subqueries stay as written."""
    plan = plan_query(
        parse_query(
            "SELECT code, COUNT(*) AS n, SUM(bal) AS total FROM (SELECT SUBSTRING(phone, 1, 2)"
            " AS code, bal FROM s.c WHERE bal > (SELECT AVG(bal) FROM s.c WHERE bal > 0) AND"
            " NOT EXISTS (SELECT * FROM s.o WHERE o_ck = c_ck)) AS d GROUP BY code ORDER BY code"
        )
    )
    assert plan.strategy == "aggregate", plan.reason
    (block,) = plan.blocks
    assert block.inputs == ("s.c",) and block.fixed == ("s.c", "s.o")
    assert (block.semi, block.params) == (("s.o",), ("s.c",))
    assert [e.alias_or_name for e in block.tree.expressions] == ["code", "n", "total"]
    assert plan.key_sql == ("SUBSTRING(phone, 1, 2)",)
    assert "scalar subqueries over s.c compared with the rows" in " ".join(plan.explain())


_INNER = "SELECT a AS c, b AS k FROM t WHERE b > (SELECT MAX(b) FROM u)"


@pytest.mark.parametrize(
    ("reader", "inner", "merged"),
    [
        (  # ORDER BY a derived column the reader does not output: its expression
            "SELECT c FROM ({inner}) d ORDER BY k",
            _INNER,
            "SELECT a AS c FROM t WHERE b > (SELECT MAX(b) FROM u) ORDER BY b",
        ),
        (  # ORDER BY the reader's own outputs: kept by name
            "SELECT c, SUM(k) AS total FROM ({inner}) d GROUP BY c ORDER BY total DESC, c",
            _INNER,
            "SELECT a AS c, SUM(b) AS total FROM t WHERE b > (SELECT MAX(b) FROM u) GROUP BY a"
            " ORDER BY total DESC, c",
        ),
        (  # an operator keeps its operands together; a qualified reader column
            "SELECT d.c * 2 AS c2 FROM ({inner}) d WHERE k + 1 > 3",
            _INNER.replace("a AS c", "a + 1 AS c"),
            "SELECT (a + 1) * 2 AS c2 FROM t WHERE b + 1 > 3 AND b > (SELECT MAX(b) FROM u)",
        ),
    ],
)
def test_the_merge_by_substitution_keeps_names_and_meaning(
    reader: str, inner: str, merged: str
) -> None:
    import sqlglot

    from airflow_provider_ct.ivm.plan.flatten import flatten_derived_tables

    tree = sqlglot.parse_one(reader.format(inner=inner), read="spark")
    assert flatten_derived_tables(tree).sql(dialect="spark") == merged


@pytest.mark.parametrize(
    "outer",
    ["*", "d.*", "k, (SELECT MAX(b) FROM s.u) AS m"],  # all columns; a subquery of its own
)
def test_a_derived_table_with_subqueries_read_other_ways_is_kept(outer: str) -> None:
    """``SELECT *`` means the derived table's columns, not its tables': no substitution."""
    sql = f"SELECT {outer} FROM (SELECT a AS k FROM s.t WHERE b > (SELECT MAX(b) FROM s.u)) d"
    plan = plan_query(parse_query(sql))
    assert plan.strategy == "full" and "derived table" in plan.reason, plan.reason


@pytest.mark.parametrize(
    ("where", "params"),
    [
        ("a.v > (SELECT AVG(w) FROM s.b)", ("s.b",)),
        ("a.v > (SELECT AVG(w) FROM s.b) + 1 AND a.k IN (1, 2)", ("s.b",)),
        ("a.v > (SELECT AVG(w) FROM s.b b WHERE b.k = a.k)", ()),  # correlated: keyed
        ("a.v > (SELECT AVG(w) FROM s.b) AND a.k IN (SELECT k FROM s.b)", ()),
        ("a.v BETWEEN (SELECT MIN(w) FROM s.b) AND (SELECT MAX(w) FROM s.b)", ()),
        ("a.v > (SELECT MAX(x.w) - MIN(y.w) FROM s.b x, s.c y WHERE x.k = y.k)", ("s.b", "s.c")),
        ("a.v > (SELECT MAX(w) FROM s.b, s.c WHERE b_k = c_k)", ()),  # may be correlated
        ("a.v > (SELECT 0.2 * AVG(w) FROM s.b WHERE b_k = k)", ()),  # TPC-H q17: keyed
    ],
)
def test_uncorrelated_scalar_subqueries_compared_with_rows_are_parameters(
    where: str, params: tuple[str, ...]
) -> None:
    plan = plan_query(parse_query(f"SELECT k, SUM(v) AS t FROM s.a a WHERE {where} GROUP BY k"))
    assert plan.blocks[0].params == params
    assert plan.param_inputs == set(params)


def test_a_nested_plan_keeps_the_inner_aggregate_and_recomputes_the_rest_over_it() -> None:
    """TPC-H q15's shape: the CTE's groups kept in place, read twice by the outer query as
    one view, the outer's own inputs named; a fallback drops the nesting and runs in full."""
    plan = plan_query(
        parse_query(
            "WITH rev AS (SELECT l_suppkey AS no, SUM(l_price) AS total FROM s.l"
            " WHERE l_day >= 3 GROUP BY no) SELECT s_key, s_name, total FROM s.supplier, rev"
            " WHERE s_key = no AND total = (SELECT MAX(total) FROM rev) ORDER BY s_key"
        )
    )
    assert plan.strategy == "aggregate" and plan.nested is not None
    (block,) = plan.blocks
    assert block.inputs == ("s.l",) and plan.key_sql == ("l_suppkey",)
    assert plan.nested.outer_inputs == ("s.supplier",)
    outer = plan.nested.outer_sql
    assert outer.count(f"{INNER_VIEW} AS rev") == 2 and "s.l" not in outer, outer
    assert "recompute the rest of the query over those rows" in plan.explain()[-1]
    fallback = plan.fallback("inexact types")
    assert (fallback.strategy, fallback.nested) == ("full", None)


def test_having_over_the_same_rows_reads_the_kept_groups() -> None:
    """TPC-H q11: the HAVING subquery aggregates the block's own rows, so it becomes a
    typed re-aggregate of the hidden per-group column; over other rows, it runs in full."""
    rows = "FROM s.ps, s.su WHERE ps_suppkey = s_suppkey AND s_nation = 'DE'"
    sql = (
        f"SELECT ps_partkey, SUM(ps_cost * ps_qty) AS value {rows} GROUP BY ps_partkey"
        f" HAVING SUM(ps_cost * ps_qty) > (SELECT SUM(ps_cost * ps_qty) * 0.0001 {rows})"
    )
    plan = plan_query(parse_query(sql))
    assert plan.strategy == "aggregate" and plan.nested is not None
    assert plan.nested.outer_inputs == ()  # the subquery reads the kept rows, not s.ps
    assert "__ct_h0" in plan.blocks[0].tree.sql()
    outer = sqlglot.parse_one(plan.nested.outer_sql, dialect="spark")
    typed = typed_outer(outer, {"__ct_h0": "decimal(38,2)"}).sql(dialect="spark")
    assert typed == (
        f"SELECT * FROM {INNER_VIEW} WHERE __ct_h0 > (SELECT CAST(SUM(__ct_h0) AS"
        f" DECIMAL(38, 2)) * 0.0001 FROM {INNER_VIEW})"
    )
    other = sql.replace(
        "* 0.0001 FROM s.ps, s.su WHERE", "* 0.0001 FROM s.ps, s.su WHERE 1 = 1 AND"
    )
    assert plan_query(parse_query(other)).strategy == "full"  # a subquery outside WHERE


def test_a_cte_with_column_names_keeps_them_at_every_read() -> None:
    plan = plan_query(
        parse_query(
            "WITH x(kk, t) AS (SELECT k, SUM(v) FROM s.a GROUP BY k)"
            " SELECT y.kk FROM x AS y WHERE y.t = (SELECT MAX(t) FROM x)"
        )
    )
    assert plan.nested is not None
    outer = plan.nested.outer_sql
    assert f"{INNER_VIEW} AS y(kk, t)" in outer and f"{INNER_VIEW} AS x(kk, t)" in outer, outer


def test_top_k_orders_the_kept_groups_by_their_positions() -> None:
    plan = plan_query(
        parse_query(
            "SELECT a.k, SUM(a.v) AS t, a.s FROM s.a a GROUP BY a.k, a.s"
            " ORDER BY t DESC, a.s NULLS LAST, 1 LIMIT 5"
        )
    )
    assert plan.nested is not None and plan.nested.outer_inputs == ()
    assert plan.nested.outer_sql == (
        f"SELECT * FROM {INNER_VIEW} ORDER BY 2 DESC, 3 NULLS LAST, 1 LIMIT 5"
    )
    assert "ORDER" not in plan.blocks[0].tree.sql() and "LIMIT" not in plan.blocks[0].tree.sql()


def test_windows_are_kept_by_the_keys_every_one_partitions_by() -> None:
    """A window partitioned by more keys only splits partitions: the common keys decide."""
    plan = plan_query(
        parse_query(
            "SELECT a.s, a.k, SUM(a.v) OVER (PARTITION BY a.k, a.s ORDER BY a.id) AS r,"
            " COUNT(*) OVER (PARTITION BY a.s, a.k) AS n, RANK() OVER (PARTITION BY a.k"
            " ORDER BY a.v) AS q FROM s.a a"
        )
    )
    assert (plan.strategy, plan.key_sql, plan.key_positions) == (GROUP, ("a.k",), (1,))


@pytest.mark.parametrize(
    ("where", "semi"),
    [
        ("EXISTS (SELECT 1 FROM s.b b WHERE b.k = a.k AND b.v > 2)", True),
        ("NOT EXISTS (SELECT * FROM s.b WHERE k = a.k)", True),
        ("a.k IN (SELECT k FROM s.b WHERE v IS NOT NULL)", True),
        ("a.k NOT IN (SELECT k FROM s.b)", False),  # a NULL in b: unknown everywhere
        ("EXISTS (SELECT 1 FROM s.b b JOIN s.c c ON b.k = c.k WHERE b.k = a.k)", False),
        ("EXISTS (SELECT 1 FROM s.b b WHERE b.k = a.k AND b.v <> a.v)", False),
        ("EXISTS (SELECT 1 FROM s.b b WHERE b.k = a.k AND b.v = a.v)", False),
        ("a.k IN (SELECT MAX(k) FROM s.b)", False),
        ("a.v > (SELECT COUNT(*) FROM s.b)", False),
    ],
)
def test_semi_joins_are_told_from_the_sql(where: str, semi: bool) -> None:
    """EXISTS / NOT EXISTS / IN over one table, tied by one equality: maintained in place."""
    plan = plan_query(parse_query(f"SELECT k, SUM(v) AS t FROM s.a a WHERE {where} GROUP BY k"))
    assert plan.fixed_inputs >= {"s.b"}
    assert (plan.semi_inputs == {"s.b"}) is semi, plan.semi_inputs


def test_tables_read_only_in_subqueries_are_fixed_inputs() -> None:
    plan = plan_query(
        parse_query(
            "SELECT a.id FROM s.a a WHERE a.k IN (SELECT k FROM s.b) AND NOT EXISTS"
            " (SELECT 1 FROM s.c c WHERE c.k = a.k) AND a.v > (SELECT AVG(w) FROM s.b)"
        )
    )
    (block,) = plan.blocks
    assert (block.inputs, block.fixed) == (("s.a",), ("s.b", "s.c"))
    assert plan.fixed_inputs == {"s.b", "s.c"}
    assert "subqueries read s.b, s.c: fixed filters" in plan.explain()[2]


def test_a_table_read_twice_is_two_reads_and_bounds_no_keys() -> None:
    """Each read has its own key; a key column of one read does not bound a change's groups."""
    plan = plan_query(
        parse_query(
            "SELECT n1.n, COUNT(DISTINCT a.x) FROM s.a a, s.b n1, s.b n2 WHERE a.k = n1.k"
            " AND a.j = n2.k GROUP BY n1.n"
        )
    )
    (block,) = plan.blocks
    assert block.inputs == ("s.a", "s.b", "s.b")
    assert block.occurrences == ("s.a", "s.b", "s.b#2")
    assert block.repeated == {"s.b"}
    assert plan.key_columns == ()


def test_group_keys_are_mapped_to_output_positions() -> None:
    plan = plan_query(
        parse_query(
            "SELECT COUNT(DISTINCT v) + AVG(v) AS t, b.n, a.k FROM s.a a JOIN s.b b"
            " ON a.k = b.k GROUP BY a.k, b.n"
        )
    )
    assert plan.strategy == "group"
    assert plan.key_positions == (2, 1)
    assert plan.key_sql == ("a.k", "b.n")


def test_group_keys_find_their_equal_input_columns() -> None:
    """A key in an inner join's equality class can be read from either input's change."""
    plan = plan_query(
        parse_query(
            "SELECT a.k, b.z, COUNT(DISTINCT a.x) FROM s.a a, s.b b JOIN s.c c ON c.j = b.k "
            "WHERE a.k = b.k AND a.x > 1 GROUP BY a.k, b.z"
        )
    )
    by_index = {found.index: found for found in plan.key_columns}
    assert by_index[0].members == (("s.a", "a", "k"), ("s.b", "b", "k"), ("s.c", "c", "j"))
    assert by_index[0].columns_of("s.c") == ["c.j"]
    assert by_index[1].members == (("s.b", "b", "z"),)
    assert any("affected keys: a.k read from the changed rows" in s for s in plan.explain())


Q13 = (
    "SELECT c_count, COUNT(*) AS custdist FROM (SELECT c_custkey, COUNT(o_orderkey) FROM"
    " s.customer LEFT OUTER JOIN s.orders ON c_custkey = o_custkey AND o_comment NOT LIKE '%r%'"
    " GROUP BY c_custkey) AS c_orders (c_custkey, c_count) GROUP BY c_count"
)


def test_bare_outer_join_columns_are_placed_by_the_inputs_schemas() -> None:
    """Without schemas the sides of ``ON c_custkey = o_custkey`` are unknown; with them
    each column goes to the one table that has it, and the left-join rule applies."""
    columns = {"s.customer": ["C_CUSTKEY", "c_name"], "s.orders": ["o_orderkey", "o_custkey"]}
    columns["s.orders"].append("o_comment")
    bare = plan_query(parse_query(Q13))
    assert bare.strategy == "full" and "both qualified" in bare.reason
    placed = plan_query(parse_query(Q13), columns)
    assert placed.strategy == "aggregate", placed.reason
    assert "left-join delta rule" in "\n".join(placed.explain())
    # A column both tables have stays bare: the rule does not guess.
    both = {**columns, "s.orders": [*columns["s.orders"], "c_custkey"]}
    assert plan_query(parse_query(Q13), both).strategy == "full"
    # A schema that lacks a column leaves it bare too.
    assert plan_query(parse_query(Q13), {**columns, "s.customer": ["c_name"]}).strategy == "full"


def test_left_join_equalities_prove_nothing_about_keys() -> None:
    """A LEFT JOIN's NULL-extended rows break ``a.k = b.k``: no shortcut for its keys."""
    plan = plan_query(
        parse_query(
            "SELECT b.k, COUNT(DISTINCT a.v) FROM s.a a LEFT JOIN s.b b ON a.k = b.k GROUP BY b.k"
        )
    )
    assert plan.strategy == "group"
    assert plan.key_columns == ()


def test_or_and_expressions_prove_no_equality() -> None:
    plan = plan_query(
        parse_query(
            "SELECT a.k, COUNT(*) FROM s.a a JOIN s.b b ON a.k = b.k OR a.k = b.j "
            "WHERE a.k + 1 = b.q GROUP BY a.k"
        )
    )
    assert [found.members for found in plan.key_columns] == [(("s.a", "a", "k"),)]


def test_in_place_aggregates_keep_their_fallback_plan() -> None:
    """An ``aggregate`` plan keeps the grouped plan the write job falls back to."""
    plan = plan_query(
        parse_query(
            "SELECT CAST(ts AS DATE) AS d, COUNT(*) AS n, AVG(v) AS a, SUM(v) AS t, COUNT(v) "
            "FROM s.a GROUP BY 1"
        )
    )
    assert plan.strategy == "aggregate" and not plan.grouped
    assert plan.in_place is not None
    assert plan.in_place.arguments == ("v",)  # one argument: its sum and count serve all three
    functions = [(a.position, a.function, a.argument) for a in plan.in_place.aggregates]
    assert functions == [(1, "count", None), (2, "avg", 0), (3, "sum", 0), (4, "count", 0)]
    fallback = plan.fallback("a DOUBLE argument")
    assert fallback.strategy == "partition" and fallback.grouped and fallback.in_place is None
    assert fallback.key_ranges == plan.key_ranges and fallback.key_ranges
    assert fallback.reason.endswith("(not in place: a DOUBLE argument)")
    scalar = plan_query(parse_query("SELECT COUNT(*), SUM(v) FROM s.a WHERE v > 1"))
    assert scalar.strategy == "aggregate" and scalar.key_sql == ()
    assert scalar.fallback("x").strategy == "full"


def test_expressions_over_aggregates_keep_hidden_operands() -> None:
    """q14's shape: the expression is derived by Spark from aggregates kept in place."""
    plan = plan_query(
        parse_query(
            "SELECT k, 100.00 * SUM(CASE WHEN s LIKE 'P%' THEN v ELSE 0 END) / SUM(v) AS r, "
            "SUM(v) AS t, COUNT(*) + 1 AS n1 FROM s.a GROUP BY k"
        )
    )
    assert plan.strategy == "aggregate", plan.reason
    in_place = plan.in_place
    assert in_place is not None
    calls = [(a.position, in_place.call_sql(i)) for i, a in enumerate(in_place.aggregates)]
    case = "SUM(CASE WHEN s LIKE 'P%' THEN v ELSE 0 END)"
    # One operand per distinct call and use: the hidden SUM(v) is not the output one.
    assert calls == [(None, "SUM(v)"), (None, case), (2, "SUM(v)"), (None, "COUNT(*)")]
    assert [(d.position, d.sql) for d in in_place.derived] == [
        (1, "100.00 * __ct_v1 / __ct_v0"),
        (3, "__ct_v3 + 1"),
    ]
    select = sqlglot.parse_one("SELECT k, SUM(v) + k AS x FROM s.a GROUP BY k", dialect="spark")
    reason = in_place_shape(select, list(select.expressions), (0,))
    assert isinstance(reason, str) and "over aggregates and columns" in reason


def test_stddev_and_variance_are_derived_from_a_count_and_two_sums() -> None:
    """Each form is an expression over COUNT(x), SUM(x) and SUM of x's exact squares, shared
    by the calls over the same argument; DISTINCT inside one is refused."""
    sql = "SELECT k, STDDEV_SAMP(v) AS sd, VAR_POP(v) AS vp, STDDEV_POP(v) / SUM(w) AS r"
    in_place = plan_query(parse_query(f"{sql} FROM s.a GROUP BY k")).in_place
    assert in_place is not None
    square = "CAST(v AS DECIMAL(22, 3)) * CAST(v AS DECIMAL(22, 3))"
    calls = [in_place.call_sql(i) for i in range(len(in_place.aggregates))]
    assert calls == ["COUNT(v)", "SUM(v)", f"SUM({square})", "SUM(w)"]
    assert in_place.squares() == {1: 0}
    sd, vp, r = in_place.derived
    assert (sd.position, vp.position, r.position) == (1, 2, 3)
    assert sd.moments == vp.moments == r.moments == ((0, 1, 2),)
    numerator = (
        "CAST(CAST(__ct_v0 AS DECIMAL(38, 6)) * __ct_v2 - CAST(__ct_v1 AS DECIMAL(38, 6))"
        " * CAST(__ct_v1 AS DECIMAL(38, 6)) AS DOUBLE)"
    )
    assert sd.sql == (
        f"CASE WHEN __ct_v0 > 1 THEN SQRT({numerator} / CAST(__ct_v0 * (__ct_v0 - 1) AS DOUBLE))"
        " END"
    )
    assert (
        vp.sql == f"CASE WHEN __ct_v0 > 0 THEN {numerator} / CAST(__ct_v0 * __ct_v0 AS DOUBLE) END"
    )
    assert r.sql.endswith("END / __ct_v3")
    distinct = plan_query(parse_query("SELECT k, STDDEV(DISTINCT v) FROM s.a GROUP BY k"))
    assert distinct.strategy == "group", distinct.reason
    select = sqlglot.parse_one("SELECT k, STDDEV(DISTINCT v) FROM s.a GROUP BY k", dialect="spark")
    reason = in_place_shape(select, list(select.expressions), (0,))
    assert isinstance(reason, str) and "DISTINCT inside an aggregate" in reason


def test_refresh_modes() -> None:
    window = parse_query("SELECT id, RANK() OVER (ORDER BY v) FROM s.a")
    assert choose_plan(window, RefreshMode.parse("auto")).strategy == "full"
    full = RefreshMode.parse("full")
    assert choose_plan(parse_query("SELECT id FROM s.a"), full).reason == "refresh='full'"
    with pytest.raises(QueryError, match="not incremental: a window without PARTITION BY"):
        choose_plan(window, RefreshMode.parse("incremental"))
    with pytest.raises(ConfigurationError, match="refresh='sometimes'"):
        choose_plan(window, RefreshMode.parse("sometimes"))


SCHEMAS = {
    "s.a": ["id", "k", "v", "s"],
    "s.b": ["k", "w", "Note"],
}


@pytest.mark.parametrize(
    ("sql", "expected"),
    [
        (
            "SELECT a.k, SUM(a.v) AS t, COUNT(*) AS n FROM s.a a JOIN s.b b ON a.k = b.k "
            "GROUP BY a.k",
            {"s.a": ["k", "v"], "s.b": ["k"]},
        ),
        # Unqualified names are placed by the inputs' schemas (case-insensitively).
        (
            "SELECT id, note FROM s.a JOIN s.b ON a.k = b.k",
            {"s.a": ["id", "k"], "s.b": ["k", "Note"]},
        ),
        # COUNT(*) alone reads no column: one is kept so rows still count.
        ("SELECT COUNT(*) AS n, k FROM s.a GROUP BY k", {"s.a": ["k"], "s.b": ["k"]}),
        ("SELECT id FROM s.a UNION ALL SELECT w FROM s.b", {"s.a": ["id"], "s.b": ["w"]}),
        # EXISTS (SELECT * ...) reads only what its WHERE names (TPC-H q21).
        (
            "SELECT a.s, COUNT(*) AS n FROM s.a a WHERE EXISTS (SELECT * FROM s.b b "
            "WHERE b.k = a.k AND b.w <> a.v) GROUP BY a.s",
            {"s.a": ["k", "v", "s"], "s.b": ["k", "w"]},
        ),
    ],
)
def test_referenced_columns(sql: str, expected: dict[str, list[str]]) -> None:
    plan = plan_query(parse_query(sql))
    assert plan.incremental, plan
    assert referenced_columns(plan, SCHEMAS, "ct") == expected


@pytest.mark.parametrize(
    "sql",
    [
        "SELECT * FROM s.a WHERE k > 1",
        "SELECT a.* FROM s.a a JOIN s.b b ON a.k = b.k",
        "SELECT a.s.f FROM s.a a",  # a struct field, or a name this cannot place
        "SELECT id FROM s.a WHERE k IN (SELECT * FROM s.b)",  # a star IN outputs
        "SELECT id, v * 2 AS x FROM s.a WHERE k = 1 AND unknown_col > 0",
    ],
)
def test_referenced_columns_fall_back_to_every_column(sql: str) -> None:
    plan = plan_query(parse_query(sql))
    assert plan.incremental, plan
    assert referenced_columns(plan, SCHEMAS, "ct") == SCHEMAS


KEY_ROWS = [
    (1, "O'Brien", "2026-01-02"),
    (1, "a\\b", "2026-01-02"),
    (2, "plain", "2026-01-03"),
    (3, "plain", None),
    (None, None, "2026-01-04"),
    (None, "O'Brien", None),
]


def _restricted(render: Any, inline: InlineKeys, column: str, *, group: bool) -> set[Any]:
    """Keys (``group``) or rows kept by the inline restriction, as ``render`` runs the SQL."""
    sql = f"SELECT {column} AS k, COUNT(*) AS n FROM t GROUP BY {column}"
    tree = sqlglot.parse_one(sql, dialect="spark")
    if group:
        tree = restrict_to_keys(tree, (column,), "unused_view", inline)
    else:
        tree = restrict_columns_to_keys(tree, [f"t.{column}"], "unused_view", inline)
        tree = tree.from_("t AS t", copy=False)
    return {row[0] for row in render(tree)}


@pytest.mark.parametrize(
    ("column", "inline", "groups", "columns"),
    [
        ("k", InlineKeys((1, 3), has_null=True), {1, 3, None}, {1, 3}),
        ("k", InlineKeys((), has_null=True), {None}, set()),
        ("k", InlineKeys(()), set(), set()),
        ("name", InlineKeys(("O'Brien", "a\\b")), {"O'Brien", "a\\b"}, {"O'Brien", "a\\b"}),
        (
            "d",
            InlineKeys((datetime.date(2026, 1, 2),), has_null=True),
            {datetime.date(2026, 1, 2), None},
            {datetime.date(2026, 1, 2)},
        ),
    ],
)
def test_inline_keys_keep_exactly_their_groups_in_duckdb(
    column: str, inline: InlineKeys, groups: set[Any], columns: set[Any]
) -> None:
    """NULL is a group of its own for the grouping key (``<=>``), never for a joined column."""
    import duckdb

    con = duckdb.connect()
    con.execute("CREATE TABLE t (k BIGINT, name VARCHAR, d DATE)")
    con.executemany("INSERT INTO t VALUES (?, ?, CAST(? AS DATE))", KEY_ROWS)

    def render(tree: Any) -> list[tuple[Any, ...]]:
        return con.execute(tree.sql(dialect="duckdb")).fetchall()

    assert _restricted(render, inline, column, group=True) == groups
    assert _restricted(render, inline, column, group=False) == columns


@pytest.mark.spark
def test_inline_string_keys_survive_spark_sql_escaping(spark: Any) -> None:
    """Spark reads backslashes in literals as escapes: the keys must still match exactly."""
    rows = [(r[0], r[1]) for r in KEY_ROWS]
    spark.createDataFrame(rows, "k long, name string").createOrReplaceTempView("t")

    def render(tree: Any) -> list[tuple[Any, ...]]:
        return [tuple(r) for r in spark.sql(tree.sql(dialect="spark")).collect()]

    inline = InlineKeys(("O'Brien", "a\\b"))
    assert _restricted(render, inline, "name", group=True) == {"O'Brien", "a\\b"}
    assert _restricted(render, inline, "name", group=False) == {"O'Brien", "a\\b"}


def test_inline_keys_refuse_values_sql_cannot_write_exactly() -> None:
    tree = sqlglot.parse_one("SELECT k FROM t GROUP BY k", dialect="spark")
    for value in (1.5, datetime.datetime(2026, 1, 1)):
        with pytest.raises(TypeError, match="no inline literal"):
            restrict_to_keys(tree, ("k",), "v", InlineKeys((value,)))


@pytest.mark.parametrize(
    ("value", "refresh", "expected"),
    [
        ("", "auto", 0.10),  # the default
        ("0.25", "auto", 0.25),
        ("0", "auto", 0.0),  # off
        ("0.25", "incremental", 0.0),  # only auto chooses by size
        ("0.25", "full", 0.0),
        ("abc", "auto", None),
        ("-0.1", "auto", None),
        ("nan", "auto", None),
    ],
)
def test_large_change_share_from_the_environment(
    monkeypatch: pytest.MonkeyPatch, value: str, refresh: str, expected: float | None
) -> None:
    from airflow_provider_ct.exceptions import ConfigurationError
    from airflow_provider_ct.ivm.plan.decision import RefreshMode, RefreshSettings

    def large_change_share(refresh: str) -> float:
        return RefreshSettings.of(RefreshMode.parse(refresh)).large_change

    monkeypatch.setenv("CT_FULL_ABOVE_CHANGE", value)
    if expected is None:
        with pytest.raises(ConfigurationError, match="CT_FULL_ABOVE_CHANGE must be a share"):
            large_change_share(refresh)
    else:
        assert large_change_share(refresh) == expected


def test_day_keys_name_the_input_column_they_bound() -> None:
    plan = plan_query(
        parse_query(
            "SELECT b.n, DATE(e.ts) AS day, COUNT(DISTINCT e.v) FROM s.events e "
            "JOIN s.b b ON e.k = b.k "
            "GROUP BY b.n, DATE(e.ts)"
        )
    )
    assert plan.strategy == "partition" and plan.grouped
    assert [(r.index, r.input, r.alias, r.column) for r in plan.key_ranges] == [
        (1, "s.events", "e", "ts")
    ]
    assert any("restricted to those days of e.ts" in line for line in plan.explain())


def test_consecutive_days_merge_into_one_range() -> None:
    d = datetime.date
    days = (d(2024, 1, 3), d(2024, 1, 1), d(2024, 1, 2), d(2024, 1, 9), d(2024, 1, 2))
    assert day_ranges(days) == [(d(2024, 1, 1), d(2024, 1, 4)), (d(2024, 1, 9), d(2024, 1, 10))]
    assert day_ranges(()) == []


@pytest.mark.parametrize(
    ("column_type", "literal"),
    [
        ("timestamp", "CAST('2024-01-01 00:00:00' AS TIMESTAMP)"),
        ("timestamp_ntz", "CAST('2024-01-01 00:00:00' AS TIMESTAMP_NTZ)"),
        ("date", "CAST('2024-01-01' AS DATE)"),
    ],
)
def test_day_restriction_is_a_range_of_the_bare_column(column_type: str, literal: str) -> None:
    """A range of the column itself (what Iceberg prunes by), next to the block's own filter."""
    tree = sqlglot.parse_one(
        "SELECT CAST(e.ts AS DATE) AS d, COUNT(*) FROM v AS e WHERE e.x > 1 OR e.y GROUP BY 1",
        dialect="spark",
    )
    days = InlineKeys((datetime.date(2024, 1, 1),), has_null=True)
    sql = restrict_to_days(tree, "e.ts", column_type, days).sql(dialect="spark")
    assert f"(e.x > 1 OR e.y) AND ((`e`.`ts` >= {literal} AND" in sql
    assert "OR `e`.`ts` IS NULL)" in sql
    none = restrict_to_days(tree, "e.ts", column_type, InlineKeys(()))
    assert "AND FALSE" in none.sql(dialect="spark")


def test_the_changed_rows_days_are_the_casts_days() -> None:
    """``CAST(ts AS DATE)``: an instant's date in the session's zone; a local time's own date."""
    import pyarrow as pa

    from airflow_provider_ct.spark.ivm.days import INLINE_KEYS, arrow_days

    utc = datetime.UTC
    late = datetime.datetime(2026, 3, 2, 3, 30, tzinfo=utc)  # still March 1st in New York
    aware = pa.table({"TS": pa.array([late, None], pa.timestamp("us", tz="UTC"))})
    found = arrow_days([aware], "ts", "America/New_York", instants=True)
    assert found is not None and found.values == (datetime.date(2026, 3, 1),) and found.has_null
    assert arrow_days([aware], "ts", "UTC", instants=True).values == (  # type: ignore[union-attr]
        datetime.date(2026, 3, 2),
    )
    naive = pa.table({"ts": pa.array([late.replace(tzinfo=None)], pa.timestamp("us"))})
    as_instant = arrow_days([naive], "ts", "America/New_York", instants=True)
    assert as_instant is not None and as_instant.values == (datetime.date(2026, 3, 1),)
    local = arrow_days([naive], "ts", "America/New_York", instants=False)  # TIMESTAMP_NTZ
    assert local is not None and local.values == (datetime.date(2026, 3, 2),)
    many = pa.table(
        {
            "d": [
                datetime.date(2000, 1, 1) + datetime.timedelta(days=i)
                for i in range(INLINE_KEYS + 1)
            ]
        }
    )
    assert arrow_days([many], "d", "UTC", instants=False) is None
    assert arrow_days([naive], "other", "UTC", instants=False) is None


@pytest.mark.parametrize(
    ("sql", "inner", "outer"),
    [
        (
            "SELECT k, COUNT(DISTINCT v) AS n FROM s.a WHERE w > 1 GROUP BY k",
            "SELECT k AS __ct_g0, v AS __ct_d, COUNT(*) AS __ct_n FROM s.a WHERE w > 1"
            " GROUP BY k, v",
            f"SELECT __ct_g0 AS k, COUNT(__ct_d) AS n FROM {INNER_VIEW} GROUP BY __ct_g0",
        ),
        (  # other calls re-aggregate their values per pair; a sum is cast back to its type
            "SELECT k, COUNT(*) AS n, COUNT(DISTINCT v) AS dv, SUM(w) AS t, COUNT(w) AS nw,"
            " MAX(w) AS hi FROM s.a GROUP BY k HAVING SUM(w) > 3",
            "SELECT k AS __ct_g0, v AS __ct_d, COUNT(*) AS __ct_n, SUM(w) AS __ct_a0, COUNT(w) AS"
            " __ct_a1, MAX(w) AS __ct_a2 FROM s.a GROUP BY k, v",
            f"SELECT __ct_g0 AS k, COALESCE(SUM(__ct_n), 0) AS n, COUNT(__ct_d) AS dv,"
            " __CT_AS___CT_A0(SUM(__ct_a0)) AS t, COALESCE(SUM(__ct_a1), 0) AS nw,"
            f" MAX(__ct_a2) AS hi FROM {INNER_VIEW} GROUP BY __ct_g0"
            " HAVING __CT_AS___CT_A0(SUM(__ct_a0)) > 3",
        ),
        (  # no GROUP BY: one group, counted over the values' pairs
            "SELECT COUNT(DISTINCT v) AS n FROM s.a",
            "SELECT v AS __ct_d, COUNT(*) AS __ct_n FROM s.a GROUP BY v",
            f"SELECT COUNT(__ct_d) AS n FROM {INNER_VIEW}",
        ),
        (  # keys under expressions, HAVING, ORDER BY and LIMIT stay on the outer query
            "SELECT a.k, upper(a.k) AS u, COUNT(DISTINCT b.v) AS n FROM s.a a JOIN s.b b"
            " ON a.id = b.id GROUP BY a.k HAVING COUNT(DISTINCT b.v) > 2 ORDER BY n DESC LIMIT 5",
            "SELECT a.k AS __ct_g0, b.v AS __ct_d, COUNT(*) AS __ct_n FROM s.a AS a JOIN s.b AS b"
            " ON a.id = b.id GROUP BY a.k, b.v",
            f"SELECT __ct_g0 AS k, UPPER(__ct_g0) AS u, COUNT(__ct_d) AS n FROM {INNER_VIEW}"
            " GROUP BY __ct_g0 HAVING COUNT(__ct_d) > 2 ORDER BY n DESC LIMIT 5",
        ),
    ],
)
def test_a_distinct_count_keeps_its_pairs_in_place(sql: str, inner: str, outer: str) -> None:
    plan = plan_query(parse_query(sql))
    assert plan.strategy == "aggregate" and plan.nested is not None, plan.reason
    assert plan.blocks[0].tree.sql() == inner
    assert plan.nested.outer_sql == outer
    assert plan.nested.outer_inputs == ()
    unnested = plan.fallback("a double key")  # the plan the query has without the split
    assert unnested.nested is None and unnested.strategy in ("group", "full")
    assert unnested.reason.endswith("(not in place: a double key)")


@pytest.mark.parametrize(
    "sql",
    [
        "SELECT k, COUNT(DISTINCT v) AS n, AVG(w) AS t FROM s.a GROUP BY k",  # Spark's rounding
        "SELECT k, COUNT(DISTINCT v) AS n, SUM(DISTINCT w) AS t FROM s.a GROUP BY k",
        "SELECT k, COUNT(DISTINCT v) AS n, COUNT(DISTINCT w) AS m FROM s.a GROUP BY k",
        "SELECT k, COUNT(DISTINCT v, w) AS n FROM s.a GROUP BY k",  # a pair of values
        "SELECT k, COUNT(DISTINCT v) FROM s.a GROUP BY k",  # Spark names the column
        "SELECT k, COUNT(DISTINCT v) AS n FROM s.a GROUP BY 1",  # a position
        "SELECT k, COUNT(DISTINCT v) AS n FROM s.a GROUP BY ROLLUP(k)",
        "SELECT k, COUNT(DISTINCT v) AS n, (SELECT MAX(w) FROM s.b) AS m FROM s.a GROUP BY k",
    ],
)
def test_other_distinct_counts_keep_the_plan_they_had(sql: str) -> None:
    plan = plan_query(parse_query(sql))
    assert plan.nested is None and plan.strategy in ("group", "full"), plan.reason


USING_COLUMNS = {"s.a": ["id", "k", "v", "s"], "s.b": ["k", "name"], "s.c": ["k", "z"]}


@pytest.mark.parametrize(
    ("sql", "strategy", "planned"),
    [
        (
            "SELECT k, name, z FROM s.a JOIN s.b USING (k) JOIN s.c USING (k)",
            "linear",
            "SELECT a.k AS k, name, z FROM s.a JOIN s.b ON a.k = b.k JOIN s.c ON a.k = c.k",
        ),
        (
            "SELECT k, SUM(v) AS t FROM s.a x LEFT JOIN s.b USING (k) GROUP BY k",
            "aggregate",
            "SELECT x.k AS k, SUM(v) AS t FROM s.a AS x LEFT JOIN s.b ON x.k = b.k GROUP BY x.k",
        ),
        (
            "SELECT k, name FROM s.a RIGHT JOIN s.b USING (k)",
            "linear",
            "SELECT b.k AS k, name FROM s.b LEFT JOIN s.a ON a.k = b.k",
        ),
        ("SELECT * FROM s.a JOIN s.b USING (k)", "full", None),  # * lists k once
        ("SELECT k, name FROM s.a FULL JOIN s.b USING (k)", "full", None),  # COALESCE(a.k, b.k)
        ("SELECT k, z FROM s.a JOIN s.c USING (v)", "full", None),  # s.c has no v
    ],
)
def test_a_using_join_is_planned_as_its_on_join(sql: str, strategy: str, planned: str) -> None:
    """With the inputs' columns, ``USING (k)`` is ``ON left.k = right.k`` and the bare ``k``
    the left table's (the right's for a RIGHT JOIN); what it cannot place stays refused."""
    plan = plan_query(parse_query(sql), USING_COLUMNS)
    assert plan.strategy == strategy, plan.reason
    if planned is not None:
        assert plan.blocks[0].tree.sql(dialect="spark") == planned
    else:
        assert "USING" in plan.reason or "recomputed in full" in plan.reason
