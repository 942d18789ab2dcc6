"""Rows as multisets, and the files that change a small table's contents.

Collections are small (configuration, registries, status, event batches), so
everything here runs in the worker with PyArrow: a table's rows are read
file by file, compared as multisets (a row may occur several times; a diff
of ``+1`` inserts one copy, ``-1`` retracts one), and a change is staged as
Parquet files for :func:`~airflow_provider_ct.core.commit.compare_and_append`.

Retractions rewrite the few data files that hold the retracted rows
(copy-on-write at file granularity) instead of writing position deletes:
collections then never carry delete files, so compaction and any reader
see plain data files.
"""

from __future__ import annotations

import json
import logging
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from airflow_provider_ct.core.batch_files import BatchFiles
from airflow_provider_ct.core.commit import AppendResult, compare_and_append
from airflow_provider_ct.core.expiry import delete_files
from airflow_provider_ct.core.frontier import Frontier
from airflow_provider_ct.core.quiet import same_live_files
from airflow_provider_ct.core.staging import batch_data_dir
from airflow_provider_ct.exceptions import CollectionError, RetractionError

if TYPE_CHECKING:
    from pyiceberg.table import Table

    from airflow_provider_ct.core.timeline import Timeline

log = logging.getLogger(__name__)

#: Rows as callers may pass them: an Arrow table, or a list of dicts
#: (column -> value) or of sequences (values in column order).

#: At most this many row copies (the sum of ``|diff|``) in one call: every
#: copy is materialized, so a hostile diff like ``10**12`` would otherwise
#: exhaust the worker's memory instead of failing. Collections are small.
MAX_ROW_COPIES = 10_000_000


def _freeze(value: Any) -> Any:
    """A hashable stand-in for a row value (lists, dicts and maps of nested columns)."""
    if isinstance(value, list | tuple):
        return ("__list__", *(_freeze(v) for v in value))
    if isinstance(value, dict):
        return ("__dict__", *((k, _freeze(v)) for k, v in value.items()))
    return value


@dataclass
class RowBag:
    """A multiset of rows: how many copies of each row.

    Rows are compared by value (column order as in the table's schema).
    ``originals`` keeps one Python form of each row to turn the bag back into
    Arrow; the keys are hashable stand-ins for rows with nested values.
    """

    counts: Counter[Any] = field(default_factory=Counter)
    originals: dict[Any, tuple[Any, ...]] = field(default_factory=dict)

    @classmethod
    def of(cls, data: pa.Table) -> RowBag:
        bag = cls()
        for row in row_tuples(data):
            bag.add(row)
        return bag

    def add(self, row: tuple[Any, ...], count: int = 1) -> None:
        key = _freeze(row)
        self.originals.setdefault(key, row)
        self.counts[key] += count

    def copy(self) -> RowBag:
        return RowBag(Counter(self.counts), dict(self.originals))

    def __len__(self) -> int:
        return sum(n for n in self.counts.values() if n > 0)

    def __bool__(self) -> bool:
        return any(n > 0 for n in self.counts.values())

    def plus(self, other: RowBag) -> RowBag:
        out = self.copy()
        out.originals.update({k: v for k, v in other.originals.items() if k not in out.originals})
        out.counts.update(other.counts)
        out.counts = +out.counts
        return out

    def minus(self, other: RowBag) -> RowBag:
        """Rows of ``self`` beyond those in ``other`` (multiset difference, never negative)."""
        return RowBag(self.counts - other.counts, dict(self.originals))

    def contains(self, other: RowBag) -> bool:
        """True if every row of ``other`` occurs in ``self`` at least as often."""
        return all(self.counts.get(k, 0) >= n for k, n in other.counts.items() if n > 0)

    def missing(self, other: RowBag) -> list[tuple[Any, ...]]:
        """Rows of ``other`` that ``self`` lacks (for error messages)."""
        return [other.originals[k] for k, n in other.counts.items() if n > self.counts.get(k, 0)]

    def rows(self) -> Iterator[tuple[Any, ...]]:
        for key, count in self.counts.items():
            for _ in range(count):
                yield self.originals[key]

    def to_arrow(self, schema: pa.Schema) -> pa.Table:
        return from_rows(list(self.rows()), schema)


def arrow_schema(table: Table) -> pa.Schema:
    """The Arrow schema (with Iceberg field ids) rows of ``table`` are converted to."""
    return table.schema().as_arrow()


def row_tuples(data: pa.Table) -> list[tuple[Any, ...]]:
    columns = [column.to_pylist() for column in data.columns]
    if not columns:
        return [() for _ in range(data.num_rows)]
    return list(zip(*columns, strict=True))


def from_rows(rows: Sequence[tuple[Any, ...]], schema: pa.Schema) -> pa.Table:
    arrays = [pa.array([r[i] for r in rows], type=f.type) for i, f in enumerate(schema)]
    return pa.Table.from_arrays(arrays, schema=schema)


def to_arrow(rows: Any, schema: pa.Schema, *, what: str = "rows") -> pa.Table:
    """``rows`` as an Arrow table of exactly ``schema``'s columns (clear errors otherwise)."""
    names = list(schema.names)
    try:
        if isinstance(rows, pa.RecordBatch):
            rows = pa.Table.from_batches([rows])
        if isinstance(rows, pa.Table):
            missing = [n for n in names if n not in rows.column_names]
            extra = [n for n in rows.column_names if n not in names]
            if missing or extra:
                raise CollectionError(
                    f"{what} have columns {rows.column_names}; the collection has {names}"
                )
            return rows.select(names).cast(schema)
        if isinstance(rows, str | bytes) or not isinstance(rows, Sequence):
            raise CollectionError(
                f"{what} must be an Arrow table or a list of rows, got {type(rows).__name__}"
            )
        records: list[dict[str, Any]] = []
        for index, row in enumerate(rows):
            if isinstance(row, Mapping):
                extra = [k for k in row if k not in names]
                if extra:
                    raise CollectionError(
                        f"{what}[{index}] has unknown column(s) {extra}; the collection has {names}"
                    )
                records.append({n: row.get(n) for n in names})
            elif isinstance(row, Sequence) and not isinstance(row, str | bytes):
                if len(row) != len(names):
                    raise CollectionError(
                        f"{what}[{index}] has {len(row)} value(s); the collection has "
                        f"{len(names)} column(s) {names}"
                    )
                records.append(dict(zip(names, row, strict=True)))
            else:
                raise CollectionError(
                    f"{what}[{index}] must be a dict or a sequence, got {type(row).__name__}"
                )
        return pa.Table.from_pylist(records, schema=schema)
    except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError) as exc:
        raise CollectionError(f"{what} do not fit the collection's schema {names}: {exc}") from None


def signed_bags(
    rows: Any, schema: pa.Schema, diffs: Sequence[int] | None = None
) -> tuple[RowBag, RowBag]:
    """Split rows with diffs into (inserted, retracted), consolidated.

    A row inserted and retracted in the same call cancels out. Diffs are
    whole copies: ``+2`` inserts two copies, ``-1`` retracts one; ``0`` is
    allowed and does nothing.
    """
    data = to_arrow(rows, schema)
    tuples = row_tuples(data)
    if diffs is None:
        diffs = [1] * len(tuples)
    check_diffs(diffs, len(tuples))
    net = RowBag()
    for row, diff in zip(tuples, diffs, strict=True):
        net.add(row, diff)
    inserts = RowBag(Counter({k: n for k, n in net.counts.items() if n > 0}), net.originals)
    retracts = RowBag(Counter({k: -n for k, n in net.counts.items() if n < 0}), net.originals)
    return inserts, retracts


def check_diffs(diffs: Sequence[Any], rows: int) -> None:
    """Refuse diffs that are not one integer per row, or that ask for too many copies."""
    if len(diffs) != rows:
        raise CollectionError(f"got {rows} row(s) but {len(diffs)} diff(s)")
    for diff in diffs:
        if isinstance(diff, bool) or not isinstance(diff, int):
            raise CollectionError(f"a diff must be an integer, got {diff!r:.100}")
    copies = sum(abs(d) for d in diffs)
    if copies > MAX_ROW_COPIES:
        raise CollectionError(
            f"the diffs ask for {copies} row copies; at most {MAX_ROW_COPIES} per write"
        )


def parse_rows(value: Any, what: str = "rows") -> list[Any]:
    """Rows without diffs (a desired state, rows to insert or to retract), from XCom or JSON.

    Accepts everything :func:`parse_updates` does. Here a diff can only count
    copies (``{"row": r, "diff": 2}`` is two copies of ``r``, ``0`` none), so
    it is kept as that many copies; a negative diff is refused, because
    silently dropping it (as taking the rows alone did) would turn a
    retraction into an insert.
    """
    rows, diffs = parse_updates(value)
    check_diffs(diffs, len(rows))
    out: list[Any] = []
    for index, (row, diff) in enumerate(zip(rows, diffs, strict=True)):
        if diff < 0:
            raise CollectionError(
                f"{what}[{index}] has diff {diff}; here a diff counts copies of a row and "
                "must be >= 0 (retract rows with retract=, or blind-write them with -1)"
            )
        out.extend([row] * diff)
    return out


def parse_updates(value: Any) -> tuple[list[Any], list[int]]:
    """Rows and diffs from an XCom or JSON value.

    Accepted: a list of rows (all ``+1``); a list of ``{"row": ..., "diff": n}``;
    ``{"rows": [...], "diffs": [...]}``; or JSON text of any of these.
    """
    if isinstance(value, str | bytes):
        try:
            value = json.loads(value)
        except (json.JSONDecodeError, RecursionError, UnicodeDecodeError) as exc:
            raise CollectionError(f"updates are not JSON: {exc}") from None
    if isinstance(value, Mapping):
        rows = value.get("rows")
        if not isinstance(rows, list):
            raise CollectionError("an updates object needs a 'rows' list")
        diffs = value.get("diffs")
        if diffs is None:
            return rows, [1] * len(rows)
        if not isinstance(diffs, list):
            raise CollectionError("'diffs' must be a list of integers")
        return rows, diffs
    if not isinstance(value, list):
        raise CollectionError(f"updates must be a list or an object, got {type(value).__name__}")
    if value and all(isinstance(u, Mapping) and set(u) == {"row", "diff"} for u in value):
        return [u["row"] for u in value], [u["diff"] for u in value]
    return list(value), [1] * len(value)


# -- files -------------------------------------------------------------------------------
@dataclass(frozen=True)
class LiveFile:
    """One live data file of a table's head and its rows (deletes applied)."""

    path: str
    data: pa.Table


def read_live_files(table: Table) -> list[LiveFile]:
    """The head's data files with their rows, as of the table's loaded metadata."""
    from pyiceberg.expressions import AlwaysTrue
    from pyiceberg.io.pyarrow import ArrowScan

    if table.metadata.current_snapshot() is None:
        return []
    schema = table.schema()
    out: list[LiveFile] = []
    for task in table.scan().plan_files():
        data = ArrowScan(table.metadata, table.io, schema, AlwaysTrue()).to_table([task])
        out.append(LiveFile(task.file.file_path, data.cast(arrow_schema(table))))
    return out


def contents(files: Iterable[LiveFile]) -> RowBag:
    bag = RowBag()
    for live in files:
        for row in row_tuples(live.data):
            bag.add(row)
    return bag


def write_parquet(table: Table, batch_id: str, data: pa.Table) -> list[str]:
    """Write ``data`` into the batch's staging folder (a file per partition); their URIs."""
    files = BatchFiles(table, batch_data_dir(table.location(), batch_id))
    return [part.file.path for part in files.write_rows(data)]


@dataclass(frozen=True)
class StagedChange:
    """Files that turn the head's contents into the wanted ones."""

    add_files: tuple[str, ...] = ()
    remove_files: tuple[str, ...] = ()
    inserted: int = 0
    retracted: int = 0

    @property
    def empty(self) -> bool:
        return not self.add_files and not self.remove_files


@dataclass(frozen=True)
class LostChange:
    """A staged change whose commit lost a race, kept for as long as it still applies.

    Nearly every lost race of a collection writer is a tick: a frontier-only
    commit that leaves the same files. The staged change then still turns
    the head into the wanted contents, and the retry is one commit instead of
    reading every live file and staging again. That keeps a retry shorter
    than the gap between ticks on a busy machine, where re-staging every time
    could lose to each tick in turn.
    """

    table: Table
    head: int | None
    schema_id: int
    change: StagedChange

    @classmethod
    def of(cls, table: Table, timeline: Timeline, change: StagedChange) -> LostChange:
        """``change``, staged against the head ``timeline`` read, lost its commit."""
        return cls(table, timeline.head_snapshot_id, table.metadata.current_schema_id, change)

    def applies_at(self, timeline: Timeline) -> bool:
        """Whether the change is still right against the head ``timeline`` read."""
        return self.table.metadata.current_schema_id == self.schema_id and same_live_files(
            self.table, self.head, timeline.head_snapshot_id
        )

    def discard(self) -> None:
        """Delete the staged files (no snapshot references them: the commit lost)."""
        delete_files(self.table, self.change.add_files)


def stage_change(
    table: Table,
    batch_id: str,
    files: Sequence[LiveFile],
    inserts: RowBag,
    retracts: RowBag,
) -> StagedChange:
    """Stage ``+inserts -retracts`` against the head whose files are ``files``.

    Retracted rows are taken from the smallest files holding them; those
    files are removed and their remaining rows written again, together with
    the inserted rows, into one new file. Raises :class:`RetractionError`
    (before writing anything) when a retracted row is not in the head.
    """
    schema = arrow_schema(table)
    remaining = retracts.copy()
    remaining.counts = +remaining.counts
    touched: list[tuple[LiveFile, RowBag]] = []
    if remaining:
        for live in sorted(files, key=lambda f: f.data.num_rows):
            bag = RowBag.of(live.data)
            take = Counter(
                {k: min(n, bag.counts[k]) for k, n in remaining.counts.items() if bag.counts[k]}
            )
            if not take:
                continue
            remaining.counts -= take
            kept = RowBag(bag.counts - take, bag.originals)
            touched.append((live, kept))
            if not remaining:
                break
        if remaining:
            sample = list(remaining.rows())[:3]
            raise RetractionError(
                f"cannot retract {len(remaining)} row(s) the collection does not hold, "
                f"e.g. {sample}"
            )
    new_rows = list(inserts.rows())
    for _, kept in touched:
        new_rows += list(kept.rows())
    add: tuple[str, ...] = ()
    if new_rows:
        add = tuple(write_parquet(table, batch_id, from_rows(new_rows, schema)))
    return StagedChange(
        add_files=add,
        remove_files=tuple(live.path for live, _ in touched),
        inserted=len(inserts),
        retracted=len(retracts),
    )


def append_change_now(
    table: Any, timeline: Timeline, batch_id: str, change: StagedChange, now: int
) -> tuple[AppendResult, int]:
    """Land a staged change at time ``max(now, upper)``, against the head the timeline read.

    Returns the result and the time used.

    Shared by blind writes and differential corrections: both write "now or
    at the frontier, whichever is later", and both must lose (not rebase) when
    anything committed since they read the table.
    """
    time = max(now, int(timeline.upper.time))  # type: ignore[arg-type]
    result = compare_and_append(
        table,
        expected_upper=timeline.upper,
        new_upper=Frontier.sealing(time),
        batch_id=batch_id,
        add_files=change.add_files,
        remove_files=change.remove_files,
        time=time,
        expected_head=timeline.head_snapshot_id,
    )
    return result, time
