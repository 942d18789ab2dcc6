"""SDP's Python decorators (``pyspark.pipelines``, Spark 4.1) with their names and signatures.

A pipeline's ``.py`` files are written against ``from pyspark import
pipelines as dp``; :mod:`.python` executes them with this module standing
in for ``pyspark.pipelines`` (Spark 3.5 has none, and DAG parsing runs no
Spark). Each decorator records a definition in the registry of the file
being loaded and returns the function unchanged, as SDP's do; the loader
then calls each function once against a recording session to learn what it
builds. No Spark, no Airflow.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any

from airflow_provider_ct.exceptions import PipelineError

MATERIALIZED_VIEW = "materialized_view"
TABLE = "table"
TEMPORARY_VIEW = "temporary_view"
APPEND_FLOW = "append_flow"
STREAMING_TABLE = "create_streaming_table"


@dataclass(frozen=True)
class Definition:
    """One decorated function (or ``create_streaming_table`` call) of a Python file."""

    decorator: str
    name: str
    line: int
    function: Callable[[], Any] | None = None
    comment: str | None = None
    table_properties: dict[str, str] = field(default_factory=dict)
    partition_cols: tuple[str, ...] = ()
    schema: str | None = None
    #: ``append_flow``: the streaming table it writes.
    target: str | None = None


@dataclass
class Registry:
    """The definitions one file's execution made, in order."""

    path: str
    definitions: list[Definition] = field(default_factory=list)


_REGISTRY: ContextVar[Registry | None] = ContextVar("ct_dp_registry", default=None)


def registry() -> ContextVar[Registry | None]:
    """The loader's handle on the registry of the file being executed."""
    return _REGISTRY


def _current(decorator: str) -> Registry:
    found = _REGISTRY.get()
    if found is None:
        raise PipelineError(
            f"dp.{decorator} is only meaningful while a pipeline folder is loaded "
            "(sql_pipeline or ct-pipeline dry-run)"
        )
    return found


def _schema_text(schema: Any, decorator: str, line: int, path: str) -> str | None:
    if schema is None or isinstance(schema, str):
        return schema
    raise PipelineError(
        f"dp.{decorator}: schema= must be a DDL string ('id BIGINT, name STRING'); a StructType "
        "needs Spark, which DAG parsing does not run",
        path=path,
        line=line,
    )


def _dataset(decorator: str, function: Callable[[], Any], **options: Any) -> Callable[[], Any]:
    found = _current(decorator)
    if not callable(function):
        raise PipelineError(f"dp.{decorator} decorates a function", path=found.path)
    line = function.__code__.co_firstlineno  # the first decorator's line
    found.definitions.append(
        Definition(
            decorator,
            str(options.get("name") or function.__name__),
            line,
            function,
            comment=options.get("comment"),
            table_properties=dict(options.get("table_properties") or {}),
            partition_cols=tuple(options.get("partition_cols") or ()),
            schema=_schema_text(options.get("schema"), decorator, line, found.path),
            target=options.get("target"),
        )
    )
    return function


def _decorator(
    decorator: str, query_function: Callable[[], Any] | None, options: dict[str, Any]
) -> Any:
    """SDP's two spellings: ``@dp.x`` and ``@dp.x(name=...)``."""
    if query_function is not None:
        return _dataset(decorator, query_function, **options)
    return lambda function: _dataset(decorator, function, **options)


def materialized_view(
    query_function: Callable[[], Any] | None = None,
    *,
    name: str | None = None,
    comment: str | None = None,
    spark_conf: dict[str, str] | None = None,
    table_properties: dict[str, str] | None = None,
    partition_cols: list[str] | None = None,
    cluster_by: list[str] | None = None,
    schema: Any = None,
    format: str | None = None,
) -> Any:
    """A materialized view: the function's DataFrame, kept up to date."""
    options: dict[str, Any] = {"name": name, "comment": comment}
    options["table_properties"] = table_properties
    options |= {"partition_cols": partition_cols, "schema": schema}
    return _decorator(MATERIALIZED_VIEW, query_function, options)


def table(
    query_function: Callable[[], Any] | None = None,
    *,
    name: str | None = None,
    comment: str | None = None,
    spark_conf: dict[str, str] | None = None,
    table_properties: dict[str, str] | None = None,
    partition_cols: list[str] | None = None,
    cluster_by: list[str] | None = None,
    schema: Any = None,
    format: str | None = None,
) -> Any:
    """A streaming table over ``spark.readStream``; over a batch read, a materialized view."""
    options: dict[str, Any] = {"name": name, "comment": comment}
    options["table_properties"] = table_properties
    options |= {"partition_cols": partition_cols, "schema": schema}
    return _decorator(TABLE, query_function, options)


def temporary_view(
    query_function: Callable[[], Any] | None = None,
    *,
    name: str | None = None,
    comment: str | None = None,
    spark_conf: dict[str, str] | None = None,
) -> Any:
    """A temporary view: no table, inlined into its readers."""
    return _decorator(TEMPORARY_VIEW, query_function, {"name": name, "comment": comment})


def append_flow(
    *,
    target: str,
    name: str | None = None,
    spark_conf: dict[str, str] | None = None,
    once: bool = False,
) -> Callable[[Callable[[], Any]], Any]:
    """A flow appending the function's streaming DataFrame to ``target``."""
    if once:
        found = _current(APPEND_FLOW)
        raise PipelineError(
            "dp.append_flow(once=True) is not supported: a flow here processes each new row of "
            "its source once; use a materialized view for a one-off batch",
            path=found.path,
        )
    return lambda function: _dataset(APPEND_FLOW, function, name=name, target=target)


def create_streaming_table(
    name: str,
    *,
    comment: str | None = None,
    table_properties: dict[str, str] | None = None,
    partition_cols: list[str] | None = None,
    cluster_by: list[str] | None = None,
    schema: Any = None,
    format: str | None = None,
) -> None:
    """A streaming table that ``append_flow`` functions write."""
    found = _current(STREAMING_TABLE)
    frame = inspect.currentframe()
    caller = frame.f_back if frame is not None else None
    line = caller.f_lineno if caller is not None else 0
    found.definitions.append(
        Definition(
            STREAMING_TABLE,
            name,
            line,
            comment=comment,
            table_properties=dict(table_properties or {}),
            partition_cols=tuple(partition_cols or ()),
            schema=_schema_text(schema, STREAMING_TABLE, line, found.path),
        )
    )
