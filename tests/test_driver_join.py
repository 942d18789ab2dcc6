"""The driver's delta-rule joins against DuckDB: the signed terms sum to join(new) - join(old).

Random contents of three tables (NULL keys, duplicate rows and keys) before
and after a change to two of them; the terms of ``ivm/driver/driver_join`` are
summed with their signs and compared with the multiset difference of the
two joins, each computed by DuckDB over the whole tables the test chose.
``CT_DRIVER_JOIN_CASES`` (default 30) sets how many random cases run.
"""

from __future__ import annotations

import os
import random
from collections import Counter
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pytest
import sqlglot

from airflow_provider_ct.ivm.changes.table_changes import net_changes
from airflow_provider_ct.ivm.driver.arrow_eval import ArrowEvaluator, NotOnDriver
from airflow_provider_ct.ivm.driver.driver_join import (
    NEW,
    OLD,
    join_shape,
    single_table_conjuncts,
    term_rows,
)

CASES = int(os.environ.get("CT_DRIVER_JOIN_CASES", "30"))
COLUMNS = {
    "ns.a": ["id", "k", "v"],
    "ns.b": ["k", "j", "name"],
    "ns.c": ["j", "w"],
}
TYPES = {"id": pa.int64(), "k": pa.int32(), "v": pa.int64(), "j": pa.int64(), "name": pa.string()}
TYPES["w"] = pa.int64()
SQL = "SELECT * FROM ns.a a JOIN ns.b b ON a.k = b.k, ns.c WHERE c.j = b.j AND a.v > 0"
ORDERED = ["a.id", "a.k", "a.v", "b.k", "b.j", "b.name", "c.j", "c.w"]


def _table(name: str, rows: list[tuple[Any, ...]]) -> pa.Table:
    columns = COLUMNS[name]
    schema = pa.schema([(c, TYPES[c]) for c in columns])
    return pa.Table.from_pylist([dict(zip(columns, r, strict=True)) for r in rows], schema)


def _random(rng: random.Random, name: str, n: int) -> list[tuple[Any, ...]]:
    key = lambda: rng.choice([1, 2, 3, None])  # noqa: E731
    make = {
        "ns.a": lambda i: (i, key(), rng.choice([-1, 1, 2, None])),
        "ns.b": lambda i: (key(), rng.choice([10, 20, None]), rng.choice(["x", "y", None])),
        "ns.c": lambda i: (rng.choice([10, 20, 30, None]), rng.randint(0, 3)),
    }[name]
    rows = [make(i) for i in range(n)]
    return rows + rng.sample(rows, min(len(rows), 2))  # duplicates


def _oracle(tables: dict[str, pa.Table]) -> Counter[tuple[Any, ...]]:
    import duckdb

    con = duckdb.connect()
    for name, table in tables.items():
        con.register(name.replace("ns.", "t_"), table)
    rows = con.sql(
        "SELECT a.id, a.k, a.v, b.k, b.j, b.name, c.j, c.w FROM t_a a JOIN t_b b ON a.k = b.k,"
        " t_c c WHERE c.j = b.j"
    ).fetchall()
    return Counter(rows)


def _fetcher(sides: dict[str, dict[str, pa.Table]]) -> Any:
    def fetch(name: str, side: str, column: str, values: pa.Array) -> pa.Table:
        table = sides[side][name]
        return table.filter(pc.is_in(table.column(column), value_set=values, skip_nulls=True))

    return fetch


def _summed_terms(
    shape: Any, changed: list[str], new: dict[str, pa.Table], old: dict[str, pa.Table], **kw: Any
) -> Counter[tuple[Any, ...]]:
    """The changed inputs' terms (``ORDERED`` columns), each row counted with its sign."""
    fetch = _fetcher({NEW: new, OLD: old})
    got: Counter[tuple[Any, ...]] = Counter()
    for position, joined in enumerate(shape.inputs):
        if joined.name not in changed:
            continue
        plus, minus = net_changes(new[joined.name], old[joined.name])
        for sign, rows in ((1, plus), (-1, minus)):
            terms = term_rows(shape, position, rows, fetch, **kw)
            for row in zip(*(terms.column(c).to_pylist() for c in ORDERED), strict=True):
                got[row] += sign
    return got


@pytest.mark.parametrize("case", range(CASES))
def test_signed_terms_sum_to_the_change_of_the_join(case: int) -> None:
    rng = random.Random(case)
    old = {n: _table(n, _random(rng, n, rng.randint(0, 6))) for n in COLUMNS}
    new = dict(old)
    changed = rng.sample(sorted(COLUMNS), 2)
    for name in changed:
        new[name] = _table(name, _random(rng, name, rng.randint(0, 6)))
    shape = join_shape(sqlglot.parse_one(SQL, dialect="spark"), "ct", COLUMNS)
    assert [i.alias for i in shape.inputs] == ["a", "b", "c"]
    got = _summed_terms(shape, changed, new, old)
    expected = _oracle(new)
    expected.subtract(_oracle(old))
    assert +got == +expected and -got == -expected, case


@pytest.mark.parametrize("case", range(CASES))
def test_crossed_terms_sum_to_the_change_of_the_cross_join(case: int) -> None:
    """A table no equality ties (``ns.c`` here) is read whole and crossed with the rows so
    far: the terms still telescope to DuckDB's change of the cross join."""
    rng = random.Random(1_000 + case)
    old = {n: _table(n, _random(rng, n, rng.randint(0, 5))) for n in COLUMNS}
    new = dict(old)
    changed = rng.sample(sorted(COLUMNS), 2)
    for name in changed:
        new[name] = _table(name, _random(rng, name, rng.randint(0, 5)))
    sql = "SELECT * FROM ns.a a JOIN ns.b b ON a.k = b.k, ns.c c WHERE c.w > 0"
    shape = join_shape(sqlglot.parse_one(sql, dialect="spark"), "ct", COLUMNS)
    sides = {NEW: new, OLD: old}
    # WHERE c.w > 0 is the caller's to evaluate: not the terms'
    got = _summed_terms(shape, changed, new, old, whole=lambda n, side, _rows: sides[side][n])

    def crossed(tables: dict[str, pa.Table]) -> Counter[tuple[Any, ...]]:
        import duckdb

        con = duckdb.connect()
        for name, table in tables.items():
            con.register(name.replace("ns.", "t_"), table)
        query = (
            "SELECT a.id, a.k, a.v, b.k, b.j, b.name, c.j, c.w"
            " FROM t_a a JOIN t_b b ON a.k = b.k, t_c c"
        )
        return Counter(con.sql(query).fetchall())

    expected = crossed(new)
    expected.subtract(crossed(old))
    assert +got == +expected and -got == -expected, case


def test_a_cross_join_past_the_limit_is_refused_before_its_pairs_are_made() -> None:
    """The whole read refuses (NotOnDriver) when the rows so far times its rows pass the
    caller's limit; the terms never pair them."""
    old = {n: _table(n, []) for n in COLUMNS}
    new = {**old, "ns.a": _table("ns.a", [(i, 1, 1) for i in range(50)])}
    new["ns.b"] = _table("ns.b", [(1, 10, "x")])
    sql = "SELECT * FROM ns.a a JOIN ns.b b ON a.k = b.k, ns.c c"
    shape = join_shape(sqlglot.parse_one(sql, dialect="spark"), "ct", COLUMNS)
    table_c = _table("ns.c", [(j, 1) for j in range(10)])

    def whole(name: str, side: str, crossed: int) -> pa.Table:
        if crossed * table_c.num_rows > 100:
            raise NotOnDriver(f"{crossed} rows crossed with {table_c.num_rows}")
        return table_c

    plus, _ = net_changes(new["ns.a"], old["ns.a"])
    fetch = _fetcher({NEW: new, OLD: new})
    with pytest.raises(NotOnDriver, match="50 rows crossed with 10"):
        term_rows(shape, 0, plus, fetch, whole=whole)
    few = term_rows(shape, 0, plus.slice(0, 5), fetch, whole=whole)
    assert few.num_rows == 5 * 10


def test_a_join_tied_by_two_columns_fetches_by_the_one_matching_fewer_rows() -> None:
    """``b`` is tied to ``a`` by ``k`` (few values, most rows) and ``j`` (many values):
    fetched by ``j``, and the term still holds exactly the rows both equalities keep."""
    a = pa.table({"id": [1, 2], "k": pa.array([1, 1], pa.int32()), "v": [5, 6]})
    rows = [(1, j, f"n{j}") for j in range(40)] + [(2, 5, "x"), (1, None, "y")]
    b = _table("ns.b", rows)
    calls: list[str] = []

    def matching(column: str, values: pa.Array) -> pa.Table:
        return b.filter(pc.is_in(b.column(column), value_set=values, skip_nulls=True))

    def fetch(name: str, side: str, column: str, values: pa.Array) -> pa.Table:
        calls.append(column)
        return matching(column, values)

    def count(name: str, side: str, column: str, values: pa.Array) -> int:
        return matching(column, values).num_rows

    sql = "SELECT * FROM ns.a a, ns.b b WHERE a.k = b.k AND a.v = b.j"
    shape = join_shape(sqlglot.parse_one(sql, dialect="spark"), "ct", COLUMNS)
    terms = term_rows(shape, 0, a, fetch, count=count)
    assert calls == ["j"]
    ids, names = terms.column("a.id").to_pylist(), terms.column("b.name").to_pylist()
    got = sorted(zip(ids, names, strict=True))
    assert got == [(1, "n5"), (2, "n6")]


TWICE = "SELECT * FROM ns.a x JOIN ns.b b ON x.k = b.k JOIN ns.a y ON y.id = b.j WHERE x.v > 0"
TWICE_ORDERED = ["x.id", "x.k", "x.v", "b.k", "b.j", "b.name", "y.id", "y.k", "y.v"]


@pytest.mark.parametrize("case", range(CASES))
def test_a_table_read_twice_is_two_inputs_whose_terms_sum_to_the_change(case: int) -> None:
    """Each read of ``a`` gets its own term (the first read's joins the second as it was,
    the second's joins the first as it is): summed, the change of the self-join."""
    rng = random.Random(1000 + case)

    def b_rows() -> list[tuple[Any, ...]]:  # b.j names ids of a (0..6)
        return [(r[0], rng.choice([0, 1, 2, 3, None]), r[2]) for r in _random(rng, "ns.b", 4)]

    old = {"ns.a": _table("ns.a", _random(rng, "ns.a", rng.randint(0, 6)))}
    old["ns.b"] = _table("ns.b", b_rows())
    new = {**old, "ns.a": _table("ns.a", _random(rng, "ns.a", rng.randint(0, 6)))}
    if rng.random() < 0.5:
        new["ns.b"] = _table("ns.b", b_rows())
    shape = join_shape(sqlglot.parse_one(TWICE, dialect="spark"), "ct", COLUMNS)
    reads = [(i.alias, i.name) for i in shape.inputs]
    assert reads == [("x", "ns.a"), ("b", "ns.b"), ("y", "ns.a")]
    fetch = _fetcher({NEW: new, OLD: old})
    got: Counter[tuple[Any, ...]] = Counter()
    for position, joined in enumerate(shape.inputs):
        plus, minus = net_changes(new[joined.name], old[joined.name])
        for sign, rows in ((1, plus), (-1, minus)):
            terms = term_rows(shape, position, rows, fetch)
            kept = terms.filter(pc.fill_null(pc.greater(terms.column("x.v"), 0), False))
            for row in zip(*(kept.column(c).to_pylist() for c in TWICE_ORDERED), strict=True):
                got[row] += sign
    expected = _twice_oracle(new)
    expected.subtract(_twice_oracle(old))
    assert +got == +expected and -got == -expected, case


def _twice_oracle(tables: dict[str, pa.Table]) -> Counter[tuple[Any, ...]]:
    import duckdb

    con = duckdb.connect()
    con.register("t_a", tables["ns.a"])
    con.register("t_b", tables["ns.b"])
    rows = con.sql(
        "SELECT x.id, x.k, x.v, b.k, b.j, b.name, y.id, y.k, y.v FROM t_a x"
        " JOIN t_b b ON x.k = b.k JOIN t_a y ON y.id = b.j WHERE x.v > 0"
    ).fetchall()
    return Counter(rows)


def test_shapes_left_to_spark() -> None:
    def shape(sql: str) -> Any:
        return join_shape(sqlglot.parse_one(sql, dialect="spark"), "ct", COLUMNS)

    with pytest.raises(NotOnDriver, match="LEFT"):
        shape("SELECT * FROM ns.a a LEFT JOIN ns.b b ON a.k = b.k")
    with pytest.raises(NotOnDriver, match="not placed"):
        shape("SELECT * FROM ns.a a, ns.b b WHERE k = j")  # k is in both
    tied = shape("SELECT * FROM ns.a a, ns.c c WHERE a.v > 0")
    empty = _table("ns.a", [(1, 1, 1)])
    with pytest.raises(NotOnDriver, match="cross join"):
        term_rows(tied, 0, empty, _fetcher({NEW: {}, OLD: {}}))


def test_an_equality_in_every_branch_of_an_or_joins() -> None:
    """TPC-H q19 repeats its join in each OR branch: implied, so it joins; one branch
    without it leaves a cross join (Spark's)."""

    def pairs(sql: str) -> Any:
        return join_shape(sqlglot.parse_one(sql, dialect="spark"), "ct", COLUMNS).equalities

    both = "(a.k = b.k AND a.v > 0) OR (b.k = a.k AND b.j = 10)"
    assert pairs(f"SELECT * FROM ns.a a, ns.b b WHERE {both}") == ((("a", "k"), ("b", "k")),)
    one = "(a.k = b.k AND a.v > 0) OR b.j = 10"
    assert pairs(f"SELECT * FROM ns.a a, ns.b b WHERE {one}") == ()


def test_conjuncts_of_one_table_filter_it_before_the_join() -> None:
    sql = (
        "SELECT * FROM ns.a a JOIN ns.b b ON a.k = b.k AND name = 'x', ns.c"
        " WHERE c.j = b.j AND a.v > 0 AND (v < 5 OR id = 1) AND (a.v > 1 OR b.j = 2) AND w = 3"
    )
    shape = join_shape(sqlglot.parse_one(sql, dialect="spark"), "ct", COLUMNS)
    found = {a: [c.sql() for c in cs] for a, cs in single_table_conjuncts(shape).items()}
    assert found == {"a": ["a.v > 0", "v < 5 OR id = 1"], "c": ["w = 3"], "b": ["name = 'x'"]}


def test_an_or_filters_each_table_by_its_own_part_of_every_branch() -> None:
    """TPC-H q19: every branch has conditions on both tables, so each table is
    filtered by the OR of its own parts; a table one branch says nothing of is not."""
    sql = (
        "SELECT * FROM ns.a a, ns.b b WHERE (a.k = b.k AND a.v > 0 AND b.name = 'x')"
        " OR (a.k = b.k AND (a.v < -1 OR a.id = 2) AND b.j = 10 AND a.id > 0)"
        " OR (a.k = b.k AND a.v IS NULL)"
    )
    shape = join_shape(sqlglot.parse_one(sql, dialect="spark"), "ct", COLUMNS)
    found = {a: [c.sql() for c in cs] for a, cs in single_table_conjuncts(shape).items()}
    assert found == {"a": ["a.v > 0 OR ((a.v < -1 OR a.id = 2) AND a.id > 0) OR a.v IS NULL"]}


CONDITIONS = [
    "(a.k = b.k AND a.v > 0 AND b.name = 'x') OR (a.k = b.k AND a.v IS NULL AND b.j = 10)",
    "a.k = b.k AND ((a.v > 1 AND b.j = 20) OR (a.id < 3 AND (b.name = 'y' OR b.j IS NULL)))",
    "(a.k = b.k OR a.v = 2) AND (b.j = 10 OR (a.v > 0 AND b.name <> 'x'))",
    "NOT (a.v > 0) AND ((a.k = b.k AND b.j = 10) OR (a.k = b.k AND a.id = 1 AND b.j = 20))",
]


@pytest.mark.parametrize("case", range(CASES))
def test_implied_filters_keep_every_row_the_condition_keeps(case: int) -> None:
    """Over random rows with NULLs, a join filtered by the condition keeps the
    same rows when each table is first filtered by its implied conditions
    (DuckDB evaluates both, so NULLs follow SQL's three-valued logic)."""
    import duckdb

    rng = random.Random(1000 + case)
    condition = CONDITIONS[case % len(CONDITIONS)]
    tables = {n: _table(n, _random(rng, n, rng.randint(0, 8))) for n in ("ns.a", "ns.b")}
    shape = join_shape(
        sqlglot.parse_one(f"SELECT * FROM ns.a a, ns.b b WHERE {condition}", dialect="spark"),
        "ct",
        COLUMNS,
    )
    con = duckdb.connect()
    for name, table in tables.items():
        con.register(name.replace("ns.", "t_"), table)
    implied = single_table_conjuncts(shape)
    filtered = {
        alias: " AND ".join(f"({c.sql()})" for c in implied.get(alias, [])) or "TRUE"
        for alias in ("a", "b")
    }
    whole = "SELECT a.*, b.* FROM t_a a, t_b b WHERE "
    expected = Counter(con.sql(whole + condition).fetchall())
    got = Counter(
        con.sql(
            f"SELECT a.*, b.* FROM (SELECT * FROM t_a a WHERE {filtered['a']}) a,"
            f" (SELECT * FROM t_b b WHERE {filtered['b']}) b WHERE {condition}"
        ).fetchall()
    )
    assert got == expected, (case, filtered)


SEMI_COLUMNS = {"ns.o": ["id", "k", "v"], "ns.t": ["k", "j", "name"]}
SEMI_TYPES = {"id": pa.int64(), "k": pa.int32(), "v": pa.int64(), "j": pa.int64()}
SEMI_TYPES["name"] = pa.string()
SEMI_SQL = {
    "exists": "SELECT * FROM ns.o o WHERE EXISTS (SELECT 1 FROM ns.t t WHERE t.k = o.k"
    " AND t.j > 0)",
    "not_exists": "SELECT * FROM ns.o o WHERE NOT EXISTS (SELECT * FROM ns.t WHERE k = o.k"
    " AND name = 'x') AND o.v > 0",
    "in": "SELECT * FROM ns.o o WHERE o.v IN (SELECT j FROM ns.t WHERE name IS NOT NULL)",
}


def _semi_table(name: str, rows: list[tuple[Any, ...]]) -> pa.Table:
    columns = SEMI_COLUMNS[name]
    schema = pa.schema([(c, SEMI_TYPES[c]) for c in columns])
    return pa.Table.from_pylist([dict(zip(columns, r, strict=True)) for r in rows], schema)


def _semi_rows(rng: random.Random, name: str) -> list[tuple[Any, ...]]:
    key = lambda: rng.choice([1, 2, 3, None])  # noqa: E731
    if name == "ns.o":
        rows = [(i, key(), rng.choice([-1, 1, 2, 3, None])) for i in range(rng.randint(0, 7))]
    else:
        make = lambda: (key(), rng.choice([-1, 1, 2, None]), rng.choice(["x", "y", None]))  # noqa: E731
        rows = [make() for _ in range(rng.randint(0, 5))]
    return rows + rng.sample(rows, min(len(rows), 2))


@pytest.mark.parametrize("kind", sorted(SEMI_SQL))
@pytest.mark.parametrize("case", range(CASES))
def test_semi_join_terms_sum_to_the_change_of_the_query(kind: str, case: int) -> None:
    """The outer table's change filtered by the subquery as it was, plus the outer rows
    whose key entered or left it (signs swapped under NOT EXISTS), equal DuckDB's change."""
    from sqlglot import exp

    from airflow_provider_ct.ivm.driver.arrow_eval import node_key, typed_nodes
    from airflow_provider_ct.ivm.driver.semi_join import filtered, flipped, semi_joins
    from airflow_provider_ct.ivm.plan.subqueries import semi_join_query

    rng = random.Random(f"{kind}-{case}")
    old = {n: _semi_table(n, _semi_rows(rng, n)) for n in SEMI_COLUMNS}
    new = {n: _semi_table(n, _semi_rows(rng, n)) if rng.random() < 0.7 else old[n] for n in old}
    tree = sqlglot.parse_one(SEMI_SQL[kind], dialect="spark")
    where = tree.args["where"].this
    conjuncts = list(where.flatten()) if isinstance(where, exp.And) else [where]
    semi_conjuncts = [c for c in conjuncts if semi_join_query(c) is not None]
    shape = join_shape(tree, "ct", SEMI_COLUMNS, exclude=semi_conjuncts)
    (semi,) = semi_joins(where, "ct", shape.inputs, SEMI_COLUMNS)
    types = {
        node_key(n): SEMI_TYPES[n.name] if isinstance(n, exp.Column) else pa.int64()
        for n in typed_nodes(semi.predicate_nodes())
    }
    if semi.predicate is not None and "'x'" in semi.predicate.sql():
        types[node_key(exp.Literal.string("x"))] = pa.string()
    fetch = _fetcher({NEW: new, OLD: old})
    outer_types = {
        node_key(n): SEMI_TYPES[n.name] if isinstance(n, exp.Column) else pa.int64()
        for n in typed_nodes([shape.condition] if shape.condition else [])
    }
    got: Counter[tuple[Any, ...]] = Counter()

    def add(sign: int, rows: pa.Table) -> None:
        if shape.condition is not None and rows.num_rows:
            rows = rows.filter(ArrowEvaluator.joined(rows, outer_types).mask(shape.condition))
        for row in zip(*(rows.column(f"o.{c}").to_pylist() for c in ("id", "k", "v")), strict=True):
            got[row] += sign

    plus, minus = net_changes(new["ns.o"], old["ns.o"])
    for sign, rows in ((1, plus), (-1, minus)):
        add(sign, filtered(term_rows(shape, 0, rows, fetch), semi, fetch, OLD, types))
    change = net_changes(new["ns.t"], old["ns.t"])
    entering, leaving = flipped(semi, change, fetch, types, (OLD, NEW))
    column = semi.outer.split(".", 1)[1]
    for sign, keys in ((1, entering), (-1, leaving)):
        if len(keys):
            rows = fetch("ns.o", NEW, column, keys)
            add(-sign if semi.anti else sign, term_rows(shape, 0, rows, fetch, all_new=True))
    expected = _semi_oracle(new, SEMI_SQL[kind])
    expected.subtract(_semi_oracle(old, SEMI_SQL[kind]))
    assert +got == +expected and -got == -expected, (kind, case)


def _semi_oracle(tables: dict[str, pa.Table], sql: str) -> Counter[tuple[Any, ...]]:
    import duckdb

    con = duckdb.connect()
    con.register("t_o", tables["ns.o"])
    con.register("t_t", tables["ns.t"])
    duck = sql.replace("SELECT *", "SELECT o.id, o.k, o.v", 1).replace("ns.o", "t_o")
    return Counter(con.sql(duck.replace("ns.t", "t_t")).fetchall())


def test_a_crossed_table_is_read_whole_only_while_the_product_fits(
    sqlite_catalog_config: Any,
) -> None:
    """The write job's whole reads (``in_place_join._whole_reads``) over a real table: its
    rows by its snapshot's summary times the rows it would pair with, against the limit."""
    from airflow_provider_ct.core.tables import create_managed_table
    from airflow_provider_ct.ivm.driver.keyed_rows import SideReaders
    from airflow_provider_ct.spark.ivm.in_place_join import _whole_reads
    from tests.helpers import replace_contents

    catalog = sqlite_catalog_config.load()
    table = create_managed_table(catalog, "ns.c", _table("ns.c", []).schema)
    replace_contents(table, 1_000, _table("ns.c", [(j, j % 3) for j in range(10)]))
    table = catalog.load_table("ns.c")
    snapshot = table.current_snapshot().snapshot_id
    snapshots = {NEW: {"ns.c": snapshot}, OLD: {"ns.c": None}}
    reader = SideReaders({"ns.c": table}, snapshots, {"ns.c": ["j", "w"]})
    whole = _whole_reads(reader, {"ns.c": table}, snapshots, limit=100)
    assert sorted(whole("ns.c", NEW, 10).column("w").to_pylist()) == sorted(
        j % 3 for j in range(10)
    )
    assert whole("ns.c", OLD, 1_000).num_rows == 0  # no rows then: nothing to pair
    with pytest.raises(NotOnDriver, match="a cross join of 11 rows with ns.c, of 10"):
        whole("ns.c", NEW, 11)
