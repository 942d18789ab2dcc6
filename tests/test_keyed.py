"""Keyed subqueries: which ties the planner sees, and the rule itself checked with DuckDB.

The rule: when every changed table holds the subqueries' key, the change of
a block is its rows restricted to the keys ``K`` the changes hold, as they
are minus as they were. The property test draws random tables and random
changes, takes ``K`` from the rows the *test* changed, and compares that
difference with the change of the unrestricted query, both run by DuckDB.
"""

from __future__ import annotations

import os
import random
from collections import Counter
from typing import Any

import duckdb
import pyarrow as pa
import pytest
from sqlglot import exp

from airflow_provider_ct.core.query import parse_query
from airflow_provider_ct.ivm.plan.keyed import Bridge, KeyedRead, keyed_shape, place_keyed
from airflow_provider_ct.ivm.plan.planner import plan_query

CASES = int(os.environ.get("CT_KEYED_CASES", "24"))
COLUMNS = {"s.a": ["id", "k", "v", "s"], "s.b": ["k", "w", "name"]}

#: Blocks whose subqueries are keyed: the columns each restricts, the tied sides.
KEYED = {
    # TPC-H q17: unqualified; the inner s.a (named a) shadows the outer alias a.
    "SELECT a.id, b.name FROM s.a a, s.b b WHERE a.k = b.k AND a.v < (SELECT AVG(v) FROM s.a"
    " WHERE k = b.k)": ([("s.a", "a", "k"), ("s.b", "b", "k")], ["k"]),
    # TPC-H q2: the tie names b, equal to a.k in the block; unqualified on both sides.
    "SELECT id, name FROM s.a a, s.b b WHERE a.k = b.k AND a.v = (SELECT MIN(id) FROM s.a a2"
    " WHERE a2.k = w)": None,
    "SELECT a.id, b.name FROM s.a a JOIN s.b b ON a.k = b.k WHERE a.v = (SELECT MIN(a2.v)"
    " FROM s.a a2 WHERE a2.k = b.k)": ([("s.a", "a", "k"), ("s.b", "b", "k")], ["a2.k"]),
    # TPC-H q18: IN over a subquery grouped by its output, with HAVING.
    "SELECT a.id FROM s.a a WHERE a.k IN (SELECT k FROM s.b GROUP BY k HAVING SUM(w) > 3)": (
        [("s.a", "a", "k")],
        ["k"],
    ),
    # TPC-H q21: tied by a key beside an inequality, twice.
    "SELECT a1.id FROM s.a a1 WHERE EXISTS (SELECT 1 FROM s.a a2 WHERE a2.k = a1.k AND"
    " a2.id <> a1.id) AND NOT EXISTS (SELECT 1 FROM s.b WHERE s.b.k = a1.k AND w > 2)": (
        [("s.a", "a1", "k")],
        ["a2.k", "s.b.k"],
    ),
}

#: Shapes no key bounds, and why (from the SQL alone, or once the columns place them).
NOT_KEYED = {
    "SELECT a.id FROM s.a a WHERE a.k NOT IN (SELECT k FROM s.b)": "NOT IN",
    "SELECT a.id FROM s.a a WHERE NOT (a.k IN (SELECT k FROM s.b) AND a.v > 1)": "NOT IN",
    "SELECT a.id FROM s.a a WHERE a.k IN (SELECT MAX(k) FROM s.b)": "not tied",
    "SELECT a.id FROM s.a a WHERE a.v > (SELECT AVG(w) FROM s.b)": "not tied",
    # Nested: tied to a column of the subquery's other table, neither the key nor its table's.
    "SELECT a.id FROM s.a a WHERE a.k IN (SELECT b.k FROM s.b b, s.a x WHERE x.id = b.w"
    " AND x.v IN (SELECT w FROM s.b))": "tied to neither the key nor its table",
    "SELECT a.id FROM s.a a WHERE a.k IN (SELECT k FROM s.b WHERE w IN (SELECT v FROM s.a"
    " WHERE id IN (SELECT w FROM s.b)))": "three levels deep",
    # Placed with the columns: both sides of the equality are the subquery's own.
    "SELECT a.id FROM s.a a WHERE EXISTS (SELECT 1 FROM s.b WHERE k = w)": "not tied",
    "SELECT a.id FROM s.a a WHERE EXISTS (SELECT 1 FROM s.b b WHERE b.k = a.k) AND"
    " EXISTS (SELECT 1 FROM s.b b2 WHERE b2.w = a.v)": "different keys",
}


def _block(sql: str) -> Any:
    return plan_query(parse_query(sql)).blocks[0]


def _tree(sql: str) -> Any:
    """The block's tree; the query's, for shapes the planner already runs in full."""
    blocks = plan_query(parse_query(sql)).blocks
    return blocks[0].tree if blocks else parse_query(sql).expression


def _placed(sql: str) -> KeyedRead | str:
    tree = _tree(sql)
    why = keyed_shape(tree)
    return why if why is not None else place_keyed(tree, COLUMNS, "ct")


@pytest.mark.parametrize("sql", sorted(KEYED))
def test_the_ties_are_placed_with_the_tables_columns(sql: str) -> None:
    placed = _placed(sql)
    expected = KEYED[sql]
    if expected is None:  # ``w`` is b's: tied to b.w, which no block equality makes a.k
        assert isinstance(placed, KeyedRead) and placed.members == (("s.b", "b", "w"),)
        return
    assert isinstance(placed, KeyedRead), placed
    members, inner = expected
    assert list(placed.members) == members
    assert [s.lower() for s in placed.inner_sql] == inner


@pytest.mark.parametrize("sql", sorted(NOT_KEYED))
def test_shapes_without_a_key_say_why(sql: str) -> None:
    placed = _placed(sql)
    assert isinstance(placed, str) and NOT_KEYED[sql] in placed, placed


def test_a_subquery_inside_a_subquery_is_tied_or_bridged() -> None:
    """TPC-H q20's nesting: a nested subquery tied by a column equal to its parent's tied
    column holds the key; one tied to another column of the parent's tied table is bridged
    through it (its change's keys are those of the parent's rows it joins)."""
    placed = _placed(
        "SELECT a.id FROM s.a a WHERE a.k IN (SELECT k FROM s.b b WHERE w IN (SELECT v FROM"
        " s.a) AND b.name > (SELECT MIN(s) FROM s.a a2 WHERE a2.k = b.k AND a2.v = b.w))"
    )
    assert isinstance(placed, KeyedRead), placed
    assert placed.members == (("s.a", "a", "k"),)
    assert placed.inner_members == (("s.b", "b", "k"), ("s.a", "a2", "k"))
    assert placed.bridges == (Bridge("s.a", "v", "s.b", "w", "k", nested=True),)
    assert placed.subquery_inputs == {"s.a", "s.b"}
    assert placed.unkeyed({"s.a", "s.b"}, ("s.a",)) is None
    assert placed.restricted_columns("s.a", ("s.a",)) == []  # the bridged read needs every row


def test_a_changed_table_must_hold_the_key() -> None:
    sql = "SELECT a.id FROM s.a a JOIN s.b b ON a.v = b.k WHERE a.k IN (SELECT k FROM s.b)"
    placed = _placed(sql)
    assert isinstance(placed, KeyedRead)
    assert placed.unkeyed({"s.a", "s.b"}, ("s.a", "s.b")) is None  # b is bridged by a.v
    assert placed.bridges == (Bridge("s.b", "k", "s.a", "v", "k"),)
    theta = _placed(sql.replace("a.v = b.k", "a.v < b.k"))
    assert isinstance(theta, KeyedRead) and not theta.bridges
    assert theta.unkeyed({"s.a"}, ("s.a", "s.b")) is None
    why = theta.unkeyed({"s.b"}, ("s.a", "s.b"))
    assert why is not None and "holds no column equal" in why
    untied = _placed(
        "SELECT a.id FROM s.a a WHERE EXISTS (SELECT 1 FROM s.b b, s.a x WHERE b.k = a.k"
        " AND x.id = b.w)"
    )
    assert isinstance(untied, KeyedRead)
    assert "does not tie" in (untied.unkeyed({"s.a"}, ("s.a",)) or "")


#: Linear and aggregated blocks the property test runs (their rows below any aggregation).
PROPERTY = [
    "SELECT x.id, x.k, x.v FROM s.a x WHERE x.v >= (SELECT AVG(v) FROM s.a WHERE k = x.k)",
    "SELECT a.id, b.name FROM s.a a JOIN s.b b ON a.k = b.k WHERE a.v = (SELECT MIN(a2.v)"
    " FROM s.a a2 WHERE a2.k = b.k)",
    "SELECT a.id, a.s FROM s.a a WHERE a.k IN (SELECT k FROM s.b GROUP BY k HAVING SUM(w) > 3)"
    " OR a.v IS NULL",
    "SELECT a1.id, a1.s FROM s.a a1 WHERE EXISTS (SELECT 1 FROM s.a a2 WHERE a2.k = a1.k AND"
    " a2.id <> a1.id) AND NOT EXISTS (SELECT 1 FROM s.b b WHERE b.k = a1.k AND b.w > 2)",
    # b holds no key: bridged by a.v = b.w, its change's keys are those of the a rows it joins.
    "SELECT a.id, b.name FROM s.a a JOIN s.b b ON a.v = b.w WHERE a.id > (SELECT MIN(a2.id)"
    " FROM s.a a2 WHERE a2.k = a.k)",
    # b tied in the subquery by k (the key is a.v) and joined to a by k in the block: its
    # block read holds no key (bridged), so it is never read restricted.
    "SELECT a.id, bb.name FROM s.a a JOIN s.b bb ON a.k = bb.k WHERE a.v IN (SELECT k FROM"
    " s.b WHERE w > 1)",
]


def _keys_of_change(index: int, a_new: Any, changed_a: set[Any], changed_b: set[Any]) -> set[Any]:
    """The keys the changes hold, as the test reads the query (a's column, b's column, and
    for a bridged b the key of the a rows its changed values join)."""
    if index == len(PROPERTY) - 2:  # key a.k; b bridged by b.w = a.v
        joined = {r[1] for r in changed_b}
        return {r[1] for r in changed_a} | {r[1] for r in a_new if r[2] in joined}
    if index == len(PROPERTY) - 1:  # key a.v; b tied by b.k, bridged by bb.k = a.k
        joined = {r[0] for r in changed_b}
        return {r[2] for r in changed_a} | joined | {r[2] for r in a_new if r[1] in joined}
    return {r[1] for r in changed_a} | {r[0] for r in changed_b}


A = pa.schema([("id", pa.int64()), ("k", pa.int64()), ("v", pa.int64()), ("s", pa.string())])
B = pa.schema([("k", pa.int64()), ("w", pa.int64()), ("name", pa.string())])


def _tables(rng: random.Random) -> tuple[list[tuple[Any, ...]], list[tuple[Any, ...]]]:
    a = [
        (i, rng.choice([1, 2, 3, 4, 5, None]), rng.choice([rng.randint(0, 6), None]), "xy"[i % 2])
        for i in range(rng.randint(0, 14))
    ]
    a += rng.sample(a, min(len(a), 2))  # duplicates
    b = [
        (rng.choice([1, 2, 3, 4, 5, None]), rng.randint(0, 5), rng.choice(["n", None]))
        for _ in range(rng.randint(0, 6))
    ]
    return a, b


def _changed(rng: random.Random, rows: list[tuple[Any, ...]], fresh: list[tuple[Any, ...]]) -> Any:
    kept = [r for r in rows if rng.random() > 0.3]
    return kept + [r for r in fresh if rng.random() < 0.3]


def _arrow(rows: list[tuple[Any, ...]], schema: pa.Schema) -> pa.Table:
    return pa.Table.from_pylist([dict(zip(schema.names, r, strict=True)) for r in rows], schema)


def _run(sql: str, a: list[tuple[Any, ...]], b: list[tuple[Any, ...]], keys: Any = None) -> Counter:
    con = duckdb.connect()
    con.register("a_rows", _arrow(a, A))
    con.register("b_rows", _arrow(b, B))
    if keys is not None:
        values = pa.array(sorted(keys, key=str), pa.int64())
        con.register("keys_rows", pa.table({"__ct_k0": values}))
    text = sql.replace("s.a", "a_rows").replace("s.b", "b_rows")
    return Counter(
        tuple(r) for r in con.execute(text.replace("ct_keys_view", "keys_rows")).fetchall()
    )


def _pre_restricted(
    a: list[tuple[Any, ...]],
    b: list[tuple[Any, ...]],
    keys: set[Any],
    columns: dict[str, list[str]],
) -> tuple[list[tuple[Any, ...]], list[tuple[Any, ...]]]:
    """Each table's rows one of whose restricted columns holds a key (NULL matches NULL)."""

    def kept(rows: list[tuple[Any, ...]], name: str, schema: pa.Schema) -> list[tuple[Any, ...]]:
        found = columns[name]
        if not found:
            return rows
        where = [schema.names.index(c) for c in found]
        return [r for r in rows if any(r[i] in keys for i in where)]

    return kept(a, "s.a", A), kept(b, "s.b", B)


def _delta(new: Counter, old: Counter) -> Counter:
    out = Counter(new)
    out.subtract(old)
    return Counter({r: n for r, n in out.items() if n})


@pytest.mark.parametrize("index", range(len(PROPERTY)))
def test_the_restricted_reads_at_both_snapshots_are_the_change(index: int) -> None:
    """``P_new|K - P_old|K`` equals ``P_new - P_old`` for ``K`` the keys of the rows the
    test changed, over ``CT_KEYED_CASES`` (default 24) random histories (NULL keys and
    duplicates included); and so do the reads a tick makes, restricted where they can be."""
    sql = PROPERTY[index]
    placed = _placed(sql)
    assert isinstance(placed, KeyedRead), placed
    keys_query = exp.select("__ct_k0").from_("ct_keys_view")
    block = _block(sql)
    restricted = placed.restrict(block.tree, keys_query).sql(dialect="duckdb")
    columns = {n: placed.restricted_columns(n, block.inputs) for n in COLUMNS}
    partly_restricted = {n for n, found in columns.items() if found}
    assert partly_restricted, columns  # every case reads some table restricted
    partly = placed.restrict(block.tree, keys_query, partly_restricted).sql(dialect="duckdb")
    rng = random.Random(index)
    for case in range(CASES):
        a_old, b_old = _tables(rng)
        a_fresh, b_fresh = _tables(rng)
        a_new, b_new = _changed(rng, a_old, a_fresh), _changed(rng, b_old, b_fresh)
        changed_a = set(Counter(a_new) - Counter(a_old)) | set(Counter(a_old) - Counter(a_new))
        changed_b = set(Counter(b_new) - Counter(b_old)) | set(Counter(b_old) - Counter(b_new))
        keys = _keys_of_change(index, a_new, changed_a, changed_b)
        expected = _delta(_run(sql, a_new, b_new), _run(sql, a_old, b_old))
        got = _delta(_run(restricted, a_new, b_new, keys), _run(restricted, a_old, b_old, keys))
        assert got == expected, (case, sql, keys)
        # As a tick reads it: the tables that hold the key read restricted to the keys
        # (null-safe), and the block's conditions only for the others.
        pre = _pre_restricted(a_new, b_new, keys, columns)
        old = _pre_restricted(a_old, b_old, keys, columns)
        got = _delta(_run(partly, *pre, keys), _run(partly, *old, keys))
        assert got == expected, (case, sql, keys, columns)
