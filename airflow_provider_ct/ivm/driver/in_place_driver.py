"""In-place aggregates without a Spark job: the change's state and the diff, on the driver.

For a view over one input whose change is on the driver as Arrow (and small),
:func:`change_state` aggregates the rows the change adds and removes, after
the block's ``WHERE``, into the same signed per-group state a Spark job would
(:mod:`.aggregate_state`), using :class:`~.arrow_eval.ArrowEvaluator` for the
expressions; :func:`diff_rows` then compares the affected groups' rows with
the target's rows of those groups read with their positions
(:func:`~.snapshot_files.rows_with_positions`), by value, retracting the
lowest ``(_file, _pos)`` copies first like every other diff of this package.
Both paths give the same state and the same correction; the randomized run
and ``tests/test_in_place_driver.py`` check that on the same ticks.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from airflow_provider_ct.ivm.changes.row_match import joint_codes
from airflow_provider_ct.ivm.driver.arrow_eval import ArrowEvaluator
from airflow_provider_ct.ivm.plan.in_place import MAX
from airflow_provider_ct.ivm.state.aggregate_state import (
    ROWS,
    count_column,
    key_column,
    sum_column,
    sum_overflow,
)
from airflow_provider_ct.ivm.state.extrema import extremum_column, removed_column
from airflow_provider_ct.ivm.state.state_add import WIDE_DIGITS

#: A row's signed copies, and its place in its table (:func:`diff_rows`).
_COPIES = "__ct_copies"
_ORDER = "__ct_order"


@dataclass(frozen=True)
class Expressions:
    """The block's parts a change's state needs, as sqlglot nodes."""

    where: Any
    keys: tuple[Any, ...]
    arguments: tuple[Any, ...]
    #: Arguments whose sum is kept (``SUM``/``AVG``); the others are only counted.
    summed: frozenset[int]
    #: ``(min|max, argument)`` per extremum kept (:mod:`~..state.extrema`).
    extrema: tuple[tuple[str, int], ...] = ()


def change_state(
    sides: Sequence[tuple[int, ArrowEvaluator]], parts: Expressions, schema: pa.Schema
) -> pa.Table:
    """The signed state of the groups ``sides`` (sign, rows) reach, as ``schema``.

    ``schema`` is the change's (the state's with the deleted extrema,
    :func:`~..state.extrema.change_schema`): per extremum, the inserted
    values' in ``__ct_x<e>`` and the deleted values' in ``__ct_y<e>``.
    One Arrow aggregation over both sides' signed rows (NULL keys group
    together, as in Spark); sums are taken as 75-digit decimals and cast
    safely to the state's types, so an overflow is Spark's
    (:class:`~airflow_provider_ct.exceptions.NotInPlaceError`), never a wrap.

    :raises NotOnDriver: an expression, type or value Spark must decide.
    """
    signed = [_signed_rows(sign, rows, parts, schema) for sign, rows in sides]
    keys = [key_column(i) for i in range(len(parts.keys))]
    aggregations = [(ROWS, "sum")]
    for j in range(len(parts.arguments)):
        aggregations += [(sum_column(j), "sum"), (count_column(j), "sum")]
    for e, (function, _) in enumerate(parts.extrema):
        kind = "max" if function == MAX else "min"
        aggregations += [(extremum_column(e), kind), (removed_column(e), kind)]
    if not signed:  # no side: the columns as the state types them, no rows
        names = [*keys, *(n for n, _ in aggregations)]
        signed = [pa.table({n: pa.nulls(0, schema.field(n).type) for n in names})]
    grouped = pa.concat_tables(signed).group_by(keys, use_threads=False).aggregate(aggregations)
    columns = {name: grouped.column(f"{name}_{kind}") for name, kind in aggregations}
    columns.update({key: grouped.column(key) for key in keys})
    for name in [ROWS, *(count_column(j) for j in range(len(parts.arguments)))]:
        columns[name] = pc.fill_null(columns[name], 0)
    try:
        return pa.table({n: columns[n] for n in schema.names}).cast(schema, safe=True)
    except (pa.ArrowInvalid, OverflowError) as exc:
        raise sum_overflow(exc) from None


def _signed_rows(
    sign: int, rows: ArrowEvaluator, parts: Expressions, schema: pa.Schema
) -> pa.Table:
    """One side's rows below the aggregation as signed state columns (one row per row)."""
    kept = rows.mask(parts.where) if parts.where is not None else None
    arguments = [_values(rows, node, kept) for node in parts.arguments]
    count = rows.rows.num_rows if kept is None else int(pc.sum(kept).as_py() or 0)
    columns: dict[str, Any] = {
        key_column(i): _values(rows, node, kept) for i, node in enumerate(parts.keys)
    }
    columns[ROWS] = pa.array(np.full(count, sign, dtype=np.int64))
    for j, values in enumerate(arguments):
        kind = schema.field(sum_column(j)).type
        summed = _signed_sum(sign, values, kind) if j in parts.summed else pa.nulls(count, kind)
        columns[sum_column(j)] = summed
        columns[count_column(j)] = pc.if_else(pc.is_valid(values), sign, 0).cast(pa.int64())
    for e, (_, j) in enumerate(parts.extrema):
        values, none = arguments[j], pa.nulls(count, arguments[j].type)
        columns[extremum_column(e)] = values if sign > 0 else none
        columns[removed_column(e)] = none if sign > 0 else values
    return pa.table(columns)


def _signed_sum(sign: int, values: pa.Array, kind: pa.DataType) -> pa.Array:
    """``values`` (negated for a deletion) in a type no sum of them overflows
    (``kind``: the state's sum type, decimal or integral)."""
    wide = pa.decimal256(WIDE_DIGITS, kind.scale if pa.types.is_decimal(kind) else 0)
    widened = values.cast(wide)
    return widened if sign > 0 else pc.negate(widened)


def _values(rows: ArrowEvaluator, node: Any, kept: pa.Array | None) -> pa.Array:
    column = rows.column(node)
    column = column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column
    return column if kept is None else column.filter(kept)


@dataclass(frozen=True)
class RowDiff:
    """What makes ``have`` equal ``want``: rows to insert, ``(file, position)`` to retract."""

    inserts: pa.Table
    retractions: list[tuple[str, int]]


def diff_rows(want: pa.Table, have: pa.Table, columns: Sequence[str]) -> RowDiff:
    """``want - have`` as inserts, ``have - want`` as the lowest positions of each row.

    Rows compare by value on ``columns`` (``have`` also holds ``_file`` and
    ``_pos``); duplicates count. Compared as integer codes of one dictionary
    per column over both sides (NULL equal to NULL), in Arrow: a diff of
    60,000 groups' rows took 0.5 s as Python tuples.
    """
    left, right = joint_codes(want.select(list(columns)), have.select(list(columns)))
    keys = list(left)
    wanted = pa.table({**left, _COPIES: np.ones(want.num_rows, dtype=np.int64)})
    held = pa.table({**right, _COPIES: np.full(have.num_rows, -1, dtype=np.int64)})
    summed = pa.concat_tables([wanted, held]).group_by(keys).aggregate([(_COPIES, "sum")])
    surplus = summed.rename_columns([*keys, _COPIES])
    order = np.arange(want.num_rows, dtype=np.int64)
    keep = _first_copies(pa.table({**left, _ORDER: order}), surplus, keys, 1)
    inserts = want.select(list(columns)).take(pa.array(np.sort(keep), pa.int64()))
    located = pa.table({**right, "_file": have.column("_file"), "_pos": have.column("_pos")})
    picked = _first_copies(located, surplus, keys, -1, by=["_file", "_pos"])
    files, positions = picked.column("_file").to_pylist(), picked.column("_pos").to_pylist()
    retractions = list(zip(files, positions, strict=True))
    return RowDiff(inserts, sorted(retractions))


def picked_copies(have: pa.Table, lost: pa.Table, columns: Sequence[str]) -> list[tuple[str, int]]:
    """A copy in ``have`` of each row of ``lost`` (by value, NULL equal to NULL), lowest
    ``(_file, _pos)`` first, as :func:`diff_rows` retracts; fewer when ``have`` lacks some."""
    left, right = joint_codes(lost.select(list(columns)), have.select(list(columns)))
    keys = list(left)
    lost_copies = pa.table({**left, _COPIES: np.full(lost.num_rows, -1, dtype=np.int64)})
    summed = lost_copies.group_by(keys).aggregate([(_COPIES, "sum")])
    surplus = summed.rename_columns([*keys, _COPIES])
    located = pa.table({**right, "_file": have.column("_file"), "_pos": have.column("_pos")})
    picked = _first_copies(located, surplus, keys, -1, by=["_file", "_pos"])
    files, positions = picked.column("_file").to_pylist(), picked.column("_pos").to_pylist()
    return sorted(zip(files, positions, strict=True))


def _first_copies(
    rows: pa.Table, surplus: pa.Table, keys: list[str], sign: int, by: Sequence[str] = ()
) -> Any:
    """Of each row whose copies ``sign * surplus`` exceed zero, that many first copies.

    Copies are ordered by ``by`` (default: ``_ORDER``, their place in ``rows``);
    returns the ``_ORDER`` indexes chosen (``by`` empty) or the chosen rows.
    """
    extra = surplus.filter(pc.greater(pc.multiply(surplus.column(_COPIES), sign), 0))
    joined = rows.join(extra, keys, join_type="inner")
    order = [*keys, *(by or [_ORDER])]
    joined = joined.sort_by([(c, "ascending") for c in order])
    if not joined.num_rows:
        return np.zeros(0, dtype=np.int64) if not by else joined
    starts = np.zeros(joined.num_rows, dtype=bool)
    starts[0] = True
    for key in keys:
        codes = joined.column(key).to_numpy()
        starts[1:] |= codes[1:] != codes[:-1]
    at = np.arange(joined.num_rows)
    rank = at - np.maximum.accumulate(np.where(starts, at, 0))
    chosen = rank < joined.column(_COPIES).to_numpy() * sign
    if by:
        return joined.filter(pa.array(chosen))
    return joined.column(_ORDER).to_numpy()[chosen]
