"""One tick of a view whose aggregates are kept in place: incremental, or a rebuild.

The ``aggregate`` strategy (:mod:`.in_place`) runs when the target's history
allows an incremental tick (:mod:`airflow_provider_ct.ivm.plan.history`),
the refresh rules do not send it full, and the kept state reflects exactly
the input snapshots the change starts from
(:mod:`airflow_provider_ct.ivm.state.table`). Otherwise the tick *rebuilds*:
the state of every group from the pinned inputs in one scan, and the full
correction from it, so the next tick finds a state to add to. Either way
the state is kept once the batch is staged (:func:`keep_state`).

:class:`~airflow_provider_ct.exceptions.NotInPlaceError` (inexact types,
too many groups) and a ``verify_every`` tick (the N-th) leave the view to its
fallback plan (``group``, ``partition`` or ``full``), run by the write job.
"""

from __future__ import annotations

import logging
from typing import Any

from airflow_provider_ct.core.query import query_hash
from airflow_provider_ct.core.settings import SMALL_RESULT_ROWS, rows_on_driver
from airflow_provider_ct.core.tables import live_bytes
from airflow_provider_ct.exceptions import (
    ChangesUnavailableError,
    IncrementalMismatchError,
    NotInPlaceError,
    StateMismatchError,
)
from airflow_provider_ct.ivm.changes.snapshot_files import snapshot_schema
from airflow_provider_ct.ivm.changes.table_changes import (
    TableChanges,
    changes_report,
    estimated_change_rows,
    table_changes,
)
from airflow_provider_ct.ivm.driver.driver_join import NEW, OLD
from airflow_provider_ct.ivm.plan.history import incremental_base
from airflow_provider_ct.ivm.plan.planner import AGGREGATE, FULL, referenced_columns
from airflow_provider_ct.ivm.plan.refresh import join_reads_reason
from airflow_provider_ct.ivm.state.table import read_state, write_state
from airflow_provider_ct.spark.ivm.analysis_cache import analysis_key
from airflow_provider_ct.spark.ivm.in_place import (
    Aggregation,
    InPlaceResult,
    change_state,
    check_types,
    correct,
    driver_change_state,
    full_state,
)
from airflow_provider_ct.spark.ivm.in_place_join import joined_change, joined_change_state
from airflow_provider_ct.spark.ivm.in_place_join import report as joined_report
from airflow_provider_ct.spark.ivm.input_changes import bind_inputs
from airflow_provider_ct.spark.ivm.refresh_rules import auto_full_reason
from airflow_provider_ct.spark.tick import Computed, Target, Tick

log = logging.getLogger("airflow_provider_ct.write_job")


def in_place_computed(tick: Tick, target: Target) -> Computed | None:
    """The tick's correction through the kept state, or None: run ``tick.plan`` (its fallback).

    On None, ``tick.plan`` has been replaced by the fallback plan, with why.
    """
    inputs, key = tick.input_tables, tick.analysis_key  # as the job loaded them
    if inputs is None or key is None or set(inputs) != set(tick.desc.inputs):
        inputs = {name: tick.input_table(name) for name in tick.desc.inputs}
        key = analysis_key(tick.spark, tick.sql, inputs, tick.desc.inputs)
    agg = Aggregation(
        tick.spark,
        tick.plan,
        tick.config.name,
        tick.input_views,
        target.query_schema,
        target.columns,
        tick.scratch,
        SMALL_RESULT_ROWS,
        driver_rows=rows_on_driver(),
        table=target.table if target.schema_change is None else None,
        base_snapshot_id=tick.desc.base_snapshot_id,
        analysis_key=key,
    )
    try:
        check_types(agg)
        return _computed(tick, target, agg, inputs)
    except NotInPlaceError as exc:
        log.info("aggregates not kept in place: %s", exc)
        tick.plan = tick.plan.fallback(str(exc))
        return None


def _computed(tick: Tick, target: Target, agg: Aggregation, inputs: dict[str, Any]) -> Computed:
    base, why = None, "the target has no rows yet"
    if target.has_rows:
        base, why = incremental_base(target.table, tick.desc, sql=tick.sql, inputs=inputs)
    if base is not None:
        verify = tick.verify_every
        if verify > 0 and base.incremental_ticks + 1 >= verify:
            raise NotInPlaceError(f"verify_every={verify}: the fallback's tick is verified")
        why = auto_full_reason(tick, inputs, base.before, target.table) or ""
    if base is not None and not why:
        try:
            kept, _ = read_state(tick.catalog, tick.desc.target, query_hash(tick.sql), base.before)
            result, details = _incremental(tick, target, agg, inputs, base.before, kept)
            return _done(result, AGGREGATE, tick.plan.reason, base.incremental_ticks + 1, details)
        except (StateMismatchError, ChangesUnavailableError, IncrementalMismatchError) as exc:
            why = f"the kept aggregate state is rebuilt: {exc}"
    log.info("rebuilding the aggregate state of %s: %s", tick.desc.target, why)
    result = correct(agg, lambda: target.persisted, None, full_state(agg))
    return _done(result, FULL, why, 0, {"aggregate_state": "rebuilt"})


def _check_join_reads(tick: Tick, inputs: dict[str, Any], before: dict[str, int | None]) -> None:
    """Raise :class:`NotInPlaceError` when Spark's delta-rule joins read about what full reads.

    Decided from snapshot summaries before Spark reads anything (the driver's
    keyed joins, tried first, read only matches); the fallback plan then
    runs with its own rules (``refresh="auto"`` only).
    """
    pinned = tick.desc.inputs
    sizes = {name: live_bytes(inputs[name], snap) for name, snap in pinned.items()}
    changed = [name for name, snap in pinned.items() if before.get(name) != snap]
    reason = join_reads_reason(sizes, changed, tick.read_share)
    if reason is not None:
        raise NotInPlaceError(reason)


def _incremental(
    tick: Tick,
    target: Target,
    agg: Aggregation,
    inputs: dict[str, Any],
    before: dict[str, int | None],
    kept: Any,
) -> tuple[InPlaceResult, dict[str, Any]]:
    """The tick from the kept state: on the driver when it can, else with Spark's jobs."""
    read = _one_input_change(tick, agg, inputs, before)
    if read is not None and _rows(read[1]) <= agg.driver_rows:
        name, changes = read
        tick.clock.lap("changes")
        change = driver_change_state(agg, changes.inserted, changes.deleted, kept.schema)
        if change is not None:
            result = correct(agg, lambda: target.persisted, kept, change)
            return result, {**_report(name, changes), "change_state_on": "driver"}
    known = {read[0]: read[1]} if read is not None else None
    joined = joined_change(tick, agg, inputs, before)
    if joined is not None:
        tick.clock.lap("changes")
        sides = {NEW: dict(tick.desc.inputs), OLD: before}
        change = joined_change_state(agg, joined, inputs, sides, kept.schema)
        if change is not None:
            result = correct(agg, lambda: target.persisted, kept, change)
            details = {**joined_report(joined), "aggregate_state": "kept"}
            return result, {**details, "change_state_on": "driver"}
        known = joined.changes
    _check_join_reads(tick, inputs, before)
    bindings = bind_inputs(
        tick.spark, tick.config, tick.plan, inputs, before, tick.desc.inputs, tick.scratch, known
    )
    try:
        tick.clock.lap("changes")
        result = correct(agg, lambda: target.persisted, kept, change_state(agg, bindings))
    finally:
        bindings.release_arrow()
    return result, {**bindings.report(), "aggregate_state": "kept", "change_state_on": "spark"}


def _one_input_change(
    tick: Tick, agg: Aggregation, inputs: dict[str, Any], before: dict[str, int | None]
) -> tuple[str, TableChanges] | None:
    """The change of a one-input view, read on the driver, when it is small enough for it.

    Read before any Spark view is made: a tick the driver computes needs none.
    """
    block = agg.plan.blocks[0]
    if len(block.inputs) != 1 or agg.driver_rows <= 0:
        return None
    name = block.inputs[0]
    after = tick.desc.inputs.get(name)
    if after is None or estimated_change_rows(inputs[name], before.get(name), after) > (
        agg.driver_rows
    ):
        return None
    schema = snapshot_schema(inputs[name], inputs[name].metadata.snapshot_by_id(after))
    columns = referenced_columns(tick.plan, {name: schema.column_names}, tick.config.name)
    changes = table_changes(inputs[name], before.get(name), after, columns=columns[name])
    return name, changes  # larger than the driver takes: Spark's jobs start from it


def _report(name: str, changes: TableChanges) -> dict[str, Any]:
    """What the report says of a change read on the driver (as ``Bindings.report``)."""
    return {**changes_report({name: changes}), "aggregate_state": "kept"}


def _rows(changes: TableChanges) -> int:
    return int(changes.inserted.num_rows + changes.deleted.num_rows)


def _done(
    result: InPlaceResult, strategy: str, reason: str, ticks: int, details: dict[str, Any]
) -> Computed:
    notes = {**details, **result.correction.notes, "state_groups": result.groups}
    return Computed(result.correction, strategy, reason, ticks, notes, state=result.state)


def keep_state(tick: Tick, computed: Computed) -> None:
    """Keep the state a tick computed, for the input snapshots it pinned (after staging)."""
    if computed.state is None:
        return
    digest = query_hash(tick.sql)
    write_state(tick.catalog, tick.desc.target, computed.state, digest, tick.desc.inputs)
