"""The continual-task job: run a task's statements for each input time of a batch.

Plain PySpark code like :mod:`.write_job`, run for a
:class:`~airflow_provider_ct.spark.jobs.ContinualWrite` spec. For a batch
``[lower, upper)`` of the output it

1. refuses to work if the output's head is no longer the description's base;
2. finds the input's times in the batch (its snapshots there) and, for each
   time ``t`` in order, reads only the rows *inserted* at ``t`` (an
   incremental read between the snapshot before ``t`` and the one at ``t``
   across appends, :func:`~airflow_provider_ct.core.changes.table_changes`
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

import logging
import posixpath
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import pyarrow as pa
from sqlglot import exp

from airflow_provider_ct.core.batch_files import BatchFiles
from airflow_provider_ct.core.catalog import CatalogConfig
from airflow_provider_ct.core.changes import table_changes
from airflow_provider_ct.core.continual import (
    CONTINUAL_TASK_KIND,
    NOW_FUNCTIONS,
    ContinualTaskDef,
    as_of_of,
    batch_times,
    parse_continual_task,
    window,
)
from airflow_provider_ct.core.description import BatchDescription
from airflow_provider_ct.core.keys import SummaryKeys, TableKeys
from airflow_provider_ct.core.query import query_hash
from airflow_provider_ct.core.reports import WriteReport, WriteStatus
from airflow_provider_ct.core.staging import (
    StagedFile,
    StagedTime,
    begin_batch,
    finish_batch,
    outdated_reason,
)
from airflow_provider_ct.core.tables import create_managed_table
from airflow_provider_ct.core.timeline import Timeline
from airflow_provider_ct.exceptions import CTError
from airflow_provider_ct.spark.frames import changes_to_spark

if TYPE_CHECKING:
    from pyiceberg.io import FileIO
    from pyiceberg.table import Table
    from pyspark.sql import DataFrame, SparkSession

log = logging.getLogger("airflow_provider_ct.continual_job")

SELF_VIEW, INPUT_VIEW, REF_VIEW = "__ct_self", "__ct_input", "__ct_ref_"
FILE_COL, POS_COL = "__ct_file", "__ct_pos"


@dataclass
class _State:
    """The output as the batch has changed it so far."""

    base: DataFrame | None  # output at the base snapshot, with FILE_COL/POS_COL
    written: list[dict[str, Any]] = field(default_factory=list)  # rows staged this batch
    deleted: set[tuple[str, int]] = field(default_factory=set)


def _rename_tables(tree: Any, mapping: dict[str, str]) -> Any:
    tree = tree.copy()
    for table in list(tree.find_all(exp.Table)):
        name = f"{table.db}.{table.name}".lower() if table.db else table.name.lower()
        if name in mapping:
            alias = table.args.get("alias") or exp.TableAlias(this=exp.to_identifier(table.name))
            table.replace(exp.Table(this=exp.to_identifier(mapping[name]), alias=alias))
    return tree


def _with_time(tree: Any, time: int) -> Any:
    for call in list(tree.find_all(exp.Anonymous)):
        if str(call.this).lower() in NOW_FUNCTIONS:
            call.replace(exp.Literal.number(time))
    return tree


def _inserted_rows(
    spark: SparkSession,
    config: CatalogConfig,
    name: str,
    source: Table,
    timeline: Timeline,
    time: int,
    scratch: str,
    scratch_io: FileIO,
) -> tuple[DataFrame, str, str | None]:
    """Rows inserted into the input at ``time``: between the snapshots at t-1 and t.

    Appends only: Iceberg's incremental read of the new files, in Spark.
    Anything else (overwrites, deletes, merge-on-read position deletes, and
    ``replace`` in between): :func:`~airflow_provider_ct.core.changes.table_changes`
    reads the files the range touched (on the driver, with PyArrow) and the
    net inserted rows are handed to Spark through one Parquet file under
    ``scratch``, whose path is returned for the caller to remove once the
    time is processed. Neither reads the whole input.

    ``require_sealed=False``: the mint already checked (with the input's own
    upper policy) that every time of the batch is sealed.
    """
    table = f"{config.name}.{name}"
    current = timeline.snapshot_at(time, require_sealed=False)
    previous = timeline.snapshot_at(time - 1, require_sealed=False) if time > 0 else None
    if current is None:
        return spark.table(table).limit(0), "empty", None
    if previous is None:
        read = spark.read.option("snapshot-id", str(current)).table(table)
        return read, "first-snapshot", None
    between = _snapshots_between(timeline, previous, current)
    if all(op == "append" for op in between):
        incremental = (
            spark.read.format("iceberg")
            .option("start-snapshot-id", str(previous))
            .option("end-snapshot-id", str(current))
            .load(table)
        )
        return incremental, "incremental", None
    changes = table_changes(source, previous, current)
    log.info(
        "input %s changed by %s at %s: %d row(s) inserted, %d deleted, read from %d file(s) "
        "(%d bytes) of %d snapshot(s)",
        name,
        sorted(set(between)),
        time,
        changes.inserted.num_rows,
        changes.deleted.num_rows,
        changes.files_read,
        changes.bytes_read,
        changes.snapshots,
    )
    schema = spark.read.option("snapshot-id", str(current)).table(table).schema
    frame = changes_to_spark(spark, changes.inserted, schema, folder=scratch, io=scratch_io)
    return frame, "changes", frame.inputFiles()[0]


def _snapshots_between(timeline: Timeline, previous: int, current: int) -> list[str]:
    ops: list[str] = []
    inside = False
    for entry in timeline.entries:
        if inside:
            ops.append(entry.operation)
        if entry.snapshot_id == previous:
            inside = True
        if entry.snapshot_id == current:
            break
    return ops or ["unknown"]


def _state_frame(spark: SparkSession, task: ContinualTaskDef, state: _State) -> DataFrame:
    from pyspark.sql import functions as F

    ddl = f"{task.spark_schema_ddl()}, `{FILE_COL}` string, `{POS_COL}` long"
    frames = []
    if state.base is not None:
        base = state.base
        if state.deleted:
            gone = spark.createDataFrame(
                sorted(state.deleted), f"`{FILE_COL}` string, `{POS_COL}` long"
            )
            base = base.join(F.broadcast(gone), [FILE_COL, POS_COL], "left_anti")
        frames.append(base)
    if state.written:
        live = [r for r in state.written if (r[FILE_COL], r[POS_COL]) not in state.deleted]
        if live:
            frames.append(spark.createDataFrame(live, ddl))
    if not frames:
        return spark.createDataFrame([], ddl)
    out = frames[0]
    for frame in frames[1:]:
        out = out.unionByName(frame)
    return out


def _run_time(
    spark: SparkSession,
    config: CatalogConfig,
    task: ContinualTaskDef,
    state: _State,
    time: int,
    inserts: DataFrame,
    references: dict[str, Timeline],
) -> tuple[list[dict[str, Any]], list[tuple[str, int]]]:
    """Run the statements at ``time``; returns (rows added, persisted rows retracted)."""
    from pyspark.sql import functions as F

    inserts.select(*[F.col(f"`{c}`") for c in inserts.columns]).createOrReplaceTempView(INPUT_VIEW)
    mapping = {task.name: SELF_VIEW, task.input: INPUT_VIEW}
    for index, name in enumerate(sorted(references)):
        snapshot = references[name].snapshot_at(time, require_sealed=False)
        view = f"{REF_VIEW}{index}"
        table = f"{config.name}.{name}"
        frame = (
            spark.table(table).limit(0)
            if snapshot is None
            else spark.read.option("snapshot-id", str(snapshot)).table(table)
        )
        frame.createOrReplaceTempView(view)
        mapping[name] = view
    pending: list[dict[str, Any]] = []  # added at this time, not yet staged
    next_pending = 0
    retracted: list[tuple[str, int]] = []
    names = task.column_names
    ddl = task.spark_schema_ddl()
    for statement in task.statements:
        current = _state_frame(spark, task, state)
        if pending:
            current = current.unionByName(
                spark.createDataFrame(pending, f"{ddl}, `{FILE_COL}` string, `{POS_COL}` long")
            )
        current.createOrReplaceTempView(SELF_VIEW)
        tree = _with_time(_rename_tables(statement.expression, mapping), time)
        if statement.kind == "delete":
            where = tree.args.get("where")
            select = exp.select(exp.column(FILE_COL), exp.column(POS_COL)).from_(tree.this)
            if where is not None:
                select = select.where(where.this)
            hit = [(str(r[0]), int(r[1])) for r in spark.sql(select.sql(dialect="spark")).collect()]
            for key in hit:
                if key[0].startswith("pending:"):
                    pending = [p for p in pending if (p[FILE_COL], p[POS_COL]) != key]
                else:
                    state.deleted.add(key)
                    retracted.append(key)
        else:
            result = spark.sql(tree.expression.sql(dialect="spark"))
            targets = list(statement.columns) or names
            if len(result.columns) != len(targets):
                raise CTError(
                    f"an INSERT of task {task.name} produces {len(result.columns)} columns, "
                    f"the task declares {len(targets)}"
                )
            renamed = result.toDF(*targets)
            typed = renamed.select(
                *[
                    (F.col(f"`{c}`") if c in targets else F.lit(None)).cast(t).alias(c)
                    for c, t in task.columns
                ]
            )
            for row in typed.collect():
                record = row.asDict()
                record[FILE_COL] = f"pending:{time}"
                record[POS_COL] = next_pending
                next_pending += 1
                pending.append(record)
    return pending, retracted


def run_continual(
    spark: SparkSession,
    config: CatalogConfig,
    task_sql: str,
    default_namespace: str | None,
    description: BatchDescription,
) -> WriteReport:
    """Compute and stage one batch of a continual task."""
    from pyiceberg.exceptions import NoSuchTableError
    from pyspark.sql import functions as F

    task = parse_continual_task(
        task_sql, default_namespace=default_namespace, catalog_name=config.name
    )
    desc = description
    if desc.target != task.name:
        raise CTError(f"description {desc.id} is for {desc.target}, not for task {task.name}")
    catalog = config.load()
    try:
        table = catalog.load_table(task.name)
    except NoSuchTableError:
        table = None
    reason = outdated_reason(table, desc)
    if reason is not None:
        return WriteReport(WriteStatus.OUTDATED, desc.id, desc.target, reason=reason)
    if table is None:
        schema = pa.schema([pa.field(c, _arrow_type(spark, t)) for c, t in task.columns])
        table = create_managed_table(
            catalog, task.name, schema, properties={TableKeys.AS_OF: str(desc.time)}
        )
        if table.metadata.current_snapshot() is not None:
            return WriteReport(
                WriteStatus.OUTDATED,
                desc.id,
                desc.target,
                reason="output was created and written concurrently",
            )
    as_of = as_of_of(table.metadata.properties, desc.time)
    source = catalog.load_table(task.input)
    input_tl = Timeline.of(source)
    references = {n: Timeline.of(catalog.load_table(n)) for n in task.references}
    lower, upper = window(desc)
    all_times = batch_times(input_tl, desc, as_of=as_of, snapshot=task.snapshot)
    snapshot_time = as_of if task.snapshot and all_times[:1] == [as_of] else None

    state = _State(base=None)
    if desc.base_snapshot_id is not None:
        state.base = (
            spark.read.option("snapshot-id", str(desc.base_snapshot_id))
            .table(f"{config.name}.{task.name}")
            .select(
                *[F.col(f"`{c}`") for c in task.column_names],
                F.col("_file").alias(FILE_COL),
                F.col("_pos").alias(POS_COL),
            )
        )
    batch, manifest = begin_batch(
        table, desc, summary={SummaryKeys.QUERY_HASH: query_hash(task_sql, CONTINUAL_TASK_KIND)}
    )
    data_dir = batch.data_dir
    staged_times: list[StagedTime] = []
    total_in, total_out = 0, 0
    reads: dict[str, int] = {}  # how each input time's inserts were read
    for time in all_times:
        scratch: str | None = None
        if time == snapshot_time:
            snap = input_tl.snapshot_at(time, require_sealed=False)
            inserts = (
                spark.table(f"{config.name}.{task.input}").limit(0)
                if snap is None
                else spark.read.option("snapshot-id", str(snap)).table(
                    f"{config.name}.{task.input}"
                )
            )
        else:
            inserts, mode, scratch = _inserted_rows(
                spark,
                config,
                task.input,
                source,
                input_tl,
                time,
                posixpath.join(data_dir, "scratch"),
                table.io,
            )
            reads[mode] = reads.get(mode, 0) + 1
        try:
            added, retracted = _run_time(spark, config, task, state, time, inserts, references)
        finally:
            if scratch is not None:  # every statement of this time has run (collected)
                table.io.delete(scratch)
        staged = _stage_time(table, data_dir, task, time, added, retracted, state)
        if staged is not None:
            staged_times.append(staged)
            total_in += sum(f.record_count for f in staged.add)
            total_out += staged.removed_record_count
    final = finish_batch(batch, manifest, staged_times)
    log.info(
        "continual task %s: %d input time(s) in [%s, %s): +%d -%d rows",
        task.name,
        len(all_times),
        lower,
        upper,
        total_in,
        total_out,
    )
    return WriteReport(
        WriteStatus.STAGED,
        desc.id,
        desc.target,
        rows_to_insert=total_in,
        rows_to_delete=total_out,
        manifest=manifest,
        staged_bytes=final.added_bytes,
        extra={"input_times": all_times, "input_reads": reads},
    )


def _arrow_type(spark: SparkSession, spark_type: str) -> pa.DataType:
    from pyspark.sql.pandas.types import to_arrow_type
    from pyspark.sql.types import _parse_datatype_string

    return to_arrow_type(_parse_datatype_string(spark_type))


def _stage_time(
    table: Any,
    data_dir: str,
    task: ContinualTaskDef,
    time: int,
    added: list[dict[str, Any]],
    retracted: list[tuple[str, int]],
    state: _State,
) -> StagedTime | None:
    """Write one time's files; added rows become addressable (file, pos) for later times."""
    if not added and not retracted:
        return None
    files = BatchFiles(table, data_dir)
    adds: tuple[StagedFile, ...] = ()
    if added:
        rows = [{c: r[c] for c in task.column_names} for r in added]
        staged = files.write_rows(
            pa.Table.from_pylist(rows, table.schema().as_arrow()), prefix=f"part-t{time}"
        )
        adds = (staged,)
        for pos, row in enumerate(added):
            state.written.append({**row, FILE_COL: staged.path, POS_COL: pos})
    deletes: tuple[StagedFile, ...] = ()
    if retracted:
        deletes = (files.write_deletes(retracted, prefix=f"deletes-t{time}"),)
    return StagedTime(time, adds, (), deletes, len(retracted))
