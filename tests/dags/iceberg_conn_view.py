"""A view whose catalog is an ``iceberg`` connection (apache-airflow-providers-apache-iceberg).

Its query is a templated ``.sql`` file found through ``template_searchpath``;
its Spark connection names the Iceberg runtime jars in its extra. The test
(``tests/test_install_paths.py``) sets both connections.
"""

from __future__ import annotations

import os
from datetime import UTC, datetime

from airflow.sdk import DAG

from airflow_provider_ct import materialized_view

with DAG(
    "iceberg_conn_view",
    schedule=None,
    start_date=datetime(2026, 1, 1, tzinfo=UTC),
    max_active_runs=1,
    catchup=False,
    template_searchpath=[os.path.join(os.path.dirname(__file__), "sql")],
    params={"ns": "ice", "min_k": 1},
) as dag:
    materialized_view(
        target="ice.view",
        sql="ice_view.sql",
        iceberg_conn_id="iceberg_default",
        spark_conn_id="ct_spark_extra_jars",
        group_id="view",
        poke_interval=1,
    )
