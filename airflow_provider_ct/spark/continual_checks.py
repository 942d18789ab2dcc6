"""A continual task's statements checked against the tables' schemas, before any write.

What :mod:`~airflow_provider_ct.core.continual_statements` cannot see in the
text alone needs the schemas: the width of a ``*``, each column's type, a
column or function that does not resolve. The job asks Spark to analyse every
statement over empty views of the tables (no data is read) before it creates
or writes anything, and refuses the definition with Materialize's words,
naming the statement and the column:

* ``statement 2 (...): INSERT has more expressions than target columns``;
* ``statement 1 (...): column "key" is of type boolean but expression is of
  type int``: an INSERT's column must be assignable to its target under
  Spark's ANSI store-assignment rules (what Spark's own ``INSERT`` allows by
  default, :func:`can_store_assign`);
* any analysis error, with the job's internal view names put back to the
  table names of the definition.

A task without a column list takes its columns from its first INSERT's
SELECT (names and types); the other INSERTs must fit them.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from airflow_provider_ct.core.continual import ContinualTaskDef
from airflow_provider_ct.core.continual_now import with_time
from airflow_provider_ct.core.continual_statements import Statement, width_error
from airflow_provider_ct.exceptions import QueryError

if TYPE_CHECKING:
    from pyspark.sql import SparkSession
    from pyspark.sql.types import DataType, StructType

_NAME = re.compile(r"^[a-z_][a-z0-9_]*$")
_DATETIME = ("date", "timestamp", "timestamp_ntz")


def can_store_assign(source: DataType, target: DataType) -> bool:
    """Spark's ANSI store assignment: may a ``source`` value be written to ``target``?

    Numbers to numbers (overflow fails at run time), anything atomic to a
    string, dates and timestamps among themselves, NULL to anything,
    containers element by element; nothing else (no int to boolean, no
    string to int).
    """
    from pyspark.sql import types as T

    if source == target or isinstance(source, T.NullType):
        return True
    if isinstance(source, T.NumericType) and isinstance(target, T.NumericType):
        return True
    if isinstance(target, T.StringType) and isinstance(source, T.AtomicType):
        return True
    if source.typeName() in _DATETIME and target.typeName() in _DATETIME:
        return True
    if isinstance(source, T.ArrayType) and isinstance(target, T.ArrayType):
        return can_store_assign(source.elementType, target.elementType)
    if isinstance(source, T.MapType) and isinstance(target, T.MapType):
        return can_store_assign(source.keyType, target.keyType) and can_store_assign(
            source.valueType, target.valueType
        )
    if isinstance(source, T.StructType) and isinstance(target, T.StructType):
        return len(source.fields) == len(target.fields) and all(
            can_store_assign(s.dataType, t.dataType)
            for s, t in zip(source.fields, target.fields, strict=True)
        )
    return type(source) is type(target) and source.typeName().endswith("interval")


def temporal_columns(frames: list[StructType]) -> set[str]:
    """Names of the date/time columns of the tables a task reads (for ``mz_now()``)."""
    return {f.name.lower() for s in frames for f in s.fields if f.dataType.typeName() in _DATETIME}


def _analysed(
    spark: SparkSession, statement: Statement, sql: str, views: Mapping[str, str]
) -> StructType:
    """The schema of ``sql`` (analysed, not run); an error names the statement, not the views.

    ``.schema`` inside the ``try``: Spark Connect analyses only when asked for it.
    """
    from pyspark.errors import AnalysisException, ParseException

    try:
        return spark.sql(sql).schema
    except (AnalysisException, ParseException) as exc:
        message = str(exc).split("\n")[0]
        message = re.sub(r";? ?line \d+ pos \d+;?", "", message).strip()
        for view, name in sorted(views.items(), key=lambda item: -len(item[0])):
            message = message.replace(view, name)
        if "__ct_" in message:  # a suggestion listing the row addresses: drop it
            message = re.sub(r"\s*Did you mean one of the following\? \[.*?\]\.?", ".", message)
        raise QueryError(f"{statement.label}: {message}") from None


def _infer(statement: Statement, schema: StructType) -> tuple[tuple[str, str], ...]:
    """A task's columns from its first INSERT's SELECT: the names and types it produces."""
    from pyspark.sql.types import NullType

    columns = []
    for position, f in enumerate(schema.fields, start=1):
        name = f.name.lower()
        if not _NAME.match(name):
            raise QueryError(
                f"{statement.label}: column {position} ({f.name}) needs a name to become a "
                "column of the task's output: write it AS name, or declare the columns"
            )
        if isinstance(f.dataType, NullType):
            raise QueryError(
                f'{statement.label}: column "{name}" has no type (NULL): CAST it, or declare '
                "the columns"
            )
        columns.append((name, f.dataType.simpleString()))
    names = [n for n, _ in columns]
    duplicates = sorted({n for n in names if names.count(n) > 1})
    if duplicates:
        raise QueryError(f"{statement.label}: duplicate column names {duplicates}")
    return tuple(columns)


def _check_insert(statement: Statement, schema: StructType, task: ContinualTaskDef) -> None:
    from pyspark.sql.types import _parse_datatype_string

    declared = dict(task.columns)
    targets = list(statement.columns) or task.column_names
    if len(schema.fields) != len(targets):
        raise width_error(statement, len(schema.fields), targets)
    for f, target in zip(schema.fields, targets, strict=True):
        wanted = _parse_datatype_string(declared[target])
        if not can_store_assign(f.dataType, wanted):
            raise QueryError(
                f'{statement.label}: column "{target}" is of type {wanted.simpleString()} '
                f"but expression is of type {f.dataType.simpleString()}"
            )


def check_statements(
    spark: SparkSession,
    task: ContinualTaskDef,
    views: Mapping[str, str],
    insert_views: Mapping[str, str],
    temporal: set[str],
    bind_output: Callable[[ContinualTaskDef], None],
) -> ContinualTaskDef:
    """Analyse every statement over the bound (empty) views; the task with its columns.

    ``views`` maps the definition's table names to the views the caller bound
    for DELETEs, ``insert_views`` those for INSERTs (the output's views are
    bound by ``bind_output`` once the columns are known).
    """
    back = {view: name for name, view in (*views.items(), *insert_views.items())}
    if task.declared:
        bind_output(task)
    for statement in task.statements:
        tree = with_time(renamed(statement.expression, insert_views), 0, temporal)
        if statement.kind == "insert":
            schema = _analysed(spark, statement, tree.expression.sql(dialect="spark"), back)
            if not task.declared:
                task = task.with_columns(_infer(statement, schema))
                bind_output(task)
            _check_insert(statement, schema, task)
    for statement in task.statements:  # DELETEs: once the output's columns are known
        if statement.kind == "delete":
            tree = with_time(renamed(statement.expression, views), 0, temporal)
            where = tree.args.get("where")
            probe = f"SELECT * FROM {tree.this.sql(dialect='spark')}"
            if where is not None:
                probe += f" WHERE {where.this.sql(dialect='spark')}"
            _analysed(spark, statement, probe, back)
    return task


def renamed(tree: Any, views: Mapping[str, str]) -> Any:
    """A copy of ``tree`` reading the bound views instead of the definition's tables."""
    from sqlglot import exp

    tree = tree.copy()
    for table in list(tree.find_all(exp.Table)):
        name = f"{table.db}.{table.name}".lower() if table.db else table.name.lower()
        if name in views:
            alias = table.args.get("alias") or exp.TableAlias(this=exp.to_identifier(table.name))
            table.replace(exp.Table(this=exp.to_identifier(views[name]), alias=alias))
    return tree
