"""MIN and MAX kept in place: the state's arithmetic against a Python model of the rows.

The test keeps each group's rows as a list (the model), changes them at
random (inserts and deletes, biased towards deleting a group's extremum,
its ties and its last rows, with NULL values and NULL keys), computes the
change's state with the driver's aggregation
(:func:`~airflow_provider_ct.ivm.driver.in_place_driver.change_state`) over
the rows the test chose, adds it to the kept state
(:func:`~airflow_provider_ct.ivm.state.state_add.add_change`) and checks
every group's extrema, counts and rows against ``min``/``max`` of the
model's values. The reader of stale groups answers from the model too, and
the test checks it is asked for exactly the groups where a deleted value
reached the extremum, never more.
"""

from __future__ import annotations

import datetime as dt
import random
from collections.abc import Mapping, Sequence
from typing import Any

import pyarrow as pa
import pytest
from sqlglot import exp

from airflow_provider_ct.exceptions import StateMismatchError
from airflow_provider_ct.ivm.driver.arrow_eval import ArrowEvaluator, node_key
from airflow_provider_ct.ivm.driver.in_place_driver import Expressions, change_state
from airflow_provider_ct.ivm.plan.in_place import MAX, MIN, Aggregate, InPlace
from airflow_provider_ct.ivm.state.aggregate_state import GroupState, output_rows
from airflow_provider_ct.ivm.state.extrema import change_schema
from airflow_provider_ct.ivm.state.state_add import add_change

Row = tuple[Any, ...]  # (k, v, s, d)
ROWS = pa.schema([("k", pa.string()), ("v", pa.int64()), ("s", pa.string()), ("d", pa.date32())])
#: The view: SELECT k, MAX(v), MIN(v), MAX(s), MIN(d), COUNT(*) ... GROUP BY k.
EXTREMA = ((MAX, 0), (MIN, 0), (MAX, 1), (MIN, 2))
ARGUMENTS = ("v", "s", "d")
STATE = pa.schema(
    [("__ct_k0", pa.string()), ("__ct_rows", pa.int64())]
    + [(f"__ct_{p}{j}", pa.int64()) for j in range(3) for p in ("s", "n")]  # sums unused
    + [("__ct_x0", pa.int64()), ("__ct_x1", pa.int64()), ("__ct_x2", pa.string())]
    + [("__ct_x3", pa.date32())]
)
PARTS = Expressions(
    where=None,
    keys=(exp.column("k"),),
    arguments=tuple(exp.column(c) for c in ARGUMENTS),
    summed=frozenset(),
    extrema=EXTREMA,
)
TYPES = {node_key(exp.column(c)): t for c, t in zip(ROWS.names, ROWS.types, strict=True)}
DAY = dt.date(2026, 1, 1)


def _combine(*args: Any, **kwargs: Any) -> tuple[pa.Table, list[GroupState]]:
    """The new state and the affected groups (as objects) of :func:`add_change`."""
    added = add_change(*args, **kwargs)
    return added.state, added.groups


def _rows(rows: Sequence[Row]) -> ArrowEvaluator:
    table = pa.Table.from_pylist([dict(zip(ROWS.names, r, strict=True)) for r in rows], ROWS)
    return ArrowEvaluator(table, "t", TYPES)


def _change(plus: Sequence[Row], minus: Sequence[Row]) -> pa.Table:
    return change_state([(1, _rows(plus)), (-1, _rows(minus))], PARTS, change_schema(STATE, 4))


def _model(rows: Sequence[Row]) -> dict[Any, list[Any]]:
    """Key -> [rows, MAX(v), MIN(v), MAX(s), MIN(d)] as SQL computes them."""
    out: dict[Any, list[Any]] = {}
    for k in {r[0] for r in rows}:
        mine = [r for r in rows if r[0] == k]
        values = [[r[1 + j] for r in mine if r[1 + j] is not None] for j in range(3)]
        out[k] = [
            len(mine),
            max(values[0], default=None),
            min(values[0], default=None),
            max(values[1], default=None),
            min(values[2], default=None),
        ]
    return out


class ModelReader:
    """Stale groups' extrema read from the model's rows after the change."""

    def __init__(self, rows: Sequence[Row]) -> None:
        self.model = _model(rows)
        self.asked: list[tuple[Any, ...]] = []

    def __call__(self, keys: list[tuple[Any, ...]]) -> Mapping[tuple[Any, ...], Sequence[Any]]:
        self.asked.extend(keys)
        return {(k,): self.model[k][1:] for (k,) in keys if k in self.model}


def _state_of(state: pa.Table) -> dict[Any, list[Any]]:
    out = {}
    for r in state.to_pylist():
        out[r["__ct_k0"]] = [r["__ct_rows"], *(r[f"__ct_x{e}"] for e in range(4))]
    return out


def _must_read(
    before: Sequence[Row], plus: Sequence[Row], minus: Sequence[Row], after: Sequence[Row]
) -> set[Any]:
    """Groups whose new extremum the kept one and the inserts cannot give (the rule, by hand):
    some extremum still has values, and a deleted value reaches the better of the kept
    extremum and the inserted values."""
    old, new, wanted = _model(before), _model(after), set()
    for k in {r[0] for r in minus} & set(new):
        for e, (function, j) in enumerate(EXTREMA):
            deleted = [r[1 + j] for r in minus if r[0] == k and r[1 + j] is not None]
            inserted = [r[1 + j] for r in plus if r[0] == k and r[1 + j] is not None]
            candidates = [v for v in (old[k][1 + e], *inserted) if v is not None]
            if not deleted or new[k][1 + e] is None:
                continue
            if function == MAX and max(deleted) >= max(candidates):
                wanted.add(k)
            if function == MIN and min(deleted) <= min(candidates):
                wanted.add(k)
    return wanted


def _new_row(rng: random.Random) -> Row:
    k = rng.choice(["a", "b", "c", "d", None])
    v = rng.choice([None, *range(4)])  # few values: ties are common
    s = rng.choice([None, "x", "y", "z", "é", "Z"])
    d = rng.choice([None, DAY, DAY + dt.timedelta(days=3)])
    return (k, v, s, d)


def _deleted(rng: random.Random, rows: list[Row]) -> list[Row]:
    """Rows to delete: at random, a group's extremum holder (or a tie), or a whole group."""
    if not rows:
        return []
    kind = rng.choice(["random", "extremum", "group"])
    if kind == "group":
        k = rng.choice(rows)[0]
        return [r for r in rows if r[0] == k]
    if kind == "extremum":
        k = rng.choice(rows)[0]
        mine = [r for r in rows if r[0] == k and r[1] is not None]
        top = max((r[1] for r in mine), default=None)
        holders = [r for r in mine if r[1] == top]
        return holders[: rng.randint(1, max(1, len(holders)))]
    return rng.sample(rows, rng.randint(0, min(3, len(rows))))


@pytest.mark.parametrize("seed", range(12))
def test_min_max_state_matches_the_model_over_random_changes(seed: int) -> None:
    rng = random.Random(seed)
    rows = [_new_row(rng) for _ in range(rng.randint(0, 12))]
    state, _ = _combine(None, _change(rows, []), 1, 3, scalar=False, extrema=EXTREMA)
    assert _state_of(state) == _model(rows)
    read_again = 0
    for _ in range(25):
        minus = _deleted(rng, rows)
        remaining = list(rows)
        for r in minus:
            remaining.remove(r)
        plus = [_new_row(rng) for _ in range(rng.randint(0, 3))]
        after = remaining + plus
        reader = ModelReader(after)
        kept = state
        state, affected = _combine(
            kept, _change(plus, minus), 1, 3, scalar=False, extrema=EXTREMA, rescan=reader
        )
        assert _state_of(state) == _model(after), (seed, plus, minus)
        assert {k for (k,) in reader.asked} == _must_read(rows, plus, minus, after), (plus, minus)
        assert {g.key[0] for g in affected} == {r[0] for r in plus + minus}
        read_again += len(reader.asked)
        rows = after
    assert read_again, "the history never deleted a kept extremum"


def test_a_deleted_tie_reads_the_group_again_and_keeps_the_maximum() -> None:
    rows = [("a", 5, "x", DAY), ("a", 5, "y", DAY), ("a", 1, None, None), ("b", 2, "z", DAY)]
    state, _ = _combine(None, _change(rows, []), 1, 3, scalar=False, extrema=EXTREMA)
    reader = ModelReader(rows[1:])
    state, _ = _combine(
        state, _change([], rows[:1]), 1, 3, scalar=False, extrema=EXTREMA, rescan=reader
    )
    assert reader.asked == [("a",)]  # b's extrema were untouched: never read
    assert _state_of(state)["a"] == [2, 5, 1, "y", DAY]


def test_deletes_inside_the_extremum_and_a_groups_last_row_read_nothing() -> None:
    rows = [("a", 5, "x", DAY), ("a", 3, None, None), ("b", 2, "z", DAY), ("c", None, None, None)]
    state, _ = _combine(None, _change(rows, []), 1, 3, scalar=False, extrema=EXTREMA)

    def never(keys: list[tuple[Any, ...]]) -> Mapping[tuple[Any, ...], Sequence[Any]]:
        raise AssertionError(f"read again: {keys}")

    # a's deleted 3 lies inside MAX(v)=5, and the inserted 1 moves MIN(v) below it;
    # b loses its last row: nothing to read for either.
    plus, minus = [("a", 1, "z", DAY)], [("a", 3, None, None), ("b", 2, "z", DAY)]
    state, affected = _combine(
        state, _change(plus, minus), 1, 3, scalar=False, extrema=EXTREMA, rescan=never
    )
    assert _state_of(state) == _model([rows[0], plus[0], rows[3]])
    assert "b" not in _state_of(state) and {g.key[0] for g in affected} == {"a", "b"}
    assert _state_of(state)["c"] == [1, None, None, None, None]  # only NULLs: NULL extrema


def test_the_last_non_null_value_deleted_gives_null_without_a_read() -> None:
    rows = [("a", 5, "x", DAY), ("a", None, None, None)]
    state, _ = _combine(None, _change(rows, []), 1, 3, scalar=False, extrema=EXTREMA)
    state, _ = _combine(state, _change([], rows[:1]), 1, 3, scalar=False, extrema=EXTREMA)
    assert _state_of(state)["a"] == [1, None, None, None, None]


def test_a_stale_group_missing_from_the_inputs_means_the_state_was_wrong() -> None:
    rows = [("a", 5, "x", DAY), ("a", 4, "x", DAY)]
    state, _ = _combine(None, _change(rows, []), 1, 3, scalar=False, extrema=EXTREMA)
    with pytest.raises(StateMismatchError, match="none in the inputs"):
        _combine(
            state,
            _change([], rows[:1]),
            1,
            3,
            scalar=False,
            extrema=EXTREMA,
            rescan=ModelReader([]),
        )


def test_a_state_without_the_extremum_columns_is_not_used() -> None:
    rows = [("a", 5, "x", DAY)]
    state, _ = _combine(None, _change(rows, []), 1, 3, scalar=False, extrema=EXTREMA)
    older = state.drop_columns(["__ct_x3"])
    with pytest.raises(StateMismatchError, match="__ct_x3"):
        _combine(older, _change(rows, []), 1, 3, scalar=False, extrema=EXTREMA)


def test_output_rows_give_the_extrema_and_null_for_no_value() -> None:
    in_place = InPlace(
        ARGUMENTS,
        (Aggregate(1, MAX, 0), Aggregate(2, MIN, 1), Aggregate(3, MIN, 2), Aggregate(4, MAX, 1)),
    )
    assert in_place.extrema == ((MAX, 0), (MIN, 1), (MIN, 2), (MAX, 1))
    schema = pa.schema(
        [("__ct_k0", pa.string()), ("__ct_rows", pa.int64())]
        + [(f"__ct_{p}{j}", pa.int64()) for j in range(3) for p in ("s", "n")]
        + [("__ct_x0", pa.int64()), ("__ct_x1", pa.string()), ("__ct_x2", pa.date32())]
        + [("__ct_x3", pa.string())]
    )
    parts = Expressions(None, PARTS.keys, PARTS.arguments, frozenset(), in_place.extrema)
    rows = [("a", 5, "x", DAY), ("a", 7, "é", None), ("b", None, None, None)]
    change = change_state([(1, _rows(rows))], parts, change_schema(schema, 4))
    _, affected = _combine(None, change, 1, 3, scalar=False, extrema=in_place.extrema)
    view = pa.schema(
        [
            ("k", pa.string()),
            ("hi", pa.int64()),
            ("lo_s", pa.string()),
            ("lo_d", pa.date32()),
            ("hi_s", pa.string()),
        ]
    )
    got = output_rows(affected, in_place, (0,), view, scalar=False).to_pylist()
    assert sorted(got, key=lambda r: r["k"]) == [
        {"k": "a", "hi": 7, "lo_s": "x", "lo_d": DAY, "hi_s": "é"},
        {"k": "b", "hi": None, "lo_s": None, "lo_d": None, "hi_s": None},
    ]
