"""One tick of a view whose aggregates are kept in place: incremental, or a rebuild.

The ``aggregate`` strategy (:mod:`.in_place`) runs when the target's history
allows an incremental tick (:mod:`airflow_provider_ct.ivm.plan.history`),
the refresh rules do not send it full, and the kept state reflects exactly
the input snapshots the change starts from
(:mod:`airflow_provider_ct.ivm.state.table`). Otherwise the tick *rebuilds*:
the state of every group from the pinned inputs in one scan, and the full
correction from it, so the next tick finds a state to add to. Either way
the state is kept once the batch is staged (:func:`keep_state`).

Which of the two runs is the tick's decision
(:mod:`airflow_provider_ct.ivm.plan.decision`). What this finds while
computing (inexact types, too many groups, a kept state that does not fit)
it returns as a :class:`~airflow_provider_ct.ivm.plan.decision.Fallback`,
and the job asks the decision again.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from airflow_provider_ct.core.query import query_hash
from airflow_provider_ct.core.settings import (
    full_rows_on_driver,
    rows_on_driver,
    state_groups_on_driver,
)
from airflow_provider_ct.core.tables import live_bytes
from airflow_provider_ct.exceptions import (
    ChangesUnavailableError,
    IncrementalMismatchError,
    KeyedReadError,
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
from airflow_provider_ct.ivm.driver.kept_state import KeptState, StateDelta
from airflow_provider_ct.ivm.plan.columns import referenced_columns
from airflow_provider_ct.ivm.plan.decision import Action, Discovery, Fallback, TickDecision
from airflow_provider_ct.ivm.plan.refresh import join_reads_reason
from airflow_provider_ct.ivm.plan.sizes import read_check
from airflow_provider_ct.ivm.state.table import state_head, write_state, write_state_delta
from airflow_provider_ct.spark.ivm.analysis_cache import analysis_key
from airflow_provider_ct.spark.ivm.fixed_lists import inline_fixed_lists
from airflow_provider_ct.spark.ivm.in_place import (
    Aggregation,
    InPlaceResult,
    change_state,
    correct,
    driver_change_state,
    full_state,
    inexact_types,
    unsummed_squares,
)
from airflow_provider_ct.spark.ivm.in_place_join import joined_change, joined_change_state
from airflow_provider_ct.spark.ivm.in_place_join import report as joined_report
from airflow_provider_ct.spark.ivm.in_place_rescan import ExtremaReader
from airflow_provider_ct.spark.ivm.input_changes import bind_inputs
from airflow_provider_ct.spark.ivm.keyed_driver import keyed_change_state, keyed_read
from airflow_provider_ct.spark.ivm.keyed_driver import report as keyed_report
from airflow_provider_ct.spark.ivm.nested import inner_schema
from airflow_provider_ct.spark.ivm.parameters import inline_parameters
from airflow_provider_ct.spark.tick import Computed, Target, Tick

log = logging.getLogger("airflow_provider_ct.write_job")


def in_place_computed(tick: Tick, target: Target, decision: TickDecision) -> Computed | Fallback:
    """Carry out an ``in place`` or ``rebuild`` decision; or what sends the tick elsewhere.

    A ``not in place`` fallback: the aggregates cannot be kept (inexact
    types, too many groups, a sum past its type, joins that read what the
    full correction reads). A ``state unusable`` one: the kept state does
    not fit the change. The job asks the decision again with it.
    """
    agg = aggregation(tick, target, decision)
    inexact = inexact_types(agg)
    if inexact is not None:
        log.info("aggregates not kept in place: %s", inexact)
        return Fallback(Discovery.NOT_IN_PLACE, inexact)
    try:
        if decision.action is Action.REBUILD:
            log.info("rebuilding the aggregate state of %s: %s", tick.desc.target, decision.reason)
            result = correct(agg, lambda: target.persisted, None, full_state(agg))
            return _done(decision, result, {"aggregate_state": "rebuilt"})
        return _kept(tick, target, agg, decision)
    except NotInPlaceError as exc:  # found while computing: too many groups, an overflow
        log.info("aggregates not kept in place: %s", exc)
        return Fallback(Discovery.NOT_IN_PLACE, str(exc))


def aggregation(tick: Tick, target: Target, decision: TickDecision) -> Aggregation:
    """The tick's view as the driver's evaluations take it: plan, views, target, limits
    (a linear plan's too, :mod:`.keyed_linear`: it has no in-place part)."""
    inputs, key = tick.input_tables, tick.analysis_key  # as the job loaded them
    if inputs is None or key is None or set(inputs) != set(tick.desc.inputs):
        key = analysis_key(tick.spark, tick.sql, tick.inputs(), tick.desc.inputs)
    plan, views = decision.plan, tick.input_views
    schema, columns, table = target.query_schema, target.columns, target.table
    if plan.nested is not None:  # the state is the inner select's; the outer reads its rows
        schema = inner_schema(tick.spark, plan, views, tick.config.name, key)
        columns = [f.name for f in schema.fields]
    return Aggregation(
        tick.spark,
        plan,
        tick.config.name,
        views,
        schema,
        columns,
        tick.scratch,
        state_groups_on_driver(),
        driver_rows=rows_on_driver(),
        target_rows_on_driver=_target_rows_on_driver(table, tick.desc.base_snapshot_id),
        table=table if target.schema_change is None else None,
        base_snapshot_id=tick.desc.base_snapshot_id,
        analysis_key=key,
        target_columns=target.columns if plan.nested is not None else None,
    )


def _target_rows_on_driver(table: Any, snapshot_id: int | None) -> int:
    """Most target rows the driver reads to diff (0 without a target or a base)."""
    if table is None or snapshot_id is None:
        return 0
    return full_rows_on_driver(live_bytes(table, snapshot_id))


def _kept(
    tick: Tick, target: Target, agg: Aggregation, decision: TickDecision
) -> Computed | Fallback:
    """The tick from the kept state; a kept state that does not fit is a ``state unusable``."""
    assert decision.base is not None
    before = decision.base.before
    try:
        kept = KeptState(state_head(tick.catalog, tick.desc.target, query_hash(tick.sql), before))
        outcome = _incremental(tick, target, agg, before, kept)
    except KeyedReadError as exc:  # the keyed rule does not serve this tick: not the state
        return Fallback(Discovery.NOT_KEYED, str(exc), exc.details)
    except (StateMismatchError, ChangesUnavailableError, IncrementalMismatchError) as exc:
        return Fallback(Discovery.STATE_UNUSABLE, str(exc))
    if isinstance(outcome, Fallback):
        return outcome
    result, details = outcome
    return _done(decision, result, details)


def _moved(tick: Tick, before: Mapping[str, int | None]) -> frozenset[str]:
    """The inputs whose pinned snapshot moved since the last batch."""
    return frozenset(n for n, snap in tick.desc.inputs.items() if before.get(n) != snap)


def _join_reads(tick: Tick, before: Mapping[str, int | None]) -> Fallback | None:
    """A ``not in place`` fallback when Spark's delta-rule joins read about what full reads.

    Decided from snapshot summaries before Spark reads anything (the driver's
    keyed joins, tried first, read only matches); the fallback plan then
    runs with its own rules (``refresh="auto"`` only).
    """
    pinned, inputs = tick.desc.inputs, tick.inputs()
    sizes = {name: live_bytes(inputs[name], snap) for name, snap in pinned.items()}
    reason = join_reads_reason(sizes, _moved(tick, before), tick.settings.read_share)
    return None if reason is None else Fallback(Discovery.NOT_IN_PLACE, reason)


def _incremental(
    tick: Tick,
    target: Target,
    agg: Aggregation,
    before: Mapping[str, int | None],
    kept: KeptState,
) -> tuple[InPlaceResult, dict[str, Any]] | Fallback:
    """The tick from the kept state: on the driver when it can, else with Spark's jobs
    (whose terms maintain a subquery's changed table by its rule, semi-joins' and
    parameters' included, :mod:`.subquery_terms`)."""
    inputs = tick.inputs()
    agg = replace(agg, inputs=inputs, pins=dict(tick.desc.inputs))
    reader = ExtremaReader(agg, kept.schema)  # the groups whose extremum a deletion removed
    driver = inline_fixed_lists(agg, tick.desc.inputs, before)  # what the driver evaluates
    driver = inline_parameters(driver, tick.desc.inputs, before)
    read = _one_input_change(tick, driver, inputs, before)
    if read is not None and _rows(read[1]) <= agg.driver_rows:
        name, changes = read
        tick.clock.lap("changes")
        change = driver_change_state(driver, changes.inserted, changes.deleted, kept.schema)
        if change is not None:
            result = correct(agg, lambda: target.persisted, kept, change, reader)
            details = {**_report(name, changes), "change_state_on": "driver"}
            return result, {**details, **reader.notes}
    known = {read[0]: read[1]} if read is not None else None
    sides = {NEW: dict(tick.desc.inputs), OLD: dict(before)}
    for read_of, state_of, report_of in _JOINED_ROUTES:
        joined = read_of(tick, driver, inputs, before)
        if joined is None:
            continue
        tick.clock.lap("changes")
        change = state_of(driver, joined, inputs, sides, kept.schema)
        if change is not None:
            result = correct(agg, lambda: target.persisted, kept, change, reader)
            details = {**report_of(joined), "aggregate_state": "kept"}
            return result, {**details, "change_state_on": "driver", **reader.notes}
        known = joined.changes
    return _on_spark(tick, target, agg, before, kept, reader, known)


#: The driver's routes over several inputs, tried in order (each None when it does not
#: apply): the delta rules' joined terms, then a keyed block's two sides.
_JOINED_ROUTES: tuple[tuple[Any, Any, Any], ...] = (
    (joined_change, joined_change_state, joined_report),
    (keyed_read, keyed_change_state, keyed_report),
)


def _on_spark(
    tick: Tick,
    target: Target,
    agg: Aggregation,
    before: Mapping[str, int | None],
    kept: KeptState,
    reader: ExtremaReader,
    known: Mapping[str, TableChanges] | None,
) -> tuple[InPlaceResult, dict[str, Any]] | Fallback:
    """The change's state from Spark's delta-rule terms (or a keyed block's two terms)."""
    unsummed = unsummed_squares(agg)
    if unsummed is not None:
        return Fallback(Discovery.NOT_IN_PLACE, unsummed)
    # Keyed subqueries' tables changed: the block is read restricted to the keys, not
    # joined with the inputs read whole, so the join-reads rule does not price it
    # (the keyed reads are priced by the files their keys reach, in bind_inputs).
    if not agg.plan.keyed_inputs & _moved(tick, before):
        costly = _join_reads(tick, before)
        if costly is not None:
            return costly
    bindings = bind_inputs(
        tick.spark,
        tick.config,
        agg.plan,
        dict(agg.inputs or tick.inputs()),
        dict(before),
        tick.desc.inputs,
        tick.scratch,
        known,
        check_reads=read_check(tick.pinned(), target.table, tick.desc.base_snapshot_id),
    )
    try:
        tick.clock.lap("changes")
        change = change_state(agg, bindings)
        result = correct(agg, lambda: target.persisted, kept, change, reader)
    finally:
        bindings.release_arrow()
    details = {**bindings.report(), "aggregate_state": "kept", "change_state_on": "spark"}
    return result, {**details, **reader.notes}


def _one_input_change(
    tick: Tick, agg: Aggregation, inputs: dict[str, Any], before: Mapping[str, int | None]
) -> tuple[str, TableChanges] | None:
    """The change of a one-input view, read on the driver, when it is small enough for it.

    Read before any Spark view is made: a tick the driver computes needs none.
    """
    block = agg.plan.blocks[0]
    if len(block.inputs) != 1 or agg.driver_rows <= 0 or block.fixed or agg.parameters:
        return None  # a subquery is evaluated by Spark, a parameter by the joined route
    name = block.inputs[0]
    after = tick.desc.inputs.get(name)
    if after is None or estimated_change_rows(inputs[name], before.get(name), after) > (
        agg.driver_rows
    ):
        return None
    schema = snapshot_schema(inputs[name], inputs[name].metadata.snapshot_by_id(after))
    columns = referenced_columns(agg.plan, {name: schema.column_names}, tick.config.name)
    changes = table_changes(inputs[name], before.get(name), after, columns=columns[name])
    return name, changes  # larger than the driver takes: Spark's jobs start from it


def _report(name: str, changes: TableChanges) -> dict[str, Any]:
    """What the report says of a change read on the driver (as ``Bindings.report``)."""
    return {**changes_report({name: changes}), "aggregate_state": "kept"}


def _rows(changes: TableChanges) -> int:
    return int(changes.inserted.num_rows + changes.deleted.num_rows)


def _done(decision: TickDecision, result: InPlaceResult, details: dict[str, Any]) -> Computed:
    notes = {**details, **result.correction.notes, "state_groups": result.groups}
    return Computed.of(decision, result.correction, notes, state=result.state)


def keep_state(tick: Tick, computed: Computed) -> None:
    """Keep the state a tick computed, for the input snapshots it pinned (after staging)."""
    if computed.state is None:
        return
    digest = query_hash(tick.sql)
    if isinstance(computed.state, StateDelta):
        delta = computed.state
        write_state_delta(
            delta.head, delta.rows, delta.retracted, digest, tick.desc.inputs, batch_id=tick.desc.id
        )
        return
    write_state(
        tick.catalog,
        tick.desc.target,
        computed.state,
        digest,
        tick.desc.inputs,
        batch_id=tick.desc.id,
    )
