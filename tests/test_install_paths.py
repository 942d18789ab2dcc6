"""Issue 13: the ecosystem's Iceberg connection, jars from configuration, any deploy mode,
optional namespaces, templated view SQL and the catalog name from the connection."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import zipfile
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from airflow_provider_ct.core.catalog import CatalogConfig
from airflow_provider_ct.core.continual import parse_continual_task
from airflow_provider_ct.core.frontier import timestamp_from_datetime
from airflow_provider_ct.core.tables import create_managed_table
from airflow_provider_ct.exceptions import ConfigurationError, QueryError
from airflow_provider_ct.hooks.iceberg import config_from_iceberg_connection
from airflow_provider_ct.hooks.spark_job import APPLICATION
from airflow_provider_ct.spark.conf import (
    JarSettings,
    default_jars_dir,
    secret_spark_conf,
    spark_conf,
    spark_jars,
)
from tests.conftest import SCHEMA, connection_json, sqlite_config
from tests.helpers import advance, mint_view_tick, replace_contents, rows_of

ROOT = Path(__file__).resolve().parent.parent
TASK = """CREATE CONTINUAL TASK ev.latest (k bigint, v string) ON INPUT ev.src AS (
  INSERT INTO ev.latest SELECT k, v FROM ev.src;
)"""


def _iceberg_conn(conn_id: str, **fields: Any) -> Any:
    from airflow.models.connection import Connection

    return Connection(conn_id=conn_id, conn_type="iceberg", **fields)


# -- fixes ---------------------------------------------------------------------
def test_continual_task_needs_no_namespace_when_every_name_is_qualified() -> None:
    task = parse_continual_task(TASK)
    assert (task.name, task.input) == ("ev.latest", "ev.src")
    unqualified = TASK.replace("ON INPUT ev.src", "ON INPUT src")
    with pytest.raises(QueryError, match="table 'src' is not qualified"):
        parse_continual_task(unqualified)
    from airflow.sdk import DAG

    from airflow_provider_ct import continual_task

    with DAG("ct_no_ns", schedule=None):
        group = continual_task(definition=TASK)
    assert group.group_id == "ct_ev_latest"


def test_view_sql_file_renders_with_jinja_before_parsing_and_errors_name_the_file(
    tmp_path: Path,
) -> None:
    from airflow.sdk import DAG

    from airflow_provider_ct import materialized_view

    (tmp_path / "good.sql").write_text("SELECT k, v FROM {{ params.ns }}.src")
    (tmp_path / "bad.sql").write_text("SELECT k, FROM WHERE {{ params.ns }}")
    with DAG("tpl", schedule=None, template_searchpath=[str(tmp_path)], params={"ns": "ns1"}):
        good = materialized_view(target="ns1.view", sql="good.sql", group_id="good")
        bad = materialized_view(target="ns1.bad", sql="bad.sql", group_id="bad")
    context: dict[str, Any] = {"params": {"ns": "ns1"}}
    mint = good.children["good.mint"]
    mint.render_template_fields(context)  # type: ignore[union-attr]
    assert mint.sql == "SELECT k, v FROM ns1.src"  # type: ignore[union-attr]
    with pytest.raises(QueryError, match=r"^bad\.sql, as rendered: "):
        bad.children["bad.write"].render_template_fields(context)  # type: ignore[union-attr]


def test_catalog_name_is_read_from_the_connection(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from airflow.sdk import DAG

    from airflow_provider_ct import continual_task, materialized_view

    extra = {"type": "sql", "uri": f"sqlite:///{tmp_path}/c.db", "catalog_name": "lake"}
    monkeypatch.setenv(
        "AIRFLOW_CONN_LAKE_CONN", json.dumps({"conn_type": "iceberg", "extra": extra})
    )
    with DAG("named", schedule=None):
        view = materialized_view(
            target="lake.ns.view", sql="SELECT k FROM lake.ns.src", iceberg_conn_id="lake_conn"
        )
        task = continual_task(definition=TASK, iceberg_conn_id="lake_conn")
    assert view.children["view_ns_view.append"].asset.uri == "iceberg://lake/ns/view"  # type: ignore[union-attr]
    assert task.children["ct_ev_latest.append"].asset.uri == "iceberg://lake/ev/latest"  # type: ignore[union-attr]


# -- the official iceberg connection -----------------------------------------------
def test_iceberg_connection_sql_catalog_reads_like_the_official_hook(tmp_path: Path) -> None:
    conn = _iceberg_conn(
        "iceberg_default",
        host=f"sqlite:///{tmp_path}/c.db",
        extra=json.dumps({"type": "sql", "warehouse": tmp_path.as_uri()}),
    )
    config = config_from_iceberg_connection(conn)
    assert (config.name, config.kind, config.dialect) == ("iceberg_default", "sql", "sqlite")
    conf = spark_conf(config, include_jars=False)
    assert conf["spark.sql.catalog.iceberg_default.uri"] == f"jdbc:sqlite:{tmp_path}/c.db"
    assert config.load().list_namespaces() == []


def test_iceberg_connection_rest_catalog_for_pyiceberg_and_spark() -> None:
    conn = _iceberg_conn(
        "polaris",
        host="https://catalog.example.com/api/catalog/",
        login="client",
        password="s3cret-value",
        extra=json.dumps({"warehouse": "analytics", "scope": "PRINCIPAL_ROLE:ALL"}),
    )
    config = config_from_iceberg_connection(conn)
    assert config.kind == "rest"
    props = config.pyiceberg_properties()
    # What apache-airflow-providers-apache-iceberg's IcebergHook passes to load_catalog.
    assert props == {
        "type": "rest",
        "uri": "https://catalog.example.com/api/catalog",
        "warehouse": "analytics",
        "scope": "PRINCIPAL_ROLE:ALL",
        "credential": "client:s3cret-value",
    }
    conf = spark_conf(config, include_jars=False)
    prefix = "spark.sql.catalog.polaris"
    assert conf[f"{prefix}.type"] == "rest"
    assert conf[f"{prefix}.uri"] == "https://catalog.example.com/api/catalog"
    assert conf[f"{prefix}.warehouse"] == "analytics"
    assert conf[f"{prefix}.scope"] == "PRINCIPAL_ROLE:ALL"
    assert f"{prefix}.credential" not in conf  # never on spark-submit's command line
    assert secret_spark_conf(config) == {f"{prefix}.credential": "client:s3cret-value"}
    assert "s3cret-value" not in repr(config)


def test_rest_catalog_runs_on_the_local_runtime_and_a_runtime_without_its_client_is_named(
    tmp_path: Path,
) -> None:
    """The assembled runtime carries Iceberg's relocated HTTP client; a jar without it fails."""
    config = CatalogConfig(name="r", kind="rest", uri="http://127.0.0.1:1/catalog")
    jars = spark_jars(config)
    assert any(":iceberg-spark-runtime-" in j or "iceberg-spark-runtime" in j for j in jars)
    stripped = tmp_path / "iceberg-spark-runtime-3.5_2.12-stripped.jar"
    with zipfile.ZipFile(stripped, "w") as archive:
        archive.writestr("org/apache/iceberg/Table.class", b"")
    with pytest.raises(
        ConfigurationError, match=r"HttpClients.*'iceberg_jars'.*spark.jars.packages"
    ):
        spark_jars(config, settings=JarSettings(iceberg_jars=(str(stripped),)))
    coords = "org.apache.iceberg:iceberg-spark-runtime-3.5_2.12:1.10.2"
    assert spark_jars(config, settings=JarSettings(packages=(coords,))) == []


def test_jars_from_the_spark_extra_replace_the_defaults_and_missing_ones_are_named(
    tmp_path: Path,
) -> None:
    config = sqlite_config(tmp_path)
    driver = tmp_path / "my-sqlite.jar"
    driver.write_bytes(b"")
    settings = JarSettings.from_extra({"jdbc_jars": str(driver)}, "spark_x")
    jars = spark_jars(config, settings=settings)
    assert jars[-1] == str(driver) and "/usr/share/java/sqlite-jdbc.jar" not in jars
    with pytest.raises(ConfigurationError, match=r"'spark_x' extra 'iceberg_jars'.*/nope\.jar"):
        JarSettings.from_extra({"iceberg_jars": "/nope.jar"}, "spark_x")
    packaged = JarSettings.from_extra({"spark.jars.packages": "org.xerial:sqlite-jdbc:3.46.0.0"})
    assert "/usr/share/java/sqlite-jdbc.jar" not in spark_jars(config, settings=packaged)


# -- end to end ------------------------------------------------------------------
def _copied_runtime_jars(folder: Path) -> str:
    """The runtime jars, copied away from the default location (which the test empties)."""
    folder.mkdir()
    copies = [shutil.copy(jar, folder) for jar in sorted(default_jars_dir().glob("*.jar"))]
    return ",".join(str(c) for c in copies)


@pytest.mark.spark
@pytest.mark.slow
@pytest.mark.airflow
def test_view_dag_runs_on_an_iceberg_connection_with_the_runtime_jar_from_the_spark_extra(
    airflow_db: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = tmp_path / "lake"
    root.mkdir()
    iceberg = {"type": "sql", "uri": f"sqlite:///{root}/catalog.db", "warehouse": root.as_uri()}
    monkeypatch.setenv(
        "AIRFLOW_CONN_ICEBERG_DEFAULT", json.dumps({"conn_type": "iceberg", "extra": iceberg})
    )
    spark_extra = {"iceberg_jars": _copied_runtime_jars(tmp_path / "jars")}
    monkeypatch.setenv(
        "AIRFLOW_CONN_CT_SPARK_EXTRA_JARS",
        json.dumps({"conn_type": "spark", "host": "local[2]", "extra": spark_extra}),
    )
    monkeypatch.setenv("CT_SPARK_JARS_DIR", str(tmp_path / "empty"))  # the default is gone
    monkeypatch.delenv("CT_SPARK_PACKAGES", raising=False)
    config = CatalogConfig(
        name="iceberg_default", **{k: v for k, v in iceberg.items() if k != "type"}
    )
    catalog = config.load()
    src = create_managed_table(catalog, "ice.src", SCHEMA)
    tick = datetime(2026, 5, 1, 1, tzinfo=UTC)
    t_ms = timestamp_from_datetime(tick)
    data = pa.table({"k": [1, 2, 3], "v": ["a", "b", "c"]}, schema=SCHEMA)
    replace_contents(src, t_ms - 1000, data)
    advance(src, t_ms)
    sys.path.insert(0, str(ROOT / "tests" / "dags"))
    import iceberg_conn_view

    run = iceberg_conn_view.dag.test(logical_date=tick)
    assert run.state == "success"
    assert rows_of(catalog.load_table("ice.view")) == {(2, "b"): 1, (3, "c"): 1}  # k > 1
    write = iceberg_conn_view.dag.get_task("view.append")
    assert write.asset.uri == "iceberg://iceberg_default/ice/view"


@pytest.mark.spark
@pytest.mark.slow
@pytest.mark.airflow
def test_job_gets_inline_arguments_and_returns_its_report_without_the_operators_tmp(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from airflow_provider_ct.hooks.iceberg import IcebergCatalogHook
    from airflow_provider_ct.operators.write import WriteOperator
    from airflow_provider_ct.spark.exchange import read_text

    config = sqlite_config(tmp_path / "cat")
    monkeypatch.setenv("AIRFLOW_CONN_CT_EXCHANGE_CAT", connection_json(config))
    exchange = (tmp_path / "exchange").as_uri()
    monkeypatch.setenv(
        "AIRFLOW_CONN_CT_CLUSTER_MODE",
        json.dumps(
            {
                "conn_type": "spark",
                "host": "local[2]",
                "extra": {"deploy-mode": "cluster", "ct_exchange_dir": exchange},
            }
        ),
    )
    catalog = config.load()
    src = create_managed_table(catalog, "xch.src", SCHEMA)
    replace_contents(src, 500, pa.table({"k": [1], "v": ["x"]}, schema=SCHEMA))
    advance(src, 1000)
    sql = "SELECT k, v FROM xch.src"
    desc = mint_view_tick(catalog, "xch.view", sql, 1000).description
    operator = WriteOperator(
        task_id="w",
        target="xch.view",
        sql=sql,
        description=desc.to_json(),
        spark_conn_id="ct_cluster_mode",
        iceberg_conn_id="ct_exchange_cat",
        driver_memory="1g",
        engine="spark-submit",
    )
    hook = IcebergCatalogHook("ct_exchange_cat")
    operator_tmp = tmp_path / "operator-tmp"
    operator_tmp.mkdir()
    job = operator.job_hook()
    outputs = job.outputs(config, operator_tmp)
    submit = job.submit_hook(operator.job_spec(), desc, hook.get_config(), operator_tmp, outputs)
    command = submit._build_spark_submit_command(APPLICATION)
    # Standalone and local masters cannot run Python drivers in cluster mode:
    # run the same arguments in client mode, from elsewhere.
    at = command.index("--deploy-mode")
    command = command[:at] + command[at + 2 :]
    assert list(operator_tmp.iterdir()) == []  # nothing for the driver in the operator's tmp
    assert not any(arg.startswith("@") for arg in command), command
    elsewhere = tmp_path / "driver-cwd"
    (elsewhere / "tmp").mkdir(parents=True)
    path = f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"
    env = {**os.environ, "TMPDIR": str(elsewhere / "tmp"), "PYSPARK_PYTHON": sys.executable}
    env["PATH"] = path
    done = subprocess.run(
        command, cwd=elsewhere, env=env, capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(read_text(outputs.report) or "{}")
    assert outputs.report.startswith(exchange)
    assert report["status"] == "staged" and report["rows_to_insert"] == 1, report
