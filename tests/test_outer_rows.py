"""A nested plan's outer query on the driver: taken apart (``ivm/plan/outer_shape.py``) and
evaluated over inner rows (``ivm/driver/outer_rows.py``), against DuckDB over the same rows.

The nodes' Spark types are given here as Spark's analyzer gives them for these
columns (the ticks of ``test_incremental.py`` and the randomized run take them from
Spark itself, through the whole tick); the rows are chosen by the test, NULLs, ties
and duplicates included.
"""

from __future__ import annotations

import random
from collections import Counter
from decimal import Decimal
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pytest
import sqlglot
from sqlglot import exp

from airflow_provider_ct.ivm.driver.arrow_eval import NotOnDriver, node_key
from airflow_provider_ct.ivm.driver.outer_rows import outer_rows
from airflow_provider_ct.ivm.plan.having import INNER_VIEW
from airflow_provider_ct.ivm.plan.outer_shape import OuterJoin, OuterShape, outer_shape

SUPPLIER = pa.schema([("s_suppkey", pa.int64()), ("s_name", pa.string())])


def _shape(sql: str, inner: pa.Schema, tables: dict[str, list[str]] | None = None) -> OuterShape:
    shape = outer_shape(sqlglot.parse_one(sql, read="spark"), inner.names, tables or {}, "ct")
    assert not isinstance(shape, str), shape
    return shape


def _types(shape: OuterShape, columns: dict[str, pa.DataType], **by_sql: pa.DataType) -> dict:
    """Every column node by its name's type, every other typed node by its SQL."""
    found: dict[str, pa.DataType] = {}
    nodes = [*shape.early, *shape.late, *(o for _, o in shape.outputs), *shape.calls]
    nodes += [shape.having] if shape.having is not None else []
    for scalar in shape.scalars:
        nodes += [scalar.value, *scalar.calls]
    for root in nodes:
        for node in root.walk():
            if isinstance(node, exp.Column) and node.name in columns:
                found[node_key(node)] = columns[node.name]
    found.update(by_sql)
    return found


def _oracle(sql: str, **tables: pa.Table) -> Counter[tuple[Any, ...]]:
    import duckdb

    con = duckdb.connect()
    for name, rows in tables.items():
        con.register(name, rows)
    return Counter(tuple(r) for r in con.execute(sql).fetchall())


def _got(rows: pa.Table, names: list[str]) -> Counter[tuple[Any, ...]]:
    return Counter(tuple(r[n] for n in names) for r in rows.to_pylist())


def _values(rng: random.Random, n: int) -> list[Decimal | None]:
    return [None if rng.random() < 0.1 else Decimal(rng.randint(0, 500)) / 100 for _ in range(n)]


@pytest.mark.parametrize("seed", range(4))
def test_a_filter_by_a_share_of_the_total_is_tpch_q11(seed: int) -> None:
    """``HAVING value > (SELECT SUM(value) * f ...)`` as its nested plan's outer query: the
    scalar over the same rows, once, then the filter; NULL values drop out of both."""
    rng = random.Random(seed)
    inner = pa.table(
        {"k": list(range(40)), "__ct_h0": _values(rng, 40)},
        pa.schema([("k", pa.int64()), ("__ct_h0", pa.decimal128(36, 2))]),
    )
    sql = (
        f"SELECT * FROM {INNER_VIEW} WHERE __ct_h0 > (SELECT CAST(SUM(__ct_h0) AS"
        f" DECIMAL(36, 2)) * 0.0300000000 FROM {INNER_VIEW})"
    )
    shape = _shape(sql, inner.schema)
    assert [s.calls[0].sql() for s in shape.scalars] == ["SUM(__ct_nested.__ct_h0)"]
    assert [c.sql() for c in shape.early] == ["__ct_nested.__ct_h0 > __ct_scalar.s0"]
    types = _types(
        shape,
        {"k": pa.int64(), "__ct_h0": pa.decimal128(36, 2)},
        **{
            "SUM(__ct_nested.__ct_h0)": pa.decimal128(38, 2),
            "__ct_agg0.a0": pa.decimal128(38, 2),
            "CAST(__ct_agg0.a0 AS DECIMAL(36, 2))": pa.decimal128(36, 2),
            "0.0300000000": pa.decimal128(10, 10),
            # Spark: decimal(36,2) * decimal(10,10) -> (47, 12), cut to 38 digits, scale 6
            "CAST(__ct_agg0.a0 AS DECIMAL(36, 2)) * 0.0300000000": pa.decimal128(38, 6),
            "__ct_scalar.s0": pa.decimal128(38, 6),
        },
    )
    got = outer_rows(shape, inner, _no_fetch, types)
    want = _oracle(
        "SELECT k, __ct_h0 FROM i WHERE __ct_h0 > (SELECT SUM(__ct_h0) * 0.03 FROM i)", i=inner
    )
    assert _got(got, ["k", "__ct_h0"]) == want
    assert 0 < got.num_rows < inner.num_rows


def test_a_value_spark_rounds_is_rounded_half_up_and_one_past_its_type_left_to_spark() -> None:
    """A product typed narrower than its exact value (Spark reduced its scale): rounded half
    up as Spark rounds it (0.625 -> 0.63, so 0.63 > it keeps no row); past its type's
    precision (Spark's NULL, or its error under ANSI): not computed."""
    inner = pa.table({"v": pa.array([Decimal("0.62"), Decimal("0.63")], pa.decimal128(10, 2))})

    def kept(factor: str, product: pa.DataType) -> pa.Table:
        sql = f"SELECT * FROM {INNER_VIEW} WHERE v > (SELECT SUM(v) * {factor} FROM {INNER_VIEW})"
        shape = _shape(sql, inner.schema)
        literal = pa.decimal128(len(factor.replace(".", "")), len(factor.partition(".")[2]))
        by_sql = {
            "SUM(__ct_nested.v)": pa.decimal128(20, 2),
            "__ct_agg0.a0": pa.decimal128(20, 2),
            factor: literal,
            f"__ct_agg0.a0 * {factor}": product,
            "__ct_scalar.s0": product,
        }
        types = _types(shape, {"v": pa.decimal128(10, 2)}, **by_sql)
        return outer_rows(shape, inner, _no_fetch, types)

    assert kept("0.5", pa.decimal128(22, 2)).num_rows == 0  # SUM 1.25 * 0.5 = 0.625 -> 0.63
    assert kept("0.5", pa.decimal128(22, 3)).num_rows == 1  # exact 0.625: 0.63 passes
    with pytest.raises(NotOnDriver):
        kept("5.0", pa.decimal128(2, 2))  # 6.25 past DECIMAL(2, 2)


def _no_fetch(join: OuterJoin, values: pa.Array) -> pa.Table:
    raise AssertionError(f"{join.name} fetched")


@pytest.mark.parametrize("seed", range(4))
def test_the_rows_at_the_maximum_joined_by_key_are_tpch_q15(seed: int) -> None:
    """A table joined by an equality with an inner column, fetched only for the inner rows
    the conjuncts over them keep (those at the maximum: ties, a NULL key, a key without a
    supplier); the CTE's column list renames the inner rows."""
    rng = random.Random(seed)
    keys = [rng.choice([1, 2, 3, 4, 5, None]) for _ in range(12)]
    inner = pa.table(
        {
            "l_suppkey": keys,
            "rev": [rng.choice([Decimal("7.50"), Decimal("2.25"), None]) for _ in keys],
        },
        pa.schema([("l_suppkey", pa.int64()), ("rev", pa.decimal128(20, 2))]),
    )
    supplier = pa.table(
        {"s_suppkey": [1, 2, 3, 4, 4], "s_name": ["a", "b", None, "d", "d2"]}, SUPPLIER
    )
    sql = (
        "SELECT s_suppkey, s_name, total FROM ct.s.supplier"
        f" CROSS JOIN {INNER_VIEW} AS r(no, total) WHERE s_suppkey = no"
        f" AND total = (SELECT MAX(total) FROM {INNER_VIEW} AS r(no, total))"
    )
    shape = _shape(sql, inner.schema, {"s.supplier": SUPPLIER.names})
    assert shape.joins == (OuterJoin("supplier", "s.supplier", "s_suppkey", "no"),)
    assert shape.names == ("no", "total") and not shape.late
    fetched: list[list[Any]] = []

    def fetch(join: OuterJoin, values: pa.Array) -> pa.Table:
        fetched.append(sorted(values.to_pylist()))
        return supplier.filter(pc.is_in(supplier.column(join.column), value_set=values))

    types = _types(
        shape,
        {
            "s_suppkey": pa.int64(),
            "s_name": pa.string(),
            "no": pa.int64(),
            "total": pa.decimal128(20, 2),
        },
        **{
            "MAX(r.total)": pa.decimal128(20, 2),
            "__ct_agg0.a0": pa.decimal128(20, 2),
            "__ct_scalar.s0": pa.decimal128(20, 2),
        },
    )
    got = outer_rows(shape, inner, fetch, types)
    want = _oracle(
        "SELECT s_suppkey, s_name, rev FROM supplier JOIN i ON s_suppkey = l_suppkey"
        " WHERE rev = (SELECT MAX(rev) FROM i)",
        i=inner,
        supplier=supplier,
    )
    assert _got(got, ["s_suppkey", "s_name", "total"]) == want
    top = max((v for v in inner.column("rev").to_pylist() if v is not None), default=None)
    at_top = {k for k, v in zip(keys, inner.column("rev").to_pylist(), strict=True) if v == top}
    assert fetched == [sorted(at_top - {None})]  # only the keys at the maximum


@pytest.mark.parametrize("seed", range(4))
def test_a_count_per_group_with_having_is_tpch_q16(seed: int) -> None:
    """``GROUP BY`` over the inner rows (NULL keys a group of their own), ``COUNT`` of a
    column with NULLs, ``COALESCE`` around it, and ``HAVING`` reading a key and a count."""
    rng = random.Random(seed)
    n = 60
    inner = pa.table(
        {
            "g": [rng.choice(["x", "y", "z", None]) for _ in range(n)],
            "h": [rng.choice([1, 2, None]) for _ in range(n)],
            "d": [rng.choice([10, 11, 12, None]) for _ in range(n)],
        },
        pa.schema([("g", pa.string()), ("h", pa.int32()), ("d", pa.int64())]),
    )
    sql = (
        f"SELECT g AS brand, h, COALESCE(COUNT(d), 0) AS cnt, COUNT(*) AS n FROM {INNER_VIEW}"
        " GROUP BY g, h HAVING COUNT(d) > 2 OR g IS NULL ORDER BY cnt DESC"
    )
    shape = _shape(sql, inner.schema)
    assert [g.sql() for g in shape.group or ()] == ["__ct_nested.g", "__ct_nested.h"]
    assert [c.sql() for c in shape.calls] == [
        "COUNT(__ct_nested.d)",
        "COUNT(*)",
        "COUNT(__ct_nested.d)",
    ]
    types = _types(
        shape,
        {"g": pa.string(), "h": pa.int32(), "d": pa.int64()},
        **{
            "COUNT(__ct_nested.d)": pa.int64(),
            "COUNT(*)": pa.int64(),
            "__ct_agg999.a0": pa.int64(),
            "__ct_agg999.a1": pa.int64(),
            "__ct_agg999.a2": pa.int64(),
            "0": pa.int32(),
            "2": pa.int32(),
            "COALESCE(__ct_agg999.a0, 0)": pa.int64(),
        },
    )
    got = outer_rows(shape, inner, _no_fetch, types)
    want = _oracle(
        "SELECT g, h, COALESCE(COUNT(d), 0), COUNT(*) FROM i GROUP BY g, h"
        " HAVING COUNT(d) > 2 OR g IS NULL",
        i=inner,
    )
    assert _got(got, ["brand", "h", "cnt", "n"]) == want


def test_one_group_without_group_by_has_a_row_over_no_rows() -> None:
    inner = pa.table({"d": pa.array([], pa.int64())})
    shape = _shape(f"SELECT COUNT(d) AS n FROM {INNER_VIEW}", inner.schema)
    assert shape.group == ()
    types = {
        "__ct_nested.d": pa.int64(),
        "COUNT(__ct_nested.d)": pa.int64(),
        "__ct_agg999.a0": pa.int64(),
    }
    assert outer_rows(shape, inner, _no_fetch, types).to_pylist() == [{"n": 0}]


@pytest.mark.parametrize(
    ("sql", "reason"),
    [
        (f"SELECT k FROM {INNER_VIEW} ORDER BY k LIMIT 3", "LIMIT"),
        (f"SELECT DISTINCT k FROM {INNER_VIEW}", "DISTINCT"),
        (f"SELECT k FROM {INNER_VIEW} LEFT JOIN ct.s.supplier ON k = s_suppkey", "LEFT"),
        (
            f"SELECT k FROM {INNER_VIEW} WHERE k IN (SELECT k FROM {INNER_VIEW})",
            "other than a scalar",
        ),
        (
            f"SELECT k FROM {INNER_VIEW} i WHERE v > (SELECT SUM(v) FROM {INNER_VIEW} j"
            " WHERE j.k = i.k)",
            "correlated",
        ),
        (
            f"SELECT k FROM {INNER_VIEW} WHERE v > (SELECT SUM(s_suppkey) FROM ct.s.supplier)",
            "reads a table",
        ),
        (f"SELECT k, COUNT(DISTINCT v) AS n FROM {INNER_VIEW} GROUP BY k", "evaluated by Spark"),
        (
            f"SELECT k + 1 AS k1, COUNT(*) AS n FROM {INNER_VIEW} GROUP BY k + 1",
            "GROUP BY an expression",
        ),
        (f"SELECT k + 1 FROM {INNER_VIEW}", "no plain name"),
        (f"SELECT * FROM {INNER_VIEW} JOIN ct.s.supplier ON k = s_suppkey", "no plain name"),
        (f"SELECT k, v AS k FROM {INNER_VIEW}", "one name"),
        (f"SELECT k FROM {INNER_VIEW}, ct.s.supplier WHERE v = s_suppkey + 1", "not joined"),
        (f"SELECT k, SUM(v) OVER (PARTITION BY k) AS w FROM {INNER_VIEW}", "window"),
    ],
)
def test_what_the_driver_leaves_to_spark_is_named(sql: str, reason: str) -> None:
    inner = pa.schema([("k", pa.int64()), ("v", pa.int64())])
    found = outer_shape(
        sqlglot.parse_one(sql, read="spark"), inner.names, {"s.supplier": SUPPLIER.names}, "ct"
    )
    assert isinstance(found, str) and reason in found, found
