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
* ``mz_now()`` / ``ct_time()``: ``t``, as a timestamp where it meets one and
  in epoch ms otherwise (:mod:`~airflow_provider_ct.core.continual_now`),
  e.g. for a retention window.

Unqualified table names resolve in ``default_namespace``. As in Materialize,
the column list may be left out when no statement reads the output (the job
infers it), and ``SNAPSHOT`` defaults to true (docs/continual-tasks.md).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

import sqlglot
from sqlglot import exp
from sqlglot.errors import ParseError

from airflow_provider_ct.core.continual_statements import (
    Statement,
    check_inferred,
    check_widths,
    classify,
)
from airflow_provider_ct.core.keys import TableKeys
from airflow_provider_ct.core.query import normalize_table_name
from airflow_provider_ct.core.timeline import Timeline
from airflow_provider_ct.exceptions import QueryError

if TYPE_CHECKING:
    from airflow_provider_ct.core.description import BatchDescription

_NAME = r"[\w.`\"]+"
_OPTIONS = r"(?:WITH\s*\((?P<options>[^)]*)\)\s*)?"
_HEADER = re.compile(
    rf"""^\s*CREATE\s+CONTINUAL\s+TASK\s+(?P<name>{_NAME})\s*
        (?:\((?P<columns>.*?)\)\s*)?
        ON\s+INPUT\s+(?P<input>{_NAME})\s*
        {_OPTIONS}
        AS\s*\((?P<body>.*)\)\s*;?\s*$""",
    re.IGNORECASE | re.DOTALL | re.VERBOSE,
)
#: Materialize's sugar: ``FROM TRANSFORM input USING (query)``, an INSERT of the query.
_TRANSFORM = re.compile(
    rf"""^\s*CREATE\s+CONTINUAL\s+TASK\s+(?P<name>{_NAME})\s*
        FROM\s+TRANSFORM\s+(?P<input>{_NAME})\s*
        USING\s*\((?P<query>.*?)\)\s*
        {_OPTIONS};?\s*$""",
    re.IGNORECASE | re.DOTALL | re.VERBOSE,
)
#: ``FROM RETAIN input WHILE (predicate)``: the input's rows while the predicate holds.
_RETAIN = re.compile(
    rf"""^\s*CREATE\s+CONTINUAL\s+TASK\s+(?P<name>{_NAME})\s*
        FROM\s+RETAIN\s+(?P<input>{_NAME})\s*
        WHILE\s*\((?P<predicate>.*?)\)\s*
        {_OPTIONS};?\s*$""",
    re.IGNORECASE | re.DOTALL | re.VERBOSE,
)
_SYNTAX = (
    "expected CREATE CONTINUAL TASK name [(col type, ...)] ON INPUT input "
    "[WITH (SNAPSHOT = false)] AS ( statement; ... ), or CREATE CONTINUAL TASK name "
    "FROM TRANSFORM input USING ( query ) / FROM RETAIN input WHILE ( predicate )"
)
#: ``kind`` of a continual task's :func:`~airflow_provider_ct.core.query.query_hash`.
CONTINUAL_TASK_KIND = "continual-task"
#: The Iceberg operation that rewrites files without changing rows (compaction).
REPLACE = "replace"


@dataclass(frozen=True)
class ContinualTaskDef:
    name: str  # the output, namespace.table
    #: (name, Spark type); empty when the definition has no column list: the
    #: job then takes them from the INSERTs' SELECTs (:meth:`with_columns`).
    columns: tuple[tuple[str, str], ...]
    input: str
    statements: tuple[Statement, ...]
    #: Materialize's default: the input's contents at the as-of are processed.
    snapshot: bool = True
    references: tuple[str, ...] = ()
    sql: str = field(default="", repr=False)

    @property
    def column_names(self) -> list[str]:
        return [c for c, _ in self.columns]

    @property
    def declared(self) -> bool:
        """Whether the definition lists the output's columns (else they are inferred)."""
        return bool(self.columns)

    def with_columns(self, columns: tuple[tuple[str, str], ...]) -> ContinualTaskDef:
        """This task with its (inferred) columns filled in."""
        return replace(self, columns=columns)

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


def _parse_columns(text: str | None) -> tuple[tuple[str, str], ...]:
    if text is None:
        return ()  # no column list: inferred
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
    """``SNAPSHOT``: true unless the definition says false (Materialize's default)."""
    snapshot = True
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


@dataclass(frozen=True)
class _Header:
    """A definition's parts, whichever of Materialize's spellings it used."""

    name: str
    input: str
    columns: str | None
    options: str | None
    body: str
    #: FROM RETAIN: the DELETE reads the output, but the columns are the input's.
    retains: bool = False


def _header(sql: str) -> _Header:
    match = _HEADER.match(sql or "")
    if match is not None:
        return _Header(
            match["name"], match["input"], match["columns"], match["options"], match["body"]
        )
    match = _TRANSFORM.match(sql or "")
    if match is not None:
        body = f"INSERT INTO {match['name']} {match['query']};"
        return _Header(match["name"], match["input"], None, match["options"], body)
    match = _RETAIN.match(sql or "")
    if match is not None:
        name, source, keep = match["name"], match["input"], match["predicate"]
        body = (
            f"DELETE FROM {name} WHERE NOT ({keep}); "
            f"INSERT INTO {name} SELECT * FROM {source} WHERE ({keep});"
        )
        return _Header(name, source, None, match["options"], body, retains=True)
    raise QueryError(_SYNTAX)


def parse_continual_task(
    sql: str, *, default_namespace: str | None = None, catalog_name: str = "ct"
) -> ContinualTaskDef:
    """Parse a ``CREATE CONTINUAL TASK``; errors name the offending part.

    ``default_namespace`` qualifies unqualified table names; without it every
    name must be qualified (the error names the first one that is not).
    Everything the text alone shows to be wrong is refused here, at DAG parse
    (:mod:`~airflow_provider_ct.core.continual_statements`).
    """
    header = _header(sql)
    output = _qualify(header.name, default_namespace, catalog_name)
    source = _qualify(header.input, default_namespace, catalog_name)
    if output == source:
        raise QueryError(f"the task's output {output} cannot also be its input")
    columns = _parse_columns(header.columns)
    snapshot = _options(header.options)
    statements, references = _statements(header.body, output, source, default_namespace,
                                         catalog_name)  # fmt: skip
    if columns:
        check_widths(statements, [c for c, _ in columns])
    elif not header.retains:
        check_inferred(statements, output)
    return ContinualTaskDef(
        name=output,
        columns=columns,
        input=source,
        statements=tuple(statements),
        snapshot=snapshot,
        references=tuple(sorted(references)),
        sql=sql,
    )


def _statements(
    body: str, output: str, source: str, namespace: str | None, catalog_name: str
) -> tuple[list[Statement], list[str]]:
    """The body's statements, table names qualified, and the references they read."""
    try:
        parsed = [s for s in sqlglot.parse(body, read="spark") if s is not None]
    except ParseError as exc:
        raise QueryError(f"the task's statements do not parse: {exc}") from None
    if not parsed:
        raise QueryError("the task has no statements")
    texts = _split_top_level(body, ";")  # as written, for messages
    if len(texts) != len(parsed):  # a ';' in a comment: quote sqlglot's rendering instead
        texts = [tree.sql(dialect="spark") for tree in parsed]
    statements: list[Statement] = []
    references: list[str] = []
    for index, (tree, text) in enumerate(zip(parsed, texts, strict=True), start=1):
        for table in _tables_in(tree):
            qualified = _qualify(
                ".".join(p for p in (table.catalog, table.db, table.name) if p),
                namespace,
                catalog_name,
            )
            ns, name = qualified.split(".")
            table.set("catalog", None)
            table.set("db", exp.to_identifier(ns))
            table.set("this", exp.to_identifier(name))
            if qualified not in (output, source) and qualified not in references:
                references.append(qualified)
        statements.append(classify(tree, index, text, output))
    return statements, references


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


def unreadable_at(table: Any, timeline: Timeline, time: int) -> str | None:
    """Why ``table``'s contents at ``time`` cannot be read any more (None: they can).

    A full refresh reads its input as of the tick's time. When no kept
    snapshot holds that time, either the table was empty then (its history
    starts later: nothing to read) or the snapshots up to then have expired
    (the oldest kept one has a parent that is gone, or, as PyIceberg's expiry
    clears parents, a sequence number past the first): only that is refused.
    """
    if timeline.snapshot_at(time, require_sealed=False) is not None:
        return None
    snapshots = list(table.metadata.snapshots)
    if not snapshots:
        return None
    oldest = min(snapshots, key=lambda s: (s.timestamp_ms, s.snapshot_id))
    if oldest.parent_snapshot_id is None and (oldest.sequence_number or 0) <= 1:
        return None
    return (
        f"cannot be read as of {time}: its snapshots up to then have expired (the oldest "
        f"kept, {oldest.snapshot_id}, was committed at {oldest.timestamp_ms}); refresh at a "
        "time its kept history covers"
    )
