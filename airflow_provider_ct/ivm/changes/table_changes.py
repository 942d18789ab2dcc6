"""Exact changes of an Iceberg table between two snapshots, reading only touched files.

Iceberg's changelog scan refuses any range that holds delete files, and its
incremental read follows ``append`` snapshots only. Our views commit position
deletes, and users' inputs get Spark ``MERGE``/``UPDATE``/``DELETE`` in both
copy-on-write and merge-on-read mode, so neither answers "which rows did this
range insert and delete". :func:`table_changes` does, with PyIceberg and
PyArrow only (no Spark):

* **Walk.** From ``to`` back to ``from`` through parent ids on the kept
  snapshots; an expired or non-ancestor ``from``, a gap, or a schema change in
  the range raise :class:`~airflow_provider_ct.exceptions.ChangesUnavailableError`.
* **Compose per snapshot.** For each walked snapshot ``s`` with parent ``p``,
  the change is computed from the files that differ between the two:
  the manifests only one of them lists are read (manifests are immutable, so
  shared ones hold the same entries) and their live entries compared. A data
  file is *touched* when it was added or removed, or when a delete file that
  applies to it was added or removed (position deletes: the data files the
  delete file names; equality deletes: the older data files of its partition).
  ``replace`` snapshots (compaction, rewritten delete files) change no row and
  are skipped without reading anything, as are snapshots whose manifests are
  their parent's.
* **Per touched data file** (:mod:`.snapshot_files`) its live positions at ``p`` and at ``s`` are
  computed with Iceberg's rules (a position delete applies to data files with a
  data sequence number ``<=`` its own, an equality delete to those with a
  smaller one, in the same partition unless it is global), and the rows live at
  ``s`` but not at ``p`` are inserted, those live at ``p`` but not at ``s``
  deleted. That covers rows added and deleted in one snapshot and rows already
  deleted by older delete files (never counted twice).
* **Net** the signed multiset once at the end: a row both inserted and deleted
  in the range (a copy-on-write rewrite moves every untouched row of a file
  into a new one) cancels, counting multiplicity.

Costs: every data and delete file read is counted once (``files_read``,
``bytes_read`` = their sizes from the manifests; only the projected columns of
a data file are actually fetched, so that is an upper bound). Files are read
whole, and each at most once per call. Metadata (manifest lists and the
manifests of the snapshots involved) is read too and not counted.

Limits: nested column types (struct, list, map) cannot be netted and are
refused unless projected away; NaNs are one value (their payload bits are not
told apart), ``-0.0`` and ``0.0`` are different values. Equality deletes match
NULL to NULL (as Iceberg's readers do) and are applied to every older data
file of their partition (no pruning by column bounds).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from airflow_provider_ct.core.tables import UNKNOWN_ROWS, live_rows
from airflow_provider_ct.exceptions import ChangesUnavailableError
from airflow_provider_ct.ivm.changes.snapshot_files import (
    EMPTY_STATE,
    FileReader,
    LiveFiles,
    Manifests,
    step_changes,
)

if TYPE_CHECKING:
    from pyiceberg.schema import Schema
    from pyiceberg.table import Table
    from pyiceberg.table.metadata import TableMetadata
    from pyiceberg.table.snapshots import Snapshot

log = logging.getLogger(__name__)

#: Iceberg's operation for commits that rewrite files without changing rows.
REPLACE = "replace"
_SIGN, _ROW = "__ct_sign", "__ct_row"


@dataclass(frozen=True)
class TableChanges:
    """The net change of a table between two snapshots, as two multisets of rows."""

    #: Rows in contents(to) minus contents(from), with multiplicity.
    inserted: pa.Table
    #: Rows in contents(from) minus contents(to), with multiplicity.
    deleted: pa.Table
    #: Walked snapshots that could change rows (not ``replace``, not the parent's manifests).
    snapshots: int
    #: Data and delete files read.
    files_read: int
    #: Their sizes (whole files; only the projected columns are fetched).
    bytes_read: int
    #: Data files whose columns came from the driver's file cache instead (``core/file_cache``).
    files_cached: int = 0


def table_changes(
    table: Table,
    from_snapshot_id: int | None,
    to_snapshot_id: int,
    *,
    columns: Sequence[str] | None = None,
) -> TableChanges:
    """The rows ``to`` holds and ``from`` does not (inserted), and the reverse (deleted).

    :param from_snapshot_id: ``None``: the table is taken as empty at ``from``
        (every row at ``to`` is inserted; ``to``'s live files are read once).
    :param columns: a projection of ``to``'s schema (default: every column), in
        this order; rows are compared on these columns only.
    :raises ChangesUnavailableError: ``from`` is expired or not an ancestor of
        ``to``, a snapshot in between expired, the schema changed in the range,
        a column is unknown or nested, or a file disagrees with its manifest.
    """
    metadata = table.metadata
    chain, start = _walk(metadata, from_snapshot_id, to_snapshot_id)
    schema = _range_schema(metadata, chain, start)
    names = list(columns) if columns is not None else [f.name for f in schema.fields]
    projected = _projection(schema, names)
    manifests = Manifests(table)
    before = EMPTY_STATE if start is None else manifests.state(start)
    steps: list[tuple[LiveFiles, LiveFiles]] = []
    for snapshot in chain:
        if start is not None and _operation(snapshot) == REPLACE:
            before = manifests.state(snapshot)  # rows unchanged: nothing to read
            continue
        after = manifests.state(snapshot)
        if after.manifests.keys() != before.manifests.keys():
            steps.append((before, after))
        before = after
    read_ids = _read_field_ids(projected, steps)
    reader = FileReader(table, schema, read_ids)
    specs = dict(metadata.specs())
    plus: list[pa.Table] = []
    minus: list[pa.Table] = []
    for step_before, step_after in steps:
        step_changes(manifests, reader, specs, step_before, step_after, plus, minus)
    arrow_schema = _arrow_schema(reader.read_schema)
    inserted, deleted = net_changes(_concat(plus, arrow_schema), _concat(minus, arrow_schema))
    inserted, deleted = inserted.select(names), deleted.select(names)
    log.info(
        "changes of %s from %s to %s: +%d -%d rows over %d snapshot(s), %d file(s), %d bytes "
        "read, %d data file(s) cached",
        ".".join(table.name()),
        from_snapshot_id,
        to_snapshot_id,
        inserted.num_rows,
        deleted.num_rows,
        len(steps),
        reader.files_read,
        reader.bytes_read,
        reader.files_cached,
    )
    return TableChanges(
        inserted, deleted, len(steps), reader.files_read, reader.bytes_read, reader.files_cached
    )


def changes_report(changes: Mapping[str, TableChanges]) -> dict[str, Any]:
    """What a write report says of input changes read on the driver, per input and in total."""
    return {
        "input_changes": {
            name: {"inserted": c.inserted.num_rows, "deleted": c.deleted.num_rows}
            for name, c in sorted(changes.items())
        },
        "files_read": sum(c.files_read for c in changes.values()),
        "bytes_read": sum(c.bytes_read for c in changes.values()),
        "files_cached": sum(c.files_cached for c in changes.values()),
    }


#: Summary keys whose sum over a range of snapshots estimates the rows it changed.
_CHANGE_KEYS = (
    "added-records",
    "deleted-records",
    "added-position-deletes",
    "added-equality-deletes",
)


def estimated_change_rows(table: Table, from_id: int | None, to_id: int) -> int:
    """What :func:`table_changes` would read, in rows, from the snapshots' summaries alone.

    The sum of rows added, rows of removed data files and delete rows added
    over the same snapshots :func:`table_changes` walks, skipping ``replace``
    as it does. Rows merely rewritten (a copy-on-write update rewrites whole
    files) count, as :func:`table_changes` reads them. A snapshot whose
    summary has none of the keys (a commit of no file, such as a
    frontier-only tick) counts 0. ``from_id`` ``None``: the live rows of
    ``to_id``. :data:`~airflow_provider_ct.core.tables.UNKNOWN_ROWS` where
    :func:`table_changes` would raise :class:`ChangesUnavailableError`, or a
    snapshot has no summary or a value that is not a number. No file is read.
    """
    if from_id is None:
        return live_rows(table, to_id)
    try:
        chain, _ = _walk(table.metadata, from_id, to_id)
    except ChangesUnavailableError:
        return UNKNOWN_ROWS
    total = 0
    for snapshot in chain:
        if snapshot.summary is None:
            return UNKNOWN_ROWS
        if _operation(snapshot) == REPLACE:
            continue
        try:
            total += sum(int(str(snapshot.summary.get(key) or 0)) for key in _CHANGE_KEYS)
        except ValueError:
            return UNKNOWN_ROWS
    return total


def _operation(snapshot: Snapshot) -> str:
    return "" if snapshot.summary is None else str(snapshot.summary.operation.value)


def _walk(
    metadata: TableMetadata, from_id: int | None, to_id: int
) -> tuple[list[Snapshot], Snapshot | None]:
    """Snapshots after ``from`` up to ``to`` (oldest first), and ``from``'s snapshot."""
    to = metadata.snapshot_by_id(to_id)
    if to is None:
        raise ChangesUnavailableError(f"snapshot {to_id} is not in the table's metadata")
    if from_id is None:
        return [to], None
    start = metadata.snapshot_by_id(from_id)
    if start is None:
        raise ChangesUnavailableError(
            f"snapshot {from_id} is not in the table's metadata (expired): the changes since "
            "it cannot be read"
        )
    chain: list[Snapshot] = []
    current = to
    while current.snapshot_id != from_id:
        chain.append(current)
        parent_id = current.parent_snapshot_id
        if parent_id is None:
            raise ChangesUnavailableError(
                f"snapshot {from_id} is not an ancestor of {to_id} (rolled back, another "
                "branch, or later than it)"
            )
        parent = metadata.snapshot_by_id(parent_id)
        if parent is None:
            raise ChangesUnavailableError(
                f"snapshot {parent_id} between {from_id} and {to_id} expired: the changes "
                "of that range cannot be read"
            )
        current = parent
    chain.reverse()
    return chain, start


def _range_schema(
    metadata: TableMetadata, chain: Sequence[Snapshot], start: Snapshot | None
) -> Schema:
    """``to``'s schema, if every snapshot of the range (``from`` included) has it."""
    current = metadata.current_schema_id
    to = chain[-1] if chain else start
    assert to is not None  # from = to leaves no chain, but then there is a start
    walked = [*chain, *([start] if start is not None else [])]
    ids = {s.snapshot_id: s.schema_id if s.schema_id is not None else current for s in walked}
    to_schema_id = ids[to.snapshot_id]
    changed = sorted(sid for sid, schema_id in ids.items() if schema_id != to_schema_id)
    if changed:
        raise ChangesUnavailableError(
            f"the schema changed in the range: snapshot(s) {changed} have another schema than "
            f"{to.snapshot_id} (schema id {to_schema_id})"
        )
    schema = metadata.schema_by_id(to_schema_id)
    if schema is None:
        raise ChangesUnavailableError(f"schema id {to_schema_id} is not in the table's metadata")
    return schema


def _projection(schema: Schema, names: Sequence[str]) -> Schema:
    """``schema`` pruned to ``names``; nested types cannot be netted and are refused."""
    from pyiceberg.schema import Schema as IcebergSchema

    if len(set(names)) != len(names):
        raise ChangesUnavailableError(f"columns {list(names)} repeat a name")
    fields = []
    for name in names:
        try:
            found = schema.find_field(name)
        except ValueError:
            raise ChangesUnavailableError(
                f"column {name!r} is not in the schema (columns: {schema.column_names})"
            ) from None
        if not found.field_type.is_primitive:
            raise ChangesUnavailableError(
                f"column {name!r} has the nested type {found.field_type}: changes of nested "
                "columns are not supported (project it away)"
            )
        fields.append(found)
    return IcebergSchema(*fields, schema_id=schema.schema_id)


def _read_field_ids(projected: Schema, steps: Iterable[tuple[LiveFiles, LiveFiles]]) -> list[int]:
    """The projected fields, plus the equality-delete columns the range's states use."""
    ids = [f.field_id for f in projected.fields]
    for before, after in steps:
        for state in (before, after):
            for delete in state.equality:
                ids.extend(i for i in delete.data_file.equality_ids or [] if i not in ids)
    return ids


def _arrow_schema(schema: Schema) -> pa.Schema:
    """The Arrow types a scan gives for ``schema``: PyIceberg's, with plain (not large) strings.

    PyIceberg's scans keep the types the Parquet files decode to (``string``,
    ``binary``), but give ``large_string`` for an empty result; one fixed
    choice makes results comparable whatever the files were.
    """
    from pyiceberg.io.pyarrow import schema_to_pyarrow

    arrow = schema_to_pyarrow(schema, include_field_ids=False)
    plain = {pa.large_string(): pa.string(), pa.large_binary(): pa.binary()}
    return pa.schema([f.with_type(plain.get(f.type, f.type)) for f in arrow])


def _concat(tables: list[pa.Table], schema: pa.Schema) -> pa.Table:
    if not tables:
        return schema.empty_table()
    return pa.concat_tables([t.cast(schema) for t in tables])


def net_changes(plus: pa.Table, minus: pa.Table) -> tuple[pa.Table, pa.Table]:
    """(plus - minus, minus - plus) as multisets: equal rows cancel, counting multiplicity.

    Rows are grouped on every column (floats by their bits, with NaNs made one
    value, so ``-0.0`` stays apart from ``0.0``; NULL is a value of its own),
    each group's signed count is summed, and one representative row is
    repeated as often as the net count says.
    """
    if not plus.num_rows or not minus.num_rows:
        return plus, minus
    both = pa.concat_tables([plus, minus.cast(plus.schema)]).combine_chunks()
    keys: dict[str, pa.Array] = {}
    for index, column in enumerate(both.columns):
        keys[f"k{index}"] = _group_key(column.combine_chunks())
    keys[_SIGN] = pa.array(
        np.concatenate([np.ones(plus.num_rows, np.int64), -np.ones(minus.num_rows, np.int64)])
    )
    keys[_ROW] = pa.array(np.arange(both.num_rows, dtype=np.int64))
    names = [k for k in keys if k not in (_SIGN, _ROW)]
    grouped = (
        pa.table(keys).group_by(names, use_threads=False).aggregate([(_SIGN, "sum"), (_ROW, "min")])
    )
    counts = grouped.column(f"{_SIGN}_sum").to_numpy()
    rows = grouped.column(f"{_ROW}_min").to_numpy()
    inserted = both.take(pa.array(np.repeat(rows[counts > 0], counts[counts > 0])))
    deleted = both.take(pa.array(np.repeat(rows[counts < 0], -counts[counts < 0])))
    return inserted, deleted


def _group_key(column: pa.Array) -> pa.Array:
    """A column as a group-by key that tells apart exactly the values Iceberg does."""
    kind = column.type
    if pa.types.is_floating(kind):
        canonical = pc.if_else(pc.is_nan(column), pa.scalar(float("nan"), kind), column)
        width = {16: pa.int16(), 32: pa.int32(), 64: pa.int64()}[kind.bit_width]
        return canonical.view(width)
    if pa.types.is_dictionary(kind):
        return column.cast(kind.value_type)
    return column
