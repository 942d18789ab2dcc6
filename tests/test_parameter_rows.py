"""A parameter's aggregate computed on the driver equals Spark's, or is left to Spark.

The oracle is Spark running the same aggregate over the same rows (random
decimals, integers and strings with NULLs, chosen here); the driver's value
must be equal in value and fit Spark's result type, or refuse.
"""

from __future__ import annotations

import random
from decimal import Decimal
from typing import Any

import pyarrow as pa
import pytest

from airflow_provider_ct.ivm.driver.arrow_eval import NotOnDriver
from airflow_provider_ct.ivm.driver.parameter_rows import Parameter, aggregate_value, bound
from airflow_provider_ct.ivm.plan.parameters import aggregate_shape

pytestmark = [pytest.mark.spark]

SCHEMA = pa.schema([("d", pa.decimal128(15, 2)), ("i", pa.int64()), ("s", pa.string())])
SPARK_SCHEMA = "d DECIMAL(15, 2), i BIGINT, s STRING"
CALLS = [
    ("AVG", "d"),
    ("SUM", "d"),
    ("SUM", "i"),
    ("COUNT", "d"),
    ("COUNT", None),
    ("MIN", "d"),
    ("MAX", "i"),
    ("MIN", "s"),
    ("MAX", "s"),
]


def _rows(seed: int, count: int) -> list[tuple[Any, ...]]:
    rng = random.Random(seed)

    def maybe(value: Any) -> Any:
        return None if rng.random() < 0.2 else value

    return [
        (
            maybe(Decimal(rng.randint(-(10**6), 10**7)).scaleb(-2)),
            maybe(rng.randint(-(10**9), 10**9)),
            maybe(rng.choice(["x", "xé", "ab", "", "Z", "é"])),
        )
        for _ in range(count)
    ]


@pytest.mark.parametrize("count", [0, 1, 3, 997])
@pytest.mark.parametrize(("function", "column"), CALLS)
def test_an_aggregate_on_the_driver_equals_spark(
    spark: Any, function: str, column: str | None, count: int
) -> None:
    from pyspark.sql.pandas.types import to_arrow_type

    data = _rows(count + len(function), count)
    frame = spark.createDataFrame(data, SPARK_SCHEMA)
    call = f"{function}({column or '*'})"
    result = frame.selectExpr(f"{call} AS v")
    kind = to_arrow_type(result.schema.fields[0].dataType)
    want = result.collect()[0][0]
    table = pa.Table.from_pylist([dict(zip(SCHEMA.names, r, strict=True)) for r in data], SCHEMA)
    values = table.column(column).combine_chunks() if column else None
    got = aggregate_value(function, values, table.num_rows, kind)
    assert got == want and type(got) is type(want), (call, got, want)
    if isinstance(got, Decimal):  # the literal written for it keeps Spark's scale
        assert -got.as_tuple().exponent == kind.scale


def test_what_spark_computes_differently_is_left_to_it() -> None:
    doubles = pa.array([1, 2], pa.int64())
    with pytest.raises(NotOnDriver):  # an AVG of integers is a double
        aggregate_value("AVG", doubles, 2, pa.float64())
    with pytest.raises(NotOnDriver):  # past BIGINT: Spark wraps or fails
        aggregate_value("SUM", pa.array([2**62, 2**62], pa.int64()), 2, pa.int64())
    with pytest.raises(NotOnDriver):  # past its type's digits: Spark's NULL or error
        big = pa.array([Decimal("999.99")] * 3, pa.decimal128(5, 2))
        aggregate_value("SUM", big, 3, pa.decimal128(5, 2))
    with pytest.raises(NotOnDriver):
        aggregate_value("MAX", pa.array([1.5, 2.5]), 2, pa.float64())


def test_a_parameter_is_written_as_each_sides_literal() -> None:
    import sqlglot

    parameter = Parameter("__ct_param0", Decimal("-1.500000"), None, pa.decimal128(19, 6))
    condition = sqlglot.parse_one("x > __ct_param0 AND y = 1", read="spark")
    old = bound(condition, {parameter.name: parameter}, {parameter.name: "old"})
    new = bound(condition, {parameter.name: parameter}, {parameter.name: "new"})
    assert old.sql(dialect="spark") == "x > -1.500000 AND y = 1"
    assert new.sql(dialect="spark") == "x > NULL AND y = 1"
    assert parameter.moved and set(parameter.types()) == {"-1.500000", "NULL"}


@pytest.mark.parametrize(
    ("sql", "shape"),
    [
        ("SELECT AVG(c.b) FROM s.c c WHERE c.b > 0", ("AVG", "c.b", "c.b > 0", "c")),
        ("SELECT COUNT(*) FROM s.c", ("COUNT", None, None, "c")),
        ("SELECT MAX(b) AS m FROM s.c", ("MAX", "b", None, "c")),
        ("SELECT 0.5 * SUM(b) FROM s.c", None),
        ("SELECT COUNT(DISTINCT b) FROM s.c", None),
        ("SELECT SUM(b) FROM s.c, s.d WHERE c.k = d.k", None),
        ("SELECT SUM(b) FROM s.c GROUP BY k", None),
    ],
)
def test_the_aggregates_the_driver_computes(sql: str, shape: tuple[Any, ...] | None) -> None:
    import sqlglot

    found = aggregate_shape(sqlglot.parse_one(sql, read="spark"))
    if shape is None:
        assert found is None
        return
    assert found is not None
    spelled = (
        found.function,
        found.argument.sql() if found.argument is not None else None,
        found.where.sql() if found.where is not None else None,
        found.alias,
    )
    assert spelled == shape
