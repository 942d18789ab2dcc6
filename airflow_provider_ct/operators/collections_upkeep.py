"""Operators that keep collections current and bounded: tick, maintain, register readers.

Thin wrappers over :mod:`airflow_provider_ct.collections`; every decision
(times, retries, read-only mode, holds) is made there. Each returns a JSON
report as its XCom. The deployment's read-only mode comes from
``CT_READ_ONLY`` unless ``read_only=`` is passed.

Unlike the operators of :mod:`.collections`, which act on one named
collection, these act on whatever is registered when they run (every
collection of some namespaces, every input of a reader), usually from the
tick DAG (:func:`~airflow_provider_ct.tick_dag.collections_dag`).
:class:`RegisterReaderOperator` is here because a read hold only matters to
maintenance: it is what expiry must not take away.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from airflow.sdk import BaseOperator

from airflow_provider_ct.assets import frontier_alias
from airflow_provider_ct.collections.compaction import (
    DEFAULT_MIN_FILES,
    DEFAULT_SMALL_FILE_BYTES,
    DEFAULT_TARGET_FILE_BYTES,
)
from airflow_provider_ct.collections.expiry import DEFAULT_RETENTION_MS
from airflow_provider_ct.collections.holds import register_reader
from airflow_provider_ct.collections.maintenance import MaintenanceSettings, maintain
from airflow_provider_ct.collections.registry import list_collections
from airflow_provider_ct.collections.ticker import (
    ADVANCED,
    DEFAULT_CHECKPOINT_MS,
    tick_collections,
)
from airflow_provider_ct.core.frontier import now_ms
from airflow_provider_ct.core.sweep import DEFAULT_GRACE_MS
from airflow_provider_ct.exceptions import CollectionError
from airflow_provider_ct.hooks.iceberg import IcebergCatalogHook
from airflow_provider_ct.operators._collections_support import (
    announce_upper,
    name_list,
    optional_time,
)
from airflow_provider_ct.operators._common import read_only_default


class TickCollectionsOperator(BaseOperator):
    """Advance the upper of every registered collection to now (best-effort).

    Someone else advancing a collection first is fine; closed collections are
    skipped, and nothing is ticked in read-only mode. Pending desired states
    of differential collections land first. Fails (after ticking all) only
    when a collection raised an unexpected error.

    :param namespaces: namespaces to search for collections (default: all). Templated.
    :param time: the tick's time in epoch ms (templated); default the wall clock.
    :param checkpoint_ms: restate a quiet collection's contents at its upper
        once they are this old, so expiry can bound its history (``None``: never).
    :param read_only: the deployment's mode; default ``CT_READ_ONLY``.
    :param iceberg_conn_id: catalog connection (default: embedded catalog).

    Collections are found at run time, so their asset events go through one
    :class:`AssetAlias` outlet (default ``ct-frontier:ticks:<conn id>``):
    one event per collection whose upper this tick moved (``advanced``),
    none for those already current, contended, closed or read-only.
    """

    template_fields: Sequence[str] = ("namespaces", "time")
    ui_color = "#f7efe3"

    def __init__(
        self,
        *,
        namespaces: Sequence[str] | None = None,
        time: int | str | None = None,
        checkpoint_ms: int | None = DEFAULT_CHECKPOINT_MS,
        read_only: bool | None = None,
        iceberg_conn_id: str = IcebergCatalogHook.default_conn_name,
        **kwargs: Any,
    ) -> None:
        kwargs.setdefault("outlets", [frontier_alias(f"ticks:{iceberg_conn_id}")])
        super().__init__(**kwargs)
        self.namespaces = name_list(namespaces, "namespaces")
        self.time = time
        self.checkpoint_ms = checkpoint_ms
        self.read_only = read_only
        self.iceberg_conn_id = iceberg_conn_id

    def execute(self, context: Any) -> dict[str, Any]:
        hook = IcebergCatalogHook(self.iceberg_conn_id)
        tick_at = optional_time(self.time)
        report = tick_collections(
            hook.get_catalog(),
            namespaces=self.namespaces,
            now=now_ms() if tick_at is None else tick_at,
            read_only=read_only_default(self.read_only),
            checkpoint_ms=self.checkpoint_ms,
        )
        for outcome in report.outcomes:
            moved = outcome.status == ADVANCED or outcome.synced == "landed"
            if moved and outcome.upper is not None and not outcome.upper.is_empty:
                announce_upper(self, context, hook, outcome.collection, outcome.upper, kind="tick")
        if report.errors:
            raise CollectionError(f"ticking failed for {report.errors}")
        return report.to_json()


class MaintainTablesOperator(BaseOperator):
    """Compact small files, expire snapshots no reader needs, sweep staged leftovers.

    Snapshots a registered reader still needs (its inputs at and after its
    upper minus one) and the last ``retention_ms`` stay. Skipped in
    read-only mode. The keywords are the fields of
    :class:`~airflow_provider_ct.collections.MaintenanceSettings`, one for
    one, so the tick DAG can pass a settings object on without dropping any.

    :param namespaces: namespaces whose collections to maintain (default: all). Templated.
    :param tables: further managed tables to maintain (e.g. views). Templated.
    :param include_collections: maintain the registered collections too.
    :param retention_ms: keep every time of this last window readable.
    :param expire: expire snapshots.
    :param compact: compact small files (``small_file_bytes``, ``min_files``,
        ``target_file_bytes``).
    :param delete_files: delete the files only expired snapshots referenced.
    :param sweep: after expiry, remove what crashed writers and lost races
        left staged (see :func:`~airflow_provider_ct.core.sweep.sweep_staged`).
    :param sweep_grace_ms: age before staged files no manifest accounts for
        count as debris; it must exceed the longest collection write.
    :param read_only: the deployment's mode; default ``CT_READ_ONLY``.
    :param iceberg_conn_id: catalog connection (default: embedded catalog).
    """

    template_fields: Sequence[str] = ("namespaces", "tables")
    ui_color = "#f7efe3"

    def __init__(
        self,
        *,
        namespaces: Sequence[str] | None = None,
        tables: Sequence[str] = (),
        include_collections: bool = True,
        retention_ms: int = DEFAULT_RETENTION_MS,
        expire: bool = True,
        compact: bool = True,
        small_file_bytes: int = DEFAULT_SMALL_FILE_BYTES,
        min_files: int = DEFAULT_MIN_FILES,
        target_file_bytes: int = DEFAULT_TARGET_FILE_BYTES,
        delete_files: bool = True,
        sweep: bool = True,
        sweep_grace_ms: int = DEFAULT_GRACE_MS,
        read_only: bool | None = None,
        iceberg_conn_id: str = IcebergCatalogHook.default_conn_name,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.namespaces = name_list(namespaces, "namespaces")
        self.tables = name_list(tables, "tables") or []
        self.include_collections = include_collections
        self.retention_ms = retention_ms
        self.expire = expire
        self.compact = compact
        self.small_file_bytes = small_file_bytes
        self.min_files = min_files
        self.target_file_bytes = target_file_bytes
        self.delete_files = delete_files
        self.sweep = sweep
        self.sweep_grace_ms = sweep_grace_ms
        self.read_only = read_only
        self.iceberg_conn_id = iceberg_conn_id
        self._settings()  # bad settings fail at DAG-parse time

    def _settings(self) -> MaintenanceSettings:
        return MaintenanceSettings(
            retention_ms=self.retention_ms,
            expire=self.expire,
            delete_files=self.delete_files,
            compact=self.compact,
            small_file_bytes=self.small_file_bytes,
            min_files=self.min_files,
            target_file_bytes=self.target_file_bytes,
            sweep=self.sweep,
            sweep_grace_ms=self.sweep_grace_ms,
        )

    def execute(self, context: Any) -> dict[str, Any]:
        settings = self._settings()
        catalog = IcebergCatalogHook(self.iceberg_conn_id).get_catalog()
        names = list(self.tables)
        if self.include_collections:
            names = [c.name for c in list_collections(catalog, self.namespaces)] + names
        report = maintain(catalog, names, settings, read_only=read_only_default(self.read_only))
        if report.errors:
            raise CollectionError(f"maintenance failed for {report.errors}")
        return report.to_json()


class RegisterReaderOperator(BaseOperator):
    """Register a read hold: expiry keeps the inputs' snapshots the reader still needs.

    :param reader: the reader; for a view or continual task its target table.
    :param inputs: the tables it reads. Templated.
    :param since: the earliest time it reads before its table has an upper
        (epoch ms, templated); default: all history.
    :param reader_is_table: false for a reader without a table (the hold stays at ``since``).
    :param iceberg_conn_id: catalog connection (default: embedded catalog).
    """

    template_fields: Sequence[str] = ("reader", "inputs", "since")
    ui_color = "#efe3f7"

    def __init__(
        self,
        *,
        reader: str,
        inputs: Sequence[str],
        since: int | str | None = None,
        reader_is_table: bool = True,
        iceberg_conn_id: str = IcebergCatalogHook.default_conn_name,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.reader = reader
        self.inputs = name_list(inputs, "inputs") or []
        self.since = since
        self.reader_is_table = reader_is_table
        self.iceberg_conn_id = iceberg_conn_id

    def execute(self, context: Any) -> dict[str, Any]:
        catalog = IcebergCatalogHook(self.iceberg_conn_id).get_catalog()
        holds = register_reader(
            catalog,
            self.reader,
            self.inputs,
            since=optional_time(self.since, "since"),
            reader_is_table=self.reader_is_table,
        )
        return {"reader": self.reader, "inputs": [h.input for h in holds]}
