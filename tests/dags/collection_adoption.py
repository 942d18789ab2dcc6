"""Collections registered over tables the user created first (tests/test_collection_adoption.py).

The test creates ``adopt.audit`` and ``adopt.status`` with PyIceberg, both
partitioned by ``service`` and holding rows, then runs ``adoption_dag``
with ``dag.test()``: registering adopts them (``audit`` with its columns
declared, ``status`` taken as it is), then a blind write, a differential
write and a tick run as for collections the package created.
``mismatch_dag`` declares columns ``adopt.mismatch`` does not have.
"""

from __future__ import annotations

from datetime import datetime

from airflow.sdk import DAG

from airflow_provider_ct.operators.collections import (
    BlindWriteOperator,
    DifferentialWriteOperator,
    RegisterCollectionOperator,
)
from airflow_provider_ct.operators.collections_upkeep import TickCollectionsOperator

AUDIT_COLUMNS = {"service": "string", "event": "string", "seq": "int64"}
#: What the DAG writes after adopting (the test's model adds them to the rows it wrote).
BLIND_ROWS = [["api", "deploy", 100], ["billing", "restart", 101]]
#: The status collection's desired state: one of the adopted rows changes.
DESIRED = [{"service": "api", "state": "degraded"}, {"service": "search", "state": "up"}]

with DAG(
    "ct_collection_adoption",
    schedule=None,
    start_date=datetime(2026, 1, 1),
    catchup=False,
    max_active_runs=1,
) as adoption_dag:
    register_audit = RegisterCollectionOperator(
        task_id="register_audit",
        collection="adopt.audit",
        columns=AUDIT_COLUMNS,
        kind="append-only",
    )
    register_status = RegisterCollectionOperator(
        task_id="register_status", collection="adopt.status", kind="differential"
    )
    blind = BlindWriteOperator(task_id="blind", collection="adopt.audit", rows=BLIND_ROWS)
    update = DifferentialWriteOperator(task_id="update", collection="adopt.status", desired=DESIRED)
    tick = TickCollectionsOperator(task_id="tick", namespaces=["adopt"])
    register_audit >> blind >> tick
    register_status >> update >> tick

with DAG(
    "ct_collection_adoption_mismatch",
    schedule=None,
    start_date=datetime(2026, 1, 1),
    catchup=False,
) as mismatch_dag:
    RegisterCollectionOperator(
        task_id="register",
        collection="adopt.mismatch",
        columns={"service": "string", "event": "int64"},
        kind="append-only",
    )
