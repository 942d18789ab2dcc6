"""A keyed block's change computed on the driver: no Spark job, Spark's types.

When a table read by a block's keyed subqueries changes, the change below
the aggregation is the block over the rows of the keys ``K`` the changes
hold, as they are minus as they were (:mod:`airflow_provider_ct.ivm.plan.keyed`).
Spark evaluated both terms over the keys' rows (:mod:`.keyed`): two queries
whose decorrelated joins cost about a third of a second each, however few
the rows, which at TPC-H SF 0.1 is what the whole query costs. Here, in a
warm driver whose file cache holds the inputs' columns:

1. ``K`` is read from the changes' Arrow rows (and, for a bridged input,
   from the rows of the table that holds the key, fetched by the join);
2. each side's rows start from a block input that holds the key, fetched
   by ``K`` at that side's snapshot, filtered by its own conditions (which
   narrows the keys: TPC-H q17 keeps the parts of one brand and container),
   and joined with the other inputs fetched by the join's keys
   (:func:`~airflow_provider_ct.ivm.driver.driver_join.term_rows`);
3. each subquery is computed per key from its table's rows at the same
   snapshot (:mod:`airflow_provider_ct.ivm.driver.keyed_terms`);
4. the two sides, signed, are aggregated into the change's state like any
   other driver term (:func:`~airflow_provider_ct.ivm.driver.in_place_driver.change_state`).

Spark types every node once (analyses only, kept per schemas). Whatever
the driver refuses (a shape :mod:`~airflow_provider_ct.ivm.plan.keyed_parts`
does not take, a type it does not compute exactly, more rows than
``CT_DRIVER_DIFF_ROWS``) leaves the tick to Spark's keyed terms, as before.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.compute as pc

from airflow_provider_ct.ivm.changes.snapshot_files import snapshot_schema
from airflow_provider_ct.ivm.changes.table_changes import (
    TableChanges,
    changes_report,
    estimated_change_rows,
    table_changes,
)
from airflow_provider_ct.ivm.driver.arrow_eval import ArrowEvaluator, NotOnDriver
from airflow_provider_ct.ivm.driver.driver_join import (
    NEW,
    OLD,
    JoinShape,
    conjunct_prefilter,
    join_shape,
    single_table_conjuncts,
    spelled,
    term_rows,
)
from airflow_provider_ct.ivm.driver.in_place_driver import Expressions
from airflow_provider_ct.ivm.driver.in_place_driver import change_state as change_state_rows
from airflow_provider_ct.ivm.driver.keyed_rows import SideReaders, SnapshotRows
from airflow_provider_ct.ivm.driver.keyed_terms import kept_rows
from airflow_provider_ct.ivm.plan.columns import referenced_columns
from airflow_provider_ct.ivm.plan.keyed import KeyedRead, place_keyed
from airflow_provider_ct.ivm.plan.keyed_parts import KeyedPart, keyed_parts
from airflow_provider_ct.spark.ivm.in_place import (
    Aggregation,
    changes_schema,
    expressions,
    node_types,
)
from airflow_provider_ct.spark.ivm.in_place_join import fits_cache
from airflow_provider_ct.spark.ivm.keyed_types import part_types

if TYPE_CHECKING:
    from airflow_provider_ct.spark.tick import Tick

log = logging.getLogger(__name__)


@dataclass
class KeyedDriverRead:
    """What the driver read for a keyed tick, and what the report says of it."""

    changes: dict[str, TableChanges]
    shape: JoinShape
    parts: list[KeyedPart]
    placed: KeyedRead
    columns: dict[str, list[str]]
    details: dict[str, Any] = field(default_factory=dict)


def keyed_read(
    tick: Tick,
    agg: Aggregation,
    inputs: Mapping[str, Any],
    before: Mapping[str, int | None],
    *,
    fixed_moved: bool = True,
) -> KeyedDriverRead | None:
    """The changes of a keyed block the driver can evaluate, or None (Spark's keyed terms).

    :param fixed_moved: only when a keyed subquery's table changed (an in-place
        aggregate's other changes go by the delta rules' joined terms); False: whenever
        every changed table holds the key (a linear view's tick, :mod:`.keyed_linear`).
    """
    plan = agg.plan
    block = plan.blocks[0]
    if len(plan.blocks) != 1 or agg.driver_rows <= 0 or not block.keyed:
        return None
    if agg.parameters or block.left_join is not None:
        return None  # a keyed block's semi-joins are keyed parts too
    names = sorted({*block.inputs, *block.fixed})
    after = {n: tick.desc.inputs.get(n) for n in names}
    if any(snapshot is None for snapshot in after.values()):
        return None
    moved = [n for n in names if before.get(n) != after[n]]
    if not moved or (fixed_moved and not set(moved) & set(block.fixed)):
        return None  # no keyed subquery's table changed: the delta rules' route
    pinned = {n: int(s) for n, s in after.items() if s is not None}
    schemas = {
        n: snapshot_schema(inputs[n], inputs[n].metadata.snapshot_by_id(pinned[n])).column_names
        for n in names
    }
    catalog = tick.config.name
    placed = place_keyed(block.tree, schemas, catalog)
    why = placed if isinstance(placed, str) else placed.unkeyed(moved, block.inputs)
    parts = keyed_parts(block.tree, schemas, catalog) if why is None else why
    if isinstance(parts, str):
        log.info("the keyed block is left to Spark: %s", why or parts)
        return None
    assert isinstance(placed, KeyedRead)
    rows = sum(estimated_change_rows(inputs[n], before.get(n), pinned[n]) for n in moved)
    if rows > agg.driver_rows:
        return None
    columns = referenced_columns(plan, schemas, catalog)
    if not fits_cache(inputs, pinned, columns):
        return None
    try:
        shape = join_shape(block.tree, catalog, columns, exclude=[p.conjunct for p in parts])
    except NotOnDriver as exc:
        log.info("the keyed block is left to Spark: %s", exc)
        return None
    changes = {
        n: table_changes(inputs[n], before.get(n), pinned[n], columns=columns[n]) for n in moved
    }
    return KeyedDriverRead(changes, shape, parts, placed, columns)


def keyed_change_state(
    agg: Aggregation,
    read: KeyedDriverRead,
    inputs: Mapping[str, Any],
    snapshots: Mapping[str, Mapping[str, int | None]],
    schema: pa.Schema,
) -> pa.Table | None:
    """The change's signed state per group from the block's two sides; None: Spark's.

    :param snapshots: ``"new"``/``"old"`` -> input -> its snapshot on that side.
    """
    reader = SideReaders(inputs, snapshots, read.columns)
    parts = replace(expressions(agg), where=read.shape.condition)
    types = keyed_types(agg, read, parts)
    if types is None:
        return None
    try:
        keys = changed_keys(read, reader, agg.driver_rows)
        prefilter = conjunct_prefilter(single_table_conjuncts(read.shape), types)
        sides = []
        for sign, side in ((1, NEW), (-1, OLD)):
            rows = side_rows(read, keys, side, reader, prefilter, types, agg.driver_rows)
            sides.append((sign, ArrowEvaluator.joined(rows, types)))
        read.details["joined_rows"] = sum(e.rows.num_rows for _, e in sides)
        return change_state_rows(sides, parts, changes_schema(agg, schema))
    except (NotOnDriver, pa.ArrowException) as exc:
        log.info("the keyed block's change is computed by Spark: %s", exc)
        return None


def keyed_types(
    agg: Aggregation, read: KeyedDriverRead, parts: Expressions
) -> dict[str, pa.DataType] | None:
    """Spark's type of every node the driver evaluates (the block's ``parts``, the keyed
    parts'); None when Spark types one only inside its query (then Spark computes)."""
    from pyspark.errors import PySparkException

    try:
        return {**node_types(agg, parts), **part_types(agg, read.parts)}
    except PySparkException as exc:
        log.info("the keyed block's change is computed by Spark: %s", exc)
        return None


def side_rows(
    read: KeyedDriverRead,
    keys: pa.Array,
    side: str,
    reader: Callable[[str, str], SnapshotRows],
    prefilter: Callable[[str, pa.Table], pa.Table],
    types: Mapping[str, pa.DataType],
    limit: int,
) -> pa.Table:
    """The block's rows of ``keys`` at ``side``'s snapshots, its subqueries applied."""
    position, column = _start(read)
    start = read.shape.inputs[position]
    rows = reader(start.name, side).where(spelled(start.columns, column), pc.drop_null(keys))
    if keys.null_count:
        nulls = reader(start.name, side).where_null(spelled(start.columns, column))
        rows = pa.concat_tables([rows, nulls], promote_options="permissive")
    if rows.num_rows > 4 * limit:
        raise NotOnDriver(f"the keys hold more than {4 * limit:,} rows")

    def fetch(name: str, _state: str, column: str, values: pa.Array) -> pa.Table:
        return reader(name, side).where(column, values)

    def inner(name: str, column: str, values: pa.Array) -> pa.Table:
        return reader(name, side).where(spelled(read.columns[name], column), values)

    joined = term_rows(read.shape, position, rows, fetch, prefilter, all_new=True)
    return kept_rows(joined, read.parts, inner, types, read.columns)


def _start(read: KeyedDriverRead) -> tuple[int, str]:
    """The block input the rows start from: one that holds the key, with conditions of its
    own if one has them (its rows then narrow every other fetch)."""
    filters = single_table_conjuncts(read.shape)
    member = {alias: column for _, alias, column in read.placed.members}
    found = [
        (not filters.get(joined.alias), index, member[joined.alias])
        for index, joined in enumerate(read.shape.inputs)
        if joined.alias in member and joined.name in read.placed.keyed_block_inputs
    ]
    if not found:
        raise NotOnDriver("no block input holds the key")
    _, index, column = min(found)
    return index, column


def changed_keys(
    read: KeyedDriverRead, reader: Callable[[str, str], SnapshotRows], limit: int
) -> pa.Array:
    """The distinct keys the changes hold (NULL included), as one array; past ``limit`` of
    them, :class:`NotOnDriver`. Reported as ``keyed_keys``."""
    keys = _keys(read, reader)
    if len(keys) > limit:
        raise NotOnDriver(f"the changes hold {len(keys):,} keys")
    read.details["keyed_keys"] = len(keys)
    return keys


def _keys(read: KeyedDriverRead, reader: Callable[[str, str], SnapshotRows]) -> pa.Array:
    """The distinct keys the changes hold (NULL included), as one array."""
    found: list[Any] = []
    for name, change in sorted(read.changes.items()):
        for rows in (change.inserted, change.deleted):
            for column in read.placed.key_columns(name):
                found.append(rows.column(spelled(rows.column_names, column)))
            for bridge in (b for b in read.placed.bridges if b.input == name):
                values = pc.unique(rows.column(spelled(rows.column_names, bridge.column)))
                via = reader(bridge.via, NEW)
                matched = via.where(spelled(read.columns[bridge.via], bridge.via_column), values)
                found.append(matched.column(spelled(matched.column_names, bridge.via_key)))
    chunks = [c.combine_chunks() if isinstance(c, pa.ChunkedArray) else c for c in found]
    if not chunks:
        return pa.array([], pa.int64())
    kinds = {c.type for c in chunks if not pa.types.is_null(c.type)}
    if len(kinds) > 1:
        if not all(pa.types.is_integer(k) for k in kinds):
            raise NotOnDriver(f"the key's columns differ in type: {sorted(map(str, kinds))}")
        chunks = [c.cast(pa.int64()) for c in chunks]
    return pc.unique(pa.chunked_array(chunks).combine_chunks())


def report(read: KeyedDriverRead) -> dict[str, Any]:
    """What the report says of a keyed tick computed on the driver."""
    details = {**changes_report(read.changes), **read.details}
    return {**details, "keyed_rows_on": ["driver"], "keyed_on": "driver"}
