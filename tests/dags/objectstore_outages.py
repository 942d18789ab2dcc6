"""Definitions whose Spark jobs ``tests/test_objectstore_outages.py`` runs into store outages.

Each DAG reads a namespace of its own on the REST catalog of the test's own
SeaweedFS server (Airflow's default Iceberg connection), and takes each
tick's time from ``dag_run.conf["time"]``. No retries: the test restarts
the server and runs the tick again, as Airflow's retry would.
"""

from __future__ import annotations

from datetime import datetime

from airflow.sdk import DAG

from airflow_provider_ct import continual_task, materialized_view

#: An in-place view: its aggregates kept per group (a state table beside the target).
IN_PLACE_SQL = "SELECT kind, COUNT(*) AS n, SUM(amount) AS total FROM {ns}.events GROUP BY kind"
#: A view Spark computes in full at every tick (a window function).
SPARK_SQL = (
    "SELECT id, kind, amount, "
    "ROW_NUMBER() OVER (PARTITION BY kind ORDER BY id) AS rank_in_kind FROM {ns}.events"
)


def _dag(dag_id: str) -> DAG:
    return DAG(
        dag_id=dag_id,
        schedule=None,
        start_date=datetime(2026, 1, 1),
        catchup=False,
        max_active_runs=1,
    )


def _view(dag_id: str, ns: str, sql: str, engine: str) -> DAG:
    with _dag(dag_id) as dag:
        materialized_view(
            target=f"{ns}.view",
            sql=sql.format(ns=ns),
            time="{{ dag_run.conf['time'] }}",
            engine=engine,
            deferrable=False,
            poke_interval=1,
        )
    return dag


def _continual(dag_id: str, ns: str, engine: str) -> DAG:
    """A continual task over the input's rows, ``SNAPSHOT``: the first tick reads what it holds."""
    definition = (
        f"CREATE CONTINUAL TASK {ns}.out (id BIGINT, kind STRING, amount BIGINT) "
        f"ON INPUT {ns}.events WITH (SNAPSHOT = true) AS (\n"
        f"    INSERT INTO {ns}.out SELECT id, kind, amount * 2 FROM {ns}.events;\n)"
    )
    with _dag(dag_id) as dag:
        continual_task(
            definition=definition,
            time="{{ dag_run.conf['time'] }}",
            engine=engine,
            deferrable=False,
            poke_interval=1,
        )
    return dag


outage_in_place_submit = _view("outage_in_place_submit", "out_ips", IN_PLACE_SQL, "spark-submit")
outage_in_place_warm = _view("outage_in_place_warm", "out_ipw", IN_PLACE_SQL, "warm")
outage_spark_submit = _view("outage_spark_submit", "out_sps", SPARK_SQL, "spark-submit")
outage_spark_warm = _view("outage_spark_warm", "out_spw", SPARK_SQL, "warm")
outage_continual_submit = _continual("outage_continual_submit", "out_cts", "spark-submit")
outage_continual_warm = _continual("outage_continual_warm", "out_ctw", "warm")
