"""A linear view's tick on the driver: the delta rules' terms joined in Arrow, diffed by value.

Spark's linear route (:mod:`.incremental`) evaluates the terms as one
query, pulls the rows gained and lost, and finds the lost ones in the
target with a scan of it: three Spark jobs of 0.3-1 s each on two cores,
however few rows a tick moves. A composed view pays that for every
linear part it keeps (TPC-DS q2, q5), so its tick cost several full ones.

When the changes are small, the driver computes the same correction:

1. per block (each branch of a ``UNION ALL``), the changed inputs' rows
   joined with their partners fetched by key, as the in-place aggregates'
   driver route does (:func:`~.in_place_join.joined_sides`: inner joins,
   one ``LEFT JOIN``, semi-joins), each term with its sign;
2. the rows that pass the block's condition, its select list evaluated
   over them with Spark's types (:class:`~..driver.arrow_eval.ArrowEvaluator`),
   cast to the target's;
3. the gained and lost rows netted against each other (the terms
   telescope through states that never existed); the gained ones are
   inserted, and each lost one retracts a copy of itself in the target
   (by value, lowest ``(_file, _pos)`` first), found among the rows that
   hold its value in the indexed column matching fewest (counted in the
   file cache's sorted indexes), or in the whole target when small. A lost
   row the target lacks (a hand edit) leaves the tick to Spark, whose
   route reads the target whole.

Whatever the driver refuses (a shape, type or expression it does not
evaluate exactly, more changed rows than ``CT_DRIVER_DIFF_ROWS``, a target
larger than the driver reads, a verified tick) leaves the tick to Spark's
linear route: the decision is the same, only where it is computed moves.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from airflow_provider_ct.core.tables import live_rows
from airflow_provider_ct.ivm.changes.snapshot_files import DRIVER_READ_FILES
from airflow_provider_ct.ivm.driver.arrow_eval import ArrowEvaluator, NotOnDriver
from airflow_provider_ct.ivm.driver.in_place_driver import Expressions, diff_rows, picked_copies
from airflow_provider_ct.ivm.driver.keyed_rows import SnapshotRows
from airflow_provider_ct.ivm.plan.decision import TickDecision
from airflow_provider_ct.ivm.plan.planner import LINEAR
from airflow_provider_ct.spark.fingerprints import Correction
from airflow_provider_ct.spark.ivm.in_place import Aggregation
from airflow_provider_ct.spark.ivm.in_place_join import (
    JoinedChange,
    JoinedSides,
    joined_change,
    joined_sides,
    report,
)
from airflow_provider_ct.spark.ivm.keyed_linear import (
    block_outputs,
    driver_aggregation,
    driver_sides,
    on_driver_or_none,
    typed_rows,
    whole_target,
)
from airflow_provider_ct.spark.tick import Computed, Target, Tick

log = logging.getLogger(__name__)

#: Where the report says a linear tick was computed (``linear_on``).
ON_DRIVER = "driver"

Snapshots = Mapping[str, Mapping[str, int | None]]


def linear_driver_computed(tick: Tick, target: Target, decision: TickDecision) -> Computed | None:
    """A linear tick computed on the driver, or None (Spark's linear route)."""
    plan = decision.plan
    if plan.strategy != LINEAR or plan.nested is not None or any(b.keyed for b in plan.blocks):
        return None
    agg = driver_aggregation(tick, target, decision)
    if agg is None or decision.base is None:
        return None
    if live_rows(agg.table, agg.base_snapshot_id) > _target_limit(agg):
        return None
    inputs = tick.inputs()
    reads = []
    for index in range(len(plan.blocks)):
        block = _block_aggregation(agg, index)
        read = joined_change(tick, block, inputs, decision.base.before, least_inputs=1)
        if read is None:
            return None
        reads.append((block, read))
    snapshots = driver_sides(tick, decision)
    correction = on_driver_or_none(
        "the linear tick", lambda: _correction(agg, reads, inputs, snapshots)
    )
    if correction is None:
        return None
    details = _merged([report(read) for _, read in reads])
    return Computed.of(decision, correction, {**details, **correction.notes})


def _merged(reports: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """The blocks' reports as one: counts added, per-input maps joined."""
    out: dict[str, Any] = {"linear_on": ON_DRIVER}
    for one in reports:
        for key, value in one.items():
            have = out.get(key)
            if isinstance(value, int) and isinstance(have, int):
                out[key] = have + value
            elif isinstance(value, dict) and isinstance(have, dict):
                out[key] = {**have, **value}
            else:
                out[key] = value
    return out


def _target_limit(agg: Aggregation) -> int:
    """Most rows of the target the driver reads (the keyed linear route's limit)."""
    return max(agg.driver_rows, agg.target_rows_on_driver)


def _block_aggregation(agg: Aggregation, index: int) -> Aggregation:
    """``agg`` over the plan's block ``index`` alone (its analyses kept apart)."""
    plan = replace(agg.plan, blocks=(agg.plan.blocks[index],))
    key = (*agg.analysis_key, "block", index) if agg.analysis_key is not None else None
    return replace(agg, plan=plan, analysis_key=key)


def _correction(
    agg: Aggregation,
    reads: Sequence[tuple[Aggregation, JoinedChange]],
    inputs: Mapping[str, Any],
    snapshots: Snapshots,
) -> Correction:
    """The correction: the gained rows inserted, each lost row retracting a copy of itself."""
    assert agg.base_snapshot_id is not None
    reader = SnapshotRows(agg.table, agg.base_snapshot_id, agg.columns)
    schema = reader.empty.schema
    plus, minus = _netted(*_signed_rows(agg, reads, inputs, snapshots, schema), agg.columns)
    if not minus.num_rows:
        log.info("linear rows on the driver: +%d", plus.num_rows)
        correction = Correction(plus, [], plus.num_rows, 0, diffed_on="driver")
        correction.notes.update(target_rows_read=0)
        return correction
    have = _located(agg, reader, minus)
    retractions = picked_copies(have, minus, agg.columns)
    if len(retractions) != minus.num_rows:  # drifted (a hand edit): Spark reads it whole
        raise NotOnDriver(f"the target lacks {minus.num_rows - len(retractions)} lost rows")
    log.info("linear rows on the driver: +%d -%d", plus.num_rows, len(retractions))
    correction = Correction(plus, retractions, plus.num_rows, len(retractions), diffed_on="driver")
    correction.notes.update(target_rows_read=have.num_rows)
    return correction


def _signed_rows(
    agg: Aggregation,
    reads: Sequence[tuple[Aggregation, JoinedChange]],
    inputs: Mapping[str, Any],
    snapshots: Snapshots,
    schema: pa.Schema,
) -> tuple[pa.Table, pa.Table]:
    """The rows every block gained and lost, as the target's columns and types."""
    names = [f.name for f in agg.schema.fields]
    plus, minus = [schema.empty_table()], [schema.empty_table()]
    for block, read in reads:
        outputs = block_outputs(block, read.columns)
        joined = joined_sides(
            block, read, inputs, snapshots, Expressions(None, outputs, (), frozenset())
        )
        for sign, evaluator in joined.sides:
            rows = typed_rows(_passing(evaluator, joined), outputs, names, agg.columns, schema)
            (plus if sign > 0 else minus).append(rows)
    return pa.concat_tables(plus), pa.concat_tables(minus)


def _netted(plus: pa.Table, minus: pa.Table, columns: Sequence[str]) -> tuple[pa.Table, pa.Table]:
    """The rows gained and lost net of each other (multisets by value).

    The terms telescope through states that were never the target's (the
    changed inputs joined one at a time), so a row one term removes and
    another adds back is in neither the target nor the correction.
    """
    if not plus.num_rows or not minus.num_rows:
        return plus, minus
    count = minus.num_rows
    placed = minus.append_column("_file", pa.array([""] * count, pa.string()))
    placed = placed.append_column("_pos", pa.array(np.arange(count, dtype=np.int64)))
    diff = diff_rows(plus, placed, columns)
    return diff.inserts, minus.take(pa.array([p for _, p in diff.retractions], pa.int64()))


def _passing(evaluator: ArrowEvaluator, joined: JoinedSides) -> ArrowEvaluator:
    """The evaluator of ``evaluator``'s rows that pass the block's condition."""
    if joined.where is None or not evaluator.rows.num_rows:
        return evaluator
    kept = evaluator.rows.filter(evaluator.mask(joined.where))
    return ArrowEvaluator.joined(kept, joined.types)


def _located(agg: Aggregation, reader: SnapshotRows, lost: pa.Table) -> pa.Table:
    """The target's rows (with ``_file``, ``_pos``) that may equal a ``lost`` row: those
    holding a lost row's value in the indexed column that matches fewest (or the whole
    target, when small), then in the two columns whose lost values vary most."""
    have = _by_index(reader, lost, agg.columns) if reader.files <= DRIVER_READ_FILES else None
    if have is None:
        have = whole_target(agg)
    spread = sorted(agg.columns, key=lambda c: -pc.count_distinct(lost.column(c)).as_py())
    for column in spread[:2]:  # a row equal to a lost one holds its value in every column
        wanted = lost.column(column).cast(have.schema.field(column).type)
        have = have.filter(pc.is_in(have.column(column), value_set=wanted, skip_nulls=False))
    return have


def _by_index(reader: SnapshotRows, lost: pa.Table, columns: Sequence[str]) -> pa.Table | None:
    """The rows found through the indexed column whose lost values match fewest target
    rows (counted in the sorted indexes); None: no column is indexed."""
    counted = []
    for column in columns:
        values = lost.column(column)
        if values.null_count:
            continue  # a lookup never matches NULL
        count = reader.count(column, pc.unique(values))
        if count is not None:
            counted.append((count, column))
    if not counted:
        return None
    column = min(counted)[1]
    return reader.located_by_index(column, lost.column(column))
