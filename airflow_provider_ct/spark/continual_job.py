"""The continual-task job: run a task's statements for each input time of a batch.

Plain PySpark code like :mod:`.write_job`, run for a
:class:`~airflow_provider_ct.spark.jobs.ContinualWrite` spec. For a batch
``[lower, upper)`` of the output it

1. refuses to work if the output's head is no longer the description's base;
2. finds the input's times in the batch (its snapshots there) and, for each
   time ``t`` in order, reads only the rows *inserted* at ``t`` (an
   incremental read between the snapshot before ``t`` and the one at ``t``
   across appends, :func:`~airflow_provider_ct.ivm.changes.table_changes.table_changes`
   across anything else; the input is never scanned in full after the first
   tick, see docs/continual-tasks.md);
3. runs the statements in order: the output name sees the output as of
   ``t - 1`` plus the earlier statements' changes, references are pinned at
   ``t``; DELETEs retract rows, INSERTs add rows;
4. stages, per time, the inserted rows (Parquet) and the retracted positions
   (a position-delete file, which may point into files staged for earlier
   times of the same batch), and writes one manifest for the whole batch.

The AppendOperator then lands all times in one compare-and-append.
"""

from __future__ import annotations

import functools
import logging
import posixpath
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import pyarrow as pa
from sqlglot import exp

from airflow_provider_ct.core.batch_files import BatchFiles
from airflow_provider_ct.core.catalog import CatalogConfig
from airflow_provider_ct.core.continual import (
    CONTINUAL_TASK_KIND,
    ContinualTaskDef,
    as_of_of,
    batch_times,
    parse_continual_task,
    unreadable_at,
    window,
)
from airflow_provider_ct.core.continual_now import with_time
from airflow_provider_ct.core.continual_statements import width_error
from airflow_provider_ct.core.description import BatchDescription
from airflow_provider_ct.core.keys import SummaryKeys, TableKeys
from airflow_provider_ct.core.layout import TableLayout, TargetSettings
from airflow_provider_ct.core.manifest import StagedFile, StagedTime
from airflow_provider_ct.core.query import query_hash
from airflow_provider_ct.core.reports import WriteReport, WriteStatus
from airflow_provider_ct.core.staging import begin_batch, finish_batch, outdated_reason
from airflow_provider_ct.core.storage import io_properties
from airflow_provider_ct.core.tables import create_managed_table, load_table_or_none
from airflow_provider_ct.core.timeline import Timeline
from airflow_provider_ct.exceptions import (
    ChangesUnavailableError,
    CTError,
    QueryError,
    SchemaMismatchError,
)
from airflow_provider_ct.spark.continual_checks import NowStamps, checked_task, renamed
from airflow_provider_ct.spark.continual_inputs import inserted_rows
from airflow_provider_ct.spark.continual_state import (
    FILE_COL,
    INPUT_VIEW,
    POS_COL,
    REF_VIEW,
    SELF_ROWS,
    SELF_VIEW,
    State,
    state_frame,
)
from airflow_provider_ct.spark.snapshots import read_at

if TYPE_CHECKING:
    from pyiceberg.table import Table
    from pyspark.sql import DataFrame, SparkSession

log = logging.getLogger("airflow_provider_ct.continual_job")


def _bind_views(
    spark: SparkSession,
    config: CatalogConfig,
    task: ContinualTaskDef,
    time: int,
    inserts: DataFrame,
    references: dict[str, Timeline],
) -> dict[str, str]:
    """Temp views for ``time``: the input's inserted rows, each reference as of ``time``.

    Returns the table names the statements use mapped to those views (the
    output's name maps to the view of the output so far, bound per statement).
    """
    from pyspark.sql import functions as F

    inserts.select(*[F.col(f"`{c}`") for c in inserts.columns]).createOrReplaceTempView(INPUT_VIEW)
    mapping = {task.name: SELF_VIEW, task.input: INPUT_VIEW}
    for index, name in enumerate(sorted(references)):
        snapshot = references[name].snapshot_at(time, require_sealed=False)
        view = f"{REF_VIEW}{index}"
        table = f"{config.name}.{name}"
        frame = read_at(spark, table, snapshot)
        frame.createOrReplaceTempView(view)
        mapping[name] = view
    return mapping


@dataclass
class _Pending:
    """Rows one time's statements added and retracted so far (not yet staged)."""

    time: int
    added: list[dict[str, Any]] = field(default_factory=list)
    retracted: list[tuple[str, int]] = field(default_factory=list)
    next_position: int = 0


def _run_time(run: _Run, time: int, inserts: DataFrame) -> tuple[list[Any], list[Any]]:
    """Run the statements at ``time``; returns (rows added, persisted rows retracted)."""
    spark, task, state = run.spark, run.task, run.state
    mapping = _bind_views(spark, run.config, task, time, inserts, run.references)
    pending = _Pending(time)
    ddl = f"{task.spark_schema_ddl()}, `{FILE_COL}` string, `{POS_COL}` long"
    for statement in task.statements:
        stamps = run.stamps[statement.index]
        current = state_frame(spark, task, state)
        if pending.added:
            current = current.unionByName(spark.createDataFrame(pending.added, ddl))
        current.createOrReplaceTempView(SELF_VIEW)
        current.drop(FILE_COL, POS_COL).createOrReplaceTempView(SELF_ROWS)
        if statement.kind == "delete":
            tree = with_time(renamed(statement.expression, mapping), time, stamps=stamps)
            _run_delete(spark, tree, state, pending)
        else:
            views = {**mapping, task.name: SELF_ROWS}
            tree = with_time(renamed(statement.expression, views), time, stamps=stamps)
            _run_insert(spark, task, statement, tree, pending)
    return pending.added, pending.retracted


def _run_delete(spark: SparkSession, tree: Any, state: State, pending: _Pending) -> None:
    """A ``DELETE``: retract the rows it matches (staged earlier, or added at this time)."""
    where = tree.args.get("where")
    select = exp.select(exp.column(FILE_COL), exp.column(POS_COL)).from_(tree.this)
    if where is not None:
        select = select.where(where.this)
    hit = [(str(r[0]), int(r[1])) for r in spark.sql(select.sql(dialect="spark")).collect()]
    for key in hit:
        if key[0].startswith("pending:"):
            pending.added = [p for p in pending.added if (p[FILE_COL], p[POS_COL]) != key]
        else:
            state.deleted.add(key)
            pending.retracted.append(key)


def _run_insert(
    spark: SparkSession, task: ContinualTaskDef, statement: Any, tree: Any, pending: _Pending
) -> None:
    """An ``INSERT``: its rows, cast to the output's types, join this time's additions.

    The types were checked assignable before the batch (``continual_checks``).
    """
    from pyspark.sql import functions as F

    result = spark.sql(tree.expression.sql(dialect="spark"))
    targets = list(statement.columns) or task.column_names
    if len(result.columns) != len(targets):  # checked before the batch; the schema moved
        raise width_error(statement, len(result.columns), targets)
    typed = result.toDF(*targets).select(
        *[
            (F.col(f"`{c}`") if c in targets else F.lit(None)).cast(t).alias(c)
            for c, t in task.columns
        ]
    )
    for row in typed.collect():
        record = row.asDict()
        record[FILE_COL] = f"pending:{pending.time}"
        record[POS_COL] = pending.next_position
        pending.next_position += 1
        pending.added.append(record)


@dataclass
class _Run:
    """One batch of a task as the job runs it: the output, the input, the references."""

    spark: SparkSession
    config: CatalogConfig
    task: ContinualTaskDef
    table: Table
    source: Table
    input_timeline: Timeline
    references: dict[str, Timeline]
    state: State
    data_dir: str
    snapshot_time: int | None
    #: Each statement's ``mz_now()`` types (timestamp or epoch ms), per call.
    stamps: NowStamps
    reads: dict[str, int] = field(default_factory=dict)  # how each time's inserts were read
    #: A full refresh: every row of the base, retracted at the snapshot time.
    truncate: list[tuple[str, int]] = field(default_factory=list)

    @functools.cached_property
    def files(self) -> BatchFiles:
        """The batch's one writer: deletes at a later time may point into its earlier files."""
        return BatchFiles(self.table, self.data_dir)


def run_continual(
    spark: SparkSession,
    config: CatalogConfig,
    task_sql: str,
    default_namespace: str | None,
    description: BatchDescription,
    *,
    target: TargetSettings | None = None,
    full_refresh: bool = False,
) -> WriteReport:
    """Compute and stage one batch of a continual task.

    :param target: the output's layout when this tick creates it (its columns
        are the definition's: an append-only history has no other).
    :param full_refresh: truncate the output and process the input's contents
        at the tick's time once (:func:`_full_refresh`).
    """
    task = parse_continual_task(
        task_sql, default_namespace=default_namespace, catalog_name=config.name
    )
    desc = description
    if desc.target != task.name:
        raise CTError(f"description {desc.id} is for {desc.target}, not for task {task.name}")
    catalog = config.load()
    source = _load_input(catalog, task)
    task, stamps = checked_task(spark, config, task)  # refused here: nothing created or written
    table = _open_output(spark, catalog, task, desc, (target or TargetSettings()).layout)
    if isinstance(table, WriteReport):
        return table
    input_tl = Timeline.of(source)
    as_of = desc.time if full_refresh else as_of_of(table.metadata.properties, desc.time)
    times = batch_times(input_tl, desc, as_of=as_of, snapshot=task.snapshot or full_refresh)
    batch, manifest = begin_batch(
        table, desc, summary={SummaryKeys.QUERY_HASH: query_hash(task_sql, CONTINUAL_TASK_KIND)}
    )
    run = _Run(
        spark,
        config,
        task,
        table,
        source,
        input_tl,
        {n: Timeline.of(catalog.load_table(n)) for n in task.references},
        State(base=_base_frame(spark, config, task, desc.base_snapshot_id)),
        batch.data_dir,
        as_of if (task.snapshot or full_refresh) and times[:1] == [as_of] else None,
        stamps,
    )
    if full_refresh:
        _full_refresh(run, desc.time)
    staged = [t for t in (_process_time(run, time) for time in times) if t is not None]
    final = finish_batch(batch, manifest, staged, io=io_properties(table))
    total_in, total_out = final.added_record_count, final.deleted_record_count
    lower, upper = window(desc)
    log.info("continual task %s: %d input time(s) in [%s, %s): +%d -%d rows",
             task.name, len(times), lower, upper, total_in, total_out)  # fmt: skip
    return WriteReport(
        WriteStatus.STAGED,
        desc.id,
        desc.target,
        rows_to_insert=total_in,
        rows_to_delete=total_out,
        manifest=manifest,
        staged_bytes=final.added_bytes,
        extra={"input_times": times, "input_reads": run.reads},
    )


def _load_input(catalog: Any, task: ContinualTaskDef) -> Table:
    """The task's input: an Iceberg table of the catalog (Materialize: not a view)."""
    from pyiceberg.exceptions import NoSuchTableError

    try:
        return catalog.load_table(task.input)
    except NoSuchTableError:
        raise QueryError(
            f"the input {task.input} of continual task {task.name} is not an Iceberg table of "
            "the catalog: a continual task reads its input's changes from its snapshots, "
            "which a view does not have"
        ) from None


def _open_output(
    spark: SparkSession,
    catalog: Any,
    task: ContinualTaskDef,
    desc: BatchDescription,
    layout: TableLayout,
) -> Table | WriteReport:
    """The output, created on the first tick (with ``layout``); ``outdated`` if it moved on."""
    table = load_table_or_none(catalog, task.name)
    reason = outdated_reason(table, desc)
    if reason is not None:
        return WriteReport(WriteStatus.OUTDATED, desc.id, desc.target, reason=reason)
    if table is not None:
        return _adopted(table, task, desc)
    schema = pa.schema([pa.field(c, _arrow_type(spark, t)) for c, t in task.columns])
    table = create_managed_table(
        catalog, task.name, schema, properties={TableKeys.AS_OF: str(desc.time)}, layout=layout
    )
    if table.metadata.current_snapshot() is not None:
        reason = "output was created and written concurrently"
        return WriteReport(WriteStatus.OUTDATED, desc.id, desc.target, reason=reason)
    return table


def _adopted(table: Table, task: ContinualTaskDef, desc: BatchDescription) -> Table:
    """An existing output, checked against the task's columns; adopted if it has no as-of.

    An output the user created first has no as-of: this tick's time becomes
    it (a metadata-only commit that leaves the head, the description's base,
    alone; repeating it writes the same value).
    """
    have = [f.name for f in table.schema().fields]
    if have != task.column_names:
        raise SchemaMismatchError(
            f"output {task.name} has columns {have}, the task declares {task.column_names}: "
            "the table was left untouched"
        )
    if TableKeys.AS_OF not in table.metadata.properties:
        log.info("adopting %s as the output of its task: as-of %s", task.name, desc.time)
        table.transaction().set_properties({TableKeys.AS_OF: str(desc.time)}).commit_transaction()
    return table


def _base_frame(
    spark: SparkSession, config: CatalogConfig, task: ContinualTaskDef, base: int | None
) -> DataFrame | None:
    """The output at the description's base, with each row's file and position."""
    from pyspark.sql import functions as F

    if base is None:
        return None
    return read_at(spark, f"{config.name}.{task.name}", base).select(
        *[F.col(f"`{c}`") for c in task.column_names],
        F.col("_file").alias(FILE_COL),
        F.col("_pos").alias(POS_COL),
    )


def _process_time(run: _Run, time: int) -> StagedTime | None:
    """Run the statements at one time and stage what they changed (None: nothing)."""
    scratch: str | None = None
    if time == run.snapshot_time:
        inserts = _snapshot_rows(run, time)
    else:
        inserts, mode, scratch = inserted_rows(
            run.spark,
            run.config,
            run.task.input,
            run.source,
            run.input_timeline,
            time,
            posixpath.join(run.data_dir, "scratch"),
            run.table.io,
        )
        run.reads[mode] = run.reads.get(mode, 0) + 1
    try:
        added, retracted = _run_time(run, time, inserts)
    finally:
        if scratch is not None:  # every statement of this time has run (collected)
            run.table.io.delete(scratch)
    if time == run.snapshot_time and run.truncate:
        retracted = [*run.truncate, *retracted]
    return _stage_time(run.table, run.files, run.task, time, added, retracted, run.state)


def _full_refresh(run: _Run, time: int) -> None:
    """A pipeline's ``full_refresh`` of the task: truncate, then the input's contents once.

    As ``SNAPSHOT = true`` does at the as-of: the batch's one time is the
    tick's, it retracts every row of the base (the statements then see an
    empty output) and inserts what the statements make of the input's
    snapshot at ``time``. It lands by the same compare-and-append as any
    batch (its description names the base it truncates), so a retry finds it
    landed and a concurrent writer makes it lose and discard its files.
    Refused when the input's contents at ``time`` can no longer be read.
    """
    reason = unreadable_at(run.source, run.input_timeline, time)
    if reason is not None:
        raise ChangesUnavailableError(
            f"full refresh of {run.task.name} at {time}: its input {run.task.input} {reason}"
        )
    if run.state.base is not None:
        rows = run.state.base.select(FILE_COL, POS_COL).collect()
        run.truncate = sorted((str(r[0]), int(r[1])) for r in rows)
        run.state.deleted.update(run.truncate)
    log.info("full refresh of %s at %s: %d row(s) retracted, the input's contents processed "
             "once", run.task.name, time, len(run.truncate))  # fmt: skip


def _snapshot_rows(run: _Run, time: int) -> DataFrame:
    """``SNAPSHOT = true``: the input's whole contents at the as-of count as inserted then."""
    name = f"{run.config.name}.{run.task.input}"
    return read_at(run.spark, name, run.input_timeline.snapshot_at(time, require_sealed=False))


def _arrow_type(spark: SparkSession, spark_type: str) -> pa.DataType:
    from pyspark.sql.pandas.types import to_arrow_type
    from pyspark.sql.types import _parse_datatype_string

    return to_arrow_type(_parse_datatype_string(spark_type))


def _stage_time(
    table: Any,
    files: BatchFiles,
    task: ContinualTaskDef,
    time: int,
    added: list[dict[str, Any]],
    retracted: list[tuple[str, int]],
    state: State,
) -> StagedTime | None:
    """Write one time's files; added rows become addressable (file, pos) for later times."""
    if not added and not retracted:
        return None
    adds: list[StagedFile] = []
    if added:
        rows = [{c: r[c] for c in task.column_names} for r in added]
        parts = files.write_rows(
            pa.Table.from_pylist(rows, table.schema().as_arrow()), prefix=f"part-t{time}"
        )
        for part in parts:
            adds.append(part.file)
            for pos, index in enumerate(part.rows):
                state.written.append({**added[index], FILE_COL: part.file.path, POS_COL: pos})
    deletes: list[StagedFile] = []
    if retracted:
        deletes = files.write_deletes(retracted, prefix=f"deletes-t{time}")
    return StagedTime(time, tuple(adds), (), tuple(deletes), len(retracted))
