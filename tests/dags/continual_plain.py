"""Continual tasks over plain Iceberg inputs (no frontier of ours), ticked at a given time.

``tests/test_continual_plain_inputs.py`` creates the inputs itself, with
PyIceberg or Spark SQL, so their upper is the wall clock: each run gets its
tick time from ``dag_run.conf["time"]`` (a time the test knows is sealed).
The task is Materialize's stream-table join (``ct_stream_table_join.slt``).
"""

from __future__ import annotations

from datetime import datetime

from airflow.sdk import DAG

from airflow_provider_ct import continual_task

#: The namespace of each DAG's tables; the DAG id is ``ct_plain_<namespace>``.
NAMESPACES = {"accct": False, "accsp": False, "accsn": True}  # namespace -> SNAPSHOT


def definition(namespace: str, snapshot: bool) -> str:
    """The stream-table join of ``<namespace>.big`` with the reference ``<namespace>.small``."""
    options = "WITH (SNAPSHOT = true) " if snapshot else "WITH (SNAPSHOT = false) "
    return (
        f"CREATE CONTINUAL TASK {namespace}.stj (key INT, val STRING) "
        f"ON INPUT {namespace}.big {options}AS (\n"
        f"    INSERT INTO {namespace}.stj SELECT b.key, s.val FROM {namespace}.big b "
        f"JOIN {namespace}.small s ON b.key = s.key;\n)"
    )


def _dag(namespace: str, snapshot: bool) -> DAG:
    with DAG(
        dag_id=f"ct_plain_{namespace}",
        schedule=None,
        start_date=datetime(2026, 1, 1),
        catchup=False,
        max_active_runs=1,
    ) as dag:
        continual_task(
            definition=definition(namespace, snapshot),
            time="{{ dag_run.conf['time'] }}",
            engine="warm",
            deferrable=False,
            poke_interval=1,
        )
    return dag


ct_plain_accct = _dag("accct", NAMESPACES["accct"])
ct_plain_accsp = _dag("accsp", NAMESPACES["accsp"])
ct_plain_accsn = _dag("accsn", NAMESPACES["accsn"])
