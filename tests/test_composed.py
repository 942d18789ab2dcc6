"""Queries no rule maintains whole, ticked as parts kept in tables and the query over them.

Each view is ticked under ``refresh="auto"`` over inputs the test changes at
random (inserts, updates, deletes, NULLs, duplicates) and must equal DuckDB
over the test's own rows after every tick. Beside the results: the parts
live in tables of the view, a retried tick reads the parts its first
attempt landed, and a part edited by hand is corrected, not trusted.
"""

from __future__ import annotations

from typing import Any

import pytest
from sqlglot import parse_one

from airflow_provider_ct.collections.maintenance import MaintenanceSettings, maintain
from airflow_provider_ct.core.catalog import CatalogConfig
from airflow_provider_ct.core.definition_rules import check_target_name
from airflow_provider_ct.core.tables import PART_TABLE_INFIX, part_tables
from airflow_provider_ct.exceptions import QueryError
from airflow_provider_ct.ivm.plan.compose import Composition, compose
from airflow_provider_ct.operators.append import AppendOperator
from airflow_provider_ct.spark.write_job import run_write
from tests.conftest import SPARK_CATALOG_CONN as CONN
from tests.helpers import mint_view_tick, rows_of
from tests.test_incremental import _inputs_of, _normalized, _tick

#: Shapes the planner refuses whole, each with parts it maintains.
COMPOSED = {
    # Two aggregating CTEs, joined, ranked by a window over the join (no PARTITION BY).
    "ctes_ranked": (
        2,
        "WITH sa AS (SELECT k, SUM(v) AS t, COUNT(*) AS n FROM {ns}.a GROUP BY k),"
        " sb AS (SELECT k, COUNT(name) AS m FROM {ns}.b GROUP BY k)"
        " SELECT sa.k, sa.t, sa.n, sb.m, RANK() OVER (ORDER BY sa.t DESC NULLS LAST) AS r"
        " FROM sa LEFT JOIN sb ON sa.k = sb.k",
    ),
    # A CTE reading a CTE, the top a window without PARTITION BY (the second CTE reads
    # only the first's part: written back into the query over the parts, not kept).
    "cte_of_cte_windowed": (
        1,
        "WITH per AS (SELECT k, s, SUM(v) AS t FROM {ns}.a GROUP BY k, s),"
        " best AS (SELECT s, MAX(t) AS mt, COUNT(*) AS groups FROM per GROUP BY s)"
        " SELECT s, mt, groups, DENSE_RANK() OVER (ORDER BY mt DESC NULLS LAST) AS r FROM best",
    ),
    # Two aggregating derived tables joined (one of them over a join).
    "derived_tables_joined": (
        2,
        "SELECT x.k, x.t, y.names FROM"
        " (SELECT a.k, SUM(a.v) AS t FROM {ns}.a a GROUP BY a.k) x JOIN"
        " (SELECT b.k, COUNT(b.name) AS names FROM {ns}.b b JOIN {ns}.a a2 ON a2.k = b.k"
        "  GROUP BY b.k) y ON x.k = y.k",
    ),
    # No CTE: the query's own groups are the part, ranked over by the rest.
    "window_over_groups": (
        1,
        "SELECT k, SUM(v) AS t, COUNT(*) AS n,"
        " RANK() OVER (ORDER BY SUM(v) DESC NULLS LAST) AS r FROM {ns}.a GROUP BY k",
    ),
    # A grouping key not an output, HAVING over a hidden aggregate, over a join.
    "groups_key_hidden": (
        1,
        "SELECT b.name, SUM(a.v) AS t FROM {ns}.a a JOIN {ns}.b b ON a.k = b.k"
        " GROUP BY a.k, b.name HAVING COUNT(*) > 1",
    ),
    # A CTE that is a UNION ALL of two groupings: each branch a part (the union of the
    # two parts is written back into the query over them).
    "cte_union_of_groups": (
        2,
        "WITH t AS (SELECT k, SUM(v) AS x FROM {ns}.a GROUP BY k"
        " UNION ALL SELECT k, COUNT(name) FROM {ns}.b GROUP BY k)"
        " SELECT k, SUM(x) AS total, RANK() OVER (ORDER BY SUM(x) DESC NULLS LAST) AS r"
        " FROM t GROUP BY k",
    ),
    # TPC-DS q88's shape: one-row aggregates crossed, all their columns selected by *.
    "scalar_parts_crossed": (
        3,
        "SELECT * FROM (SELECT COUNT(*) AS n FROM {ns}.a WHERE v > 3) s1,"
        " (SELECT SUM(v) AS t, COUNT(k) AS nk FROM {ns}.a WHERE k = 1) s2,"
        " (SELECT COUNT(name) AS m FROM {ns}.b) s3",
    ),
    # INTERSECT of two filtered reads: the branches are parts, the set operation over them.
    "intersect_branches": (
        2,
        "SELECT k, s FROM {ns}.a WHERE v > 2 INTERSECT SELECT k, name FROM {ns}.b",
    ),
    # A part that selects * from one table.
    "star_part": (
        1,
        "WITH f AS (SELECT * FROM {ns}.a WHERE v > 1) SELECT s, COUNT(*) AS n,"
        " DENSE_RANK() OVER (ORDER BY COUNT(*) DESC) AS r FROM f GROUP BY s",
    ),
    # No CTE: a window without PARTITION BY over a join, cut off the rows it ranks.
    "window_over_join_rows": (
        1,
        "SELECT a.id, b.name, RANK() OVER (ORDER BY a.v DESC NULLS LAST) AS r"
        " FROM {ns}.a a JOIN {ns}.b b ON a.k = b.k WHERE b.name IS NOT NULL",
    ),
    # Rows of an outer join past an OFFSET (a plain top-k is the top operator's,
    # tests/test_top_k.py): the rows kept, the ORDER BY ... LIMIT ... OFFSET over them.
    "top_k_rows": (
        1,
        "SELECT a.id, a.v, b.name FROM {ns}.a a LEFT JOIN {ns}.b b ON a.k = b.k"
        " WHERE a.v IS NOT NULL ORDER BY a.v DESC, a.id LIMIT 4 OFFSET 1",
    ),
    # ROLLUP: the finest groups a part, the sets over them (a sum of sums cast back to the
    # view's decimal type).
    "rollup_sums": (
        1,
        "SELECT a.k, a.s, SUM(CAST(a.v AS DECIMAL(7, 2))) AS t, COUNT(*) AS n, MIN(a.v) AS lo,"
        " GROUPING(a.k) AS gk FROM {ns}.a a WHERE a.id > 0 GROUP BY ROLLUP (a.k, a.s)",
    ),
    # CUBE with an integer AVG: the finest groups keep its sum and count.
    "cube_averages": (
        1,
        "SELECT a.k, a.s, AVG(a.v) AS m, COUNT(a.v) AS n FROM {ns}.a a WHERE a.id > 0"
        " GROUP BY CUBE (a.k, a.s)",
    ),
    # CUBE over a join, ranked by a window over its sums (a LEFT JOIN: never empty, where
    # Spark returns no row and DuckDB a grand total).
    "cube_ranked_join": (
        1,
        "SELECT a.k, b.name, SUM(a.v) AS t, RANK() OVER (ORDER BY SUM(a.v) DESC NULLS LAST) AS r"
        " FROM {ns}.a a LEFT JOIN {ns}.b b ON a.k = b.k GROUP BY CUBE (a.k, b.name)",
    ),
    # The same derived table read twice is one part.
    "derived_table_read_twice": (
        1,
        "SELECT p.k, p.n, q.n AS n_next FROM"
        " (SELECT k, COUNT(*) AS n FROM {ns}.a GROUP BY k) p LEFT JOIN"
        " (SELECT k, COUNT(*) AS n FROM {ns}.a GROUP BY k) q ON q.k = p.k + 1"
        " WHERE p.n > (SELECT MIN(v) FROM {ns}.a)",
    ),
    # Windows partitioned by a key that is not an output, over one table as it is: the
    # rows with the key are a part the windows' rule maintains, the outputs a projection.
    "window_key_hidden": (
        1,
        "SELECT a.id, a.v, SUM(a.v) OVER (PARTITION BY a.k) AS t,"
        " COUNT(*) OVER (PARTITION BY a.k, a.s) AS n FROM {ns}.a a",
    ),
    # The same over a join and a filter, ranked within each hidden key.
    "window_key_hidden_join": (
        1,
        "SELECT a.id, b.name, RANK() OVER (PARTITION BY b.k ORDER BY a.v DESC NULLS LAST) AS r"
        " FROM {ns}.a a JOIN {ns}.b b ON a.k = b.k WHERE a.v IS NOT NULL",
    ),
    # A CTE restating a derived table (a union) column for column is that part, not a
    # second copy of its rows: parts `s` and `g`.
    "cte_restating_a_union": (
        2,
        "WITH w AS (SELECT k, v FROM (SELECT k, v FROM {ns}.a UNION ALL"
        " SELECT k, v FROM {ns}.a WHERE v > 1) AS s),"
        " g AS (SELECT w.k, SUM(w.v) AS t FROM w JOIN {ns}.b b ON w.k = b.k GROUP BY w.k)"
        " SELECT g.k, g.t, RANK() OVER (ORDER BY g.t DESC NULLS LAST) AS r FROM g",
    ),
}

#: The shapes whose query over the parts the planner maintains, and its strategy.
TOPS = {
    "scalar_parts_crossed": "linear",  # a cross join of one-row parts
    "window_key_hidden": "linear",  # a projection of the partitions' part
    "window_key_hidden_join": "linear",
    "cte_of_cte_windowed": "aggregate",  # a grouping of the groups' part, under the window
    "derived_tables_joined": "linear",  # a join of two parts
    "groups_key_hidden": "linear",  # HAVING and a projection over the groups' part
}


#: The shapes whose query over the parts the driver ticks (no Spark job).
TOP_ON_DRIVER = frozenset({"scalar_parts_crossed"})


def _ticked(
    spark: Any, config: CatalogConfig, name: str, query: str, ticks: int
) -> tuple[str, Any, Any, str]:
    """``COMPOSED[query]`` as ``<ns>.view`` after ``ticks`` ticks over changed inputs."""
    ns, catalog, inputs = _inputs_of(config, name)
    sql = COMPOSED[query][1].format(ns=ns)
    for n in range(1, ticks + 1):
        inputs.mutate(1_000 * n - 500)
        inputs.seal(1_000 * n)
        _tick(spark, config, f"{ns}.view", sql, 1_000 * n)
    return ns, catalog, inputs, sql


def _minted(config: CatalogConfig, inputs: Any, target: str, sql: str, time: int) -> Any:
    """The description of tick ``time`` of ``target``, its inputs changed and sealed first."""
    inputs.mutate(time - 500)
    inputs.seal(time)
    description = mint_view_tick(config.load(), target, sql, time).description
    assert description is not None
    return description


def _part_tables(catalog: Any, ns: str) -> list[str]:
    """The parts' tables of ``<ns>.view``, by table name (not their own state tables)."""
    return [name.split(".")[-1] for name in part_tables(catalog, f"{ns}.view")]


@pytest.mark.spark
@pytest.mark.parametrize("name", sorted(COMPOSED))
def test_a_composed_view_equals_duckdb_at_every_tick(
    spark: Any, spark_catalog_config: CatalogConfig, name: str
) -> None:
    parts, template = COMPOSED[name]
    ns, catalog, inputs = _inputs_of(spark_catalog_config, f"composed_{name}")
    sql = template.format(ns=ns)
    for n in range(1, 6):
        inputs.mutate(1_000 * n - 500, change_b=n % 2 == 1)
        inputs.seal(1_000 * n)
        report = _tick(spark, spark_catalog_config, f"{ns}.view", sql, 1_000 * n)
        got = rows_of(catalog.load_table(f"{ns}.view"))
        assert _normalized(got) == _normalized(inputs.oracle(sql)), (n, report)
        if n == 1:  # the first batch runs in full: the view's history then holds its cost
            assert report["strategy"] == "full", report
            first_schema = str(catalog.load_table(f"{ns}.view").schema())
            continue
        assert report["strategy"] == "composed", report["reason"]
        assert len(report["parts"]) == parts, report["parts"]
        # created with the view by the first tick, each part then ticks by its own plan
        assert "full" not in report["parts"].values() and not report["parts_full"], report
        if n > 3:  # and (its batches pinning the parts, a kept state built) the query over
            # the parts by its own plan, from the parts' changes
            assert report["top"] == TOPS.get(name, "full"), (n, report["top"], report["reason"])
            if name in TOP_ON_DRIVER:  # a few rows moved: joined and diffed in Arrow
                assert report.get("linear_on") == "driver", (n, report)
    assert len(_part_tables(catalog, ns)) == parts
    # The view keeps the types its query as written has (a ROLLUP's sums of sums included).
    assert str(catalog.load_table(f"{ns}.view").schema()) == first_schema


@pytest.mark.spark
def test_a_composed_batch_pins_its_parts_apart_from_its_inputs(
    spark: Any, spark_catalog_config: CatalogConfig
) -> None:
    import json

    from airflow_provider_ct.core.keys import SummaryKeys
    from airflow_provider_ct.core.timeline import Timeline

    config = spark_catalog_config
    ns, catalog, _, _ = _ticked(spark, config, "composed_pins", "derived_tables_joined", 2)
    head = Timeline.of(catalog.load_table(f"{ns}.view"))
    entry = head.entry(head.head_snapshot_id)
    # ct.inputs: what the minted description pinned (the append checked it), inputs only
    assert sorted(entry.inputs) == [f"{ns}.a", f"{ns}.b"]
    # ct.parts: each part the query over the parts read, at its snapshot for the tick
    parts = json.loads(entry.summary[SummaryKeys.PARTS])
    assert sorted(parts) == sorted(f"{ns}.{p}" for p in _part_tables(catalog, ns))
    for part, snapshot in parts.items():
        assert Timeline.of(catalog.load_table(part)).snapshot_at(2_000) == snapshot


@pytest.mark.spark
def test_a_decimal_average_over_grouping_sets_runs_as_written(
    spark: Any, spark_catalog_config: CatalogConfig
) -> None:
    # Its quotient over the finest groups would have another scale than AVG's own.
    ns, catalog, inputs = _inputs_of(spark_catalog_config, "composed_decimal_avg")
    sql = (
        f"SELECT a.k, AVG(CAST(a.v AS DECIMAL(7, 2))) AS m FROM {ns}.a a WHERE a.id > 0"
        " GROUP BY ROLLUP (a.k)"
    )
    schemas = set()
    for n in range(1, 4):
        inputs.mutate(1_000 * n - 500)
        inputs.seal(1_000 * n)
        report = _tick(spark, spark_catalog_config, f"{ns}.view", sql, 1_000 * n)
        assert report["strategy"] == "full", report
        view = catalog.load_table(f"{ns}.view")
        # Spark's decimal average against DuckDB's double, to the decimal's six places
        got = {(k, None if m is None else round(float(m), 5)) for k, m in rows_of(view)}
        want = {(k, None if m is None else round(m, 5)) for k, m in inputs.oracle(sql)}
        assert got == want, (n, report)
        schemas.add(str(view.schema()))
    assert len(schemas) == 1, schemas


@pytest.mark.spark
def test_a_retried_tick_reads_the_parts_its_first_attempt_landed(
    spark: Any, spark_catalog_config: CatalogConfig
) -> None:
    config = spark_catalog_config
    ns, catalog, inputs, sql = _ticked(spark, config, "composed_retry", "ctes_ranked", 1)
    description = _minted(config, inputs, f"{ns}.view", sql, 2_000)
    # The first attempt stages and dies before its append: its parts are at 2_000.
    first = run_write(spark, config, sql, description)
    assert first.extra["strategy"] == "composed" and len(first.extra["parts"]) == 2
    second = run_write(spark, config, sql, description).to_json()
    assert set(second["parts"].values()) == {"landed before"}, second["parts"]
    AppendOperator(task_id="append", report=second, iceberg_conn_id=CONN).execute({})
    got = rows_of(catalog.load_table(f"{ns}.view"))
    assert _normalized(got) == _normalized(inputs.oracle(sql))


@pytest.mark.spark
def test_a_part_edited_by_hand_is_corrected_not_trusted(
    spark: Any, spark_catalog_config: CatalogConfig
) -> None:
    import pyarrow as pa

    config = spark_catalog_config
    ns, catalog, inputs, sql = _ticked(spark, config, "composed_edit", "derived_tables_joined", 2)
    for part in _part_tables(catalog, ns):  # a row no input holds, in every part
        table = catalog.load_table(f"{ns}.{part}")
        bogus = {f.name: None for f in table.schema().fields} | {"k": 99}
        table.append(pa.Table.from_pylist([bogus], table.schema().as_arrow()))
    inputs.mutate(2_500)
    inputs.seal(3_000)
    report = _tick(spark, config, f"{ns}.view", sql, 3_000)
    assert report["strategy"] == "composed"
    for part in _part_tables(catalog, ns):
        assert all(row[0] != 99 for row in rows_of(catalog.load_table(f"{ns}.{part}")))
    got = rows_of(catalog.load_table(f"{ns}.view"))
    assert _normalized(got) == _normalized(inputs.oracle(sql))


def test_the_split_keeps_parts_with_named_columns_and_says_why_not() -> None:
    why = {
        "SELECT r FROM (SELECT a.*, b.*, 1 AS r FROM ns.a a JOIN ns.b b ON a.k = b.k) t": (
            "selects * beside a join"
        ),
        "SELECT x FROM (SELECT k + 1, SUM(v) AS x FROM ns.a GROUP BY k + 1) t": "without a name",
        "SELECT t.k FROM (SELECT a.k, b.k FROM ns.a a JOIN ns.b b ON a.v = b.k) t": "two outputs",
        "SELECT k, RANK() OVER (ORDER BY v) AS r FROM ns.a": "no CTE or derived table",
        # The part itself would run in full over the inputs: nothing gained.
        "SELECT k FROM (SELECT k, RANK() OVER (ORDER BY v) AS r FROM ns.a) t GROUP BY k": (
            "would be recomputed in full"
        ),
    }
    for sql, reason in why.items():
        found = compose(sql, "ns.v", "ct")
        assert isinstance(found, str) and reason in found, (sql, found)


def test_the_split_reads_ctes_of_ctes_and_leaves_predicate_subqueries_alone() -> None:
    sql = (
        "WITH per AS (SELECT k, SUM(v) AS t FROM ns.a GROUP BY k),"
        " top AS (SELECT MAX(t) AS mt FROM per)"
        " SELECT per.k, per.t, RANK() OVER (ORDER BY per.t) AS r FROM per, top"
        " WHERE per.t = top.mt AND per.k IN (SELECT k FROM (SELECT k FROM ns.b) AS inner_b)"
    )
    found = compose(sql, "ns.v", "ct")
    assert isinstance(found, Composition), found
    # The window is cut off the rows it ranks, which read both CTEs' parts (and ``ns.b``).
    per, top, rows = found.parts
    assert (per.label, top.label, rows.label) == ("per", "top", "the rows of the query")
    assert top.sql == f"SELECT MAX(t) AS mt FROM {per.table} AS per", top.sql
    assert f"{per.table} AS per" in rows.sql and f"{top.table} AS top" in rows.sql, rows.sql
    assert "inner_b" in rows.sql  # IN's derived table stays where it was
    assert not any("WITH" in q for q in (found.sql, per.sql, top.sql, rows.sql))
    assert f"FROM {rows.table} AS __ct_rows" in found.sql, found.sql
    assert all(p.table.startswith(f"ns.v{PART_TABLE_INFIX}") for p in found.parts)


def test_a_target_named_like_a_part_is_refused() -> None:
    with pytest.raises(QueryError, match=PART_TABLE_INFIX):
        check_target_name(f"ns.v{PART_TABLE_INFIX}0123456789ab")


@pytest.mark.spark
def test_the_parts_are_maintained_with_their_view(
    spark: Any, spark_catalog_config: CatalogConfig
) -> None:
    """Compaction, expiry and the sweep of a view reach its parts; the view ticks on exact."""
    config = spark_catalog_config
    ns, catalog, inputs, sql = _ticked(
        spark, config, "composed_maintained", "cte_of_cte_windowed", 3
    )
    parts = [f"{ns}.{p}" for p in _part_tables(catalog, ns)]
    report = maintain(
        catalog, [f"{ns}.view"], MaintenanceSettings(retention_ms=0, sweep_grace_ms=0)
    )
    assert not report.errors, report.errors
    expired = {r.table: r for r in report.expiry}
    assert set(expired) == {f"{ns}.view", *parts}
    for part in parts:
        assert expired[part].status == "expired", expired[part]
        assert len(catalog.load_table(part).metadata.snapshots) < 3
    inputs.mutate(3_500)
    inputs.seal(4_000)
    assert _tick(spark, config, f"{ns}.view", sql, 4_000)["strategy"] == "composed"
    got = rows_of(catalog.load_table(f"{ns}.view"))
    assert _normalized(got) == _normalized(inputs.oracle(sql))


def test_a_grouped_select_splits_into_its_groups_and_the_rest_over_them() -> None:
    from sqlglot import parse_one

    from airflow_provider_ct.ivm.plan.aggregate_split import split_groups

    sql = (
        "SELECT t1.s, SUM(v) + 1 AS t, RANK() OVER (ORDER BY SUM(v)) AS r FROM ns.a AS t1"
        " GROUP BY k, t1.s HAVING COUNT(*) > 1 ORDER BY t LIMIT 3"
    )
    found = split_groups(parse_one(sql, read="spark"))
    assert found is not None
    groups, rest = (q.sql(dialect="spark") for q in found)
    assert groups == (
        "SELECT k AS __ct_g0, t1.s AS __ct_g1, SUM(v) AS __ct_a0, COUNT(*) AS __ct_a1"
        " FROM ns.a AS t1 GROUP BY k, t1.s"
    )
    assert rest == (
        "SELECT __ct_g1 AS s, __ct_a0 + 1 AS t, RANK() OVER (ORDER BY __ct_a0) AS r"
        " FROM __ct_groups WHERE __ct_a1 > 1 ORDER BY t LIMIT 3"
    )
    refused = [
        "SELECT k, SUM(v) AS t FROM ns.a GROUP BY k HAVING t > 1",  # WHERE cannot read t
        "SELECT k, SUM(v) + 1 FROM ns.a GROUP BY k",  # Spark would name it after its text
        "SELECT k, SUM(v) AS t FROM ns.a GROUP BY ROLLUP (k)",
        "SELECT k, v FROM ns.a GROUP BY k",  # v is neither a key nor aggregated
        "SELECT k, SUM(v) AS t, RANK() OVER (ORDER BY SUM(v)) AS r FROM ns.a GROUP BY 1",
        "SELECT k + 1 AS kk, SUM(v) AS t FROM ns.a GROUP BY kk ORDER BY t",  # an output's alias
    ]
    for sql in refused:
        assert split_groups(parse_one(sql, read="spark")) is None, sql


def test_explain_says_the_parts_and_their_strategies() -> None:
    from airflow_provider_ct.views import explain_view

    sql = COMPOSED["ctes_ranked"][1].format(ns="ns")
    lines = explain_view(sql, target="ns.v")
    assert lines[0] == "strategy: composed", lines
    assert any(line.strip().startswith("sa -> ns.v__ct_part_") for line in lines), lines
    assert lines[-1].startswith("the query over the parts, recomputed in full over them ("), lines
    joined = explain_view(COMPOSED["derived_tables_joined"][1].format(ns="ns"), target="ns.v")
    assert "the query over the parts, from their changes: linear" in joined, joined
    alone = explain_view("SELECT k, RANK() OVER (ORDER BY v) AS r FROM ns.a", target="ns.v")
    assert alone[0] == "strategy: full" and "no CTE or derived table" in alone[-1], alone
    assert explain_view(sql, target="ns.v", refresh="full")[0] == "strategy: full"


@pytest.mark.spark
def test_a_part_a_later_tick_moved_on_is_not_read_for_an_earlier_time(
    spark: Any, spark_catalog_config: CatalogConfig
) -> None:
    """Two ticks race: the later one lands its parts first; the earlier runs as written."""
    config = spark_catalog_config
    ns, catalog, inputs, sql = _ticked(spark, config, "composed_race", "ctes_ranked", 2)
    early = _minted(config, inputs, f"{ns}.view", sql, 3_000)
    at_three = (inputs.a[:], inputs.b[:])
    late = _minted(config, inputs, f"{ns}.view", sql, 4_000)
    # The tick for 4_000 stages first: its parts are at 4_000 now (its append comes later).
    assert run_write(spark, config, sql, late).extra["strategy"] == "composed"
    report = run_write(spark, config, sql, early).to_json()
    assert report["strategy"] == "full", report  # its parts reflect 4_000's inputs, not 3_000's
    AppendOperator(task_id="append", report=report, iceberg_conn_id=CONN).execute({})
    inputs.a, inputs.b = at_three
    got = rows_of(catalog.load_table(f"{ns}.view"))
    assert _normalized(got) == _normalized(inputs.oracle(sql))


@pytest.mark.parametrize(("composed_ms", "runs_composed"), [(900, False), (50, True)])
def test_the_view_history_judges_composed_ticks_against_its_full_ones(
    sqlite_catalog_config: CatalogConfig,
    monkeypatch: pytest.MonkeyPatch,
    composed_ms: int,
    runs_composed: bool,
) -> None:
    """A full batch took 100 ms; two composed ones took ``composed_ms`` each, over as many rows."""
    import pyarrow as pa

    from airflow_provider_ct.core.keys import SummaryKeys
    from airflow_provider_ct.core.mint import describe
    from airflow_provider_ct.core.query import query_hash
    from airflow_provider_ct.core.tables import create_managed_table
    from airflow_provider_ct.core.timeline import Timeline
    from airflow_provider_ct.spark.composed import _why_not_now
    from tests.helpers import append_between

    monkeypatch.setenv("CT_RETRY_INCREMENTAL_AFTER", "8")
    catalog = sqlite_catalog_config.load()
    inputs = create_managed_table(catalog, "hist.a", pa.schema([("k", pa.int64())]))
    inputs.append(pa.table({"k": [1, 2, 3]}))
    sql = COMPOSED["window_over_groups"][1].format(ns="hist")
    target = create_managed_table(catalog, "hist.view", pa.schema([("k", pa.int64())]))
    batches = [("full", 100), ("composed", composed_ms), ("composed", composed_ms)]
    for n, (refresh, ms) in enumerate(batches):
        summary = {
            SummaryKeys.QUERY_HASH: query_hash(sql),
            SummaryKeys.REFRESH: refresh,
            SummaryKeys.COMPUTE_MS: str(ms),
            SummaryKeys.INPUT_ROWS: "3",
        }
        append_between(
            target, n * 1_000, (n + 1) * 1_000, f"b{n}", time=n * 1_000 + 500, extra_summary=summary
        )
    target = catalog.load_table("hist.view")
    pins = {"hist.a": Timeline.of(catalog.load_table("hist.a")).head_snapshot_id}
    desc = describe("hist.view", Timeline.of(target), 3_500, pins)
    why = _why_not_now(sqlite_catalog_config, sql, desc, target, dry_run=False)
    assert (why == "") is runs_composed, why
    if not runs_composed:
        assert "median 900 ms" in why, why


def _check_split(split: Any, sql: str, below: str, rest: str, refused: list[str]) -> None:
    """``split`` cuts ``sql`` into ``below`` and ``rest`` (Spark SQL) and refuses each of
    ``refused``."""
    found = split(parse_one(sql, read="spark"))
    assert found is not None, sql
    assert [q.sql(dialect="spark") for q in found] == [below, rest]
    for other in refused:
        assert split(parse_one(other, read="spark")) is None, other


def test_the_rows_split_cuts_windows_and_limits_off_the_rows_they_read() -> None:
    from airflow_provider_ct.ivm.plan.rows_split import split_rows

    _check_split(
        split_rows,
        "SELECT t.id, u.name AS who, SUM(t.v) OVER (PARTITION BY u.name) AS s FROM ns.a t"
        " JOIN ns.b u ON t.k = u.k WHERE t.v > 0 ORDER BY who, t.id LIMIT 3",
        "SELECT t.id AS __ct_c0, u.name AS __ct_c1, t.v AS __ct_c2 FROM ns.a AS t"
        " JOIN ns.b AS u ON t.k = u.k WHERE t.v > 0",
        "SELECT __ct_c0 AS id, __ct_c1 AS who, SUM(__ct_c2) OVER (PARTITION BY __ct_c1) AS s"
        " FROM __ct_rows ORDER BY who, __ct_c0 LIMIT 3",
        [
            "SELECT k, SUM(v) OVER () AS s FROM ns.a",  # the rows would copy the input
            "SELECT a.k FROM ns.a a JOIN ns.b b ON a.k = b.k LIMIT 3",  # 3 of Spark's choice
            "SELECT a.k, SUM(a.v) AS s FROM ns.a a WHERE a.v > 0 GROUP BY a.k",  # groups split's
            "SELECT a.*, RANK() OVER (ORDER BY a.v) AS r FROM ns.a a WHERE a.v > 0",
            "SELECT a.k + 1, RANK() OVER (ORDER BY a.v) AS r FROM ns.a a WHERE a.v > 0",
            "SELECT a.k FROM ns.a a JOIN ns.b b ON a.k = b.k",  # nothing to cut below
        ],
    )
    # COUNT(*) in a window reads no column of the rows: a call, not a star of the select
    _check_split(
        split_rows,
        "SELECT a.k, COUNT(*) OVER (PARTITION BY a.s) AS n FROM ns.a a WHERE a.v > 0",
        "SELECT a.k AS __ct_c0, a.s AS __ct_c1 FROM ns.a AS a WHERE a.v > 0",
        "SELECT __ct_c0 AS k, COUNT(*) OVER (PARTITION BY __ct_c1) AS n FROM __ct_rows",
        [],
    )


def test_the_partitions_split_adds_the_hidden_keys_and_projects_them_away() -> None:
    from airflow_provider_ct.ivm.plan.partitions_split import split_partitions

    _check_split(
        split_partitions,
        "SELECT a.id, SUM(a.v) OVER (PARTITION BY a.k, a.s ORDER BY a.id) AS t,"
        " COUNT(*) OVER (PARTITION BY a.s, a.k) AS n, a.s FROM ns.a a WHERE a.v > 0",
        "SELECT a.id, SUM(a.v) OVER (PARTITION BY a.k, a.s ORDER BY a.id) AS t,"
        " COUNT(*) OVER (PARTITION BY a.s, a.k) AS n, a.s, a.k AS __ct_p0 FROM ns.a AS a"
        " WHERE a.v > 0",
        "SELECT `id`, `t`, `n`, `s` FROM __ct_partitions",
        [
            "SELECT a.k, SUM(a.v) OVER (PARTITION BY a.k) AS t FROM ns.a a",  # key an output
            "SELECT a.id, SUM(a.v) OVER () AS t FROM ns.a a",  # no key
            "SELECT a.id, SUM(a.v) OVER (PARTITION BY a.k) AS t FROM ns.a a LIMIT 3",
            "SELECT DISTINCT a.id, SUM(a.v) OVER (PARTITION BY a.k) AS t FROM ns.a a",
            "SELECT a.id + 1, SUM(a.v) OVER (PARTITION BY a.k) AS t FROM ns.a a",  # no name
            "SELECT a.id, a.id, SUM(a.v) OVER (PARTITION BY a.k) AS t FROM ns.a a",  # two ids
            "SELECT a.*, SUM(a.v) OVER (PARTITION BY a.k) AS t FROM ns.a a",
            "SELECT a.s, SUM(a.v) AS t FROM ns.a a GROUP BY a.s, a.k",  # the groups split's
        ],
    )


def test_grouping_sets_split_into_their_finest_groups_and_the_sets_over_them() -> None:
    from airflow_provider_ct.ivm.plan.grouping_sets_split import split_grouping_sets

    _check_split(
        split_grouping_sets,
        "SELECT a.k, a.s, SUM(a.v) AS t, COUNT(*) AS n, GROUPING(a.k) AS g FROM ns.a a"
        " WHERE a.v > 0 GROUP BY ROLLUP (a.k, a.s) HAVING SUM(a.v) > 1",
        "SELECT a.k AS __ct_g0, a.s AS __ct_g1, SUM(a.v) AS __ct_a0, COUNT(*) AS __ct_a1"
        " FROM ns.a AS a WHERE a.v > 0 GROUP BY a.k, a.s",
        "SELECT __ct_g0 AS k, __ct_g1 AS s, SUM(__ct_a0) AS t, SUM(__ct_a1) AS n,"
        " GROUPING(__ct_g0) AS g FROM __ct_sets GROUP BY ROLLUP (__ct_g0, __ct_g1)"
        " HAVING SUM(__ct_a0) > 1",
        [  # a coarser group's value is not one of its finer groups' values
            "SELECT k, STDDEV(v) AS m FROM ns.a GROUP BY ROLLUP (k)",
            "SELECT k, COUNT(DISTINCT v) AS m FROM ns.a GROUP BY CUBE (k, s)",
            "SELECT k, SUM(v) AS m FROM ns.a GROUP BY k",  # no sets: the groups split's
            "SELECT k, SUM(v) AS m FROM ns.a GROUP BY ROLLUP (1)",
        ],
    )


def test_the_query_over_the_parts_is_cast_back_only_to_a_sum_of_sums() -> None:
    from types import SimpleNamespace

    from pyiceberg.schema import Schema
    from pyiceberg.types import DecimalType, NestedField
    from pyspark.sql import types as T

    from airflow_provider_ct.core.query import parse_query
    from airflow_provider_ct.exceptions import CompositionError
    from airflow_provider_ct.spark.composed import ComposedQuery, fitted_to_view

    sql = "SELECT k, SUM(CAST(v AS DECIMAL(7, 2))) AS t FROM ns.a GROUP BY ROLLUP (k)"
    composition = compose(sql, "ns.v", "ct")
    assert isinstance(composition, Composition), composition
    composed = ComposedQuery(composition, parse_query(composition.sql, catalog_name="ct"), {}, {})
    view = SimpleNamespace(  # the view's table as PyIceberg describes it: t is SUM's type
        schema=lambda: Schema(NestedField(1, "t", DecimalType(17, 2), required=False))
    )

    def fit(spark_type: Any) -> Any:
        return fitted_to_view(composed, T.StructType([T.StructField("t", spark_type)]), view)

    assert fit(T.DecimalType(17, 2)) is None  # the view's own type: nothing to cast
    fitted = fit(T.DecimalType(27, 2))  # a SUM of SUMs: ten more digits, the same sums
    assert fitted is not None and "CAST(`t` AS DECIMAL(17, 2))" in fitted.parsed.sql
    for other in (T.DecimalType(29, 2), T.DecimalType(21, 6), T.DoubleType()):
        # a widened input, an average's scale, a double: the tick runs as written
        with pytest.raises(CompositionError):
            fit(other)
