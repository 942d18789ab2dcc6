"""One real Airflow for the end-to-end tests, with a Spark cluster and a PostgreSQL catalog.

The session starts, on free ports: a PostgreSQL server (Airflow's metadata
database, and the catalog of the ``revenue_backfill_pg`` DAG), a Spark
standalone cluster (write jobs of the ``revenue_backfill_cluster`` DAG), then
``airflow standalone`` reading ``tests/e2e_dags``.

Airflow's metadata is on PostgreSQL, as in a deployment, not on SQLite: the
UI's backfill (a POST of the backfill and a PATCH unpausing the DAG, sent
together) met the scheduler's writes on SQLite, the POST answered 503 after
some runs were committed, and the scheduler exited on a ``StaleDataError``;
``airflow standalone`` does not start it again, so every later run stayed
queued. The demo keeps SQLite (its calls are sequential, and
``test_demo.py`` covers it). Everything is stopped at the end of the session, also
when a test fails, and the teardown fails if any process survives.
"""

from __future__ import annotations

import json
import os
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from airflow_provider_ct.core.catalog import CatalogConfig
from devtools.devstack import Api, LocalAirflow
from tests.conftest import _pg_config, connection_json
from tests.e2e.checks import check_backfilled_view
from tests.e2e_dags.e2e_dags import DEFERRAL_DAG, POSTGRES_CONN, SPARK_CONN, VIEWS
from tests.e2e_dags.e2e_medallion import MEDALLION_DAGS
from tests.pipelines.shop_feed import SQL_PIPELINE_DAG, create_inputs
from tests.sparkcluster import SparkCluster, running_spark_cluster

ROOT = Path(__file__).resolve().parents[2]
ARTIFACTS = Path(os.environ.get("CT_TEST_ARTIFACTS", ROOT / "test-artifacts"))


@dataclass
class Stack:
    airflow: LocalAirflow
    api: Api
    embedded: CatalogConfig  # the default catalog under the stack's AIRFLOW_HOME
    postgres: CatalogConfig  # the POSTGRES_CONN connection's catalog
    spark: SparkCluster  # the SPARK_CONN connection's cluster

    def log_tail(self) -> str:
        return self.airflow.log_path.read_text(errors="replace")[-4000:]

    def check_view(self, runs: list[dict[str, Any]], dag_id: str) -> list[Counter[tuple[Any, ...]]]:
        """``check_backfilled_view`` in the DAG's own catalog, with Airflow's log on failure."""
        conn_id = VIEWS[dag_id][1]
        config = self.postgres if conn_id == POSTGRES_CONN else self.embedded
        try:
            return check_backfilled_view(runs, config.load(), dag_id)
        except AssertionError as exc:
            raise AssertionError(f"{exc}\n--- Airflow log tail ---\n{self.log_tail()}") from exc


@pytest.fixture(scope="session")
def artifacts() -> Path:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    return ARTIFACTS


@pytest.fixture(scope="session")
def stack(tmp_path_factory: pytest.TempPathFactory, pg_server) -> Iterator[Stack]:  # type: ignore[no-untyped-def]
    root = tmp_path_factory.mktemp("e2e")
    postgres = _pg_config(pg_server, root / "pg")
    home = root / "airflow-home"
    with running_spark_cluster(worker_cores=2, worker_memory="2g") as cluster:
        host, port = cluster.host_port
        spark_conn = {"conn_type": "spark", "host": host, "port": port}
        env = {
            "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": pg_server.create_database("airflow_meta"),
            f"AIRFLOW_CONN_{POSTGRES_CONN.upper()}": connection_json(postgres),
            f"AIRFLOW_CONN_{SPARK_CONN.upper()}": json.dumps(spark_conn),
            # The warm drivers of this stack's DAGs live here, not in the
            # machine's default folder; stop() ends them with the stack.
            "CT_WARM_DIR": str(root / "warm"),
        }
        airflow = LocalAirflow(home=home, dags_folder=ROOT / "tests" / "e2e_dags", env=env)
        # The SQL pipeline's DAG file resolves its folder against the catalog when
        # parsed: its inputs exist first, as a deployment's would.
        create_inputs(CatalogConfig.embedded(home).load())
        with airflow:
            api = airflow.start([*VIEWS, DEFERRAL_DAG, *MEDALLION_DAGS, SQL_PIPELINE_DAG])
            assert not (home / "airflow.db").exists()  # the metadata went to PostgreSQL
            yield Stack(airflow, api, CatalogConfig.embedded(home), postgres, cluster)
        assert not airflow.survivors(), f"Airflow processes outlived stop(): {airflow.survivors()}"
