"""The driver's expression evaluator against Spark itself, over rows the test chose.

Every expression is evaluated by Spark (``SELECT <expr> FROM rows``) and by
:class:`~airflow_provider_ct.ivm.driver.arrow_eval.ArrowEvaluator` over the same
rows as Arrow, with the node types Spark's analyzer gives (as the write job
does); the values must be equal row by row, NULLs included. Expressions the
evaluator leaves to Spark must say so (:class:`NotOnDriver`), never answer.
"""

from __future__ import annotations

import datetime as dt
import random
from decimal import Decimal
from typing import Any

import pyarrow as pa
import pytest
import sqlglot

from airflow_provider_ct.ivm.driver.arrow_eval import (
    ArrowEvaluator,
    NotOnDriver,
    node_key,
    typed_nodes,
)

pytestmark = [pytest.mark.spark]

SCHEMA = pa.schema(
    [
        ("i", pa.int32()),
        ("l", pa.int64()),
        ("d", pa.decimal128(15, 2)),
        ("e", pa.decimal128(4, 3)),
        ("s", pa.string()),
        ("day", pa.date32()),
    ]
)
SPARK_SCHEMA = "i INT, l BIGINT, d DECIMAL(15, 2), e DECIMAL(4, 3), s STRING, day DATE"

EVALUATED = [
    "i",
    "d * (1 - e)",
    "d * (1 - e) * (1 + e)",
    "d * (1 - e) * (1 + e) * (1 - e)",  # past 38 digits: Spark's scale reduction, half up
    "CAST(d AS DECIMAL(38, 10)) * e + CAST(l AS DECIMAL(38, 2))",  # a sum's scale reduced
    "l - i * 2",
    "-d + 0.05",
    "CAST(i AS DECIMAL(12, 2)) * 1.5 - l",
    "CAST(d AS DECIMAL(20, 2))",
    "d < 24",
    "e BETWEEN 0.05 AND 0.07",
    "day >= CAST('1994-01-01' AS DATE) AND day < CAST('1995-01-01' AS DATE)",
    "i IN (1, 2, NULL)",
    "NOT (s LIKE 'x%' OR s LIKE '%b' OR s LIKE '_b')",
    "s NOT LIKE 'x%' AND s NOT LIKE '_b'",  # sqlglot: LIKE nodes with negate, no NOT
    "s IS NULL OR NOT l IS NULL",
    "CASE WHEN s LIKE 'x%' THEN d WHEN s IS NULL THEN -1 ELSE 0 END",
    "CASE WHEN i > 2 THEN l END",
    "s = 'xé' OR s > 'm'",
    "(l + 1) * 3 = i",
    "EXTRACT(YEAR FROM day)",
    "EXTRACT(MONTH FROM day) * 100 + EXTRACT(DAY FROM day) - EXTRACT(QUARTER FROM day)",
    "EXTRACT(YEAR FROM day) = 1994",
    "SUBSTRING(s, 1, 2) IN ('xé', 'ab', '')",  # characters, not bytes (TPC-H q22's key)
    "SUBSTRING(s, 2)",
    "SUBSTRING(s, 3, 1)",
    "SUBSTR(s, 1, 0)",
    "UPPER(SUBSTRING(s, 1, 1)) = 'X'",  # ASCII only (the first characters are)
    "LOWER(UPPER(SUBSTRING(s, 1, 1)))",
    "s || '_'",  # NULL when an operand is
    "CONCAT(s, '-', SUBSTRING(s, 1, 1), s)",
    "s || s",
    # Decimal division: the exact quotient rounded half up at the type's scale, as Spark's.
    "d / 2",
    "d / 3",
    "CAST(d AS DECIMAL(15, 4)) / CAST(l * 2 + 1 AS DECIMAL(18, 4)) * 100",  # TPC-DS q61
    "d / CAST(i + 10 AS DECIMAL(5, 0))",
    "-d / 7.0",
    "CAST(i AS DECIMAL(3, 0)) / 6",
]
REFUSED = [
    "i / 2",  # a double
    "d / (i - i)",  # by zero: Spark's NULL, or its error under ANSI
    "CAST(d AS DOUBLE) * 2",
    "upper(s) = 'X'",  # 'xé': Java's case mapping is not Unicode's beyond ASCII
    "s || i",  # Spark casts the integer: its own rules
    "s = 1",  # Spark casts the string: its own rules
    "CAST(d AS DECIMAL(5, 1))",  # rounds half up in Spark: not a safe cast
    "s LIKE '%\\\\%%'",  # an escape: Spark's string-literal rules
    "EXTRACT(YEAR FROM CAST(day AS TIMESTAMP))",  # the session's time zone: Spark's
    "EXTRACT(DOW FROM day)",
    "SUBSTRING(s, -1, 1)",  # from the end: Spark's
    "SUBSTRING(s, 0, 2)",
    "SUBSTRING(s, i, 2)",
]


def _rows(seed: int, count: int) -> list[tuple[Any, ...]]:
    rng = random.Random(seed)

    def maybe(value: Any) -> Any:
        return None if rng.random() < 0.15 else value

    out = []
    for _ in range(count):
        out.append(
            (
                maybe(rng.randint(-5, 5)),
                maybe(rng.choice([rng.randint(-(10**12), 10**12), 0, 2**40])),
                maybe(Decimal(rng.randint(-(10**13), 10**13)).scaleb(-2)),
                maybe(Decimal(rng.randint(0, 9999)).scaleb(-3)),
                maybe(rng.choice(["x", "xé", "a%b", "ab", "zz", "", "_b", "m"])),
                maybe(dt.date(1993, 1, 1) + dt.timedelta(days=rng.randint(0, 900))),
            )
        )
    return out


def _driver(spark: Any, table: pa.Table, sql: str) -> list[Any]:
    node = sqlglot.parse_one(sql, read="spark")
    nodes = typed_nodes([node])
    select = ", ".join(f"{node_key(n)} AS t{i}" for i, n in enumerate(nodes))
    fields = spark.sql(f"SELECT {select} FROM eval_rows AS r").schema.fields
    from pyspark.sql.pandas.types import to_arrow_type

    types = {node_key(n): to_arrow_type(f.dataType) for n, f in zip(nodes, fields, strict=True)}
    return ArrowEvaluator(table, "r", types).column(node).to_pylist()


@pytest.fixture(scope="module")
def rows(spark: Any) -> pa.Table:
    data = _rows(5, 400)
    spark.createDataFrame(data, SPARK_SCHEMA).createOrReplaceTempView("eval_rows")
    return pa.Table.from_pylist([dict(zip(SCHEMA.names, r, strict=True)) for r in data], SCHEMA)


@pytest.mark.parametrize("sql", EVALUATED)
def test_the_driver_evaluates_as_spark(spark: Any, rows: pa.Table, sql: str) -> None:
    want = [r[0] for r in spark.sql(f"SELECT {sql} FROM eval_rows AS r").collect()]
    got = _driver(spark, rows, sql)
    assert got == want, [(g, w) for g, w in zip(got, want, strict=True) if g != w][:5]


@pytest.mark.parametrize("sql", REFUSED)
def test_what_the_driver_cannot_promise_is_left_to_spark(
    spark: Any, rows: pa.Table, sql: str
) -> None:
    with pytest.raises(NotOnDriver):
        _driver(spark, rows, sql)


def test_a_decimal_quotient_is_rounded_half_up_once_at_its_scale() -> None:
    """Spark truncates at 39 places, then rounds half up at the type's scale: one exact
    rounding (``4 9...9 5`` rounds down); ties away from zero; NULL past the precision."""
    from airflow_provider_ct.ivm.driver.spark_division import spark_divide

    below_half = "0." + "4" + "9" * 38 + "5"  # 40 places (a string: no context rounds it)
    assert spark_divide(Decimal(below_half), 1, 38, 0) == 0
    assert spark_divide(Decimal("-" + below_half), 1, 38, 0) == 0
    assert spark_divide(Decimal("0.5"), 1, 38, 0) == 1
    assert spark_divide(Decimal("-2.5"), 1, 38, 0) == -3
    assert spark_divide(2, 3, 10, 6) == Decimal("0.666667")
    assert spark_divide(-2, 3, 10, 6) == Decimal("-0.666667")
    assert spark_divide(Decimal("123.45"), Decimal("0.001"), 5, 0) is None  # 123450
    assert spark_divide(Decimal("123.45"), Decimal("0.001"), 6, 0) == 123450
