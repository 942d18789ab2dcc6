"""``MIN`` and ``MAX`` kept in place: a group's extremum, moved by inserts, lost by deletes.

Unlike a sum, an extremum has no inverse: ``max(old + inserted - deleted)``
is not a function of ``max(old)``, ``max(inserted)`` and ``max(deleted)``.
It almost is. Let ``candidate`` be the better of the kept extremum and the
change's inserted extremum (a value of the group's rows after the inserts).
If every deleted value lies strictly inside it (below it for ``MAX``, above
it for ``MIN``), the candidate is still one of the group's rows and nothing
beyond it was added, so it *is* the new extremum, exactly. Only a group
whose deleted extremum reaches the candidate (equal to it: the row holding
the extremum, or one of its ties, was deleted; beyond it cannot happen
unless the state is wrong, and is treated the same way) has an unknown
extremum: it is *stale*, and its extremum is read again from the new
inputs, for those groups only (:mod:`airflow_provider_ct.spark.ivm.in_place_rescan`),
as Materialize and pg_trickle rescan a group whose extremum was deleted.
A group whose non-NULL count reaches zero has a NULL extremum, and a group
without rows disappears, with no read.

State columns, per extremum ``e`` (:attr:`~airflow_provider_ct.ivm.plan.in_place.InPlace.extrema`):
``__ct_x<e>`` the extremum (NULL: no non-NULL value). A change also
carries ``__ct_y<e>``, the extremum of the values it deleted (its
``__ct_x<e>`` is that of the values it inserted); a kept state never
holds ``__ct_y``.

Comparisons are Python's, which order integers, decimals, dates,
timestamps, booleans and strings (by code point, which is the order of
their UTF-8 bytes, Spark's binary collation) as Spark does. Floating point
is refused before this runs (Spark orders ``NaN`` above every number,
Python compares nothing with it).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pyarrow as pa

from airflow_provider_ct.ivm.plan.in_place import MAX, MIN


def extremum_column(index: int) -> str:
    return f"__ct_x{index}"


def removed_column(index: int) -> str:
    return f"__ct_y{index}"


def better(function: str, a: Any, b: Any) -> Any:
    """The extremum of ``a`` and ``b`` under ``function`` (NULL is no value)."""
    if a is None:
        return b
    if b is None:
        return a
    if function == MAX:
        return b if b > a else a
    assert function == MIN
    return b if b < a else a


def reaches(function: str, removed: Any, candidate: Any) -> bool:
    """Whether a deleted value ``removed`` may have been the group's extremum ``candidate``."""
    if removed is None:
        return False
    if candidate is None:
        return True  # values were deleted from a group with no kept extremum: read it again
    return bool(removed >= candidate) if function == MAX else bool(removed <= candidate)


def change_schema(state: pa.Schema, extrema: int) -> pa.Schema:
    """A change's schema from the kept state's: ``__ct_y<e>`` added, typed as ``__ct_x<e>``."""
    schema = state
    for e in range(extrema):
        if removed_column(e) not in schema.names:
            kind = state.field(extremum_column(e)).type
            schema = schema.append(pa.field(removed_column(e), kind))
    return schema


def state_schema(change: pa.Schema) -> pa.Schema:
    """The kept state's schema from a change's: without the ``__ct_y<e>`` columns."""
    return pa.schema([f for f in change if not f.name.startswith("__ct_y")])


def missing_columns(names: Sequence[str], extrema: int) -> list[str]:
    """The extremum columns a kept state lacks (a state from before the view had them)."""
    return [extremum_column(e) for e in range(extrema) if extremum_column(e) not in names]


def new_extrema(
    functions: Sequence[str],
    old: Sequence[Any],
    inserted: Sequence[Any],
    removed: Sequence[Any],
) -> tuple[list[Any], list[int]]:
    """``(the candidates, the indexes of the stale ones)`` of one group (see the module)."""
    values, stale = [], []
    for e, function in enumerate(functions):
        candidate = better(function, old[e], inserted[e])
        values.append(candidate)
        if reaches(function, removed[e], candidate):
            stale.append(e)
    return values, stale


__all__ = [
    "better",
    "change_schema",
    "extremum_column",
    "missing_columns",
    "new_extrema",
    "reaches",
    "removed_column",
    "state_schema",
]
