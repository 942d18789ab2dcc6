"""A folder of SQL files as one DAG: ``pipelines/shop_sql``, in Spark Declarative Pipelines' format.

``sql_pipeline`` reads the folder (its ``spark-pipeline.yml`` and SQL
files), resolves every name against the catalog and builds one group per
dataset, wired by what each reads: bronze (a streaming table: a continual
task over the landed events) -> silver (a view) -> gold (a view, through a
temporary view). Every run lands a small batch of events at its tick time
first (``land_events``), then ticks every dataset at that same time.
Trigger it; the params (Trigger dialog) select full refreshes and subsets.
See docs/pipelines.md.

The folder's input ``shop_sql.landed_events`` must exist when this file is
parsed (``make demo`` creates it: ``sql_pipeline_landing.create_landing``).
"""

from __future__ import annotations

import os
import sys
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from airflow.sdk import task
from sql_pipeline_landing import land_events

from airflow_provider_ct import IcebergCatalogHook, sql_pipeline
from airflow_provider_ct.operators._common import tick_time

#: ``warm`` in ``make demo``: every dataset's job runs on one long-lived Spark driver.
ENGINE = os.environ.get("CT_EXAMPLE_ENGINE") or None

dag = sql_pipeline("pipelines/shop_sql", factory_kwargs={"engine": ENGINE} if ENGINE else {})
roots = [t for t in dag.tasks if not t.upstream_list]
with dag:

    @task(task_id="land_events")
    def land(**context: Any) -> int:
        """This run's order events, landed at its tick time."""
        return land_events(IcebergCatalogHook().get_catalog(), tick_time(context))

    landed = land()
    for root in roots:
        landed >> root
