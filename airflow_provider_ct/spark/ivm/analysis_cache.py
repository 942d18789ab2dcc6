"""Spark's answers about types, kept by a long-lived driver between a view's ticks.

An in-place tick asks Spark's analyzer for types only: the schema of the
rows below the aggregation, the type of every node the driver evaluates,
the aggregates' types under a derived expression. None runs a job, but
each binds the inputs (Iceberg table loads in the job's own session) and
costs 20-130 ms, as much as the rest of a small tick. The answers depend
only on the query's text, the inputs' identities and schemas, and the
session's settings that change types, so the warm driver keeps them: one
key per tick (:func:`analysis_key`), least recently used out past
:data:`ENTRIES`. A ``spark-submit`` job is a fresh process and always asks.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable, Mapping
from typing import Any, TypeVar

from airflow_provider_ct.ivm.driver.arrow_eval import node_key

T = TypeVar("T")

#: Analyses kept per process.
ENTRIES = 256
#: Session settings that change result types or coercions.
TYPE_SETTINGS = (
    "spark.sql.ansi.enabled",
    "spark.sql.decimalOperations.allowPrecisionLoss",
    "spark.sql.legacy.decimal.retainFractionDigitsOnTruncate",
    "spark.sql.session.timeZone",
)

_lock = threading.Lock()
_kept: OrderedDict[Hashable, Any] = OrderedDict()


def analysis_key(spark: Any, sql: str, inputs: Mapping[str, Any], pins: Mapping[str, Any]) -> tuple:
    """What a tick's analyses depend on: the query, each input's uuid and pinned schema, settings.

    :param inputs: input name -> its PyIceberg table; ``pins``: name -> pinned snapshot id.
    """
    identities = []
    for name in sorted(inputs):
        metadata = inputs[name].metadata
        snapshot = metadata.snapshot_by_id(pins[name]) if pins.get(name) is not None else None
        schema_id = snapshot.schema_id if snapshot is not None else metadata.current_schema_id
        identities.append((name, str(metadata.table_uuid), schema_id))
    settings = tuple(spark.conf.get(k, None) for k in TYPE_SETTINGS)
    return (sql, tuple(identities), settings, spark.version)


def analyzed(key: tuple | None, what: str, compute: Callable[[], T]) -> T:
    """``compute()``, or what it returned for ``key`` and ``what`` before (``key`` None: always)."""
    if key is None:
        return compute()
    full = (what, key)
    with _lock:
        if full in _kept:
            _kept.move_to_end(full)
            return _kept[full]  # type: ignore[no-any-return]
    value = compute()
    with _lock:
        _kept[full] = value
        while len(_kept) > ENTRIES:
            _kept.popitem(last=False)
    return value


def spark_types(spark: Any, sql: str, nodes: list[Any]) -> dict[str, Any]:
    """The Arrow types of ``nodes``, the select list of ``sql`` in order, as Spark analyzes
    them (no job); a type Arrow cannot carry is left out (the evaluator refuses the node)."""
    from pyspark.sql.pandas.types import to_arrow_type

    out: dict[str, Any] = {}
    for node, found in zip(nodes, spark.sql(sql).schema.fields, strict=True):
        try:
            out[node_key(node)] = to_arrow_type(found.dataType)
        except TypeError:
            continue
    return out
