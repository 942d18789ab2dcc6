"""A change added to a kept state in Arrow, against a model over rows the test chose.

The model holds each group's rows as a Python multiset and aggregates them
directly (``len``, ``sum``, ``max``, ``min`` over the non-NULL values), so
the kept state after any history of inserts and deletes must equal the
aggregate of the rows left, whatever the Arrow arithmetic did in between.
Keys are two columns with NULLs (NULL groups with NULL), sums are
decimals, extrema are a decimal ``MAX`` and a string ``MIN`` (code points
beyond ASCII), and a deletion of a group's extremum reads the group again
from the model.
"""

from __future__ import annotations

import os
import random
from collections.abc import Mapping, Sequence
from decimal import Decimal
from typing import Any

import pyarrow as pa
import pytest

from airflow_provider_ct.exceptions import NotInPlaceError
from airflow_provider_ct.ivm.plan.in_place import MAX, MIN
from airflow_provider_ct.ivm.state.aggregate_state import GroupState, state_table
from airflow_provider_ct.ivm.state.state_add import add_change

Key = tuple[Any, ...]
Row = tuple[Any, Any]  # (a decimal or NULL, a string or NULL)
EXTREMA = ((MAX, 0), (MIN, 1))
STATE = pa.schema(
    [
        ("__ct_k0", pa.string()),
        ("__ct_k1", pa.int64()),
        ("__ct_rows", pa.int64()),
        ("__ct_s0", pa.decimal128(20, 2)),
        ("__ct_n0", pa.int64()),
        ("__ct_s1", pa.int64()),  # the string is only counted: no sum
        ("__ct_n1", pa.int64()),
        ("__ct_x0", pa.decimal128(20, 2)),
        ("__ct_x1", pa.string()),
    ]
)
CHANGE = STATE.append(pa.field("__ct_y0", pa.decimal128(20, 2))).append(
    pa.field("__ct_y1", pa.string())
)
HISTORIES = int(os.environ.get("CT_STATE_ADD_CASES", "40"))


def _aggregate(groups: Mapping[Key, list[Row]]) -> list[GroupState]:
    """The model: each group's state from its rows."""
    out = []
    for key, rows in groups.items():
        numbers = [r[0] for r in rows if r[0] is not None]
        words = [r[1] for r in rows if r[1] is not None]
        out.append(
            GroupState(
                key,
                len(rows),
                [sum(numbers) if numbers else None, None],
                [len(numbers), len(words)],
                [max(numbers, default=None), min(words, default=None)],
            )
        )
    return out


def _change(plus: list[tuple[Key, Row]], minus: list[tuple[Key, Row]]) -> pa.Table:
    """The signed change of each group the rows reach, as Spark's aggregation gives it."""
    groups: dict[Key, GroupState] = {}
    for sign, side in ((1, plus), (-1, minus)):
        for key, (number, word) in side:
            group = groups.setdefault(key, GroupState.empty(key, 2, 2))
            group.rows += sign
            kept = group.extrema if sign > 0 else group.removed
            if number is not None:
                group.counts[0] += sign
                group.sums[0] = (group.sums[0] or 0) + (number if sign > 0 else -number)
                kept[0] = number if kept[0] is None else max(kept[0], number)
            if word is not None:
                group.counts[1] += sign
                kept[1] = word if kept[1] is None else min(kept[1], word)
    return state_table(list(groups.values()), CHANGE, 2, 2)


def _rows(table: pa.Table) -> list[dict[str, Any]]:
    return sorted(table.to_pylist(), key=repr)


class Reader:
    """Reads stale groups' extrema from the model's rows after the change."""

    def __init__(self, groups: Mapping[Key, list[Row]]) -> None:
        self.groups = groups
        self.asked: list[Key] = []

    def __call__(self, keys: list[Key]) -> Mapping[Key, Sequence[Any]]:
        self.asked += keys
        found = {k: _aggregate({k: self.groups[k]})[0] for k in keys if k in self.groups}
        return {k: g.extrema for k, g in found.items()}


@pytest.mark.parametrize("seed", range(HISTORIES))
def test_the_kept_state_equals_the_rows_aggregated_after_every_change(seed: int) -> None:
    rng = random.Random(seed)
    keys = [(rng.choice(["a", "b", None, "é"]), rng.choice([1, 2, None])) for _ in range(6)]

    def row() -> Row:
        number = rng.choice([None, Decimal(rng.randint(-500, 500)).scaleb(-2)])
        return number, rng.choice([None, "x", "y", "z", "ä"])

    groups: dict[Key, list[Row]] = {}
    state = None
    for _ in range(8):
        every = [(k, r) for k, rows in groups.items() for r in rows]
        minus = rng.sample(every, min(len(every), rng.randint(0, 5)))
        plus = [(rng.choice(keys), row()) for _ in range(rng.randint(0, 5))]
        for key, r in minus:
            groups[key].remove(r)
        for key, r in plus:
            groups.setdefault(key, []).append(r)
        groups = {k: rows for k, rows in groups.items() if rows}
        added = add_change(
            state, _change(plus, minus), 2, 2, scalar=False, extrema=EXTREMA, rescan=Reader(groups)
        )
        state = added.state
        assert _rows(state) == _rows(state_table(_aggregate(groups), STATE, 2, 2))
        touched = {k for k, _ in plus + minus}
        assert {g.key for g in added.groups} == touched
        assert len(added) == len(touched) == added.key_table().num_rows


def test_an_aggregate_without_group_by_keeps_its_one_group() -> None:
    schema = pa.schema(
        [("__ct_rows", pa.int64()), ("__ct_s0", pa.int64()), ("__ct_n0", pa.int64())]
    )
    one = pa.Table.from_pylist([{"__ct_rows": 2, "__ct_s0": 7, "__ct_n0": 2}], schema)
    gone = pa.Table.from_pylist([{"__ct_rows": -2, "__ct_s0": -7, "__ct_n0": -2}], schema)
    added = add_change(one, gone, 0, 1, scalar=True)
    assert added.state.to_pylist() == [{"__ct_rows": 0, "__ct_s0": None, "__ct_n0": 0}]
    quiet = add_change(one, schema.empty_table(), 0, 1, scalar=True)
    assert quiet.state.to_pylist() == one.to_pylist() and len(quiet) == 0


def test_a_decimal_sum_past_its_precision_is_sparks_overflow() -> None:
    names = ("__ct_k0", "__ct_rows", "__ct_s0", "__ct_n0")
    types = (pa.int64(), pa.int64(), pa.decimal128(4, 2), pa.int64())
    schema = pa.schema(list(zip(names, types, strict=True)))
    kept = pa.Table.from_pylist(
        [{"__ct_k0": 1, "__ct_rows": 1, "__ct_s0": Decimal("99.99"), "__ct_n0": 1}], schema
    )
    with pytest.raises(NotInPlaceError, match="a sum past its type"):
        add_change(kept, kept, 1, 1, scalar=False)
