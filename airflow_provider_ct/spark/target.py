"""The target a write job's correction compares with: created on first use, its schema fitted.

Split from :mod:`.write_job`, which computes and stages the correction:
this module owns what the correction is compared with. The table is
created from the query's schema on its first tick; a query whose columns
changed gets the schema ``on_schema_change`` allows, planned but not
committed (the batch is staged under it and the append commits it,
:mod:`airflow_provider_ct.core.schema_change`); the head is read as that
schema reads it.
"""

from __future__ import annotations

import functools
import logging
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from airflow_provider_ct.core.catalog import CatalogConfig
from airflow_provider_ct.core.description import BatchDescription
from airflow_provider_ct.core.layout import TargetSettings
from airflow_provider_ct.core.schema_change import (
    SchemaChange,
    diff_schemas,
    pending_table,
    plan_schema_change,
    schema_error,
)
from airflow_provider_ct.core.tables import create_managed_table
from airflow_provider_ct.exceptions import CTError
from airflow_provider_ct.spark.correction import check_schema
from airflow_provider_ct.spark.pinned_query import PinnedQuery
from airflow_provider_ct.spark.snapshots import read_at
from airflow_provider_ct.spark.tick import Target

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.types import StructType

log = logging.getLogger("airflow_provider_ct.write_job")


def _qualified(config: CatalogConfig, name: str) -> str:
    return f"{config.name}.{name}"


def prepare_target(
    spark: SparkSession,
    config: CatalogConfig,
    catalog: Any,
    desc: BatchDescription,
    table: Any,
    query: PinnedQuery,
    settings: TargetSettings,
    *,
    dry_run: bool = False,
) -> Target | None:
    """Create the target on first use; plan its schema change to fit the query; read the head.

    A schema change is not committed here: the batch's files are staged
    under the new schema and the append commits it with them
    (:mod:`airflow_provider_ct.core.schema_change`).
    """
    schema = query.schema
    arrow_schema = table_schema_of(schema, desc.target)
    if table is None:
        table = create_managed_table(catalog, desc.target, arrow_schema, layout=settings.layout)
        if table.metadata.current_snapshot() is not None:
            return None
    diff = diff_schemas(table.schema(), arrow_schema)
    name = _qualified(config, desc.target)
    base_id = desc.base_snapshot_id
    if not diff:
        columns = [f.name for f in table.schema().fields]
        frames = functools.partial(_frames, spark, name, base_id, query, desc.target)
        return Target(table, columns, frames, base_id is not None, query_schema=schema)
    if dry_run:
        raise schema_error(diff, desc.target, "fail")
    change = plan_schema_change(table, diff, arrow_schema, settings.on_schema_change)
    log.info("schema of %s changes with this batch: %s", desc.target, diff.problems())
    base = None if base_id is None else read_at(spark, name, base_id)
    return _changing_target(table, change, query.frame, base, schema)


def _frames(
    spark: SparkSession, name: str, base_id: int | None, query: PinnedQuery, target: str
) -> tuple[DataFrame, DataFrame | None]:
    """The query's rows in the table's column order, and the head read with positions."""
    stored = spark.table(name)
    columns = [f.name for f in stored.schema.fields]
    desired = query.frame.select(*[f"`{c}`" for c in columns])  # rows compare by name
    check_schema(desired, stored, target)
    if base_id is None:
        return desired, None
    base = read_at(spark, name, base_id)
    return desired, base.select(*[f"`{c}`" for c in columns], *_AT)


#: The metadata columns a persisted row is retracted by.
_AT = ("_file", "_pos")


def table_schema_of(schema: StructType, target: str) -> pa.Schema:
    """The query's columns (as the table stores them) as Arrow types, every one optional.

    Refuses duplicate names, which no table can hold. Spark's nullability
    flags shift with plans (joins, explode), and a required column would
    reject staged files. Also what a dry run checks a definition with
    (:mod:`.definition_check`), so both refuse alike.
    """
    from pyspark.sql.pandas.types import to_arrow_schema

    columns = [f.name for f in schema.fields]
    if len({c.lower() for c in columns}) != len(columns):
        raise CTError(f"the query for {target} has duplicate column names: {columns}")
    return pa.schema([f.with_nullable(True) for f in to_arrow_schema(schema)])


def _changing_target(
    table: Any,
    change: SchemaChange,
    desired: DataFrame,
    base: DataFrame | None,
    query_schema: StructType,
) -> Target:
    """The target as it will be once ``change`` commits with this batch.

    The head is read as the new schema reads it, which is what the
    correction must compare with: a column whose field id is kept reads its
    old values (widened), every other one (added, or replaced by
    ``recreate``) reads null in the old files.
    """
    from pyspark.sql import functions as F

    columns = [f.name for f in change.schema.fields]
    desired = desired.select(*[f"`{c}`" for c in columns])  # rows compare by name
    types = {f.name.lower(): f.dataType for f in desired.schema.fields}
    persisted = None
    if base is not None:
        carried = {c.lower() for c in change.carried_columns(table.schema())}
        stored = {f.name.lower() for f in base.schema.fields}
        persisted = base.select(
            *[
                (F.col(f"`{c}`") if c.lower() in carried & stored else F.lit(None))
                .cast(types[c.lower()])
                .alias(c)
                for c in columns
            ],
            *_AT,
        )
    built = (desired, persisted)
    return Target(
        pending_table(table, change),
        columns,
        lambda: built,
        base is not None,
        change,
        query_schema=query_schema,
    )
