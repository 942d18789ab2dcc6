"""A view whose mint, write and append run as one task (``fuse_steps=True``).

``tests/test_fused_tick.py`` writes the inputs itself and ticks this DAG
through ``dag.test()`` on the warm engine.
"""

from __future__ import annotations

from datetime import datetime

from airflow.sdk import DAG

from airflow_provider_ct import materialized_view

SQL = (
    "SELECT b.v, COUNT(*) AS n, SUM(a.k) AS total "
    "FROM fz.a AS a JOIN fz.b AS b ON a.k = b.k GROUP BY b.v"
)

with DAG(
    dag_id="fused_view",
    schedule=None,
    start_date=datetime(2026, 1, 1),
    catchup=False,
    max_active_runs=1,
) as dag:
    materialized_view(target="fz.view", sql=SQL, fuse_steps=True, engine="warm", poke_interval=1)
