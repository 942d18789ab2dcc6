"""The kept state a tick adds its change to: read whole, or only the groups it touches.

A state of many groups (a million customers) costs its size twice a tick
when it is read whole and written whole: 0.6 s of a 2 s tick at 10M orders
in ``bench/view_bench.py``, and growing with the groups while the change
does not. So where it can, a tick reads only the kept rows of the groups
its change touches, looked up in the sorted index of the state's first key
column (integers or dates; the file cache keeps the index, since a state
file never changes), and keeps the new state as a *delta*: the touched
groups' new rows added, their old rows retracted by position, in one
commit (:func:`~airflow_provider_ct.ivm.state.table.write_state_delta`).

Read whole instead (and written whole, which also compacts the deltas):
an aggregate without ``GROUP BY`` or a nested view (whose outer query reads
every group's row), a first key that is not integers or dates or holds a
NULL among the change's groups (a lookup never matches NULL), a state of
nested column types (whose whole read's types this could not promise),
a state of fewer than :data:`DELTA_MIN_GROUPS` groups (cheap to write
whole), and a state of more than :data:`DELTA_FILES` data files (every
delta adds one: the whole write brings it back to one).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa

from airflow_provider_ct.ivm.changes.snapshot_files import snapshot_schema
from airflow_provider_ct.ivm.driver.keyed_rows import SnapshotRows
from airflow_provider_ct.ivm.state.aggregate_state import key_column
from airflow_provider_ct.ivm.state.state_add import Added
from airflow_provider_ct.ivm.state.table import StateHead

#: A state of more data files than this is read and written whole (compacted).
DELTA_FILES = 16
#: A state of fewer groups is read and written whole: one small file costs less
#: than a delta's two files and a compaction (a table created again) every
#: :data:`DELTA_FILES` ticks.
DELTA_MIN_GROUPS = 10_000
_LOCATION = ["_file", "_pos"]


@dataclass(frozen=True)
class StateDelta:
    """What a tick changes in a state kept by deltas."""

    head: StateHead
    #: The touched groups that still have rows, with their new state.
    rows: pa.Table
    #: ``(file, position)`` of the touched groups' old rows.
    retracted: list[tuple[str, int]]
    #: The groups kept after it.
    groups: int


class KeptState:
    """The state kept at a snapshot: its types now, its rows when a change asks."""

    def __init__(self, head: StateHead) -> None:
        self.head = head
        self._whole: pa.Table | None = None
        snapshot = head.table.metadata.snapshot_by_id(head.snapshot_id)
        self._columns = snapshot_schema(head.table, snapshot)
        plain = _plain_types(self._columns)
        # Nested types: the whole read says what they are.
        self.schema: pa.Schema = plain if plain is not None else self.whole().schema

    def whole(self) -> pa.Table:
        """Every kept group (read once)."""
        if self._whole is None:
            self._whole = self.head.table.scan(snapshot_id=self.head.snapshot_id).to_arrow()
        return self._whole

    def located(self, change: pa.Table, keys: int) -> pa.Table | None:
        """The kept rows whose first key is one of the change's, with ``_file`` and
        ``_pos``; None when this tick reads the state whole (see the module)."""
        head = self.head
        if not keys or self._whole is not None or head.groups < DELTA_MIN_GROUPS:
            return None
        if head.data_files > DELTA_FILES:
            return None
        reader = SnapshotRows(head.table, head.snapshot_id, self.schema.names)
        found = reader.located_by_index(key_column(0), change.column(key_column(0)))
        if found is None:
            return None
        try:
            rows = found.drop_columns(_LOCATION).cast(self.schema)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
            return None
        return pa.Table.from_arrays(
            [*rows.columns, *(found.column(c) for c in _LOCATION)],
            names=[*rows.column_names, *_LOCATION],
        )

    def delta(self, added: Added, located: pa.Table) -> StateDelta:
        """The state after ``added`` as a delta of the ``located`` rows it started from."""
        assert added.touched is not None
        retired = added.retired if added.retired is not None else np.zeros(0, np.int64)
        taken = pa.array(retired, pa.int64())
        files = located.column("_file").take(taken).to_pylist()
        positions = located.column("_pos").take(taken).to_pylist()
        groups = self.head.groups - len(retired) + added.touched.num_rows
        return StateDelta(
            self.head, added.touched, list(zip(files, positions, strict=True)), groups
        )


def state_rows(located: pa.Table) -> pa.Table:
    """``located`` without its positions: the rows :func:`add_change` adds to."""
    return located.drop_columns(_LOCATION)


def _plain_types(columns: Any) -> pa.Schema | None:
    """The Arrow types a whole read gives the state's columns, for flat columns only
    (PyIceberg reads strings and binaries as the plain, not the large, types)."""
    from pyiceberg.io.pyarrow import schema_to_pyarrow

    fields = []
    for field in schema_to_pyarrow(columns, include_field_ids=False):
        kind = field.type
        if pa.types.is_nested(kind) or pa.types.is_dictionary(kind):
            return None
        if pa.types.is_large_string(kind):
            kind = pa.string()
        elif pa.types.is_large_binary(kind):
            kind = pa.binary()
        fields.append(pa.field(field.name, kind, nullable=True))
    return pa.schema(fields)
