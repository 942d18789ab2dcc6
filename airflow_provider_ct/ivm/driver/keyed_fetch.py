"""A keyed block's inputs fetched by key on the driver, as they are and as they were.

The keyed rule (:mod:`airflow_provider_ct.ivm.plan.keyed`) reads a block
twice, restricted to the keys ``K`` its changes hold. Spark's restricted
read (:mod:`airflow_provider_ct.spark.ivm.keyed`) filters a scan, and when
the keys are spread over every file (TPC-H's: a few thousand order or part
keys a tick) Iceberg prunes none, so the read costs what the full query
reads. The warm driver keeps the inputs' columns decoded, with sorted
indexes of their integer and date columns (:mod:`.keyed_rows`), so it takes
the rows of ``K`` at each snapshot for the price of their matches.

Taken only when that is cheap: a file cache to keep the columns in (and
room in it for them), and at most ``row_limit`` rows fetched in all.
Otherwise Spark reads the inputs. The rule's restriction is null-safe (a
row whose key is NULL is a row of the key NULL), so a NULL key fetches the
rows whose column is NULL, which a fetch by equality never matches.
"""

from __future__ import annotations

import logging
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from airflow_provider_ct.exceptions import ChangesUnavailableError
from airflow_provider_ct.ivm.driver.arrow_eval import NotOnDriver
from airflow_provider_ct.ivm.driver.driver_join import spelled
from airflow_provider_ct.ivm.driver.keyed_rows import SnapshotRows, cache_refusal, column_bytes

if TYPE_CHECKING:
    from pyiceberg.table import Table

log = logging.getLogger(__name__)


@dataclass
class KeyedFetch:
    """The inputs and the two snapshots of each a keyed tick reads, fetched on the driver."""

    tables: Mapping[str, Table]
    #: Input -> its snapshot as the last batch pinned it (``old``) and as this tick does.
    before: Mapping[str, int | None]
    after: Mapping[str, int | None]
    #: Input -> the columns the plan reads of it (the names the table spells).
    columns: Mapping[str, Sequence[str]]
    #: Most rows fetched in all, both snapshots counted.
    row_limit: int
    #: Rows fetched so far.
    fetched: int = 0
    _readers: dict[tuple[str, int | None], SnapshotRows] = field(default_factory=dict)

    def refusal(self, names: Collection[str], values: Sequence[Any]) -> str | None:
        """Why the driver does not fetch the rows of ``values`` of inputs ``names``, or None."""
        if self.row_limit <= 0:
            return "the driver's row limit is 0"
        if len(values) > self.row_limit:
            return f"{len(values):,} keys, more than the driver's {self.row_limit:,} rows"
        stored = 0
        for name in names:  # the snapshots share most files: the newer one is weighed
            snapshot = self.after.get(name)
            if snapshot is None:
                continue
            try:
                stored += column_bytes(self.tables[name], snapshot, self.columns[name])
            except (ValueError, ChangesUnavailableError) as exc:
                return f"{name} at snapshot {snapshot}: {exc}"
        return cache_refusal(stored)

    def rows(self, name: str, column: str, values: Sequence[Any]) -> tuple[pa.Table, pa.Table]:
        """Input ``name``'s rows whose ``column`` is one of ``values``: as they are, as they were.

        Raises :class:`NotOnDriver` when the rows fetched in all would pass
        ``row_limit`` (counted from the sorted indexes before any is taken).
        """
        spelled_column = spelled(self.columns[name], column)
        new = self._side(name, self.after.get(name), spelled_column, values)
        if self.before.get(name) == self.after.get(name):
            return new, new
        return new, self._side(name, self.before.get(name), spelled_column, values)

    def _side(
        self, name: str, snapshot: int | None, column: str, values: Sequence[Any]
    ) -> pa.Table:
        try:
            return self._fetched(name, snapshot, column, values)
        except (ValueError, ChangesUnavailableError) as exc:  # a column not in that schema,
            raise NotOnDriver(f"{name} at snapshot {snapshot}: {exc}") from exc  # a bad delete

    def _fetched(
        self, name: str, snapshot: int | None, column: str, values: Sequence[Any]
    ) -> pa.Table:
        key = (name, snapshot)
        if key not in self._readers:
            self._readers[key] = SnapshotRows(self.tables[name], snapshot, self.columns[name])
        reader = self._readers[key]
        kept = [v for v in values if v is not None]
        try:
            wanted = pa.array(kept, type=reader.empty.schema.field(column).type)
        except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError) as exc:
            raise NotOnDriver(f"the keys do not convert to {name}.{column}: {exc}") from exc
        expected = reader.count(column, wanted)
        if expected is not None:
            self._spend(name, expected)
        rows = reader.where(column, wanted)
        if len(kept) < len(values):  # the rule's restriction is null-safe: NULL is a key
            nulls = reader.where_null(column)
            self._spend(name, nulls.num_rows)
            rows = pa.concat_tables([rows, nulls], promote_options="permissive")
        if expected is None:
            self._spend(name, rows.num_rows)
        return rows

    def _spend(self, name: str, rows: int) -> None:
        self.fetched += rows
        if self.fetched > self.row_limit:
            raise NotOnDriver(
                f"the keys' rows ({self.fetched:,} with {name}'s) pass the driver's "
                f"{self.row_limit:,}"
            )
