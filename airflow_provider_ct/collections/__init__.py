"""Storage-managed collections: append-only and differential, ticking, maintenance.

Materialize keeps its own small collections (introspection, catalog state)
in persist shards it writes itself; these are the same for Iceberg tables
written through compare-and-append (docs/collections.md):

* :class:`AppendOnlyCollection`: blind writes that always land, batched;
* :class:`DifferentialCollection`: state the desired contents, the table is
  corrected to match;
* :func:`tick_collections` / :class:`Ticker`: advance every collection's upper
  to now; :func:`close_collection` seals one for good;
* :func:`register_collection` creates a collection, or adopts a table the
  user created first (:mod:`.adoption`);
* read-only mode per collection (:func:`set_read_only`) or deployment
  (``CT_READ_ONLY``);
* :func:`maintain`: compaction (:func:`compact`), snapshot expiry
  (:func:`expire_snapshots`) and the staging sweep, honouring read holds
  (:func:`register_reader`).

Nothing here imports Airflow; the operators are in
:mod:`airflow_provider_ct.operators.collections` (registration and writes)
and :mod:`airflow_provider_ct.operators.collections_upkeep` (ticking,
maintenance and read holds).
"""

from __future__ import annotations

from airflow_provider_ct.collections.adoption import Adoption, adopt_table, check_schema_fits
from airflow_provider_ct.collections.append_only import (
    DEFAULT_BATCH_INTERVAL_MS,
    AppendOnlyCollection,
    WriteReceipt,
    blind_write,
)
from airflow_provider_ct.collections.compaction import CompactionReport, compact
from airflow_provider_ct.collections.differential import (
    DifferentialCollection,
    PendingDesired,
    SyncResult,
)
from airflow_provider_ct.collections.expiry import (
    DEFAULT_RETENTION_MS,
    ExpiryPlan,
    ExpiryReport,
    expire_snapshots,
    plan_expiry,
    readable_since,
)
from airflow_provider_ct.collections.holds import (
    HoldTime,
    ReadHold,
    hold_time,
    read_holds,
    register_reader,
    release_reader,
)
from airflow_provider_ct.collections.maintenance import (
    MaintenanceReport,
    MaintenanceSettings,
    maintain,
)
from airflow_provider_ct.collections.registration import (
    Registration,
    register,
    register_collection,
)
from airflow_provider_ct.collections.registry import (
    CollectionInfo,
    CollectionKeys,
    CollectionKind,
    close_collection,
    deployment_read_only,
    list_collections,
    load_collection,
    set_read_only,
)
from airflow_provider_ct.collections.ticker import (
    DEFAULT_CHECKPOINT_MS,
    DEFAULT_TICK_INTERVAL_MS,
    Ticker,
    TickOutcome,
    TickReport,
    tick_collections,
    tick_table,
)
from airflow_provider_ct.core.settings import READ_ONLY_ENV

__all__ = [
    "DEFAULT_BATCH_INTERVAL_MS",
    "DEFAULT_CHECKPOINT_MS",
    "DEFAULT_RETENTION_MS",
    "DEFAULT_TICK_INTERVAL_MS",
    "READ_ONLY_ENV",
    "Adoption",
    "AppendOnlyCollection",
    "CollectionInfo",
    "CollectionKeys",
    "CollectionKind",
    "CompactionReport",
    "DifferentialCollection",
    "ExpiryPlan",
    "ExpiryReport",
    "HoldTime",
    "MaintenanceReport",
    "MaintenanceSettings",
    "PendingDesired",
    "ReadHold",
    "Registration",
    "SyncResult",
    "TickOutcome",
    "TickReport",
    "Ticker",
    "WriteReceipt",
    "adopt_table",
    "blind_write",
    "check_schema_fits",
    "close_collection",
    "compact",
    "deployment_read_only",
    "expire_snapshots",
    "hold_time",
    "list_collections",
    "load_collection",
    "maintain",
    "plan_expiry",
    "read_holds",
    "readable_since",
    "register",
    "register_collection",
    "register_reader",
    "release_reader",
    "set_read_only",
    "tick_collections",
    "tick_table",
]
