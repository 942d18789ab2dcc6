"""The DAGs of bench/tick_bench.py: the 22 TPC-H queries as views, one DAG per column.

``dag.test()`` runs only DAGs its bundle (the DAGs folder) defines, so the
bench points ``AIRFLOW__CORE__DAGS_FOLDER`` here and describes the views in
a JSON file named by ``CT_TICK_BENCH_SPEC``: for each DAG (one per column
of the bench: an engine and a ``refresh``) its id, engine, ``refresh``
(``auto``, ``full``...), whether mint, write and append are one task
(``fuse_steps``), target namespace and ``{view name: Spark SQL}``.
Without that variable this file defines no DAG (it is harmless in any
other DAGs folder).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from airflow.sdk import DAG

from airflow_provider_ct import materialized_view
from bench.bench_env import load_dags

SPEC_ENV = "CT_TICK_BENCH_SPEC"


def build_dag(spec: dict[str, Any]) -> DAG:
    """One DAG holding every view of ``spec``, all independent of each other.

    No schedule: the bench triggers each tick with ``dag.test(logical_date=T)``
    and the view ticks at ``T``. The inputs are external tables on the 1 s
    wall-clock policy, so the sensor passes once ``T`` is a second old.
    """
    with DAG(
        dag_id=spec["dag_id"],
        schedule=None,
        start_date=datetime(2026, 1, 1),
        catchup=False,
        max_active_runs=1,
    ) as dag:
        for name, sql in spec["views"].items():
            materialized_view(
                target=f"{spec['namespace']}.{name}",
                sql=sql,
                group_id=name,
                poke_interval=1,
                engine=spec["engine"],
                fuse_steps=bool(spec.get("fuse_steps")),
                refresh=str(spec.get("refresh", "auto")),
                warm_idle_timeout=float(spec.get("warm_idle_timeout", 600)),
            )
    return dag


DAGS = load_dags(SPEC_ENV, build_dag)
globals().update(DAGS)
