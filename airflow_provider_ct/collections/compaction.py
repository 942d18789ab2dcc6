"""Small-file compaction for managed tables, without vouching for any time.

Small blind writes write small files, and every read opens every file.
Compaction rewrites the small data files of the head into fewer files in
one snapshot that carries the upper forward (``ct.upper`` = the current
upper) and has neither ``ct.time`` nor ``ct.lower``: it changes no contents,
so it vouches for no time, and the next compare-and-append's ``ct.lower``
still equals the upper before it. Its Iceberg operation is ``replace``
(files rewritten, rows unchanged), so the quiet check, incremental changes
and continual tasks downstream skip it as they skip Spark's
``rewrite_data_files``. Data files that position deletes apply to
(views and continual tasks write them) are left alone; collections never
write delete files, so they compact fully. Partitioned tables are skipped.

The work is three steps with different failure rules: choosing the files
(:func:`_bins`), rewriting them (a row-count mismatch deletes what was
written and fails), and committing (losing a race cleans up and reports
``contended``; an unknown outcome keeps the files, since they may be live).
"""

from __future__ import annotations

import logging
import uuid
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from airflow_provider_ct.collections.registry import CollectionKeys, is_read_only
from airflow_provider_ct.collections.rows import arrow_schema, write_parquet
from airflow_provider_ct.core.commit import commit_once
from airflow_provider_ct.core.expiry import delete_files
from airflow_provider_ct.core.keys import SummaryKeys
from airflow_provider_ct.core.producers import replace_producer
from airflow_provider_ct.core.timeline import Timeline
from airflow_provider_ct.exceptions import CommitStateUnknownError, ConfigurationError

if TYPE_CHECKING:
    from pyiceberg.catalog import Catalog
    from pyiceberg.table import Table

log = logging.getLogger(__name__)

#: Data files below this size are compacted.
DEFAULT_SMALL_FILE_BYTES = 8 * 1024 * 1024
#: Compact only when at least this many small files exist.
DEFAULT_MIN_FILES = 8
#: Compacted files grow up to about this size.
DEFAULT_TARGET_FILE_BYTES = 128 * 1024 * 1024


@dataclass(frozen=True)
class CompactionReport:
    """What one compaction run did to one table (its JSON is the maintain task's XCom)."""

    table: str
    status: str  # compacted | nothing-to-compact | partitioned | contended | read-only
    files_rewritten: int = 0
    files_written: int = 0
    records: int = 0
    snapshot_id: int | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "table": self.table,
            "status": self.status,
            "files_rewritten": self.files_rewritten,
            "files_written": self.files_written,
            "records": self.records,
            "snapshot_id": self.snapshot_id,
        }


def _bins(tasks: list[Any], target_bytes: int) -> list[list[Any]]:
    """Group small files (smallest first) into bins of about ``target_bytes``."""
    bins: list[list[Any]] = []
    current: list[Any] = []
    size = 0
    for task in sorted(tasks, key=lambda t: t.file.file_size_in_bytes):
        if current and size + task.file.file_size_in_bytes > target_bytes:
            bins.append(current)
            current, size = [], 0
        current.append(task)
        size += task.file.file_size_in_bytes
    if current:
        bins.append(current)
    return [b for b in bins if len(b) > 1]


def _plan(
    table: Table, *, small_file_bytes: int, min_files: int, target_file_bytes: int
) -> list[list[Any]]:
    """The head's small data files, in bins of at least two, or none when too few are small.

    A file that position deletes apply to is left alone: the deletes name
    positions in that very file, so a rewrite would have to rewrite them too.
    """
    from pyiceberg.manifest import DataFileContent

    small = [
        task
        for task in table.scan().plan_files()
        if not task.delete_files
        and task.file.content == DataFileContent.DATA
        and task.file.file_size_in_bytes < small_file_bytes
    ]
    return _bins(small, target_file_bytes) if len(small) >= min_files else []


def _rewrite(
    table: Table, name: str, bins: list[list[Any]], batch_id: str
) -> tuple[list[str], int]:
    """Write one file per bin holding its files' rows; the files written and the row count.

    No deletes apply to the files read, so every record must come back; if
    not, nothing is committed and the files written so far are deleted.
    """
    from pyiceberg.expressions import AlwaysTrue
    from pyiceberg.io.pyarrow import ArrowScan

    schema, arrow = table.schema(), arrow_schema(table)
    written: list[str] = []
    records = 0
    for group in bins:
        data = ArrowScan(table.metadata, table.io, schema, AlwaysTrue()).to_table(group)
        expected = sum(t.file.record_count for t in group)
        if data.num_rows != expected:
            delete_files(table, written)
            raise ConfigurationError(
                f"compaction of {name}: read {data.num_rows} rows from files holding {expected}"
            )
        written.extend(write_parquet(table, batch_id, data.cast(arrow)))
        records += data.num_rows
    return written, records


def _commit_compaction(
    table: Table,
    name: str,
    timeline: Timeline,
    rewritten: list[Any],
    written: list[str],
    batch_id: str,
) -> bool:
    """Swap ``rewritten`` for ``written`` in one ``replace`` snapshot; False when it lost.

    The snapshot carries the current upper and no time (see the module
    docstring). A lost race deletes the new files and manifests: nothing
    references them. An unknown outcome keeps them, since the commit may
    have landed and they would then be the table's only copy of those rows.
    """
    from pyiceberg.exceptions import CommitFailedException
    from pyiceberg.io.pyarrow import parquet_files_to_data_files

    tx = table.transaction()
    props = {
        SummaryKeys.UPPER: timeline.upper.to_summary(),
        SummaryKeys.BATCH_ID: batch_id,
        CollectionKeys.MAINTENANCE: "compaction",
    }
    producer = replace_producer(tx, props)
    for task in rewritten:
        producer.delete_data_file(task.file)
    for data_file in parquet_files_to_data_files(table.io, tx.table_metadata, iter(written)):
        producer.append_data_file(data_file)
    producer.commit()
    try:
        commit_once(table, tx, timeline.head_snapshot_id)
    except CommitFailedException as exc:
        clean = getattr(producer, "_clean_all_uncommitted", None)  # its manifests
        if clean is not None:
            clean()
        delete_files(table, written)
        log.info("compaction of %s lost to a concurrent commit (%s)", name, exc)
        return False
    except Exception as exc:
        raise CommitStateUnknownError(
            f"compaction of {name} has an unknown outcome: {exc}; its files are kept"
        ) from exc
    return True


def compact(
    catalog: Catalog,
    name: str,
    *,
    small_file_bytes: int = DEFAULT_SMALL_FILE_BYTES,
    min_files: int = DEFAULT_MIN_FILES,
    target_file_bytes: int = DEFAULT_TARGET_FILE_BYTES,
    read_only: bool | None = None,
) -> CompactionReport:
    """Rewrite the head's small data files of ``name`` into fewer files, in one snapshot."""
    table = catalog.load_table(name)
    if is_read_only(table, read_only):
        return CompactionReport(name, "read-only")
    timeline = Timeline.of(table)
    if not timeline.managed:
        raise ConfigurationError(f"table {name} is not managed by airflow-provider-ct")
    if timeline.head_snapshot_id is None:
        return CompactionReport(name, "nothing-to-compact")
    if not table.spec().is_unpartitioned():
        return CompactionReport(name, "partitioned")
    bins = _plan(
        table,
        small_file_bytes=small_file_bytes,
        min_files=min_files,
        target_file_bytes=target_file_bytes,
    )
    if not bins:
        return CompactionReport(name, "nothing-to-compact")
    batch_id = f"compact-{uuid.uuid4().hex}"
    written, records = _rewrite(table, name, bins, batch_id)
    rewritten = [task for group in bins for task in group]
    if not _commit_compaction(table, name, timeline, rewritten, written, batch_id):
        return CompactionReport(name, "contended")
    table.refresh()
    head = table.metadata.current_snapshot()
    log.info(
        "compacted %s: %d small file(s) -> %d file(s), %d record(s)",
        name,
        len(rewritten),
        len(written),
        records,
    )
    return CompactionReport(
        name,
        "compacted",
        files_rewritten=len(rewritten),
        files_written=len(written),
        records=records,
        snapshot_id=head.snapshot_id if head is not None else None,
    )
