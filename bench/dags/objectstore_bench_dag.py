"""The DAGs of bench/objectstore_bench.py: one view and one continual task on the warm engine.

``dag.test()`` runs only DAGs its bundle (the DAGs folder) defines, so the
bench points ``AIRFLOW__CORE__DAGS_FOLDER`` here. The storage is not in the
DAGs: they read and write through Airflow's default Iceberg connection,
which the bench points first at a SQLite catalog on a local folder, then at
the REST catalog of a SeaweedFS server with S3 storage, so both storages
run exactly the same tasks. Each tick's time comes in ``dag_run.conf["time"]``
(the inputs are plain Iceberg tables, sealed by the wall clock).
"""

from __future__ import annotations

from datetime import datetime

from airflow.sdk import DAG

from airflow_provider_ct import continual_task, materialized_view

#: The namespace of the bench's tables (one per catalog, so the same name on both storages).
NAMESPACE = "osbench"
VIEW_SQL = f"SELECT kind, COUNT(*) AS n, SUM(amount) AS total FROM {NAMESPACE}.events GROUP BY kind"
#: Materialize's stream-table join: rows inserted into ``big`` joined with ``small`` as it is.
TASK_SQL = (
    f"CREATE CONTINUAL TASK {NAMESPACE}.stj (key INT, val STRING) ON INPUT {NAMESPACE}.big "
    "WITH (SNAPSHOT = false) AS (\n"
    f"    INSERT INTO {NAMESPACE}.stj SELECT b.key, s.val FROM {NAMESPACE}.big b "
    f"JOIN {NAMESPACE}.small s ON b.key = s.key;\n)"
)


def _dag(dag_id: str) -> DAG:
    return DAG(
        dag_id=dag_id,
        schedule=None,
        start_date=datetime(2026, 1, 1),
        catchup=False,
        max_active_runs=1,
    )


with _dag("objectstore_bench_view") as objectstore_bench_view:
    materialized_view(
        target=f"{NAMESPACE}.totals",
        sql=VIEW_SQL,
        time="{{ dag_run.conf['time'] }}",
        engine="warm",
        deferrable=False,
        poke_interval=1,
    )

with _dag("objectstore_bench_continual") as objectstore_bench_continual:
    continual_task(
        definition=TASK_SQL,
        time="{{ dag_run.conf['time'] }}",
        engine="warm",
        deferrable=False,
        poke_interval=1,
    )
