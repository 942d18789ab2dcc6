"""A pipeline's Python file (SDP's ``@dp.*`` decorators) read as statements, without Spark.

The file is executed once, at DAG-parse time, with ``pyspark``,
``pyspark.pipelines``, ``pyspark.sql`` and ``pyspark.sql.functions``
answered by stand-ins (:mod:`.dp`, :mod:`.frames`) through the file's own
``__import__`` (nothing global is patched, and a process without PySpark
loads it the same). Each decorated function is then called once against
the recording session, and its DataFrame's recorded SQL becomes a
:class:`~.statements.Statement` at the decorator's line, exactly as a SQL
file's ``CREATE ...`` would: the graph, the name and column checks, the
dry run and the factories need nothing else. A DataFrame from
``spark.sql(text)`` is that text (maintained incrementally where the
planner can); one built with DataFrame calls carries the reason it is
recomputed in full each tick (decision, docs/pipelines.md).
"""

from __future__ import annotations

import builtins
import re
import traceback
import types
from collections.abc import Callable
from pathlib import Path
from typing import Any

from airflow_provider_ct.exceptions import PipelineError
from airflow_provider_ct.pipelines import dp, frames
from airflow_provider_ct.pipelines.statements import (
    FLOW,
    MATERIALIZED_VIEW,
    STREAMING_TABLE,
    TEMPORARY_VIEW,
    Statement,
)

#: Why a DataFrame built by calls (not ``spark.sql``) is recomputed in full.
CALLS_ARE_FULL = (
    "a Python dataset whose function does not return spark.sql(...) is recomputed in full "
    "each tick (its DataFrame calls are recorded as SQL at DAG-parse time)"
)
_STREAM = re.compile(r"\bSTREAM\s*\(", re.IGNORECASE)
_KINDS = {
    dp.MATERIALIZED_VIEW: MATERIALIZED_VIEW,
    dp.TEMPORARY_VIEW: TEMPORARY_VIEW,
    dp.APPEND_FLOW: FLOW,
    dp.STREAMING_TABLE: STREAMING_TABLE,
}


def read_python(path: Path, shown: str, database: str | None) -> list[Statement]:
    """The datasets one Python file defines, as statements at their decorators' lines."""
    registry = dp.Registry(shown)
    token = dp.registry().set(registry)
    try:
        _execute(path, shown)
        return [_statement(d, shown, database) for d in registry.definitions]
    finally:
        dp.registry().reset(token)


def _execute(path: Path, shown: str) -> None:
    source = path.read_text()
    try:
        code = compile(source, str(path), "exec")
    except SyntaxError as exc:
        raise PipelineError(f"syntax error: {exc.msg}", path=shown, line=exc.lineno or 1) from None
    scope: dict[str, Any] = {
        "__name__": f"ct_pipeline_{path.stem}",
        "__file__": str(path),
        "__builtins__": {**vars(builtins), "__import__": _importer(_stand_ins())},
    }
    _guarded(lambda: exec(code, scope), path, shown, 1)


def _guarded(call: Callable[[], Any], path: Path, shown: str, line: int) -> Any:
    """Run ``call``; an error becomes a PipelineError at its line in the file."""
    try:
        return call()
    except PipelineError as exc:
        if exc.path:
            raise
        raise PipelineError(exc.problem, path=shown, line=_line_in(exc, path, line)) from None
    except Exception as exc:  # the user's code: any error is the file's
        problem = f"{type(exc).__name__}: {exc}"
        raise PipelineError(problem, path=shown, line=_line_in(exc, path, line)) from None


def _line_in(exc: BaseException, path: Path, default: int) -> int:
    """The innermost line of ``path`` in the error's traceback."""
    found = default
    for frame in traceback.extract_tb(exc.__traceback__):
        if Path(frame.filename) == path and frame.lineno:
            found = frame.lineno
    return found


def _statement(definition: dp.Definition, shown: str, database: str | None) -> Statement:
    base: dict[str, Any] = {
        "path": shown,
        "line": definition.line,
        "database": database,
        "python": True,
        "comment": definition.comment,
        "properties": {str(k): str(v) for k, v in definition.table_properties.items()},
        "partition_by": definition.partition_cols,
        "columns": _columns(definition, shown),
    }
    name = definition.name.lower()
    if definition.function is None:  # create_streaming_table: a target of flows
        return Statement(STREAMING_TABLE, name, **base)
    path = Path(definition.function.__code__.co_filename)
    frames.fresh_names()
    frame = _guarded(definition.function, path, shown, definition.line)
    if not isinstance(frame, frames.DataFrame):
        raise PipelineError(
            f"{definition.function.__name__} returns {type(frame).__name__}, not a DataFrame",
            path=shown,
            line=definition.line,
        )
    sql = frame.sql
    kind = _KINDS.get(definition.decorator)
    if kind is None:  # dp.table: streaming over readStream, else a materialized view
        kind = STREAMING_TABLE if _STREAM.search(sql) else MATERIALIZED_VIEW
    if frame.constant is not None and kind == MATERIALIZED_VIEW:  # spark.range: no input
        base["columns"] = (("id", "BIGINT"),)
        query = f"SELECT id FROM {frame.source}"
        constant = frame.constant
        return Statement(kind, name, **base, query=query, query_line=definition.line,
                         text=query, constant=constant)  # fmt: skip
    full = CALLS_ARE_FULL if kind == MATERIALIZED_VIEW and frame.kind == frames.CALLS else None
    target = definition.target.lower() if definition.target else None
    text = sql if kind != FLOW else f"INSERT INTO {target} {sql}"
    return Statement(
        kind,
        name,
        **base,
        query=sql,
        query_line=definition.line,
        target=target,
        text=text,
        full_reason=full,
    )


def _columns(definition: dp.Definition, shown: str) -> tuple[tuple[str, str | None], ...]:
    """``schema='id BIGINT, name STRING'`` as the statement's declared columns."""
    if not definition.schema:
        return ()
    columns = []
    for item in definition.schema.split(","):
        bits = item.split(None, 1)
        if len(bits) != 2:
            raise PipelineError(
                f"schema: {item.strip()!r} needs a name and a type",
                path=shown,
                line=definition.line,
            )
        columns.append((bits[0].strip("`").lower(), bits[1].strip()))
    return tuple(columns)


# -- the stand-in modules ------------------------------------------------------------


def _importer(modules: dict[str, types.ModuleType]) -> Callable[..., Any]:
    real = builtins.__import__

    def load(
        name: str, globals: Any = None, locals: Any = None, fromlist: Any = (), level: int = 0
    ) -> Any:
        if level == 0 and (name == "pyspark" or name.startswith("pyspark.")):
            if name not in modules:
                raise PipelineError(
                    f"import {name}: a pipeline's Python file is loaded without Spark; it may "
                    f"import {', '.join(sorted(modules))}"
                )
            return modules[name] if fromlist else modules["pyspark"]
        return real(name, globals, locals, fromlist, level)

    return load


class _Builder:
    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        return lambda *args, **kwargs: self if name != "getOrCreate" else frames.RecordingSession()


class SparkSession:
    """``pyspark.sql.SparkSession`` while a pipeline's file loads: every session records."""

    builder = _Builder()

    @classmethod
    def active(cls) -> frames.RecordingSession:
        return frames.RecordingSession()

    getActiveSession = active


def _function(name: str) -> Callable[..., frames.Column]:
    def call(*args: Any) -> frames.Column:
        parts = []
        for arg in args:
            if isinstance(arg, str):
                parts.append("*" if arg == "*" else frames.column_name(arg))
            else:
                parts.append(frames.Column.of(arg).sql)
        return frames.Column(f"{name.upper()}({', '.join(parts)})")

    return call


def _functions_module() -> types.ModuleType:
    module = types.ModuleType("pyspark.sql.functions")
    names: dict[str, Any] = {
        "col": lambda name: frames.Column(frames.column_name(name)),
        "lit": frames.Column.of,
        "expr": frames.Column,
        "__getattr__": _function,  # any other function, by its name
    }
    names["column"] = names["col"]
    vars(module).update(names)
    return module


def _stand_ins() -> dict[str, types.ModuleType]:
    functions = _functions_module()
    sql = types.ModuleType("pyspark.sql")
    sql.SparkSession = SparkSession  # type: ignore[attr-defined]
    sql.DataFrame = frames.DataFrame  # type: ignore[attr-defined]
    sql.Column = frames.Column  # type: ignore[attr-defined]
    sql.functions = functions  # type: ignore[attr-defined]
    root = types.ModuleType("pyspark")
    root.pipelines = dp  # type: ignore[attr-defined]
    root.sql = sql  # type: ignore[attr-defined]
    return {
        "pyspark": root,
        "pyspark.pipelines": dp,  # type: ignore[dict-item]
        "pyspark.sql": sql,
        "pyspark.sql.functions": functions,
    }
