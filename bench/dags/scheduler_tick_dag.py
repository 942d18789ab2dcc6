"""The DAG of bench/scheduler_tick_bench.py: the example shop's revenue view on the warm engine.

No schedule: the bench triggers one run per tick. ``feed`` commits the
shop's inputs at the run's time and seals them, then the view ticks
(sensor, mint, write, append). The sensor pokes every second, as a
deployment that cares about freshness would set it.
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

NAMESPACE = "sched_bench"

with DAG(
    dag_id="scheduler_tick_bench",
    schedule=None,
    start_date=datetime(2026, 1, 1),
    catchup=False,
    max_active_runs=1,
) as dag:

    @task
    def feed(**context: Any) -> dict[str, int]:
        from shop_feed import feed_shop

        return feed_shop(IcebergCatalogHook().get_catalog(), NAMESPACE, tick_time(context))

    view = materialized_view(
        target=f"{NAMESPACE}.revenue",
        sql=f"""
SELECT c.id AS customer_id, c.name, c.country,
       COUNT(*) AS orders, SUM(o.amount_cents) AS revenue_cents
FROM {NAMESPACE}.orders AS o JOIN {NAMESPACE}.customers AS c ON o.customer_id = c.id
GROUP BY c.id, c.name, c.country
""",
        poke_interval=1,
        engine="warm",
        warm_idle_timeout=600,
    )
    feed() >> view
