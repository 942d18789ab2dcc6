"""A statement's query: parsed, names qualified, ``STREAM(src)`` read, errors at file lines.

Names resolve as SDP resolves them: ``t`` in the statement's database (the
spec's ``database``, or a ``USE SCHEMA`` before it), ``ns.t`` as written,
``catalog.ns.t`` only in the pipeline's catalog.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import sqlglot
from sqlglot import exp
from sqlglot.errors import ParseError

from airflow_provider_ct.pipelines.statements import Statement

STREAM = "STREAM"
#: ``STREAM src`` (SDP accepts it without parentheses), which sqlglot reads as
#: a table ``STREAM`` aliased ``src``, or not at all for ``STREAM ns.src``.
_BARE_STREAM = re.compile(
    r"(\b(?:FROM|JOIN)\s+)STREAM(\s+)(?!\(|AS\b)([A-Za-z_`][\w.`]*)", re.IGNORECASE
)


@dataclass
class Query:
    """A parsed query of one statement; ``tree`` names tables as ``ns.t``."""

    statement: Statement
    tree: Any
    #: ``STREAM(src)`` sources, normalized.
    streams: list[str]
    #: Every table the query reads (temporary views still as tables), with its line.
    reads: dict[str, int]


def qualify_name(raw: str, statement: Statement, catalog: str, line: int | None = None) -> str:
    """``t`` / ``ns.t`` / ``catalog.ns.t`` -> ``ns.t``; refusals name the statement's line."""
    parts = [p.strip("`").lower() for p in raw.split(".")]
    if len(parts) == 3:
        if parts[0] != catalog.lower():
            raise statement.error(
                f"{raw} is in catalog {parts[0]!r}, not the pipeline's catalog {catalog!r}", line
            )
        parts = parts[1:]
    if len(parts) == 1:
        if not statement.database:
            raise statement.error(
                f"{raw} is not qualified: give 'database:' in the spec file, USE SCHEMA, or "
                f"write namespace.{raw}",
                line,
            )
        parts = [statement.database, parts[0]]
    if len(parts) != 2 or not all(parts):
        raise statement.error(f"{raw!r} is not a table name", line)
    return ".".join(parts)


def parse_statement_query(statement: Statement, catalog: str) -> Query:
    """Parse ``statement.query``; every table qualified, ``STREAM(x)`` replaced by ``x``."""
    assert statement.query is not None
    text = _BARE_STREAM.sub(_parenthesized, statement.query)
    try:
        trees = [t for t in sqlglot.parse(text, read="spark") if t is not None]
    except ParseError as exc:
        first = exc.errors[0] if exc.errors else {}
        line = statement.query_line + int(first.get("line") or 1) - 1
        problem = first.get("description") or str(exc)
        raise statement.error(f"syntax error: {problem}", line) from None
    if len(trees) != 1 or not isinstance(trees[0], exp.Query):
        raise statement.error(f"{statement.kind} {statement.name}: AS must be followed by a query")
    tree = trees[0]
    query = Query(statement, tree, [], {})
    ctes = {cte.alias_or_name.lower() for cte in tree.find_all(exp.CTE)}
    for table in list(tree.find_all(exp.Table)):
        _qualify_table(query, table, ctes, catalog)
    return query


def _parenthesized(match: re.Match[str]) -> str:
    """``STREAM src`` -> ``STREAM(src)``, its line breaks kept (errors keep their lines)."""
    return f"{match[1]}STREAM({match[3]})" + "\n" * match[2].count("\n")


def _line(statement: Statement, node: Any) -> int:
    meta = getattr(node, "meta", None) or {}
    relative = meta.get("line") if isinstance(meta, dict) else None
    return statement.query_line + int(relative) - 1 if relative else statement.line


def _qualify_table(query: Query, table: Any, ctes: set[str], catalog: str) -> None:
    statement = query.statement
    if isinstance(table.this, exp.Anonymous) and table.this.name.upper() == STREAM:
        args = table.this.expressions
        line = _line(statement, table.this)
        if len(args) != 1 or not isinstance(args[0], exp.Column | exp.Dot):
            raise statement.error("STREAM() takes one table name", line)
        name = qualify_name(args[0].sql(dialect="spark"), statement, catalog, line)
        query.streams.append(name)
        alias = table.args.get("alias") or exp.TableAlias(
            this=exp.to_identifier(name.split(".")[1])
        )
        ns, short = name.split(".")
        table.replace(
            exp.Table(this=exp.to_identifier(short), db=exp.to_identifier(ns), alias=alias)
        )
        query.reads.setdefault(name, line)
        return
    if not table.name or isinstance(table.this, exp.Func):
        return  # a table function (range(), VALUES): reads no table
    if not table.db and table.name.lower() in ctes:
        return
    raw = ".".join(p for p in (table.catalog, table.db, table.name) if p)
    line = _line(statement, table.this)
    name = qualify_name(raw, statement, catalog, line)
    ns, short = name.split(".")
    table.set("catalog", None)
    table.set("db", exp.to_identifier(ns))
    table.set("this", exp.to_identifier(short))
    query.reads.setdefault(name, line)


def inline(tree: Any, temporary: dict[str, Any]) -> Any:
    """``tree`` with every temporary view it reads replaced by its query, as a derived table.

    ``temporary`` maps names to already inlined trees (so views over views
    are inlined once each, in the graph's order). The alias stays the name
    the reader used (``FROM v`` -> ``FROM (...) AS v``).
    """
    tree = tree.copy()
    for table in list(tree.find_all(exp.Table)):
        name = f"{table.db}.{table.name}".lower() if table.db else ""
        if name in temporary:
            alias = table.args.get("alias") or exp.TableAlias(this=exp.to_identifier(table.name))
            table.replace(exp.Subquery(this=temporary[name].copy(), alias=alias))
    return tree
