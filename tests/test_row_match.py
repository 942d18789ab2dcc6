"""Rows matched by value (NULL matching NULL), against a Python model of tuples.

Both ways of :mod:`airflow_provider_ct.ivm.changes.row_match` are exercised:
a first column of integers or dates (sorted and probed) and one of strings
(the joint dictionary encoding), with NULLs and repeated first-column values
whose other columns differ, so a candidate pair must be checked.
"""

from __future__ import annotations

import datetime
import random

import numpy as np
import pyarrow as pa
import pytest

from airflow_provider_ct.ivm.changes.row_match import matching_index, matching_rows

FIRST = {
    "int": (pa.int64(), lambda r: r.choice([None, 0, 1, 2, 3, -5, 2**40])),
    "int32": (pa.int32(), lambda r: r.choice([None, 0, 1, 2, 3, -5])),
    "date": (pa.date32(), lambda r: r.choice([None, datetime.date(2020, 1, r.randint(1, 4))])),
    "string": (pa.string(), lambda r: r.choice([None, "", "a", "b", "é"])),
}


def _table(rng: random.Random, first: str, rows: int) -> pa.Table:
    kind, value = FIRST[first]
    return pa.table(
        {
            "k": pa.array([value(rng) for _ in range(rows)], kind),
            "name": pa.array([rng.choice([None, "x", "y"]) for _ in range(rows)], pa.string()),
            "amount": pa.array(
                [rng.choice([None, 1, 2]) for _ in range(rows)], pa.decimal128(10, 2)
            ),
        }
    )


def _tuples(table: pa.Table) -> list[tuple[object, ...]]:
    return list(zip(*(table.column(n).to_pylist() for n in table.column_names), strict=True))


@pytest.mark.parametrize("first", sorted(FIRST))
@pytest.mark.parametrize("seed", range(6))
def test_matching_rows_are_the_rows_equal_to_one_deleted(first: str, seed: int) -> None:
    rng = random.Random(seed)
    rows = _table(rng, first, rng.randint(0, 60))
    deleted = _table(rng, first, rng.randint(0, 25))
    gone = set(_tuples(deleted))
    expected = [row in gone for row in _tuples(rows)]
    assert matching_rows(rows, deleted).tolist() == expected


@pytest.mark.parametrize("first", sorted(FIRST))
@pytest.mark.parametrize("seed", range(6))
def test_matching_index_points_at_an_equal_row_or_minus_one(first: str, seed: int) -> None:
    rng = random.Random(seed)
    # Distinct rows, as a kept state's groups are; the wanted side may repeat.
    state = pa.Table.from_pylist(
        [
            dict(zip(("k", "name", "amount"), t, strict=True))
            for t in dict.fromkeys(_tuples(_table(rng, first, rng.randint(0, 60))))
        ],
        schema=_table(rng, first, 0).schema,
    )
    wanted = _table(rng, first, rng.randint(0, 40))
    held = _tuples(state)
    where = {row: i for i, row in enumerate(held)}
    index = matching_index(state, wanted)
    assert index.tolist() == [where.get(row, -1) for row in _tuples(wanted)]


def test_a_first_column_of_another_integer_width_is_matched_by_value() -> None:
    rows = pa.table({"k": pa.array([1, 2, None, 4], pa.int64()), "v": ["a", "b", "c", "d"]})
    wanted = pa.table({"k": pa.array([4, None, 2], pa.int32()), "v": ["d", "c", "x"]})
    assert matching_index(rows, wanted).tolist() == [3, 2, -1]
    assert np.flatnonzero(matching_rows(rows, wanted)).tolist() == [2, 3]


@pytest.mark.parametrize("seed", range(3))
def test_a_first_column_of_few_values_is_passed_over_for_a_selective_one(seed: int) -> None:
    """Groups keyed by (year, item, name): the year pairs every probe with a third of the
    state, so the item is probed; every other column is still checked (NULLs too)."""
    rng = random.Random(seed)
    schema = pa.schema([("year", pa.int32()), ("item", pa.int64()), ("name", pa.string())])

    def row() -> tuple[object, ...]:
        return (
            rng.choice([1999, 2000, 2001]),
            rng.choice([None, *range(400)]),
            rng.choice([None, "x"]),
        )

    held = list(dict.fromkeys(row() for _ in range(3_000)))
    state = pa.Table.from_pylist([dict(zip(schema.names, t, strict=True)) for t in held], schema)
    wanted_rows = [row() for _ in range(500)]
    wanted = pa.Table.from_pylist(
        [dict(zip(schema.names, t, strict=True)) for t in wanted_rows], schema
    )
    where = {t: i for i, t in enumerate(held)}
    assert matching_index(state, wanted).tolist() == [where.get(t, -1) for t in wanted_rows]
    gone = set(wanted_rows)
    assert matching_rows(state, wanted).tolist() == [t in gone for t in held]
