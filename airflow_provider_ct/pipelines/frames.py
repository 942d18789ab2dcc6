"""A recording stand-in for PySpark's session, DataFrames and columns, at DAG-parse time.

A Python dataset's function returns a DataFrame. DAG parsing runs no Spark
(and the Airflow side may not have PySpark at all), so the loader calls the
function with ``spark`` bound to :class:`RecordingSession`: ``spark.sql``
records its text, ``spark.read.table`` / ``spark.table`` /
``spark.readStream.table`` record the table read, and the DataFrame calls
below record themselves as Spark SQL. The result is one SQL query per
dataset, which the graph, the checks and the factories take as they take a
SQL file's. A call the stand-in does not know is refused naming the call
(decision, docs/pipelines.md "Python datasets").

Recorded: ``filter``/``where``, ``select``, ``selectExpr``, ``withColumn``,
``withColumnRenamed``, ``groupBy(...).agg(...)``, ``distinct``,
``unionByName``/``union``/``unionAll``, ``join``, ``alias``; columns from
``pyspark.sql.functions`` (``col``, ``lit``, ``expr`` and any function by
name) with Python's operators, ``alias``, ``cast``, ``isNull``,
``isNotNull``, ``isin``, ``desc``/``asc``.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from contextvars import ContextVar
from dataclasses import dataclass, replace
from typing import Any

from airflow_provider_ct.exceptions import PipelineError

#: The kinds of recorded DataFrames.
SQL = "spark.sql"
CALLS = "calls"

_names: ContextVar[Iterator[int]] = ContextVar("ct_frame_names")


def fresh_names() -> None:
    """Number derived tables from 1 again: one function's SQL is the same at every parse."""
    _names.set(itertools.count(1))


def _next_name() -> str:
    counter = _names.get(None)
    if counter is None:
        fresh_names()
        counter = _names.get()
    return f"_q{next(counter)}"


def _no_dunder(name: str) -> None:
    """Python's own probes (``__deepcopy__``...) get the AttributeError they expect."""
    if name.startswith("__"):
        raise AttributeError(name)


class Unsupported(PipelineError):
    """A call the recording stand-in does not know (the loader adds the file and line)."""


def _literal(value: Any) -> str:
    if value is None:
        return "NULL"
    if isinstance(value, bool):
        return "TRUE" if value else "FALSE"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, str):
        return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"
    raise Unsupported(f"a literal of type {type(value).__name__} cannot be recorded as SQL")


class Column:
    """A column expression, recorded as Spark SQL text."""

    def __init__(self, sql: str) -> None:
        self.sql = sql

    @staticmethod
    def of(value: Any) -> Column:
        return value if isinstance(value, Column) else Column(_literal(value))

    def _op(self, op: str, other: Any, reverse: bool = False) -> Column:
        left, right = self.sql, Column.of(other).sql
        if reverse:
            left, right = right, left
        return Column(f"({left} {op} {right})")

    def __eq__(self, other: Any) -> Column:  # type: ignore[override]
        return self._op("=", other)

    def __ne__(self, other: Any) -> Column:  # type: ignore[override]
        return self._op("<>", other)

    def __lt__(self, other: Any) -> Column:
        return self._op("<", other)

    def __le__(self, other: Any) -> Column:
        return self._op("<=", other)

    def __gt__(self, other: Any) -> Column:
        return self._op(">", other)

    def __ge__(self, other: Any) -> Column:
        return self._op(">=", other)

    def __add__(self, other: Any) -> Column:
        return self._op("+", other)

    def __radd__(self, other: Any) -> Column:
        return self._op("+", other, True)

    def __sub__(self, other: Any) -> Column:
        return self._op("-", other)

    def __rsub__(self, other: Any) -> Column:
        return self._op("-", other, True)

    def __mul__(self, other: Any) -> Column:
        return self._op("*", other)

    def __rmul__(self, other: Any) -> Column:
        return self._op("*", other, True)

    def __truediv__(self, other: Any) -> Column:
        return self._op("/", other)

    def __mod__(self, other: Any) -> Column:
        return self._op("%", other)

    def __and__(self, other: Any) -> Column:
        return self._op("AND", other)

    def __or__(self, other: Any) -> Column:
        return self._op("OR", other)

    def __invert__(self) -> Column:
        return Column(f"(NOT {self.sql})")

    def __neg__(self) -> Column:
        return Column(f"(- {self.sql})")

    def __hash__(self) -> int:
        return hash(self.sql)

    def __bool__(self) -> bool:
        raise Unsupported("a column has no truth value: use & | ~ instead of and, or, not")

    def alias(self, name: str) -> Column:
        return Column(f"{self.sql} AS `{name}`")

    name = alias

    def cast(self, type_name: str) -> Column:
        return Column(f"CAST({self.sql} AS {type_name})")

    def isNull(self) -> Column:
        return Column(f"({self.sql} IS NULL)")

    def isNotNull(self) -> Column:
        return Column(f"({self.sql} IS NOT NULL)")

    def isin(self, *values: Any) -> Column:
        items = values[0] if len(values) == 1 and isinstance(values[0], list | tuple) else values
        return Column(f"({self.sql} IN ({', '.join(Column.of(v).sql for v in items)}))")

    def desc(self) -> Column:
        return Column(f"{self.sql} DESC")

    def asc(self) -> Column:
        return Column(f"{self.sql} ASC")

    def __getattr__(self, name: str) -> Any:
        _no_dunder(name)
        raise Unsupported(f"Column.{name} cannot be recorded: write the query with spark.sql")


def column_name(name: str) -> str:
    """``a`` / ``o.a`` as quoted Spark SQL identifiers (``*`` and ``o.*`` as they are)."""
    return ".".join(p if p == "*" else f"`{p}`" for p in name.split("."))


def _column(value: Any) -> str:
    """A ``select``/``groupBy`` argument: a column name, ``*`` or a :class:`Column`."""
    if isinstance(value, Column):
        return value.sql
    if isinstance(value, str):
        return column_name(value)
    raise Unsupported(f"expected a column name or a column, got {type(value).__name__}")


def _condition(value: Any) -> str:
    return value.sql if isinstance(value, Column) else f"({value})"


@dataclass(frozen=True)
class DataFrame:
    """A recorded DataFrame: its query as Spark SQL, built flat where it can be."""

    source: str
    kind: str = CALLS
    columns: tuple[str, ...] = ("*",)
    conditions: tuple[str, ...] = ()
    group_by: tuple[str, ...] | None = None
    distinct_rows: bool = False
    alias_name: str | None = None
    #: ``spark.range``'s ``(start, end, step)``: rows known without reading a table.
    bounds: tuple[int, int, int] | None = None

    @property
    def constant(self) -> tuple[int, int, int] | None:
        """The bounds of a bare ``spark.range(...)`` (no call after it), else None."""
        return self.bounds if self._plain() and not self.conditions else None

    @property
    def sql(self) -> str:
        """The query this DataFrame stands for."""
        if self.kind == SQL:
            return self.source
        text = f"SELECT {'DISTINCT ' if self.distinct_rows else ''}{', '.join(self.columns)}"
        text += f" FROM {self.source}"
        if self.conditions:
            text += " WHERE " + " AND ".join(self.conditions)
        if self.group_by is not None and self.group_by:
            text += " GROUP BY " + ", ".join(self.group_by)
        return text

    def _plain(self) -> bool:
        simple = self.columns == ("*",) and self.group_by is None and not self.distinct_rows
        return self.kind == CALLS and simple

    def _nested(self) -> DataFrame:
        """This query as the FROM of a new one (a derived table)."""
        alias = self.alias_name or _next_name()
        return DataFrame(f"({self.sql}) AS `{alias}`")  # no longer a bare range

    def filter(self, condition: Any) -> DataFrame:
        base = self if self._plain() else self._nested()
        return replace(base, conditions=(*base.conditions, _condition(condition)))

    where = filter

    def select(self, *columns: Any) -> DataFrame:
        if len(columns) == 1 and isinstance(columns[0], list | tuple):
            columns = tuple(columns[0])
        base = self if self._plain() else self._nested()
        return replace(base, columns=tuple(_column(c) for c in columns))

    def selectExpr(self, *expressions: str) -> DataFrame:
        return self.select(*[Column(e) for e in expressions])

    def withColumn(self, name: str, column: Column) -> DataFrame:
        """A new column ``name`` (replacing an existing one needs its schema: refused by Spark)."""
        base = self if self._plain() else self._nested()
        return replace(base, columns=(*base.columns, f"{Column.of(column).sql} AS `{name}`"))

    def withColumnRenamed(self, old: str, new: str) -> DataFrame:
        raise Unsupported(
            "withColumnRenamed needs the DataFrame's columns, which DAG parsing does not know: "
            "select the columns with aliases instead"
        )

    def groupBy(self, *columns: Any) -> _Grouped:
        if len(columns) == 1 and isinstance(columns[0], list | tuple):
            columns = tuple(columns[0])
        base = self if self._plain() else self._nested()
        return _Grouped(base, tuple(_column(c) for c in columns))

    groupby = groupBy

    def distinct(self) -> DataFrame:
        base = self if self.columns != ("*",) or self._plain() else self._nested()
        if base.group_by is not None:
            base = base._nested()
        return replace(base, distinct_rows=True)

    def unionByName(self, other: DataFrame, allowMissingColumns: bool = False) -> DataFrame:
        if allowMissingColumns:
            raise Unsupported("unionByName(allowMissingColumns=True) cannot be recorded")
        return DataFrame(f"({self.sql} UNION ALL {other.sql}) AS `{_next_name()}`")

    union = unionAll = unionByName

    def join(self, other: DataFrame, on: Any = None, how: str | None = None) -> DataFrame:
        kind = {None: "INNER", "inner": "INNER", "left": "LEFT", "left_outer": "LEFT",
                "leftouter": "LEFT", "right": "RIGHT", "full": "FULL", "outer": "FULL",
                "left_semi": "LEFT SEMI", "semi": "LEFT SEMI", "left_anti": "LEFT ANTI",
                "anti": "LEFT ANTI"}.get(how)  # fmt: skip
        if kind is None:
            raise Unsupported(f"join how={how!r} cannot be recorded")
        left, right = self._nested(), other._nested()
        if isinstance(on, str):
            on = [on]
        if isinstance(on, list | tuple):
            clause = f"USING ({', '.join(f'`{c}`' for c in on)})"
        elif isinstance(on, Column):
            clause = f"ON {on.sql}"
        else:
            raise Unsupported("join needs on= (column names or a condition)")
        return DataFrame(f"{left.source} {kind} JOIN {right.source} {clause}")

    def alias(self, name: str) -> DataFrame:
        return replace(self._nested() if not self._plain() else self, alias_name=name)

    def __getattr__(self, name: str) -> Any:
        _no_dunder(name)
        raise Unsupported(
            f"DataFrame.{name} cannot be recorded at DAG-parse time: write the query with "
            "spark.sql(...)"
        )


@dataclass(frozen=True)
class _Grouped:
    frame: DataFrame
    keys: tuple[str, ...]

    def agg(self, *columns: Any) -> DataFrame:
        if any(isinstance(c, dict) for c in columns):
            raise Unsupported("agg({...}) cannot be recorded: pass columns (F.sum('x'))")
        chosen = (*self.keys, *(Column.of(c).sql for c in columns))
        return replace(self.frame, columns=chosen, group_by=self.keys)

    def count(self) -> DataFrame:
        return self.agg(Column("COUNT(*) AS `count`"))


class _Reader:
    def __init__(self, stream: bool) -> None:
        self.stream = stream

    def table(self, name: str) -> DataFrame:
        source = f"STREAM({name})" if self.stream else name
        return DataFrame(f"{source} AS `{name.split('.')[-1]}`")

    def __getattr__(self, name: str) -> Any:
        _no_dunder(name)
        raise Unsupported(
            f"spark.{'readStream' if self.stream else 'read'}.{name} cannot be recorded: a "
            "pipeline reads the catalog's tables (read.table / readStream.table)"
        )


class RecordingSession:
    """What ``SparkSession.active()`` returns while a pipeline's Python file is loaded."""

    read = _Reader(stream=False)
    readStream = _Reader(stream=True)

    def sql(self, text: str, args: Any = None, **kwargs: Any) -> DataFrame:
        if args or kwargs:
            raise Unsupported("spark.sql with arguments cannot be recorded: inline the values")
        return DataFrame(text.strip().rstrip(";"), kind=SQL)

    def table(self, name: str) -> DataFrame:
        return self.read.table(name)

    def range(
        self, start: int, end: int | None = None, step: int = 1, numPartitions: Any = None
    ) -> DataFrame:
        """``spark.range``: Spark SQL's ``range`` table function (column ``id``)."""
        lower, upper = (0, start) if end is None else (start, end)
        bounds = (int(lower), int(upper), int(step))
        return DataFrame(f"range({bounds[0]}, {bounds[1]}, {bounds[2]})", bounds=bounds)

    def __getattr__(self, name: str) -> Any:
        _no_dunder(name)
        raise Unsupported(
            f"spark.{name} cannot be used at DAG-parse time: a dataset's function builds its "
            "DataFrame from spark.sql, spark.read.table or spark.readStream.table"
        )
