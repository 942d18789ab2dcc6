"""Collection writes fed by an upstream task's XCom (used by tests/test_collections_airflow.py)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from airflow.sdk import DAG, task

from airflow_provider_ct.operators.collections import (
    BlindWriteOperator,
    DifferentialWriteOperator,
    RegisterCollectionOperator,
)

COLUMNS = {"k": "int64", "v": "string"}

with DAG("ct_collections_writes", schedule=None, start_date=datetime(2026, 1, 1)) as dag:

    @task
    def produce() -> list[dict[str, Any]]:
        return [{"k": 1, "v": "a"}, {"k": 2, "v": "b"}]

    register_log = RegisterCollectionOperator(
        task_id="register_log", collection="wr.log", columns=COLUMNS, kind="append-only"
    )
    register_state = RegisterCollectionOperator(
        task_id="register_state", collection="wr.state", columns=COLUMNS, kind="differential"
    )
    rows = produce()
    blind = BlindWriteOperator(task_id="blind", collection="wr.log", rows_task_id="produce")
    desired = DifferentialWriteOperator(
        task_id="desired", collection="wr.state", desired_task_id="produce"
    )
    update = DifferentialWriteOperator(
        task_id="update",
        collection="wr.state",
        retract=[{"k": 1, "v": "a"}],
        insert=[[3, "c"]],
    )
    [register_log, register_state] >> rows
    rows >> blind
    rows >> desired >> update
