"""Views kept in place over a day-partitioned input: per day and country, and one group.

``tests/test_in_place.py`` creates the input ``ip.events`` with Spark SQL
and ticks this DAG at the times it passes in ``dag_run.conf``.
"""

from __future__ import annotations

from datetime import datetime

from airflow.sdk import DAG

from airflow_provider_ct import materialized_view

DAILY_SQL = (
    "SELECT CAST(ts AS DATE) AS day, country, COUNT(*) AS n, SUM(amount) AS total, "
    "AVG(price) AS avg_price, COUNT(price) AS priced "
    "FROM ip.events GROUP BY CAST(ts AS DATE), country"
)
TOTAL_SQL = "SELECT COUNT(*) AS n, SUM(price) AS revenue FROM ip.events WHERE amount > 2"

with DAG(
    dag_id="ip_views",
    schedule=None,
    start_date=datetime(2026, 1, 1),
    catchup=False,
    max_active_runs=1,
) as ip_views:
    for target, sql, partition_by in (
        ("ip.daily", DAILY_SQL, ["day"]),
        ("ip.total", TOTAL_SQL, None),
    ):
        materialized_view(
            target=target,
            sql=sql,
            partition_by=partition_by,
            refresh="auto",
            time="{{ dag_run.conf['time'] }}",
            engine="warm",
            deferrable=False,
            poke_interval=1,
            group_id=target.split(".")[1],
        )
