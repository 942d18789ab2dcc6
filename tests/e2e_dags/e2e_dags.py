"""DAGs for the end-to-end tests against a real Airflow.

Four copies of the example view, each writing its own namespace, so each test
backfills a table no other test touches:

- ``revenue_backfill_rest``: backfilled through ``POST /api/v2/backfills``,
  local Spark and the embedded SQLite catalog (the baseline);
- ``revenue_backfill_ui``: backfilled by clicking through the web UI;
- ``revenue_backfill_cluster``: the write job on a Spark standalone cluster
  (connection ``ct_e2e_spark``, started by the test), catalog as the baseline;
- ``revenue_backfill_pg``: the catalog on PostgreSQL (connection ``ct_e2e_pg``,
  started by the test), Spark as the baseline.

Changing one component per copy lets a difference from the baseline name the
component that caused it. The copies on local Spark write on the warm engine
(one long-lived driver per catalog, shared by the DAGs' concurrent runs, as a
deployment would run them); the cluster copy's jobs go through spark-submit
to the cluster's master. The spark-submit path in local mode is covered by
``tests/test_dags.py`` and the fault-injection tests.

Their ``end_date`` lies in the past, so unpausing creates no run for *now*:
only the backfill's runs tick the views (a run for now would seal every
earlier time). ``frontier_deferral_e2e`` has a deferrable FrontierSensor on
an input the test advances by hand.
"""

from __future__ import annotations

import os
import sys
from datetime import datetime, timedelta
from typing import Any

from airflow.sdk import DAG, task

EXAMPLES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "dags_examples")
sys.path.insert(0, EXAMPLES)

from airflow_provider_ct import FrontierSensor, IcebergCatalogHook, materialized_view  # noqa: E402
from airflow_provider_ct.operators._common import tick_time  # noqa: E402

START = datetime(2026, 2, 1)
INTERVALS = 3
SQL_TEMPLATE = """
SELECT c.id AS customer_id, c.name, c.country, COUNT(*) AS orders,
       SUM(o.amount_cents) AS revenue_cents
FROM {ns}.orders AS o JOIN {ns}.customers AS c ON o.customer_id = c.id
GROUP BY c.id, c.name, c.country
"""
#: dag id -> (namespace, iceberg connection id, spark connection id)
EMBEDDED = IcebergCatalogHook.default_conn_name
POSTGRES_CONN = "ct_e2e_pg"  # set by the e2e stack: its PostgreSQL server
SPARK_CONN = "ct_e2e_spark"  # set by the e2e stack: its Spark cluster
VIEWS: dict[str, tuple[str, str, str | None]] = {
    "revenue_backfill_rest": ("e2e_rest", EMBEDDED, None),
    "revenue_backfill_ui": ("e2e_ui", EMBEDDED, None),
    "revenue_backfill_cluster": ("e2e_cluster", EMBEDDED, SPARK_CONN),
    "revenue_backfill_pg": ("e2e_pg", POSTGRES_CONN, None),
}
DEFERRAL_DAG = "frontier_deferral_e2e"
DEFERRAL_INPUT = "e2e_defer.events"


def sql_for(namespace: str) -> str:
    return SQL_TEMPLATE.format(ns=namespace)


def _closed_schedule(dag_id: str) -> DAG:
    return DAG(
        dag_id=dag_id,
        schedule=timedelta(hours=1),
        start_date=START,
        end_date=START + timedelta(hours=INTERVALS),
        catchup=False,
        max_active_runs=1,
        is_paused_upon_creation=True,
        tags=["ct", "e2e"],
    )


def _view_dag(dag_id: str, namespace: str, conn_id: str, spark_conn_id: str | None) -> DAG:
    with _closed_schedule(dag_id) as dag:

        @task
        def feed_shop(**context: Any) -> dict[str, int]:
            from shop_feed import feed_shop as feed

            catalog = IcebergCatalogHook(conn_id).get_catalog()
            return feed(catalog, namespace, tick_time(context))

        feed_shop() >> materialized_view(
            target=f"{namespace}.revenue",
            sql=sql_for(namespace),
            iceberg_conn_id=conn_id,
            spark_conn_id=spark_conn_id,
            engine="warm" if spark_conn_id is None else "spark-submit",
            poke_interval=2,
        )
    return dag


for _dag_id, (_ns, _conn, _spark) in VIEWS.items():
    globals()[_dag_id] = _view_dag(_dag_id, _ns, _conn, _spark)


with _closed_schedule(DEFERRAL_DAG) as deferral_dag:

    @task
    def after_inputs(**context: Any) -> int:
        return tick_time(context)

    (
        FrontierSensor(
            task_id="wait_for_events",
            tables=[DEFERRAL_INPUT],
            deferrable=True,
            poke_interval=2,
            timeout=900,
        )
        >> after_inputs()
    )
