"""The generated queries' inputs: a fact table and two dimensions, and their random rows.

Small on purpose, and hostile where SQL is subtle: every column but the
fact's ``id`` holds NULLs; rows are duplicated (the same ``id`` included);
the fact's keys are skewed (``k1 = 1`` holds about a third of the rows);
keys exist on one side only (fact keys 7 and 0 match no dimension row,
dimension keys 8 and 9 no fact row: empty groups and unmatched outer
rows); a dimension key appears twice (joins multiply rows). The value
ranges are narrow so that equality predicates, joins and ``IN`` lists hit.

Types are the ones both engines compute the same way: ``BIGINT``,
``DECIMAL(9,2)``, ``STRING``, ``DATE``. No ``DOUBLE`` column: a generated
query meets a double only as ``AVG`` of integers, which it only outputs.
"""

from __future__ import annotations

import datetime
import random
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

import pyarrow as pa

#: The column types a generated expression may have (``DBL``: ``AVG``, output only).
INT, DEC, STR, DATE, DBL = "INT", "DEC", "STR", "DATE", "DBL"

SPARK_TYPES = {INT: "BIGINT", DEC: "DECIMAL(9,2)", STR: "STRING", DATE: "DATE"}
ARROW_TYPES = {INT: pa.int64(), DEC: pa.decimal128(9, 2), STR: pa.string(), DATE: pa.date32()}

Row = tuple[Any, ...]


@dataclass(frozen=True)
class Table:
    """One input: its short name (the query's ``{name}`` placeholder) and typed columns."""

    name: str
    columns: tuple[tuple[str, str], ...]
    #: Iceberg table properties (one dimension copy-on-write, the rest merge-on-read).
    properties: tuple[tuple[str, str], ...] = ()

    @property
    def arrow_schema(self) -> pa.Schema:
        return pa.schema([(n, ARROW_TYPES[t]) for n, t in self.columns])

    def ints(self) -> list[str]:
        return [n for n, t in self.columns if t == INT]


FACT = Table(
    "f",
    (("id", INT), ("k1", INT), ("k2", INT), ("qty", INT), ("amt", DEC), ("s", STR), ("d", DATE)),
)
DIM1 = Table(
    "d1",
    (("k1", INT), ("name", STR), ("region", STR), ("w", INT)),
    (
        ("write.delete.mode", "copy-on-write"),
        ("write.update.mode", "copy-on-write"),
        ("write.merge.mode", "copy-on-write"),
    ),
)
DIM2 = Table("d2", (("k2", INT), ("cat", STR), ("p", INT)))
TABLES = (FACT, DIM1, DIM2)
BY_NAME = {t.name: t for t in TABLES}

DAYS = tuple(datetime.date(2024, 3, d) for d in (1, 2, 5))
STRINGS = ("a", "b", "ab", "c")


def _maybe(rng: random.Random, share: float, value: Any) -> Any:
    return None if rng.random() < share else value


def fact_key(rng: random.Random) -> int | None:
    """Skewed: 1 for a third of the rows; 7 and 0 match no dimension row."""
    if rng.random() < 0.1:
        return None
    return 1 if rng.random() < 0.35 else rng.choice((2, 3, 4, 5, 6, 7, 0))


def new_row(rng: random.Random, table: Table, next_id: int) -> Row:
    """One random row of ``table`` (``next_id``: the fact's id)."""
    if table is FACT:
        amt = Decimal(rng.randint(-500, 9999)) / 100
        return (
            next_id,
            fact_key(rng),
            _maybe(rng, 0.1, rng.randint(1, 5)),
            _maybe(rng, 0.15, rng.randint(-5, 20)),
            _maybe(rng, 0.15, amt.quantize(Decimal("0.01"))),
            _maybe(rng, 0.15, rng.choice(STRINGS)),
            _maybe(rng, 0.1, rng.choice(DAYS)),
        )
    if table is DIM1:
        return (
            _maybe(rng, 0.08, rng.choice((1, 2, 2, 3, 4, 5, 6, 8, 9))),
            _maybe(rng, 0.1, f"n{rng.randint(1, 4)}"),
            _maybe(rng, 0.2, rng.choice(("east", "west"))),
            _maybe(rng, 0.15, rng.randint(0, 9)),
        )
    return (
        _maybe(rng, 0.08, rng.randint(1, 6)),
        _maybe(rng, 0.2, rng.choice(("x", "y"))),
        _maybe(rng, 0.15, rng.randint(0, 9)),
    )


def spark_literal(value: Any, kind: str) -> str:
    """``value`` as a Spark SQL literal of the column type ``kind`` (NULL typed too)."""
    sql_type = SPARK_TYPES[kind]
    if value is None:
        return f"CAST(NULL AS {sql_type})"
    if kind == STR:
        return f"'{value}'"
    if kind == DATE:
        return f"DATE '{value.isoformat()}'"
    return f"CAST('{value}' AS {sql_type})" if kind == DEC else f"CAST({value} AS BIGINT)"


def arrow_rows(table: Table, rows: list[Row]) -> pa.Table:
    names = [n for n, _ in table.columns]
    return pa.Table.from_pylist(
        [dict(zip(names, r, strict=True)) for r in rows], table.arrow_schema
    )
