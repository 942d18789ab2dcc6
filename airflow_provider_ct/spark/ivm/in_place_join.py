"""In-place aggregates over joined inputs without a Spark job: the change's state on the driver.

When a view's block inner-joins several inputs and their changes are small,
the delta rules' terms are joined on the driver
(:mod:`airflow_provider_ct.ivm.driver.driver_join`), each partner fetched by the
join keys the change carries from its data files' columns, which the warm
driver keeps decoded (:mod:`airflow_provider_ct.core.file_cache`). Spark
still types every expression (one analysis, no job) and the evaluation
keeps its semantics or refuses (:mod:`airflow_provider_ct.ivm.driver.arrow_eval`).

Taken only when what it decodes fits the file cache: the referenced
columns' stored size (from the manifests) times :data:`DECODED_PER_STORED`
must stay within the cache's budget, or every tick would decode the
partners again. Otherwise, and for any shape the driver refuses, the tick
uses Spark's jobs, under the cost model's join-read rule.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

import pyarrow as pa

from airflow_provider_ct.core.file_cache import file_cache
from airflow_provider_ct.ivm.changes.snapshot_files import snapshot_schema
from airflow_provider_ct.ivm.changes.table_changes import (
    TableChanges,
    changes_report,
    estimated_change_rows,
    table_changes,
)
from airflow_provider_ct.ivm.driver.arrow_eval import ArrowEvaluator, NotOnDriver
from airflow_provider_ct.ivm.driver.driver_join import (
    JoinShape,
    Prefilter,
    join_shape,
    single_table_conjuncts,
    term_rows,
)
from airflow_provider_ct.ivm.driver.in_place_driver import change_state as change_state_rows
from airflow_provider_ct.ivm.driver.keyed_rows import SnapshotRows, column_bytes
from airflow_provider_ct.ivm.plan.columns import referenced_columns
from airflow_provider_ct.spark.ivm.in_place import (
    Aggregation,
    changes_schema,
    expressions,
    node_types,
)
from airflow_provider_ct.spark.tick import Tick

log = logging.getLogger(__name__)

#: Decoded Arrow bytes per stored (compressed Parquet) byte, a conservative guess.
DECODED_PER_STORED = 4


@dataclass
class JoinedChange:
    """The inputs' changes a joined tick read, and what the report says of them."""

    changes: dict[str, TableChanges]
    shape: JoinShape
    columns: dict[str, list[str]]
    details: dict[str, Any] = field(default_factory=dict)


def joined_change(
    tick: Tick, agg: Aggregation, inputs: dict[str, Any], before: Mapping[str, int | None]
) -> JoinedChange | None:
    """The changed inputs' changes, read on the driver, when the driver can join them."""
    block = agg.plan.blocks[0]
    if len(agg.plan.blocks) != 1 or len(block.inputs) < 2 or block.left_join is not None:
        return None
    if block.fixed:
        return None  # a subquery is evaluated by Spark
    after = {n: tick.desc.inputs.get(n) for n in block.inputs}
    if any(snapshot is None for snapshot in after.values()):
        return None  # an input without a snapshot: nothing to fetch from
    pinned = {n: int(s) for n, s in after.items() if s is not None}
    changed = [n for n in block.inputs if before.get(n) != after.get(n)]
    rows = sum(estimated_change_rows(inputs[n], before.get(n), pinned[n]) for n in changed)
    if agg.driver_rows <= 0 or rows > agg.driver_rows:
        return None
    schemas = {
        n: snapshot_schema(inputs[n], inputs[n].metadata.snapshot_by_id(pinned[n])).column_names
        for n in block.inputs
    }
    columns = referenced_columns(agg.plan, schemas, tick.config.name)
    try:
        shape = join_shape(block.tree, tick.config.name, columns)
    except NotOnDriver as exc:
        log.info("the change's join is left to Spark: %s", exc)
        return None
    if not _fits_cache(inputs, pinned, columns):
        return None
    changes = {
        n: table_changes(inputs[n], before.get(n), pinned[n], columns=columns[n]) for n in changed
    }
    return JoinedChange(changes, shape, columns)


def _fits_cache(
    inputs: dict[str, Any], after: dict[str, int], columns: dict[str, list[str]]
) -> bool:
    cache = file_cache()
    if cache is None:
        return False
    stored = sum(column_bytes(inputs[n], after[n], columns[n]) for n in columns)
    if stored * DECODED_PER_STORED > cache.budget:
        log.info(
            "the change's join is left to Spark: its inputs' columns (%d bytes stored) would "
            "not stay in the driver's file cache (%d bytes)",
            stored,
            cache.budget,
        )
        return False
    return True


def joined_change_state(
    agg: Aggregation,
    read: JoinedChange,
    inputs: dict[str, Any],
    snapshots: dict[str, dict[str, int | None]],
    schema: pa.Schema,
) -> pa.Table | None:
    """The change's signed state per group from the joined terms; None: Spark computes it.

    :param snapshots: ``"new"``/``"old"`` -> input -> its snapshot on that side.
    """
    fetchers: dict[tuple[str, int | None], SnapshotRows] = {}

    def fetch(name: str, side: str, column: str, values: pa.Array) -> pa.Table:
        key = (name, snapshots[side].get(name))  # an unchanged input: one reader for both sides
        if key not in fetchers:
            fetchers[key] = SnapshotRows(inputs[name], key[1], read.columns[name])
        return fetchers[key].where(column, values)

    base = expressions(agg)
    parts = replace(base, where=read.shape.condition)
    schema = changes_schema(agg, schema)
    try:
        types = node_types(agg, parts)
        prefilter = _prefilter(read.shape, types)
        sides = []
        for position, joined in enumerate(read.shape.inputs):
            changes = read.changes.get(joined.name)
            if changes is None:
                continue
            for sign, rows in ((1, changes.inserted), (-1, changes.deleted)):
                if rows.num_rows:
                    terms = term_rows(read.shape, position, rows, fetch, prefilter)
                    sides.append((sign, ArrowEvaluator.joined(terms, types)))
        read.details["joined_rows"] = sum(e.rows.num_rows for _, e in sides)
        return change_state_rows(sides, parts, schema)
    except NotOnDriver as exc:
        log.info("the change's state is computed by Spark: %s", exc)
        return None


def _prefilter(shape: JoinShape, types: dict[str, pa.DataType]) -> Prefilter:
    """Each table's rows kept by the condition's conjuncts that read it alone (before joins)."""
    from sqlglot import exp

    conditions = {a: exp.and_(*cs, copy=True) for a, cs in single_table_conjuncts(shape).items()}

    def keep(alias: str, rows: pa.Table) -> pa.Table:
        condition = conditions.get(alias)
        if condition is None or not rows.num_rows:
            return rows
        return rows.filter(ArrowEvaluator.joined(rows, types).mask(condition))

    return keep


def report(read: JoinedChange) -> dict[str, Any]:
    """What the report says of the changes a joined tick read on the driver."""
    return {**changes_report(read.changes), **read.details}
