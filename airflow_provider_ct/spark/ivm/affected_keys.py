"""The affected groups of a grouped tick: their keys, as literals or a frame, and the
target's rows in them.

Split from :mod:`.incremental`, which recomputes the groups: this finds
which they are. Keys come straight from the changed rows when every
changed input holds a column equal to a key (:func:`keys_from_changes`, no
scan, and on the driver from the changes' Arrow when they are there), else
from the delta terms' rows (:func:`keys_from_terms`, joins evaluated). Few
keys of a type SQL writes exactly become ``IN`` literals, so Iceberg's scan
planning prunes files by them (:func:`inline_keys`).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.compute as pc

from airflow_provider_ct.ivm.plan.planner import KeyColumns
from airflow_provider_ct.ivm.plan.rewrites import InlineKeys, key_select
from airflow_provider_ct.spark.ivm.bindings import NEW
from airflow_provider_ct.spark.ivm.days import INLINE_KEYS
from airflow_provider_ct.spark.ivm.input_changes import InputChange
from airflow_provider_ct.spark.ivm.terms import terms

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

    from airflow_provider_ct.spark.ivm.incremental import Delta

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class AffectedKeys:
    """The keys of the groups to recompute, and how the query and the target are restricted."""

    #: Columns ``__ct_k0...``: one per restricted key.
    frame: DataFrame
    #: The restricted keys' SQL (block scope) and positions in the target's columns.
    key_sql: tuple[str, ...]
    positions: tuple[int, ...]
    #: Further ``alias.column`` filtered by ``IN`` the keys (inputs filtered before the join).
    also: tuple[str, ...] = ()
    #: The key's columns in the changes' Arrow tables, when all are on the
    #: driver: the literals are then decided there, not by a Spark job.
    on_driver: tuple[pa.ChunkedArray, ...] | None = None
    #: ``(input, column)`` of every input column equal to the key (read from the changes).
    members: tuple[tuple[str, str], ...] = ()


def inlinable(data_type: Any) -> bool:
    """Whether SQL writes a value of this Spark type exactly as a literal."""
    from pyspark.sql import types as T

    simple = (T.ByteType, T.ShortType, T.IntegerType, T.LongType, T.StringType, T.BooleanType)
    return isinstance(data_type, (*simple, T.DateType))


def as_inline(values: list[Any]) -> InlineKeys:
    present = tuple(sorted(v for v in values if v is not None))
    log.info("%d affected keys inlined as literals", len(values))
    return InlineKeys(present, has_null=len(present) != len(values))


def inline_keys(keys: DataFrame) -> InlineKeys | None:
    """The affected keys as literals, when there are few and of a type SQL writes exactly."""
    if not inlinable(keys.schema.fields[0].dataType):
        return None
    rows = keys.limit(INLINE_KEYS + 1).collect()
    if len(rows) > INLINE_KEYS:
        return None
    return as_inline([row[0] for row in rows])


def inline_from_arrow(columns: Sequence[pa.ChunkedArray], data_type: Any) -> InlineKeys | None:
    """:func:`inline_keys` over the changes' key columns on the driver: no Spark job.

    The changes are Arrow tables before Spark reads them, so their distinct
    keys are counted here; asking Spark costs three small jobs per tick.
    """
    if not inlinable(data_type):
        return None
    found: set[Any] = set()
    for column in columns:
        found.update(pc.unique(column).to_pylist())
        if len(found) > INLINE_KEYS:
            return None
    return as_inline(list(found))


def affected_rows(
    persisted: DataFrame,
    columns: list[str],
    found: AffectedKeys,
    keys: DataFrame,
    inline: InlineKeys | None,
) -> DataFrame:
    """The target's rows in the affected groups (``<=>`` on every restricted key)."""
    from pyspark.sql import functions as F

    if inline is not None:
        column = persisted[f"`{columns[found.positions[0]]}`"]
        kept = column.isin(list(inline.values)) if inline.values else F.lit(False)
        if inline.has_null:
            kept = kept | column.isNull()
        return persisted.where(kept)
    condition = None
    for i, position in enumerate(found.positions):
        clause = persisted[f"`{columns[position]}`"].eqNullSafe(keys[f"__ct_k{i}"])
        condition = clause if condition is None else condition & clause
    return persisted.join(F.broadcast(keys), condition, "left_semi")


def keys_from_terms(delta: Delta) -> AffectedKeys:
    """Every grouping key of the rows the delta terms add or remove (joins evaluated)."""
    plan = delta.plan
    key_names = [f"__ct_k{i}" for i in range(len(plan.key_sql))]
    block = plan.blocks[0]

    def keys_of(tree: Any) -> Any:
        return key_select(tree, plan.key_sql)

    new_views = {name: names[NEW] for name, names in delta.bindings.views.items()}
    frames = [
        delta.frame(block, term.views, key_names, keys_of) for term in terms(plan, delta.bindings)
    ] or [delta.frame(block, new_views, key_names, keys_of).limit(0)]
    keys = frames[0]
    for frame in frames[1:]:
        keys = keys.union(frame)
    return AffectedKeys(keys, plan.key_sql, plan.key_positions)


def keys_from_changes(delta: Delta) -> AffectedKeys | None:
    """One key read straight from the changed rows, when every changed input holds it.

    A changed row of input ``T`` reaches the aggregation only joined by the
    block's equalities, so its group's key equals ``T``'s column in the
    key's equality class: the values of that column in ``T``'s change are a
    superset of the affected groups' keys (filters and unmatched rows only
    make it larger, which costs a few groups recomputed, never a wrong one).
    No input is scanned to find them. ``None`` when no key qualifies.
    """
    changed = sorted(delta.bindings.changed)
    if not changed:
        return None
    for found in delta.plan.key_columns:
        if not all(found.columns_of(name) for name in changed):
            continue
        if not _same_types(delta, found):
            continue
        parts = []
        arrow: list[pa.ChunkedArray] | None = []
        for name in changed:
            column = found.columns_of(name)[0].split(".", 1)[1]
            change = delta.bindings.changes[name]
            for side in (change.plus, change.minus):
                parts.append(side.select(side[f"`{column}`"].alias("__ct_k0")))
            arrow = _arrow_columns(arrow, change, column)
        frame = parts[0]
        for part in parts[1:]:
            frame = frame.union(part)
        also = tuple(f"{a}.{c}" for _, a, c in found.members) if len(found.members) > 1 else ()
        key_sql = (delta.plan.key_sql[found.index],)
        positions = (delta.plan.key_positions[found.index],)
        on_driver = None if arrow is None else tuple(arrow)
        members = tuple((n, c) for n, _, c in found.members)
        return AffectedKeys(frame, key_sql, positions, also, on_driver, members)
    return None


def _arrow_columns(
    found: list[pa.ChunkedArray] | None, change: InputChange, column: str
) -> list[pa.ChunkedArray] | None:
    """``found`` plus ``column`` of the change's Arrow tables (``None``: not all on the driver)."""
    if found is None or change.arrow is None:
        return None
    out = list(found)
    for table in change.arrow:
        names = [n for n in table.column_names if n.lower() == column.lower()]
        if len(names) != 1:
            return None
        out.append(table.column(names[0]))
    return out


def _same_types(delta: Delta, found: KeyColumns) -> bool:
    """The class's columns share one type, so equal values compare as the join compared them."""
    types: list[str] = []
    for name, _, column in found.members:
        schema = delta.spark.table(delta.bindings.views[name][NEW]).schema
        matches = [f.dataType.simpleString() for f in schema.fields if f.name.lower() == column]
        if len(matches) != 1:
            return False
        types.extend(matches)
    return len(set(types)) == 1
