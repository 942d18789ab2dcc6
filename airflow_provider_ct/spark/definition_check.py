"""A definition checked the way its first tick will check it, before any tick runs.

What DAG parse accepts must run on every tick (issue 59). Parse checks the
text alone: a query that parses, names its inputs, and has a plan. What only
Spark knows (a column's type, a function's, whether a name resolves, which
type ``mz_now()`` takes) used to show on the first tick. This module asks
Spark the same questions the tick asks, over empty views of the inputs (no
data is read, nothing is created or written), through the same functions:

* a view: the planner's decision with the inputs' columns
  (:func:`~airflow_provider_ct.ivm.plan.planner.choose_plan`), the query
  analysed over its pinned inputs' schemas and cast to the types its table
  stores (:mod:`.storable`), the table's schema
  (:func:`~.target.table_schema_of`) and, for a table that exists, the
  schema change its ``on_schema_change`` allows
  (:func:`~airflow_provider_ct.core.schema_change.plan_schema_change`,
  planned, never committed);
* a continual task: the job's own statement checks and ``mz_now()`` typing
  (:func:`~.continual_checks.checked_task`).

So an error here is the tick's error, word for word. ``bound`` gives the
schemas of tables that do not exist yet: a pipeline's dry run checks its
datasets in order, each over the schemas the earlier ones would create.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, cast

from airflow_provider_ct.core.catalog import CatalogConfig
from airflow_provider_ct.core.continual import parse_continual_task
from airflow_provider_ct.core.query import parse_query
from airflow_provider_ct.core.schema_change import diff_schemas, plan_schema_change
from airflow_provider_ct.core.tables import load_table_or_none
from airflow_provider_ct.exceptions import QueryError
from airflow_provider_ct.ivm.plan.modes import RefreshMode
from airflow_provider_ct.ivm.plan.planner import choose_plan
from airflow_provider_ct.spark.continual_checks import checked_task
from airflow_provider_ct.spark.storable import storable_frame
from airflow_provider_ct.spark.target import table_schema_of

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.types import StructType

#: The prefix of the empty views a check binds the inputs to.
CHECK_VIEW = "__ct_check_"


@dataclass(frozen=True)
class CheckedDefinition:
    """What Spark says of a definition: the table's columns and, for a view, its plan."""

    name: str
    #: The columns as the table stores them (a view) or declares them (a task).
    schema: StructType
    plan: tuple[str, ...] = ()

    def describe(self) -> str:
        """``name type, ...``: the columns for a report."""
        return ", ".join(f"{f.name} {f.dataType.simpleString()}" for f in self.schema.fields)


def check_view(
    spark: SparkSession,
    config: CatalogConfig,
    sql: str,
    target: str,
    *,
    refresh: str = "auto",
    on_schema_change: str = "fail",
    bound: Mapping[str, StructType] | None = None,
) -> CheckedDefinition:
    """Check a view as its tick would; the table's columns and the plan's lines."""
    parsed = parse_query(sql, target=target, catalog_name=config.name)
    frames = _input_frames(spark, config, parsed.inputs, bound or {})
    plan = choose_plan(
        parsed, RefreshMode.parse(refresh), {n: f.columns for n, f in frames.items()}
    )
    views = {name: f"{CHECK_VIEW}{i}" for i, name in enumerate(sorted(frames))}
    for name, view in views.items():
        frames[name].createOrReplaceTempView(view)
    schema = _analysed(spark, parsed.pinned_sql(views), views)
    arrow_schema = table_schema_of(schema, target)
    table = load_table_or_none(config.load(), target)
    if table is not None:
        diff = diff_schemas(table.schema(), arrow_schema)
        if diff:
            plan_schema_change(table, diff, arrow_schema, on_schema_change)
    return CheckedDefinition(target, schema, tuple(plan.explain()))


def check_continual(
    spark: SparkSession,
    config: CatalogConfig,
    task_sql: str,
    default_namespace: str | None = None,
    *,
    bound: Mapping[str, StructType] | None = None,
) -> CheckedDefinition:
    """Check a continual task as its job does before it creates or writes; its columns."""
    from pyspark.sql.types import _parse_datatype_string

    task = parse_continual_task(
        task_sql, default_namespace=default_namespace, catalog_name=config.name
    )
    task, _stamps = checked_task(spark, config, task, bound)
    schema = _parse_datatype_string(task.spark_schema_ddl())
    return CheckedDefinition(task.name, cast("StructType", schema))


def _input_frames(
    spark: SparkSession,
    config: CatalogConfig,
    inputs: tuple[str, ...],
    bound: Mapping[str, StructType],
) -> dict[str, DataFrame]:
    """An empty frame per input: its bound schema, else its table's current one."""
    from pyspark.errors import AnalysisException

    frames = {}
    for name in inputs:
        try:
            frames[name] = (
                spark.createDataFrame([], bound[name])
                if name in bound
                else spark.table(f"{config.name}.{name}").limit(0)
            )
        except AnalysisException:
            raise QueryError(
                f"the query reads {name}, which is not a table of the catalog"
            ) from None
    return frames


def _analysed(spark: SparkSession, sql: str, views: Mapping[str, str]) -> StructType:
    """The query's schema as its table stores it; Spark's error with the inputs' names."""
    from pyspark.errors import AnalysisException, ParseException

    try:
        return storable_frame(spark.sql(sql)).schema
    except (AnalysisException, ParseException) as exc:
        message = re.sub(r";? ?line \d+ pos \d+;?", "", str(exc).split("\n")[0]).strip()
        for name, view in sorted(views.items(), key=lambda item: -len(item[1])):
            message = message.replace(f"`{view}`", name).replace(view, name)
        raise QueryError(f"Spark refuses the query: {message}") from None
