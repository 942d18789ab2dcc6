"""Blocks joined by outer joins beyond one LEFT JOIN of two tables: a rule per read.

The planner names, per read of a table, how its change is maintained
(:mod:`airflow_provider_ct.ivm.plan.outer_joins`); the Spark tests tick each
shape over inputs the test changes at random (NULL keys, duplicates,
deletes) and compare the view with DuckDB over the test's own rows after
every tick.
"""

from __future__ import annotations

from typing import Any

import pytest

from airflow_provider_ct.core.catalog import CatalogConfig
from airflow_provider_ct.core.query import parse_query
from airflow_provider_ct.ivm.plan.planner import plan_query
from tests.test_incremental import _checked_tick, _inputs_of

#: name -> (the strategy the planner picks, the view's SQL over ``{ns}.a`` and ``{ns}.b``).
SHAPES = {
    "full_join": (
        "linear",
        "SELECT a.id, a.v, b.k AS bk, b.name FROM {ns}.a a FULL JOIN {ns}.b b ON a.k = b.k",
    ),
    "self_left_join": (
        "linear",
        "SELECT x.id, x.k, y.id AS yid, y.v AS yv FROM {ns}.a x"
        " LEFT JOIN {ns}.a y ON x.k = y.v AND y.id <> x.id",
    ),
    "two_left_joins": (
        "linear",
        "SELECT a.id, b.name, c.id AS cid FROM {ns}.a a LEFT JOIN {ns}.b b ON a.k = b.k"
        " LEFT JOIN {ns}.a c ON b.k = c.v",
    ),
    "right_join_after_inner": (
        "linear",
        "SELECT x.id, b.name, y.id AS yid FROM {ns}.a x JOIN {ns}.b b ON x.k = b.k"
        " RIGHT JOIN {ns}.a y ON y.v = x.k AND y.v = b.k",
    ),
    "grouped_full_join": (
        "aggregate",
        "SELECT b.k, COUNT(*) AS n, SUM(a.v) AS t, COUNT(a.id) AS ids FROM {ns}.a a"
        " FULL JOIN {ns}.b b ON a.k = b.k GROUP BY b.k",
    ),
    "extrema_over_self_left_join": (
        "aggregate",
        "SELECT x.s, MIN(y.v) AS lo, COUNT(*) AS n FROM {ns}.a x LEFT JOIN {ns}.a y"
        " ON x.k = y.k GROUP BY x.s",
    ),
    # DISTINCT keeps each row's count in place, over a FULL JOIN's terms too.
    "distinct_full_join": (
        "aggregate",
        "SELECT DISTINCT a.s, b.name FROM {ns}.a a FULL JOIN {ns}.b b ON a.k = b.k",
    ),
}

#: Shapes with a subquery beside the outer joins, over ``b``: fixed filters of each row,
#: so a tick that changes ``b`` runs in full and one that does not by the rule per read.
BESIDE_SUBQUERIES = {
    "left_join_beside_in": (
        "SELECT a.id, a.v, b.name FROM {ns}.a a LEFT JOIN {ns}.b b ON a.k = b.k"
        " WHERE a.v IN (SELECT k + 1 FROM {ns}.b WHERE name IS NOT NULL)"
    ),
    "full_join_beside_exists": (
        "SELECT a.id, b.k AS bk, b.name FROM {ns}.a a FULL JOIN {ns}.b b ON a.k = b.k"
        " WHERE b.k IS NULL OR EXISTS (SELECT 1 FROM {ns}.b c WHERE c.k = b.k - 1)"
    ),
}


def _plan(sql: str) -> Any:
    return plan_query(parse_query(sql.format(ns="ns"), target="ns.view", catalog_name="ct"))


@pytest.mark.parametrize("name", sorted(SHAPES))
def test_the_planner_maintains_each_outer_shape(name: str) -> None:
    strategy, template = SHAPES[name]
    plan = _plan(template)
    assert plan.strategy == strategy, plan.reason
    (block,) = plan.blocks
    assert block.outer is not None and block.left_join is None
    assert len(block.outer.rules) == len(block.inputs)


def test_each_read_names_the_read_its_change_restricts() -> None:
    chain = _plan(SHAPES["two_left_joins"][1]).blocks[0].outer
    rules = [(r.restricted, r.restricted_column, r.change_column) for r in chain.rules]
    assert rules == [
        (None, "", ""),  # a is preserved by both joins: its change alone
        (0, "k", "k"),  # b is the first join's optional side: a's rows of the changed b.k
        (1, "k", "v"),  # c is the second's: b's rows of the changed c.v values
    ]
    right = _plan(SHAPES["right_join_after_inner"][1]).blocks[0].outer.rules
    # x and b each tie the RIGHT JOIN's y by their own column: y restricted to those values
    assert [(r.restricted, r.restricted_column, r.change_column) for r in right[:2]] == [
        (2, "v", "k"),
        (2, "v", "k"),
    ]
    assert right[2].restricted is None  # the preserved side of the last join


def test_outer_chains_the_rules_do_not_bound_are_refused_with_the_reason() -> None:
    why = {
        # b is LEFT JOIN's optional side and the RIGHT JOIN's left: two outer joins
        "SELECT a.id FROM {ns}.a a LEFT JOIN {ns}.b b ON a.k = b.k"
        " RIGHT JOIN {ns}.a c ON b.k = c.v AND a.k = c.v": "b reaches two outer joins",
        # a change of a moves x's rows, whose RIGHT JOIN is tied to b only
        "SELECT x.id FROM {ns}.a x JOIN {ns}.b b ON x.k = b.k"
        " RIGHT JOIN {ns}.a y ON y.v = b.k": "is not tied to x",
        # Spark reads a, (b FULL JOIN c): not the chain left to right
        "SELECT a.id FROM {ns}.a a, {ns}.b b FULL JOIN {ns}.a c ON b.k = c.k": "after a cross",
        "SELECT a.id FROM {ns}.a a FULL JOIN {ns}.b b ON a.k < b.k": "no equality",
    }
    for sql, reason in why.items():
        plan = _plan(sql)
        assert plan.strategy == "full" and reason in plan.reason, (sql, plan.reason)


@pytest.mark.spark
@pytest.mark.parametrize("name", sorted(SHAPES))
def test_an_outer_joined_view_equals_duckdb_at_every_tick(
    spark: Any, spark_catalog_config: CatalogConfig, name: str
) -> None:
    strategy, template = SHAPES[name]
    _, _, inputs = _inputs_of(spark_catalog_config, f"outer_{name}")
    sql = template.format(ns=inputs.ns)
    for n in range(1, 7):  # each tick equal to DuckDB over the test's own rows
        changed = n % 3 != 0
        ran, reason = _checked_tick(spark, spark_catalog_config, inputs, sql, n, change_b=changed)
        if n > 1:  # the first tick has nothing to start from
            assert ran == strategy, reason


@pytest.mark.parametrize("name", sorted(BESIDE_SUBQUERIES))
def test_subqueries_beside_outer_joins_are_fixed_filters(name: str) -> None:
    plan = _plan(BESIDE_SUBQUERIES[name])
    assert plan.strategy == "linear", plan.reason
    (block,) = plan.blocks
    assert block.outer is not None and block.fixed == ("ns.b",)
    assert not (block.keyed or block.semi or block.params)  # no route but the terms in Spark


@pytest.mark.spark
@pytest.mark.parametrize("name", sorted(BESIDE_SUBQUERIES))
def test_a_view_with_subqueries_beside_outer_joins_equals_duckdb_at_every_tick(
    spark: Any, spark_catalog_config: CatalogConfig, name: str
) -> None:
    _, _, inputs = _inputs_of(spark_catalog_config, f"outer_{name}")
    sql = BESIDE_SUBQUERIES[name].format(ns=inputs.ns)
    for n in range(1, 7):  # each tick equal to DuckDB over the test's own rows
        changed = n % 2 == 1
        ran, reason = _checked_tick(
            spark, spark_catalog_config, inputs, sql, n, change_b=changed, rewrite_b=False
        )
        if n > 1:  # b read in a subquery: a tick that changes it runs in full
            assert ran == ("full" if inputs.b_changed else "linear"), (n, reason)
