"""A medallion pipeline of continual tables, each layer ticking on its inputs' asset events.

* **bronze** ``<ns>.order_events``: an append-only managed collection of
  order events, blind-written by the ``<prefix>_bronze`` DAG (rows from the
  run's ``conf["rows"]``, else a small deterministic batch) and ticked by
  ``<prefix>_bronze_ticks`` (``collections_dag``);
* **silver** ``<ns>.orders_latest``: a continual task, the latest event per order;
* **gold** ``<ns>.revenue_daily``: a view, revenue per customer and day;
* ``<ns>.revenue_by_day``: a view over the gold view.

Each downstream DAG is scheduled on its input's asset and ticks with
``time="sealed"``: at the latest time its input has sealed, read from the
triggering asset events and checked against the table (docs/pipelines.md).

This module only defines the factory; ``medallion.py`` builds the DAGs
(importing this module creates no DAG, so tests can build their own copy).
"""

from __future__ import annotations

import random
from datetime import datetime, timedelta
from typing import Any

from airflow.sdk import DAG, task

from airflow_provider_ct import (
    BlindWriteOperator,
    RegisterCollectionOperator,
    collections_dag,
    continual_task,
    continual_task_input_assets,
    materialized_view,
    view_input_assets,
)
from airflow_provider_ct.collections.maintenance import MaintenanceSettings
from airflow_provider_ct.hooks.iceberg import IcebergCatalogHook
from airflow_provider_ct.operators._common import catalog_name_of

START = datetime(2026, 1, 1)
BRONZE_COLUMNS = {
    "order_id": "int64",
    "customer": "string",
    "day": "string",
    "amount_cents": "int64",
    "status": "string",
    "seq": "int64",
}

# [START silver]
# The latest event of each order (events of one order carry increasing seq).
# SNAPSHOT: the events already in bronze at the first tick count too.
SILVER = """
CREATE CONTINUAL TASK orders_latest (order_id BIGINT, customer TEXT, day TEXT,
                                     amount_cents BIGINT, status TEXT, seq BIGINT)
ON INPUT order_events WITH (SNAPSHOT = true) AS (
    DELETE FROM orders_latest WHERE order_id IN (SELECT order_id FROM order_events);
    INSERT INTO orders_latest
    SELECT e.order_id, e.customer, e.day, e.amount_cents, e.status, e.seq
    FROM order_events AS e
    JOIN (SELECT order_id, max(seq) AS seq FROM order_events GROUP BY order_id) AS m
      ON e.order_id = m.order_id AND e.seq = m.seq;
)
"""
# [END silver]

# [START gold]
GOLD = """
SELECT customer, day, COUNT(*) AS orders, SUM(amount_cents) AS revenue_cents
FROM {ns}.orders_latest WHERE status <> 'cancelled'
GROUP BY customer, day
"""
# [END gold]

# [START by_day]
BY_DAY = """
SELECT day, COUNT(*) AS customers, SUM(revenue_cents) AS revenue_cents
FROM {ns}.revenue_daily
GROUP BY day
"""
# [END by_day]


def sample_events(seed: int, count: int = 6) -> list[dict[str, Any]]:
    """A small deterministic batch of order events (the demo's writes)."""
    rng = random.Random(seed)
    return [
        {
            "order_id": rng.randint(1, 12),
            "customer": rng.choice(["ada", "grace", "linus", "radia"]),
            "day": f"2026-11-{rng.randint(20, 23)}",
            "amount_cents": rng.randint(100, 9_999),
            "status": rng.choice(["placed", "placed", "shipped", "cancelled"]),
            "seq": seed * 100 + i,
        }
        for i in range(count)
    ]


def _downstream(dag_id: str, schedule: Any, **kwargs: Any) -> DAG:
    return DAG(
        dag_id,
        schedule=schedule,
        start_date=START,
        catchup=False,
        max_active_runs=1,  # ticks land in order; queued events fold into the next run
        tags=["ct", "medallion"],
        **kwargs,
    )


def medallion_dags(
    *,
    namespace: str = "medallion",
    prefix: str = "medallion",
    engine: str | None = None,
    tick_schedule: Any = timedelta(minutes=5),
    iceberg_conn_id: str = IcebergCatalogHook.default_conn_name,
    **dag_kwargs: Any,
) -> dict[str, DAG]:
    """The pipeline's five DAGs by id (expose them at module level of a DAG file)."""
    catalog = catalog_name_of(iceberg_conn_id)
    bronze = f"{namespace}.order_events"
    dags: dict[str, DAG] = {}

    with DAG(
        f"{prefix}_bronze",
        schedule=None,
        start_date=START,
        max_active_runs=1,
        tags=["ct", "medallion"],
        **dag_kwargs,
    ) as dags[f"{prefix}_bronze"]:

        @task
        def order_events(**context: Any) -> list[dict[str, Any]]:
            conf = context["dag_run"].conf or {}
            return list(conf.get("rows") or sample_events(int(context["ts_nodash"][-6:])))

        register = RegisterCollectionOperator(
            task_id="register",
            collection=bronze,
            columns=BRONZE_COLUMNS,
            kind="append-only",
            iceberg_conn_id=iceberg_conn_id,
        )
        rows = order_events()
        write = BlindWriteOperator(
            task_id="write",
            collection=bronze,
            rows_task_id="order_events",
            iceberg_conn_id=iceberg_conn_id,
        )
        [register, rows] >> write

    dags[f"{prefix}_bronze_ticks"] = collections_dag(
        dag_id=f"{prefix}_bronze_ticks",
        schedule=tick_schedule,
        namespaces=[namespace],
        maintenance=MaintenanceSettings(expire=False, compact=False),
        iceberg_conn_id=iceberg_conn_id,
        tags=["ct", "medallion"],
        **dag_kwargs,
    )

    # [START silver_dag]
    silver_inputs = continual_task_input_assets(SILVER, namespace, catalog)
    silver_id = f"{prefix}_silver"
    with _downstream(silver_id, silver_inputs[:1], **dag_kwargs) as dags[silver_id]:
        continual_task(
            definition=SILVER,
            namespace=namespace,
            time="sealed",
            engine=engine,
            iceberg_conn_id=iceberg_conn_id,
        )
    # [END silver_dag]

    gold_sql = GOLD.format(ns=namespace)
    with _downstream(f"{prefix}_gold", view_input_assets(gold_sql, catalog), **dag_kwargs) as dags[
        f"{prefix}_gold"
    ]:
        materialized_view(
            target=f"{namespace}.revenue_daily",
            sql=gold_sql,
            time="sealed",
            engine=engine,
            iceberg_conn_id=iceberg_conn_id,
        )

    by_day_sql = BY_DAY.format(ns=namespace)
    with _downstream(
        f"{prefix}_by_day", view_input_assets(by_day_sql, catalog), **dag_kwargs
    ) as dags[f"{prefix}_by_day"]:
        materialized_view(
            target=f"{namespace}.revenue_by_day",
            sql=by_day_sql,
            time="sealed",
            engine=engine,
            iceberg_conn_id=iceberg_conn_id,
        )
    return dags
