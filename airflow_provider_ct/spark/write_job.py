"""The write job: stage the correction that makes a view's table equal its query.

Plain PySpark code, run for a :class:`~airflow_provider_ct.spark.jobs.ViewWrite`
spec by :mod:`.job_main` under ``spark-submit`` or by the warm driver, and
callable in-process with :func:`run_write` (tests, notebooks).

Given a batch description it

1. refuses to work if the target's head is no longer the description's base
   (another writer got there first: report ``outdated``, stage nothing);
2. registers every input pinned to its snapshot from the description;
3. runs the query, creating the target from the query's schema on first use
   and refusing a query whose schema no longer matches;
4. computes the correction: incrementally from the inputs' changes where
   the query's plan (:mod:`airflow_provider_ct.core.planner`) and the
   target's history (:mod:`airflow_provider_ct.core.incremental`) allow (see
   :mod:`.incremental`), else ``desired - persisted`` in full (see
   :mod:`.correction`);
5. stages inserts as Parquet and retractions as a position-delete file under
   the table location, and writes the staged-batch manifest.

Nothing becomes visible until ``AppendOperator`` compare-and-appends it.
"""

from __future__ import annotations

import logging
import posixpath
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.fs as pafs

from airflow_provider_ct.core.batch_files import BatchFiles
from airflow_provider_ct.core.catalog import CatalogConfig
from airflow_provider_ct.core.changes import estimated_change_rows
from airflow_provider_ct.core.description import BatchDescription
from airflow_provider_ct.core.incremental import incremental_base
from airflow_provider_ct.core.keys import SummaryKeys
from airflow_provider_ct.core.parquet import parquet_codec
from airflow_provider_ct.core.planner import FULL, GROUP, Plan, choose_plan
from airflow_provider_ct.core.query import INPUT_VIEW_PREFIX, parse_query, query_hash
from airflow_provider_ct.core.reports import WriteReport, WriteStatus
from airflow_provider_ct.core.settings import (
    LARGE_CHANGE_SHARE_ENV,
    SMALL_INPUT_ROWS_ENV,
    full_rows_on_driver,
    large_change_share,
    small_input_rows,
)
from airflow_provider_ct.core.staging import (
    StagedFile,
    StagedTime,
    begin_batch,
    finish_batch,
    outdated_reason,
)
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
)
from airflow_provider_ct.spark.correction import check_schema, correction_difference
from airflow_provider_ct.spark.diff import compute_correction
from airflow_provider_ct.spark.fingerprints import Correction
from airflow_provider_ct.spark.incremental import (
    Scratch,
    bind_inputs,
    incremental_correction,
    read_pinned,
)

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

log = logging.getLogger("airflow_provider_ct.write_job")

#: Corrections up to this many inserted rows are written by pyarrow on the driver.
ROWS_COLLECTED = 200_000
#: Rows per staged Parquet file (roughly; Spark splits by partition).
ROWS_PER_FILE = 2_000_000


class _PhaseClock:
    """Wall time per phase of the job, for the log (where does a tick's time go?)."""

    def __init__(self) -> None:
        self._last = time.perf_counter()
        self.phases: dict[str, float] = {}

    def lap(self, name: str) -> None:
        now = time.perf_counter()
        self.phases[name] = round(now - self._last, 2)
        self._last = now

    def summary(self) -> str:
        return ", ".join(f"{k}={v}" for k, v in self.phases.items())


def _qualified(config: CatalogConfig, name: str) -> str:
    return f"{config.name}.{name}"


def _register_inputs(
    spark: SparkSession, config: CatalogConfig, desc: BatchDescription, inputs: tuple[str, ...]
) -> dict[str, str]:
    views: dict[str, str] = {}
    for index, name in enumerate(inputs):
        if name not in desc.inputs:
            raise CTError(f"description {desc.id} does not pin input {name}")
        view = f"{INPUT_VIEW_PREFIX}{index}"
        read_pinned(spark, config, name, desc.inputs[name]).createOrReplaceTempView(view)
        views[name] = view
    return views


def _list_parquet(uri: str) -> list[str]:
    fs, local = pafs.FileSystem.from_uri(uri)
    prefix = uri[: len(uri) - len(local)] if uri.endswith(local) else ""
    infos = fs.get_file_info(pafs.FileSelector(local, allow_not_found=True, recursive=True))
    return sorted(
        prefix + i.path
        for i in infos
        if i.type == pafs.FileType.File
        and posixpath.basename(i.path).startswith("part-")
        and i.path.endswith(".parquet")
    )


def _drop_side_files(uri: str) -> None:
    """Remove what Spark writes beside the Parquet files (``_SUCCESS``, ``.crc``) in our folder.

    The table never references them, so left in place they would be debris.
    """
    fs, local = pafs.FileSystem.from_uri(uri)
    for info in fs.get_file_info(pafs.FileSelector(local, allow_not_found=True, recursive=True)):
        name = posixpath.basename(info.path)
        if info.type == pafs.FileType.File and (name == "_SUCCESS" or name.endswith(".crc")):
            fs.delete_file(info.path)


def _write_inserts(table: Any, correction: Correction, folder: str) -> None:
    """Write the rows to insert as Parquet files under ``folder``.

    A small correction (most ticks) is collected through Arrow and written
    as one file by pyarrow: a Spark write job (a shuffle for the file count,
    task scheduling, commit protocol) costs seconds even for ten rows. The
    table's name mapping reads both kinds of files alike.
    """
    if isinstance(correction.inserts, pa.Table):  # diffed on the driver
        BatchFiles(table, folder).write_rows(correction.inserts)
        return
    if correction.insert_count <= ROWS_COLLECTED:
        collect = getattr(correction.inserts, "_collect_as_arrow", None)
        if collect is not None:
            from pyspark.sql.pandas.types import to_arrow_schema

            batches = collect()
            schema = to_arrow_schema(correction.inserts.schema)
            data = pa.Table.from_batches(batches) if batches else schema.empty_table()
            BatchFiles(table, folder).write_rows(data)
            return
    files = max(1, -(-correction.insert_count // ROWS_PER_FILE))
    codec = parquet_codec(table.properties).name  # Spark's level: its own setting
    writer = correction.inserts.repartition(files).write.mode("errorifexists")
    writer.option("compression", codec).parquet(folder)


@dataclass
class _Target:
    """The target as the job found it, and the query's rows and columns."""

    table: Any
    desired: DataFrame
    columns: list[str]
    #: The head (the description's base) with ``_file`` and ``_pos``; None: empty.
    persisted: DataFrame | None


@dataclass
class _Computed:
    """A correction and how it was computed (for the report)."""

    correction: Correction
    strategy: str
    reason: str
    incremental_ticks: int
    details: dict[str, Any] = field(default_factory=dict)


def run_write(
    spark: SparkSession,
    config: CatalogConfig,
    sql: str,
    description: BatchDescription,
    *,
    dry_run: bool = False,
    refresh: str = "auto",
    verify_every: int = 0,
) -> WriteReport:
    """Compute and stage one batch. See the module docstring.

    :param refresh: ``auto`` (incremental where the query and the target's
        history allow, else the full correction), ``incremental`` (fail rather
        than fall back for a query that cannot be maintained incrementally)
        or ``full`` (always the full correction).
    :param verify_every: run the full correction every N ticks (0: never).
    """
    from pyiceberg.exceptions import NoSuchTableError

    desc = description
    parsed = parse_query(sql, target=desc.target, catalog_name=config.name)
    plan = choose_plan(parsed, refresh)
    catalog = config.load()
    try:
        table = catalog.load_table(desc.target)
    except NoSuchTableError:
        table = None
    reason = outdated_reason(table, desc)
    if reason is not None:
        log.info("%s", reason)
        return WriteReport(WriteStatus.OUTDATED, desc.id, desc.target, reason=reason)

    clock = _PhaseClock()
    views = _register_inputs(spark, config, desc, parsed.inputs)
    desired: DataFrame = spark.sql(parsed.pinned_sql(views))
    if table is None and dry_run:
        return WriteReport(
            WriteStatus.DRY_RUN,
            desc.id,
            desc.target,
            rows_to_insert=desired.count(),
            reason="target does not exist yet",
            extra={"strategy": FULL, "plan": plan.explain()},
        )
    target = _prepare_target(spark, config, catalog, desc, table, desired)
    if target is None:
        reason = "target was created and written concurrently"
        return WriteReport(WriteStatus.OUTDATED, desc.id, desc.target, reason=reason)
    clock.lap("prepare")
    scratch = Scratch(spark, target.table)
    small, large = small_input_rows(refresh), large_change_share(refresh)
    tick = _Tick(
        spark, config, catalog, sql, desc, plan, verify_every, small, large, scratch, clock
    )
    try:
        return _compute_and_stage(tick, target, dry_run)
    finally:
        tick.scratch.remove()


@dataclass
class _Tick:
    """What the job was asked to do, and where it keeps its scratch files and times."""

    spark: SparkSession
    config: CatalogConfig
    catalog: Any
    sql: str
    desc: BatchDescription
    plan: Plan
    verify_every: int
    #: ``refresh="auto"`` runs in full over inputs of at most this many rows (0: never).
    small_rows: int
    #: ``refresh="auto"`` runs a group tick in full above this change share (0: never).
    large_change: float
    #: Holds the inputs' changes the correction's frames read: removed after staging.
    scratch: Scratch
    clock: _PhaseClock


def _compute_and_stage(tick: _Tick, target: _Target, dry_run: bool) -> WriteReport:
    """Compute the correction, then report it (dry run) or stage it."""
    desc, plan, clock = tick.desc, tick.plan, tick.clock
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
        "plan": plan.explain(),
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
    report = _stage(target.table, desc, tick.sql, computed, clock)
    report.reason = computed.reason
    report.extra = {**extra, "phases": dict(clock.phases)}
    log.info("write job phases (s): %s", clock.summary())
    return report


def _prepare_target(
    spark: SparkSession,
    config: CatalogConfig,
    catalog: Any,
    desc: BatchDescription,
    table: Any,
    desired: DataFrame,
) -> _Target | None:
    """Create the target on first use; check the query's schema; read the head."""
    from pyspark.sql.pandas.types import to_arrow_schema

    columns = [f.name for f in desired.schema.fields]
    if len({c.lower() for c in columns}) != len(columns):
        raise CTError(f"the query for {desc.target} has duplicate column names: {columns}")
    if table is None:
        # Every column optional: Spark's nullability flags shift with plans
        # (joins, explode), and a required column would reject staged files.
        arrow_schema = to_arrow_schema(desired.schema)
        arrow_schema = pa.schema([f.with_nullable(True) for f in arrow_schema])
        table = create_managed_table(catalog, desc.target, arrow_schema)
        if table.metadata.current_snapshot() is not None:
            return None
    current = spark.table(_qualified(config, desc.target))
    check_schema(desired, current, desc.target)
    columns = [f.name for f in current.schema.fields]
    persisted = None
    if desc.base_snapshot_id is not None:
        persisted = (
            spark.read.option("snapshot-id", str(desc.base_snapshot_id))
            .table(_qualified(config, desc.target))
            .select(*[f"`{c}`" for c in columns], "_file", "_pos")
        )
    return _Target(table, desired, columns, persisted)


def _compute(tick: _Tick, target: _Target) -> _Computed:
    """The tick's correction: incremental where the plan and history allow, else full."""
    spark, config, desc, plan = tick.spark, tick.config, tick.desc, tick.plan
    base, why_not = (None, plan.reason)
    inputs: dict[str, Any] = {}
    if plan.incremental and target.persisted is not None:
        inputs = {name: tick.catalog.load_table(name) for name in desc.inputs}
        base, why_not = incremental_base(target.table, desc, sql=tick.sql, inputs=inputs)
    elif plan.incremental:
        why_not = "the target has no rows yet"
    if base is not None:
        why_not = _small_inputs(tick, inputs) or _large_change(tick, inputs, base.before) or ""
        base = None if why_not else base
    if base is None:
        return _Computed(_full_correction(tick, target), FULL, why_not, 0)
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
        )
    except (IncrementalMismatchError, ChangesUnavailableError) as exc:
        reason = f"the incremental correction is not possible: {exc}"
        return _Computed(_full_correction(tick, target), FULL, reason, 0)
    if not verify:
        ticks = base.incremental_ticks + 1
        return _Computed(incr, plan.strategy, plan.reason, ticks, bindings.report())
    return _verify(target, incr, verify_every, bindings.report())


def _small_inputs(tick: _Tick, inputs: dict[str, Any]) -> str | None:
    """Why the inputs are too small for an incremental tick to pay, or None.

    An incremental tick runs several small Spark jobs (the changes, the
    affected keys, the restricted query, the target's affected rows), each
    with a fixed cost; a full correction runs the query once. Over small
    inputs the full one is cheaper whatever changed (docs/decisions.md).
    The pinned snapshots' summaries say how small, without reading data.
    """
    limit = tick.small_rows
    if limit <= 0:
        return None
    pinned = {name: snap for name, snap in tick.desc.inputs.items() if snap is not None}
    rows = sum(live_rows(inputs[name], snap) for name, snap in pinned.items())
    if rows > limit:
        return None
    return (
        f"the inputs hold {rows:,} rows, at most {limit:,} ({SMALL_INPUT_ROWS_ENV}): "
        "a full correction costs less than an incremental one at this size"
    )


def _large_change(tick: _Tick, inputs: dict[str, Any], before: dict[str, int | None]) -> str | None:
    """Why the inputs changed too much for a ``group`` tick to pay, or None.

    Recomputing the affected groups costs about what their share of the
    inputs costs, plus an incremental tick's fixed jobs; once the change is
    a large share of the inputs it touches most groups, and the full
    correction, which runs the query once, is cheaper (measured in
    docs/decisions.md). Linear strategies cost what changed and are left
    alone. The snapshots' summaries say how much changed, without reading
    data; an unknown size is not a reason.
    """
    share = tick.large_change
    if share <= 0 or tick.plan.strategy != GROUP:
        return None
    changed = rows = 0
    for name, after in tick.desc.inputs.items():
        if after is None:
            continue
        rows += live_rows(inputs[name], after)
        if before.get(name) != after:
            changed += estimated_change_rows(inputs[name], before.get(name), after)
    if max(rows, changed) >= UNKNOWN_ROWS or changed <= share * rows:
        return None
    return (
        f"the inputs changed by about {changed:,} rows of {rows:,} ({changed / max(rows, 1):.1%}, "
        f"above {share:.0%}, {LARGE_CHANGE_SHARE_ENV}): a change this large touches most groups, "
        "and recomputing them costs more than a full correction"
    )


def _full_correction(tick: _Tick, target: _Target) -> Correction:
    """``desired - persisted`` in full; on the driver when the summaries say both are small."""
    limit = full_rows_on_driver(_estimated_size(tick, target, live_bytes))
    on_driver = limit > 0 and _estimated_size(tick, target, live_rows) <= limit
    return compute_correction(
        target.desired, target.persisted, target.columns, on_driver=on_driver, driver_limit=limit
    )


def _estimated_size(tick: _Tick, target: _Target, measure: Callable[[Any, int | None], int]) -> int:
    """Rows or bytes (``measure``: ``live_rows``, ``live_bytes``) of the target's head,
    or of the inputs for a new target, by snapshot summaries.

    Only a guess for choosing where to diff (the result can outgrow it in
    one tick): the driver's pulls stop past the limit either way, at the
    price of evaluating the query once more.
    """
    if target.persisted is not None:
        return measure(target.table, tick.desc.base_snapshot_id)
    return sum(measure(tick.catalog.load_table(name), None) for name in tick.desc.inputs)


def _verify(
    target: _Target, incr: Correction, verify_every: int, details: dict[str, Any]
) -> _Computed:
    """Every ``verify_every``-th tick: the full correction, and how far the incremental was off."""
    full = compute_correction(target.desired, target.persisted, target.columns)
    assert target.persisted is not None
    fixed = correction_difference(full, incr, target.persisted, target.columns)
    if incr.release is not None:
        incr.release()
    if fixed:
        log.warning("verification fixed %d rows the incremental correction got wrong", fixed)
    reason = f"verify_every={verify_every}: the full correction ran to verify the incremental ones"
    return _Computed(
        full, FULL, reason, 0, {**details, "verified": True, "verify_fixed_rows": fixed}
    )


def _stage(
    table: Any, desc: BatchDescription, sql: str, computed: _Computed, clock: _PhaseClock
) -> WriteReport:
    """Stage inserts as Parquet and retractions as a position-delete file, then the manifest."""
    correction = computed.correction
    # The query's hash lands with the batch: a later tick can then prove
    # itself quiet (core/quiet.py) or incremental (core/incremental.py).
    summary = {
        SummaryKeys.QUERY_HASH: query_hash(sql),
        SummaryKeys.REFRESH: computed.strategy,
        SummaryKeys.INCREMENTAL_TICKS: str(computed.incremental_ticks),
    }
    batch, manifest = begin_batch(table, desc, summary=summary)
    files = BatchFiles(table, batch.data_dir)
    added: list[StagedFile] = []
    if correction.insert_count:
        _write_inserts(table, correction, posixpath.join(batch.data_dir, "inserts"))
        added = [files.describe(p) for p in _list_parquet(batch.data_dir)]
        _drop_side_files(batch.data_dir)
    if correction.release is not None:
        correction.release()
    clock.lap("inserts")
    deletes = [files.write_deletes(correction.retractions)] if correction.retractions else []
    retractions = correction.retract_count
    finish_batch(
        batch, manifest, [StagedTime(desc.time, tuple(added), (), tuple(deletes), retractions)]
    )
    clock.lap("deletes+manifest")
    return WriteReport(
        WriteStatus.STAGED,
        desc.id,
        desc.target,
        rows_to_insert=correction.insert_count,
        rows_to_delete=correction.retract_count,
        manifest=manifest,
        staged_bytes=sum(f.size_bytes for f in (*added, *deletes)),
    )
