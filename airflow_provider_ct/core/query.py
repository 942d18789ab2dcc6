"""Parsing a view's SQL: which tables it reads, and pinning them to snapshots.

We parse with a real SQL parser (sqlglot, Spark dialect) so bad SQL, a
statement that is not a query, or a query that reads its own target fails in
milliseconds, before a JVM starts, with a message naming the problem.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import sqlglot
from sqlglot import exp
from sqlglot.errors import ParseError, SqlglotError
from sqlglot.optimizer.merge_subqueries import merge_subqueries
from sqlglot.optimizer.qualify import qualify

from airflow_provider_ct.exceptions import QueryError

#: Temp-view names the write job registers for pinned inputs.
INPUT_VIEW_PREFIX = "__ct_input_"

#: Spark SQL functions whose result is not a function of the query's inputs
#: (randomness, the clock, the session, the file layout, arbitrary Java).
NONDETERMINISTIC_FUNCTIONS = frozenset(
    {
        "aes_encrypt",
        "curdate",
        "current_catalog",
        "current_database",
        "current_date",
        "current_schema",
        "current_time",
        "current_timestamp",
        "current_timezone",
        "current_user",
        "input_file_block_length",
        "input_file_block_start",
        "input_file_name",
        "java_method",
        "localtimestamp",
        "monotonically_increasing_id",
        "now",
        "rand",
        "randn",
        "random",
        "randstr",
        "reflect",
        "session_user",
        "shuffle",
        "spark_partition_id",
        "try_aes_encrypt",
        "try_reflect",
        "uniform",
        "user",
        "uuid",
        "version",
    }
)


def query_hash(text: str, kind: str = "view") -> str:
    """A stable hash of a query's exact text, recorded as ``ct.query-hash``.

    The exact text, not a normalized form: any edit (even whitespace) counts
    as a new query, which costs one Spark run and can never hide a change.
    ``kind`` keeps a view's and a continual task's hashes apart.
    """
    digest = hashlib.sha256(f"{kind}\n{text}".encode()).hexdigest()
    return f"sha256:{digest}"


def nondeterministic_calls(expression: Any) -> list[str]:
    """The calls in a parsed query whose results do not depend on its inputs alone.

    A quiet tick assumes the query over unchanged inputs gives the same rows;
    ``rand()`` or ``current_timestamp()`` break that, so such a query always
    runs Spark. ``TABLESAMPLE`` samples at random. (sqlglot reads
    ``unix_timestamp()`` without an argument as a call of ``current_timestamp``.)
    """
    found: set[str] = set()
    for node in expression.find_all(exp.Func, exp.TableSample):
        if isinstance(node, exp.TableSample):
            found.add("tablesample")
            continue
        name = (node.name if isinstance(node, exp.Anonymous) else node.sql_name()).lower()
        if name in NONDETERMINISTIC_FUNCTIONS:
            found.add(name)
    return sorted(found)


def normalize_table_name(name: str, catalog_name: str) -> str:
    """``catalog.ns.t`` / ``ns.t`` -> ``ns.t`` (lower-cased, as Iceberg catalogs store it)."""
    if not isinstance(name, str):
        raise QueryError(f"a table name must be a string, got {type(name).__name__}: {name!r:.100}")
    parts = [p.strip("`").lower() for p in name.split(".")]
    if len(parts) == 3 and parts[0] == catalog_name.lower():
        parts = parts[1:]
    if len(parts) != 2 or not all(parts):
        raise QueryError(
            f"table {name!r} must be written as namespace.table or {catalog_name}.namespace.table"
        )
    return ".".join(parts)


def input_name(table: exp.Table, catalog_name: str) -> str | None:
    """The input (``namespace.table``) a table node reads, or None for a name of the query.

    Parse refuses a catalog table written without its namespace
    (:func:`normalize_table_name`), so a one-part name that survived it names
    something the query defines itself: a CTE, at any depth (or a view the
    tick bound). Those are never catalog tables: a rule that meets one reads
    it as the query's own name, or refuses the shape, and never asks the
    catalog for it.
    """
    if not table.name or not table.db:
        return None
    return normalize_table_name(qualified_table_name(table), catalog_name)


def reads_query_name(node: Any) -> bool:
    """Whether ``node`` reads a CTE (a one-part table name) anywhere inside it."""
    return any(t.name and not t.db for t in node.find_all(exp.Table))


@dataclass(frozen=True)
class ParsedQuery:
    sql: str
    expression: Any
    #: Input tables, normalized to ``namespace.table``, in order of appearance.
    inputs: tuple[str, ...]
    catalog_name: str

    def pinned_sql(self, views: Mapping[str, str], dialect: str = "spark") -> str:
        """The query with every input replaced by its temp view (keeping aliases)."""
        tree = self.expression.copy()
        for table in list(_base_tables(tree)):
            name = normalize_table_name(qualified_table_name(table), self.catalog_name)
            view = views[name]
            alias = table.args.get("alias") or exp.TableAlias(this=exp.to_identifier(table.name))
            table.replace(exp.Table(this=exp.to_identifier(view), alias=alias))
        return tree.sql(dialect=dialect)


def qualified_table_name(table: exp.Table) -> str:
    """A table node's name as the query wrote it (``catalog.db.name``, parts present only)."""
    return ".".join(p for p in (table.catalog, table.db, table.name) if p)


def _base_tables(tree: Any) -> list[exp.Table]:
    """Tables read from the catalog (not CTE references, not table functions)."""
    ctes = {cte.alias_or_name.lower() for cte in tree.find_all(exp.CTE)}
    tables = []
    for table in tree.find_all(exp.Table):
        if not table.name:
            continue
        if not table.db and table.name.lower() in ctes:
            continue
        tables.append(table)
    return tables


def parse_query(sql: str, *, target: str | None = None, catalog_name: str = "ct") -> ParsedQuery:
    """Parse one Spark SQL query, refusing anything a view cannot be.

    Parses of the same text are memoized per process: a tick's tasks parse
    their query several times (the DAG file, the sensor, mint, write, the
    quiet check, lineage), 2-4 ms each for a TPC-H query. Each caller gets
    its own copy of the tree (a fifth of a parse), since sqlglot's
    transformations (lineage's qualification, rewrites) may change it.

    :param target: the view's own table; a query that reads it is refused.
    """
    parsed = _parse_query(sql, target, catalog_name)
    return dataclasses.replace(parsed, expression=parsed.expression.copy())


@functools.lru_cache(maxsize=512)
def _parse_query(sql: str, target: str | None, catalog_name: str) -> ParsedQuery:
    if not sql or not sql.strip():
        raise QueryError("the query is empty")
    try:
        statements = [s for s in sqlglot.parse(sql, read="spark") if s is not None]
    except ParseError as exc:
        raise QueryError(f"the query does not parse as Spark SQL: {exc}") from None
    if len(statements) != 1:
        raise QueryError(f"expected exactly one SELECT statement, got {len(statements)}")
    tree: Any = statements[0]
    if not isinstance(tree, exp.Query):
        text = tree.sql(dialect="spark")[:120]
        raise QueryError(f"a view's query must be a SELECT, got {tree.key.upper()}: {text}")
    inputs: list[str] = []
    for table in _base_tables(tree):
        name = normalize_table_name(qualified_table_name(table), catalog_name)
        if name not in inputs:
            inputs.append(name)
    if not inputs:
        raise QueryError("the query reads no table; a view needs at least one input")
    if target is not None:
        own = normalize_table_name(target, catalog_name)
        if own in inputs:
            raise QueryError(f"the query reads its own target {own}; a view cannot read itself")
    return ParsedQuery(
        sql=sql, expression=tree, inputs=tuple(sorted(inputs)), catalog_name=catalog_name
    )


def merge_derived_tables(tree: Any, schema: Any = None) -> Any:
    """``tree`` with every derived table sqlglot can prove mergeable merged; else ``tree``.

    :param schema: a sqlglot ``MappingSchema`` of the tables read, when the
        caller knows it (a pipeline does); without it, only columns sqlglot
        can place from the query alone are qualified.

    All or nothing: a derived table left over (or a query sqlglot cannot
    qualify) returns ``tree`` as it was, which is correct and runs in full.
    """
    try:
        qualified = qualify(
            tree.copy(),
            schema=schema,
            dialect="spark",
            validate_qualify_columns=schema is not None,
            quote_identifiers=False,
            expand_stars=schema is not None,
        )
        merged = merge_subqueries(qualified)
    except (SqlglotError, ValueError, KeyError):
        return tree
    return tree if merged.find(exp.Subquery) else merged
