"""The example shop's revenue view, with the write job's engine as a parameter.

``tests/test_warm_engine.py`` runs it through ``dag.test()`` on the warm
engine; ``bench/engine_bench.py`` builds one per engine to time them.
"""

from __future__ import annotations

import os
import sys
from datetime import datetime
from typing import Any

from airflow.sdk import DAG, task

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "dags_examples"))

from airflow_provider_ct import IcebergCatalogHook, materialized_view
from airflow_provider_ct.operators._common import tick_time


def revenue_sql(namespace: str) -> str:
    return f"""
SELECT c.id AS customer_id, c.name, c.country,
       COUNT(*) AS orders, SUM(o.amount_cents) AS revenue_cents
FROM {namespace}.orders AS o JOIN {namespace}.customers AS c ON o.customer_id = c.id
GROUP BY c.id, c.name, c.country
"""


def build_dag(
    dag_id: str, namespace: str, engine: str, idle_timeout: float = 300.0, schedule: Any = "@hourly"
) -> DAG:
    """Feed the shop's inputs, then tick ``<namespace>.revenue`` with ``engine``."""
    with DAG(
        dag_id=dag_id,
        schedule=schedule,
        start_date=datetime(2026, 1, 1),
        catchup=False,
        max_active_runs=1,
    ) as dag:

        @task
        def feed(**context: Any) -> dict[str, int]:
            from shop_feed import feed_shop

            return feed_shop(IcebergCatalogHook().get_catalog(), namespace, tick_time(context))

        view = materialized_view(
            target=f"{namespace}.revenue",
            sql=revenue_sql(namespace),
            poke_interval=1,
            engine=engine,
            warm_idle_timeout=idle_timeout,
        )
        feed() >> view
    return dag


dag = build_dag("warm_revenue", "warmshop", "warm")
# The benchmark's pair (bench/engine_bench.py): the same view, one DAG per engine.
bench_spark_submit = build_dag("bench_spark_submit", "bench_spark_submit", "spark-submit")
bench_warm = build_dag("bench_warm", "bench_warm", "warm")
