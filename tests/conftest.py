"""Shared fixtures: real catalogs (SQLite, PostgreSQL) and a real local Spark."""

from __future__ import annotations

import os
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

# Airflow reads its configuration at import: give the test run its own home
# before anything imports Airflow.
_AIRFLOW_HOME = tempfile.mkdtemp(prefix="ct-airflow-home-")
os.environ.setdefault("AIRFLOW_HOME", _AIRFLOW_HOME)
os.environ.setdefault(
    "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN", f"sqlite:///{_AIRFLOW_HOME}/airflow.db"
)
os.environ.setdefault("AIRFLOW__CORE__LOAD_EXAMPLES", "False")
os.environ.setdefault("AIRFLOW__CORE__DAGS_FOLDER", str(Path(__file__).resolve().parent / "dags"))
os.environ.setdefault("AIRFLOW__CORE__UNIT_TEST_MODE", "True")
# The suite's views read a few hundred rows, where refresh="auto" would run
# every tick in full (CT_FULL_BELOW_ROWS, docs/decisions.md): off, so the
# incremental paths are what the tests exercise; test_incremental.py checks
# the rule itself. Set here so warm drivers and Airflow inherit it too.
os.environ.setdefault("CT_FULL_BELOW_ROWS", "0")
# Likewise a view's own cost history: over test-sized data its incremental
# ticks lose to full ones and would send it full (CT_RETRY_INCREMENTAL_AFTER).
os.environ.setdefault("CT_RETRY_INCREMENTAL_AFTER", "0")
# Likewise the large-change rule (CT_FULL_ABOVE_CHANGE): the suite's random
# changes are often a large share of its small inputs.
os.environ.setdefault("CT_FULL_ABOVE_CHANGE", "0")
# Likewise the read estimate (CT_FULL_ABOVE_READ_SHARE): a test input's few
# files all hold every key. tests/test_read_estimate.py checks the rule.
os.environ.setdefault("CT_FULL_ABOVE_READ_SHARE", "0")
# Write tasks without an engine run on warm Spark drivers (docs/engines.md),
# one per catalog and settings: the suite's many temporary catalogs would each
# leave a 1-2 GB JVM idle for the default 15 minutes. The session's drivers
# retire after a minute without jobs (also those of a run that was killed),
# live in the session's own folder (warm_drivers below) and are stopped at its end.
os.environ.setdefault("CT_WARM_IDLE_TIMEOUT", "60")

import pyarrow as pa  # noqa: E402
import pytest  # noqa: E402

from airflow_provider_ct.core.catalog import CatalogConfig  # noqa: E402
from tests.objectstore import ObjectStore, running_object_store  # noqa: E402
from tests.pgserver import PgServer, running_postgres  # noqa: E402
from tests.warm import private_warm_dir  # noqa: E402

SCHEMA = pa.schema([("k", pa.int64()), ("v", pa.string())])


@pytest.fixture(autouse=True)
def empty_file_cache() -> Iterator[None]:
    """Each test starts with this process's driver file cache empty.

    Tests count the files a change reads; a file another test's history left
    cached would make those counts depend on the order tests run in.
    """
    from airflow_provider_ct.core.file_cache import file_cache

    cache = file_cache()
    if cache is not None:
        cache.clear()
    yield


@pytest.fixture(scope="session", autouse=True)
def warm_drivers() -> Iterator[Path]:
    """The session's own ``CT_WARM_DIR``: no test reaches a driver outside it, all stopped after.

    Subprocesses (task runners, an e2e stack that sets no folder of its own)
    inherit the variable, so their drivers are found and stopped too.
    """
    with private_warm_dir() as folder:
        yield folder


def sqlite_config(root: Path) -> CatalogConfig:
    return CatalogConfig(
        name="ct",
        uri=f"sqlite:///{root / 'catalog.db'}",
        warehouse=(root / "warehouse").as_uri(),
    )


@pytest.fixture(scope="session")
def pg_server() -> Iterator[PgServer]:
    with running_postgres() as server:
        yield server


@pytest.fixture(scope="session")
def object_store(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ObjectStore]:
    """One S3 server and REST catalog for the session (tests keep to namespaces of their own)."""
    with running_object_store(tmp_path_factory.mktemp("objectstore")) as store:
        yield store


def _pg_config(server: PgServer, root: Path) -> CatalogConfig:
    url = server.create_database(f"cat_{uuid.uuid4().hex[:10]}")
    return CatalogConfig(name="ct", uri=url, warehouse=(root / "warehouse").as_uri())


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def catalog_config(request: pytest.FixtureRequest, tmp_path: Path) -> CatalogConfig:
    """A fresh, real catalog: SQLite and PostgreSQL."""
    if request.param == "sqlite":
        return sqlite_config(tmp_path)
    server = request.getfixturevalue("pg_server")
    return _pg_config(server, tmp_path)


@pytest.fixture
def sqlite_catalog_config(tmp_path: Path) -> CatalogConfig:
    return sqlite_config(tmp_path)


@pytest.fixture(scope="session")
def spark_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("spark-catalog")


def connection_json(config: CatalogConfig) -> str:
    """An Airflow connection (as an AIRFLOW_CONN_* value) for a catalog config."""
    import json

    return json.dumps(
        {
            "conn_type": "iceberg_catalog",
            "extra": {
                "uri": config.uri,
                "warehouse": config.warehouse,
                "catalog_name": config.name,
            },
        }
    )


@pytest.fixture(scope="module")
def airflow_db() -> None:
    """A fresh Airflow metadata database (SQLite under the test run's home)."""
    from airflow.utils import db

    db.resetdb()


@pytest.fixture
def default_catalog(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> CatalogConfig:
    """Point the default Iceberg connection at a fresh catalog (writable deployment)."""
    config = sqlite_config(tmp_path)
    monkeypatch.setenv("AIRFLOW_CONN_ICEBERG_CATALOG_DEFAULT", connection_json(config))
    monkeypatch.delenv("CT_READ_ONLY", raising=False)
    return config


#: Connection id under which the session's Spark catalog is known to Airflow code.
SPARK_CATALOG_CONN = "ct_spark_catalog"


@pytest.fixture(scope="session")
def spark_catalog_config(spark_root: Path) -> CatalogConfig:
    """One SQLite catalog shared by the session's SparkSession and PyIceberg.

    Also registered as the Airflow connection ``ct_spark_catalog``.
    """
    config = sqlite_config(spark_root)
    os.environ[f"AIRFLOW_CONN_{SPARK_CATALOG_CONN.upper()}"] = connection_json(config)
    return config


@pytest.fixture(scope="session")
def spark(spark_catalog_config: CatalogConfig):  # type: ignore[no-untyped-def]
    from airflow_provider_ct.spark.conf import local_session, s3a_jars, spark_jars

    spark_catalog_config.load()  # PyIceberg creates the catalog tables first
    # Hadoop's S3A jars too (if fetched): the model-checked run on S3 adds a REST
    # catalog on S3 to this JVM (tests/objectstore.in_process_session), and
    # jars only join a JVM when it starts.
    jars = [*spark_jars(spark_catalog_config), *s3a_jars()]
    session = local_session(
        spark_catalog_config,
        master="local[2]",
        app_name="ct-tests",
        **{
            "spark.sql.shuffle.partitions": "4",
            "spark.driver.memory": "2g",
            "spark.jars": ",".join(dict.fromkeys(jars)),
        },
    )
    session.sparkContext.setLogLevel("ERROR")
    yield session
    session.stop()


@pytest.fixture
def spark_lake(
    airflow_db: None,
    spark: Any,
    spark_catalog_config: CatalogConfig,
    monkeypatch: pytest.MonkeyPatch,
) -> Iterator[CatalogConfig]:
    """The test Spark session's catalog as Airflow's default, so Spark-made tables are inputs.

    Writable, with a private warm-driver folder stopped afterwards.
    """
    from tests.warm import private_warm_dir

    monkeypatch.setenv(
        "AIRFLOW_CONN_ICEBERG_CATALOG_DEFAULT", connection_json(spark_catalog_config)
    )
    monkeypatch.delenv("CT_READ_ONLY", raising=False)
    with private_warm_dir():
        yield spark_catalog_config
