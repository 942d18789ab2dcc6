"""Building the snapshots of one commit: one per timed change, or one that only moves the upper.

:func:`~airflow_provider_ct.core.commit.compare_and_append` hands the result
to the catalog exactly once; this module only prepares it inside a PyIceberg
transaction: registers staged data files (checked against the table's
schema), drops replaced files, attaches staged position-delete files, and
writes the frontier keys into each snapshot's summary.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from airflow_provider_ct.core.deletes import attach_delete_files, position_delete_data_file
from airflow_provider_ct.core.frontier import Frontier, check_timestamp
from airflow_provider_ct.core.keys import SummaryKeys
from airflow_provider_ct.exceptions import CommitError

if TYPE_CHECKING:
    from pyiceberg.io import FileIO
    from pyiceberg.manifest import DataFile
    from pyiceberg.table import Table, Transaction
    from pyiceberg.table.metadata import TableMetadata

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class TimedChange:
    """The data change that makes the table's contents at ``time`` final.

    ``add_files`` are Parquet files (written outside the table, e.g. staged by
    Spark) to register; ``remove_files`` are data files of the table's current
    snapshot to drop; ``delete_files`` are staged position-delete files that
    retract single rows of existing data files (merge-on-read). A change with
    no files still records ``time``: it states that the contents as of the
    base snapshot are the contents at ``time``.
    """

    time: int
    add_files: Sequence[str] = ()
    remove_files: Sequence[str] = ()
    delete_files: Sequence[str] = ()

    def __post_init__(self) -> None:
        check_timestamp(self.time, "change time")


def _summary(
    *,
    lower: Frontier,
    upper: Frontier,
    batch_id: str,
    time: int | None,
    inputs: Mapping[str, int | None] | None,
    extra: Mapping[str, str] | None,
) -> dict[str, str]:
    summary = dict(extra or {})
    summary[SummaryKeys.LOWER] = lower.to_summary()
    summary[SummaryKeys.UPPER] = upper.to_summary()
    summary[SummaryKeys.BATCH_ID] = batch_id
    if time is not None:
        summary[SummaryKeys.TIME] = str(time)
    if inputs is not None:
        summary[SummaryKeys.INPUTS] = json.dumps(dict(inputs), sort_keys=True)
    return summary


def _data_files_by_path(
    metadata: TableMetadata, io: FileIO, table_name: str, paths: Sequence[str]
) -> list[DataFile]:
    """The live data files with the given paths in ``metadata``'s head; all must exist."""
    wanted = set(paths)
    found: dict[str, DataFile] = {}
    snapshot = metadata.current_snapshot()
    if snapshot is not None and wanted:
        for manifest in snapshot.manifests(io=io):
            for entry in manifest.fetch_manifest_entry(io=io, discard_deleted=True):
                if entry.data_file.file_path in wanted:
                    found[entry.data_file.file_path] = entry.data_file
    missing = sorted(wanted - set(found))
    if missing:
        raise CommitError(
            f"cannot remove {len(missing)} file(s) that are not live in table "
            f"{table_name}'s head snapshot, e.g. {missing[0]}"
        )
    return [found[p] for p in paths]


def staged_data_files(
    table: Table, metadata: TableMetadata, paths: Sequence[str]
) -> list[DataFile]:
    """The staged Parquet files as Iceberg data files, each with its partition.

    Checked against ``metadata``, the transaction's: with a schema change
    (:mod:`.schema_change`) the files were staged under the new schema.
    PyIceberg infers a file's partition from its column bounds, which only
    works for order-preserving transforms; under ``bucket`` (or any other)
    the partition is computed from the file's own rows, which the staging
    wrote one partition to a file.
    """
    from pyiceberg.io.pyarrow import parquet_files_to_data_files

    spec = metadata.spec()
    try:
        if all(f.transform.preserves_order for f in spec.fields):
            return list(parquet_files_to_data_files(table.io, metadata, iter(paths)))
        return [_data_file_of_one_partition(table, metadata, path) for path in paths]
    except FileNotFoundError as exc:
        raise CommitError(f"a staged file to add is missing: {exc}") from None
    except ValueError as exc:
        raise CommitError(
            f"a staged file does not match table {'.'.join(table.name())}'s schema: {exc}"
        ) from None


def _data_file_of_one_partition(table: Table, metadata: TableMetadata, path: str) -> DataFile:
    """A data file whose partition is that of all its rows (else ``ValueError``)."""
    import pyarrow.parquet as pq
    from pyiceberg.io.pyarrow import (
        _check_pyarrow_schema_compatible,
        compute_statistics_plan,
        data_file_statistics_from_parquet_metadata,
        parquet_path_to_id_mapping,
    )
    from pyiceberg.manifest import DataFile as IcebergDataFile
    from pyiceberg.manifest import DataFileContent, FileFormat
    from pyiceberg.typedef import Record

    schema, spec = metadata.schema(), metadata.spec()
    stream = table.io.new_input(path)
    with stream.open() as handle:
        parquet = pq.ParquetFile(handle)
        _check_pyarrow_schema_compatible(
            schema, parquet.schema_arrow, format_version=metadata.format_version
        )
        sources = sorted({schema.find_field(f.source_id).name for f in spec.fields})
        rows = parquet.read(columns=sources).to_pylist()
        statistics = data_file_statistics_from_parquet_metadata(
            parquet_metadata=parquet.metadata,
            stats_columns=compute_statistics_plan(schema, metadata.properties),
            parquet_column_mapping=parquet_path_to_id_mapping(schema),
        )
    keys = {_partition_key(spec, schema, row) for row in rows}
    if len(keys) != 1:
        raise ValueError(f"{path} holds rows of {len(keys)} partitions, not one")
    return IcebergDataFile.from_args(
        content=DataFileContent.DATA,
        file_path=path,
        file_format=FileFormat.PARQUET,
        partition=Record(*keys.pop()),
        file_size_in_bytes=len(stream),
        sort_order_id=None,
        spec_id=metadata.default_spec_id,
        equality_ids=None,
        key_metadata=None,
        **statistics.to_serialized_dict(),
    )


def _partition_key(spec: Any, schema: Any, row: Mapping[str, Any]) -> tuple[Any, ...]:
    """A row's partition values under ``spec``, as Iceberg's transforms compute them."""
    from pyiceberg.partitioning import partition_record_value

    key = []
    for field in spec.fields:
        source = schema.find_field(field.source_id)
        value = partition_record_value(field, row[source.name], schema)
        key.append(field.transform.transform(source.field_type)(value))
    return tuple(key)


def stage_snapshots(
    table: Table,
    *,
    expected_upper: Frontier,
    new_upper: Frontier,
    changes: Sequence[TimedChange],
    batch_id: str,
    inputs: Mapping[str, int | None] | None,
    extra_summary: Mapping[str, str] | None,
    tx: Transaction | None = None,
) -> tuple[Transaction, list[Any]]:
    """Build one snapshot per change (or one frontier-only snapshot) in a transaction.

    :param tx: the transaction to build them in (one that already carries
        the batch's schema change); a new one by default.
    """
    tx = table.transaction() if tx is None else tx
    producers: list[Any] = []
    if not changes:
        props = _summary(
            lower=expected_upper,
            upper=new_upper,
            batch_id=batch_id,
            time=None,
            inputs=inputs,
            extra=extra_summary,
        )
        return tx, [_frontier_only(tx, props)]
    lower = expected_upper
    partitions = _Partitions(table, tx)
    for index, change in enumerate(changes):
        upper = new_upper if index == len(changes) - 1 else Frontier.at(changes[index + 1].time)
        props = _summary(
            lower=lower,
            upper=upper,
            batch_id=batch_id,
            time=change.time,
            inputs=inputs,
            extra=extra_summary,
        )
        producers.append(_stage_change(table, tx, partitions, change, props))
        lower = upper
    return tx, producers


def stage_files(
    table: Table, tx: Transaction, add_files: Sequence[str], delete_files: Sequence[str], props: Any
) -> Any:
    """One snapshot in ``tx`` adding staged data and position-delete files, no frontier keys:
    for the tables the product keeps beside a target (an aggregate's state)."""
    change = TimedChange(time=0, add_files=add_files, delete_files=delete_files)
    return _stage_change(table, tx, _Partitions(table, tx), change, props)


def _stage_change(
    table: Table, tx: Transaction, partitions: _Partitions, change: TimedChange, props: Any
) -> Any:
    """One change's snapshot in ``tx``: its removed, added and delete files; its producer."""
    update = tx.update_snapshot(snapshot_properties=props)
    snapshot_producer: Any
    if change.remove_files:
        snapshot_producer = update.overwrite()
        # Files to remove must be live in the state this snapshot builds on.
        for data_file in _data_files_by_path(
            tx.table_metadata, table.io, ".".join(table.name()), change.remove_files
        ):
            snapshot_producer.delete_data_file(data_file)
    else:
        snapshot_producer = update.fast_append()
    for data_file in staged_data_files(table, tx.table_metadata, change.add_files):
        snapshot_producer.append_data_file(data_file)
        partitions.add(data_file)
    attach_delete_files(
        snapshot_producer,
        [position_delete_data_file(table.io, p, partitions.of) for p in change.delete_files],
    )
    snapshot_producer.commit()
    return snapshot_producer


def _frontier_only(tx: Transaction, props: dict[str, str]) -> Any:
    """The snapshot of a batch without files: it only moves the upper."""
    producer = tx.update_snapshot(snapshot_properties=props).fast_append()
    producer.commit()
    return producer


class _Partitions:
    """The spec and partition of each data file a batch's delete files may point into.

    A position-delete file must carry the partition of the data files it
    deletes from (readers match deletes to data files by partition first).
    For an unpartitioned table that is always the empty partition; for a
    partitioned one it is looked up among the head's live files (read only
    when asked) and the files this batch adds.
    """

    def __init__(self, table: Table, tx: Transaction) -> None:
        self._table = table
        self._metadata = tx.table_metadata
        self._known: dict[str, tuple[int, Any]] | None = None
        self._added: dict[str, tuple[int, Any]] = {}

    def add(self, data_file: DataFile) -> None:
        """A data file this batch adds: written under the table's current spec."""
        spec_id = self._metadata.default_spec_id
        self._added[data_file.file_path] = (spec_id, data_file.partition)

    def of(self, path: str) -> tuple[int, Any] | None:
        """``(spec id, partition)`` of a data file, or None if no kept file has that path."""
        from pyiceberg.typedef import Record

        if all(spec.is_unpartitioned() for spec in self._metadata.specs().values()):
            return self._metadata.default_spec_id, Record()
        if path in self._added:
            return self._added[path]
        if self._known is None:
            self._known = _live_partitions(self._table, self._metadata)
        return self._known.get(path)


def _live_partitions(table: Table, metadata: TableMetadata) -> dict[str, tuple[int, Any]]:
    snapshot = metadata.current_snapshot()
    found: dict[str, tuple[int, Any]] = {}
    if snapshot is None:
        return found
    for manifest in snapshot.manifests(io=table.io):
        for entry in manifest.fetch_manifest_entry(io=table.io, discard_deleted=True):
            found[entry.data_file.file_path] = (
                manifest.partition_spec_id,
                entry.data_file.partition,
            )
    return found


def replace_producer(tx: Transaction, snapshot_properties: Mapping[str, str]) -> Any:
    """A snapshot producer whose snapshot is Iceberg's ``replace``: files rewritten, rows not.

    Compaction must say so. Readers that follow a table's changes (view
    ticks' quiet check, incremental changes, continual tasks' input times)
    skip ``replace`` snapshots by the spec, while an ``overwrite`` that
    removes and re-adds the same rows makes a downstream view's tick run
    Spark to find that nothing changed. PyIceberg 0.12 has no rewrite
    producer and computes summaries only for append, overwrite and delete,
    so this is its overwrite producer with the summary's totals computed as
    an overwrite and the operation then set to ``replace`` (the snapshot
    Spark's ``rewrite_data_files`` makes). Use ``delete_data_file`` and
    ``append_data_file`` on it, then ``commit()``; the caller must add files
    holding exactly the rows of the files it removes.
    """
    from pyiceberg.table.snapshots import Operation, Summary
    from pyiceberg.table.update.snapshot import _OverwriteFiles

    class _ReplaceFiles(_OverwriteFiles):
        def _summary(self, snapshot_properties: Any = None) -> Summary:
            summary = super()._summary(snapshot_properties or {})
            return Summary(Operation.REPLACE, **summary.additional_properties)

    return _ReplaceFiles(
        operation=Operation.OVERWRITE,
        transaction=tx,
        io=tx._table.io,
        snapshot_properties=dict(snapshot_properties),
    )


def discard_producers(producers: Sequence[Any]) -> None:
    for producer in producers:
        clean = getattr(producer, "_clean_all_uncommitted", None)
        if clean is not None:
            clean()
