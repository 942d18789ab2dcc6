"""The dry run's Spark analysis: each dataset checked as its first tick will check it.

The folder's own checks (names, cycles, columns by sqlglot) cannot see what
only Spark knows: a column's type (a ``GROUPING()`` is ``tinyint``, which a
table stores as ``int``), a function's, which type ``mz_now()`` takes, a
query a rule of the planner fails on. Here every dataset goes, in the
graph's order, through :mod:`airflow_provider_ct.spark.definition_check`,
the tick's own checks over empty views: a dataset the pipeline creates is
bound to the schema its definition was just found to have, so a view over
a streaming table is analysed before either exists. An error names the
dataset's file and line, with the tick's words.

``pipelines`` imports no PySpark (it loads and plans folders without a
JVM): the session and schemas here are passed through as they come.

A Python dataset is analysed as the SQL its function was recorded as (a
``spark.sql`` text, or the query its DataFrame calls spell), which is what
its ticks run. A dataset that reads no table (``spark.range``) has nothing
to analyse but its column (``id bigint``), bound for what reads it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from airflow_provider_ct.exceptions import CTError
from airflow_provider_ct.spark.definition_check import (
    CheckedDefinition,
    check_continual,
    check_view,
)

if TYPE_CHECKING:
    from airflow_provider_ct.core.catalog import CatalogConfig
    from airflow_provider_ct.pipelines.load import LoadedPipeline
    from airflow_provider_ct.pipelines.resolve import Resolved


#: What Spark said of each dataset, by name.
SparkChecks = dict[str, CheckedDefinition]


def check_pipeline(loaded: LoadedPipeline, spark: Any, config: CatalogConfig) -> SparkChecks:
    """Every dataset of ``loaded`` checked by Spark, in order; the first error raised."""
    checks: SparkChecks = {}
    bound: dict[str, Any] = {}
    refresh = str(loaded.spec.airflow.get("refresh", "auto"))
    for name in loaded.pipeline.order:
        item = loaded.resolved[name]
        if item.dataset.statement.constant is not None:  # spark.range: one id column
            checks[name] = CheckedDefinition(name, spark.range(0).schema)
        else:
            try:
                checks[name] = _check(item, spark, config, refresh, bound)
            except CTError as exc:
                raise item.dataset.statement.error(f"{name}: {exc}") from None
        bound[name] = checks[name].schema
    return checks


def _check(
    item: Resolved,
    spark: Any,
    config: CatalogConfig,
    refresh: str,
    bound: dict[str, Any],
) -> CheckedDefinition:
    if item.sql is not None:
        return check_view(spark, config, item.sql, item.name, refresh=refresh, bound=bound)
    if item.definition is None:
        raise CTError("neither a query nor a continual task")
    namespace = item.dataset.statement.database
    return check_continual(spark, config, item.definition, namespace, bound=bound)
