"""The example view in a DAG with a closed schedule, for the end-to-end backfill test.

``end_date`` lies in the past, so unpausing creates no run for *now*: only the
backfill's runs tick the view (a run for now would seal every earlier time).
"""

from __future__ import annotations

import os
import sys
from datetime import datetime, timedelta
from typing import Any

from airflow.sdk import DAG, task

EXAMPLES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "dags_examples")
sys.path.insert(0, EXAMPLES)

from airflow_provider_ct import IcebergCatalogHook, materialized_view  # noqa: E402
from airflow_provider_ct.operators._common import tick_time  # noqa: E402

NAMESPACE = "e2e"
SQL = f"""
SELECT c.id AS customer_id, c.name, c.country, COUNT(*) AS orders,
       SUM(o.amount_cents) AS revenue_cents
FROM {NAMESPACE}.orders AS o JOIN {NAMESPACE}.customers AS c ON o.customer_id = c.id
GROUP BY c.id, c.name, c.country
"""

with DAG(
    dag_id="revenue_backfill_e2e",
    schedule=timedelta(hours=1),
    start_date=datetime(2026, 2, 1),
    end_date=datetime(2026, 2, 1, 4),
    catchup=False,
    max_active_runs=1,
    is_paused_upon_creation=True,
) as dag:

    @task
    def feed_shop(**context: Any) -> dict[str, int]:
        from shop_feed import feed_shop as feed

        return feed(IcebergCatalogHook().get_catalog(), NAMESPACE, tick_time(context))

    feed_shop() >> materialized_view(target=f"{NAMESPACE}.revenue", sql=SQL, poke_interval=2)
