"""What a continual task's input inserted at one time, read without scanning the input.

For an input time ``t`` the job needs the rows inserted between the input's
snapshot at ``t - 1`` and the one at ``t``: Iceberg's incremental read when
every snapshot in between is an append, else the exact net inserts computed
on the driver by :func:`~airflow_provider_ct.ivm.changes.table_changes.table_changes`
(see docs/continual-tasks.md, "How inserts are read").
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from airflow_provider_ct.core.catalog import CatalogConfig
from airflow_provider_ct.core.timeline import Timeline
from airflow_provider_ct.ivm.changes.table_changes import table_changes
from airflow_provider_ct.spark.frames import changes_to_spark

if TYPE_CHECKING:
    from pyiceberg.io import FileIO
    from pyiceberg.table import Table
    from pyspark.sql import DataFrame, SparkSession

log = logging.getLogger("airflow_provider_ct.continual_job")


def inserted_rows(
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
    ``replace`` in between): :func:`~airflow_provider_ct.ivm.changes.table_changes.table_changes`
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
