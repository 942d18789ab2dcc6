"""The planner's choice of strategy, from the SQL alone (no Spark)."""

from __future__ import annotations

import pytest

from airflow_provider_ct.core.planner import choose_plan, plan_query
from airflow_provider_ct.core.query import parse_query
from airflow_provider_ct.exceptions import ConfigurationError, QueryError

CASES = [
    ("SELECT id, v FROM s.a WHERE v > 1", "linear", "projection and filter"),
    ("SELECT a.id FROM s.a a JOIN s.b b ON a.k = b.k JOIN s.c c ON c.k = b.k", "linear", "3"),
    ("SELECT a.id FROM s.a a, s.b b WHERE a.k = b.k", "linear", "inner join of 2"),
    ("SELECT a.id, b.n FROM s.a a LEFT JOIN s.b b ON a.k = b.k AND a.j = b.j", "linear", "LEFT"),
    ("SELECT k FROM s.a UNION ALL SELECT k FROM s.b", "linear", "UNION ALL of 2"),
    ("SELECT k, SUM(v) AS t, MAX(v) FROM s.a GROUP BY k HAVING COUNT(*) > 2", "group", "k"),
    ("SELECT UPPER(s) AS u, COUNT(DISTINCT v) FROM s.a GROUP BY u", "group", "UPPER(s)"),
    ("SELECT k, COUNT(*) FROM s.a GROUP BY 1", "group", "GROUP BY k"),
    ("SELECT DISTINCT k, v FROM s.a", "group", "DISTINCT"),
    ("SELECT COUNT(*) FROM s.a", "full", "without GROUP BY"),
    ("SELECT k, SUM(v) FROM s.a GROUP BY k, v", "full", "not an output column"),
    ("SELECT id, RANK() OVER (PARTITION BY k ORDER BY v) FROM s.a", "full", "window"),
    ("SELECT id FROM s.a WHERE k IN (SELECT k FROM s.b)", "full", "subqueries"),
    ("SELECT id FROM s.a a WHERE NOT EXISTS (SELECT 1 FROM s.b b WHERE a.k = b.k)", "full", "sub"),
    ("WITH x AS (SELECT id FROM s.a) SELECT id FROM x", "full", "CTE"),
    ("SELECT id FROM s.a LIMIT 5", "full", "LIMIT"),
    ("SELECT k FROM s.a UNION SELECT k FROM s.b", "full", "UNION (without ALL)"),
    ("SELECT a.id FROM s.a a JOIN s.a b ON a.k = b.k", "full", "self-join"),
    ("SELECT a.id FROM s.a a FULL OUTER JOIN s.b b ON a.k = b.k", "full", "outer joins"),
    ("SELECT a.id FROM s.a a LEFT JOIN s.b b ON a.k > b.k", "full", "not a conjunction"),
    ("SELECT id, rand() FROM s.a", "full", "nondeterministic"),
    ("SELECT k, SUM(v) FROM s.a GROUP BY ROLLUP(k)", "full", "ROLLUP"),
]


@pytest.mark.parametrize(("sql", "strategy", "why"), CASES)
def test_strategy_and_reason(sql: str, strategy: str, why: str) -> None:
    plan = plan_query(parse_query(sql))
    assert plan.strategy == strategy, plan
    assert why in plan.reason, plan.reason
    assert plan.explain()[:2] == [f"strategy: {strategy}", f"why: {plan.reason}"]


def test_group_keys_are_mapped_to_output_positions() -> None:
    plan = plan_query(
        parse_query(
            "SELECT SUM(v) AS t, b.n, a.k FROM s.a a JOIN s.b b ON a.k = b.k GROUP BY a.k, b.n"
        )
    )
    assert plan.strategy == "group"
    assert plan.key_positions == (2, 1)
    assert plan.key_sql == ("a.k", "b.n")


def test_refresh_modes() -> None:
    window = parse_query("SELECT id, RANK() OVER (ORDER BY v) FROM s.a")
    assert choose_plan(window, "auto").strategy == "full"
    assert choose_plan(parse_query("SELECT id FROM s.a"), "full").reason == "refresh='full'"
    with pytest.raises(QueryError, match="not incremental: window functions"):
        choose_plan(window, "incremental")
    with pytest.raises(ConfigurationError, match="refresh='sometimes'"):
        choose_plan(window, "sometimes")
