"""Staging a view's correction: its files under the table's location, then the manifest.

The write job (:mod:`.write_job`) decides what a tick's correction is and
what its batch records; this module only writes it down, so the job's
orchestration reads without Parquet and file-system details. Inserts are
Parquet data files (written by pyarrow on the driver when few, else by
Spark), retractions one position-delete file; the manifest is written
before the first file (``begin_batch``) and completed after the last
(``finish_batch``), so a crashed job leaves a findable folder. Nothing
becomes visible until ``AppendOperator`` compare-and-appends the batch.
"""

from __future__ import annotations

import posixpath
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.fs as pafs

from airflow_provider_ct.core.batch_files import BatchFiles
from airflow_provider_ct.core.description import BatchDescription
from airflow_provider_ct.core.manifest import StagedFile, StagedTime
from airflow_provider_ct.core.parquet import parquet_codec
from airflow_provider_ct.core.reports import WriteReport, WriteStatus
from airflow_provider_ct.core.schema_change import SchemaChange
from airflow_provider_ct.core.staging import begin_batch, finish_batch
from airflow_provider_ct.core.storage import filesystem, io_properties
from airflow_provider_ct.spark.fingerprints import Correction

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

#: Corrections up to this many inserted rows are written by pyarrow on the driver.
ROWS_COLLECTED = 200_000
#: Rows per staged Parquet file (roughly; Spark splits by partition).
ROWS_PER_FILE = 2_000_000


def _list_parquet(uri: str, io: Mapping[str, str]) -> list[str]:
    fs, local = filesystem(uri, io)
    prefix = uri[: len(uri) - len(local)] if uri.endswith(local) else ""
    infos = fs.get_file_info(pafs.FileSelector(local, allow_not_found=True, recursive=True))
    return sorted(
        prefix + i.path
        for i in infos
        if i.type == pafs.FileType.File
        and posixpath.basename(i.path).startswith("part-")
        and i.path.endswith(".parquet")
    )


def _drop_side_files(uri: str, io: Mapping[str, str]) -> None:
    """Remove what Spark writes beside the Parquet files (``_SUCCESS``, ``.crc``) in our folder.

    The table never references them, so left in place they would be debris.
    """
    fs, local = filesystem(uri, io)
    for info in fs.get_file_info(pafs.FileSelector(local, allow_not_found=True, recursive=True)):
        name = posixpath.basename(info.path)
        if info.type == pafs.FileType.File and (name == "_SUCCESS" or name.endswith(".crc")):
            fs.delete_file(info.path)


def _write_inserts(table: Any, correction: Correction, folder: str) -> None:
    """Write the rows to insert as Parquet files under ``folder``.

    A small correction (most ticks) is collected through Arrow and written
    as one file by pyarrow: a Spark write job (a shuffle for the file count,
    task scheduling, commit protocol) costs seconds even for ten rows. The
    table's name mapping reads both kinds of files alike. A partitioned
    target's rows always go through Arrow, where they are split into one
    file per partition (:class:`~airflow_provider_ct.core.batch_files.BatchFiles`).
    """
    if isinstance(correction.inserts, pa.Table):  # diffed on the driver
        BatchFiles(table, folder).write_rows(correction.inserts)
        return
    partitioned = not table.spec().is_unpartitioned()
    if correction.insert_count <= ROWS_COLLECTED or partitioned:
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
    inserts = _with_field_ids(table, correction.inserts)
    writer = inserts.repartition(files).write.mode("errorifexists")
    writer.option("compression", codec).parquet(folder)


def _with_field_ids(table: Any, frame: DataFrame) -> DataFrame:
    """``frame`` with the table's field ids as Spark's Parquet writer records them.

    Spark writes a column's ``parquet.field.id`` metadata as its Parquet
    field id (``spark.sql.parquet.fieldId.write.enabled``, on by default), so
    these files resolve by id like Iceberg's own (see
    :func:`~airflow_provider_ct.core.batch_files.with_field_ids` for why).
    Nested columns would need ids at every level: their files keep
    resolving by name.
    """
    from pyspark.sql import functions as F
    from pyspark.sql.types import ArrayType, MapType, StructType

    if any(isinstance(f.dataType, ArrayType | MapType | StructType) for f in frame.schema.fields):
        return frame
    ids = {f.name.lower(): f.field_id for f in table.schema().fields}
    return frame.select(
        *[
            F.col(f"`{f.name}`").alias(f.name, metadata={"parquet.field.id": ids[f.name.lower()]})
            for f in frame.schema.fields
        ]
    )


def stage_correction(
    table: Any,
    desc: BatchDescription,
    correction: Correction,
    summary: Mapping[str, str],
    lap: Callable[[str], None],
    schema_change: SchemaChange | None = None,
) -> WriteReport:
    """Stage inserts as Parquet and retractions as a position-delete file, then the manifest.

    Releases the correction's cached frames once its inserts are written.

    :param table: the target, as the batch's files are written for: with a
        ``schema_change``, as it will be once that commits
        (:func:`~airflow_provider_ct.core.schema_change.pending_table`).
    :param summary: snapshot-summary entries the append records with the batch.
    :param lap: called with a phase's name as it ends (the job's phase clock).
    :param schema_change: recorded in the manifest, for the append to commit
        with the batch.
    """
    batch, manifest = begin_batch(table, desc, summary=summary, schema_change=schema_change)
    files = BatchFiles(table, batch.data_dir)
    added: list[StagedFile] = []
    if correction.insert_count:
        _write_inserts(table, correction, posixpath.join(batch.data_dir, "inserts"))
        added = [files.describe(p) for p in _list_parquet(batch.data_dir, io_properties(table))]
        _drop_side_files(batch.data_dir, io_properties(table))
    if correction.release is not None:
        correction.release()
    lap("inserts")
    deletes = files.write_deletes(correction.retractions) if correction.retractions else []
    retractions = correction.retract_count
    finish_batch(
        batch,
        manifest,
        [StagedTime(desc.time, tuple(added), (), tuple(deletes), retractions)],
        io=io_properties(table),
    )
    lap("deletes+manifest")
    return WriteReport(
        WriteStatus.STAGED,
        desc.id,
        desc.target,
        rows_to_insert=correction.insert_count,
        rows_to_delete=correction.retract_count,
        manifest=manifest,
        staged_bytes=sum(f.size_bytes for f in (*added, *deletes)),
    )
