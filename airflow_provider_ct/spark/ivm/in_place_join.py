"""In-place aggregates over joined inputs without a Spark job: the change's state on the driver.

When a view's block inner-joins several inputs and their changes are small,
the delta rules' terms are joined on the driver
(:mod:`airflow_provider_ct.ivm.driver.driver_join`), each partner fetched by the
join keys the change carries from its data files' columns, which the warm
driver keeps decoded (:mod:`airflow_provider_ct.core.file_cache`). Spark
still types every expression (one analysis, no job) and the evaluation
keeps its semantics or refuses (:mod:`airflow_provider_ct.ivm.driver.arrow_eval`).

Taken only when what it decodes fits the file cache: the referenced
columns' stored size (from the manifests), decoded, must stay within the
cache's budget (:func:`~airflow_provider_ct.ivm.driver.keyed_rows.cache_refusal`),
or every tick would decode the partners again. Otherwise, and for any
shape the driver refuses, the tick uses Spark's jobs, under the cost model's join-read rule.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

import pyarrow as pa
from sqlglot import exp

from airflow_provider_ct.ivm.changes.snapshot_files import snapshot_schema
from airflow_provider_ct.ivm.changes.table_changes import (
    TableChanges,
    changes_report,
    estimated_change_rows,
    table_changes,
)
from airflow_provider_ct.ivm.driver.arrow_eval import (
    ArrowEvaluator,
    NotOnDriver,
    node_key,
    typed_nodes,
)
from airflow_provider_ct.ivm.driver.driver_join import (
    NEW,
    OLD,
    Fetch,
    JoinShape,
    Prefilter,
    join_shape,
    single_table_conjuncts,
    spelled,
    term_rows,
)
from airflow_provider_ct.ivm.driver.in_place_driver import Expressions
from airflow_provider_ct.ivm.driver.in_place_driver import change_state as change_state_rows
from airflow_provider_ct.ivm.driver.keyed_rows import SnapshotRows, cache_refusal, column_bytes
from airflow_provider_ct.ivm.driver.left_join_rows import LeftShape, left_shape, left_terms
from airflow_provider_ct.ivm.driver.semi_join import SemiJoin, filtered, flipped, semi_joins
from airflow_provider_ct.ivm.plan.columns import referenced_columns
from airflow_provider_ct.ivm.plan.subqueries import semi_join_query, where_conjuncts
from airflow_provider_ct.spark.ivm.in_place import (
    Aggregation,
    changes_schema,
    expressions,
    node_types,
)
from airflow_provider_ct.spark.tick import Tick

log = logging.getLogger(__name__)


@dataclass
class JoinedChange:
    """The inputs' changes a joined tick read, and what the report says of them."""

    changes: dict[str, TableChanges]
    #: The block's inner joins, or its one ``LEFT JOIN`` (:mod:`~..driver.left_join_rows`).
    shape: JoinShape | LeftShape
    columns: dict[str, list[str]]
    details: dict[str, Any] = field(default_factory=dict)
    #: The block's semi- and anti-joins, maintained here (:mod:`~..driver.semi_join`).
    semis: tuple[SemiJoin, ...] = ()


def joined_change(
    tick: Tick, agg: Aggregation, inputs: dict[str, Any], before: Mapping[str, int | None]
) -> JoinedChange | None:
    """The changed inputs' changes, read on the driver, when the driver can join them."""
    block = agg.plan.blocks[0]
    if len(agg.plan.blocks) != 1 or (block.left_join is not None and block.semi):
        return None
    if len(block.inputs) < (1 if block.semi else 2) or set(block.fixed) - set(block.semi):
        return None  # one table is the one-input route's; other subqueries are Spark's
    names = sorted({*block.inputs, *block.semi})
    after = {n: tick.desc.inputs.get(n) for n in names}
    if any(snapshot is None for snapshot in after.values()):
        return None  # an input without a snapshot: nothing to fetch from
    pinned = {n: int(s) for n, s in after.items() if s is not None}
    changed = [n for n in names if before.get(n) != after.get(n)]
    rows = sum(estimated_change_rows(inputs[n], before.get(n), pinned[n]) for n in changed)
    if agg.driver_rows <= 0 or rows > agg.driver_rows:
        return None
    schemas = {
        n: snapshot_schema(inputs[n], inputs[n].metadata.snapshot_by_id(pinned[n])).column_names
        for n in names
    }
    try:
        shape, semis, columns = _shapes(agg, schemas, tick.config.name)
    except NotOnDriver as exc:
        log.info("the change's join is left to Spark: %s", exc)
        return None
    if not _fits_cache(inputs, pinned, columns):
        return None
    changes = {
        n: table_changes(inputs[n], before.get(n), pinned[n], columns=columns[n]) for n in changed
    }
    return JoinedChange(changes, shape, columns, semis=semis)


def _shapes(
    agg: Aggregation, schemas: dict[str, list[str]], catalog_name: str
) -> tuple[JoinShape | LeftShape, tuple[SemiJoin, ...], dict[str, list[str]]]:
    """The block's join, its semi-joins, and the columns of each input they read."""
    block = agg.plan.blocks[0]
    if block.left_join is not None or not block.semi:
        columns = referenced_columns(agg.plan, schemas, catalog_name)
        if block.left_join is not None:
            return left_shape(block.tree, catalog_name, columns, block.left_join), (), columns
        return join_shape(block.tree, catalog_name, columns), (), columns
    where = block.tree.args["where"].this
    conjuncts = [c for c in where_conjuncts(where) if semi_join_query(c) is not None]
    stripped = block.tree.copy()
    kept = [c.copy() for c in where_conjuncts(where) if not any(c is k for k in conjuncts)]
    stripped.set("where", exp.Where(this=exp.and_(*kept)) if kept else None)
    outer_plan = replace(agg.plan, blocks=(replace(block, tree=stripped, fixed=(), semi=()),))
    outer = {n: schemas[n] for n in block.inputs}
    columns = referenced_columns(outer_plan, outer, catalog_name)
    named = {c.name.lower() for conjunct in conjuncts for c in conjunct.find_all(exp.Column)}
    for name in outer:  # the block's columns the subqueries are tied to (a superset)
        have = set(columns[name])
        columns[name] = [c for c in schemas[name] if c in have or c.lower() in named]
    shape = join_shape(block.tree, catalog_name, columns, exclude=conjuncts)
    semis = semi_joins(where, catalog_name, shape.inputs, schemas)
    for semi in semis:
        wanted = {
            semi.inner,
            *(c.name.lower() for n in semi.predicate_nodes() for c in n.find_all(exp.Column)),
        }
        have = set(columns.get(semi.name, []))
        columns[semi.name] = [c for c in schemas[semi.name] if c.lower() in wanted or c in have]
    return shape, semis, columns


def _fits_cache(
    inputs: dict[str, Any], after: dict[str, int], columns: dict[str, list[str]]
) -> bool:
    stored = sum(column_bytes(inputs[n], after[n], columns[n]) for n in columns)
    why = cache_refusal(stored)
    if why is not None:
        log.info("the change's join is left to Spark: %s", why)
        return False
    return True


def joined_change_state(
    agg: Aggregation,
    read: JoinedChange,
    inputs: dict[str, Any],
    snapshots: dict[str, dict[str, int | None]],
    schema: pa.Schema,
) -> pa.Table | None:
    """The change's signed state per group from the joined terms; None: Spark computes it.

    :param snapshots: ``"new"``/``"old"`` -> input -> its snapshot on that side.
    """
    fetchers: dict[tuple[str, int | None], SnapshotRows] = {}

    def reader(name: str, side: str) -> SnapshotRows:
        key = (name, snapshots[side].get(name))  # an unchanged input: one reader for both sides
        if key not in fetchers:
            fetchers[key] = SnapshotRows(inputs[name], key[1], read.columns[name])
        return fetchers[key]

    def fetch(name: str, side: str, column: str, values: pa.Array) -> pa.Table:
        return reader(name, side).where(column, values)

    def count(name: str, side: str, column: str, values: pa.Array) -> int | None:
        return reader(name, side).count(column, values)

    base = expressions(agg)
    schema = changes_schema(agg, schema)
    if isinstance(read.shape, LeftShape):
        return _left_change_state(agg, base, read, fetch, schema)
    parts = replace(base, where=read.shape.condition)
    try:
        types = node_types(agg, parts)
        inner_types = _semi_types(agg, read.semis)
        prefilter = _prefilter(read.shape, types)
        sides = []
        for position, joined in enumerate(read.shape.inputs):
            changes = read.changes.get(joined.name)
            if changes is None:
                continue
            for sign, rows in ((1, changes.inserted), (-1, changes.deleted)):
                if rows.num_rows:
                    terms = term_rows(read.shape, position, rows, fetch, prefilter, count=count)
                    for semi in read.semis:  # after every table of the block: as they were
                        terms = filtered(terms, semi, fetch, OLD, inner_types)
                    sides.append((sign, ArrowEvaluator.joined(terms, types)))
        sides.extend(_semi_terms(read, fetch, prefilter, types, inner_types))
        read.details["joined_rows"] = sum(e.rows.num_rows for _, e in sides)
        return change_state_rows(sides, parts, schema)
    except NotOnDriver as exc:
        log.info("the change's state is computed by Spark: %s", exc)
        return None


def _left_change_state(
    agg: Aggregation, base: Expressions, read: JoinedChange, fetch: Fetch, schema: pa.Schema
) -> pa.Table | None:
    """The change's signed state from the left join's terms; None: Spark computes it."""
    shape = read.shape
    assert isinstance(shape, LeftShape)
    typed = exp.and_(shape.on, shape.where) if shape.where is not None else shape.on
    try:
        types = node_types(agg, replace(base, where=typed))  # ON's nodes typed too

        def on(rows: pa.Table) -> pa.Array:
            return ArrowEvaluator.joined(rows, types).mask(shape.on)

        changes = {n: (c.inserted, c.deleted) for n, c in read.changes.items()}
        terms = left_terms(shape, changes, fetch, on)
        sides = [(sign, ArrowEvaluator.joined(rows, types)) for sign, rows in terms]
        read.details["joined_rows"] = sum(e.rows.num_rows for _, e in sides)
        return change_state_rows(sides, replace(base, where=shape.where), schema)
    except NotOnDriver as exc:
        log.info("the change's state is computed by Spark: %s", exc)
        return None


def _semi_terms(
    read: JoinedChange,
    fetch: Fetch,
    prefilter: Prefilter,
    types: dict[str, pa.DataType],
    inner_types: dict[str, pa.DataType],
) -> list[tuple[int, ArrowEvaluator]]:
    """The terms of the subqueries' changes: the block's rows whose key entered or left."""
    assert isinstance(read.shape, JoinShape)  # a LEFT JOIN block has no semi-joins here
    out = []
    aliases = [i.alias for i in read.shape.inputs]
    for index, semi in enumerate(read.semis):
        changes = read.changes.get(semi.name)
        if changes is None:
            continue
        change = (changes.inserted, changes.deleted)
        entering, leaving = flipped(semi, change, fetch, inner_types, (OLD, NEW))
        alias, column = semi.outer.split(".", 1)
        start = aliases.index(alias)
        outer = read.shape.inputs[start]
        for sign, keys in ((1, entering), (-1, leaving)):
            if not len(keys):
                continue
            rows = fetch(outer.name, NEW, spelled(outer.columns, column), keys)
            terms = term_rows(read.shape, start, rows, fetch, prefilter, all_new=True)
            for other_index, other in enumerate(read.semis):
                if other_index != index:
                    side = NEW if other_index < index else OLD
                    terms = filtered(terms, other, fetch, side, inner_types)
            out.append((-sign if semi.anti else sign, ArrowEvaluator.joined(terms, types)))
    return out


def _semi_types(agg: Aggregation, semis: tuple[SemiJoin, ...]) -> dict[str, pa.DataType]:
    """The Spark types of the semi-joins' predicates, typed over their tables (no job)."""
    from pyspark.sql.pandas.types import to_arrow_type

    out: dict[str, pa.DataType] = {}
    for semi in semis:
        nodes = typed_nodes(semi.predicate_nodes())
        if not nodes:
            continue
        select = ", ".join(f"{node_key(n)} AS __ct_t{i}" for i, n in enumerate(nodes))
        view = agg.new_views[semi.name]
        fields = agg.spark.sql(f"SELECT {select} FROM {view} AS {semi.alias}").schema.fields
        for node, found in zip(nodes, fields, strict=True):
            try:
                out[node_key(node)] = to_arrow_type(found.dataType)
            except TypeError:
                continue
    return out


def _prefilter(shape: JoinShape, types: dict[str, pa.DataType]) -> Prefilter:
    """Each table's rows kept by the condition's conjuncts that read it alone (before joins)."""
    from sqlglot import exp

    conditions = {a: exp.and_(*cs, copy=True) for a, cs in single_table_conjuncts(shape).items()}

    def keep(alias: str, rows: pa.Table) -> pa.Table:
        condition = conditions.get(alias)
        if condition is None or not rows.num_rows:
            return rows
        return rows.filter(ArrowEvaluator.joined(rows, types).mask(condition))

    return keep


def report(read: JoinedChange) -> dict[str, Any]:
    """What the report says of the changes a joined tick read on the driver."""
    return {**changes_report(read.changes), **read.details}
