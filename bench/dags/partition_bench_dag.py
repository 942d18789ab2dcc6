"""The DAGs of bench/partition_bench.py: one daily-totals view per ``refresh``, one DAG each.

``dag.test()`` runs only DAGs its bundle (the DAGs folder) defines, so the
bench points ``AIRFLOW__CORE__DAGS_FOLDER`` here and describes its DAGs in a
JSON file named by ``CT_PARTITION_BENCH_SPEC``: a list of ``{dag_id,
target, sql, refresh, engine, partition_by}``. Without that variable this
file defines no DAG (it is harmless in any other DAGs folder, and beside
bench/dags/tick_bench_dag.py).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from airflow.sdk import DAG

from airflow_provider_ct import materialized_view
from bench.bench_env import load_dags

SPEC_ENV = "CT_PARTITION_BENCH_SPEC"


def build_dag(spec: dict[str, Any]) -> DAG:
    """One DAG holding the one view of ``spec``.

    No schedule: the bench triggers each tick with ``dag.test(logical_date=T)``
    and the view ticks at ``T``. The input is an external table on the 1 s
    wall-clock policy, so the mint passes once ``T`` is a second old.
    """
    with DAG(
        dag_id=spec["dag_id"],
        schedule=None,
        start_date=datetime(2026, 1, 1),
        catchup=False,
        max_active_runs=1,
    ) as dag:
        materialized_view(
            target=spec["target"],
            sql=spec["sql"],
            group_id="daily",
            poke_interval=1,
            engine=spec["engine"],
            refresh=str(spec["refresh"]),
            partition_by=list(spec["partition_by"]),
            warm_idle_timeout=600,
        )
    return dag


DAGS = load_dags(SPEC_ENV, build_dag)
globals().update(DAGS)
