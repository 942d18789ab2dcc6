"""Top-k views (``ORDER BY ... LIMIT k`` over rows): the view's rows with the change applied.

The planner's part is pure (which shapes, which order over the outputs,
which refusals); the ticks run on Spark over tables the test writes with
PyIceberg, each compared with DuckDB over the test's own rows, and the
strategy each tick must take follows from the rows the test chose: a lost
row outside the top keeps the tick incremental, a lost row of the top
recomputes it.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import duckdb
import pyarrow as pa
import pytest

from airflow_provider_ct.core.catalog import CatalogConfig
from airflow_provider_ct.core.query import parse_query
from airflow_provider_ct.core.tables import create_managed_table
from airflow_provider_ct.ivm.plan.planner import FULL, plan_query
from airflow_provider_ct.ivm.plan.top_k import TOP, OrderKey
from tests.helpers import advance, replace_contents, rows_of
from tests.test_incremental import _inputs_of, _normalized, _tick

ROWS = pa.schema([("id", pa.int64()), ("score", pa.int64()), ("name", pa.string())])


def _plan(sql: str) -> Any:
    return plan_query(parse_query(sql))


def test_the_order_is_read_over_the_outputs() -> None:
    plan = _plan(
        "SELECT t.id AS i, t.score * 2 AS s2, t.name FROM db.t AS t"
        " WHERE t.score > 0 ORDER BY s2 DESC, 3, t.id NULLS LAST LIMIT 4"
    )
    assert plan.strategy == TOP, plan.reason
    assert plan.top is not None and plan.top.limit == 4
    assert plan.top.order == (
        OrderKey(1, descending=True, nulls_first=False),
        OrderKey(2, descending=False, nulls_first=True),
        OrderKey(0, descending=False, nulls_first=False),
    )
    assert "ORDER BY" not in plan.blocks[0].tree.sql() and "LIMIT" not in plan.blocks[0].tree.sql()
    joined = _plan(
        "SELECT a.id, b.name FROM db.a AS a JOIN db.b AS b ON a.k = b.k ORDER BY b.name LIMIT 2"
    )
    assert joined.strategy == TOP and joined.blocks[0].inputs == ("db.a", "db.b")


@pytest.mark.parametrize(
    ("sql", "why"),
    [
        ("SELECT id FROM db.t LIMIT 3", "LIMIT without ORDER BY"),
        ("SELECT id FROM db.t ORDER BY score LIMIT 3", "ORDER BY score is not an output column"),
        ("SELECT id FROM db.t ORDER BY id LIMIT 3 OFFSET 2", "OFFSET"),
    ],
)
def test_a_top_the_rule_cannot_keep_is_refused_with_its_reason(sql: str, why: str) -> None:
    plan = _plan(sql)
    assert plan.strategy == FULL and why in plan.reason, plan.reason


class Scores:
    """One table the test writes, its rows kept as a list (the oracle's input)."""

    def __init__(self, catalog: Any, ns: str) -> None:
        self.ns = ns
        self.table = create_managed_table(catalog, f"{ns}.scores", ROWS)
        self.rows: list[tuple[Any, ...]] = []

    def write(self, time: int, rows: list[tuple[Any, ...]]) -> None:
        self.rows = rows
        data = pa.Table.from_pylist([dict(zip(ROWS.names, r, strict=True)) for r in rows], ROWS)
        replace_contents(self.table, time - 500, data)
        advance(self.table, time)

    def oracle(self, sql: str) -> Counter[tuple[Any, ...]]:
        con = duckdb.connect()
        con.register(
            "score_rows",
            pa.Table.from_pylist([dict(zip(ROWS.names, r, strict=True)) for r in self.rows], ROWS),
        )
        got = con.execute(sql.replace(f"{self.ns}.scores", "score_rows")).fetchall()
        return Counter(tuple(r) for r in got)


TOP3 = (
    "SELECT id, score, name FROM {ns}.scores WHERE score IS NOT NULL"
    " ORDER BY score DESC, id ASC LIMIT 3"
)


def _ticked(
    spark: Any,
    config: CatalogConfig,
    ns: str,
    template: str,
    steps: list[tuple[list[tuple[Any, ...]], str]],
) -> None:
    """``template`` as ``<ns>.view``, ticked after each step's rows: the step's strategy
    (a recomputed top with the rule's reason), and DuckDB's rows over the test's own."""
    catalog = config.load()
    catalog.create_namespace_if_not_exists(ns)
    scores, sql, target = Scores(catalog, ns), template.format(ns=ns), f"{ns}.view"
    for n, (rows, wanted) in enumerate(steps, start=1):
        scores.write(1_000 * n, rows)
        report = _tick(spark, config, target, sql, 1_000 * n)
        assert report["strategy"] == wanted, (n, report)
        if n > 1 and wanted == FULL:
            assert "a row the change lost sorts at or before" in str(report), report
        got = rows_of(catalog.load_table(target))
        assert _normalized(got) == _normalized(scores.oracle(sql)), (n, report)


def test_a_top_k_tick_keeps_the_view_unless_it_lost_one_of_its_rows(
    spark: Any, spark_catalog_config: CatalogConfig
) -> None:
    base = [(1, 50, "a"), (2, 40, "b"), (3, 30, "c"), (4, 20, "d"), (5, None, "e")]
    steps = [
        # (rows after the change, the strategy the rule allows)
        (base, FULL),  # the first tick creates the view
        ([*base, (6, 10, "f"), (7, 45, None)], TOP),  # gained rows, one into the top
        ([r for r in base if r[0] != 4] + [(6, 10, "f"), (7, 45, None)], TOP),  # lost: not top
        ([(1, 50, "a"), (2, 40, "b"), (3, 30, "c"), (6, 10, "f")], FULL),  # lost 7: in the top
        ([(1, 50, "a"), (2, 40, "B"), (3, 30, "c"), (6, 10, "f")], FULL),  # 2 updated: lost
        ([(1, 50, "a"), (2, 40, "B"), (3, 30, "c"), (6, 11, "f")], TOP),  # 6 updated: outside
    ]
    _ticked(spark, spark_catalog_config, "top_k_rule", TOP3, steps)


def test_a_top_k_with_fewer_rows_than_k_takes_losses_in_place(
    spark: Any, spark_catalog_config: CatalogConfig
) -> None:
    sql = "SELECT name, score FROM {ns}.scores ORDER BY score ASC NULLS FIRST, name LIMIT 10"
    steps = [
        ([(1, 5, "a"), (2, None, "b"), (3, 5, "a")], FULL),
        ([(1, 5, "a"), (3, 5, "a"), (4, 1, None)], TOP),  # a NULL lost, duplicates kept
        ([(3, 5, "a"), (4, 1, None)], TOP),  # one of two equal rows lost
    ]
    _ticked(spark, spark_catalog_config, "top_k_short", sql, steps)


def test_a_top_k_over_a_join_equals_the_oracle_under_random_changes(
    spark: Any, spark_catalog_config: CatalogConfig
) -> None:
    ns, catalog, inputs = _inputs_of(spark_catalog_config, "top_k_join")
    sql = (
        f"SELECT a.id, a.v, b.name FROM {ns}.a a JOIN {ns}.b b ON a.k = b.k"
        " ORDER BY a.v DESC NULLS LAST, a.id LIMIT 4"
    )
    seen = []
    for n in range(1, 7):
        inputs.mutate(1_000 * n - 500, change_b=n % 3 == 0)
        inputs.seal(1_000 * n)
        report = _tick(spark, spark_catalog_config, f"{ns}.view", sql, 1_000 * n)
        seen.append(report["strategy"])
        got = rows_of(catalog.load_table(f"{ns}.view"))
        assert _normalized(got) == _normalized(inputs.oracle(sql)), (n, report)
    assert set(seen[1:]) <= {TOP, FULL} and TOP in seen, seen
