"""The generated views' inputs: real Iceberg tables, the test's own model of them, the oracle.

Every change is made twice, once to the table the way other writers make
it (Spark ``INSERT``/``DELETE``/``UPDATE`` on merge-on-read and
copy-on-write tables, PyIceberg appends) and once to the test's model (a
list of rows per input, predicates evaluated with SQL's NULL rules in
Python). After each step's changes the test checks PyIceberg reads exactly
the model, then declares those contents the input's at the step's time
(``stamp``) and seals it. The oracle is DuckDB over the model: never over
what the product pinned or recorded.
"""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Callable
from decimal import Decimal
from typing import Any

import duckdb

from airflow_provider_ct.core.catalog import CatalogConfig
from airflow_provider_ct.core.tables import create_managed_table
from tests.helpers import advance, rows_of, stamp
from tests.sqlgen.schema import (
    DIM1,
    DIM2,
    FACT,
    TABLES,
    Row,
    Table,
    arrow_rows,
    fact_key,
    new_row,
    spark_literal,
)

Pred = Callable[[Row], bool]
Change = Callable[[Row], Row]


def _eq(position: int, value: Any) -> Pred:
    return lambda r: r[position] is not None and r[position] == value


def _lt(position: int, value: Any) -> Pred:
    return lambda r: r[position] is not None and r[position] < value


def _null(position: int) -> Pred:
    return lambda r: r[position] is None


def _set(position: int, value: Any) -> Change:
    return lambda r: (*r[:position], value, *r[position + 1 :])


def _add(position: int, delta: Any) -> Change:
    return lambda r: (
        *r[:position],
        None if r[position] is None else r[position] + delta,
        *r[position + 1 :],
    )


def predicates(table: Table, rng: random.Random) -> list[tuple[str, Pred]]:
    """``WHERE`` texts of a delete or update, each with the same test in Python."""
    c = rng.randint(0, 6)
    if table is FACT:
        return [
            (f"k1 = {c}", _eq(1, c)),
            ("k1 IS NULL", _null(1)),
            (f"id % 3 = {c % 3}", lambda r: r[0] % 3 == c % 3),
            (f"qty < {c}", _lt(3, c)),
            ("s = 'a'", _eq(5, "a")),
        ]
    if table is DIM1:
        return [(f"k1 = {c}", _eq(0, c)), (f"w < {c}", _lt(3, c)), ("region IS NULL", _null(2))]
    return [(f"k2 = {c}", _eq(0, c)), (f"p < {c}", _lt(2, c)), ("cat IS NULL", _null(1))]


def assignments(table: Table, rng: random.Random) -> list[tuple[str, Change]]:
    """``SET`` texts of an update, each with the same change in Python."""
    if table is FACT:
        k, d = fact_key(rng), rng.randint(-3, 5)
        return [
            (f"qty = qty + {d}", _add(3, d)),
            (f"k1 = {spark_literal(k, 'INT')}", _set(1, k)),
            ("s = 'b'", _set(5, "b")),
            ("amt = amt + 1.00", _add(4, Decimal("1.00"))),
        ]
    if table is DIM1:
        k = rng.choice((1, 2, 3, 8, None))
        return [
            ("w = w + 1", _add(3, 1)),
            ("region = 'west'", _set(2, "west")),
            (f"k1 = {spark_literal(k, 'INT')}", _set(0, k)),
        ]
    k = rng.choice((1, 2, 5, None))
    return [
        ("p = p + 2", _add(2, 2)),
        ("cat = 'x'", _set(1, "x")),
        (f"k2 = {spark_literal(k, 'INT')}", _set(0, k)),
    ]


class Inputs:
    """The three inputs of one namespace, and the test's model of each."""

    def __init__(self, spark: Any, config: CatalogConfig, namespace: str, seed: int) -> None:
        self.spark, self.config, self.ns = spark, config, namespace
        self.catalog = config.load()
        self.rng = random.Random(f"inputs:{seed}:{namespace}")
        for table in TABLES:
            create_managed_table(
                self.catalog,
                self.name(table),
                table.arrow_schema,
                properties=dict(table.properties),
            )
        self.model: dict[str, list[Row]] = {t.name: [] for t in TABLES}
        self.next_id = 1
        self.mutations: Counter[str] = Counter()

    def name(self, table: Table) -> str:
        return f"{self.ns}.{table.name}"

    def names(self) -> dict[str, str]:
        """The generator's placeholders -> the inputs' names (``namespace.table``)."""
        return {t.name: self.name(t) for t in TABLES}

    def rows(self, table: Table, count: int) -> list[Row]:
        out: list[Row] = []
        for _ in range(count):
            self.next_id += 1
            row = new_row(self.rng, table, self.next_id)
            out += [row, row] if self.rng.random() < 0.2 else [row]  # exact duplicates
        return out

    # -- changes, each to the table and to the model ----------------------------------------
    def sql(self, text: str) -> None:
        self.spark.sql(text).collect()

    def insert_spark(self, table: Table) -> None:
        rows = self.rows(table, self.rng.randint(1, 5))
        values = ", ".join(
            "("
            + ", ".join(spark_literal(v, t) for v, (_, t) in zip(r, table.columns, strict=True))
            + ")"
            for r in rows
        )
        self.sql(f"INSERT INTO {self.config.name}.{self.name(table)} VALUES {values}")
        self.model[table.name] += rows

    def insert_pyiceberg(self, table: Table) -> None:
        rows = self.rows(table, self.rng.randint(1, 6))
        self.catalog.load_table(self.name(table)).append(arrow_rows(table, rows))
        self.model[table.name] += rows

    def delete(self, table: Table) -> None:
        text, pred = self.rng.choice(predicates(table, self.rng))
        self.sql(f"DELETE FROM {self.config.name}.{self.name(table)} WHERE {text}")
        self.model[table.name] = [r for r in self.model[table.name] if not pred(r)]

    def update(self, table: Table) -> None:
        text, pred = self.rng.choice(predicates(table, self.rng))
        assign, change = self.rng.choice(assignments(table, self.rng))
        self.sql(f"UPDATE {self.config.name}.{self.name(table)} SET {assign} WHERE {text}")
        self.model[table.name] = [change(r) if pred(r) else r for r in self.model[table.name]]

    def empty(self, table: Table) -> None:
        """Every row deleted: scalar aggregates over nothing, outer joins with no partner."""
        self.sql(f"DELETE FROM {self.config.name}.{self.name(table)} WHERE true")
        self.model[table.name] = []

    OPS = ("insert_spark", "insert_pyiceberg", "delete", "update", "empty")

    def first_rows(self) -> None:
        """The inputs' first contents (the view's first tick creates it over these)."""
        for table, count in ((FACT, 18), (DIM1, 7), (DIM2, 5)):
            self.catalog.load_table(self.name(table)).append(
                arrow_rows(table, rows := self.rows(table, count))
            )
            self.model[table.name] += rows

    def change(self) -> set[str]:
        """A step's random changes (the fact always, each dimension often); the changed names."""
        changed = set()
        for table in TABLES:
            if table is not FACT and self.rng.random() < 0.4:
                continue
            weights = (3, 2, 2, 3, 0.15 if table is not FACT else 0.03)
            for op in self.rng.choices(self.OPS, weights, k=self.rng.randint(1, 3)):
                getattr(self, op)(table)
                self.mutations[f"{op}({table.name})"] += 1
            changed.add(table.name)
        return changed

    def declare(self, time: int, changed: set[str]) -> None:
        """Check each changed input holds its model, stamp those contents just before
        ``time`` (Spark and PyIceberg commits carry no ``ct.time``), then seal ``time``."""
        for table in TABLES:
            iceberg = self.catalog.load_table(self.name(table))
            if table.name in changed:
                got, want = rows_of(iceberg), Counter(self.model[table.name])
                assert got == want, f"{self.ns}.{table.name}: the input differs from the model"
                stamp(iceberg, time - 500)
            advance(self.catalog.load_table(self.name(table)), time)

    # -- the oracle -------------------------------------------------------------------------
    def duckdb(self) -> duckdb.DuckDBPyConnection:
        """DuckDB holding the model's rows under the inputs' own names."""
        con = duckdb.connect()
        con.execute(f"CREATE SCHEMA {self.ns}")
        for table in TABLES:
            con.register("model_rows", arrow_rows(table, self.model[table.name]))
            con.execute(f"CREATE TABLE {self.name(table)} AS SELECT * FROM model_rows")
            con.unregister("model_rows")
        return con


def normalized(rows: Counter[Row] | list[Row]) -> Counter[Row]:
    """Rows as both engines' types compare: whole numbers as ints, the rest rounded floats."""
    out: Counter[Row] = Counter()
    counted = rows if isinstance(rows, Counter) else Counter(rows)
    for row, n in counted.items():
        out[tuple(_number(v) for v in row)] += n
    return out


def _number(value: Any) -> Any:
    if isinstance(value, Decimal | float) and not isinstance(value, bool):
        if value == int(value):
            return int(value)
        return round(float(value), 6)
    return value
