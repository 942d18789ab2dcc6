"""A nested plan's outer query evaluated on the driver over the inner rows.

The in-place tick computes every group's row of the inner aggregate from
its kept state; the outer query (:mod:`airflow_provider_ct.ivm.plan.outer_shape`)
is then a few filters, a join by key and perhaps a count over a few
thousand rows. Here they run with ``pyarrow``: the scalar subqueries once
over the inner rows, the conjuncts over the inner rows alone, the joined
tables fetched by the inner values that remain (their rows at the pinned
snapshot, from the driver's file cache), the other conjuncts, then the
outputs, per group when the outer query groups.

Every value is Spark's or the evaluation stops: expressions go through
:class:`~.arrow_eval.ArrowEvaluator` with Spark's types, aggregates through
:func:`~.parameter_rows.aggregate_value` (exact sums, Spark's ``AVG``
rounding), and anything else raises :class:`~.arrow_eval.NotOnDriver`, so
the tick runs the outer query in Spark as before.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from sqlglot import exp

from airflow_provider_ct.ivm.driver.arrow_eval import ArrowEvaluator, NotOnDriver, node_key
from airflow_provider_ct.ivm.driver.driver_join import join_on, qualified
from airflow_provider_ct.ivm.driver.parameter_rows import aggregate_value
from airflow_provider_ct.ivm.plan.outer_shape import (
    MAIN,
    SCALAR_ALIAS,
    OuterJoin,
    OuterShape,
    aggregate_alias,
)

#: ``(join, values)`` -> the joined table's rows whose join column is one of ``values``
#: (its own column names), at the tick's pinned snapshot.
OuterFetch = Callable[[OuterJoin, pa.Array], pa.Table]

_FUNCTIONS = {exp.Sum: "SUM", exp.Count: "COUNT", exp.Avg: "AVG", exp.Min: "MIN", exp.Max: "MAX"}
_ROW = "__ct_row"


def outer_rows(
    shape: OuterShape, inner: pa.Table, fetch: OuterFetch, types: Mapping[str, pa.DataType]
) -> pa.Table:
    """The outer query's rows over ``inner`` (every group's row), columns by output name."""
    inner = inner.rename_columns(list(shape.names))
    rows = qualified(inner, shape.alias)
    for scalar in shape.scalars:
        sub = qualified(inner, scalar.alias)
        if scalar.where is not None:
            sub = sub.filter(ArrowEvaluator.joined(sub, types).mask(scalar.where))
        values = aggregated(sub, scalar.calls, scalar.index, None, types)
        value = ArrowEvaluator.joined(values, types).column(scalar.value)
        rows = rows.append_column(
            pa.field(f"{SCALAR_ALIAS}.s{scalar.index}", value.type),
            pa.repeat(value[0], rows.num_rows),
        )
    rows = _kept(rows, shape.early, types)
    for join in shape.joins:
        keys = pc.unique(pc.drop_null(rows.column(f"{shape.alias}.{join.inner}")))
        fetched = qualified(fetch(join, keys), join.alias)
        rows = join_on(rows, fetched, [((shape.alias, join.inner), (join.alias, join.column))])
    rows = _kept(rows, shape.late, types)
    if shape.group is None:
        return _outputs(rows, shape.outputs, types)
    groups = _groups(rows, shape, types)
    if shape.having is not None:
        groups = _kept(groups, [shape.having], types)
    return _outputs(groups, shape.outputs, types)


def _kept(rows: pa.Table, conjuncts: Sequence[Any], types: Mapping[str, pa.DataType]) -> pa.Table:
    for conjunct in conjuncts:
        if not rows.num_rows:
            break
        rows = rows.filter(ArrowEvaluator.joined(rows, types).mask(conjunct))
    return rows


def _outputs(
    rows: pa.Table, outputs: Sequence[tuple[str, Any]], types: Mapping[str, pa.DataType]
) -> pa.Table:
    evaluator = ArrowEvaluator.joined(rows, types)
    return pa.table({name: evaluator.column(node) for name, node in outputs})


def _groups(rows: pa.Table, shape: OuterShape, types: Mapping[str, pa.DataType]) -> pa.Table:
    """One row per group: its key columns (named as ``rows``') and its aggregates'."""
    assert shape.group is not None
    names = []
    for key in shape.group:
        if not isinstance(key, exp.Column):
            raise NotOnDriver(f"GROUP BY {node_key(key)}: an expression is Spark's")
        names.append(f"{key.table.lower()}.{key.name.lower()}")
    if not names:  # one group, even of no rows
        return aggregated(rows, shape.calls, MAIN, None, types)
    numbered = rows.select(names).append_column(
        _ROW, pa.array(np.arange(rows.num_rows), pa.int64())
    )
    grouped = numbered.group_by(names, use_threads=False).aggregate([(_ROW, "list")])
    listed = grouped.column(f"{_ROW}_list").combine_chunks()
    keys = grouped.select(names)
    return pa.Table.from_arrays(
        [*keys.columns, *aggregated(rows, shape.calls, MAIN, listed, types).columns],
        names=[*names, *(f"{aggregate_alias(MAIN)}.a{j}" for j in range(len(shape.calls)))],
    )


def aggregated(
    rows: pa.Table,
    calls: Sequence[Any],
    index: int,
    groups: pa.ListArray | None,
    types: Mapping[str, pa.DataType],
) -> pa.Table:
    """Each aggregate call's value per group (``groups``: each group's row positions;
    None: one group of every row), as columns ``__ct_agg<index>.a<j>``."""
    if groups is None:
        order = np.arange(rows.num_rows)
        spans = [(0, rows.num_rows)]
    else:
        order = np.asarray(groups.flatten().to_numpy(), dtype=np.int64)
        spans = list(itertools.pairwise(groups.offsets.to_pylist()))
    return aggregates_over(rows, calls, index, order, spans, types)


def aggregates_over(
    rows: pa.Table,
    calls: Sequence[Any],
    index: int,
    order: np.ndarray,
    spans: Sequence[tuple[int, int]],
    types: Mapping[str, pa.DataType],
) -> pa.Table:
    """Each aggregate call's value over each span of ``rows`` taken in ``order`` (a span
    ``(start, stop)`` is one group; an empty one is the value of no rows), exactly as
    Spark computes it into the call's type, as columns ``__ct_agg<index>.a<j>``."""
    taken = pa.array(order, pa.int64())
    evaluator = ArrowEvaluator.joined(rows, types)
    columns: dict[str, pa.Array] = {}
    for j, call in enumerate(calls):
        kind = types.get(node_key(call))
        if kind is None:
            raise NotOnDriver(f"no Spark type for {node_key(call)}")
        argument = call.this
        values = None
        if argument is not None and not isinstance(argument, exp.Star):
            values = evaluator.column(argument).take(taken)
        function = _FUNCTIONS[type(call)]
        found = []
        for start, stop in spans:
            group = None if values is None else values.slice(start, stop - start)
            found.append(aggregate_value(function, group, int(stop - start), kind))
        columns[f"{aggregate_alias(index)}.a{j}"] = pa.array(found, kind)
    if not columns:
        return pa.table({"__ct_none": pa.nulls(len(spans))})
    return pa.table(columns)
