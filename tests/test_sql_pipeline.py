"""A folder of SQL files as a pipeline: reading, the graph, refusals, selection, the DAG's shape.

No Spark: the folder is read and resolved against a real (SQLite) catalog,
and the DAG is built, not run (tests/test_sql_pipeline_ticks.py runs one).
Every bad folder is refused naming its file, its line and the problem, and
leaves the catalog and the warehouse as they were.
"""

from __future__ import annotations

import textwrap
import time
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from airflow_provider_ct.core.catalog import CatalogConfig
from airflow_provider_ct.exceptions import PipelineError
from airflow_provider_ct.pipelines.graph import build_pipeline
from airflow_provider_ct.pipelines.resolve import resolve
from airflow_provider_ct.pipelines.selection import select
from airflow_provider_ct.pipelines.spec import load_spec

pytestmark = [pytest.mark.airflow]

#: A Python file's header, as SDP's init writes it (four lines).
PY = (
    "from pyspark import pipelines as dp\nfrom pyspark.sql import SparkSession\n\n"
    "spark = SparkSession.active()\n"
)
SPEC = "name: shop\ndatabase: shop\nlibraries:\n  - glob:\n      include: transformations/**\n"
INPUTS = {
    "shop.raw": {"id": "BIGINT", "customer": "BIGINT", "amount": "BIGINT", "ts": "TIMESTAMP"},
    "shop.customers": {"customer": "BIGINT", "region": "STRING"},
}


def folder(tmp_path: Path, files: dict[str, str], spec: str = SPEC) -> Path:
    root = tmp_path / "shop"
    (root / "transformations").mkdir(parents=True)
    (root / "spark-pipeline.yml").write_text(spec)
    for name, text in files.items():
        path = root / "transformations" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        indented = text.startswith("\n ")  # a triple-quoted block: its first line is line 1
        path.write_text(textwrap.dedent(text).lstrip("\n") if indented else text)
    return root


def resolved(root: Path) -> dict[str, Any]:
    pipeline = build_pipeline(load_spec(root), "ct")
    return resolve(pipeline, INPUTS.get)


# -- reading SDP's statements ---------------------------------------------------


def test_sdp_statements_become_views_and_continual_tasks(tmp_path: Path) -> None:
    root = folder(
        tmp_path,
        {
            "a.sql": """
            -- a comment; with a semicolon
            CREATE OR REFRESH STREAMING TABLE orders (id BIGINT, customer BIGINT, amount BIGINT)
            COMMENT 'silver'
            AS SELECT id, customer, amount FROM STREAM(raw) WHERE amount > 0;
            CREATE MATERIALIZED VIEW ct.shop.by_customer
              PARTITIONED BY (customer)
              TBLPROPERTIES ('team' = 'gold')
            AS SELECT customer, SUM(amount) AS total FROM orders GROUP BY customer;
            """,
            "sub/b.sql": """
            USE SCHEMA shop;
            CREATE TEMP VIEW t1 AS SELECT o.customer, c.region FROM orders o
              JOIN customers c ON o.customer = c.customer;
            CREATE TEMPORARY VIEW t2 AS SELECT region FROM t1;
            CREATE MATERIALIZED VIEW regions (region STRING, n BIGINT) AS
            SELECT region, COUNT(*) FROM t2 GROUP BY region;
            """,
        },
    )
    items = resolved(root)
    assert list(items) == ["shop.orders", "shop.by_customer", "shop.regions"]
    orders = items["shop.orders"]
    assert orders.dataset.kind == "continual task" and orders.dataset.stream == "shop.raw"
    assert orders.columns == (("id", "BIGINT"), ("customer", "BIGINT"), ("amount", "BIGINT"))
    assert "ON INPUT shop.raw WITH (SNAPSHOT = true)" in orders.definition
    assert orders.properties == {"comment": "silver"}
    view = items["shop.by_customer"]
    assert view.partition_by == ("customer",) and view.properties == {"team": "gold"}
    assert view.sql == ("SELECT customer, SUM(amount) AS total FROM shop.orders GROUP BY customer")
    regions = items["shop.regions"]
    assert regions.dataset.via == ("shop.t1", "shop.t2")  # temporary views, inlined
    assert regions.dataset.reads == ("shop.customers", "shop.orders")
    assert "shop.t1" not in regions.sql and "JOIN shop.customers" in regions.sql
    assert regions.columns == (("region", "STRING"), ("n", "BIGINT"))


def test_one_flow_is_a_task_and_several_flows_are_a_union_of_tasks(tmp_path: Path) -> None:
    root = folder(
        tmp_path,
        {
            "flows.sql": """
            CREATE STREAMING TABLE one;
            CREATE FLOW f AS INSERT INTO one BY NAME SELECT id, amount FROM STREAM shop.raw;
            CREATE STREAMING TABLE many;
            CREATE FLOW a AS INSERT INTO many BY NAME SELECT id, amount FROM STREAM(raw);
            CREATE FLOW b AS INSERT INTO many BY NAME SELECT id, amount FROM STREAM one AS o;
            """
        },
    )
    items = resolved(root)
    assert items["shop.one"].dataset.kind == "continual task"  # STREAM without parentheses
    assert items["shop.one"].dataset.stream == "shop.raw"
    assert items["shop.many__a"].dataset.stream == "shop.raw"
    assert items["shop.many__b"].dataset.stream == "shop.one"
    many = items["shop.many"]
    assert many.dataset.kind == "materialized view"
    assert many.sql == (
        "SELECT `id`, `amount` FROM shop.many__a UNION ALL SELECT `id`, `amount` FROM shop.many__b"
    )
    assert list(items).index("shop.one") < list(items).index("shop.many__b")


def test_a_continual_task_in_materializes_syntax_joins_the_graph(tmp_path: Path) -> None:
    root = folder(
        tmp_path,
        {
            "ct.sql": """
            CREATE CONTINUAL TASK latest (id BIGINT, amount BIGINT) ON INPUT raw AS (
                DELETE FROM latest WHERE id IN (SELECT id FROM raw);
                INSERT INTO latest SELECT id, amount FROM raw;
            );
            CREATE MATERIALIZED VIEW total AS SELECT SUM(amount) AS s, COUNT(*) AS n FROM latest;
            """
        },
    )
    items = resolved(root)
    assert list(items) == ["shop.latest", "shop.total"]
    assert items["shop.latest"].definition.startswith("CREATE CONTINUAL TASK latest")


# -- refusals: file, line, problem -------------------------------------------------

BAD = {
    "syntax": (
        {"x.sql": "CREATE MATERIALIZED VIEW a AS\nSELECT id,\nFROM raw WHERE (;\n"},
        "x.sql",
        3,
        "syntax error",
    ),
    "unknown table": (
        {"x.sql": "-- gold\nCREATE MATERIALIZED VIEW a AS\nSELECT id\nFROM shop.nope;\n"},
        "x.sql",
        4,
        "unknown table shop.nope",
    ),
    "two datasets, one name": (
        {
            "x.sql": "CREATE MATERIALIZED VIEW a AS SELECT id FROM raw;\n",
            "y.sql": "\n\nCREATE MATERIALIZED VIEW shop.a AS SELECT id FROM raw;\n",
        },
        "y.sql",
        3,
        "shop.a is defined twice: here and at shop/transformations/x.sql:1",
    ),
    "cycle": (
        {
            "x.sql": "CREATE MATERIALIZED VIEW a AS SELECT id FROM b;\n"
            "CREATE TEMPORARY VIEW v AS SELECT id FROM a;\n"
            "CREATE MATERIALIZED VIEW b AS SELECT id FROM v;\n"
        },
        "x.sql",
        1,
        "cycle: shop.a -> shop.b -> shop.v -> shop.a",
    ),
    "create table": (
        {
            "x.sql": "CREATE MATERIALIZED VIEW a AS SELECT id FROM raw;\n\n"
            "CREATE TABLE t (id INT);\n"
        },
        "x.sql",
        3,
        "CREATE TABLE is not supported",
    ),
    "plain view": (
        {"x.sql": "CREATE OR REPLACE VIEW v AS SELECT id FROM raw;\n"},
        "x.sql",
        1,
        "a plain CREATE VIEW is not supported",
    ),
    "python unknown table": (
        {
            "x.py": PY + "\n@dp.materialized_view(name='m')\ndef m():\n"
            "    return spark.read.table('nope').select('id')\n"
        },
        "x.py",
        6,
        "unknown table shop.nope",
    ),
    "python cycle": (
        {
            "x.py": PY + "\n\n@dp.materialized_view\ndef a():\n"
            "    return spark.sql('SELECT id FROM b')\n",
            "y.sql": "CREATE MATERIALIZED VIEW b AS SELECT id FROM a;\n",
        },
        "x.py",
        7,
        "cycle: shop.a -> shop.b -> shop.a; defined at shop.a (shop/transformations/x.py:7)",
    ),
    "python call not recorded": (
        {
            "x.py": PY + "\n@dp.materialized_view\ndef m():\n"
            "    frame = spark.read.table('raw')\n    return frame.toPandas()\n"
        },
        "x.py",
        9,
        "DataFrame.toPandas cannot be recorded",
    ),
    "python streaming view": (
        {
            "x.py": PY + "\n@dp.materialized_view\ndef m():\n"
            "    return spark.readStream.table('raw')\n"
        },
        "x.py",
        6,
        "a materialized view reads tables, not STREAM",
    ),
    "python syntax error": ({"x.py": PY + "def broken(:\n"}, "x.py", 5, "syntax error"),
    "python import": ({"x.py": "import pyspark.ml\n"}, "x.py", 1, "import pyspark.ml"),
    "streaming table without STREAM": (
        {"x.sql": "CREATE STREAMING TABLE s AS SELECT id FROM raw;\n"},
        "x.sql",
        1,
        "must read exactly one STREAM(source)",
    ),
    "view over a stream": (
        {"x.sql": "\nCREATE MATERIALIZED VIEW m AS SELECT id FROM STREAM(raw);\n"},
        "x.sql",
        2,
        "a materialized view reads tables, not STREAM",
    ),
    "flow into nothing": (
        {"x.sql": "CREATE FLOW f AS INSERT INTO nowhere SELECT id FROM STREAM(raw);\n"},
        "x.sql",
        1,
        "flow f writes shop.nowhere, which no CREATE STREAMING TABLE defines",
    ),
    "untyped column": (
        {"x.sql": "CREATE STREAMING TABLE s AS SELECT id, mystery(amount) AS m FROM STREAM(raw);"},
        "x.sql",
        1,
        "cannot infer the type of column 'm'",
    ),
    "unknown column": (
        {"x.sql": "CREATE MATERIALIZED VIEW m AS\nSELECT id,\n  amuont FROM raw;\n"},
        "x.sql",
        3,
        "unknown column 'amuont': no input of shop.m has it (shop.raw)",
    ),
    "unknown qualified column": (
        {"x.sql": "CREATE MATERIALIZED VIEW m AS SELECT r.id, r.nope FROM raw AS r;\n"},
        "x.sql",
        1,
        "unknown column 'nope'",
    ),
    "not incremental on request": (
        {"x.sql": "CREATE MATERIALIZED VIEW m AS\nSELECT id FROM raw LIMIT 3;\n"},
        "x.sql",
        1,
        "refresh='incremental', but the query is not incremental",
    ),
}


def _tables(catalog: Any) -> set[str]:
    return {".".join(t) for ns in catalog.list_namespaces() for t in catalog.list_tables(ns)}


def _files(root: Path) -> set[Path]:
    return {p for p in root.rglob("*") if p.is_file()}


@pytest.fixture
def lake(airflow_db: None, default_catalog: CatalogConfig) -> Any:
    catalog = default_catalog.load()
    catalog.create_namespace("shop")
    schema = pa.schema([("id", pa.int64()), ("amount", pa.int64())])
    catalog.create_table("shop.raw", schema)
    return catalog, Path(default_catalog.warehouse.removeprefix("file://"))


@pytest.mark.parametrize("case", sorted(BAD))
def test_a_bad_folder_is_refused_naming_file_and_line_and_creates_nothing(
    tmp_path: Path, lake: Any, case: str
) -> None:
    from airflow_provider_ct.pipelines.dag import sql_pipeline

    catalog, warehouse = lake
    files, path, line, message = BAD[case]
    spec = SPEC + ("airflow:\n  refresh: incremental\n" if "incremental" in case else "")
    root = folder(tmp_path, files, spec)
    tables, written = _tables(catalog), _files(warehouse)
    with pytest.raises(PipelineError) as raised:
        sql_pipeline(root, dag_id=f"bad_{case.replace(' ', '_')}")
    error = raised.value
    assert (error.path, error.line) == (f"shop/transformations/{path}", line), str(error)
    assert message in error.problem
    assert str(error).startswith(f"shop/transformations/{path}:{line}: ")
    assert _tables(catalog) == tables and _files(warehouse) == written


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        (SPEC + "continuous: true\n", "key 'continuous' is not supported"),
        (SPEC + "librarie: []\n", "unknown key 'librarie'"),
        (SPEC + "airflow:\n  shedule: '@daily'\n", "unknown key airflow.shedule"),
        ("database: shop\n", "'name' is required"),
        (SPEC.replace("transformations/**", "nothing/**"), "matches no file"),
        ("name: [\n", "not valid YAML"),
    ],
)
def test_a_bad_spec_file_is_refused_by_key(tmp_path: Path, spec: str, message: str) -> None:
    root = folder(tmp_path, {"x.sql": "CREATE MATERIALIZED VIEW a AS SELECT id FROM raw;"}, spec)
    with pytest.raises(PipelineError, match="shop/spark-pipeline.yml") as raised:
        load_spec(root)
    assert message in raised.value.problem


# -- refresh selection ---------------------------------------------------------------


def test_refresh_selection_ticks_the_named_and_what_they_read(tmp_path: Path) -> None:
    root = folder(
        tmp_path,
        {
            "x.sql": """
            CREATE STREAMING TABLE s AS SELECT id, amount FROM STREAM(raw);
            CREATE MATERIALIZED VIEW a AS SELECT id, SUM(amount) AS t FROM s GROUP BY id;
            CREATE MATERIALIZED VIEW b AS SELECT id FROM a WHERE t > 3;
            CREATE MATERIALIZED VIEW c AS SELECT id FROM raw;
            """
        },
    )
    pipeline = build_pipeline(load_spec(root), "ct")
    everything = select(pipeline, {})
    assert {everything.action(n) for n in pipeline.order} == {"tick"}
    chosen = select(pipeline, {"full_refresh": ["a"]})
    assert [chosen.action(n) for n in pipeline.order] == ["tick", "full", "skip", "skip"]
    chosen = select(pipeline, {"refresh": "ct.shop.b,c"})
    assert [chosen.action(n) for n in pipeline.order] == ["tick", "tick", "tick", "tick"]
    chosen = select(pipeline, {"refresh": ["c"], "full_refresh": []})
    assert [chosen.action(n) for n in pipeline.order] == ["skip", "skip", "skip", "tick"]
    every = select(pipeline, {"full_refresh_all": True})
    assert [every.action(n) for n in pipeline.order] == ["full", "full", "full", "full"]
    with pytest.raises(PipelineError, match="no dataset 'zz'"):
        select(pipeline, {"refresh": ["zz"]})
    # A streaming table refreshed in full: truncated and reprocessed; its readers skip.
    streaming = select(pipeline, {"full_refresh": ["s"]})
    assert [streaming.action(n) for n in pipeline.order] == ["full", "skip", "skip", "skip"]


# -- the DAG -----------------------------------------------------------------------------


def test_the_dag_has_one_group_per_dataset_wired_by_what_each_reads(
    tmp_path: Path, lake: Any
) -> None:
    from airflow_provider_ct.pipelines.dag import sql_pipeline

    root = folder(
        tmp_path,
        {
            "x.sql": """
            CREATE STREAMING TABLE s AS SELECT id, amount FROM STREAM(raw);
            CREATE MATERIALIZED VIEW a AS SELECT id, SUM(amount) AS t FROM s GROUP BY id;
            CREATE TEMPORARY VIEW v AS SELECT id FROM a WHERE t > 3;
            CREATE MATERIALIZED VIEW b AS SELECT COUNT(*) AS n FROM v;
            """
        },
        SPEC + "airflow:\n  schedule: '@hourly'\n  engine: warm\n",
    )
    dag = sql_pipeline(root)
    assert dag.dag_id == "shop" and dag.max_active_runs == 1
    assert list(dag.task_group.children) == ["s", "a", "b"]
    assert dag.get_task("a.mint").upstream_task_ids == {"s.append"}
    assert dag.get_task("b.mint").upstream_task_ids == {"a.append"}
    assert dag.get_task("a.append").asset.uri == "iceberg://ct/shop/a"
    assert dag.get_task("s.append").asset.uri == "iceberg://ct/shop/s"
    assert set(dag.params) == {"refresh", "full_refresh", "full_refresh_all"}
    assert dag.get_task("a.write").engine == "warm"


# -- the dry run -------------------------------------------------------------------------


def test_the_dry_run_prints_each_plan_and_writes_nothing(
    tmp_path: Path, lake: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    from airflow_provider_ct.pipelines.cli import main

    catalog, warehouse = lake
    catalog.create_table(
        "shop.customers", pa.schema([("customer", pa.int64()), ("region", pa.string())])
    )
    root = folder(
        tmp_path,
        {
            "x.sql": """
            CREATE STREAMING TABLE s AS SELECT id, amount FROM STREAM(raw) WHERE amount > 0;
            CREATE MATERIALIZED VIEW a PARTITIONED BY (id) AS
            SELECT id, SUM(amount) AS t, COUNT(*) AS n FROM s GROUP BY id;
            CREATE TEMPORARY VIEW v AS SELECT id, t FROM a WHERE n > 1;
            CREATE MATERIALIZED VIEW b AS SELECT SUM(t) AS total, COUNT(*) AS n FROM v;
            CREATE MATERIALIZED VIEW w AS
            SELECT id, ROW_NUMBER() OVER (ORDER BY amount) AS r FROM s;
            """
        },
    )
    tables, written = _tables(catalog), _files(warehouse)
    assert main(["dry-run", str(root), "--no-spark"]) == 0
    out = capsys.readouterr().out
    assert "order: shop.s -> shop.a -> shop.b -> shop.w" in out
    assert "external inputs: shop.raw" in out and "temporary views (inlined): shop.v" in out
    sections = {s.split()[0]: s for s in out.split("\n\n")[1:]}
    assert "[streaming table -> continual task]  shop/transformations/x.sql:1" in sections["shop.s"]
    assert "inputs: shop.raw (external, stream)" in sections["shop.s"]
    assert "columns: id BIGINT, amount BIGINT" in sections["shop.s"]
    assert "layout: partitioned by id" in sections["shop.a"]
    assert "plan: aggregate" in sections["shop.a"]
    # The view over a temporary view: the view merged into it, still incremental.
    assert "via temporary views: shop.v" in sections["shop.b"]
    assert "plan: full" not in sections["shop.b"]
    assert (
        "plan: full\n  why: a window without PARTITION BY (one partition) is recomputed"
        in sections["shop.w"]
    )
    assert _tables(catalog) == tables and _files(warehouse) == written


def test_the_dry_run_of_a_bad_folder_exits_1_naming_file_and_line(
    tmp_path: Path, lake: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    from airflow_provider_ct.pipelines.cli import main

    root = folder(tmp_path, {"x.sql": "CREATE MATERIALIZED VIEW a AS\nSELECT id FROM gone;\n"})
    assert main(["dry-run", str(root), "--no-spark"]) == 1
    err = capsys.readouterr().err
    assert "error: shop/transformations/x.sql:2: unknown table shop.gone" in err


def test_the_column_check_leaves_what_spark_resolves_alone(tmp_path: Path) -> None:
    """Aliases, lambda variables and generator outputs are no unknown columns."""
    root = folder(
        tmp_path,
        {
            "x.sql": """
            CREATE MATERIALIZED VIEW a AS
            SELECT id, transform(array(amount), x -> x + 1) AS plus, amount * 2 AS twice
            FROM raw;
            CREATE MATERIALIZED VIEW b AS
            SELECT t.id, e.v FROM raw AS t LATERAL VIEW explode(array(t.amount)) e AS v;
            """
        },
    )
    assert list(resolved(root)) == ["shop.a", "shop.b"]


# -- Python datasets (SDP's decorators) -----------------------------------------------


def test_python_datasets_are_read_with_sdps_decorators_as_sql(tmp_path: Path) -> None:
    root = folder(
        tmp_path,
        {
            "x.py": PY
            + textwrap.dedent(
                """
                from pyspark.sql.functions import col, sum


                @dp.materialized_view(partition_cols=["customer"], table_properties={"t": "1"})
                def by_customer():
                    return spark.sql("SELECT customer, SUM(amount) AS total FROM raw GROUP BY 1")


                @dp.temporary_view
                def positive():
                    return spark.read.table("raw").filter(col("amount") > 0)


                @dp.materialized_view(name="totals")
                def totals():
                    return spark.table("positive").groupBy("customer").agg(sum("amount").alias("t"))


                dp.create_streaming_table("all_events")


                @dp.append_flow(target="all_events")
                def from_raw():
                    return spark.readStream.table("raw").select("id", "amount")


                @dp.table
                def big():
                    return spark.readStream.table("raw").where("amount > 100")


                @dp.table(schema="id BIGINT, twice BIGINT")
                def batch():
                    return spark.read.table("raw").selectExpr("id", "amount * 2")
                """
            ),
        },
    )
    pipeline = build_pipeline(load_spec(root), "ct")
    items = resolve(pipeline, INPUTS.get)
    assert list(items) == [
        "shop.by_customer",
        "shop.totals",
        "shop.all_events",
        "shop.big",
        "shop.batch",
    ]
    by_customer = items["shop.by_customer"]
    assert by_customer.sql is not None and "GROUP BY" in by_customer.sql
    assert (by_customer.dataset.statement.path, by_customer.dataset.statement.line) == (
        "shop/transformations/x.py",
        9,
    )
    assert by_customer.partition_by == ("customer",) and by_customer.properties == {"t": "1"}
    assert by_customer.dataset.statement.full_reason is None  # spark.sql: its own plan
    totals = items["shop.totals"]
    assert totals.dataset.reads == ("shop.raw",)  # the temporary view inlined
    assert totals.dataset.via == ("shop.positive",)
    assert "recomputed in full" in str(totals.dataset.statement.full_reason)
    assert [n for n, _ in totals.columns] == ["customer", "t"]
    assert items["shop.all_events"].definition is not None  # one flow: a continual task
    assert "ON INPUT shop.raw" in str(items["shop.all_events"].definition)
    assert items["shop.big"].dataset.kind == "continual task"  # @dp.table over readStream
    assert [n for n, _ in items["shop.big"].columns] == ["id", "customer", "amount", "ts"]
    batch = items["shop.batch"]  # @dp.table over a batch read: a materialized view
    assert batch.dataset.kind == "materialized view"
    assert batch.columns == (("id", "BIGINT"), ("twice", "BIGINT"))  # schema= declares them


def test_the_dry_run_of_python_datasets_says_which_are_recomputed_in_full(
    tmp_path: Path, lake: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    from airflow_provider_ct.pipelines.cli import main

    catalog, warehouse = lake
    body = (
        "\n@dp.materialized_view\ndef a():\n"
        "    return spark.sql('SELECT id, SUM(amount) AS t FROM raw GROUP BY id')\n"
        "\n@dp.materialized_view\ndef b():\n"
        "    return spark.read.table('a').filter('t > 3').select('id')\n"
    )
    root = folder(tmp_path, {"x.py": PY + body})
    tables, written = _tables(catalog), _files(warehouse)
    assert main(["dry-run", str(root), "--no-spark"]) == 0
    sections = {s.split()[0]: s for s in capsys.readouterr().out.split("\n\n")[1:]}
    assert (
        "[materialized view -> materialized view]  shop/transformations/x.py:6"
        in sections["shop.a"]
    )
    assert "plan: aggregate" in sections["shop.a"]
    assert (
        "plan: full\n  why: a Python dataset whose function does not return spark.sql(...) "
        "is recomputed in full each tick" in sections["shop.b"]
    )
    assert _tables(catalog) == tables and _files(warehouse) == written


def test_a_full_refresh_refuses_only_an_input_whose_history_has_expired(lake: Any) -> None:
    from airflow_provider_ct.core.continual import unreadable_at
    from airflow_provider_ct.core.timeline import Timeline

    catalog, _ = lake
    table = catalog.load_table("shop.raw")
    schema = pa.schema([("id", pa.int64()), ("amount", pa.int64())])
    table.append(pa.Table.from_pylist([{"id": 1, "amount": 2}], schema))
    first = table.metadata.current_snapshot()
    time.sleep(0.01)  # two commits, two milliseconds
    table.append(pa.Table.from_pylist([{"id": 2, "amount": 3}], schema))
    second = table.metadata.current_snapshot()
    assert first is not None and second is not None
    # Before the first snapshot the table was empty: readable (nothing to read).
    assert unreadable_at(table, Timeline.of(table), first.timestamp_ms - 1) is None
    table.maintenance.expire_snapshots().by_id(first.snapshot_id).commit()
    table = catalog.load_table("shop.raw")
    assert unreadable_at(table, Timeline.of(table), second.timestamp_ms) is None
    # Between the two: the first snapshot held it, and it is gone.
    reason = unreadable_at(table, Timeline.of(table), second.timestamp_ms - 1)
    assert reason is not None and "have expired" in reason


def test_a_python_dataset_records_the_same_sql_at_every_parse(tmp_path: Path) -> None:
    """Derived tables are numbered per function: the view's query (and its hash) is stable."""
    body = (
        "\n@dp.materialized_view\ndef joined():\n"
        "    raw = spark.read.table('raw').filter('amount > 0')\n"
        "    return raw.groupBy('customer').count().join(spark.table('customers'), 'customer')\n"
    )
    root = folder(tmp_path, {"x.py": PY + body})
    first, second = resolved(root), resolved(root)
    sql = first["shop.joined"].sql
    assert sql == second["shop.joined"].sql
    assert "USING" in str(sql) and first["shop.joined"].dataset.reads == (
        "shop.customers",
        "shop.raw",
    )
