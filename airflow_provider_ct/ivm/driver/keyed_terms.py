"""A keyed block's subqueries evaluated on the driver, over the rows of the keys a tick moved.

The keyed rule (:mod:`airflow_provider_ct.ivm.plan.keyed`) computes a
block's change as its rows of the keys ``K`` the changes hold, as they are
minus as they were. Spark evaluated those two terms over the keys' rows
(about 0.3 s each even over a few rows: the subqueries are decorrelated
into joins and aggregates). Here the driver evaluates each side: the
block's join of the keys' rows (:func:`~.driver_join.term_rows`), then each
subquery taken apart by :mod:`~airflow_provider_ct.ivm.plan.keyed_parts`,
computed per key from its table's rows of those keys at the same snapshot
(a subquery over several tables: those rows joined with the others, each
fetched by the values it joins on, :func:`~.driver_join.term_rows` again),
and kept as a column of the joined rows in the subquery's place; the
conjuncts holding them are evaluated like the rest of the condition
(:class:`~.arrow_eval.ArrowEvaluator`, Spark's types, exact or refused).

Aggregates per key are exact (:func:`~.parameter_rows.aggregate_value`:
sums in Python integers and decimals, ``AVG`` with Spark's rounding); what
it does not compute exactly raises :class:`NotOnDriver` and the tick gives
the block to Spark.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from airflow_provider_ct.ivm.driver.arrow_eval import ArrowEvaluator, NotOnDriver
from airflow_provider_ct.ivm.driver.driver_join import (
    conjunct_prefilter,
    join_on,
    qualified,
    single_table_conjuncts,
    tables_shape,
    term_rows,
)
from airflow_provider_ct.ivm.driver.outer_rows import aggregates_over
from airflow_provider_ct.ivm.plan.keyed_parts import (
    EXISTS,
    IN,
    VALUE_ALIAS,
    KeyedPart,
)

#: ``(input, column, keys)`` -> the input's rows whose ``column`` is one of ``keys``, on the
#: side being evaluated (the input's own column names).
InnerFetch = Callable[[str, str, pa.Array], pa.Table]

_ROW = "__ct_row.id"
_TUPLE = "__ct_tuple"


def kept_rows(
    rows: pa.Table,
    parts: Sequence[KeyedPart],
    fetch: InnerFetch,
    types: Mapping[str, pa.DataType],
    columns: Mapping[str, Sequence[str]],
) -> pa.Table:
    """The joined ``rows`` (columns ``alias.column``) whose subquery conjuncts all hold.

    :param columns: input name -> the columns of it read (a subquery's tables' joins).
    """
    conjuncts: dict[int, list[KeyedPart]] = {}  # parts sharing one (``EXISTS a OR EXISTS b``)
    for part in parts:
        conjuncts.setdefault(id(part.conjunct), []).append(part)
    for group in conjuncts.values():  # in turn: each reads only the rows still kept
        if not rows.num_rows:
            break
        with_values = rows
        for part in group:
            value = _part_value(rows, part, fetch, types, columns)
            name = f"{VALUE_ALIAS}.v{part.index}"
            with_values = with_values.append_column(pa.field(name, value.type), value)
        rows = rows.filter(ArrowEvaluator.joined(with_values, types).mask(group[0].replaced))
    return rows


def _inner_rows(
    part: KeyedPart,
    keys: pa.Array,
    fetch: InnerFetch,
    types: Mapping[str, pa.DataType],
    columns: Mapping[str, Sequence[str]],
) -> pa.Table:
    """The subquery's rows whose tied column is one of ``keys``, its own conditions applied
    (columns ``alias.column``): its tied table's, joined with its other tables."""
    tied = fetch(part.input, part.tie, keys)
    if len(part.reads) == 1:
        inner = qualified(tied, part.alias)
    else:
        shape = tables_shape(part.reads, part.where, columns)
        prefilter = conjunct_prefilter(single_table_conjuncts(shape), types)

        def by_join(name: str, _side: str, column: str, values: pa.Array) -> pa.Table:
            return fetch(name, column, values)  # ``fetch`` reads the side being evaluated

        inner = term_rows(shape, 0, tied, by_join, prefilter, all_new=True)
    if part.where is not None and inner.num_rows:
        inner = inner.filter(ArrowEvaluator.joined(inner, types).mask(part.where))
    return kept_rows(inner, part.parts, fetch, types, columns)


def _part_value(
    rows: pa.Table,
    part: KeyedPart,
    fetch: InnerFetch,
    types: Mapping[str, pa.DataType],
    columns: Mapping[str, Sequence[str]],
) -> pa.Array:
    """The part's value for every row of ``rows``."""
    outer = _combined(rows.column(f"{part.outer[0]}.{part.outer[1]}"))
    keys = pc.unique(pc.drop_null(outer))
    inner = _inner_rows(part, keys, fetch, types, columns)
    if part.kind == EXISTS:
        return _exists(rows, outer, inner, part, types)
    if part.ties:
        return _tied_values(rows, part, inner, types)
    codes = _codes(inner.column(f"{part.alias}.{part.tie}"), keys)
    if part.kind == IN:
        present = np.bincount(codes, minlength=len(keys)) > 0
        if part.value is not None:
            having = _per_key(inner, codes, len(keys), part, types)
            present &= np.asarray(pc.fill_null(having, False).to_pylist()[:-1], dtype=bool)
        kept = keys.filter(pa.array(present, pa.bool_()))
        return pc.fill_null(pc.is_in(outer, value_set=kept), False)
    values = _per_key(inner, codes, len(keys), part, types)
    positions = pc.index_in(outer, value_set=keys)
    empty = pa.scalar(values[len(keys)].as_py(), values.type)  # the value of no rows
    return pc.if_else(pc.is_null(positions), empty, values.take(positions))


def _per_key(
    inner: pa.Table,
    codes: np.ndarray,
    keys: int,
    part: KeyedPart,
    types: Mapping[str, pa.DataType],
) -> pa.Array:
    """``part.value`` per key (``keys`` of them, by ``codes``), then once over no rows."""
    order = np.argsort(codes, kind="stable")
    bounds = np.searchsorted(codes[order], np.arange(keys + 1)).tolist()
    spans = [*itertools.pairwise(bounds), (0, 0)]
    table = aggregates_over(inner, part.aggregates, part.index, order, spans, types)
    return ArrowEvaluator.joined(table, types).column(part.value)


def _tied_values(
    rows: pa.Table, part: KeyedPart, inner: pa.Table, types: Mapping[str, pa.DataType]
) -> pa.Array:
    """A scalar tied by several columns (TPC-H q20's per part and supplier): its value per
    distinct tuple of the outer rows' tied columns, then per outer row (a tuple holding a
    NULL matches no row: the value of no rows)."""
    outer = [part.outer, *(o for _, o in part.ties)]
    mine = [(part.alias, part.tie), *(i for i, _ in part.ties)]
    names = [f"{a}.{c}" for a, c in outer]
    distinct = rows.select(names).group_by(names, use_threads=False).aggregate([])
    tuples = pa.table(
        {
            **{f"{_TUPLE}.k{i}": distinct.column(n) for i, n in enumerate(names)},
            f"{_TUPLE}.id": pa.array(np.arange(distinct.num_rows), pa.int64()),
        }
    )
    held = [(_TUPLE, f"k{i}") for i in range(len(names))]
    matched = join_on(tuples, inner, list(zip(held, mine, strict=True)))
    codes = np.asarray(matched.column(f"{_TUPLE}.id").to_numpy(), dtype=np.int64)
    values = _per_key(matched, codes, tuples.num_rows, part, types)
    numbered = rows.select(names).append_column(
        _ROW, pa.array(np.arange(rows.num_rows), pa.int64())
    )
    located = join_on(numbered, tuples, list(zip(outer, held, strict=True)))
    positions = np.full(rows.num_rows, tuples.num_rows, dtype=np.int64)  # no rows' value
    positions[located.column(_ROW).to_numpy()] = located.column(f"{_TUPLE}.id").to_numpy()
    return values.take(pa.array(positions, pa.int64()))


def _exists(
    rows: pa.Table,
    outer: pa.Array,
    inner: pa.Table,
    part: KeyedPart,
    types: Mapping[str, pa.DataType],
) -> pa.Array:
    """Per outer row: whether a row of its key passes the conditions between the two."""
    tie = inner.column(f"{part.alias}.{part.tie}")
    if part.correlated is None:
        return pc.fill_null(pc.is_in(outer, value_set=pc.unique(_combined(tie))), False)
    for alias, _ in part.reads:
        if any(name.startswith(f"{alias}.") for name in rows.column_names):
            raise NotOnDriver(f"the subquery's alias {alias} is also the block's")
    numbered = rows.append_column(_ROW, pa.array(np.arange(rows.num_rows), pa.int64()))
    joined = join_on(numbered, inner, [(part.outer, (part.alias, part.tie))])
    if not joined.num_rows:
        return pa.array(np.zeros(rows.num_rows, dtype=bool), pa.bool_())
    passed = joined.filter(ArrowEvaluator.joined(joined, types).mask(part.correlated))
    found = pc.unique(passed.column(_ROW))
    return pc.is_in(numbered.column(_ROW), value_set=found)


def _codes(column: Any, keys: pa.Array) -> np.ndarray:
    """Each inner row's key position (the rows were fetched by ``keys``: every one has one)."""
    positions = pc.index_in(_combined(column), value_set=keys)
    if positions.null_count:
        raise NotOnDriver("a fetched row's key is not one of the keys asked for")
    return np.asarray(positions.to_numpy(zero_copy_only=False), dtype=np.int64)


def _combined(column: Any) -> pa.Array:
    return column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column
