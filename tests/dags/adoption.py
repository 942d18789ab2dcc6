"""A view and a continual task whose targets the user created first (partitioned).

``tests/test_adoption.py`` creates the inputs and targets with Spark SQL and
ticks these DAGs at times it passes in ``dag_run.conf["time"]``.
"""

from __future__ import annotations

from datetime import datetime

from airflow.sdk import DAG

from airflow_provider_ct import continual_task, materialized_view

DAILY_SQL = (
    "SELECT CAST(ts AS DATE) AS day, country, COUNT(*) AS n, SUM(amount) AS total "
    "FROM lake.events GROUP BY CAST(ts AS DATE), country"
)
TASK = """
CREATE CONTINUAL TASK lake.big_orders (country STRING, amount BIGINT) ON INPUT lake.events
WITH (SNAPSHOT = false) AS (
    INSERT INTO lake.big_orders SELECT country, amount FROM lake.events WHERE amount >= 100;
)
"""

with DAG(
    dag_id="adopt_daily",
    schedule=None,
    start_date=datetime(2026, 1, 1),
    catchup=False,
    max_active_runs=1,
) as adopt_daily:
    materialized_view(
        target="lake.daily",
        sql=DAILY_SQL,
        time="{{ dag_run.conf['time'] }}",
        engine="warm",
        deferrable=False,
        poke_interval=1,
    )

with DAG(
    dag_id="adopt_task",
    schedule=None,
    start_date=datetime(2026, 1, 1),
    catchup=False,
    max_active_runs=1,
) as adopt_task:
    continual_task(
        definition=TASK,
        time="{{ dag_run.conf['time'] }}",
        engine="warm",
        deferrable=False,
        poke_interval=1,
    )
