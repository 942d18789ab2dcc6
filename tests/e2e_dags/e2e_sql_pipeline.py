"""The SQL folder ``tests/pipelines/shop`` as a DAG on the e2e stack's real Airflow.

``sql_pipeline_backfill``: the folder's DAG (``sql_pipeline``) with an
hourly schedule closed in the past, plus a ``feed`` task before its groups
that changes the inputs at the run's tick time
(``tests/pipelines/shop_feed.py``). The inputs must exist when this file is
parsed: the e2e stack creates them before Airflow starts.
"""

from __future__ import annotations

import sys
from datetime import timedelta
from pathlib import Path
from typing import Any

from airflow.sdk import task

from airflow_provider_ct import IcebergCatalogHook, sql_pipeline
from airflow_provider_ct.operators._common import tick_time

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the DAG processor's import

from tests.pipelines.shop_feed import (
    INTERVALS,
    SHOP,
    SQL_PIPELINE_DAG,
    START,
    feed,
)

dag = sql_pipeline(
    SHOP,
    dag_id=SQL_PIPELINE_DAG,
    schedule=timedelta(hours=1),
    start_date=START,
    end_date=START + timedelta(hours=INTERVALS),
    is_paused_upon_creation=True,
    tags=["ct", "e2e", "sql-pipeline"],
    factory_kwargs={"engine": "warm", "poke_interval": 2},
)
roots = [t for t in dag.tasks if not t.upstream_list]
with dag:

    @task(task_id="feed")
    def feed_inputs(**context: Any) -> None:
        feed(IcebergCatalogHook().get_catalog(), tick_time(context))

    fed = feed_inputs()
    for root in roots:
        fed >> root
