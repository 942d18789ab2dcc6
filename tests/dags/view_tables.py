"""Views with a table layout, a rival definition, and definitions that change.

``tests/test_view_tables.py`` creates the input ``vt.events`` with Spark SQL
and ticks these DAGs at times (and, for the changing ones, queries) it
passes in ``dag_run.conf``.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from airflow.sdk import DAG

from airflow_provider_ct import materialized_view

DAILY_SQL = (
    "SELECT CAST(ts AS DATE) AS day, country, COUNT(*) AS n, SUM(amount) AS total "
    "FROM vt.events GROUP BY CAST(ts AS DATE), country"
)


def _dag(dag_id: str, **view: Any) -> DAG:
    with DAG(
        dag_id=dag_id,
        schedule=None,
        start_date=datetime(2026, 1, 1),
        catchup=False,
        max_active_runs=1,
    ) as dag:
        materialized_view(
            time="{{ dag_run.conf['time'] }}",
            engine="warm",
            deferrable=False,
            poke_interval=1,
            group_id="daily",
            **view,
        )
    return dag


partitioned = _dag(
    "vt_partitioned",
    target="vt.daily",
    sql=DAILY_SQL,
    partition_by=["month(day)", "bucket(2, country)"],
    sort_by=["day DESC", "country"],
    table_properties={"comment": "daily totals per country"},
)
#: A second definition of the same table, in another DAG: refused.
rival = _dag("vt_rival", target="vt.daily", sql=DAILY_SQL)
#: One view per ``on_schema_change`` mode, its query given per run.
changing = {
    mode: _dag(
        f"vt_{mode}",
        target=f"vt.shape_{mode}",
        sql="{{ dag_run.conf['sql'] }}",
        on_schema_change=mode,
    )
    for mode in ("evolve", "fail", "recreate")
}
vt_evolve, vt_fail, vt_recreate = changing["evolve"], changing["fail"], changing["recreate"]
