"""Revenue per customer: a self-correcting materialized view over orders and customers.

Every hour, ``feed_shop`` changes the inputs (the stand-in for your upstream
pipelines), then the ``view_shop_revenue_per_customer`` group waits for the
inputs to be complete through the hour's end, mints a batch description,
computes the correction in Spark and compare-and-appends it. Backfill past
hours from the UI: each run time-travels the inputs to its own hour.
"""

from __future__ import annotations

import os
import sys
from datetime import datetime, timedelta
from typing import Any

from airflow.sdk import DAG, task

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from airflow_provider_ct import IcebergCatalogHook, materialized_view
from airflow_provider_ct.operators._common import tick_time

NAMESPACE = os.environ.get("CT_EXAMPLE_NAMESPACE", "shop")
#: ``warm`` (what ``make demo`` sets): one long-lived Spark driver serves every
#: tick, so a small tick costs seconds instead of a JVM start. Unset: the Spark
#: connection decides (``spark-submit`` without one). See docs/engines.md.
ENGINE = os.environ.get("CT_EXAMPLE_ENGINE") or None

# [START revenue_sql]
REVENUE_SQL = f"""
SELECT c.id AS customer_id,
       c.name,
       c.country,
       COUNT(*) AS orders,
       SUM(o.amount_cents) AS revenue_cents
FROM {NAMESPACE}.orders AS o
JOIN {NAMESPACE}.customers AS c ON o.customer_id = c.id
GROUP BY c.id, c.name, c.country
"""
# [END revenue_sql]

with DAG(
    dag_id="revenue_per_customer",
    schedule="@hourly",  # ticks at :00; a run's tick time is its logical date
    start_date=datetime(2026, 1, 1),
    catchup=False,
    max_active_runs=1,  # ticks land in order
    default_args={"retries": 1, "retry_delay": timedelta(seconds=10)},
    tags=["ct", "example"],
) as dag:

    @task
    def feed_shop(**context: Any) -> dict[str, int]:
        from shop_feed import feed_shop as feed

        catalog = IcebergCatalogHook().get_catalog()
        return feed(catalog, NAMESPACE, tick_time(context))

    # [START materialized_view]
    view = materialized_view(
        target=f"{NAMESPACE}.revenue_per_customer",
        sql=REVENUE_SQL,
        poke_interval=5,
        engine=ENGINE,
    )
    # [END materialized_view]
    feed_shop() >> view
