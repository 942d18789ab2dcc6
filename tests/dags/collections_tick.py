"""The collections tick DAG from the factory (used by tests/test_collections_airflow.py).

Compaction and expiry are tuned so a test sees them act: two small files are
enough to compact, and no retention beyond the read holds.
"""

from __future__ import annotations

from airflow_provider_ct.collections import MaintenanceSettings
from airflow_provider_ct.tick_dag import collections_dag

dag = collections_dag(
    dag_id="ct_collections_tick",
    namespaces=["tick"],
    maintenance=MaintenanceSettings(retention_ms=0, min_files=2),
)
