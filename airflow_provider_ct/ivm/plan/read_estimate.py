"""What an incremental tick would read, estimated from Iceberg metadata before it reads it.

A ``group`` (or ``partition``) tick recomputes the affected groups from the
new inputs, restricted to them. What that costs is mostly the scan, and the
scan is only smaller than the full correction's when the restriction
reaches Iceberg's scan planning: a few keys ``IN`` a column whose files'
statistics or partitions separate them, or a range of days. A restriction
Iceberg cannot use (a semi-join on many keys, keys every file holds) reads
every file, and then the tick costs a full correction plus its own jobs.

This module prices a restriction the way the scan will meet it: PyIceberg
plans the pinned snapshot's files with the same predicates (partition
values and column bounds, no data read) and the bytes of the files kept are
compared with all of them. It knows nothing of Spark: the caller says which
columns are restricted to which values.
"""

from __future__ import annotations

import datetime as _dt
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pyiceberg.expressions import BooleanExpression
    from pyiceberg.table import Table

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Restriction:
    """One column of an input kept to some values (``IN``) or some days (ranges)."""

    column: str
    values: tuple[Any, ...] = ()
    #: Rows whose column is NULL are kept too.
    has_null: bool = False
    #: ``[start, end)`` day ranges instead of values (a day key's column).
    days: tuple[tuple[_dt.date, _dt.date], ...] | None = None


@dataclass(frozen=True)
class ReadEstimate:
    """Bytes of the inputs' data files a restricted tick reads, against all of them."""

    restricted_bytes: int
    total_bytes: int
    restricted_files: int
    total_files: int

    @property
    def share(self) -> float:
        return self.restricted_bytes / self.total_bytes if self.total_bytes else 0.0

    def to_json(self) -> dict[str, Any]:
        return {
            "restricted_bytes": self.restricted_bytes,
            "total_bytes": self.total_bytes,
            "restricted_files": self.restricted_files,
            "total_files": self.total_files,
            "share": round(self.share, 4),
        }


def estimate_reads(
    tables: Mapping[str, tuple[Table, int | None]],
    restrictions: Mapping[str, Sequence[Restriction]],
) -> ReadEstimate:
    """What reading each input, restricted as given, costs in data files.

    :param tables: input name -> (its table, the snapshot the tick reads).
    :param restrictions: input name -> the restrictions its read carries
        (an input without any is read whole).
    """
    kept = total = kept_files = total_files = 0
    for name, (table, snapshot_id) in tables.items():
        if snapshot_id is None:
            continue
        every = _files(table, snapshot_id, None)
        total += sum(every.values())
        total_files += len(every)
        chosen = restrictions.get(name, ())
        if not chosen:
            kept += sum(every.values())
            kept_files += len(every)
            continue
        files = _files(table, snapshot_id, _expression(table, chosen))
        kept += sum(files.values())
        kept_files += len(files)
    return ReadEstimate(kept, total, kept_files, total_files)


def _files(table: Table, snapshot_id: int, row_filter: BooleanExpression | None) -> dict[str, int]:
    """Data file path -> size in bytes, of the files a scan with ``row_filter`` plans."""
    from pyiceberg.expressions import AlwaysTrue

    scan = table.scan(
        snapshot_id=snapshot_id,
        row_filter=row_filter if row_filter is not None else AlwaysTrue(),
        case_sensitive=False,
    )
    return {t.file.file_path: t.file.file_size_in_bytes for t in scan.plan_files()}


def _expression(table: Table, restrictions: Sequence[Restriction]) -> BooleanExpression:
    """The restrictions as one PyIceberg predicate (each one ANDed)."""
    from pyiceberg.expressions import AlwaysTrue, And

    out: BooleanExpression = AlwaysTrue()
    for restriction in restrictions:
        out = And(out, _one(table, restriction))
    return out


def _one(table: Table, restriction: Restriction) -> BooleanExpression:
    ice = _expressions()
    column = restriction.column
    parts: list[BooleanExpression] = []
    if restriction.days is not None:
        kind = str(table.schema().find_field(column, case_sensitive=False).field_type)
        parts += [_day_range(column, kind, start, end) for start, end in restriction.days]
    elif restriction.values:
        parts.append(_in(column, restriction.values))
    if restriction.has_null:
        parts.append(ice.IsNull(column))
    if not parts:
        return ice.AlwaysFalse()
    out = parts[0]
    for part in parts[1:]:
        out = ice.Or(out, part)
    return out


def _in(column: str, values: tuple[Any, ...]) -> BooleanExpression:
    literals = {v.isoformat() if isinstance(v, _dt.date) else v for v in values}
    return _expressions().In(column, literals)


def _day_range(column: str, kind: str, start: _dt.date, end: _dt.date) -> BooleanExpression:
    """``start <= column < end`` in the literal form the column's Iceberg type parses."""
    ice = _expressions()

    def bound(day: _dt.date) -> str:
        if kind == "date":
            return day.isoformat()
        suffix = "+00:00" if kind == "timestamptz" else ""
        return f"{day.isoformat()}T00:00:00{suffix}"

    return ice.And(ice.GreaterThanOrEqual(column, bound(start)), ice.LessThan(column, bound(end)))


def _expressions() -> Any:
    """PyIceberg's expression classes, untyped: their pydantic signatures confuse mypy."""
    import importlib

    return importlib.import_module("pyiceberg.expressions")


def not_cheaper_reason(
    estimate: ReadEstimate, share_limit: float, result_rows: int, small_result: int
) -> str | None:
    """Why the restricted read makes an incremental tick no cheaper than a full one, or None.

    The full correction's cost is its scan when its result is small (at
    most ``small_result`` rows, which it diffs on the driver in moments):
    then a tick that still reads at least ``share_limit`` of the inputs'
    bytes pays the same scan plus its own jobs. A large result makes the
    full correction's aggregation and diff of every row the larger cost,
    which recomputing only the affected groups saves even without pruning
    (a per-customer view of 10M orders: 3.75 s against 6.99 s in
    ``bench/view_bench.py``), so such a view keeps its incremental tick.
    """
    if share_limit <= 0 or estimate.total_bytes <= 0:
        return None
    if estimate.share < share_limit or result_rows > small_result:
        return None
    return (
        f"the affected groups' rows lie in {estimate.restricted_files} of the inputs' "
        f"{estimate.total_files} data files ({estimate.share:.0%} of their bytes, at least "
        f"{share_limit:.0%}): recomputing them reads about what the full correction reads, "
        "and the full correction costs less"
    )
