"""Writing a staged batch's files: one writer for views, continual tasks and collections.

Every file a batch stages goes through the table's own ``FileIO`` (so it
reaches wherever the catalog says the table lives, with the catalog's
credentials) and is compressed with the table's codecs
(``write.parquet.compression-codec``, ``write.delete.parquet.*``), and
comes back as the :class:`~airflow_provider_ct.core.staging.StagedFile` a
manifest lists. Files Spark wrote itself are described with :meth:`describe`.
"""

from __future__ import annotations

import posixpath
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.parquet as pq

from airflow_provider_ct.core.deletes import write_position_deletes
from airflow_provider_ct.core.file_cache import live_entries
from airflow_provider_ct.core.manifest import StagedFile
from airflow_provider_ct.core.parquet import parquet_codec
from airflow_provider_ct.exceptions import StagingError

if TYPE_CHECKING:
    from pyiceberg.table import Table


@dataclass(frozen=True)
class StagedPart:
    """One data file written from part of a batch's rows, and which rows (in file order)."""

    file: StagedFile
    #: Indices into the rows given to :meth:`BatchFiles.write_rows`, in the file's order.
    rows: tuple[int, ...]


class BatchFiles:
    """The files of one batch attempt under ``folder`` (inside the table's location).

    A partitioned table gets one data file per partition (Iceberg records
    one partition per data file, and readers prune by it); position deletes
    are split by the partition of the data files they point into, since a
    delete file applies only within its partition.
    """

    def __init__(self, table: Table, folder: str) -> None:
        self.table = table
        self.folder = folder.rstrip("/")
        #: Partition key of each data file this writer wrote (for deletes into them).
        self._written: dict[str, tuple[Any, ...]] = {}

    def _path(self, prefix: str) -> str:
        return posixpath.join(self.folder, f"{prefix}-{uuid.uuid4().hex}.parquet")

    def write_rows(self, data: pa.Table, *, prefix: str = "part") -> list[StagedPart]:
        """``data`` as new Parquet data files, one per partition of the table's spec."""
        parts = []
        for key, rows in partition_rows(self.table, data).items():
            chunk = data if len(rows) == data.num_rows else data.take(pa.array(rows))
            path = self._path(prefix)
            with self.table.io.new_output(path).create(overwrite=False) as out:
                pq.write_table(
                    with_field_ids(self.table, chunk),
                    out,
                    **parquet_codec(self.table.properties).arrow_kwargs(),
                )
            self._written[path] = key
            staged = StagedFile(path, chunk.num_rows, len(self.table.io.new_input(path)))
            parts.append(StagedPart(staged, tuple(rows)))
        return parts

    def write_deletes(
        self, positions: Sequence[tuple[str, int]], *, prefix: str = "deletes"
    ) -> list[StagedFile]:
        """Position-delete files retracting ``positions`` (file, row), one per partition."""
        groups: dict[Any, list[tuple[str, int]]] = {}
        partitions: dict[str, Any] = {}  # a file's partition looked up once, not per row
        for position in positions:
            path = position[0]
            if path not in partitions:
                partitions[path] = self._partition_of_file(path)
            groups.setdefault(partitions[path], []).append(position)
        codec = parquet_codec(self.table.properties, deletes=True)
        staged = []
        for group in groups.values():
            path = self._path(prefix)
            size = write_position_deletes(self.table.io, path, group, codec)
            staged.append(StagedFile(path, len(group), size))
        return staged

    def _partition_of_file(self, path: str) -> Any:
        if self.table.spec().is_unpartitioned():
            return ()
        if path in self._written:
            return self._written[path]
        if not hasattr(self, "_live"):
            self._live = _live_partitions(self.table)
        return self._live.get(path, ("?", path))  # unknown: its own group; the commit says why

    def describe(self, path: str) -> StagedFile:
        """A Parquet file another writer (Spark) put into the batch's folder."""
        input_file = self.table.io.new_input(path)
        with input_file.open() as stream:
            rows = pq.read_metadata(stream).num_rows
        return StagedFile(path=path, record_count=rows, size_bytes=len(input_file))


def with_field_ids(table: Table, data: pa.Table) -> pa.Table:
    """``data`` with the table's Iceberg field ids on its columns (matched by name).

    Why: a staged file without ids is read through the table's name mapping,
    which can name only one field per column name; once a column is replaced
    (``on_schema_change="recreate"``), old files and new ones must resolve
    the same name to different fields, and only ids can say which.
    """
    from pyiceberg.io.pyarrow import schema_to_pyarrow

    schema = schema_to_pyarrow(table.schema())
    by_name = {f.name.lower(): f for f in schema}
    try:
        fields = [by_name[name.lower()].with_name(name) for name in data.column_names]
        return data.cast(pa.schema(fields))
    except (KeyError, pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
        raise StagingError(
            f"rows staged for {'.'.join(table.name())} do not fit its schema "
            f"{table.schema()}: {exc}"
        ) from None


def partition_rows(table: Table, data: pa.Table) -> dict[tuple[Any, ...], list[int]]:
    """Row indices of ``data`` by partition key under the table's spec (one key if unpartitioned).

    The key holds the transformed values (``day(ts)``, ``bucket(16, id)``, ...)
    computed by Iceberg's own transforms, so a key is exactly one partition.
    """
    spec = table.spec()
    if spec.is_unpartitioned() or data.num_rows == 0:
        return {(): list(range(data.num_rows))}
    schema = table.schema()
    columns = []
    for field in spec.fields:
        source = schema.find_field(field.source_id)
        if source.name not in data.column_names:
            raise StagingError(
                f"rows for {'.'.join(table.name())} lack its partition source column {source.name}"
            )
        values = data.column(source.name).combine_chunks()
        columns.append(field.transform.pyarrow_transform(source.field_type)(values).to_pylist())
    groups: dict[tuple[Any, ...], list[int]] = {}
    for index, key in enumerate(zip(*columns, strict=True)):
        groups.setdefault(key, []).append(index)
    return groups


def _live_partitions(table: Table) -> dict[str, Any]:
    """The partition (spec id and values) of each live data file of the table's head."""
    snapshot = table.metadata.current_snapshot()
    found: dict[str, Any] = {}
    if snapshot is None:
        return found
    for manifest in snapshot.manifests(io=table.io):
        for entry in live_entries(manifest, table.io):
            record = entry.data_file.partition
            found[entry.data_file.file_path] = (manifest.partition_spec_id, repr(record))
    return found
