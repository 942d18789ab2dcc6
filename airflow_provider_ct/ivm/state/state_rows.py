"""Every group's row of a kept state, column by column: what a nested plan's outer reads.

A view whose aggregate sits under more query (:mod:`~airflow_provider_ct.ivm.plan.nested`)
needs the rows of *all* its groups every tick, not only of those a change
touched. Built group by group in Python (:func:`~.aggregate_state.output_rows`)
that costs about a second per hundred thousand groups, which is the whole
budget of a tick; built from the state's Arrow columns it costs
milliseconds. The arithmetic is the same as the per-group one for what it
takes: ``COUNT(*)`` the row count, ``COUNT(x)`` the non-NULL count,
``SUM(x)`` the sum and ``MIN``/``MAX`` the kept extremum (NULL once the
non-NULL count is 0), groups without rows left out (but the one group of an
aggregate without ``GROUP BY``), each cast *safely* to the output column's
type, so that a sum past it is Spark's overflow (:class:`NotInPlaceError`)
as in :func:`~.aggregate_state.output_rows`. ``AVG`` (Spark's rounding of a
decimal quotient) and expressions over aggregates (Spark's own evaluation)
are left to that function: :func:`every_row` returns None for them.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from airflow_provider_ct.ivm.plan.in_place import AVG, COUNT, EXTREMA, InPlace
from airflow_provider_ct.ivm.state.aggregate_state import (
    ROWS,
    count_column,
    key_column,
    sum_column,
    sum_overflow,
)
from airflow_provider_ct.ivm.state.extrema import extremum_column


def every_row(
    state: pa.Table,
    in_place: InPlace,
    key_positions: Sequence[int],
    schema: pa.Schema,
    *,
    scalar: bool,
) -> pa.Table | None:
    """The view's row of every group of ``state``, as ``schema``; None when a column needs
    the per-group arithmetic (``AVG``, a derived expression)."""
    if in_place.derived or any(a.function == AVG for a in in_place.aggregates):
        return None
    rows = pc.fill_null(state.column(ROWS), 0)
    table = state if scalar else state.filter(pc.greater(rows, 0))
    arrays: list[Any] = [None] * len(schema)
    for i, position in enumerate(key_positions):
        arrays[position] = table.column(key_column(i))
    for aggregate in in_place.aggregates:
        if aggregate.position is not None:
            arrays[aggregate.position] = _values(table, aggregate, in_place)
    try:
        cast = [a.cast(f.type, safe=True) for a, f in zip(arrays, schema, strict=True)]
    except (pa.ArrowInvalid, OverflowError) as exc:
        raise sum_overflow(exc) from None
    return pa.Table.from_arrays(cast, schema=schema)


def _values(table: pa.Table, aggregate: Any, in_place: InPlace) -> Any:
    """One aggregate's column over the groups of ``table``."""
    if aggregate.argument is None:
        return pc.fill_null(table.column(ROWS), 0)
    count = pc.fill_null(table.column(count_column(aggregate.argument)), 0)
    if aggregate.function == COUNT:
        return count
    if aggregate.function in EXTREMA:
        value = table.column(extremum_column(in_place.extremum_of(aggregate)))
    else:  # SUM
        value = table.column(sum_column(aggregate.argument))
    return pc.if_else(pc.greater(count, 0), value, pa.scalar(None, value.type))
