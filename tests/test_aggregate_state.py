"""In-place aggregates' arithmetic: exact sums, Spark's averages, groups that empty out.

The oracle for ``AVG`` is Spark itself (its ``avg`` over rows the test
chose), since its decimal rounding is what the view's full correction gives.
"""

from __future__ import annotations

import random
from decimal import Decimal
from typing import Any

import pyarrow as pa
import pytest

from airflow_provider_ct.exceptions import NotInPlaceError, StateMismatchError
from airflow_provider_ct.ivm.plan.in_place import AVG, COUNT, MAX, MIN, SUM, Aggregate, InPlace
from airflow_provider_ct.ivm.state.aggregate_state import (
    GroupState,
    output_rows,
    spark_decimal_average,
)
from airflow_provider_ct.ivm.state.state_add import add_change
from airflow_provider_ct.ivm.state.state_rows import every_row

STATE = pa.schema(
    [
        ("__ct_k0", pa.string()),
        ("__ct_rows", pa.int64()),
        ("__ct_s0", pa.decimal128(25, 2)),
        ("__ct_n0", pa.int64()),
    ]
)
VIEW = pa.schema(
    [
        ("k", pa.string()),
        ("n", pa.int64()),
        ("total", pa.decimal128(25, 2)),
        ("avg", pa.decimal128(19, 6)),
        ("nv", pa.int64()),
    ]
)
IN_PLACE = InPlace(
    ("v",),
    (
        Aggregate(1, COUNT, None),
        Aggregate(2, SUM, 0),
        Aggregate(3, AVG, 0),
        Aggregate(4, COUNT, 0),
    ),
)


def _combine(*args: Any, **kwargs: Any) -> tuple[pa.Table, list[GroupState]]:
    """The new state and the affected groups (as objects) of :func:`add_change`."""
    added = add_change(*args, **kwargs)
    return added.state, added.groups


def _state(rows: list[tuple[Any, ...]]) -> pa.Table:
    return pa.Table.from_pylist([dict(zip(STATE.names, r, strict=True)) for r in rows], STATE)


def test_state_plus_change_is_exact_and_empty_groups_disappear() -> None:
    d = Decimal
    kept = _state([("a", 3, d("10.10"), 2), ("b", 1, d("0.01"), 1), (None, 2, None, 0)])
    change = _state([("a", -1, d("-0.10"), -1), ("b", -1, d("-0.01"), -1), ("c", 2, None, 0)])
    state, affected = _combine(kept, change, 1, 1, scalar=False)
    by_key = {r["__ct_k0"]: r for r in state.to_pylist()}
    assert set(by_key) == {"a", None, "c"}  # b lost its last row
    assert by_key["a"]["__ct_rows"] == 2 and by_key["a"]["__ct_s0"] == d("10.00")
    assert by_key["c"]["__ct_s0"] is None and by_key["c"]["__ct_n0"] == 0
    rows = output_rows(affected, IN_PLACE, (0,), VIEW, scalar=False).to_pylist()
    # b is affected but gone: no row (its old row is retracted by the diff).
    assert rows == [
        {"k": "a", "n": 2, "total": d("10.00"), "avg": d("10.000000"), "nv": 1},
        {"k": "c", "n": 2, "total": None, "avg": None, "nv": 0},
    ]


def test_a_scalar_aggregate_keeps_its_one_group_when_empty() -> None:
    kept = _state([("", 1, Decimal("2.50"), 1)])
    state, affected = _combine(kept, _state([("", -1, Decimal("-2.50"), -1)]), 1, 1, scalar=True)
    assert state.num_rows == 1
    rows = output_rows(affected, IN_PLACE, (0,), VIEW, scalar=True).to_pylist()
    assert rows == [{"k": "", "n": 0, "total": None, "avg": None, "nv": 0}]


def test_a_change_below_zero_means_the_state_was_not_its_base() -> None:
    with pytest.raises(StateMismatchError, match="not the one the change was computed against"):
        kept, change = _state([("a", 1, Decimal(1), 1)]), _state([("a", -2, None, 0)])
        add_change(kept, change, 1, 1, scalar=False)


@pytest.mark.spark
def test_decimal_average_is_sparks(spark: Any) -> None:
    """Sums and counts whose quotient rounds (half-up, including exact halves) as Spark's AVG."""
    rng = random.Random(7)
    groups: list[list[Decimal]] = [
        [Decimal("0.01")] + [Decimal("0.00")] * 19_999,  # 5e-7: an exact half at scale 6
        [Decimal("0.01"), Decimal("0.02"), Decimal("0.00")],  # 0.01: no rounding
        [Decimal("-0.01")] + [Decimal("0.00")] * 19_999,  # a negative half
        [Decimal("2.00"), Decimal("1.00"), Decimal("1.00")],  # 1.333333...
        [Decimal("9999999999999.99")] * 3,  # the largest values of the type
    ]
    for _ in range(40):
        size = rng.randint(1, 30)
        groups.append(
            [Decimal(rng.randint(-(10**15) + 1, 10**15 - 1)).scaleb(-2) for _ in range(size)]
        )
    rows = [(g, v) for g, values in enumerate(groups) for v in values]
    frame = spark.createDataFrame(rows, "g INT, v DECIMAL(15, 2)")
    frame.createOrReplaceTempView("avg_oracle")
    got = spark.sql(
        "SELECT g, AVG(v) AS a, SUM(v) AS s, COUNT(v) AS n FROM avg_oracle GROUP BY g"
    ).collect()
    result_type = spark.sql("SELECT AVG(v) FROM avg_oracle").schema.fields[0].dataType
    assert (result_type.precision, result_type.scale) == (19, 6)
    assert len(got) == len(groups)
    for row in got:
        mine = spark_decimal_average(row["s"], row["n"], 19, 6)
        assert mine == row["a"], (row["g"], row["s"], row["n"], mine, row["a"])


def test_a_sum_past_its_type_leaves_the_view_to_its_fallback() -> None:
    """Spark's BIGINT SUM wraps around where the exact sum does not: not kept in place."""
    schema = pa.schema([("__ct_k0", pa.string()), ("__ct_rows", pa.int64())])
    schema = schema.append(pa.field("__ct_s0", pa.int64())).append(pa.field("__ct_n0", pa.int64()))
    big = 2**63 - 1
    kept = pa.Table.from_pylist([{"__ct_k0": "a", "__ct_rows": 1, "__ct_s0": big, "__ct_n0": 1}])
    change = pa.Table.from_pylist([{"__ct_k0": "a", "__ct_rows": 1, "__ct_s0": 1, "__ct_n0": 1}])
    with pytest.raises(NotInPlaceError, match="a sum past its type"):
        _combine(kept.cast(schema), change.cast(schema), 1, 1, scalar=False)


def test_an_empty_change_of_one_group_still_names_the_group() -> None:
    """Without GROUP BY the group exists with no rows changed (as Spark's aggregate gives
    one row), so the target's row is compared with it, not retracted for lack of one."""
    from airflow_provider_ct.ivm.driver.in_place_driver import Expressions, change_state

    schema = pa.schema(
        [("__ct_rows", pa.int64()), ("__ct_s0", pa.int64()), ("__ct_n0", pa.int64())]
    )
    parts = Expressions(where=None, keys=(), arguments=(None,), summed=frozenset({0}))
    state = change_state([], parts, schema)
    assert state.to_pylist() == [{"__ct_rows": 0, "__ct_s0": None, "__ct_n0": 0}]


#: A state with a MIN and a MAX, for the column-wise rows below.
EXTREMA_STATE = pa.schema(
    [
        ("__ct_k0", pa.int64()),
        ("__ct_k1", pa.string()),
        ("__ct_rows", pa.int64()),
        ("__ct_s0", pa.decimal128(25, 2)),
        ("__ct_n0", pa.int64()),
        ("__ct_s1", pa.int64()),
        ("__ct_n1", pa.int64()),
        ("__ct_x0", pa.string()),
        ("__ct_x1", pa.decimal128(25, 2)),
    ]
)
EXTREMA_VIEW = pa.schema(
    [
        ("total", pa.decimal128(25, 2)),
        ("k", pa.int64()),
        ("n", pa.int64()),
        ("lo", pa.string()),
        ("s", pa.string()),
        ("hi", pa.decimal128(12, 2)),
        ("nv", pa.int64()),
    ]
)
EXTREMA_IN_PLACE = InPlace(
    ("v", "w"),
    (
        Aggregate(0, SUM, 0),
        Aggregate(2, COUNT, None),
        Aggregate(3, MIN, 1),
        Aggregate(5, MAX, 0),
        Aggregate(6, COUNT, 1),
    ),
)


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("scalar", [False, True])
def test_every_row_column_wise_equals_the_per_group_rows(seed: int, scalar: bool) -> None:
    """A nested plan's rows of every group, built from the state's columns, are the rows
    the per-group arithmetic gives: NULL sums and extrema at a zero count, empty groups
    left out (but a scalar's one group), keys out of order in the select list."""
    rng = random.Random(seed)
    rows = []
    for index in range(1 if scalar else rng.randint(0, 30)):
        count = rng.choice([0, 0, 1, 3])
        n0, n1 = min(count, rng.randint(0, 3)), min(count, rng.randint(0, 3))
        rows.append(
            {
                "__ct_k0": None if index == 3 else index,
                "__ct_k1": rng.choice([None, "x", "é"]),
                "__ct_rows": count,
                "__ct_s0": Decimal(rng.randint(-999, 999)).scaleb(-2) if n0 else None,
                "__ct_n0": n0,
                "__ct_s1": rng.randint(-5, 5) if n1 else None,
                "__ct_n1": n1,
                "__ct_x0": rng.choice(["a", "zz", "m"]) if n1 else None,
                "__ct_x1": Decimal(rng.randint(0, 99)) if n0 else None,
            }
        )
    state = pa.Table.from_pylist(rows, EXTREMA_STATE)
    keys = (1, 4)
    _, every = _combine(None, state, 2, 2, scalar=scalar, extrema=EXTREMA_IN_PLACE.extrema)
    want = output_rows(every, EXTREMA_IN_PLACE, keys, EXTREMA_VIEW, scalar=scalar)
    got = every_row(state, EXTREMA_IN_PLACE, keys, EXTREMA_VIEW, scalar=scalar)
    assert got is not None
    assert sorted(got.to_pylist(), key=repr) == sorted(want.to_pylist(), key=repr)


def test_every_row_leaves_averages_and_overflows_to_the_per_group_rows() -> None:
    assert every_row(_state([("a", 1, Decimal(1), 1)]), IN_PLACE, (0,), VIEW, scalar=False) is None
    big = pa.Table.from_pylist(
        [
            {
                "__ct_k0": 1,
                "__ct_k1": "x",
                "__ct_rows": 1,
                "__ct_s0": Decimal("1e20"),
                "__ct_n0": 1,
                "__ct_s1": 1,
                "__ct_n1": 1,
                "__ct_x0": "a",
                "__ct_x1": Decimal("1e20"),
            }
        ],
        EXTREMA_STATE,
    )
    with pytest.raises(NotInPlaceError, match="a sum past its type"):
        every_row(big, EXTREMA_IN_PLACE, (1, 4), EXTREMA_VIEW, scalar=False)


def test_a_moment_numerator_past_the_exact_decimal_is_refused() -> None:
    """STDDEV's ``n * sum of squares`` must stay within DECIMAL(38, 6)'s 32 integer digits,
    where Spark computes it exactly; past them (Spark's NULL) the tick is the fallback's."""
    import sqlglot

    from airflow_provider_ct.ivm.plan.in_place import in_place_shape
    from airflow_provider_ct.ivm.state.aggregate_state import moment_overflow

    select = sqlglot.parse_one("SELECT k, STDDEV(x) FROM t GROUP BY k", dialect="spark")
    in_place = in_place_shape(select, list(select.expressions), (0,))
    assert isinstance(in_place, InPlace) and in_place.squares() == {1: 0}
    values = [2**31 - 1] * 3 + [-(2**31)] * 2  # the widest INT squares

    def group(repeat: int) -> GroupState:
        xs = values * repeat
        sums = [sum(xs), Decimal(sum(x * x for x in xs))]
        return GroupState(("g",), len(xs), sums, [len(xs), len(xs)])

    assert moment_overflow([group(1)], in_place) is None
    assert moment_overflow([group(100_000)], in_place) is None  # n * q about 1.2e30
    assert moment_overflow([group(1), group(1_000_000)], in_place) is not None  # about 1.2e32
    # A BIGINT's square past DECIMAL(38, 6) is Spark's NULL: fewer squares than values.
    lost = GroupState(("g",), 2, [2**62, None], [2, 0])
    assert moment_overflow([lost], in_place) is not None
