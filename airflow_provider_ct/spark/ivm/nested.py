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

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import sqlglot

from airflow_provider_ct.core.tables import live_rows
from airflow_provider_ct.ivm.changes.snapshot_files import (
    DRIVER_READ_FILES,
    rows_with_positions,
    snapshot_schema,
)
from airflow_provider_ct.ivm.driver.arrow_eval import NotOnDriver
from airflow_provider_ct.ivm.driver.driver_join import spelled
from airflow_provider_ct.ivm.driver.in_place_driver import diff_rows
from airflow_provider_ct.ivm.driver.keyed_fetch import KeyedFetch
from airflow_provider_ct.ivm.driver.outer_rows import OuterFetch, outer_rows
from airflow_provider_ct.ivm.plan.having import INNER_VIEW, typed_outer
from airflow_provider_ct.ivm.plan.outer_shape import OuterJoin, OuterShape, outer_shape
from airflow_provider_ct.ivm.plan.rewrites import bind_tables
from airflow_provider_ct.spark.diff import compute_correction
from airflow_provider_ct.spark.fingerprints import Correction
from airflow_provider_ct.spark.ivm.analysis_cache import analyzed
from airflow_provider_ct.spark.ivm.outer_types import outer_types, output_schema

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from airflow_provider_ct.ivm.plan.planner import Plan
    from airflow_provider_ct.spark.ivm.in_place import Aggregation

log = logging.getLogger(__name__)


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
    the target's head; on the driver when it can (:func:`_on_driver`), else in Spark."""
    nested = agg.plan.nested
    assert nested is not None
    types = {f.name.lower(): f.dataType.simpleString() for f in agg.schema.fields}
    tree = typed_outer(sqlglot.parse_one(nested.outer_sql, dialect="spark"), types)
    correction = _on_driver(agg, tree, rows, target_columns)
    if correction is None:
        agg.scratch.frame(agg.spark, rows, agg.schema).createOrReplaceTempView(INNER_VIEW)
        sql = bind_tables(tree, agg.new_views, agg.catalog_name).sql(dialect="spark")
        desired = agg.spark.sql(sql).select(*[f"`{c}`" for c in target_columns])
        correction = _driver_diff(agg, desired, target_columns)
        if correction is None:
            correction = compute_correction(desired, persisted(), target_columns, on_driver=True)
    correction.notes["nested_rows"] = rows.num_rows
    return correction


def _on_driver(
    agg: Aggregation, tree: Any, rows: pa.Table, columns: list[str]
) -> Correction | None:
    """The outer query evaluated on the driver and diffed with the target read there; None
    when a piece of it, or either side's size, is Spark's (the reason is logged)."""
    if agg.driver_rows <= 0 or rows.num_rows > agg.driver_rows:
        return None
    try:
        shape = _shape(agg, tree)
        want = outer_rows(shape, rows, _fetch(agg, shape), outer_types(agg, shape))
        schema = output_schema(agg, tree, columns)
        want = _as_target(want, schema)
    except NotOnDriver as exc:
        log.info("the outer query is evaluated by Spark: %s", exc)
        return None
    if want.num_rows > agg.driver_rows:
        return None
    have = _target_rows(agg, columns)
    if have is None:
        return None
    diff = diff_rows(want, have, columns)
    inserted, retracted = diff.inserts.num_rows, len(diff.retractions)
    correction = Correction(diff.inserts, diff.retractions, inserted, retracted, diffed_on="driver")
    correction.notes["outer_on"] = "driver"
    log.info("the outer query on the driver: %d rows over %d inner rows", len(want), len(rows))
    return correction


def _shape(agg: Aggregation, tree: Any) -> OuterShape:
    """The outer query in pieces (kept per analysis key), or :class:`NotOnDriver`."""
    nested = agg.plan.nested
    assert nested is not None
    inputs = agg.inputs if agg.pins is not None else None
    tables: dict[str, list[str]] = {}
    for name in nested.outer_inputs:
        if inputs is None:
            raise NotOnDriver("the outer query's tables are not open on the driver")
        tables[name] = _pinned_columns(agg, name)

    def compute() -> OuterShape | str:
        return outer_shape(tree, [f.name for f in agg.schema.fields], tables, agg.catalog_name)

    shape = analyzed(agg.analysis_key, f"outer shape {nested.outer_sql}", compute)
    if isinstance(shape, str):
        raise NotOnDriver(shape)
    return shape


def _fetch(agg: Aggregation, shape: OuterShape) -> OuterFetch:
    """The joined tables' rows by the inner values, at the pinned snapshots (file cache)."""
    if not shape.joins:
        return _no_fetch
    assert agg.inputs is not None and agg.pins is not None
    columns = {}
    for join in shape.joins:
        names = _pinned_columns(agg, join.name)
        columns[join.name] = [spelled(names, c) for c in shape.read_columns(join)]
    fetch = KeyedFetch(agg.inputs, agg.pins, agg.pins, columns, agg.driver_rows)

    def rows(join: OuterJoin, values: pa.Array) -> pa.Table:
        refusal = fetch.refusal([join.name], values)
        if refusal is not None:
            raise NotOnDriver(refusal)
        return fetch.rows(join.name, join.column, values.to_pylist())[0]

    return rows


def _pinned_columns(agg: Aggregation, name: str) -> list[str]:
    """The input's columns as its pinned snapshot was written (what the tick reads)."""
    assert agg.inputs is not None and agg.pins is not None
    table, pin = agg.inputs[name], agg.pins.get(name)
    snapshot = table.metadata.snapshot_by_id(pin) if pin is not None else None
    return [f.name for f in snapshot_schema(table, snapshot).fields]


def _no_fetch(join: OuterJoin, _values: pa.Array) -> pa.Table:
    raise NotOnDriver(f"{join.name} is not fetched")


def _as_target(want: pa.Table, schema: pa.Schema) -> pa.Table:
    """The driver's rows as the target's columns and Spark's types (a safe cast, or refused)."""
    by_name = {n.lower(): i for i, n in enumerate(want.column_names)}
    arrays = []
    for field in schema:
        column = want.column(by_name[field.name.lower()])
        try:
            arrays.append(column.cast(field.type, safe=True))
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
            raise NotOnDriver(f"output {field.name} as {field.type}: {exc}") from None
    return pa.Table.from_arrays(arrays, schema=schema)


def _target_rows(agg: Aggregation, columns: list[str]) -> pa.Table | None:
    """The target's live rows with their positions, read by PyIceberg; None when large."""
    table, base, limit = agg.table, agg.base_snapshot_id, agg.driver_rows
    if table is None or base is None or limit <= 0 or live_rows(table, base) > limit:
        return None
    return rows_with_positions(table, base, columns, None, DRIVER_READ_FILES)


def _driver_diff(agg: Aggregation, desired: DataFrame, columns: list[str]) -> Correction | None:
    """Spark's outer rows diffed on the driver with the target's, read by PyIceberg with
    their positions (no Spark job for the target); None when either side is too large."""
    from pyspark.sql.pandas.types import to_arrow_schema

    have = _target_rows(agg, columns)
    if have is None:
        return None
    limit = agg.driver_rows
    batches = desired.limit(limit + 1)._collect_as_arrow()
    schema = to_arrow_schema(desired.schema)
    want = pa.Table.from_batches(batches, schema=schema) if batches else schema.empty_table()
    if want.num_rows > limit:
        return None
    diff = diff_rows(want, have, columns)
    inserted, retracted = diff.inserts.num_rows, len(diff.retractions)
    return Correction(diff.inserts, diff.retractions, inserted, retracted, diffed_on="driver")
