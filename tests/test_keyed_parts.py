"""Keyed subqueries taken apart for the driver (``ivm/plan/keyed_parts.py``), from SQL alone.

The parts' evaluation is checked against DuckDB by the keyed ticks of
``test_incremental.py`` and the randomized run; here, what each shape
becomes, and what the driver leaves to Spark with its reason.
"""

from __future__ import annotations

import pytest
import sqlglot

from airflow_provider_ct.ivm.plan.keyed_parts import EXISTS, IN, SCALAR, keyed_parts

COLUMNS = {
    "s.l": ["l_orderkey", "l_partkey", "l_suppkey", "l_quantity", "l_price", "l_due", "l_seen"],
    "s.p": ["p_partkey", "p_brand"],
    "s.o": ["o_orderkey", "o_custkey", "o_status"],
}


def _parts(sql: str) -> list | str:
    return keyed_parts(sqlglot.parse_one(sql, read="spark"), COLUMNS, "ct")


def test_a_correlated_scalar_is_one_value_per_key() -> None:
    """TPC-H q17 as written: bare columns placed by the tables' columns, the subquery's own
    table first."""
    parts = _parts(
        "SELECT SUM(l_price) FROM s.l, s.p WHERE p_partkey = l_partkey AND p_brand = 'x'"
        " AND l_quantity < (SELECT 0.2 * AVG(l_quantity) FROM s.l WHERE l_partkey = p_partkey)"
    )
    assert not isinstance(parts, str), parts
    (part,) = parts
    assert (part.kind, part.input, part.alias, part.tie) == (SCALAR, "s.l", "l", "l_partkey")
    assert part.outer == ("p", "p_partkey") and part.where is None
    assert part.value.sql() == "0.2 * __ct_agg0.a0"
    assert [a.sql() for a in part.aggregates] == ["AVG(l.l_quantity)"]
    assert part.replaced.sql() == "l_quantity < __ct_keyed.v0"
    assert part.original(part.value).sql() == "0.2 * AVG(l.l_quantity)"


def test_an_in_grouped_by_its_output_keeps_its_having() -> None:
    """TPC-H q18: ``IN`` over the key's groups, ``HAVING`` over their aggregates."""
    parts = _parts(
        "SELECT o_orderkey, SUM(l_quantity) FROM s.o, s.l WHERE o_orderkey IN (SELECT"
        " l_orderkey FROM s.l WHERE l_seen IS NOT NULL GROUP BY l_orderkey HAVING"
        " SUM(l_quantity) > 300) AND o_orderkey = l_orderkey GROUP BY o_orderkey"
    )
    assert not isinstance(parts, str), parts
    (part,) = parts
    assert (part.kind, part.tie, part.outer) == (IN, "l_orderkey", ("o", "o_orderkey"))
    assert part.value.sql() == "__ct_agg0.a0 > 300"
    assert part.where.sql() == "NOT l.l_seen IS NULL"
    assert part.replaced.sql() == "__ct_keyed.v0"


def test_exists_keeps_the_conditions_between_the_rows() -> None:
    """TPC-H q21: the tie is the key's equality; the inequality is evaluated per pair of
    rows; ``NOT EXISTS`` negates the placeholder."""
    parts = _parts(
        "SELECT l1.l_suppkey, COUNT(*) FROM s.l l1, s.o WHERE o_orderkey = l1.l_orderkey"
        " AND EXISTS (SELECT * FROM s.l l2 WHERE l2.l_orderkey = l1.l_orderkey AND"
        " l2.l_suppkey <> l1.l_suppkey) AND NOT EXISTS (SELECT * FROM s.l l3 WHERE"
        " l3.l_orderkey = l1.l_orderkey AND l3.l_suppkey <> l1.l_suppkey AND l3.l_due >"
        " l3.l_seen) GROUP BY l1.l_suppkey"
    )
    assert not isinstance(parts, str), parts
    first, second = parts
    assert (first.kind, first.alias, first.outer) == (EXISTS, "l2", ("l1", "l_orderkey"))
    assert first.correlated.sql() == "l2.l_suppkey <> l1.l_suppkey" and first.where is None
    assert second.where.sql() == "l3.l_due > l3.l_seen"
    assert second.replaced.sql() == "NOT __ct_keyed.v1"


def test_exists_under_or_and_not_share_their_condition() -> None:
    """TPC-DS q35/q10: ``EXISTS a AND (EXISTS b OR NOT EXISTS c)``: each a part, the two
    sharing one conjunct each holding it with both placeholders; beside a comparison, the
    driver leaves it to Spark."""
    exists = (
        "EXISTS (SELECT * FROM s.l l{n} WHERE l{n}.l_partkey = p_partkey AND l{n}.l_seen > {n})"
    )
    parts = _parts(
        f"SELECT COUNT(*) FROM s.p WHERE {exists.format(n=1)} AND ({exists.format(n=2)}"
        f" OR NOT {exists.format(n=3)})"
    )
    assert not isinstance(parts, str), parts
    first, second, third = parts
    assert [p.kind for p in parts] == [EXISTS] * 3
    assert first.replaced.sql() == "__ct_keyed.v0"
    assert second.replaced.sql() == third.replaced.sql() == "__ct_keyed.v1 OR NOT __ct_keyed.v2"
    assert second.conjunct is third.conjunct
    assert (third.alias, third.where.sql()) == ("l3", "l3.l_seen > 3")
    mixed = _parts(f"SELECT COUNT(*) FROM s.p WHERE {exists.format(n=1)} OR p_brand = 'x'")
    assert isinstance(mixed, str) and "inside an expression" in mixed, mixed


def test_a_scalar_inside_a_condition_is_evaluated_with_it() -> None:
    """A scalar's value is a column of the outer rows: the conjunct around it (an ``OR``
    here) is evaluated as written, and ``COUNT`` over no rows is 0 there."""
    parts = _parts(
        "SELECT COUNT(*) FROM s.p WHERE p_brand = 'x' OR 1 < (SELECT COUNT(*) + 0 FROM s.l"
        " WHERE l_partkey = p_partkey)"
    )
    assert not isinstance(parts, str), parts
    (part,) = parts
    assert part.replaced.sql() == "p_brand = 'x' OR 1 < __ct_keyed.v0"
    assert part.value.sql() == "__ct_agg0.a0 + 0"


def test_a_subquery_over_several_tables_joins_them_from_the_tied_one() -> None:
    """TPC-H q2's shape: the subquery reads the block's tables again under their own names
    (SQL's innermost scope: its bare columns are its tables'), tied by one of them; its
    other tables join by the subquery's equalities, kept in its own conditions with the
    filter on ``o`` (an ``ON`` too)."""
    parts = _parts(
        "SELECT p_partkey, l_price FROM s.p, s.l, s.o WHERE p_partkey = l_partkey AND"
        " o_orderkey = l_orderkey AND l_price = (SELECT MIN(l_price) FROM s.l JOIN s.o ON"
        " o_orderkey = l_orderkey WHERE p_partkey = l_partkey AND o_status = 'F')"
    )
    assert not isinstance(parts, str), parts
    (part,) = parts
    assert (part.kind, part.input, part.alias, part.tie) == (SCALAR, "s.l", "l", "l_partkey")
    assert part.outer == ("p", "p_partkey")
    assert part.reads == (("l", "s.l"), ("o", "s.o"))
    assert part.where.sql() == "o.o_status = 'F' AND o.o_orderkey = l.l_orderkey"
    assert [a.sql() for a in part.aggregates] == ["MIN(l.l_price)"]


def test_a_subquery_holds_parts_of_its_own() -> None:
    """TPC-H q20's shape: an ``IN`` whose subquery keeps its rows by an ``IN`` of its own
    and by a scalar tied by two columns; the nested parts are numbered after the block's
    and typed in the subquery's scope."""
    parts = _parts(
        "SELECT p_brand FROM s.p WHERE p_partkey IN (SELECT l_partkey FROM s.l WHERE"
        " l_orderkey IN (SELECT o_orderkey FROM s.o WHERE o_status = 'F') AND l_quantity >"
        " (SELECT 0.5 * SUM(l_price) FROM s.l l2 WHERE l2.l_partkey = l.l_partkey AND"
        " l2.l_suppkey = l.l_suppkey AND l2.l_seen IS NULL))"
    )
    assert not isinstance(parts, str), parts
    (part,) = parts
    assert (part.kind, part.input, part.tie, part.outer) == (
        IN,
        "s.l",
        "l_partkey",
        ("p", "p_partkey"),
    )
    assert part.where is None  # both conjuncts are parts of their own
    inner, scalar = part.parts
    assert (inner.kind, inner.input, inner.tie, inner.outer) == (
        IN,
        "s.o",
        "o_orderkey",
        ("l", "l_orderkey"),
    )
    assert inner.where.sql() == "o.o_status = 'F'" and inner.index == 1
    assert (scalar.kind, scalar.alias, scalar.tie, scalar.outer) == (
        SCALAR,
        "l2",
        "l_partkey",
        ("l", "l_partkey"),
    )
    assert scalar.ties == ((("l2", "l_suppkey"), ("l", "l_suppkey")),)
    assert scalar.replaced.sql() == "l.l_quantity > __ct_keyed.v2"
    assert scalar.value.sql() == "0.5 * __ct_agg2.a0"
    assert scalar.scope is not None and scalar.scope.find(sqlglot.exp.Table).name == "l"


def test_a_scalar_tied_by_two_columns_of_two_tables() -> None:
    """A second equality with an outer column, on a joined table of the subquery: a tie."""
    parts = _parts(
        "SELECT COUNT(*) FROM s.p WHERE p_brand = (SELECT MIN(l_price) FROM s.l, s.o"
        " WHERE l_partkey = p_partkey AND o_orderkey = l_orderkey AND o_custkey = p_brand)"
    )
    assert not isinstance(parts, str), parts
    assert parts[0].ties == ((("o", "o_custkey"), ("p", "p_brand")),)


@pytest.mark.parametrize(
    ("sql", "reason"),
    [
        (
            "SELECT COUNT(*) FROM s.p WHERE p_brand = (SELECT MIN(l_price) FROM s.l LEFT JOIN"
            " s.o ON o_orderkey = l_orderkey WHERE l_partkey = p_partkey)",
            "an outer join",
        ),
        (
            "SELECT COUNT(*) FROM s.p WHERE p_brand = (SELECT MIN(l_price) FROM s.l WHERE"
            " l_partkey = p_partkey AND l_orderkey IN (SELECT o_orderkey FROM s.o WHERE"
            " o_custkey IN (SELECT l_suppkey FROM s.l)))",
            "a subquery inside a subquery other than in a conjunct of its WHERE",
        ),
        (
            "SELECT COUNT(*) FROM s.p WHERE p_brand = (SELECT MIN(l_price) + (SELECT"
            " MAX(o_custkey) FROM s.o) FROM s.l WHERE l_partkey = p_partkey)",
            "a subquery inside a subquery other than in a conjunct of its WHERE",
        ),
        (
            "SELECT COUNT(*) FROM s.p WHERE p_brand = (SELECT MIN(l_price) FROM s.l WHERE"
            " l_partkey = p_partkey AND l_orderkey IN (SELECT o_orderkey FROM s.o WHERE"
            " o_custkey = p_brand))",
            "is not placed",
        ),
        (
            "SELECT p_brand, (SELECT COUNT(*) FROM s.l WHERE l_partkey = p_partkey) FROM s.p",
            "outside the conjuncts of WHERE",
        ),
        (
            "SELECT COUNT(*) FROM s.p WHERE p_brand = 'x' OR p_partkey IN (SELECT l_partkey"
            " FROM s.l)",
            "inside an expression",
        ),
        (
            "SELECT COUNT(*) FROM s.p WHERE 1 < (SELECT COUNT(*) FROM s.l WHERE"
            " l_partkey = p_partkey AND l_suppkey > p_partkey)",
            "correlated beyond column equalities",
        ),
        (
            "SELECT COUNT(*) FROM s.p WHERE 1 < (SELECT COUNT(DISTINCT l_suppkey) FROM s.l"
            " WHERE l_partkey = p_partkey)",
            "is evaluated by Spark",
        ),
        (
            "SELECT COUNT(*) FROM s.p WHERE 1 < (SELECT l_suppkey + COUNT(*) FROM s.l"
            " WHERE l_partkey = p_partkey)",
            "outside the aggregates",
        ),
        (
            "SELECT COUNT(*) FROM s.o WHERE o_orderkey IN (SELECT l_orderkey FROM s.l"
            " WHERE l_suppkey = o_custkey)",
            "correlated IN",
        ),
        (
            "SELECT COUNT(*) FROM s.p WHERE EXISTS (SELECT l_partkey FROM s.l WHERE"
            " l_partkey = p_partkey GROUP BY l_partkey HAVING COUNT(*) > 1)",
            "EXISTS over an aggregate",
        ),
    ],
)
def test_what_the_driver_leaves_to_spark_says_why(sql: str, reason: str) -> None:
    found = _parts(sql)
    assert isinstance(found, str) and reason in found, found
