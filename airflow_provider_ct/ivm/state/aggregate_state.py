"""In-place aggregates' arithmetic: state plus signed change, and the rows it gives.

The state of a view kept in place (:mod:`.in_place`) holds per group its
keys (``__ct_k0``...), its row count (``__ct_rows``) and per distinct
aggregate argument ``j`` the sum (``__ct_s<j>``) and the non-NULL count
(``__ct_n<j>``) of its values, and per ``MIN``/``MAX`` call ``e`` its
extremum (``__ct_x<e>``, :mod:`.extrema`). A tick's change has the same columns, signed
(rows leaving a group count negative), as Spark aggregated it. The two are
added exactly, column by column, in :mod:`.state_add`; this module holds
the state's names and the output rows of groups, with Spark's results:

* ``COUNT(*)`` is the row count, ``COUNT(x)`` the non-NULL count;
* ``SUM(x)`` is the sum, or NULL once no non-NULL value is left;
* ``MIN(x)``/``MAX(x)`` is the kept extremum, moved by the inserted values,
  and read again for the groups whose extremum a deletion may have removed
  (:mod:`.extrema`); NULL once no non-NULL value is left;
* ``AVG(x)`` of a decimal is Spark's: the sum divided by the count rounded
  half-up to 39 significant digits, then half-up to the result's scale (NULL
  if it overflows the result's precision); of an integral type, the
  quotient of the two as doubles (Spark sums them as doubles, which is the
  exact sum below 2**53: a larger sum is refused, and the group recomputed);
* a group whose row count reaches zero disappears; without ``GROUP BY``
  the one group always exists (``COUNT`` 0, ``SUM`` and ``AVG`` NULL).

Only integral and decimal sums are kept (exact arithmetic: floating-point
sums depend on the order of addition). Pure Python and Arrow, no Spark: the
arithmetic can be tested on its own against Spark's aggregates.
"""

from __future__ import annotations

import decimal
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from decimal import ROUND_HALF_UP, Decimal
from typing import Any

import pyarrow as pa

from airflow_provider_ct.exceptions import NotInPlaceError, StateMismatchError
from airflow_provider_ct.ivm.plan.in_place import AVG, COUNT, EXTREMA, MAX, MIN, SUM, InPlace
from airflow_provider_ct.ivm.plan.moments import WIDE_INTEGER_DIGITS
from airflow_provider_ct.ivm.state.extrema import (
    extremum_column,
    missing_columns,
    removed_column,
)

ROWS = "__ct_rows"
#: Spark's ``Decimal`` division context (precision 38 + 1, half-up).
_SPARK_DIVISION = decimal.Context(prec=39, rounding=ROUND_HALF_UP)
#: Wide enough that sums of 38-digit decimals never round.
_EXACT = decimal.Context(prec=200, rounding=ROUND_HALF_UP, Emax=10**6, Emin=-(10**6))
#: Doubles hold every integer up to here exactly.
_DOUBLE_EXACT = 2**53


def key_column(index: int) -> str:
    return f"__ct_k{index}"


def sum_column(index: int) -> str:
    return f"__ct_s{index}"


def count_column(index: int) -> str:
    return f"__ct_n{index}"


def value_columns(arguments: int, extrema: int = 0) -> list[str]:
    """The state's columns after the keys: row count, sum and count per argument, extrema."""
    out = [ROWS]
    for j in range(arguments):
        out += [sum_column(j), count_column(j)]
    return out + [extremum_column(e) for e in range(extrema)]


@dataclass
class GroupState:
    """One group's state: its keys and counts, exactly, and its extrema."""

    key: tuple[Any, ...]
    rows: int
    sums: list[Any]
    counts: list[int]
    #: Per extremum (:attr:`~.in_place.InPlace.extrema`): the kept one, or a
    #: change's inserted one.
    extrema: list[Any] = field(default_factory=list)
    #: A change's only: per extremum, the extremum of the values it deleted.
    removed: list[Any] = field(default_factory=list)

    @classmethod
    def empty(cls, key: tuple[Any, ...], arguments: int, extrema: int) -> GroupState:
        return cls(key, 0, [None] * arguments, [0] * arguments, [None] * extrema, [None] * extrema)


#: The stale groups' keys -> each one's extrema read again from the new inputs
#: (all of the view's, in order); a group without rows there is left out.
Rescan = Callable[[list[tuple[Any, ...]]], Mapping[tuple[Any, ...], Sequence[Any]]]


def _groups(
    table: pa.Table | None, keys: int, arguments: int, extrema: int = 0
) -> dict[tuple[Any, ...], GroupState]:
    if table is None or table.num_rows == 0:
        return {}
    missing = missing_columns(table.schema.names, extrema)
    if missing:
        raise StateMismatchError(f"the kept state has no column {missing[0]} (an older state)")
    names = [key_column(i) for i in range(keys)] + value_columns(arguments, extrema)
    columns = [table.column(n).to_pylist() for n in names]
    removed = [removed_column(e) for e in range(extrema)]
    nulls = [None] * table.num_rows
    removals = [table.column(n).to_pylist() if n in table.schema.names else nulls for n in removed]
    out: dict[tuple[Any, ...], GroupState] = {}
    for index, row in enumerate(zip(*columns, strict=True)):
        key = tuple(row[:keys])
        values = row[keys:]
        sums = [values[1 + 2 * j] for j in range(arguments)]
        counts = [int(values[2 + 2 * j] or 0) for j in range(arguments)]
        kept = list(values[1 + 2 * arguments :])
        gone = [column[index] for column in removals]
        out[key] = GroupState(key, int(values[0] or 0), sums, counts, kept, gone)
    return out


def groups_of(table: pa.Table, keys: int, arguments: int, extrema: int = 0) -> list[GroupState]:
    """The rows of a state (or a change) as :class:`GroupState` objects, in order."""
    return list(_groups(table, keys, arguments, extrema).values())


def add_exact(a: Any, b: Any) -> Any:
    """``a + b`` without rounding (NULL is nothing to add)."""
    if a is None:
        return b
    if b is None:
        return a
    if isinstance(a, Decimal) or isinstance(b, Decimal):
        return _EXACT.add(Decimal(a), Decimal(b))
    return a + b


def state_table(
    groups: Sequence[GroupState], schema: pa.Schema, keys: int, arguments: int
) -> pa.Table:
    """``groups`` as rows of ``schema`` (keys, row count, sums and counts, extrema; a
    change's schema also holds the deleted extrema)."""
    by_name: dict[str, list[Any]] = {key_column(i): [g.key[i] for g in groups] for i in range(keys)}
    by_name[ROWS] = [g.rows for g in groups]
    for j in range(arguments):
        by_name[sum_column(j)] = [g.sums[j] for g in groups]
        by_name[count_column(j)] = [g.counts[j] for g in groups]
    for name in schema.names:
        if name.startswith("__ct_x"):
            e = int(name[len("__ct_x") :])
            by_name[name] = [g.extrema[e] if g.extrema else None for g in groups]
        elif name.startswith("__ct_y"):
            e = int(name[len("__ct_y") :])
            by_name[name] = [g.removed[e] if g.removed else None for g in groups]
    return _table([by_name[name] for name in schema.names], schema)


def sum_overflow(exc: Exception) -> NotInPlaceError:
    """The error for a value past its column's type: Spark overflows there, so the view
    is left to its fallback plan."""
    return NotInPlaceError(f"a sum past its type ({exc}): Spark overflows there")


def _table(columns: list[list[Any]], schema: pa.Schema) -> pa.Table:
    """``columns`` as ``schema``'s types; a value past its type is Spark's overflow, not ours.

    Spark's ``SUM`` of a ``BIGINT`` wraps around and its decimal ``SUM``
    turns NULL past the type's precision; exact sums do neither, so such a
    view is left to its fallback plan (:class:`NotInPlaceError`).
    """
    try:
        arrays = [pa.array(v, type=f.type) for v, f in zip(columns, schema, strict=True)]
    except (pa.ArrowInvalid, OverflowError) as exc:
        raise sum_overflow(exc) from None
    return pa.Table.from_arrays(arrays, schema=schema)


def output_rows(
    groups: Sequence[GroupState],
    in_place: InPlace,
    key_positions: Sequence[int],
    schema: pa.Schema,
    *,
    scalar: bool,
    derived: Mapping[int, Sequence[Any]] | None = None,
) -> pa.Table:
    """The view's rows of ``groups`` (those with rows left), with ``schema`` (the target's).

    :param derived: per :class:`~.in_place.Derived` column's position, its
        value for each of ``groups`` (in order), as Spark computed it.
    """
    columns: list[list[Any]] = [[] for _ in schema]
    for index, group in enumerate(groups):
        if group.rows <= 0 and not scalar:
            continue
        for i, position in enumerate(key_positions):
            columns[position].append(group.key[i])
        for aggregate in in_place.aggregates:
            if aggregate.position is not None:
                field_type = schema.field(aggregate.position).type
                columns[aggregate.position].append(_value(group, aggregate, field_type, in_place))
        for column in in_place.derived:
            columns[column.position].append((derived or {})[column.position][index])
    return _table(columns, schema)


def operand_values(
    groups: Sequence[GroupState], in_place: InPlace, types: Sequence[pa.DataType]
) -> list[tuple[Any, ...]]:
    """Per group, the value of every aggregate (``types``: their Spark types, as Arrow)."""
    return [
        tuple(
            _value(group, aggregate, field_type, in_place)
            for aggregate, field_type in zip(in_place.aggregates, types, strict=True)
        )
        for group in groups
    ]


def moment_overflow(groups: Sequence[GroupState], in_place: InPlace) -> str | None:
    """Why a group's ``STDDEV``/``VARIANCE`` would not be exact, or None.

    Past :data:`~.moments.WIDE_INTEGER_DIGITS` digits Spark's decimal
    arithmetic gives NULL, not the value: a square so lost is missing from
    its count (fewer squares than values), a sum so lost is NULL beside a
    count, and a numerator past them would be NULL. Such a tick is left to
    the fallback (:mod:`airflow_provider_ct.ivm.plan.moments`).
    """
    bound = 10**WIDE_INTEGER_DIGITS
    for derived in in_place.derived:
        for _, total, squares in derived.moments:
            base = in_place.aggregates[total].argument
            square = in_place.aggregates[squares].argument
            assert base is not None and square is not None
            for group in groups:
                n, s, q = group.counts[base], group.sums[base] or 0, group.sums[square]
                if group.counts[square] != n or (n and q is None):
                    return f"a square, or a sum of squares, past {WIDE_INTEGER_DIGITS} digits"
                if max(abs(n * (q or 0)), s * s) >= bound:
                    return f"a STDDEV/VARIANCE numerator past {WIDE_INTEGER_DIGITS} digits"
    return None


def _value(group: GroupState, aggregate: Any, field_type: pa.DataType, in_place: InPlace) -> Any:
    if aggregate.argument is None:
        return group.rows
    total, count = group.sums[aggregate.argument], group.counts[aggregate.argument]
    if aggregate.function == COUNT:
        return count
    if count == 0:
        return None
    if aggregate.function in EXTREMA:
        return group.extrema[in_place.extremum_of(aggregate)]
    if aggregate.function == SUM:
        return total
    assert aggregate.function == AVG
    if pa.types.is_decimal(field_type):
        return spark_decimal_average(total, count, field_type.precision, field_type.scale)
    if abs(total) >= _DOUBLE_EXACT:
        raise StateMismatchError(
            f"an integral AVG whose sum {total} is past 2**53: Spark's double sum is not exact"
        )
    return float(total) / float(count)


def spark_decimal_average(total: Decimal, count: int, precision: int, scale: int) -> Decimal | None:
    """Spark's ``AVG`` of decimals from their exact sum and count (NULL on overflow)."""
    quotient = _SPARK_DIVISION.divide(Decimal(total), Decimal(count))
    rounded = quotient.quantize(Decimal(1).scaleb(-scale), rounding=ROUND_HALF_UP, context=_EXACT)
    integral = rounded.adjusted() + 1 if rounded else 0
    return None if integral > precision - scale else rounded


__all__ = [
    "AVG",
    "COUNT",
    "MAX",
    "MIN",
    "ROWS",
    "SUM",
    "GroupState",
    "Rescan",
    "add_exact",
    "count_column",
    "groups_of",
    "key_column",
    "operand_values",
    "output_rows",
    "spark_decimal_average",
    "state_table",
    "sum_column",
    "sum_overflow",
    "value_columns",
]
