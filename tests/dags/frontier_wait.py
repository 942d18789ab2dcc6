"""A DAG whose only task is a deferrable FrontierSensor (used by tests/test_dags.py)."""

from __future__ import annotations

import os
from datetime import datetime

from airflow.sdk import DAG

from airflow_provider_ct import FrontierSensor

with DAG("frontier_wait", schedule=None, start_date=datetime(2026, 1, 1)) as dag:
    FrontierSensor(
        task_id="wait",
        tables=["wait.input"],
        time=os.environ.get("CT_TEST_WAIT_TIME", "0"),
        deferrable=True,
        poke_interval=1,
        timeout=120,
    )
