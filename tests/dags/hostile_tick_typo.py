"""A tick DAG whose namespace is a typo (``opz`` for ``ops``), for tests/test_hostile_input.py.

Its runs must fail naming the namespace instead of ticking nothing and succeeding.
"""

from __future__ import annotations

from airflow_provider_ct.collections import MaintenanceSettings
from airflow_provider_ct.tick_dag import collections_dag

dag = collections_dag(
    dag_id="ct_hostile_tick_typo",
    namespaces=["opz"],
    maintenance=MaintenanceSettings(expire=False, compact=False),
)
