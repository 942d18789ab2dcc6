"""Each dataset's definition, resolved against the catalog: what its factory call receives.

The catalog is asked once per external input (a table the pipeline reads
but does not define): a missing one is refused here, naming the statement
that reads it. The columns of a continual task are inferred with sqlglot
from its inputs' schemas (the catalog's, or upstream datasets' inferred
ones) unless the statement declares them; a type sqlglot cannot tell is
refused with the column named, so the author declares it. Nothing here
writes: a folder that fails leaves the catalog as it was.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from sqlglot import exp
from sqlglot.errors import SqlglotError
from sqlglot.optimizer.annotate_types import annotate_types
from sqlglot.optimizer.qualify import qualify
from sqlglot.schema import MappingSchema

from airflow_provider_ct.core.query import merge_derived_tables
from airflow_provider_ct.pipelines.analysis import unknown_column
from airflow_provider_ct.pipelines.graph import Dataset, Pipeline
from airflow_provider_ct.pipelines.statements import CONTINUAL_TASK, Statement

#: A table's columns, name -> Spark SQL type; None: the table does not exist.
Columns = dict[str, str]
TableColumns = Callable[[str], "Columns | None"]

_ICEBERG_TO_SPARK = {
    "boolean": "BOOLEAN",
    "int": "INT",
    "long": "BIGINT",
    "float": "FLOAT",
    "double": "DOUBLE",
    "date": "DATE",
    "time": "STRING",
    "timestamp": "TIMESTAMP_NTZ",
    "timestamptz": "TIMESTAMP",
    "string": "STRING",
    "uuid": "STRING",
    "binary": "BINARY",
}
_UNKNOWN = ("UNKNOWN", "NULL")


def spark_type(iceberg_type: Any) -> str:
    """An Iceberg type (PyIceberg's) as Spark SQL spells it; nested types as Iceberg prints them."""
    text = str(iceberg_type).lower()
    if text in _ICEBERG_TO_SPARK:
        return _ICEBERG_TO_SPARK[text]
    match = re.fullmatch(r"decimal\((\d+),\s*(\d+)\)", text)
    if match:
        return f"DECIMAL({match[1]},{match[2]})"
    if text.startswith("fixed"):
        return "BINARY"
    return text.upper()


@dataclass(frozen=True)
class Resolved:
    """A dataset as its factory receives it."""

    dataset: Dataset
    #: A view's query (Spark SQL, temporary views inlined, names ``ns.t``).
    sql: str | None = None
    #: A continual task's ``CREATE CONTINUAL TASK`` definition.
    definition: str | None = None
    columns: tuple[tuple[str, str], ...] = ()
    partition_by: tuple[str, ...] = ()
    properties: Mapping[str, str] = field(default_factory=dict)
    #: The column names of each table its query reads (what the write job reads from
    #: the catalog, so the dry run plans the view as its ticks will).
    read_columns: Mapping[str, tuple[str, ...]] = field(default_factory=dict)

    @property
    def name(self) -> str:
        return self.dataset.name


def resolve(pipeline: Pipeline, table_columns: TableColumns) -> dict[str, Resolved]:
    """Every dataset's definition, in the graph's order; unknown tables refused."""
    schema: dict[str, Columns] = {}
    for table, (statement, line) in pipeline.external().items():
        columns = table_columns(table)
        if columns is None:
            raise statement.error(
                f"unknown table {table}: not in catalog {pipeline.catalog!r} and not defined "
                "by the pipeline",
                _read_line(pipeline, table, statement, line),
            )
        schema[table] = columns
    resolved: dict[str, Resolved] = {}
    for name in pipeline.order:
        dataset = pipeline.datasets[name]
        item = _resolve(dataset, schema)
        schema[name] = dict(item.columns)
        resolved[name] = item
    return resolved


def _read_line(pipeline: Pipeline, table: str, statement: Statement, default: int) -> int:
    """The line of the first reference to ``table`` in the statement's query text."""
    if statement.query is None:
        return default
    short = table.split(".")[-1]
    for offset, text in enumerate(statement.query.splitlines()):
        if re.search(rf"\b{re.escape(short)}\b", text, re.IGNORECASE):
            return statement.query_line + offset
    return default


def _layout(statement: Statement) -> dict[str, Any]:
    properties = dict(statement.properties)
    if statement.comment is not None:
        properties["comment"] = statement.comment
    return {"partition_by": statement.partition_by, "properties": properties}


def _resolve(dataset: Dataset, schema: dict[str, Columns]) -> Resolved:
    statement = dataset.statement
    if dataset.flows:  # the union of its flows' tables
        names = list(schema[dataset.flows[0]])
        select = ", ".join(f"`{c}`" for c in names)
        sql = " UNION ALL ".join(f"SELECT {select} FROM {f}" for f in dataset.flows)
        columns = tuple((c, schema[dataset.flows[0]][c]) for c in names)
        return Resolved(dataset, sql=sql, columns=columns, **_layout(statement))
    if statement.constant is not None:  # spark.range: no input, columns known
        columns = tuple((c, t or "BIGINT") for c, t in statement.columns)
        return Resolved(dataset, sql=statement.query, columns=columns, **_layout(statement))
    if dataset.kind == CONTINUAL_TASK and dataset.tree is None:  # CREATE CONTINUAL TASK
        columns = tuple(dataset.columns)
        return Resolved(dataset, definition=statement.text, columns=columns, **_layout(statement))
    _check_columns(dataset, schema)
    tree = _declared(dataset, statement)
    inferred = _infer(tree, schema)
    if dataset.kind != CONTINUAL_TASK:
        merged = _merged(tree, schema) if dataset.via else tree
        reads = {t: tuple(schema[t]) for t in dataset.reads if t in schema}
        return Resolved(
            dataset,
            sql=merged.sql(dialect="spark"),
            columns=inferred,
            read_columns=reads,
            **_layout(statement),
        )
    columns = _continual_columns(dataset, inferred)
    return Resolved(
        dataset,
        definition=_definition(dataset, tree, columns),
        columns=columns,
        **_layout(statement),
    )


def _check_columns(dataset: Dataset, schema: dict[str, Columns]) -> None:
    """Refuse a column no input has, at its line when the statement's own query holds it."""
    inputs = {t: schema.get(t, {}) for t in dataset.reads}
    found = unknown_column(dataset.tree, _mapping(schema), inputs)
    if found is None:
        return
    name, relative = found
    statement = dataset.statement
    line = statement.query_line + relative - 1 if relative and not dataset.via else None
    raise statement.error(
        f"unknown column {name!r}: no input of {dataset.name} has it ({', '.join(sorted(inputs))})",
        line,
    )


def _declared(dataset: Dataset, statement: Statement) -> Any:
    """The query with a declared column list applied: names as aliases, types as casts."""
    tree = dataset.tree.copy()
    declared = statement.columns
    if dataset.kind == CONTINUAL_TASK and statement.kind == "flow":
        return tree  # BY NAME: the select's names are the target's columns
    if not declared:
        return tree
    leaves = [tree] if isinstance(tree, exp.Select) else list(tree.find_all(exp.Select))
    for leaf in leaves:
        selects = leaf.expressions
        if len(selects) != len(declared) or any(_is_star(s) for s in selects):
            raise statement.error(
                f"{statement.name} declares {len(declared)} columns but its query "
                f"produces {len(selects)} (or uses *)"
            )
        renamed = []
        for select, (name, type_text) in zip(selects, declared, strict=True):
            value = select.unalias() if isinstance(select, exp.Alias) else select
            if type_text and dataset.kind != CONTINUAL_TASK:
                value = exp.cast(value, exp.DataType.build(type_text, dialect="spark"))
            renamed.append(exp.alias_(value, name))
        leaf.set("expressions", renamed)
    return tree


def _is_star(select: Any) -> bool:
    return isinstance(select, exp.Star) or (
        isinstance(select, exp.Column) and isinstance(select.this, exp.Star)
    )


def _mapping(schema: dict[str, Columns]) -> MappingSchema:
    mapping: dict[str, Any] = {}
    for table, columns in schema.items():
        if columns:
            ns, name = table.split(".")
            mapping.setdefault(ns, {})[name] = dict(columns)
    return MappingSchema(mapping, dialect="spark")


def _merged(tree: Any, schema: dict[str, Columns]) -> Any:
    """The query with its inlined temporary views merged into it where that keeps its meaning.

    A derived table is recomputed in full by the planner; merged (sqlglot's
    ``merge_subqueries``, which merges only what it can prove equivalent: a
    projection and filter, not an aggregate under a join), a view over a
    temporary view keeps its incremental plan. Anything left over, or a
    query sqlglot cannot qualify, stays as inlined: correct, and full.
    """
    return merge_derived_tables(tree, _mapping(schema))


def _infer(tree: Any, schema: dict[str, Columns]) -> tuple[tuple[str, str], ...]:
    """The query's columns and their Spark types (``UNKNOWN`` where sqlglot cannot tell)."""
    try:
        typed = annotate_types(
            qualify(tree.copy(), schema=_mapping(schema), dialect="spark"), schema=_mapping(schema)
        )
    except (SqlglotError, ValueError, KeyError):
        names = [s.alias_or_name.lower() for s in tree.selects]
        return tuple((n, "UNKNOWN") for n in names)
    out = []
    for select in typed.selects:
        data_type = select.type
        text = data_type.sql(dialect="spark").upper() if data_type is not None else "UNKNOWN"
        out.append((select.alias_or_name.lower(), text))
    return tuple(out)


def _continual_columns(
    dataset: Dataset, inferred: tuple[tuple[str, str], ...]
) -> tuple[tuple[str, str], ...]:
    statement = dataset.statement
    declared = {n: t for n, t in statement.columns if t}
    columns = []
    for name, type_text in inferred:
        chosen = declared.get(name) or type_text
        if chosen.upper() in _UNKNOWN or "*" in name:
            raise statement.error(
                f"cannot infer the type of column {name!r} of {dataset.name}: declare the "
                f"columns, e.g. CREATE STREAMING TABLE {statement.name} ({name} BIGINT, ...)"
            )
        columns.append((name, chosen))
    return tuple(columns)


def _definition(dataset: Dataset, tree: Any, columns: tuple[tuple[str, str], ...]) -> str:
    """A streaming table or flow as Materialize's ``CREATE CONTINUAL TASK``.

    ``SNAPSHOT = true``: a streaming table starts from the whole of its
    source, as SDP's does; later ticks process each new input row once.
    """
    declared = ", ".join(f"{n} {t}" for n, t in columns)
    names = ", ".join(n for n, _ in columns)
    select = tree.sql(dialect="spark")
    return (
        f"CREATE CONTINUAL TASK {dataset.name} ({declared}) ON INPUT {dataset.stream} "
        f"WITH (SNAPSHOT = true) AS (\n"
        f"    INSERT INTO {dataset.name} ({names}) {select};\n)"
    )
