"""A view whose tables live on S3 (``tests/test_objectstore_spark.py`` ticks it).

The test points Airflow's default Iceberg connection at a catalog with an
``s3://`` warehouse and passes each tick's time in ``dag_run.conf["time"]``.
"""

from __future__ import annotations

from datetime import datetime

from airflow.sdk import DAG

from airflow_provider_ct import materialized_view

SQL = "SELECT kind, COUNT(*) AS n, SUM(amount) AS total FROM s3lake.events GROUP BY kind"

with DAG(
    dag_id="objectstore_view",
    schedule=None,
    start_date=datetime(2026, 1, 1),
    catchup=False,
    max_active_runs=1,
) as objectstore_view:
    materialized_view(
        target="s3lake.totals",
        sql=SQL,
        time="{{ dag_run.conf['time'] }}",
        engine="spark-submit",
        deferrable=False,
        poke_interval=1,
    )
