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

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from airflow_provider_ct.ivm.driver.arrow_eval import ArrowEvaluator
from airflow_provider_ct.ivm.state.aggregate_state import GroupState, add_exact, state_table
from airflow_provider_ct.ivm.state.extrema import better


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

    :raises NotOnDriver: an expression, type or value Spark must decide.
    """
    arity, extrema = len(parts.arguments), len(parts.extrema)
    groups: dict[tuple[Any, ...], GroupState] = {}
    if not parts.keys:  # one group, always there (as Spark's aggregate without GROUP BY)
        groups[()] = GroupState.empty((), arity, extrema)
    for sign, rows in sides:
        kept = rows.mask(parts.where) if parts.where is not None else None
        keys = [_values(rows, node, kept) for node in parts.keys]
        arguments = [_values(rows, node, kept) for node in parts.arguments]
        count = rows.rows.num_rows if kept is None else int(pc.sum(kept).as_py() or 0)
        for i in range(count):
            key = tuple(column[i] for column in keys)
            group = groups.get(key)
            if group is None:
                group = GroupState.empty(key, arity, extrema)
                groups[key] = group
            group.rows += sign
            for j, column in enumerate(arguments):
                value = column[i]
                if value is None:
                    continue
                group.counts[j] += sign
                if j in parts.summed:
                    group.sums[j] = add_exact(group.sums[j], value if sign > 0 else -value)
            for e, (function, j) in enumerate(parts.extrema):
                side = group.extrema if sign > 0 else group.removed
                side[e] = better(function, side[e], arguments[j][i])
    return state_table(list(groups.values()), schema, len(parts.keys), arity)


def _values(rows: ArrowEvaluator, node: Any, kept: pa.Array | None) -> list[Any]:
    column = rows.column(node)
    return (column if kept is None else column.filter(kept)).to_pylist()


@dataclass(frozen=True)
class RowDiff:
    """What makes ``have`` equal ``want``: rows to insert, ``(file, position)`` to retract."""

    inserts: pa.Table
    retractions: list[tuple[str, int]]


def diff_rows(want: pa.Table, have: pa.Table, columns: Sequence[str]) -> RowDiff:
    """``want - have`` as inserts, ``have - want`` as the lowest positions of each row.

    Rows compare by value on ``columns`` (``have`` also holds ``_file`` and
    ``_pos``); duplicates count.
    """
    wanted = Counter(_tuples(want, columns))
    copies: dict[tuple[Any, ...], list[tuple[str, int]]] = {}
    at = zip(have.column("_file").to_pylist(), have.column("_pos").to_pylist(), strict=True)
    for row, where in zip(_tuples(have, columns), at, strict=True):
        copies.setdefault(row, []).append(where)
    retractions: list[tuple[str, int]] = []
    for row, positions in copies.items():
        extra = len(positions) - wanted.get(row, 0)
        if extra > 0:
            retractions.extend(sorted(positions)[:extra])
        wanted[row] -= len(positions)
    keep = []
    remaining = +wanted  # rows still wanted, with their copies
    for index, row in enumerate(_tuples(want, columns)):
        if remaining.get(row, 0) > 0:
            remaining[row] -= 1
            keep.append(index)
    inserts = want.select(list(columns)).take(pa.array(keep, pa.int64()))
    return RowDiff(inserts, sorted(retractions))


def _tuples(table: pa.Table, columns: Sequence[str]) -> list[tuple[Any, ...]]:
    values = [table.column(c).to_pylist() for c in columns]
    return list(zip(*values, strict=True)) if values else [() for _ in range(table.num_rows)]
