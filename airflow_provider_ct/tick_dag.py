"""``collections_dag``: the DAG that ticks every collection and maintains them.

One run per interval (default every minute): ``tick`` advances the upper of
every registered collection to now, so they stay readable at recent times
even when nothing is written; ``maintain`` then compacts small files,
expires snapshots no read hold or retention keeps (ticks create a snapshot
per collection per run, so the two belong together) and sweeps what crashed
writers left staged, as :class:`MaintenanceSettings` says. ``maintain`` runs even
when ``tick`` failed for some collection (``trigger_rule="all_done"``).
``max_active_runs=1`` and no catch-up: a missed tick is simply the next one.
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
from collections.abc import Sequence
from typing import Any

from airflow.sdk import DAG

from airflow_provider_ct.collections.maintenance import MaintenanceSettings
from airflow_provider_ct.collections.ticker import DEFAULT_CHECKPOINT_MS
from airflow_provider_ct.hooks.iceberg import IcebergCatalogHook
from airflow_provider_ct.operators.collections_upkeep import (
    MaintainTablesOperator,
    TickCollectionsOperator,
)

DEFAULT_SCHEDULE = _dt.timedelta(minutes=1)


def collections_dag(
    *,
    dag_id: str = "ct_collections",
    schedule: Any = DEFAULT_SCHEDULE,
    start_date: _dt.datetime | None = None,
    namespaces: Sequence[str] | None = None,
    maintenance: MaintenanceSettings | None = None,
    maintain_tables: Sequence[str] = (),
    checkpoint_ms: int | None = DEFAULT_CHECKPOINT_MS,
    read_only: bool | None = None,
    iceberg_conn_id: str = IcebergCatalogHook.default_conn_name,
    **dag_kwargs: Any,
) -> DAG:
    """Build the tick DAG (call at module level of a DAG file and expose the result).

    :param schedule: how often to tick (default every minute).
    :param namespaces: namespaces whose collections to tick (default: all).
        Each must exist and hold a registered collection, else the run fails
        naming it (a typo would otherwise tick nothing and succeed).
    :param maintenance: maintenance settings; default :class:`MaintenanceSettings`
        (one hour of retention, compaction and the sweep on); every field
        reaches the maintain task. ``expire=False`` and ``compact=False``
        tick only: no maintain task, so no sweep whatever ``sweep`` says.
    :param maintain_tables: further managed tables (views, continual tasks)
        to maintain along.
    :param checkpoint_ms: see :func:`~airflow_provider_ct.collections.tick_collections`.
    :param read_only: the deployment's mode for every task; default ``CT_READ_ONLY``.
    """
    settings = maintenance or MaintenanceSettings()
    dag_kwargs.setdefault("catchup", False)
    dag_kwargs.setdefault("max_active_runs", 1)
    dag_kwargs.setdefault("tags", ["ct", "collections"])
    with DAG(
        dag_id,
        schedule=schedule,
        start_date=start_date or _dt.datetime(2026, 1, 1, tzinfo=_dt.UTC),
        **dag_kwargs,
    ) as dag:
        tick = TickCollectionsOperator(
            task_id="tick",
            namespaces=namespaces,
            checkpoint_ms=checkpoint_ms,
            read_only=read_only,
            iceberg_conn_id=iceberg_conn_id,
        )
        if settings.expire or settings.compact:
            maintain = MaintainTablesOperator(
                task_id="maintain",
                namespaces=namespaces,
                tables=maintain_tables,
                read_only=read_only,
                iceberg_conn_id=iceberg_conn_id,
                trigger_rule="all_done",
                **_maintain_kwargs(settings),
            )
            tick >> maintain
    return dag


def _maintain_kwargs(settings: MaintenanceSettings) -> dict[str, Any]:
    """The maintain task's keywords: every field of ``settings``, by its own name.

    :class:`MaintainTablesOperator` takes one keyword per settings field, so
    passing them all (rather than a hand-kept list, which once left out
    ``sweep`` and ``sweep_grace_ms`` and so swept with the defaults whatever
    the settings said) means a field added to :class:`MaintenanceSettings`
    either reaches the task or fails at DAG-parse time as an unknown
    argument; it is never dropped silently.
    """
    return {f.name: getattr(settings, f.name) for f in dataclasses.fields(settings)}
