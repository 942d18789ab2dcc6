"""The extrema of the groups whose ``MIN``/``MAX`` a deletion may have removed, read again.

Kept state plus change gives every ``MIN``/``MAX`` exactly except in the
groups where a deleted value reached the extremum
(:mod:`airflow_provider_ct.ivm.state.extrema`): those groups' extrema are
read again from the pinned (new) inputs, restricted to their keys. Nothing
else of the view is recomputed, and a tick without such a group reads
nothing. Two routes, as for the change's state:

* **On the driver**, when a grouping key is a column of an input (or equal
  to one through the join's equalities) and the inputs' columns fit the
  driver's file cache: that input's rows holding the stale keys are
  fetched by key (:class:`~airflow_provider_ct.ivm.driver.keyed_rows.SnapshotRows`,
  an index lookup in a warm driver), joined with the other inputs at their
  new snapshots as a delta-rule term is
  (:func:`~airflow_provider_ct.ivm.driver.driver_join.term_rows`), and
  aggregated like a change with one sign
  (:func:`~airflow_provider_ct.ivm.driver.in_place_driver.change_state`).
  Those rows are every row of the stale groups (a group's rows all hold
  its key), plus perhaps rows of other groups sharing that one key, which
  are dropped.
* **With Spark** otherwise (a NULL key, an expression key, a large read):
  the block's rows below the aggregation, restricted to the stale keys as
  the ``group`` strategy restricts its recomputation
  (:func:`~airflow_provider_ct.ivm.plan.rewrites.restrict_to_keys`, and
  the key's equal columns filtered before the join), grouped, one job.
"""

from __future__ import annotations

import datetime
import logging
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

import pyarrow as pa

from airflow_provider_ct.ivm.changes.snapshot_files import snapshot_schema
from airflow_provider_ct.ivm.driver.arrow_eval import ArrowEvaluator, NotOnDriver
from airflow_provider_ct.ivm.driver.driver_join import join_shape, term_rows
from airflow_provider_ct.ivm.driver.in_place_driver import change_state as change_state_rows
from airflow_provider_ct.ivm.driver.keyed_rows import SnapshotRows, cache_refusal, column_bytes
from airflow_provider_ct.ivm.plan.columns import referenced_columns
from airflow_provider_ct.ivm.plan.group_keys import KeyColumns
from airflow_provider_ct.ivm.plan.in_place import MAX
from airflow_provider_ct.ivm.plan.rewrites import (
    InlineKeys,
    bind_tables,
    restrict_columns_to_keys,
    restrict_to_keys,
    rows_select,
)
from airflow_provider_ct.ivm.state.aggregate_state import key_column
from airflow_provider_ct.ivm.state.extrema import change_schema, extremum_column
from airflow_provider_ct.spark.ivm.days import INLINE_KEYS
from airflow_provider_ct.spark.ivm.in_place import (
    Aggregation,
    expressions,
    node_types,
    pull,
    tables_alias,
)

log = logging.getLogger(__name__)

#: Temp views of the stale groups' keys (all keys; the one key filtered before the join).
STALE_KEYS_VIEW = "__ct_stale_keys"
STALE_KEY_VIEW = "__ct_stale_key"

Found = dict[tuple[Any, ...], list[Any]]


class ExtremaReader:
    """Reads stale groups' extrema for
    :func:`~airflow_provider_ct.ivm.state.state_add.add_change`; notes how."""

    def __init__(self, agg: Aggregation, state: pa.Schema | None = None) -> None:
        self.agg = agg
        #: The kept state's schema (its types for the driver's result); None: Spark's.
        self.state = state
        self.notes: dict[str, Any] = {}

    def __call__(self, keys: list[tuple[Any, ...]]) -> Mapping[tuple[Any, ...], Sequence[Any]]:
        found = self._on_driver(keys)
        route = "driver"
        if found is None:
            found, route = _with_spark(self.agg, keys), "spark"
        self.notes = {"extrema_read_again": len(keys), "extrema_read_on": route}
        log.info("extrema of %d group(s) read again (%s)", len(keys), route)
        wanted = set(keys)
        return {key: values for key, values in found.items() if key in wanted}

    def _on_driver(self, keys: list[tuple[Any, ...]]) -> Found | None:
        if self.state is None:
            return None
        try:
            return _on_driver(self.agg, keys, self.state)
        except NotOnDriver as exc:
            log.info("stale extrema are read by Spark: %s", exc)
            return None


def _on_driver(agg: Aggregation, keys: list[tuple[Any, ...]], state: pa.Schema) -> Found | None:
    """The stale groups' extrema from rows fetched by key on the driver; None: not here."""
    block = agg.plan.blocks[0]
    inputs, pins = agg.inputs, agg.pins
    if inputs is None or pins is None or agg.driver_rows <= 0:
        return None
    if len(agg.plan.blocks) != 1 or block.left_join is not None or not keys:
        return None
    if block.repeated or block.fixed:
        return None  # a key lookup names a table, not one of its reads: Spark's filter does
    pinned = {n: pins.get(n) for n in block.inputs}
    schemas = {
        n: snapshot_schema(inputs[n], inputs[n].metadata.snapshot_by_id(s)).column_names
        for n, s in pinned.items()
        if s is not None
    }
    if len(schemas) != len(block.inputs):
        return None  # an input without a snapshot: no rows to fetch from
    columns = referenced_columns(agg.plan, schemas, agg.catalog_name)
    lookup = _lookup(agg, keys, columns)
    if lookup is None:
        return None
    name, column, index = lookup
    stored = sum(column_bytes(inputs[n], int(pinned[n] or 0), columns[n]) for n in columns)
    if cache_refusal(stored) is not None:
        return None  # decoded again on every tick: Spark's scan costs less
    shape = join_shape(block.tree, agg.catalog_name, columns) if len(block.inputs) > 1 else None
    readers = {n: SnapshotRows(inputs[n], pinned[n], columns[n]) for n in block.inputs}
    try:
        kind = readers[name].empty.schema.field(column).type
        values = pa.array(sorted({key[index] for key in keys}), type=kind)
    except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError) as exc:
        raise NotOnDriver(f"the stale keys are not values of {name}.{column}: {exc}") from None
    rows = readers[name].where(column, values)
    parts = expressions(agg)
    if shape is not None:  # the joins' ON conditions too, typed with the rest
        parts = replace(parts, where=shape.condition)
    types = node_types(agg, parts)
    if shape is None:
        evaluator = ArrowEvaluator(rows, tables_alias(block.tree), types)
    else:
        position = [i.name for i in shape.inputs].index(name)

        def fetch(other: str, _side: str, on: str, wanted: pa.Array) -> pa.Table:
            return readers[other].where(on, wanted)

        evaluator = ArrowEvaluator.joined(term_rows(shape, position, rows, fetch), types)
    if evaluator.rows.num_rows > agg.driver_rows:
        return None
    extrema = len(agg.in_place.extrema)
    table = change_state_rows([(1, evaluator)], parts, change_schema(state, extrema))
    return _found(table, len(agg.plan.key_sql), extrema)


def _lookup(
    agg: Aggregation, keys: list[tuple[Any, ...]], columns: Mapping[str, Sequence[str]]
) -> tuple[str, str, int] | None:
    """``(input, column, key index)`` to fetch the stale groups' rows by; None: no such key.

    A key whose stale values include NULL is not looked up (a fetch never
    matches NULL, as SQL's equality).
    """
    for found in agg.plan.key_columns:
        if any(key[found.index] is None for key in keys):
            continue
        for name, _alias, lowered in found.members:
            actual = [c for c in columns.get(name, ()) if c.lower() == lowered]
            if actual:
                return name, actual[0], found.index
    return None


def _found(table: pa.Table, keys: int, extrema: int) -> Found:
    """Group key -> its extrema, from a state-shaped table (Arrow, Python values)."""
    key_values = [table.column(key_column(i)).to_pylist() for i in range(keys)]
    values = [table.column(extremum_column(e)).to_pylist() for e in range(extrema)]
    out: Found = {}
    for row in range(table.num_rows):
        out[tuple(c[row] for c in key_values)] = [c[row] for c in values]
    return out


def _with_spark(agg: Aggregation, keys: list[tuple[Any, ...]]) -> Found:
    """The stale groups' extrema in one Spark job over the block restricted to their keys."""
    from pyspark.sql import functions as F

    block, key_sql = agg.plan.blocks[0], agg.plan.key_sql
    tree = rows_select(block.tree, key_sql, agg.in_place.arguments)
    tree = bind_tables(tree, agg.new_views, agg.catalog_name)  # before the keys' views join it
    if key_sql:
        tree = _restricted(agg, tree, keys)
    frame = agg.spark.sql(tree.sql(dialect="spark"))
    values = []
    for e, (function, j) in enumerate(agg.in_place.extrema):
        extremum = F.max if function == MAX else F.min
        values.append(extremum(F.col(f"__ct_a{j}")).alias(extremum_column(e)))
    names = [key_column(i) for i in range(len(key_sql))]
    grouped = frame.groupBy(*names) if names else frame.groupBy()
    table = pull(grouped.agg(*values), agg.max_groups, "stale groups")
    return _found(table, len(key_sql), len(agg.in_place.extrema))


def _restricted(agg: Aggregation, tree: Any, keys: list[tuple[Any, ...]]) -> Any:
    """``tree`` keeping the stale groups' rows; the key's equal columns filtered before joins."""
    from pyspark.sql import functions as F
    from pyspark.sql import types as T
    from pyspark.sql.pandas.types import to_arrow_type

    key_sql = agg.plan.key_sql
    fields = [agg.schema.fields[p] for p in agg.plan.key_positions]
    arrow = pa.table(
        {
            key_column(i): pa.array([k[i] for k in keys], type=to_arrow_type(f.dataType))
            for i, f in enumerate(fields)
        }
    )
    struct = T.StructType([T.StructField(key_column(i), f.dataType) for i, f in enumerate(fields)])
    agg.scratch.frame(agg.spark, arrow, struct).createOrReplaceTempView(STALE_KEYS_VIEW)
    inline = _inline([k[0] for k in keys]) if len(key_sql) == 1 else None
    tree = restrict_to_keys(tree, key_sql, STALE_KEYS_VIEW, inline)
    for found in agg.plan.key_columns:
        if len(found.members) < 2 or any(k[found.index] is None for k in keys):
            continue  # one member: the restriction above filters it; NULL: no IN matches
        if not _same_types(agg, found):
            continue  # equal under the join's cast, perhaps not under IN's
        one = _inline([k[found.index] for k in keys])
        if one is None:
            view = agg.spark.table(STALE_KEYS_VIEW).select(
                F.col(key_column(found.index)).alias("__ct_k0")
            )
            view.distinct().createOrReplaceTempView(STALE_KEY_VIEW)
        columns = [f"{alias}.{column}" for _, alias, column in found.members]
        return restrict_columns_to_keys(tree, columns, STALE_KEY_VIEW, one)
    return tree


def _same_types(agg: Aggregation, found: KeyColumns) -> bool:
    """The class's columns share one type, so ``IN`` the keys keeps what the join kept."""
    types: list[str] = []
    for name, _, column in found.members:
        schema = agg.spark.table(agg.new_views[name]).schema
        matches = [f.dataType.simpleString() for f in schema.fields if f.name.lower() == column]
        if len(matches) != 1:
            return False
        types.extend(matches)
    return len(set(types)) == 1


def _inline(values: list[Any]) -> InlineKeys | None:
    """A few key values as literals (ints, strings, dates), or None."""
    distinct = {v for v in values if v is not None}
    if len(distinct) > INLINE_KEYS:
        return None
    for v in distinct:
        plain = isinstance(v, bool | int | str | datetime.date)
        if not plain or isinstance(v, datetime.datetime):
            return None
    return InlineKeys(tuple(sorted(distinct)), has_null=None in values)
