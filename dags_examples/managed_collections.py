"""Managed collections: a service-status table, an audit log, and the tick DAG.

``ops.service_status`` is a *differential* collection: every five minutes a
task computes what it should hold (one row per service) and the table is
corrected to match. ``ops.audit_log`` is *append-only*: the same run
blind-writes one event per status change it saw. ``ct_collections`` ticks
every collection each minute, so both stay readable at recent times even
when nothing is written, and expires the snapshots the ticks create.

Set ``CT_READ_ONLY=1`` on a deployment to stop all writes and ticks: status
runs still succeed (their desired state waits and lands later), audit
writes fail loudly.
"""

from __future__ import annotations

import os
import zlib
from datetime import datetime, timedelta
from typing import Any

from airflow.sdk import DAG, task

from airflow_provider_ct import (
    BlindWriteOperator,
    DifferentialWriteOperator,
    RegisterCollectionOperator,
    collections_dag,
)

SERVICES = ("api", "billing", "search")
COLUMNS = {"service": "string", "state": "string"}
AUDIT_COLUMNS = {"service": "string", "event": "string", "at": "int64"}

#: ``off`` in ``make demo``: no time schedules, the demo triggers every run.
SCHEDULED = os.environ.get("CT_EXAMPLE_SCHEDULES", "on") != "off"

tick_dag = collections_dag(
    dag_id="ct_collections",
    namespaces=["ops"],
    **({} if SCHEDULED else {"schedule": None}),
)


def _flaky(service: str, quarter: int) -> bool:
    return zlib.crc32(f"{service}{quarter}".encode()) % 4 == 0


with DAG(
    "ops_service_status",
    schedule=timedelta(minutes=5) if SCHEDULED else None,
    start_date=datetime(2026, 1, 1),
    catchup=False,
    max_active_runs=1,
) as status_dag:
    register_status = RegisterCollectionOperator(
        task_id="register_status",
        collection="ops.service_status",
        columns=COLUMNS,
        kind="differential",
    )
    register_audit = RegisterCollectionOperator(
        task_id="register_audit",
        collection="ops.audit_log",
        columns=AUDIT_COLUMNS,
        kind="append-only",
    )

    @task
    def probe(data_interval_end: Any = None) -> list[dict[str, Any]]:
        """A deterministic stand-in for health checks: each service is up or degraded."""
        quarter = int(data_interval_end.timestamp()) // 900
        return [
            {"service": name, "state": "degraded" if _flaky(name, quarter) else "up"}
            for name in SERVICES
        ]

    @task
    def events(statuses: list[dict[str, Any]], data_interval_end: Any = None) -> list[Any]:
        at = int(data_interval_end.timestamp() * 1000)
        seen = [
            {"service": s["service"], "event": s["state"], "at": at}
            for s in statuses
            if s["state"] != "up"
        ]
        return seen or [{"service": "*", "event": "all up", "at": at}]

    statuses = probe()
    [register_status, register_audit] >> statuses
    desired = DifferentialWriteOperator(
        task_id="set_status", collection="ops.service_status", desired_task_id="probe"
    )
    audit = BlindWriteOperator(task_id="audit", collection="ops.audit_log", rows_task_id="events")
    statuses >> desired
    events(statuses) >> audit
