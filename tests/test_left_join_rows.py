"""The driver's left-join terms sum to the change of the join, as DuckDB computes it.

Random old and new contents of both tables (NULL keys, duplicates, rows
without partners, filters in ``ON`` on either side, two key pairs), the
terms' signed rows against ``P_new ⟕ O_new`` minus ``P_old ⟕ O_old``.
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

from airflow_provider_ct.ivm.driver.arrow_eval import ArrowEvaluator, node_key, typed_nodes
from airflow_provider_ct.ivm.driver.driver_join import NEW, OLD
from airflow_provider_ct.ivm.driver.left_join_rows import left_shape, left_terms
from airflow_provider_ct.ivm.plan.left_join import LeftJoin

CASES = int(os.environ.get("CT_LEFT_JOIN_CASES", "40"))
PRES = pa.schema([("id", pa.int64()), ("k", pa.int64()), ("j", pa.int64()), ("s", pa.string())])
OPT = pa.schema([("ok", pa.int64()), ("oj", pa.int64()), ("c", pa.string()), ("w", pa.int64())])
ON = "p.k = o.ok AND o.oj = p.j AND o.c NOT LIKE '%x%' AND (p.s IS NULL OR o.w > 1)"
SQL = f"SELECT * FROM ns.p p LEFT JOIN ns.o o ON {ON}"
COLUMNS = ["p.id", "p.k", "p.j", "p.s", "o.ok", "o.oj", "o.c", "o.w"]


def _rows(rng: random.Random, schema: pa.Schema, n: int) -> pa.Table:
    key = lambda: rng.choice([1, 2, 3, None])  # noqa: E731
    if schema is PRES:
        make = lambda i: (i, key(), rng.choice([1, 2]), rng.choice(["a", None]))  # noqa: E731
    else:
        make = lambda i: (key(), rng.choice([1, 2, None]), rng.choice(["y", "xx", None]), i % 3)  # noqa: E731
    rows = [make(i) for i in range(n)]
    rows += rng.sample(rows, min(len(rows), 2))  # duplicates
    return pa.Table.from_pylist([dict(zip(schema.names, r, strict=True)) for r in rows], schema)


def _changed(rng: random.Random, old: pa.Table, schema: pa.Schema) -> pa.Table:
    kept = old.filter(pa.array([rng.random() > 0.3 for _ in range(old.num_rows)], pa.bool_()))
    return pa.concat_tables([kept, _rows(rng, schema, rng.randint(0, 3))])


def _net(new: pa.Table, old: pa.Table) -> tuple[pa.Table, pa.Table]:
    """(inserted, deleted) rows: the multiset difference each way."""
    a = Counter(zip(*(new.column(c).to_pylist() for c in new.column_names), strict=True))
    b = Counter(zip(*(old.column(c).to_pylist() for c in old.column_names), strict=True))
    out = []
    for rows in (a - b, b - a):
        listed = [dict(zip(new.column_names, r, strict=True)) for r in rows.elements()]
        out.append(pa.Table.from_pylist(listed, new.schema))
    return out[0], out[1]


def _oracle(p: pa.Table, o: pa.Table) -> Counter[tuple[Any, ...]]:
    import duckdb

    con = duckdb.connect()
    con.register("p_rows", p)
    con.register("o_rows", o)
    duck = SQL.replace("ns.p p", "p_rows p").replace("ns.o o", "o_rows o")
    return Counter(con.execute(duck.replace("SELECT *", f"SELECT {', '.join(COLUMNS)}")).fetchall())


def _types() -> dict[str, pa.DataType]:
    on = sqlglot.parse_one(SQL, dialect="spark").args["joins"][0].args["on"]
    kinds = {f.name: f.type for f in [*PRES, *OPT]}
    out = {}
    for node in typed_nodes([on]):
        if isinstance(node, sqlglot.exp.Column):
            out[node_key(node)] = kinds[node.name]
        else:
            out[node_key(node)] = pa.string() if node.is_string else pa.int32()
    return out


@pytest.mark.parametrize("case", range(CASES))
def test_left_join_terms_sum_to_the_change_of_the_join(case: int) -> None:
    rng = random.Random(case)
    old = {"ns.p": _rows(rng, PRES, rng.randint(0, 6)), "ns.o": _rows(rng, OPT, rng.randint(0, 6))}
    new = dict(old)
    for name in rng.choice([["ns.p"], ["ns.o"], ["ns.p", "ns.o"]]):
        new[name] = _changed(rng, old[name], PRES if name == "ns.p" else OPT)
    tree = sqlglot.parse_one(SQL, dialect="spark")
    join = LeftJoin("ns.p", "ns.o", ("k", "j"), ("ok", "oj"))
    shape = left_shape(tree, "ct", {"ns.p": PRES.names, "ns.o": OPT.names}, join)
    sides = {NEW: new, OLD: old}

    def fetch(name: str, side: str, column: str, values: pa.Array) -> pa.Table:
        table = sides[side][name]
        return table.filter(pc.is_in(table.column(column), value_set=values, skip_nulls=True))

    types = _types()

    def on(rows: pa.Table) -> pa.Array:
        return ArrowEvaluator.joined(rows, types).mask(shape.on)

    changes = {n: _net(new[n], old[n]) for n in new if new[n] is not old[n]}
    got: Counter[tuple[Any, ...]] = Counter()
    for sign, rows in left_terms(shape, changes, fetch, on):
        for row in zip(*(rows.column(c).to_pylist() for c in COLUMNS), strict=True):
            got[row] += sign
    expected = _oracle(new["ns.p"], new["ns.o"])
    expected.subtract(_oracle(old["ns.p"], old["ns.o"]))
    assert +got == +expected and -got == -expected, case
