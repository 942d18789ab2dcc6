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

import functools
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import pyarrow as pa
from sqlglot import exp

from airflow_provider_ct.core.tables import live_rows
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
    typed_nodes,
)
from airflow_provider_ct.ivm.driver.driver_join import (
    NEW,
    OLD,
    Fetch,
    JoinShape,
    Prefilter,
    Whole,
    conjunct_prefilter,
    join_shape,
    single_table_conjuncts,
    spelled,
    term_rows,
)
from airflow_provider_ct.ivm.driver.in_place_driver import Expressions
from airflow_provider_ct.ivm.driver.in_place_driver import change_state as change_state_rows
from airflow_provider_ct.ivm.driver.keyed_rows import (
    SideReaders,
    SnapshotRows,
    cache_refusal,
    column_bytes,
)
from airflow_provider_ct.ivm.driver.left_inner_rows import (
    LeftInnerShape,
    left_inner_shape,
    left_inner_terms,
)
from airflow_provider_ct.ivm.driver.left_join_rows import LeftShape, left_shape, left_terms
from airflow_provider_ct.ivm.driver.parameter_rows import (
    Parameter,
    bound,
    flipped_rows,
    placeholders,
)
from airflow_provider_ct.ivm.driver.semi_join import SemiJoin, filtered, flipped, semi_joins
from airflow_provider_ct.ivm.plan.columns import referenced_columns
from airflow_provider_ct.ivm.plan.subqueries import semi_join_query, where_conjuncts
from airflow_provider_ct.spark.ivm.in_place import (
    Aggregation,
    changes_schema,
    expressions,
    node_types,
    types_over,
)
from airflow_provider_ct.spark.tick import Tick

log = logging.getLogger(__name__)


@dataclass
class JoinedChange:
    """The inputs' changes a joined tick read, and what the report says of them."""

    changes: dict[str, TableChanges]
    #: The block's inner joins, its one ``LEFT JOIN`` (:mod:`~..driver.left_join_rows`), or
    #: a ``LEFT JOIN`` then inner joins (:mod:`~..driver.left_inner_rows`).
    shape: JoinShape | LeftShape | LeftInnerShape
    columns: dict[str, list[str]]
    details: dict[str, Any] = field(default_factory=dict)
    #: The block's semi- and anti-joins, maintained here (:mod:`~..driver.semi_join`).
    semis: tuple[SemiJoin, ...] = ()
    #: The conjuncts comparing with a parameter, placed on the table they read.
    params: tuple[ParamConjunct, ...] = ()


@dataclass(frozen=True)
class ParamConjunct:
    """A conjunct of ``WHERE`` comparing one table's rows with a parameter."""

    conjunct: Any
    #: The placeholder it names (:class:`~..driver.parameter_rows.Parameter`'s name).
    parameter: str
    #: The table it reads: its alias, input and position in the join.
    alias: str
    input: str
    position: int


def joined_change(
    tick: Tick,
    agg: Aggregation,
    inputs: dict[str, Any],
    before: Mapping[str, int | None],
    least_inputs: int = 2,
) -> JoinedChange | None:
    """The changed inputs' changes, read on the driver, when the driver can join them.

    :param least_inputs: fewer tables (without kept subqueries) are another route's
        (an aggregate of one table has its own; a linear view has none: 1).
    """
    block = agg.plan.blocks[0]
    kept = bool(block.semi or agg.parameters)  # subqueries maintained here
    outer = block.left_join is not None or block.outer is not None
    if len(agg.plan.blocks) != 1 or (outer and kept):
        return None
    if len(block.inputs) < (1 if kept else least_inputs) or set(block.fixed) - set(block.semi):
        return None  # other subqueries are Spark's
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
        shape, semis, params, columns = _shapes(agg, schemas, tick.config.name)
    except NotOnDriver as exc:
        log.info("the change's join is left to Spark: %s", exc)
        return None
    if not fits_cache(inputs, pinned, columns):
        return None
    changes = {
        n: table_changes(inputs[n], before.get(n), pinned[n], columns=columns[n]) for n in changed
    }
    return JoinedChange(changes, shape, columns, semis=semis, params=params)


def _shapes(
    agg: Aggregation, schemas: dict[str, list[str]], catalog_name: str
) -> tuple[
    JoinShape | LeftShape | LeftInnerShape,
    tuple[SemiJoin, ...],
    tuple[ParamConjunct, ...],
    dict[str, list[str]],
]:
    """The block's join, its semi-joins and parameters, and the columns of each input they read."""
    block = agg.plan.blocks[0]
    values = {p.name: p for p in agg.parameters}
    if block.left_join is not None or block.outer is not None or not (block.semi or values):
        columns = referenced_columns(agg.plan, schemas, catalog_name)
        if block.left_join is not None:
            left = left_shape(block.tree, catalog_name, columns, block.left_join)
            return left, (), (), columns
        if block.outer is not None:
            return left_inner_shape(block.tree, catalog_name, columns), (), (), columns
        return join_shape(block.tree, catalog_name, columns), (), (), columns
    where = block.tree.args["where"].this
    compared = [c for c in where_conjuncts(where) if placeholders(c, values)]
    joins = [c for c in where_conjuncts(where) if semi_join_query(c) is not None]
    conjuncts = [*joins, *compared]
    stripped = block.tree.copy()
    kept = [c.copy() for c in where_conjuncts(where) if not any(c is k for k in conjuncts)]
    stripped.set("where", exp.Where(this=exp.and_(*kept)) if kept else None)
    outer_plan = replace(agg.plan, blocks=(replace(block, tree=stripped, fixed=(), semi=()),))
    outer = {n: schemas[n] for n in block.inputs}
    columns = referenced_columns(outer_plan, outer, catalog_name)
    named = {c.name.lower() for conjunct in conjuncts for c in conjunct.find_all(exp.Column)}
    named -= set(values)
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
    params = tuple(_placed(c, shape, schemas, values) for c in compared)
    return shape, semis, params, columns


def _placed(
    conjunct: Any, shape: JoinShape, schemas: dict[str, list[str]], values: Mapping[str, Any]
) -> ParamConjunct:
    """The table a parameter's conjunct reads; :class:`NotOnDriver` unless exactly one."""
    aliases: set[str] = set()
    for column in conjunct.find_all(exp.Column):
        if column.table:
            aliases.add(column.table.lower())
        elif column.name not in values:
            name = column.name.lower()
            aliases.update(
                i.alias for i in shape.inputs if name in {c.lower() for c in schemas[i.name]}
            )
    positions = [i for i, joined in enumerate(shape.inputs) if joined.alias in aliases]
    if len(aliases) != 1 or len(positions) != 1:
        raise NotOnDriver("a scalar subquery compared with other than one table's columns")
    joined = shape.inputs[positions[0]]
    (parameter,) = placeholders(conjunct, values)
    return ParamConjunct(conjunct, parameter, joined.alias, joined.name, positions[0])


def fits_cache(
    inputs: Mapping[str, Any], after: Mapping[str, int], columns: Mapping[str, list[str]]
) -> bool:
    """Whether the columns the driver would fetch from stay in its file cache (logged if not)."""
    stored = sum(column_bytes(inputs[n], after[n], columns[n]) for n in columns)
    why = cache_refusal(stored)
    if why is not None:
        log.info("the change's join is left to Spark: %s", why)
        return False
    return True


@dataclass(frozen=True)
class JoinedSides:
    """The delta rules' terms of a block, joined on the driver, each with its sign."""

    sides: list[tuple[int, ArrowEvaluator]]
    #: What the joined rows must still pass (``WHERE``, and the inner joins' ``ON``).
    where: Any
    #: The Spark type of every node evaluated over them.
    types: dict[str, pa.DataType]


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
    base = expressions(agg)
    try:
        joined = joined_sides(agg, read, inputs, snapshots, base)
        parts = replace(base, where=joined.where)
        return change_state_rows(joined.sides, parts, changes_schema(agg, schema))
    except NotOnDriver as exc:
        log.info("the change's state is computed by Spark: %s", exc)
        return None


def joined_sides(
    agg: Aggregation,
    read: JoinedChange,
    inputs: Mapping[str, Any],
    snapshots: Mapping[str, Mapping[str, int | None]],
    base: Expressions,
) -> JoinedSides:
    """The block's signed joined rows whose sum is its change (:class:`NotOnDriver`: Spark's).

    :param base: the expressions evaluated over them (their nodes are typed).
    """
    reader = SideReaders(inputs, snapshots, read.columns)

    def fetch(name: str, side: str, column: str, values: pa.Array) -> pa.Table:
        return reader(name, side).where(column, values)

    def count(name: str, side: str, column: str, values: pa.Array) -> int | None:
        return reader(name, side).count(column, values)

    if isinstance(read.shape, LeftShape | LeftInnerShape):
        return _left_sides(agg, base, read, (fetch, count))
    whole = _whole_reads(reader, inputs, snapshots, agg.driver_rows)
    parts = replace(base, where=read.shape.condition)
    types = {**node_types(agg, parts), **_param_types(agg, read)}
    inner_types = _semi_types(agg, read.semis)
    values = {p.name: p for p in agg.parameters}
    prefilter = _prefilter(read, types, values, {p.parameter: OLD for p in read.params})
    sides = []
    for position, joined in enumerate(read.shape.inputs):
        changes = read.changes.get(joined.name)
        if changes is None:
            continue
        for sign, rows in ((1, changes.inserted), (-1, changes.deleted)):
            if rows.num_rows:
                terms = term_rows(
                    read.shape, position, rows, fetch, prefilter, count=count, whole=whole
                )
                for semi in read.semis:  # after every table of the block: as they were
                    terms = filtered(terms, semi, fetch, OLD, inner_types)
                sides.append((sign, ArrowEvaluator.joined(terms, types)))
    sides.extend(_semi_terms(read, fetch, prefilter, types, inner_types))
    rows_now = functools.partial(reader, side=NEW)
    sides.extend(_flip_terms(read, values, rows_now, fetch, types, inner_types, agg.driver_rows))
    read.details["joined_rows"] = sum(e.rows.num_rows for _, e in sides)
    return JoinedSides(sides, read.shape.condition, types)


def _whole_reads(
    reader: SideReaders,
    inputs: Mapping[str, Any],
    snapshots: Mapping[str, Mapping[str, int | None]],
    limit: int,
) -> Whole:
    """Reads of a crossed table's every row (TPC-DS q88's one-row parts) while the product
    of its rows (by its snapshot's summary) and the rows it is crossed with stays within
    ``limit``: the pairs are made before any condition filters them. A larger one is
    Spark's join."""

    def whole(name: str, side: str, crossed: int) -> pa.Table:
        snapshot = snapshots[side].get(name)  # None: no snapshot yet, no rows
        rows = 0 if snapshot is None else live_rows(inputs[name], snapshot)
        if rows * max(crossed, 1) > limit:
            raise NotOnDriver(f"a cross join of {crossed:,} rows with {name}, of {rows:,}")
        return reader(name, side).where_true(lambda r: pa.array(np.ones(r.num_rows, bool)))

    return whole


def _left_sides(
    agg: Aggregation, base: Expressions, read: JoinedChange, fetches: tuple[Fetch, Any]
) -> JoinedSides:
    """The signed joined rows of a left join's terms, alone or under inner joins."""
    shape = read.shape
    assert isinstance(shape, LeftShape | LeftInnerShape)
    left = shape if isinstance(shape, LeftShape) else shape.left
    where = shape.where if isinstance(shape, LeftShape) else shape.inner.condition
    typed = exp.and_(left.on, where) if where is not None else left.on
    types = node_types(agg, replace(base, where=typed))  # ON's nodes typed too

    def on(rows: pa.Table) -> pa.Array:
        return ArrowEvaluator.joined(rows, types).mask(left.on)

    changes = {n: (c.inserted, c.deleted) for n, c in read.changes.items()}
    fetch, count = fetches
    if isinstance(shape, LeftShape):
        terms = left_terms(shape, changes, fetch, on)
    else:
        prefilter = conjunct_prefilter(single_table_conjuncts(shape.inner), types)
        terms = left_inner_terms(shape, changes, fetch, on, prefilter, count)
    sides = [(sign, ArrowEvaluator.joined(rows, types)) for sign, rows in terms]
    read.details["joined_rows"] = sum(e.rows.num_rows for _, e in sides)
    return JoinedSides(sides, where, types)


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
    out: dict[str, pa.DataType] = {}
    for semi in semis:
        out.update(types_over(agg, semi.name, semi.alias, typed_nodes(semi.predicate_nodes())))
    return out


def _flip_terms(
    read: JoinedChange,
    values: Mapping[str, Parameter],
    rows_now: Callable[[str], SnapshotRows],
    fetch: Fetch,
    types: dict[str, pa.DataType],
    inner_types: dict[str, pa.DataType],
    limit: int,
) -> list[tuple[int, ArrowEvaluator]]:
    """The terms of the parameters' moves: the rows whose conjunct the new value flips.

    Telescoped over the parameters in order (those before one as they are
    now, those after it as they were), every table and semi-join as it is
    now (:mod:`airflow_provider_ct.ivm.plan.parameters`). More than
    ``limit`` flipped rows (a value that moved far) are Spark's: the tick
    gives way.
    """
    assert isinstance(read.shape, JoinShape)  # a LEFT JOIN block has no parameters here
    if values:
        read.details["parameters_on"] = sorted({p.computed_on for p in values.values()})
    out = []
    order = [placed.parameter for placed in read.params]
    for index, placed in enumerate(read.params):
        parameter = values[placed.parameter]
        if not parameter.moved:
            continue
        sides = {name: NEW if i < index else OLD for i, name in enumerate(order)}
        plus, minus = flipped_rows(
            rows_now(placed.input), placed.conjunct, placed.alias, parameter, sides, types
        )
        read.details["flipped_rows"] = read.details.get("flipped_rows", 0) + len(plus) + len(minus)
        if read.details["flipped_rows"] > limit:
            raise NotOnDriver(f"more than {limit} rows flipped by a parameter's move")
        for sign, rows, side in ((1, plus, NEW), (-1, minus, OLD)):
            if not rows.num_rows:
                continue
            keep = _prefilter(read, types, values, {**sides, placed.parameter: side})
            terms = term_rows(read.shape, placed.position, rows, fetch, keep, all_new=True)
            for semi in read.semis:
                terms = filtered(terms, semi, fetch, NEW, inner_types)
            out.append((sign, ArrowEvaluator.joined(terms, types)))
    return out


def _param_types(agg: Aggregation, read: JoinedChange) -> dict[str, pa.DataType]:
    """The Spark types of the parameters' conjuncts' nodes, and of their values' literals."""
    out: dict[str, pa.DataType] = {}
    values = {p.name: p for p in agg.parameters}
    for placed in read.params:
        nodes = [
            n
            for n in typed_nodes([placed.conjunct])
            if not placeholders(n, values) and not _is_placeholder(n, values)
        ]
        out.update(types_over(agg, placed.input, placed.alias, nodes))
        out.update(values[placed.parameter].types())
    return out


def _is_placeholder(node: Any, values: Mapping[str, Parameter]) -> bool:
    return isinstance(node, exp.Column) and not node.table and node.name in values


def _prefilter(
    read: JoinedChange,
    types: dict[str, pa.DataType],
    values: Mapping[str, Parameter],
    sides: Mapping[str, str],
) -> Prefilter:
    """Each table's rows kept by the condition's conjuncts that read it alone (before joins).

    The parameters' conjuncts are applied here only (the shape's condition
    leaves them out), each with its parameter's value on ``sides``.
    """
    assert isinstance(read.shape, JoinShape)
    found = {a: list(cs) for a, cs in single_table_conjuncts(read.shape).items()}
    for placed in read.params:
        found.setdefault(placed.alias, []).append(bound(placed.conjunct, values, sides))
    return conjunct_prefilter(found, types)


def report(read: JoinedChange) -> dict[str, Any]:
    """What the report says of the changes a joined tick read on the driver."""
    return {**changes_report(read.changes), **read.details}
