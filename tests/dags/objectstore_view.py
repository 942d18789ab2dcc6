"""Views whose tables live on S3 (``tests/test_objectstore_spark.py`` and
``tests/test_objectstore_rest.py`` tick them).

The tests point Airflow's default Iceberg connection at a catalog with an
``s3://`` warehouse (SQLite over a plain bucket, or the REST catalog over a
table bucket) and pass each tick's time in ``dag_run.conf["time"]``. Each
DAG reads a namespace of its own, so one REST catalog serves them all.
"""

from __future__ import annotations

from datetime import datetime

from airflow.sdk import DAG

from airflow_provider_ct import continual_task, materialized_view


def _view(dag_id: str, namespace: str, engine: str) -> DAG:
    sql = f"SELECT kind, COUNT(*) AS n, SUM(amount) AS total FROM {namespace}.events GROUP BY kind"
    with DAG(
        dag_id=dag_id,
        schedule=None,
        start_date=datetime(2026, 1, 1),
        catchup=False,
        max_active_runs=1,
    ) as dag:
        materialized_view(
            target=f"{namespace}.totals",
            sql=sql,
            time="{{ dag_run.conf['time'] }}",
            engine=engine,
            deferrable=False,
            poke_interval=1,
        )
    return dag


objectstore_view = _view("objectstore_view", "s3lake", "spark-submit")
objectstore_view_rest = _view("objectstore_view_rest", "restlake", "spark-submit")
objectstore_view_warm = _view("objectstore_view_warm", "warmlake", "warm")


def _continual(dag_id: str, namespace: str) -> DAG:
    """Materialize's stream-table join (``tests/dags/continual_plain.py``) on the warm engine."""
    from continual_plain import definition

    with DAG(
        dag_id=dag_id,
        schedule=None,
        start_date=datetime(2026, 1, 1),
        catchup=False,
        max_active_runs=1,
    ) as dag:
        continual_task(
            definition=definition(namespace, False),
            time="{{ dag_run.conf['time'] }}",
            engine="warm",
            deferrable=False,
            poke_interval=1,
        )
    return dag


objectstore_continual = _continual("objectstore_continual", "restct")
