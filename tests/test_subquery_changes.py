"""A change of a table read in a subquery: each subquery's rule bounds the rows it moves.

The planner's rules (:mod:`airflow_provider_ct.ivm.plan.subquery_changes`) are
checked from SQL and columns alone; the Spark tests tick views whose
subqueries the keyed rule does not maintain (ties to two keys, a changed
table without the key, an uncorrelated value, ``NOT IN``) over inputs the
test changes at random, and compare the view with DuckDB over the test's
own rows after every tick.
"""

from __future__ import annotations

from typing import Any

import pytest

from airflow_provider_ct.core.catalog import CatalogConfig
from airflow_provider_ct.core.query import parse_query
from airflow_provider_ct.ivm.plan.scopes import direct_subqueries
from airflow_provider_ct.ivm.plan.subquery_changes import Route, subquery_rules, unbounded
from tests.test_incremental import _checked_tick, _inputs_of

COLUMNS = {"ns.a": ["id", "k", "v", "s"], "ns.b": ["k", "name"]}

#: name -> the view's SQL over ``{ns}.a`` and ``{ns}.b``; each reads ``b`` (and some ``a``)
#: in a subquery that the keyed rule does not maintain.
SHAPES = {
    # a changes and holds no column equal to the key b.k ties: keyed refuses it
    "exists_beside_a_join": (
        "SELECT a.id, a.v, b.name FROM {ns}.a a JOIN {ns}.b b ON a.v = b.k"
        " WHERE EXISTS (SELECT 1 FROM {ns}.b c WHERE c.k = a.k AND c.name IS NOT NULL)"
    ),
    # two subqueries tied to two keys of the block, one over the block's own table
    "two_keys": (
        "SELECT a.id, a.s FROM {ns}.a a WHERE a.k IN (SELECT b.k FROM {ns}.b b)"
        " AND NOT EXISTS (SELECT 1 FROM {ns}.a y WHERE y.v = a.v AND y.s = 'x')"
    ),
    # an uncorrelated value over the block's own table and one over b
    "values": (
        "SELECT a.id, a.v FROM {ns}.a a WHERE a.v >= (SELECT MAX(y.v) - 3 FROM {ns}.a y)"
        " AND a.k <= (SELECT MAX(b.k) FROM {ns}.b b WHERE b.name IS NOT NULL)"
    ),
    # NOT IN, uncorrelated, beside a grouping (its set never holds a NULL)
    "not_in_grouped": (
        "SELECT a.s, COUNT(*) AS n, SUM(a.v) AS t FROM {ns}.a a"
        " WHERE a.k NOT IN (SELECT b.k FROM {ns}.b b WHERE b.k IS NOT NULL) GROUP BY a.s"
    ),
    # subqueries in a projection's select list: values of each row, tied to two keys
    "values_in_select_list": (
        "SELECT a.id, a.v, (SELECT COUNT(*) FROM {ns}.b b WHERE b.k = a.k) AS n,"
        " (SELECT MAX(y.v) FROM {ns}.a y WHERE y.s = a.s) AS top FROM {ns}.a a WHERE a.v > 1"
    ),
    # a correlated count tied to a column b does not hold, the block grouped
    "count_tied_grouped": (
        "SELECT a.k, COUNT(*) AS n FROM {ns}.a a JOIN {ns}.b b ON a.k = b.k"
        " WHERE (SELECT COUNT(*) FROM {ns}.a y WHERE y.s = a.s) > 2 GROUP BY a.k"
    ),
}


def _rules(sql: str) -> Any:
    tree = parse_query(sql.format(ns="ns"), target="ns.view", catalog_name="ct").expression
    return subquery_rules(tree, COLUMNS, "ct")


def test_each_subquery_gets_its_rule_from_the_sql_and_the_columns() -> None:
    (exists,) = _rules(SHAPES["exists_beside_a_join"])
    assert (exists.route, exists.tied_input, exists.tied_column) == (Route.TIED, "ns.b", "k")
    assert exists.outer_sql == "`a`.`k`" and exists.inner_sql == "c.k"
    in_b, not_exists = _rules(SHAPES["two_keys"])
    assert (in_b.route, in_b.tied_input, in_b.checks_set) == (Route.TIED, "ns.b", False)
    assert (not_exists.tied_input, not_exists.tied_column) == ("ns.a", "v")
    low, high = _rules(SHAPES["values"])
    assert (low.route, low.outer_sql) == (Route.VALUE, "a.v")
    assert (high.route, high.outer_sql, high.inputs) == (Route.VALUE, "a.k", {"ns.b"})
    (not_in,) = _rules(SHAPES["not_in_grouped"])
    assert not_in.route is Route.TIED and not_in.checks_set  # its NULLs checked at each tick


def test_a_change_no_rule_bounds_is_named() -> None:
    whole = {
        # the tie is by an expression of b: a changed b.k moves rows no value names
        "SELECT a.id FROM {ns}.a a WHERE a.v IN (SELECT k + 1 FROM {ns}.b)": "expression",
        # a correlated NOT IN: a NULL among one row's matches makes it unknown
        "SELECT a.id FROM {ns}.a a WHERE a.v NOT IN (SELECT b.k FROM {ns}.b b"
        " WHERE b.name = a.s)": "correlated NOT IN",
        # the subquery reads b twice: the tie names one of the reads
        "SELECT a.id FROM {ns}.a a WHERE EXISTS (SELECT 1 FROM {ns}.b b JOIN {ns}.b c"
        " ON b.k = c.k WHERE b.k = a.k)": "more than once",
    }
    for sql, reason in whole.items():
        rules = _rules(sql)
        why = unbounded(rules, ["ns.b"])
        assert why is not None and reason in why, (sql, why)
        assert unbounded(rules, ["ns.a"]) is None  # the block's own reads: the delta rules


def test_a_change_of_a_table_the_tie_does_not_name_is_unbounded() -> None:
    sql = (
        "SELECT a.id FROM {ns}.a a WHERE EXISTS (SELECT 1 FROM {ns}.b b JOIN {ns}.a y"
        " ON y.k = b.k WHERE b.k = a.v)"
    )
    (rule,) = _rules(sql)
    assert rule.tied_input == "ns.b" and rule.bounds("ns.b") and not rule.bounds("ns.a")
    tree = parse_query(sql.format(ns="ns"), catalog_name="ct").expression
    assert len(direct_subqueries(tree)) == 1


@pytest.mark.spark
@pytest.mark.parametrize("name", sorted(SHAPES))
def test_a_view_whose_subqueries_tables_change_equals_duckdb_at_every_tick(
    spark: Any, spark_catalog_config: CatalogConfig, name: str
) -> None:
    _, _, inputs = _inputs_of(spark_catalog_config, f"subq_{name}")
    sql = SHAPES[name].format(ns=inputs.ns)
    incremental = 0
    for n in range(1, 8):  # each tick equal to DuckDB over the test's own rows
        ran, reason = _checked_tick(
            spark, spark_catalog_config, inputs, sql, n, change_b=n % 2 == 0, rewrite_b=False
        )
        if n > 1 and ran != "full":
            incremental += 1
        elif n > 1:  # only a value or a set that moved every row may send it full
            assert "every row may move" in reason or "state is rebuilt" in reason, (n, reason)
    assert incremental >= 4, incremental


@pytest.mark.spark
def test_a_not_in_whose_set_gains_or_loses_a_null_runs_that_tick_in_full(
    spark: Any, spark_catalog_config: CatalogConfig
) -> None:
    _, _, inputs = _inputs_of(spark_catalog_config, "subq_not_in_nulls")
    ns = inputs.ns
    sql = f"SELECT a.id, a.k FROM {ns}.a a WHERE a.k NOT IN (SELECT b.k FROM {ns}.b b)"
    nulls = []
    for n in range(1, 8):  # b's NULL key comes and goes with its random rows
        before = any(k is None for k, _ in inputs.b)
        ran, reason = _checked_tick(
            spark, spark_catalog_config, inputs, sql, n, change_b=n % 2 == 0, rewrite_b=False
        )
        moved = before != any(k is None for k, _ in inputs.b) and n > 1
        nulls.append(moved)
        if moved:  # every row's NOT IN may turn unknown, or known again
            assert ran == "full" and "gained or lost a NULL" in reason, (n, reason)
        elif n > 1:
            assert ran == "linear", (n, reason)
    assert any(nulls), "the test's rows never moved b's NULL: it checked nothing"
