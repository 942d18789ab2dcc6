"""Provider registration and the IcebergCatalogHook's catalog resolution."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from importlib.metadata import entry_points
from pathlib import Path

import pytest

from airflow_provider_ct.core.catalog import CatalogConfig
from airflow_provider_ct.exceptions import ConfigurationError
from airflow_provider_ct.spark.conf import spark_conf


def test_entry_point_points_at_provider_info() -> None:
    eps = [
        ep
        for ep in entry_points(group="apache_airflow_provider")
        if ep.value.startswith("airflow_provider_ct")
    ]
    assert len(eps) == 1
    info = eps[0].load()()
    assert info["package-name"] == "airflow-provider-ct"
    assert info["connection-types"][0]["connection-type"] == "iceberg_catalog"
    # Every class the provider advertises is importable.
    module, _, cls = info["hook-class-names"][0].rpartition(".")
    __import__(module)
    assert hasattr(sys.modules[module], cls)


def test_provider_info_names_every_operator_sensor_trigger_and_hook() -> None:
    import importlib
    import inspect
    import pkgutil

    from airflow.sdk import BaseHook, BaseOperator
    from airflow.triggers.base import BaseTrigger

    import airflow_provider_ct
    from airflow_provider_ct.get_provider_info import get_provider_info

    info = get_provider_info()
    listed = {
        kind: {m for group in info[kind] for m in group["python-modules"]}
        for kind in ("operators", "sensors", "triggers", "hooks")
    }
    found: dict[str, set[str]] = {kind: set() for kind in listed}
    for mod in pkgutil.walk_packages(airflow_provider_ct.__path__, "airflow_provider_ct."):
        if ".spark." in mod.name or ".engine." in mod.name:
            continue  # Spark job programs and the warm driver: no Airflow classes
        module = importlib.import_module(mod.name)
        for _, cls in inspect.getmembers(module, inspect.isclass):
            if cls.__module__ != mod.name:
                continue
            if issubclass(cls, BaseOperator):
                is_sensor = "sensors" in mod.name
                found["sensors" if is_sensor else "operators"].add(mod.name)
            elif issubclass(cls, BaseTrigger):
                found["triggers"].add(mod.name)
            elif issubclass(cls, BaseHook):
                found["hooks"].add(mod.name)
    assert found == listed
    for modules in listed.values():
        for name in modules:
            importlib.import_module(name)
    types = {c["connection-type"] for c in info["connection-types"]}
    assert types == {"iceberg_catalog"}


def test_airflow_providers_list_shows_the_package(tmp_path: Path) -> None:
    env = {**os.environ, "AIRFLOW_HOME": str(tmp_path)}
    out = subprocess.run(
        [str(Path(sys.executable).parent / "airflow"), "providers", "list", "--output", "json"],
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
        check=True,
    )
    listing = next(line for line in out.stdout.splitlines() if line.startswith("["))
    packages = {p["package_name"]: p for p in json.loads(listing)}
    assert "airflow-provider-ct" in packages
    assert packages["airflow-provider-ct"]["version"] == "0.1.0"


def test_hook_falls_back_to_the_embedded_catalog_under_airflow_home(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from airflow_provider_ct.hooks.iceberg import IcebergCatalogHook

    monkeypatch.setenv("AIRFLOW_HOME", str(tmp_path))
    monkeypatch.delenv("AIRFLOW_CONN_ICEBERG_CATALOG_DEFAULT", raising=False)
    hook = IcebergCatalogHook()
    config = hook.get_config()
    assert config.uri == f"sqlite:///{tmp_path.resolve() / 'ct' / 'catalog.db'}"
    catalog = hook.get_catalog()
    catalog.create_namespace("ns")
    assert ("ns",) in catalog.list_namespaces()
    assert (tmp_path / "ct" / "catalog.db").exists()


def test_hook_reads_a_connection_from_the_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from airflow_provider_ct.hooks.iceberg import IcebergCatalogHook

    uri = f"sqlite:///{tmp_path / 'other.db'}"
    warehouse = (tmp_path / "wh").as_uri()
    monkeypatch.setenv(
        "AIRFLOW_CONN_MY_CATALOG",
        json.dumps(
            {
                "conn_type": "iceberg_catalog",
                "extra": {"uri": uri, "warehouse": warehouse, "catalog_name": "lake"},
            }
        ),
    )
    hook = IcebergCatalogHook("my_catalog")
    config = hook.get_config()
    assert (config.name, config.uri, config.warehouse) == ("lake", uri, warehouse)
    hook.get_catalog().create_namespace("x")
    assert (tmp_path / "other.db").exists()
    assert hook.test_connection()[0]


def test_hook_builds_a_postgres_url_from_connection_fields(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from airflow_provider_ct.hooks.iceberg import IcebergCatalogHook

    monkeypatch.setenv(
        "AIRFLOW_CONN_PG_CATALOG",
        json.dumps(
            {
                "conn_type": "iceberg_catalog",
                "host": "db.internal",
                "port": 5433,
                "login": "ice",
                "password": "p@ss:word",
                "schema": "lake",
                "extra": {"warehouse": "s3://bucket/wh"},
            }
        ),
    )
    config = IcebergCatalogHook("pg_catalog").get_config()
    assert config.uri == "postgresql+psycopg2://ice:p%40ss%3Aword@db.internal:5433/lake"
    assert config.jdbc_url() == "jdbc:postgresql://db.internal:5433/lake"
    assert config.jdbc_credentials() == ("ice", "p@ss:word")
    assert "p@ss" not in config.redacted_uri()


def test_a_missing_named_connection_is_a_clear_error() -> None:
    from airflow_provider_ct.hooks.iceberg import IcebergCatalogHook

    with pytest.raises(ConfigurationError, match="'nope' does not exist"):
        IcebergCatalogHook("nope").get_config()


def test_spark_conf_matches_the_catalog_on_sqlite(tmp_path: Path) -> None:
    config = CatalogConfig(uri=f"sqlite:///{tmp_path}/c.db", warehouse=tmp_path.as_uri())
    conf = spark_conf(config)
    assert conf["spark.sql.catalog.ct"] == "org.apache.iceberg.spark.SparkCatalog"
    assert conf["spark.sql.catalog.ct.uri"] == f"jdbc:sqlite:{tmp_path}/c.db"
    assert conf["spark.sql.catalog.ct.jdbc.init-catalog-tables"] == "false"
    assert conf["spark.sql.catalog.ct.warehouse"] == tmp_path.as_uri()
    assert conf["spark.sql.parquet.outputTimestampType"] == "TIMESTAMP_MICROS"
    jars = conf["spark.jars"].split(",")
    assert any("iceberg-spark-runtime-3.5_2.12" in j for j in jars)
    assert not any("jackson" in j for j in jars)  # the runtime carries its relocated Jackson
    assert "/usr/share/java/sqlite-jdbc.jar" in jars


def test_spark_conf_for_postgres_carries_credentials_and_driver() -> None:
    config = CatalogConfig(
        uri="postgresql+psycopg2://u:pw@127.0.0.1:5999/cat", warehouse="file:///tmp/wh"
    )
    conf = spark_conf(config, include_secrets=True)
    assert conf["spark.sql.catalog.ct.uri"] == "jdbc:postgresql://127.0.0.1:5999/cat"
    assert conf["spark.sql.catalog.ct.jdbc.user"] == "u"
    assert conf["spark.sql.catalog.ct.jdbc.password"] == "pw"
    assert "/usr/share/java/postgresql.jar" in conf["spark.jars"].split(",")
    # By default (spark-submit's --conf) the password is left to the job.
    assert "spark.sql.catalog.ct.jdbc.password" not in spark_conf(config)


def test_missing_jars_name_the_fix(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CT_SPARK_JARS_DIR", str(tmp_path))
    monkeypatch.delenv("CT_SPARK_PACKAGES", raising=False)
    config = CatalogConfig(uri=f"sqlite:///{tmp_path}/c.db")
    with pytest.raises(ConfigurationError, match="make setup"):
        spark_conf(config)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"uri": ""}, "no uri"),
        ({"uri": "sqlite:///x.db", "kind": "hive"}, "not one of"),
        ({"uri": "sqlite:///x.db", "name": "bad-name"}, "plain identifier"),
    ],
)
def test_bad_catalog_configs_are_refused(kwargs: dict[str, str], message: str) -> None:
    with pytest.raises(ConfigurationError, match=message):
        CatalogConfig(**kwargs)


def test_unsupported_sql_dialect_is_refused() -> None:
    with pytest.raises(ConfigurationError, match="only sqlite and postgresql"):
        CatalogConfig(uri="mysql://h/db").jdbc_url()


def test_every_public_name_resolves() -> None:
    import airflow_provider_ct

    for name in airflow_provider_ct.__all__:
        assert getattr(airflow_provider_ct, name) is not None, name
    with pytest.raises(AttributeError, match="no attribute 'Nope'"):
        _ = airflow_provider_ct.Nope
