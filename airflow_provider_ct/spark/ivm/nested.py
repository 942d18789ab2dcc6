"""The outer query of a nested view, recomputed over its kept groups' rows.

For a plan whose aggregate is a CTE, a derived table or the groups under a
top-k (:mod:`airflow_provider_ct.ivm.plan.nested`), the in-place tick keeps
the inner select's state as for any in-place view; this module then makes
the target equal to the outer query: every group's row, computed from the
state on the driver, is handed to Spark as the view the outer query reads
(:data:`~airflow_provider_ct.ivm.plan.nested.INNER_VIEW`), the outer query
runs over it and the other inputs at their pinned snapshots, and its result
is diffed with the target like a full correction (on the driver when both
sides are small).

The inner rows carry the inner select's own Spark types (from its analysis,
as the state's arithmetic keeps them), so the outer query computes exactly
what it computes over the CTE in the original query.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import sqlglot

from airflow_provider_ct.core.tables import live_rows
from airflow_provider_ct.ivm.changes.snapshot_files import DRIVER_READ_FILES, rows_with_positions
from airflow_provider_ct.ivm.driver.in_place_driver import diff_rows
from airflow_provider_ct.ivm.plan.having import INNER_VIEW, typed_outer
from airflow_provider_ct.ivm.plan.rewrites import bind_tables
from airflow_provider_ct.spark.diff import compute_correction
from airflow_provider_ct.spark.fingerprints import Correction
from airflow_provider_ct.spark.ivm.analysis_cache import analyzed

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from airflow_provider_ct.ivm.plan.planner import Plan
    from airflow_provider_ct.spark.ivm.in_place import Aggregation


def inner_schema(
    spark: SparkSession,
    plan: Plan,
    views: dict[str, str] | Any,
    catalog_name: str,
    analysis_key: tuple[Any, ...] | None,
) -> Any:
    """The inner select's Spark schema (its rows' types and names): one analysis, kept."""
    tree = plan.blocks[0].tree

    def analyze() -> Any:
        return spark.sql(bind_tables(tree, views, catalog_name).sql(dialect="spark")).schema

    return analyzed(analysis_key, "nested inner schema", analyze)


def outer_correction(
    agg: Aggregation,
    rows: pa.Table,
    persisted: Callable[[], DataFrame | None],
    target_columns: list[str],
) -> Correction:
    """The target's correction: the outer query over ``rows`` (every group's row) against
    the target's head."""
    nested = agg.plan.nested
    assert nested is not None
    agg.scratch.frame(agg.spark, rows, agg.schema).createOrReplaceTempView(INNER_VIEW)
    types = {f.name.lower(): f.dataType.simpleString() for f in agg.schema.fields}
    tree = typed_outer(sqlglot.parse_one(nested.outer_sql, dialect="spark"), types)
    sql = bind_tables(tree, agg.new_views, agg.catalog_name).sql(dialect="spark")
    desired = agg.spark.sql(sql).select(*[f"`{c}`" for c in target_columns])
    correction = _driver_diff(agg, desired, target_columns)
    if correction is None:
        correction = compute_correction(desired, persisted(), target_columns, on_driver=True)
    correction.notes["nested_rows"] = rows.num_rows
    return correction


def _driver_diff(agg: Aggregation, desired: DataFrame, columns: list[str]) -> Correction | None:
    """The outer's rows diffed on the driver with the target's, read by PyIceberg with their
    positions (no Spark job for the target); None when either side is too large for it."""
    from pyspark.sql.pandas.types import to_arrow_schema

    table, base, limit = agg.table, agg.base_snapshot_id, agg.driver_rows
    if table is None or base is None or limit <= 0 or live_rows(table, base) > limit:
        return None
    have = rows_with_positions(table, base, columns, None, DRIVER_READ_FILES)
    if have is None:
        return None
    batches = desired.limit(limit + 1)._collect_as_arrow()
    schema = to_arrow_schema(desired.schema)
    want = pa.Table.from_batches(batches, schema=schema) if batches else schema.empty_table()
    if want.num_rows > limit:
        return None
    diff = diff_rows(want, have, columns)
    inserted, retracted = diff.inserts.num_rows, len(diff.retractions)
    return Correction(diff.inserts, diff.retractions, inserted, retracted, diffed_on="driver")
