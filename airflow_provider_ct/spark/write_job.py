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
   creating the target from it on first use;
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

import functools
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from airflow_provider_ct.core.catalog import CatalogConfig
from airflow_provider_ct.core.description import BatchDescription
from airflow_provider_ct.core.keys import SummaryKeys
from airflow_provider_ct.core.layout import TargetSettings
from airflow_provider_ct.core.query import parse_query, query_hash
from airflow_provider_ct.core.refresh_state import refresh_state
from airflow_provider_ct.core.reports import WriteReport, WriteStatus
from airflow_provider_ct.core.schema_change import (
    SchemaChange,
    diff_schemas,
    pending_table,
    plan_schema_change,
    schema_error,
)
from airflow_provider_ct.core.settings import (
    full_read_share,
    full_rows_on_driver,
    large_change_share,
    retry_incremental_after,
    small_input_rows,
)
from airflow_provider_ct.core.staging import outdated_reason
from airflow_provider_ct.core.tables import (
    UNKNOWN_ROWS,
    create_managed_table,
    live_bytes,
    live_rows,
)
from airflow_provider_ct.exceptions import (
    ChangesUnavailableError,
    CTError,
    IncrementalMismatchError,
    IncrementalNotCheaperError,
)
from airflow_provider_ct.ivm.plan.history import incremental_base
from airflow_provider_ct.ivm.plan.planner import AGGREGATE, FULL, Plan, choose_plan
from airflow_provider_ct.ivm.plan.refresh import (
    full_diff_on_driver,
)
from airflow_provider_ct.spark.correction import check_schema, correction_difference
from airflow_provider_ct.spark.diff import compute_correction
from airflow_provider_ct.spark.fingerprints import Correction
from airflow_provider_ct.spark.ivm.in_place_tick import in_place_computed, keep_state
from airflow_provider_ct.spark.ivm.incremental import incremental_correction
from airflow_provider_ct.spark.ivm.input_changes import Scratch, bind_inputs
from airflow_provider_ct.spark.ivm.refresh_rules import (
    auto_full_reason,
    read_check,
    recent_read_estimates,
)
from airflow_provider_ct.spark.pinned_query import PinnedQuery, PinnedViews, input_tables
from airflow_provider_ct.spark.stage_correction import stage_correction
from airflow_provider_ct.spark.tick import Computed, PhaseClock, Target, Tick

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.types import StructType

log = logging.getLogger("airflow_provider_ct.write_job")


def _qualified(config: CatalogConfig, name: str) -> str:
    return f"{config.name}.{name}"


def run_write(
    spark: SparkSession,
    config: CatalogConfig,
    sql: str,
    description: BatchDescription,
    *,
    dry_run: bool = False,
    refresh: str = "auto",
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
    desc = description
    parsed = parse_query(sql, target=desc.target, catalog_name=config.name)
    plan = choose_plan(parsed, refresh)
    catalog = config.load()
    table = _load_or_none(catalog, desc.target)
    reason = outdated_reason(table, desc)
    if reason is not None:
        log.info("%s", reason)
        return WriteReport(WriteStatus.OUTDATED, desc.id, desc.target, reason=reason)

    clock = PhaseClock()
    views = PinnedViews(spark, config, desc, parsed.inputs)
    tables = input_tables(catalog, parsed.inputs)
    query = PinnedQuery(spark, sql, parsed, views, tables, desc.inputs)
    if table is None and dry_run:
        return WriteReport(
            WriteStatus.DRY_RUN,
            desc.id,
            desc.target,
            rows_to_insert=query.frame.count(),
            reason="target does not exist yet",
            extra={"strategy": FULL, "plan": plan.explain()},
        )
    prepared = _prepare_target(
        spark, config, catalog, desc, table, query, target or TargetSettings(), dry_run=dry_run
    )
    if prepared is None:
        reason = "target was created and written concurrently"
        return WriteReport(WriteStatus.OUTDATED, desc.id, desc.target, reason=reason)
    clock.lap("prepare")
    scratch = Scratch(spark, prepared.table)
    tick = _tick(spark, config, catalog, sql, desc, plan, refresh, verify_every, scratch, clock)
    tick.input_views, tick.input_tables, tick.analysis_key = views, tables, query.key
    try:
        return _compute_and_stage(tick, prepared, dry_run)
    finally:
        tick.scratch.remove()


def _tick(
    spark: SparkSession,
    config: CatalogConfig,
    catalog: Any,
    sql: str,
    desc: BatchDescription,
    plan: Plan,
    refresh: str,
    verify_every: int,
    scratch: Scratch,
    clock: PhaseClock,
) -> Tick:
    """The tick's settings: the refresh rules ``refresh`` turns on, with their thresholds."""
    small, large = small_input_rows(refresh), large_change_share(refresh)
    tick = Tick(spark, config, catalog, sql, desc, plan, verify_every, small, large, scratch, clock)
    tick.retry_after = retry_incremental_after(refresh)
    tick.read_share = full_read_share(refresh)
    return tick


def _load_or_none(catalog: Any, name: str) -> Any:
    """The table ``name``, or None before the first tick creates it."""
    from pyiceberg.exceptions import NoSuchTableError

    try:
        return catalog.load_table(name)
    except NoSuchTableError:
        return None


def _compute_and_stage(tick: Tick, target: Target, dry_run: bool) -> WriteReport:
    """Compute the correction, then report it (dry run) or stage it."""
    desc, clock = tick.desc, tick.clock
    computed = _compute(tick, target)
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
        "plan": tick.plan.explain(),  # after the computation: a fallback's, if it fell back
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
    sources = {n: (tick.input_table(n), s) for n, s in tick.desc.inputs.items()}
    rows = min(sum(live_rows(table, snap) for table, snap in sources.values()), UNKNOWN_ROWS)
    computing = sum(v for k, v in tick.clock.phases.items() if k != "prepare")
    return {
        SummaryKeys.QUERY_HASH: digest,
        SummaryKeys.REFRESH: computed.strategy,
        SummaryKeys.INCREMENTAL_TICKS: str(computed.incremental_ticks),
        SummaryKeys.COMPUTE_MS: str(round(computing * 1000)),
        SummaryKeys.INPUT_ROWS: str(rows),
        **_read_share(computed),
        **refresh_state(digest, sources, tick.started_ms),
    }


def _read_share(computed: Computed) -> dict[str, str]:
    """The restricted reads' share, when the read estimate sent this batch in full."""
    estimate = computed.details.get("read_estimate")
    if computed.strategy != FULL or not isinstance(estimate, dict) or "share" not in estimate:
        return {}
    return {SummaryKeys.READ_SHARE: str(estimate["share"])}


def _prepare_target(
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
    columns = [f.name for f in schema.fields]
    if len({c.lower() for c in columns}) != len(columns):
        raise CTError(f"the query for {desc.target} has duplicate column names: {columns}")
    arrow_schema = _query_schema(schema)
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
    base = None if base_id is None else spark.read.option("snapshot-id", str(base_id)).table(name)
    changing = _changing_target(table, change, query.frame, base)
    changing.query_schema = schema
    return changing


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
    base = spark.read.option("snapshot-id", str(base_id)).table(name)
    return desired, base.select(*[f"`{c}`" for c in columns], *_AT)


#: The metadata columns a persisted row is retracted by.
_AT = ("_file", "_pos")


def _query_schema(schema: StructType) -> pa.Schema:
    """The query's columns as Arrow types, every one optional.

    Spark's nullability flags shift with plans (joins, explode), and a
    required column would reject staged files.
    """
    from pyspark.sql.pandas.types import to_arrow_schema

    return pa.schema([f.with_nullable(True) for f in to_arrow_schema(schema)])


def _changing_target(
    table: Any, change: SchemaChange, desired: DataFrame, base: DataFrame | None
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
    return Target(pending_table(table, change), columns, lambda: built, base is not None, change)


def _compute(tick: Tick, target: Target) -> Computed:
    """The tick's correction: incremental where the plan and history allow, else full."""
    if tick.plan.strategy == AGGREGATE:
        in_place = in_place_computed(tick, target)  # None: tick.plan is now its fallback
        if in_place is not None:
            return in_place
    spark, config, desc, plan = tick.spark, tick.config, tick.desc, tick.plan
    base, why_not = (None, plan.reason)
    inputs: dict[str, Any] = {}
    if plan.incremental and target.has_rows:
        inputs = {name: tick.input_table(name) for name in desc.inputs}
        base, why_not = incremental_base(target.table, desc, sql=tick.sql, inputs=inputs)
    elif plan.incremental:
        why_not = "the target has no rows yet"
    details: dict[str, Any] = {}
    if base is not None:
        why_not = auto_full_reason(tick, inputs, base.before, target.table) or ""
        why_not, details = (why_not, {}) if why_not else recent_read_estimates(tick, target.table)
        base = None if why_not else base
    if base is None:
        return Computed(_full_correction(tick, target), FULL, why_not, 0, details)
    verify_every = tick.verify_every
    verify = verify_every > 0 and base.incremental_ticks + 1 >= verify_every
    assert target.persisted is not None
    try:
        bindings = bind_inputs(spark, config, plan, inputs, base.before, desc.inputs, tick.scratch)
        tick.clock.lap("changes")
        incr = incremental_correction(
            spark,
            plan,
            bindings,
            config.name,
            target.persisted,
            target.columns,
            on_driver=not verify,  # the verification compares two Spark corrections
            check_reads=read_check(tick, inputs, target.table),
        )
    except IncrementalNotCheaperError as exc:
        details = {"read_estimate": exc.estimate} if exc.estimate else {}
        return Computed(_full_correction(tick, target), FULL, str(exc), 0, details)
    except (IncrementalMismatchError, ChangesUnavailableError) as exc:
        reason = f"the incremental correction is not possible: {exc}"
        return Computed(_full_correction(tick, target), FULL, reason, 0)
    details = {**bindings.report(), **incr.notes}
    strategy = str(details.pop("strategy", plan.strategy))
    if not verify:
        return Computed(incr, strategy, plan.reason, base.incremental_ticks + 1, details)
    return _verify(target, incr, verify_every, details)


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
    target: Target, incr: Correction, verify_every: int, details: dict[str, Any]
) -> Computed:
    """Every ``verify_every``-th tick: the full correction, and how far the incremental was off."""
    full = compute_correction(target.desired, target.persisted, target.columns)
    assert target.persisted is not None
    fixed = correction_difference(full, incr, target.persisted, target.columns)
    if incr.release is not None:
        incr.release()
    if fixed:
        log.warning("verification fixed %d rows the incremental correction got wrong", fixed)
    reason = f"verify_every={verify_every}: the full correction ran to verify the incremental ones"
    return Computed(
        full, FULL, reason, 0, {**details, "verified": True, "verify_fixed_rows": fixed}
    )
