"""Operators that act on one named collection: register, blind write, differential write, close.

Thin wrappers over :mod:`airflow_provider_ct.collections`; every decision
(times, retries, read-only mode, holds) is made there. Each returns a JSON
report as its XCom. The deployment's read-only mode comes from
``CT_READ_ONLY`` unless ``read_only=`` is passed.

The operators that act on whatever is registered when they run (ticking,
maintenance, read holds) are in :mod:`.collections_upkeep`.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping, Sequence
from typing import Any

import pyarrow as pa
from airflow.sdk import BaseOperator

from airflow_provider_ct.assets import frontier_alias
from airflow_provider_ct.collections.append_only import blind_write
from airflow_provider_ct.collections.differential import DifferentialCollection
from airflow_provider_ct.collections.registration import register
from airflow_provider_ct.collections.registry import close_collection, parse_kind
from airflow_provider_ct.collections.rows import parse_rows, parse_updates
from airflow_provider_ct.core.layout import TableLayout
from airflow_provider_ct.exceptions import CollectionError, ConfigurationError
from airflow_provider_ct.hooks.iceberg import IcebergCatalogHook
from airflow_provider_ct.operators._collections_support import announce_upper
from airflow_provider_ct.operators._common import read_only_default

log = logging.getLogger(__name__)


#: ``timestamp[us, tz=UTC]``: Arrow's spelling of a zoned timestamp, which
#: ``pa.type_for_alias`` does not know (Spark's ``TIMESTAMP`` is one).
_ZONED_TIMESTAMP = re.compile(r"timestamp\[(s|ms|us|ns),\s*tz=([^\]]+)\]")


def _arrow_type(type_name: str) -> pa.DataType:
    zoned = _ZONED_TIMESTAMP.fullmatch(type_name.strip())
    if zoned is not None:
        return pa.timestamp(zoned.group(1), tz=zoned.group(2).strip())
    return pa.type_for_alias(type_name)


def _schema(columns: Mapping[str, str]) -> pa.Schema:
    """``{"column": "arrow type"}`` (e.g. ``int64``, ``string``, ``double``) as an Arrow schema."""
    fields = []
    for name, type_name in columns.items():
        try:
            fields.append(pa.field(name, _arrow_type(str(type_name))))
        except (ValueError, pa.ArrowInvalid):
            raise ConfigurationError(
                f"column {name!r}: unknown Arrow type {type_name!r} (try int64, string, double, "
                "bool, date32, timestamp[us, tz=UTC])"
            ) from None
    return pa.schema(fields)


class RegisterCollectionOperator(BaseOperator):
    """Create, adopt or find a managed collection; idempotent.

    A table that exists without our frontier (created with Spark SQL or
    PyIceberg, maybe partitioned, maybe holding rows) is adopted: it keeps
    its partitioning and properties, must have exactly ``columns`` (else
    ``SchemaMismatchError`` names them and nothing is written), and its rows
    become the collection's contents at the adoption time, where its upper
    starts (docs/collections.md, "Tables you create first"). The XCom says
    which happened (``status``: ``created``, ``adopted``, ``registered``,
    ``existing``); an adoption announces the collection's asset event
    through the task's :class:`AssetAlias` outlet (default
    ``ct-frontier:<collection>``).

    :param collection: ``namespace.table``.
    :param columns: ``{"column": "arrow type"}`` in column order; ``None``
        takes an existing table's columns as they are (it must exist).
    :param kind: ``append-only`` or ``differential``.
    :param read_only: create the collection switched to read-only.
    :param iceberg_conn_id: catalog connection (default: embedded catalog).
    :param partition_by: the table's partitioning when created here, as Spark
        SQL spells it (``["day(ts)", "bucket(16, id)"]``; docs/views.md).
    :param sort_by: its sort order (``["ts DESC"]``).
    :param table_properties: more Iceberg table properties for it.
    """

    template_fields: Sequence[str] = ("collection",)
    ui_color = "#efe3f7"

    def __init__(
        self,
        *,
        collection: str,
        columns: Mapping[str, str] | None = None,
        kind: str,
        read_only: bool = False,
        iceberg_conn_id: str = IcebergCatalogHook.default_conn_name,
        partition_by: Sequence[str] | str | None = None,
        sort_by: Sequence[str] | str | None = None,
        table_properties: Mapping[str, str] | None = None,
        **kwargs: Any,
    ) -> None:
        kwargs.setdefault("outlets", [frontier_alias(collection)])
        super().__init__(**kwargs)
        self.layout = TableLayout.parse(partition_by, sort_by, table_properties).to_json()
        self.kind = parse_kind(kind).value
        if columns is not None and (not isinstance(columns, Mapping) or not columns):
            raise ConfigurationError(
                f"columns must map at least one column name to an Arrow type (or be None to "
                f"take an existing table's), got {columns!r:.100}"
            )
        self.collection = collection
        self.columns = None if columns is None else dict(columns)
        self.read_only = read_only
        self.iceberg_conn_id = iceberg_conn_id

    def execute(self, context: Any) -> dict[str, Any]:
        # A bad type fails before the catalog is opened.
        schema = None if self.columns is None else _schema(self.columns)
        hook = IcebergCatalogHook(self.iceberg_conn_id)
        registration = register(
            hook.get_catalog(),
            self.collection,
            schema,
            self.kind,
            read_only=self.read_only,
            layout=TableLayout.from_json(self.layout),
        )
        adoption = registration.adoption
        if adoption is not None:
            announce_upper(
                self,
                context,
                hook,
                self.collection,
                adoption.upper,
                time=adoption.time,
                snapshot_id=adoption.snapshot_id,
                batch_id=adoption.batch_id,
                kind="adoption",
            )
        log.info(
            "collection %s: %s",
            self.collection,
            registration.status if adoption is None else adoption.describe(),
        )
        return registration.to_json()


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
            announce_upper(
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
            announce_upper(
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
