"""A day-keyed view over an input partitioned by day: the ``partition`` strategy.

Its ``MAX`` keeps it off in-place aggregates (a deleted maximum needs the
day's other rows), so the days are recomputed.

``tests/test_partition_refresh.py`` creates the input ``pr.events`` with
Spark SQL and ticks this DAG at the times it passes in ``dag_run.conf``.
"""

from __future__ import annotations

from datetime import datetime

from airflow.sdk import DAG

from airflow_provider_ct import materialized_view

DAILY_SQL = (
    "SELECT CAST(ts AS DATE) AS day, country, COUNT(*) AS n, SUM(amount) AS total, "
    "MAX(DISTINCT amount) AS biggest "  # DISTINCT: not kept in place, days recomputed
    "FROM pr.events GROUP BY CAST(ts AS DATE), country"
)

with DAG(
    dag_id="pr_daily",
    schedule=None,
    start_date=datetime(2026, 1, 1),
    catchup=False,
    max_active_runs=1,
) as pr_daily:
    materialized_view(
        target="pr.daily",
        sql=DAILY_SQL,
        partition_by=["day"],
        refresh="auto",
        time="{{ dag_run.conf['time'] }}",
        engine="warm",
        deferrable=False,
        poke_interval=1,
        group_id="daily",
    )
