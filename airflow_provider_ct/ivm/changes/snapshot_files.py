"""One step of a table's changes: which files two snapshots differ by, and their live rows.

:func:`~airflow_provider_ct.ivm.changes.table_changes.table_changes` walks the snapshots
of a range and nets their changes; for each step from a snapshot ``p`` to its
child ``s`` it calls :func:`step_changes`, which works on files only:

* the live files of a snapshot (:class:`LiveFiles`), from its manifests, each
  manifest read once per call (:class:`Manifests`; manifests are immutable,
  so the ones both snapshots list hold the same entries);
* the data files the step *touched*: added or removed, or under a delete
  file that was added or removed (position deletes: the data files it
  names; equality deletes: the older data files of its partition);
* per touched data file, its live positions at ``p`` and at ``s`` under
  Iceberg's rules (a position delete applies to data files with a data
  sequence number ``<=`` its own, an equality delete to those with a smaller
  one, in the same partition unless it is global), read through
  :class:`FileReader`, which reads each file once and counts what it read.

Kept apart from the walk because it is where Iceberg's file formats and
delete semantics live; the walk only decides which steps to take.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa

from airflow_provider_ct.core.file_cache import cached, file_cache, live_entries
from airflow_provider_ct.exceptions import ChangesUnavailableError
from airflow_provider_ct.ivm.changes.row_match import matching_rows

if TYPE_CHECKING:
    from collections.abc import Sequence

    from pyiceberg.manifest import DataFile, ManifestEntry, ManifestFile
    from pyiceberg.partitioning import PartitionSpec
    from pyiceberg.schema import Schema
    from pyiceberg.table import Table
    from pyiceberg.table.delete_file_index import DeleteFileIndex
    from pyiceberg.table.metadata import TableMetadata
    from pyiceberg.table.snapshots import Snapshot

#: The table property naming columns of files written without field ids.
_NAME_MAPPING = "schema.name-mapping.default"
log = logging.getLogger(__name__)


@dataclass
class LiveFiles:
    """The live files of one snapshot, looked up through its (cached) manifests."""

    snapshot_id: int | None
    manifests: dict[str, ManifestFile]
    data: dict[str, ManifestEntry]
    positional: list[ManifestEntry]
    equality: list[ManifestEntry]
    _index: DeleteFileIndex | None = field(default=None, repr=False)
    _keys: set[tuple[str, int | None]] | None = field(default=None, repr=False)

    def live_keys(self) -> set[tuple[str, int | None]]:
        """(path, data sequence number) of every live data and delete file."""
        if self._keys is None:
            entries = [*self.data.values(), *self.positional, *self.equality]
            self._keys = {(e.data_file.file_path, e.sequence_number) for e in entries}
        return self._keys

    def position_deletes_for(self, entry: ManifestEntry) -> set[DataFile]:
        """The position-delete files that apply to a live data file (sequence-number rules)."""
        from pyiceberg.manifest import INITIAL_SEQUENCE_NUMBER
        from pyiceberg.table.delete_file_index import DeleteFileIndex

        if self._index is None:
            self._index = DeleteFileIndex()
            for delete in self.positional:
                self._index.add_delete_file(delete, partition_key=delete.data_file.partition)
        data_file = entry.data_file
        sequence = entry.sequence_number or INITIAL_SEQUENCE_NUMBER
        return self._index.for_data_file(sequence, data_file, partition_key=data_file.partition)

    def equality_deletes_for(
        self, entry: ManifestEntry, specs: dict[int, PartitionSpec]
    ) -> list[DataFile]:
        """The equality-delete files of this snapshot that apply to a data file."""
        return [d.data_file for d in self.equality if equality_applies(d, entry, specs)]


def equality_applies(
    delete: ManifestEntry, entry: ManifestEntry, specs: dict[int, PartitionSpec]
) -> bool:
    """Iceberg's rule: a newer sequence number, and the same partition unless it is global."""
    if (delete.sequence_number or 0) <= (entry.sequence_number or 0):
        return False
    spec_id = delete.data_file.spec_id or 0
    spec = specs.get(spec_id)
    if spec is not None and spec.is_unpartitioned():
        return True  # an unpartitioned delete applies to every partition
    return (
        spec_id == (entry.data_file.spec_id or 0)
        and delete.data_file.partition == entry.data_file.partition
    )


#: The live files of an empty table: the ``before`` of a range from ``None``.
EMPTY_STATE = LiveFiles(None, {}, {}, [], [])


class Manifests:
    """Reads manifests once per call and builds snapshots' live-file states."""

    def __init__(self, table: Table) -> None:
        self._io = table.io
        self._entries: dict[str, list[ManifestEntry]] = {}

    def entries(self, manifest: ManifestFile) -> list[ManifestEntry]:
        path = manifest.manifest_path
        if path not in self._entries:
            self._entries[path] = live_entries(manifest, self._io)
        return self._entries[path]

    def state(self, snapshot: Snapshot) -> LiveFiles:
        from pyiceberg.manifest import DataFileContent

        manifests = {m.manifest_path: m for m in snapshot.manifests(self._io)}
        data: dict[str, ManifestEntry] = {}
        positional: list[ManifestEntry] = []
        equality: list[ManifestEntry] = []
        for manifest in manifests.values():
            for entry in self.entries(manifest):
                content = entry.data_file.content
                if content == DataFileContent.DATA:
                    data[entry.data_file.file_path] = entry
                elif content == DataFileContent.POSITION_DELETES:
                    positional.append(entry)
                elif content == DataFileContent.EQUALITY_DELETES:
                    equality.append(entry)
                else:
                    raise ChangesUnavailableError(
                        f"snapshot {snapshot.snapshot_id} holds a file of unknown content "
                        f"{content}: {entry.data_file.file_path}"
                    )
        return LiveFiles(snapshot.snapshot_id, manifests, data, positional, equality)

    def changed_entries(self, before: LiveFiles, after: LiveFiles) -> list[ManifestEntry]:
        """Live entries of manifests only one of the two snapshots lists."""
        out: list[ManifestEntry] = []
        for state, other in ((before, after), (after, before)):
            for path, manifest in state.manifests.items():
                if path not in other.manifests:
                    out.extend(self.entries(manifest))
        return out


class FileReader:
    """Reads touched data and delete files (each once) and counts what it read."""

    def __init__(self, table: Table, schema: Schema, read_ids: Sequence[int]) -> None:
        from pyiceberg.schema import Schema as IcebergSchema

        self._table = table
        self._metadata: TableMetadata = table.metadata
        self._schema = schema
        self.read_schema = IcebergSchema(
            *[schema.find_field(i) for i in read_ids], schema_id=schema.schema_id
        )
        self._rows: dict[str, pa.Table] = {}
        self._positions: dict[str, dict[str, np.ndarray]] = {}
        self._equality: dict[str, pa.Table] = {}
        self.files_read = 0
        self.bytes_read = 0
        #: Data files whose columns all came from the driver's file cache (nothing read).
        self.files_cached = 0
        self._mapping = table.metadata.properties.get(_NAME_MAPPING, "")

    def _count(self, data_file: DataFile) -> None:
        self.files_read += 1
        self.bytes_read += int(data_file.file_size_in_bytes or 0)

    def _scan(self, data_file: DataFile, schema: Schema) -> pa.Table:
        """Every row of one file, in file order, projected by field id onto ``schema``."""
        from pyiceberg.expressions import AlwaysTrue
        from pyiceberg.io.pyarrow import ArrowScan
        from pyiceberg.table import FileScanTask

        scan = ArrowScan(self._metadata, self._table.io, schema, AlwaysTrue())
        self._count(data_file)
        return scan.to_table([FileScanTask(data_file)])

    def rows(self, entry: ManifestEntry) -> pa.Table:
        data_file = entry.data_file
        path = data_file.file_path
        if path not in self._rows:
            rows = self._columns(data_file)
            if rows.num_rows != data_file.record_count:
                raise ChangesUnavailableError(
                    f"data file {path} holds {rows.num_rows} rows, its manifest says "
                    f"{data_file.record_count}: positions would be wrong"
                )
            self._rows[path] = rows
        return self._rows[path]

    def _columns(self, data_file: DataFile) -> pa.Table:
        """The file's rows on the read schema: cached columns, the others read (and kept)."""
        from pyiceberg.schema import Schema as IcebergSchema

        fields = self.read_schema.fields
        cache = file_cache()
        if cache is None or not fields:
            return self._scan(data_file, self.read_schema)
        keys = {f.field_id: self.column_key(data_file, f) for f in fields}
        have: dict[int, tuple[pa.Field, pa.ChunkedArray] | None]
        have = {i: cache.get(key) for i, key in keys.items()}
        missing = [i for i, column in have.items() if column is None]
        if missing:
            schema = IcebergSchema(*[self.read_schema.find_field(i) for i in missing])
            read = self._scan(data_file, schema)
            for i, arrow_field, column in zip(missing, read.schema, read.columns, strict=True):
                have[i] = (arrow_field, _one_chunk(column))
                cache.put(keys[i], have[i], column.nbytes)
        else:
            self.files_cached += 1
        pairs = [p for p in (have[f.field_id] for f in fields) if p is not None]
        return pa.Table.from_arrays([c for _, c in pairs], schema=pa.schema([f for f, _ in pairs]))

    def column_key(self, data_file: DataFile, iceberg_field: Any) -> tuple[Any, ...]:
        """What one decoded column depends on: the file, the field's id and type, the mapping."""
        return (
            "column",
            data_file.file_path,
            int(data_file.file_size_in_bytes or 0),
            iceberg_field.field_id,
            str(iceberg_field.field_type),
            iceberg_field.required,
            repr(iceberg_field.initial_default),
            self._mapping,
        )

    def positions(self, delete_file: DataFile) -> dict[str, np.ndarray]:
        """The deleted positions of a position-delete file, per data file path."""
        path = delete_file.file_path
        if path not in self._positions:
            self._positions[path] = cached(
                ("positions", path, int(delete_file.file_size_in_bytes or 0)),
                lambda: self._read_positions(delete_file),
                lambda read: sum(a.nbytes + len(p) for p, a in read.items()),
            )
        return self._positions[path]

    def _read_positions(self, delete_file: DataFile) -> dict[str, np.ndarray]:
        from pyiceberg.io.pyarrow import _read_deletes

        self._count(delete_file)
        read = _read_deletes(self._table.io, delete_file)
        return {
            str(name): np.asarray(positions.to_numpy(), dtype=np.int64)
            for name, positions in read.items()
        }

    def equality_rows(self, delete_file: DataFile) -> pa.Table:
        """The rows of an equality-delete file, on its equality columns."""
        from pyiceberg.schema import Schema as IcebergSchema

        path = delete_file.file_path
        if path not in self._equality:
            ids = list(delete_file.equality_ids or [])
            missing = [i for i in ids if i not in self._schema.field_ids]
            if not ids or missing:
                raise ChangesUnavailableError(
                    f"equality-delete file {path} names field ids {ids} the schema does not hold"
                )
            schema = IcebergSchema(*[self._schema.find_field(i) for i in ids])
            self._equality[path] = self._scan(delete_file, schema)
        return self._equality[path]


def step_changes(
    manifests: Manifests,
    reader: FileReader,
    specs: dict[int, PartitionSpec],
    before: LiveFiles,
    after: LiveFiles,
    plus: list[pa.Table],
    minus: list[pa.Table],
) -> None:
    """Append the rows one snapshot inserted to ``plus`` and those it deleted to ``minus``."""
    for path in sorted(_touched(manifests, reader, specs, before, after)):
        old, new = before.data.get(path), after.data.get(path)
        live_before = live_positions(reader, specs, before, old) if old is not None else None
        live_after = live_positions(reader, specs, after, new) if new is not None else None
        entry = new if new is not None else old
        assert entry is not None  # touched paths are live on one side at least
        size = int(entry.data_file.record_count)
        was = live_before if live_before is not None else np.zeros(size, dtype=bool)
        now = live_after if live_after is not None else np.zeros(size, dtype=bool)
        if len(was) != len(now):
            raise ChangesUnavailableError(
                f"data file {path} has {len(was)} rows at {before.snapshot_id} and {len(now)} "
                f"at {after.snapshot_id}"
            )
        added, removed = now & ~was, was & ~now
        if added.any():
            plus.append(reader.rows(entry).filter(pa.array(added)))
        if removed.any():
            minus.append(reader.rows(entry).filter(pa.array(removed)))


def _touched(
    manifests: Manifests,
    reader: FileReader,
    specs: dict[int, PartitionSpec],
    before: LiveFiles,
    after: LiveFiles,
) -> set[str]:
    """Data files whose live rows may differ between two snapshots."""
    from pyiceberg.manifest import DataFileContent

    touched: set[str] = set()
    for entry in manifests.changed_entries(before, after):
        data_file = entry.data_file
        path = data_file.file_path
        kept_before = _same_entry(before, entry)
        kept_after = _same_entry(after, entry)
        if kept_before and kept_after:
            continue  # moved between manifests, live on both sides
        if data_file.content == DataFileContent.DATA:
            touched.add(path)
        elif data_file.content == DataFileContent.POSITION_DELETES:
            for target in reader.positions(data_file):
                if target in before.data or target in after.data:
                    touched.add(target)
        else:
            for state in (before, after):
                for candidate in state.data.values():
                    if equality_applies(entry, candidate, specs):
                        touched.add(candidate.data_file.file_path)
    return touched


def _same_entry(state: LiveFiles, entry: ManifestEntry) -> bool:
    """Whether ``state`` holds the file of ``entry`` live, with the same sequence number."""
    return (entry.data_file.file_path, entry.sequence_number) in state.live_keys()


def live_positions(
    reader: FileReader, specs: dict[int, PartitionSpec], state: LiveFiles, entry: ManifestEntry
) -> np.ndarray:
    """Which positions of a data file live in ``state`` are not deleted there."""
    path = entry.data_file.file_path
    size = int(entry.data_file.record_count)
    live = np.ones(size, dtype=bool)
    for delete_file in state.position_deletes_for(entry):
        positions = reader.positions(delete_file).get(path)
        if positions is None or not len(positions):
            continue
        if positions.min() < 0 or positions.max() >= size:
            raise ChangesUnavailableError(
                f"position-delete file {delete_file.file_path} names a position outside "
                f"{path} ({size} rows)"
            )
        live[positions] = False
    for delete_file in state.equality_deletes_for(entry, specs):
        deleted = reader.equality_rows(delete_file)
        live &= ~matching_rows(reader.rows(entry).select(deleted.column_names), deleted)
    return live


#: Most files of a target the driver reads to diff, after Iceberg's pruning by the
#: affected keys (each is read whole, one by one; past this, Spark's scan).
DRIVER_READ_FILES = 64


def rows_with_positions(
    table: Table,
    snapshot_id: int,
    columns: Sequence[str],
    row_filter: Any = None,
    max_files: int | None = None,
) -> pa.Table | None:
    """Every live row of a snapshot on ``columns``, with its ``_file`` and ``_pos``.

    What Spark's ``_file`` and ``_pos`` metadata columns give, read on the
    driver with the same delete rules as the changes: a small table's rows
    can then be compared and retracted without a Spark job.

    :param row_filter: a PyIceberg expression: only the data files Iceberg's
        scan planning keeps for it (partition values, column statistics) are
        read, whole (a superset of the matching rows; the caller filters).
    :param max_files: None (nothing read) when more data files than this are to be read.
    """
    metadata = table.metadata
    snapshot = metadata.snapshot_by_id(snapshot_id)
    if snapshot is None:
        raise ChangesUnavailableError(f"snapshot {snapshot_id} is not in the table's metadata")
    schema = snapshot_schema(table, snapshot)
    ids = [schema.find_field(name).field_id for name in columns]
    reader = FileReader(table, schema, ids)
    state = Manifests(table).state(snapshot)
    specs = dict(metadata.specs())
    parts = []
    kept = None
    if row_filter is not None:
        scan = table.scan(snapshot_id=snapshot_id, row_filter=row_filter)
        try:
            kept = {task.file.file_path for task in scan.plan_files()}
        except (ValueError, TypeError) as exc:  # a value the column's type refuses: read all
            log.info("no file pruning for %s: %s", row_filter, exc)
    chosen = [(p, e) for p, e in sorted(state.data.items()) if kept is None or p in kept]
    if max_files is not None and len(chosen) > max_files:
        return None
    for path, entry in chosen:
        live = np.nonzero(live_positions(reader, specs, state, entry))[0]
        rows = reader.rows(entry).take(pa.array(live))
        # pa.repeat: a list of the path per row took 0.37 s for a 500k-row target
        rows = rows.append_column("_file", pa.repeat(pa.scalar(path, pa.string()), len(live)))
        parts.append(rows.append_column("_pos", pa.array(live, pa.int64())))
    if not parts:
        from pyiceberg.io.pyarrow import schema_to_pyarrow

        arrow = schema_to_pyarrow(reader.read_schema, include_field_ids=False)
        arrow = arrow.append(pa.field("_file", pa.string())).append(pa.field("_pos", pa.int64()))
        return arrow.empty_table()
    return pa.concat_tables(parts, promote_options="permissive")


def snapshot_schema(table: Table, snapshot: Snapshot | None) -> Schema:
    """The schema ``snapshot`` was written with (the table's current one when it names none).

    A pinned snapshot is read with its own columns: a column added since
    must not appear in it, and one renamed since keeps its name there.
    """
    found = None
    if snapshot is not None and snapshot.schema_id is not None:
        found = table.metadata.schema_by_id(snapshot.schema_id)
    return found or table.schema()


def _one_chunk(column: pa.ChunkedArray) -> pa.ChunkedArray:
    """``column`` as one chunk, when its offsets allow (else as read).

    A file decodes into a chunk per batch, and taking rows from a chunked
    column costs a pass over every chunk: 4 ms to take 100 rows of a
    1.5M-row string column in 12 chunks, 0.01 ms from one chunk. Cached
    columns are taken from on every tick (the driver's joins), so they are
    combined once when cached.
    """
    if column.num_chunks <= 1:
        return column
    try:
        return pa.chunked_array([column.combine_chunks()], column.type)
    except (pa.ArrowInvalid, pa.ArrowCapacityError):  # over 2 GiB of string offsets
        return column
