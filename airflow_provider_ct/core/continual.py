"""Continual task definitions: Materialize's syntax, parsed and checked without a JVM.

::

    CREATE CONTINUAL TASK upsert (key INT, val INT) ON INPUT append_only AS (
        DELETE FROM upsert WHERE key IN (SELECT key FROM append_only);
        INSERT INTO upsert SELECT key, max(val) FROM append_only GROUP BY key;
    )

Per input time ``t`` the statements run in order against:

* the **input** name: only the rows inserted into the input at ``t``;
* the **output** name: the output as of ``t - 1`` plus the changes of the
  statements before (one iteration);
* any other table (a **reference**): its contents as of ``t``;
* ``mz_now()`` / ``ct_time()``: the literal ``t`` (epoch ms), e.g. for a
  retention window.

Unqualified table names resolve in ``default_namespace``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import sqlglot
from sqlglot import exp
from sqlglot.errors import ParseError

from airflow_provider_ct.core.keys import TableKeys
from airflow_provider_ct.core.query import normalize_table_name
from airflow_provider_ct.core.timeline import Timeline
from airflow_provider_ct.exceptions import QueryError

if TYPE_CHECKING:
    from airflow_provider_ct.core.description import BatchDescription

_HEADER = re.compile(
    r"""^\s*CREATE\s+CONTINUAL\s+TASK\s+(?P<name>[\w.`"]+)\s*
        \((?P<columns>.*?)\)\s*
        ON\s+INPUT\s+(?P<input>[\w.`"]+)\s*
        (?:WITH\s*\((?P<options>[^)]*)\)\s*)?
        AS\s*\((?P<body>.*)\)\s*;?\s*$""",
    re.IGNORECASE | re.DOTALL | re.VERBOSE,
)
NOW_FUNCTIONS = ("mz_now", "ct_time")
#: ``kind`` of a continual task's :func:`~airflow_provider_ct.core.query.query_hash`.
CONTINUAL_TASK_KIND = "continual-task"
#: The Iceberg operation that rewrites files without changing rows (compaction).
REPLACE = "replace"


@dataclass(frozen=True)
class Statement:
    kind: str  # "delete" or "insert"
    #: The parsed statement (sqlglot, Spark dialect), table names qualified.
    expression: Any
    #: For INSERT with a column list: the target columns, in order.
    columns: tuple[str, ...] = ()


@dataclass(frozen=True)
class ContinualTaskDef:
    name: str  # the output, namespace.table
    columns: tuple[tuple[str, str], ...]  # (name, Spark type)
    input: str
    statements: tuple[Statement, ...]
    snapshot: bool = False
    references: tuple[str, ...] = ()
    sql: str = field(default="", repr=False)

    @property
    def column_names(self) -> list[str]:
        return [c for c, _ in self.columns]

    def spark_schema_ddl(self) -> str:
        return ", ".join(f"`{c}` {t}" for c, t in self.columns)


def _qualify(name: str, namespace: str | None, catalog_name: str) -> str:
    clean = name.replace("`", "").replace('"', "")
    if "." not in clean:
        if not namespace:
            raise QueryError(
                f"table {clean!r} is not qualified: write it as namespace.{clean}, or pass "
                "namespace= for the definition's unqualified names"
            )
        clean = f"{namespace}.{clean}"
    return normalize_table_name(clean, catalog_name)


def _split_top_level(text: str, sep: str) -> list[str]:
    parts, depth, current = [], 0, []
    quote: str | None = None
    for ch in text:
        if quote:
            current.append(ch)
            if ch == quote:
                quote = None
            continue
        if ch in "'\"`":
            quote = ch
        elif ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        if ch == sep and depth == 0:
            parts.append("".join(current))
            current = []
        else:
            current.append(ch)
    parts.append("".join(current))
    return [p.strip() for p in parts if p.strip()]


def _parse_columns(text: str) -> tuple[tuple[str, str], ...]:
    columns = []
    for item in _split_top_level(text, ","):
        bits = item.split(None, 1)
        if len(bits) != 2:
            raise QueryError(f"column definition {item!r} needs a name and a type")
        name, type_text = bits[0].strip('`"').lower(), bits[1].strip()
        try:
            data_type = exp.DataType.build(type_text, dialect="postgres")
        except (ParseError, ValueError) as exc:
            raise QueryError(f"column {name}: unknown type {type_text!r}: {exc}") from None
        columns.append((name, data_type.sql(dialect="spark")))
    if not columns:
        raise QueryError("a continual task needs at least one output column")
    names = [c for c, _ in columns]
    if len(set(names)) != len(names):
        raise QueryError(f"duplicate output column names: {names}")
    return tuple(columns)


def _options(text: str | None) -> bool:
    snapshot = False
    for item in _split_top_level(text or "", ","):
        key, _, value = item.partition("=")
        if key.strip().upper() != "SNAPSHOT":
            raise QueryError(f"unknown continual task option {key.strip()!r} (only SNAPSHOT)")
        if value.strip().lower() not in ("true", "false"):
            raise QueryError(f"SNAPSHOT must be true or false, got {value.strip()!r}")
        snapshot = value.strip().lower() == "true"
    return snapshot


def _tables_in(tree: Any) -> list[exp.Table]:
    ctes = {cte.alias_or_name.lower() for cte in tree.find_all(exp.CTE)}
    return [
        t for t in tree.find_all(exp.Table) if t.name and not (not t.db and t.name.lower() in ctes)
    ]


def parse_continual_task(
    sql: str, *, default_namespace: str | None = None, catalog_name: str = "ct"
) -> ContinualTaskDef:
    """Parse a ``CREATE CONTINUAL TASK``; errors name the offending part.

    ``default_namespace`` qualifies unqualified table names; without it every
    name must be qualified (the error names the first one that is not).
    """
    match = _HEADER.match(sql or "")
    if match is None:
        raise QueryError(
            "expected CREATE CONTINUAL TASK name (col type, ...) ON INPUT input "
            "[WITH (SNAPSHOT = true)] AS ( statement; ... )"
        )
    output = _qualify(match["name"], default_namespace, catalog_name)
    source = _qualify(match["input"], default_namespace, catalog_name)
    if output == source:
        raise QueryError(f"the task's output {output} cannot also be its input")
    columns = _parse_columns(match["columns"])
    snapshot = _options(match["options"])
    try:
        parsed = [s for s in sqlglot.parse(match["body"], read="spark") if s is not None]
    except ParseError as exc:
        raise QueryError(f"the task's statements do not parse: {exc}") from None
    if not parsed:
        raise QueryError("the task has no statements")
    statements: list[Statement] = []
    references: list[str] = []
    for index, tree in enumerate(parsed, start=1):
        for table in _tables_in(tree):
            qualified = _qualify(
                ".".join(p for p in (table.catalog, table.db, table.name) if p),
                default_namespace,
                catalog_name,
            )
            ns, name = qualified.split(".")
            table.set("catalog", None)
            table.set("db", exp.to_identifier(ns))
            table.set("this", exp.to_identifier(name))
            if qualified not in (output, source) and qualified not in references:
                references.append(qualified)
        statements.append(_statement(tree, index, output, columns))
    return ContinualTaskDef(
        name=output,
        columns=columns,
        input=source,
        statements=tuple(statements),
        snapshot=snapshot,
        references=tuple(sorted(references)),
        sql=sql,
    )


def _statement(tree: Any, index: int, output: str, columns: Any) -> Statement:
    text = tree.sql(dialect="spark")[:100]
    if isinstance(tree, exp.Delete):
        target = tree.this
        if isinstance(target, exp.Table) and f"{target.db}.{target.name}".lower() == output:
            return Statement("delete", tree)
    elif isinstance(tree, exp.Insert):
        target = tree.this
        cols: tuple[str, ...] = ()
        if isinstance(target, exp.Schema):
            cols = tuple(c.name.lower() for c in target.expressions)
            target = target.this
        if isinstance(target, exp.Table) and f"{target.db}.{target.name}".lower() == output:
            query = tree.expression
            if not isinstance(query, exp.Query):
                raise QueryError(f"statement {index} must INSERT INTO {output} SELECT ...: {text}")
            names = [c for c, _ in columns]
            unknown = [c for c in cols if c not in names]
            if unknown:
                raise QueryError(f"statement {index} inserts unknown columns {unknown}: {text}")
            width = len(cols) if cols else len(names)
            projected = query.selects if isinstance(query, exp.Select) else []
            stars = any(isinstance(p, exp.Star) or p.find(exp.Star) for p in projected)
            if projected and not stars and len(projected) != width:
                raise QueryError(
                    f"statement {index} produces {len(projected)} columns but the task "
                    f"declares {width} ({', '.join(cols or names)}): {text}"
                )
            return Statement("insert", tree, cols)
    raise QueryError(
        f"statement {index} must be DELETE FROM {output} ... or INSERT INTO {output} "
        f"SELECT ...; got: {text}"
    )


def input_times(timeline: Timeline, lower: int, upper: int, as_of: int) -> list[int]:
    """Times at which the input changed, within ``[lower, upper)`` and after the as-of.

    A time whose only snapshots are Iceberg ``replace`` (compaction, a
    rewrite of files with the same rows) is not a change of the input: the
    statements do not run for it. This is also what lets a quiet tick
    (``core/quiet.py``) skip Spark for an input that was only compacted.
    """
    return sorted(
        {
            e.time
            for e in timeline.entries
            if e.time is not None
            and lower <= e.time < upper
            and e.time > as_of
            and e.operation != REPLACE
        }
    )


def as_of_of(properties: Mapping[str, str], default: int) -> int:
    """The task's as-of (its first tick's time) from the output's properties, else ``default``.

    The job records it when it creates the output; an output without it is
    on its first tick, whose time is the as-of.
    """
    value = properties.get(TableKeys.AS_OF)
    if value is None or not value.isascii() or not value.isdigit():
        return default
    return int(value)


def batch_times(
    input_timeline: Timeline, description: BatchDescription, *, as_of: int, snapshot: bool
) -> list[int]:
    """The times one batch of a continual task processes, in order: the one rule.

    The job runs the statements at each of them, the append refuses a
    manifest that stages any other time, and the quiet check calls a batch
    with none quiet. They are the input's change times in the description's
    ``[lower, upper)`` after the as-of, preceded by the as-of itself for a
    ``SNAPSHOT = true`` task whose batch covers it (the input's whole
    contents then count as inserted at the as-of). Whether the batch covers
    the as-of is all that matters, not whether the output existed before the
    job: a retried first batch (the output created, the append not done)
    must process the snapshot again.

    None of these is the description's ``time`` unless the input happens to
    have changed exactly then: input times lie anywhere below the tick.
    """
    lower, upper = window(description)
    times = input_times(input_timeline, lower, upper, as_of)
    if snapshot and lower <= as_of < upper:
        return [as_of, *times]  # input times are all after the as-of
    return times


def window(description: BatchDescription) -> tuple[int, int]:
    """A description's ``[lower, upper)`` as epoch-ms integers."""
    return int(description.lower.time or 0), int(description.upper.time or 0)
