"""Operators for storage-managed collections: register, write, tick, close, maintain.

Thin wrappers over :mod:`airflow_provider_ct.collections`; every decision
(times, retries, read-only mode, holds) is made there. Each returns a JSON
report as its XCom. The deployment's read-only mode comes from
``CT_READ_ONLY`` unless ``read_only=`` is passed.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Any

import pyarrow as pa
from airflow.sdk import BaseOperator

from airflow_provider_ct.assets import (
    emit_frontier_event,
    first_alias,
    frontier_alias,
    table_asset,
)
from airflow_provider_ct.collections.append_only import blind_write
from airflow_provider_ct.collections.differential import DifferentialCollection
from airflow_provider_ct.collections.holds import register_reader
from airflow_provider_ct.collections.maintenance import (
    DEFAULT_MIN_FILES,
    DEFAULT_RETENTION_MS,
    DEFAULT_SMALL_FILE_BYTES,
    DEFAULT_TARGET_FILE_BYTES,
    MaintenanceSettings,
    maintain,
)
from airflow_provider_ct.collections.registry import (
    close_collection,
    list_collections,
    parse_kind,
    register_collection,
)
from airflow_provider_ct.collections.rows import parse_rows, parse_updates
from airflow_provider_ct.collections.ticker import (
    ADVANCED,
    DEFAULT_CHECKPOINT_MS,
    tick_collections,
)
from airflow_provider_ct.core.frontier import Frontier, now_ms, parse_timestamp
from airflow_provider_ct.core.sealed import frontier_event_extra
from airflow_provider_ct.exceptions import CollectionError, ConfigurationError
from airflow_provider_ct.hooks.iceberg import IcebergCatalogHook
from airflow_provider_ct.operators._common import read_only_default

log = logging.getLogger(__name__)


def _schema(columns: Mapping[str, str]) -> pa.Schema:
    """``{"column": "arrow type"}`` (e.g. ``int64``, ``string``, ``double``) as an Arrow schema."""
    fields = []
    for name, type_name in columns.items():
        try:
            fields.append(pa.field(name, pa.type_for_alias(str(type_name))))
        except ValueError:
            raise ConfigurationError(
                f"column {name!r}: unknown Arrow type {type_name!r} (try int64, string, double, "
                "bool, date32, timestamp[us, tz=UTC])"
            ) from None
    return pa.schema(fields)


def _time(value: Any, what: str = "time") -> int | None:
    """A templated time argument, or ``None`` when it is not given."""
    if value in (None, ""):
        return None
    return parse_timestamp(value, what)


def _announce(
    operator: BaseOperator,
    context: Any,
    hook: IcebergCatalogHook,
    collection: str,
    upper: Frontier,
    **fields: Any,
) -> None:
    """Emit ``collection``'s asset event through the operator's first AssetAlias outlet.

    Called only when the collection's upper moved; see ``assets.py`` for why an alias.
    """
    alias = first_alias(operator.outlets)
    if alias is None:
        return
    catalog_name = hook.get_config().name
    asset = table_asset(collection, catalog_name)
    table = asset.name.removeprefix(f"{catalog_name}.")
    extra = frontier_event_extra(table=table, upper=upper, **fields)
    emit_frontier_event(context, alias, asset, extra)


def _names(value: Sequence[str] | None, what: str) -> list[str] | None:
    """A list of names; a plain string is refused, since ``list("ops")`` is ``["o", "p", "s"]``."""
    if value is None:
        return None
    if isinstance(value, str | bytes):
        raise ConfigurationError(f"{what} must be a list of names, got the string {value!r:.100}")
    return list(value)


class RegisterCollectionOperator(BaseOperator):
    """Create (or adopt) a managed collection; idempotent.

    :param collection: ``namespace.table``.
    :param columns: ``{"column": "arrow type"}`` in column order.
    :param kind: ``append-only`` or ``differential``.
    :param read_only: create the collection switched to read-only.
    :param iceberg_conn_id: catalog connection (default: embedded catalog).
    """

    template_fields: Sequence[str] = ("collection",)
    ui_color = "#efe3f7"

    def __init__(
        self,
        *,
        collection: str,
        columns: Mapping[str, str],
        kind: str,
        read_only: bool = False,
        iceberg_conn_id: str = IcebergCatalogHook.default_conn_name,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.kind = parse_kind(kind).value
        if not isinstance(columns, Mapping) or not columns:
            raise ConfigurationError(
                f"columns must map at least one column name to an Arrow type, got {columns!r:.100}"
            )
        self.collection = collection
        self.columns = dict(columns)
        self.read_only = read_only
        self.iceberg_conn_id = iceberg_conn_id

    def execute(self, context: Any) -> dict[str, Any]:
        schema = _schema(self.columns)  # a bad type fails before the catalog is opened
        catalog = IcebergCatalogHook(self.iceberg_conn_id).get_catalog()
        register_collection(catalog, self.collection, schema, self.kind, read_only=self.read_only)
        return {"collection": self.collection, "kind": self.kind}


class BlindWriteOperator(BaseOperator):
    """Blind-write rows into an append-only collection; they land at some time >= its upper.

    Contention is retried at a new time, never reported. Fails with
    ``ReadOnlyError`` in read-only mode and ``CollectionClosedError`` for a
    closed collection.

    :param collection: the append-only collection, ``namespace.table``.
    :param rows: rows to insert (list of dicts or of value lists), or
        ``[{"row": ..., "diff": n}, ...]`` / ``{"rows": [...], "diffs": [...]}``
        for retractions (``diff`` -1). Templated.
    :param rows_task_id: take the rows from this task's XCom instead.
    :param rows_key: the XCom key (default ``return_value``).
    :param read_only: the deployment's mode; default ``CT_READ_ONLY``.
    :param iceberg_conn_id: catalog connection (default: embedded catalog).

    A write that committed announces the collection's asset event (new
    upper, time, batch id, rows; see docs/pipelines.md) through its
    :class:`AssetAlias` outlet (default ``ct-frontier:<collection>``); rows
    that cancelled out commit nothing and announce nothing.
    """

    template_fields: Sequence[str] = ("collection", "rows")
    ui_color = "#efe3f7"

    def __init__(
        self,
        *,
        collection: str,
        rows: Any = None,
        rows_task_id: str | None = None,
        rows_key: str = "return_value",
        read_only: bool | None = None,
        iceberg_conn_id: str = IcebergCatalogHook.default_conn_name,
        **kwargs: Any,
    ) -> None:
        kwargs.setdefault("outlets", [frontier_alias(collection)])
        super().__init__(**kwargs)
        if (rows is None) == (rows_task_id is None):
            raise ValueError("pass exactly one of rows= or rows_task_id=")
        self.collection = collection
        self.rows = rows
        self.rows_task_id = rows_task_id
        self.rows_key = rows_key
        self.read_only = read_only
        self.iceberg_conn_id = iceberg_conn_id

    def execute(self, context: Any) -> dict[str, Any]:
        value = self.rows
        if value is None:
            value = context["ti"].xcom_pull(task_ids=self.rows_task_id, key=self.rows_key)
            if value is None:
                raise CollectionError(f"task {self.rows_task_id} pushed no rows")
        rows, diffs = parse_updates(value)
        hook = IcebergCatalogHook(self.iceberg_conn_id)
        receipt = blind_write(
            hook.get_catalog(),
            self.collection,
            rows,
            diffs,
            read_only=read_only_default(self.read_only),
        )
        log.info("blind write to %s landed at %s", self.collection, receipt.time)
        if receipt.time is not None:
            _announce(
                self,
                context,
                hook,
                self.collection,
                receipt.upper,
                time=receipt.time,
                batch_id=receipt.batch_id,
                rows_inserted=receipt.inserted,
                rows_retracted=receipt.retracted,
                kind="blind-write",
            )
        return receipt.to_json()


class DifferentialWriteOperator(BaseOperator):
    """State the desired contents of a differential collection; it is corrected to match.

    Either a full replacement (``desired`` or ``desired_task_id``) or an
    update (``retract`` and/or ``insert``). In read-only mode the desired
    state is kept and lands once writes are allowed (the next tick lands it);
    the task succeeds with status ``pending``.

    :param collection: the differential collection, ``namespace.table``.
    :param desired: the full desired rows (list of dicts or value lists). Templated.
    :param desired_task_id: take the desired rows from this task's XCom.
    :param retract: rows to retract (each must be in the desired state). Templated.
    :param insert: rows to insert. Templated.
    :param read_only: the deployment's mode; default ``CT_READ_ONLY``.
    :param iceberg_conn_id: catalog connection (default: embedded catalog).

    A correction that landed announces the collection's asset event through
    its :class:`AssetAlias` outlet (default ``ct-frontier:<collection>``);
    ``in-sync`` and ``pending`` announce nothing (the upper did not move).
    """

    template_fields: Sequence[str] = ("collection", "desired", "retract", "insert")
    ui_color = "#efe3f7"

    def __init__(
        self,
        *,
        collection: str,
        desired: Any = None,
        desired_task_id: str | None = None,
        retract: Any = None,
        insert: Any = None,
        read_only: bool | None = None,
        iceberg_conn_id: str = IcebergCatalogHook.default_conn_name,
        **kwargs: Any,
    ) -> None:
        kwargs.setdefault("outlets", [frontier_alias(collection)])
        super().__init__(**kwargs)
        replace = desired is not None or desired_task_id is not None
        update = retract is not None or insert is not None
        if replace == update or (desired is not None and desired_task_id is not None):
            raise ValueError(
                "pass desired= or desired_task_id= (a full replacement), or retract=/insert= "
                "(an update)"
            )
        self.collection = collection
        self.desired = desired
        self.desired_task_id = desired_task_id
        self.retract = retract
        self.insert = insert
        self.read_only = read_only
        self.iceberg_conn_id = iceberg_conn_id

    def execute(self, context: Any) -> dict[str, Any]:
        hook = IcebergCatalogHook(self.iceberg_conn_id)
        writer = DifferentialCollection.open(
            hook.get_catalog(), self.collection, read_only=read_only_default(self.read_only)
        )
        if self.retract is not None or self.insert is not None:
            result = writer.update(
                retract=parse_rows(self.retract or [], "rows to retract"),
                insert=parse_rows(self.insert or [], "rows to insert"),
            )
        else:
            value = self.desired
            if value is None:
                value = context["ti"].xcom_pull(task_ids=self.desired_task_id)
                if value is None:
                    raise CollectionError(f"task {self.desired_task_id} pushed no desired rows")
            result = writer.replace(parse_rows(value, "desired rows"))
        log.info("desired state of %s: %s", self.collection, result.status)
        if result.landed:
            _announce(
                self,
                context,
                hook,
                self.collection,
                result.upper,
                time=result.time,
                batch_id=result.batch_id,
                rows_inserted=result.inserted,
                rows_retracted=result.retracted,
                kind="differential-write",
            )
        return result.to_json()


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
        self.namespaces = _names(namespaces, "namespaces")
        self.time = time
        self.checkpoint_ms = checkpoint_ms
        self.read_only = read_only
        self.iceberg_conn_id = iceberg_conn_id

    def execute(self, context: Any) -> dict[str, Any]:
        hook = IcebergCatalogHook(self.iceberg_conn_id)
        tick_at = _time(self.time)
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
                _announce(self, context, hook, outcome.collection, outcome.upper, kind="tick")
        if report.errors:
            raise CollectionError(f"ticking failed for {report.errors}")
        return report.to_json()


class MaintainTablesOperator(BaseOperator):
    """Compact small files and expire snapshots no reader needs, for managed tables.

    Snapshots a registered reader still needs (its inputs at and after its
    upper minus one) and the last ``retention_ms`` stay. Skipped in
    read-only mode.

    :param namespaces: namespaces whose collections to maintain (default: all). Templated.
    :param tables: further managed tables to maintain (e.g. views). Templated.
    :param include_collections: maintain the registered collections too.
    :param retention_ms: keep every time of this last window readable.
    :param expire: expire snapshots.
    :param compact: compact small files (``small_file_bytes``, ``min_files``,
        ``target_file_bytes``).
    :param delete_files: delete the files only expired snapshots referenced.
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
        read_only: bool | None = None,
        iceberg_conn_id: str = IcebergCatalogHook.default_conn_name,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.namespaces = _names(namespaces, "namespaces")
        self.tables = _names(tables, "tables") or []
        self.include_collections = include_collections
        self.retention_ms = retention_ms
        self.expire = expire
        self.compact = compact
        self.small_file_bytes = small_file_bytes
        self.min_files = min_files
        self.target_file_bytes = target_file_bytes
        self.delete_files = delete_files
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


class CloseCollectionOperator(BaseOperator):
    """Close a collection: its upper becomes empty and every later write is refused.

    :param collection: ``namespace.table``. Templated.
    :param read_only: the deployment's mode; default ``CT_READ_ONLY``.
    :param iceberg_conn_id: catalog connection (default: embedded catalog).
    """

    template_fields: Sequence[str] = ("collection",)
    ui_color = "#efe3f7"

    def __init__(
        self,
        *,
        collection: str,
        read_only: bool | None = None,
        iceberg_conn_id: str = IcebergCatalogHook.default_conn_name,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.collection = collection
        self.read_only = read_only
        self.iceberg_conn_id = iceberg_conn_id

    def execute(self, context: Any) -> dict[str, Any]:
        catalog = IcebergCatalogHook(self.iceberg_conn_id).get_catalog()
        upper = close_collection(
            catalog, self.collection, read_only=read_only_default(self.read_only)
        )
        return {"collection": self.collection, "upper": upper.to_json()}


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
        self.inputs = _names(inputs, "inputs") or []
        self.since = since
        self.reader_is_table = reader_is_table
        self.iceberg_conn_id = iceberg_conn_id

    def execute(self, context: Any) -> dict[str, Any]:
        catalog = IcebergCatalogHook(self.iceberg_conn_id).get_catalog()
        holds = register_reader(
            catalog,
            self.reader,
            self.inputs,
            since=_time(self.since, "since"),
            reader_is_table=self.reader_is_table,
        )
        return {"reader": self.reader, "inputs": [h.input for h in holds]}
