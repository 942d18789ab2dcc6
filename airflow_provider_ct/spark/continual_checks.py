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

from airflow_provider_ct.core.catalog import CatalogConfig
from airflow_provider_ct.core.continual import ContinualTaskDef
from airflow_provider_ct.core.continual_now import now_calls, now_stamps, with_time
from airflow_provider_ct.core.continual_statements import Statement, width_error
from airflow_provider_ct.exceptions import QueryError
from airflow_provider_ct.spark.continual_state import (
    FILE_COL,
    INPUT_VIEW,
    POS_COL,
    REF_VIEW,
    SELF_ROWS,
    SELF_VIEW,
    State,
    state_frame,
)

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


#: ``mz_now()``'s type per statement (its index): one flag per call, timestamp or epoch ms.
NowStamps = dict[int, tuple[bool, ...]]


def check_statements(
    spark: SparkSession,
    task: ContinualTaskDef,
    views: Mapping[str, str],
    insert_views: Mapping[str, str],
    temporal: set[str],
    bind_output: Callable[[ContinualTaskDef], None],
) -> tuple[ContinualTaskDef, NowStamps]:
    """Analyse every statement over the bound (empty) views; the task with its columns.

    ``views`` maps the definition's table names to the views the caller bound
    for DELETEs, ``insert_views`` those for INSERTs (the output's views are
    bound by ``bind_output`` once the columns are known). Also returns each
    statement's ``mz_now()`` types, read from Spark's analysis of the operands
    they meet (:func:`operand_kind`), the words of ``temporal`` where it
    cannot say.
    """
    back = {view: name for name, view in (*views.items(), *insert_views.items())}
    stamps: NowStamps = {}
    if task.declared:
        bind_output(task)
    for statement in task.statements:
        if statement.kind == "insert":
            tree = _timed(spark, statement, insert_views, temporal, stamps)
            schema = _analysed(spark, statement, tree.expression.sql(dialect="spark"), back)
            if not task.declared:
                task = task.with_columns(_infer(statement, schema))
                bind_output(task)
            _check_insert(statement, schema, task)
    for statement in task.statements:  # DELETEs: once the output's columns are known
        if statement.kind == "delete":
            tree = _timed(spark, statement, views, temporal, stamps)
            where = tree.args.get("where")
            probe = f"SELECT * FROM {tree.this.sql(dialect='spark')}"
            if where is not None:
                probe += f" WHERE {where.this.sql(dialect='spark')}"
            _analysed(spark, statement, probe, back)
    return task, stamps


def _timed(
    spark: SparkSession,
    statement: Statement,
    views: Mapping[str, str],
    temporal: set[str],
    stamps: NowStamps,
) -> Any:
    """``statement`` over ``views`` at time 0, its ``mz_now()`` types kept in ``stamps``."""
    tree = renamed(statement.expression, views)
    kinds = now_stamps(tree, temporal, lambda node: operand_kind(spark, node))
    stamps[statement.index] = kinds
    return with_time(tree, 0, stamps=kinds)


def operand_kind(spark: SparkSession, node: Any) -> str | None:
    """Spark's type of ``node`` (an operand ``mz_now()`` meets), as a kind; None if unknown.

    The operand is analysed as the one output of its own ``SELECT``'s sources
    (its ``FROM``, joins, ``GROUP BY`` and the statement's CTEs), so a column
    is typed by the table it belongs to and a function by what it returns
    (``unix_millis(ts) + 10000`` is a number, whatever ``ts`` is). Another
    ``mz_now()`` inside the operand, a correlated column or anything Spark
    refuses leaves it unknown.
    """
    from pyspark.errors import AnalysisException, ParseException
    from pyspark.sql import types as T

    if now_calls(node):
        return None
    probe = _probe(node)
    if probe is None:
        return None
    try:
        kind = spark.sql(probe.sql(dialect="spark")).schema.fields[0].dataType
    except (AnalysisException, ParseException):
        return None
    if isinstance(kind, (T.DateType, T.TimestampType, T.TimestampNTZType)):
        return "temporal"
    if isinstance(kind, T.AnsiIntervalType):
        return "interval"
    return "other"


def _probe(node: Any) -> Any:
    """``SELECT <node> FROM <its select's sources>``, or None where it has none."""
    from sqlglot import exp

    owner = node.find_ancestor(exp.Select, exp.Delete)
    if owner is None:
        return None
    probe = exp.Select(expressions=[exp.alias_(node.copy(), "__ct_operand")])
    if isinstance(owner, exp.Delete):
        return probe.from_(owner.this.copy())
    clause = node.find_ancestor(exp.Where, exp.Having, exp.Join, exp.Select)
    grouped = not isinstance(clause, (exp.Where, exp.Join))  # the select list or HAVING
    for arg in ("from_", "joins", "group") if grouped else ("from_", "joins"):
        value = owner.args.get(arg)
        if value:
            probe.set(arg, [v.copy() for v in value] if isinstance(value, list) else value.copy())
    scope = owner
    while scope is not None:  # the statement's CTEs, wherever its WITH sits
        if scope.args.get("with_") is not None:
            probe.set("with_", scope.args["with_"].copy())
            break
        scope = scope.parent
    return probe


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


def checked_task(
    spark: SparkSession,
    config: CatalogConfig,
    task: ContinualTaskDef,
    bound: Mapping[str, StructType] | None = None,
) -> tuple[ContinualTaskDef, NowStamps]:
    """The task checked against the tables' schemas, its columns inferred if not declared.

    Empty views stand for the tables (Spark analyses, reads nothing), under the
    names the statements run against; also returns each statement's
    ``mz_now()`` types, typed by Spark over those views. ``bound``: the
    schemas of tables that do not exist yet (a pipeline's dry run: the
    datasets its earlier ticks would create), read instead of the catalog.
    """
    bound = bound or {}
    views = {task.name: SELF_VIEW, task.input: INPUT_VIEW}
    for index, name in enumerate(sorted(task.references)):
        views[name] = f"{REF_VIEW}{index}"
    schemas = []
    for name, view in views.items():
        if name != task.name:
            if name in bound:
                frame = spark.createDataFrame([], bound[name])
            else:
                frame = spark.table(f"{config.name}.{name}").limit(0)
            frame.createOrReplaceTempView(view)
            schemas.append(frame.schema)
    temporal = temporal_columns(schemas)

    def bind_output(columns: ContinualTaskDef) -> None:
        frame = state_frame(spark, columns, State(base=None))
        frame.createOrReplaceTempView(SELF_VIEW)
        frame.drop(FILE_COL, POS_COL).createOrReplaceTempView(SELF_ROWS)
        temporal.update(temporal_columns([frame.schema]))

    inserts = {**views, task.name: SELF_ROWS}
    return check_statements(spark, task, views, inserts, temporal, bind_output)
