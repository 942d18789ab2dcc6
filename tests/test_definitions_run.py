"""What parse accepts runs on every tick: CTEs are the query's names, targets typed exactly.

Each view is ticked under the default refresh (``auto``) over inputs the test
changes at random, and after every tick equals DuckDB over the same rows.
"""

from __future__ import annotations

import datetime
from collections import Counter
from decimal import Decimal
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from airflow_provider_ct.core.catalog import CatalogConfig
from airflow_provider_ct.core.tables import create_managed_table
from airflow_provider_ct.exceptions import QueryError
from tests.conftest import connection_json
from tests.helpers import advance, rows_of
from tests.test_incremental import _inputs_of, _normalized, _tick

#: CTEs in every form a user writes them (TPC-DS q51, q77, q78, q97's shapes).
CTES = {
    # A CTE joined by another CTE (q51/q97): ss LEFT JOIN ws.
    "cte_joined_to_cte": (
        "WITH ws AS (SELECT k, SUM(v) AS wv FROM {ns}.a WHERE s = 'x' GROUP BY k),"
        " ss AS (SELECT k, SUM(v) AS sv FROM {ns}.a WHERE s = 'y' GROUP BY k)"
        " SELECT ss.k, ss.sv, ws.wv FROM ss LEFT JOIN ws ON ss.k = ws.k"
    ),
    # A CTE reading a CTE.
    "cte_reads_cte": (
        "WITH base AS (SELECT a.k, a.v, b.name FROM {ns}.a a JOIN {ns}.b b ON a.k = b.k),"
        " agg AS (SELECT name, COUNT(*) AS n, SUM(v) AS t FROM base GROUP BY name)"
        " SELECT name, n, t FROM agg WHERE n > 0"
    ),
    # One CTE read twice.
    "cte_read_twice": (
        "WITH per_k AS (SELECT k, COUNT(*) AS n FROM {ns}.a GROUP BY k)"
        " SELECT p1.k, p1.n, p2.n AS n2 FROM per_k p1 JOIN per_k p2 ON p1.k = p2.k + 1"
    ),
    # A CTE inside a derived table (q77's per-channel CTEs under a UNION ALL).
    "cte_in_union": (
        "WITH sa AS (SELECT k, SUM(v) AS t FROM {ns}.a GROUP BY k),"
        " sb AS (SELECT k, COUNT(*) AS n FROM {ns}.b GROUP BY k)"
        " SELECT 'a' AS side, k, t FROM sa UNION ALL SELECT 'b' AS side, k, n FROM sb"
    ),
    # A full outer join of two CTEs (q78's and q97's shape).
    "cte_full_join": (
        "WITH sa AS (SELECT k, COUNT(*) AS n FROM {ns}.a GROUP BY k),"
        " sb AS (SELECT k, COUNT(*) AS m FROM {ns}.b GROUP BY k)"
        " SELECT sa.k AS ka, sb.k AS kb, sa.n, sb.m FROM sa FULL OUTER JOIN sb ON sa.k = sb.k"
    ),
}


def _ticks(
    spark: Any, config: CatalogConfig, name: str, template: str, refresh: str = "auto"
) -> list[dict[str, Any]]:
    """Three ticks of ``<ns>.view`` after random changes; each equals DuckDB's; their reports."""
    ns, catalog, inputs = _inputs_of(config, name)
    sql, reports = template.format(ns=ns), []
    for n in range(1, 4):
        inputs.mutate(1_000 * n - 500, change_b=n % 2 == 1)
        inputs.seal(1_000 * n)
        reports.append(_tick(spark, config, f"{ns}.view", sql, 1_000 * n, refresh=refresh))
        got = rows_of(catalog.load_table(f"{ns}.view"))
        assert _normalized(got) == _normalized(inputs.oracle(sql)), (n, reports[-1])
    return reports


@pytest.mark.spark
@pytest.mark.parametrize("name", sorted(CTES))
def test_ctes_are_names_of_the_query_never_catalog_tables(
    spark: Any, spark_catalog_config: CatalogConfig, name: str
) -> None:
    _ticks(spark, spark_catalog_config, name, CTES[name])


#: Types Spark produces that Iceberg stores otherwise (tinyint, smallint) or exactly.
TYPED = {
    # TPC-DS q70, q86: GROUPING() is tinyint in Spark, GROUPING_ID() bigint.
    "grouping_rollup": (
        "SELECT k, s, GROUPING(k) + GROUPING(s) AS lochierarchy, GROUPING_ID(k, s) AS gid,"
        " SUM(v) AS t FROM {ns}.a GROUP BY ROLLUP(k, s)"
    ),
}


@pytest.mark.spark
@pytest.mark.parametrize("refresh", ["auto", "full"])
@pytest.mark.parametrize("name", sorted(TYPED))
def test_a_target_the_product_created_takes_every_tick(
    spark: Any, spark_catalog_config: CatalogConfig, name: str, refresh: str
) -> None:
    _ticks(spark, spark_catalog_config, f"{name}_{refresh}", TYPED[name], refresh=refresh)


#: Every kind of type Spark produces, each column computed from ``a``'s row.
TYPES_SQL = (
    "SELECT id, CAST(k AS TINYINT) AS t8, CAST(k AS SMALLINT) AS t16,"
    " CAST(v AS DECIMAL(3, 1)) AS d3, CAST(v AS DECIMAL(18, 4)) AS d18,"
    " CAST(v AS DECIMAL(38, 10)) AS d38, DATE_ADD(DATE'2024-01-01', CAST(v AS INT)) AS day,"
    " TIMESTAMP_MILLIS(id * 1000) AS ts, CAST(TIMESTAMP_MILLIS(id * 1000) AS TIMESTAMP_NTZ) AS ntz,"
    " ARRAY(CAST(k AS SMALLINT), CAST(v AS SMALLINT)) AS arr, MAP('k', CAST(k AS TINYINT)) AS m,"
    " NAMED_STRUCT('k', CAST(k AS TINYINT), 's', s) AS st, CAST(s AS VARCHAR(3)) AS vc"
    " FROM {ns}.a"
)
#: The Iceberg type each column must be stored as.
STORED_TYPES = {
    "id": "long",
    "t8": "int",
    "t16": "int",
    "d3": "decimal(3, 1)",
    "d18": "decimal(18, 4)",
    "d38": "decimal(38, 10)",
    "day": "date",
    "ts": "timestamptz",
    "ntz": "timestamp",
    "arr": "list<int>",
    "m": "map<string, int>",
    "st": "struct<",
    "vc": "string",
}


def _typed_row(row: tuple[Any, ...]) -> tuple[Any, ...]:
    """The Python model of :data:`TYPES_SQL` for one row of ``a`` (as PyIceberg reads it)."""
    ident, k, v, s = row
    stamp = datetime.datetime.fromtimestamp(ident, tz=datetime.UTC)

    def dec(q: str) -> Decimal | None:
        return None if v is None else Decimal(v).quantize(Decimal(q))

    return (
        ident, k, k, dec("0.1"), dec("0.0001"), dec("0.0000000001"),
        None if v is None else datetime.date(2024, 1, 1) + datetime.timedelta(days=v),
        stamp, stamp.replace(tzinfo=None), (k, v), (("k", k),), (("k", k), ("s", s)), s,
    )  # fmt: skip


def _frozen(value: Any) -> Any:
    """A PyIceberg value made hashable: lists and maps as tuples, structs as item tuples."""
    if isinstance(value, dict):
        return tuple((key, _frozen(v)) for key, v in value.items())
    if isinstance(value, list):
        return tuple(_frozen(v) for v in value)
    return value


@pytest.mark.spark
@pytest.mark.parametrize("refresh", ["auto", "full"])
def test_a_target_is_typed_as_the_query_for_every_type_spark_produces(
    spark: Any, spark_catalog_config: CatalogConfig, refresh: str
) -> None:
    ns, catalog, inputs = _inputs_of(spark_catalog_config, f"types_{refresh}")
    inputs.a_t.schema()  # the inputs exist before the first tick
    sql = TYPES_SQL.format(ns=ns)
    for n in range(1, 4):
        inputs.mutate(1_000 * n - 500)
        inputs.seal(1_000 * n)
        _tick(spark, spark_catalog_config, f"{ns}.view", sql, 1_000 * n, refresh=refresh)
        table = catalog.load_table(f"{ns}.view")
        arrow = table.scan().to_arrow()
        got = Counter(
            tuple(_frozen(v) for v in row)
            for row in zip(*(arrow.column(c).to_pylist() for c in arrow.column_names), strict=True)
        )
        assert got == Counter(_typed_row(r) for r in inputs.a), n
    stored = {f.name: str(f.field_type) for f in table.schema().fields}
    assert stored.keys() == STORED_TYPES.keys()
    for name, kind in STORED_TYPES.items():
        assert stored[name].startswith(kind), (name, stored[name])


# -- the dry run: what would fail every tick fails before the first ----------------------------
PIPELINE_SPEC = (
    "name: shop\ndatabase: dry\nlibraries:\n  - glob:\n      include: transformations/**\n"
)
#: A folder with each of issue 59's forms: a CTE joined to a CTE, a ROLLUP's GROUPING()
#: columns, a streaming table and a view over it (analysed before either exists), and a
#: retention task comparing mz_now() with an epoch-ms operand over a timestamp column.
PIPELINE_SQL = """
CREATE MATERIALIZED VIEW per_kind AS
WITH big AS (SELECT kind, SUM(v) AS t FROM events WHERE v > 2 GROUP BY kind),
     small AS (SELECT kind, COUNT(*) AS n FROM events WHERE v <= 2 GROUP BY kind)
SELECT big.kind, big.t, small.n FROM big LEFT JOIN small ON big.kind = small.kind;
CREATE MATERIALIZED VIEW rolled AS
SELECT kind, v, GROUPING(kind) + GROUPING(v) AS lochierarchy, COUNT(*) AS n
FROM events GROUP BY ROLLUP(kind, v);
CREATE STREAMING TABLE cleaned AS SELECT kind, v * 2 AS v2 FROM STREAM(events) WHERE v > 0;
CREATE MATERIALIZED VIEW over_cleaned AS SELECT kind, SUM(v2) AS t FROM cleaned GROUP BY kind;
CREATE CONTINUAL TASK recent FROM RETAIN events WHILE (unix_millis(ts) + 2000 > mz_now());
"""
EVENTS = pa.schema([("kind", pa.string()), ("v", pa.int64()), ("ts", pa.timestamp("us", tz="UTC"))])


@pytest.fixture
def dry_lake(
    airflow_db: None, spark_catalog_config: CatalogConfig, monkeypatch: pytest.MonkeyPatch
) -> Any:
    """The session's Spark catalog as the default connection, with ``dry.events``."""
    monkeypatch.setenv(
        "AIRFLOW_CONN_ICEBERG_CATALOG_DEFAULT", connection_json(spark_catalog_config)
    )
    catalog = spark_catalog_config.load()
    if not catalog.table_exists("dry.events"):
        advance(create_managed_table(catalog, "dry.events", EVENTS), 5_000)
    return catalog


def _folder(tmp_path: Path, sql: str) -> Path:
    root = tmp_path / "shop"
    (root / "transformations").mkdir(parents=True)
    (root / "spark-pipeline.yml").write_text(PIPELINE_SPEC)
    (root / "transformations" / "all.sql").write_text(sql.lstrip("\n"))
    return root


@pytest.mark.spark
@pytest.mark.airflow
def test_the_dry_run_analyses_every_dataset_with_spark_and_creates_nothing(
    tmp_path: Path, spark: Any, dry_lake: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    from airflow_provider_ct.pipelines.cli import main

    tables = {t for ns in dry_lake.list_namespaces() for t in dry_lake.list_tables(ns)}
    assert main(["dry-run", str(_folder(tmp_path, PIPELINE_SQL))], spark=spark) == 0
    out = capsys.readouterr().out
    sections = {s.split()[0]: s for s in out.split("\n\n")[1:]}
    assert (
        "spark: analysed; the table's columns: kind string, t bigint, n bigint"
        in (sections["dry.per_kind"])
    )
    assert "lochierarchy int, n bigint" in sections["dry.rolled"]  # Spark's tinyint, stored
    assert "columns: kind string, v2 bigint" in sections["dry.cleaned"]
    assert "columns: kind string, t bigint" in sections["dry.over_cleaned"]  # over a bound one
    assert "spark: analysed" in sections["dry.recent"]
    assert {t for ns in dry_lake.list_namespaces() for t in dry_lake.list_tables(ns)} == tables
    # SDP's init project: a Python dataset (spark.range) and a SQL view over it.
    init = Path(__file__).parent / "pipelines" / "sdp_init"
    assert main(["dry-run", str(init)], spark=spark) == 0
    out = capsys.readouterr().out
    assert out.count("spark: analysed; the table's columns: id bigint") == 2, out


@pytest.mark.spark
@pytest.mark.airflow
def test_a_definition_every_tick_would_refuse_fails_the_dry_run_with_the_ticks_words(
    tmp_path: Path, spark: Any, spark_catalog_config: CatalogConfig, dry_lake: Any,
    capsys: pytest.CaptureFixture[str],
) -> None:  # fmt: skip
    from airflow_provider_ct.pipelines.cli import main

    sql = "CREATE MATERIALIZED VIEW untyped AS\nSELECT kind, NULL AS nothing FROM events;\n"
    assert main(["dry-run", str(_folder(tmp_path, sql))], spark=spark) == 1
    err = capsys.readouterr().err
    words = "column nothing is of type void, which an Iceberg table cannot store"
    assert "shop/transformations/all.sql:1: dry.untyped: " in err and words in err
    with pytest.raises(QueryError, match=words):  # the tick's own refusal
        _tick(spark, spark_catalog_config, "dry.untyped", "SELECT kind, NULL AS nothing"
              " FROM dry.events", 1_000)  # fmt: skip
    assert not dry_lake.table_exists("dry.untyped")


@pytest.mark.spark
def test_mz_now_is_typed_over_the_ctes_its_operand_reads(spark: Any) -> None:
    """The operand's probe carries the statement's WITH: a CTE's column is typed too."""
    import sqlglot

    from airflow_provider_ct.core.continual_now import now_calls
    from airflow_provider_ct.spark.continual_checks import operand_kind

    spark.createDataFrame([], "ts timestamp, n bigint").createOrReplaceTempView("__ct_probe_in")
    sql = (
        "WITH w AS (SELECT ts, unix_millis(ts) AS ms FROM __ct_probe_in) "
        "SELECT * FROM w WHERE w.ms + 10 > mz_now() AND w.ts > mz_now()"
    )
    tree = sqlglot.parse_one(sql, read="spark")
    kinds = [operand_kind(spark, call.parent.this) for call in now_calls(tree)]
    assert kinds == ["other", "temporal"]
    # In a grouped select: WHERE is typed before the grouping, HAVING after it.
    grouped = sqlglot.parse_one(
        "SELECT n, MAX(ts) FROM __ct_probe_in WHERE ts > mz_now() GROUP BY n"
        " HAVING MAX(unix_millis(ts)) > mz_now()",
        read="spark",
    )
    kinds = [operand_kind(spark, call.parent.this) for call in now_calls(grouped)]
    assert kinds == ["temporal", "other"]


#: Found by the generator's long run (seed 5858, queries 227 and 333): COUNT(*) alone over
#: one table, in place on the driver, failed every tick after the first (no node to type).
FOUND = {
    "count_star_twice": "SELECT COUNT(*) AS a0, COUNT(*) AS a1 FROM {ns}.b AS t1",
    "count_star_anti_join": (
        "SELECT COUNT(*) AS a0 FROM {ns}.b AS t1"
        " WHERE NOT EXISTS (SELECT 1 FROM {ns}.a AS t2 WHERE t2.id = t1.k)"
    ),
}


@pytest.mark.spark
@pytest.mark.parametrize("name", sorted(FOUND))
def test_views_the_generator_found_tick_exactly(
    spark: Any, spark_catalog_config: CatalogConfig, name: str
) -> None:
    _ticks(spark, spark_catalog_config, name, FOUND[name])
