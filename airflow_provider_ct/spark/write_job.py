"""The write job: stage the correction that makes a view's table equal its query.

Plain PySpark code, run for a :class:`~airflow_provider_ct.spark.jobs.ViewWrite`
spec by :mod:`.job_main` under ``spark-submit`` or by the warm driver, and
callable in-process with :func:`run_write` (tests, notebooks).

Given a batch description it

1. refuses to work if the target's head is no longer the description's base
   (another writer got there first: report ``outdated``, stage nothing);
2. binds every input pinned to its snapshot from the description, when
   Spark first needs them (:mod:`.pinned_query`; a tick kept in place on
   the driver with known types never does);
3. takes the query's schema (Spark's analysis, kept by a warm driver),
   creating the target from it on first use (:mod:`.target`);
   a query whose columns changed gets the schema ``on_schema_change``
   allows, planned but not committed: the batch is staged under it and the
   append commits it in the batch's own commit
   (:mod:`airflow_provider_ct.core.schema_change`);
4. computes the correction: incrementally from the inputs' changes where
   the query's plan (:mod:`airflow_provider_ct.ivm.plan.planner`) and the
   target's history (:mod:`airflow_provider_ct.ivm.plan.history`) allow (see
   :mod:`.incremental`), else ``desired - persisted`` in full (see
   :mod:`.correction`); ``refresh="auto"`` runs in full where the refresh
   rules (:mod:`airflow_provider_ct.ivm.plan.refresh`) say it is cheaper;
5. stages inserts as Parquet and retractions as a position-delete file under
   the table location, and writes the staged-batch manifest (see
   :mod:`.stage_correction`).

Nothing becomes visible until ``AppendOperator`` compare-and-appends it.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from airflow_provider_ct.core.catalog import CatalogConfig
from airflow_provider_ct.core.description import BatchDescription
from airflow_provider_ct.core.faults import failpoint
from airflow_provider_ct.core.keys import SummaryKeys
from airflow_provider_ct.core.layout import TargetSettings
from airflow_provider_ct.core.query import ParsedQuery, parse_query, query_hash
from airflow_provider_ct.core.refresh_state import view_batch_summary
from airflow_provider_ct.core.reports import WriteReport, WriteStatus
from airflow_provider_ct.core.settings import full_rows_on_driver
from airflow_provider_ct.core.staging import outdated_reason
from airflow_provider_ct.core.tables import (
    UNKNOWN_ROWS,
    live_bytes,
    live_rows,
    load_table_or_none,
)
from airflow_provider_ct.exceptions import (
    ChangesUnavailableError,
    CompositionError,
    CTError,
    IncrementalMismatchError,
    KeyedReadError,
    ServiceUnavailableError,
)
from airflow_provider_ct.ivm.plan.compose import COMPOSED
from airflow_provider_ct.ivm.plan.decision import (
    Action,
    Discovery,
    Fallback,
    RefreshSettings,
    TickDecision,
    TickFacts,
    decide,
)
from airflow_provider_ct.ivm.plan.history import incremental_base
from airflow_provider_ct.ivm.plan.modes import RefreshMode
from airflow_provider_ct.ivm.plan.planner import FULL, Plan, choose_plan
from airflow_provider_ct.ivm.plan.refresh import full_diff_on_driver
from airflow_provider_ct.ivm.plan.sizes import keyed_read_history, read_check, size_rules
from airflow_provider_ct.spark.composed import ComposedQuery, composed_tick, fitted_to_view
from airflow_provider_ct.spark.correction import correction_difference
from airflow_provider_ct.spark.diff import compute_correction
from airflow_provider_ct.spark.fingerprints import Correction
from airflow_provider_ct.spark.ivm.in_place_tick import in_place_computed, keep_state
from airflow_provider_ct.spark.ivm.incremental import incremental_correction
from airflow_provider_ct.spark.ivm.input_changes import Scratch, bind_inputs
from airflow_provider_ct.spark.ivm.keyed_linear import keyed_linear_computed
from airflow_provider_ct.spark.ivm.linear_driver import linear_driver_computed
from airflow_provider_ct.spark.pinned_query import (
    PinnedQuery,
    PinnedViews,
    input_columns,
    input_tables,
)
from airflow_provider_ct.spark.stage_correction import stage_correction
from airflow_provider_ct.spark.target import prepare_target
from airflow_provider_ct.spark.tick import Computed, PhaseClock, Target, Tick

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = logging.getLogger("airflow_provider_ct.write_job")


def run_write(
    spark: SparkSession,
    config: CatalogConfig,
    sql: str,
    description: BatchDescription,
    *,
    dry_run: bool = False,
    refresh: RefreshMode | str = RefreshMode.AUTO,
    verify_every: int = 0,
    target: TargetSettings | None = None,
) -> WriteReport:
    """Compute and stage one batch. See the module docstring.

    :param refresh: ``auto`` (incremental where the query and the target's
        history allow, else the full correction), ``incremental`` (fail rather
        than fall back for a query that cannot be maintained incrementally)
        or ``full`` (always the full correction).
    :param verify_every: run the full correction every N ticks (0: never).
    :param target: the target's layout and ``on_schema_change``
        (:class:`~airflow_provider_ct.core.layout.TargetSettings`).
    """
    desc, mode = description, RefreshMode.parse(refresh)  # in-process callers pass strings
    parsed = parse_query(sql, target=desc.target, catalog_name=config.name)
    catalog = config.load()
    tables = input_tables(catalog, parsed.inputs)
    plan = choose_plan(parsed, mode, input_columns(tables))
    table = load_table_or_none(catalog, desc.target)
    reason = outdated_reason(table, desc)
    if reason is not None:
        log.info("%s", reason)
        return WriteReport(WriteStatus.OUTDATED, desc.id, desc.target, reason=reason)

    failpoint("write.input-scan")  # the inputs opened, none of their data read yet
    clock = PhaseClock()
    composed = (
        composed_tick(spark, config, sql, desc, table, dry_run, run_write, tables)
        if mode is RefreshMode.AUTO and not plan.incremental
        else None
    )
    views, query, composed = _bound_query(
        spark, config, catalog, parsed, desc, tables, composed, table
    )
    plan, computing = _tick_plan(desc, plan, composed, query, clock)
    if table is None and dry_run:
        return _dry_run_before_creation(desc, query, plan)
    prepared = prepare_target(
        spark, config, catalog, desc, table, query, target or TargetSettings(), dry_run=dry_run
    )
    if prepared is None:
        reason = "target was created and written concurrently"
        return WriteReport(WriteStatus.OUTDATED, desc.id, desc.target, reason=reason)
    clock.lap("prepare")
    settings = RefreshSettings.of(mode, verify_every)
    scratch = Scratch(spark, prepared.table)
    tick = Tick(
        *(spark, config, catalog, sql, computing, plan, settings, scratch, clock, views),
        {**(tables or {}), **(query.tables or {})} if tables is not None else None,
        query.key,
        composed=composed,
        minted=desc if computing is not desc else None,
    )
    try:
        return _compute_and_stage(tick, prepared, dry_run)
    finally:
        tick.scratch.remove()


def _tick_plan(
    desc: BatchDescription,
    plan: Plan,
    composed: ComposedQuery | None,
    query: PinnedQuery,
    clock: PhaseClock,
) -> tuple[Plan, BatchDescription]:
    """The plan the tick runs, and the description it computes over: a composed tick whose
    query over the parts is incremental reads the parts' changes, so it pins them too."""
    if composed is None:
        return plan, desc
    top = _top_plan(composed, query.tables)
    clock.lap("parts")
    return top, replace(desc, inputs=dict(composed.pins)) if top.incremental else desc


def _top_plan(composed: ComposedQuery, tables: dict[str, Any] | None) -> Plan:
    """The plan of the query over the parts: the planner's over the parts' tables (their
    changes are read like any input's), else in full over them."""
    composition = composed.composition
    plan = choose_plan(composed.parsed, RefreshMode.AUTO, input_columns(tables))
    steps = (*composition.explain(), *plan.steps)
    if plan.incremental:
        return replace(plan, reason=f"{composition.reason}: {plan.reason}", steps=steps)
    return Plan(FULL, f"{composition.reason}: {plan.reason}", steps=steps)


def _dry_run_before_creation(desc: BatchDescription, query: PinnedQuery, plan: Plan) -> WriteReport:
    """A dry run's report for a target not created yet: the rows a first tick would insert."""
    return WriteReport(
        WriteStatus.DRY_RUN,
        desc.id,
        desc.target,
        rows_to_insert=query.frame.count(),
        reason="target does not exist yet",
        extra={"strategy": FULL, "plan": plan.explain()},
    )


def _bound_query(
    spark: SparkSession,
    config: CatalogConfig,
    catalog: Any,
    parsed: ParsedQuery,
    desc: BatchDescription,
    tables: dict[str, Any] | None,
    composed: ComposedQuery | None,
    target: Any = None,
) -> tuple[PinnedViews, PinnedQuery, ComposedQuery | None]:
    """The view's query bound to its pins; a composed tick's, the query over its parts.

    The query over the parts is analysed here, before anything depends on
    it: one Spark refuses (it never should: it is the user's query with
    tables for its subqueries) runs the tick as written, not never.
    """
    if composed is None:
        views = PinnedViews(spark, config, desc, parsed.inputs)
        return views, PinnedQuery(spark, parsed.sql, parsed, views, tables, desc.inputs), None
    top = composed.parsed
    views = PinnedViews(spark, config, replace(desc, inputs=composed.pins), top.inputs)
    top_tables = input_tables(catalog, top.inputs)
    query = PinnedQuery(spark, top.sql, top, views, top_tables, composed.pins)
    try:
        query.schema  # noqa: B018 - Spark analyses the query over the parts here
    except ServiceUnavailableError:
        raise
    except Exception as exc:  # the query as written still runs
        log.warning("%s: the query over its parts failed analysis (%s): in full", desc.target, exc)
        return _bound_query(spark, config, catalog, parsed, desc, tables, None)
    try:
        fitted = fitted_to_view(composed, query.schema, target) if target is not None else None
    except CompositionError as exc:  # a type the view's column cannot take as it is
        log.info(
            "%s: the query over its parts does not fit the view (%s): in full", desc.target, exc
        )
        return _bound_query(spark, config, catalog, parsed, desc, tables, None)
    if fitted is not None:  # the same query, its sums of sums cast to the view's types
        top, composed = fitted.parsed, fitted
        query = PinnedQuery(spark, top.sql, top, views, top_tables, composed.pins)
    return views, query, composed


def _compute_and_stage(tick: Tick, target: Target, dry_run: bool) -> WriteReport:
    """Compute the correction, then report it (dry run) or stage it."""
    desc, clock = tick.answers, tick.clock
    computed = _compute(tick, target)
    if tick.composed is not None:
        details = {**computed.details, **tick.composed.details(), "top": computed.strategy}
        computed = replace(computed, strategy=COMPOSED, details=details)
    clock.lap("diff")
    correction = computed.correction
    log.info(
        "correction for %s at %s (%s: %s): +%d -%d rows",
        desc.target,
        desc.time,
        computed.strategy,
        computed.reason,
        correction.insert_count,
        correction.retract_count,
    )
    extra = {
        "strategy": computed.strategy,
        "diffed_on": correction.diffed_on,
        "plan": list(computed.explain),  # the plan that ran: a fallback's, if it fell back
        **computed.details,
        "phases": clock.phases,
    }
    if dry_run:
        if correction.release is not None:
            correction.release()
        return WriteReport(
            WriteStatus.DRY_RUN,
            desc.id,
            desc.target,
            rows_to_insert=correction.insert_count,
            rows_to_delete=correction.retract_count,
            reason=computed.reason,
            extra=extra,
        )
    report = stage_correction(
        target.table,
        desc,
        correction,
        _batch_summary(tick, computed),
        clock.lap,
        schema_change=target.schema_change,
    )
    report.reason = computed.reason
    keep_state(tick, computed)
    report.extra = {**extra, "phases": dict(clock.phases)}
    log.info("write job phases (s): %s", clock.summary())
    return report


def _batch_summary(tick: Tick, computed: Computed) -> dict[str, str]:
    """What the batch's snapshot summary records of how it was computed.

    The query's hash lands with the batch: a later tick can then prove
    itself quiet (core/quiet.py) or incremental (ivm/plan/history.py). The
    draft Iceberg materialized-view ``refresh-state`` says the same for
    other engines (core/refresh_state.py).
    """
    digest = query_hash(tick.sql)
    sources = {n: (tick.input_table(n), s) for n, s in tick.answers.inputs.items()}
    rows = min(sum(live_rows(table, snap) for table, snap in sources.values()), UNKNOWN_ROWS)
    computing = sum(v for k, v in tick.clock.phases.items() if k != "prepare")
    return {
        **view_batch_summary(digest, sources, tick.started_ms),
        SummaryKeys.REFRESH: computed.strategy,
        SummaryKeys.INCREMENTAL_TICKS: str(computed.incremental_ticks),
        SummaryKeys.COMPUTE_MS: str(round(computing * 1000)),
        SummaryKeys.INPUT_ROWS: str(rows),
        **_read_share(computed),
        **_parts_read(tick),
    }


def _parts_read(tick: Tick) -> dict[str, str]:
    """A composed batch's parts and the snapshots it read (``ct.parts``): the next tick's
    query over the parts starts from them."""
    if tick.composed is None:
        return {}
    parts = {n: s for n, s in tick.composed.pins.items() if n not in tick.answers.inputs}
    return {SummaryKeys.PARTS: json.dumps(parts, sort_keys=True)}


def _read_share(computed: Computed) -> dict[str, str]:
    """The restricted reads' share, when the read estimate sent this batch in full."""
    estimate = computed.details.get("read_estimate")
    if computed.strategy != FULL or not isinstance(estimate, dict) or "share" not in estimate:
        return {}
    return {SummaryKeys.READ_SHARE: str(estimate["share"])}


#: Fallbacks a tick may find before its decision is one that cannot fall back
#: (in place -> its fallback plan -> full): more means a rule that loops.
_MAX_FALLBACKS = 4


def _compute(tick: Tick, target: Target) -> Computed:
    """The tick's correction: decide, carry out, and decide again on what computing found."""
    facts = _facts(tick, target)
    while True:
        decision = decide(facts)
        log.info(
            "tick decision for %s: %s (%s)",
            tick.desc.target,
            decision.action.value,
            decision.reason,
        )
        outcome = _carry_out(tick, target, decision)
        if isinstance(outcome, Computed):
            return outcome
        if len(facts.found) >= _MAX_FALLBACKS:
            raise CTError(f"the tick's decision did not settle: {decision}, then {outcome}")
        facts = facts.with_found(outcome)


def _facts(tick: Tick, target: Target) -> TickFacts:
    """What the decision needs, from metadata: the target's history is read once per tick."""
    base, why_not = None, tick.plan.reason
    if tick.plan.incremental and target.has_rows:
        base, why_not = incremental_base(
            target.table,
            tick.desc,
            sql=tick.sql,
            inputs=tick.inputs(),
            minted=None if tick.minted is None else tick.minted.inputs,
        )
    rules = size_rules(tick.pinned(), target.table, base.before if base is not None else {})
    carried = None
    if base is not None:  # before reading the changes to price keyed reads again
        carried = keyed_read_history(tick.pinned(), tick.plan, target.table, base.changed)
    found = (carried,) if carried is not None else ()
    return TickFacts(tick.plan, target.has_rows, base, why_not, tick.settings, rules, found)


def _carry_out(tick: Tick, target: Target, decision: TickDecision) -> Computed | Fallback:
    """Compute what ``decision`` says; a fallback when computing finds it cannot."""
    if decision.action in (Action.IN_PLACE, Action.REBUILD):
        return in_place_computed(tick, target, decision)
    if decision.action is Action.FULL:
        return Computed.of(decision, _full_correction(tick, target))
    return _incremental(tick, target, decision)


def _incremental(tick: Tick, target: Target, decision: TickDecision) -> Computed | Fallback:
    """The plan's incremental correction (verified against the full one every N-th tick)."""
    spark, config, desc, plan, base = (
        tick.spark,
        tick.config,
        tick.desc,
        decision.plan,
        decision.base,
    )
    assert target.persisted is not None and base is not None
    on_driver = keyed_linear_computed(tick, target, decision) or linear_driver_computed(
        tick, target, decision
    )
    if on_driver is not None:
        return on_driver
    check_reads = read_check(tick.pinned(), target.table, desc.base_snapshot_id)
    try:
        bindings = bind_inputs(
            spark,
            config,
            plan,
            tick.inputs(),
            base.before,
            desc.inputs,
            tick.scratch,
            check_reads=check_reads,
        )
        tick.clock.lap("changes")
        incr = incremental_correction(
            spark,
            plan,
            bindings,
            config.name,
            target.persisted,
            target.columns,
            on_driver=not decision.verify,  # the verification compares two Spark corrections
            check_reads=check_reads,
        )
    except KeyedReadError as exc:
        return Fallback(Discovery.NOT_KEYED, str(exc), exc.details)
    except (IncrementalMismatchError, ChangesUnavailableError) as exc:
        return Fallback(Discovery.NOT_POSSIBLE, str(exc))
    if isinstance(incr, Fallback):
        return incr
    details = {**bindings.report(), **incr.notes}
    strategy = str(details.pop("strategy", plan.strategy))
    if not decision.verify:
        computed = Computed.of(decision, incr, details)
        return replace(computed, strategy=strategy)
    return _verify(tick, target, incr, decision, details)


def _full_correction(tick: Tick, target: Target) -> Correction:
    """``desired - persisted`` in full; on the driver when the summaries say both are small."""
    limit = full_rows_on_driver(_estimated_size(tick, target, live_bytes))
    # Rows are only asked for when the driver may diff: for a new target
    # they cost a catalog load per input.
    rows = _estimated_size(tick, target, live_rows) if limit > 0 else 0
    on_driver = full_diff_on_driver(rows, limit)
    return compute_correction(
        target.desired, target.persisted, target.columns, on_driver=on_driver, driver_limit=limit
    )


def _estimated_size(tick: Tick, target: Target, measure: Callable[[Any, int | None], int]) -> int:
    """Rows or bytes (``measure``: ``live_rows``, ``live_bytes``) of the target's head,
    or of the inputs for a new target, by snapshot summaries.

    Only a guess for choosing where to diff (the result can outgrow it in
    one tick): the driver's pulls stop past the limit either way, at the
    price of evaluating the query once more.
    """
    if target.has_rows:
        return measure(target.table, tick.desc.base_snapshot_id)
    return sum(measure(tick.input_table(name), None) for name in tick.desc.inputs)


def _verify(
    tick: Tick, target: Target, incr: Correction, decision: TickDecision, details: Mapping[str, Any]
) -> Computed:
    """Every ``verify_every``-th tick: the full correction, and how far the incremental was off."""
    full = compute_correction(target.desired, target.persisted, target.columns)
    assert target.persisted is not None
    fixed = correction_difference(full, incr, target.persisted, target.columns)
    if incr.release is not None:
        incr.release()
    if fixed:
        log.warning("verification fixed %d rows the incremental correction got wrong", fixed)
    every = tick.settings.verify_every
    reason = f"verify_every={every}: the full correction ran to verify the incremental ones"
    computed = Computed.of(
        decision, full, {**details, "verified": True, "verify_fixed_rows": fixed}
    )
    return replace(computed, strategy=FULL, reason=reason, incremental_ticks=0)
