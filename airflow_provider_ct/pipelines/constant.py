"""A dataset that reads no table (``spark.range(n)``): its rows written once, its frontier ticked.

SDP's ``spark-pipelines init`` project starts from one (``return
spark.range(10)``). A view must read a table (its ticks are pinned to its
inputs' snapshots), and this one has none: its contents are the same at
every time. So each tick at ``T`` commits, by compare-and-append, the
difference between those rows and the table's (the rows themselves on the
first tick, nothing after unless the definition changed) with the upper
moved to ``T + 1``, as any writer of ours does; its readers then tick at
``T`` over it like over any input. A retried tick finds the upper already
past ``T`` and commits nothing; a writer that loses the race deletes the
files it staged. No Spark (the rows are computed here), no Airflow.
"""

from __future__ import annotations

import logging
from collections import Counter
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from airflow_provider_ct.core.batch_files import BatchFiles
from airflow_provider_ct.core.commit import compare_and_append
from airflow_provider_ct.core.frontier import Frontier
from airflow_provider_ct.core.staging import batch_data_dir
from airflow_provider_ct.core.tables import create_managed_table, load_table_or_none
from airflow_provider_ct.core.timeline import Timeline
from airflow_provider_ct.exceptions import CommitError

log = logging.getLogger(__name__)

#: ``spark.range``'s one column.
RANGE_SCHEMA = pa.schema([pa.field("id", pa.int64(), nullable=False)])


@dataclass(frozen=True)
class ConstantTick:
    """What one tick of a constant dataset did."""

    table: str
    time: int
    #: ``landed``, ``already-sealed`` (a retry, or a later run got there first).
    status: str
    rows_inserted: int = 0
    rows_retracted: int = 0

    def to_json(self) -> dict[str, Any]:
        return dict(vars(self))


def range_rows(bounds: tuple[int, int, int]) -> pa.Table:
    """``spark.range(start, end, step)``'s rows."""
    return pa.Table.from_pydict({"id": list(range(*bounds))}, schema=RANGE_SCHEMA)


def tick_constant(catalog: Any, name: str, rows: pa.Table, time: int) -> ConstantTick:
    """Make ``name`` hold ``rows`` at ``time`` and seal it through ``time``.

    :raises CommitError: another writer moved the table's upper between
        the read and the commit (this attempt's files are deleted).
    """
    table = load_table_or_none(catalog, name) or create_managed_table(catalog, name, rows.schema)
    timeline = Timeline.of(table)
    if timeline.upper.seals(time):
        return ConstantTick(name, time, "already-sealed")
    have = _rows(table)
    want = Counter(zip(*(rows.column(n).to_pylist() for n in rows.column_names), strict=True))
    batch_id = f"constant-{time}"
    added: list[str] = []
    removed: list[str] = []
    if have != want:  # the first tick, or a changed definition: replace the contents
        folder = batch_data_dir(table.location(), batch_id)
        added = [p.file.path for p in BatchFiles(table, folder).write_rows(rows)]
        removed = [task.file.file_path for task in table.scan().plan_files()]
    result = compare_and_append(
        table,
        expected_upper=timeline.upper,
        new_upper=Frontier.sealing(time),
        batch_id=batch_id,
        add_files=added,
        remove_files=removed,
        time=time,
    )
    if not result.landed:
        for path in added:
            table.io.delete(path)
        raise CommitError(f"constant dataset {name} at {time}: {result.reason}")
    if result.already_landed:
        return ConstantTick(name, time, "already-sealed")
    retracted = sum(have.values()) if removed else 0
    log.info("constant dataset %s sealed through %s: +%d -%d rows", name, time,
             rows.num_rows if added else 0, retracted)  # fmt: skip
    return ConstantTick(name, time, "landed", rows.num_rows if added else 0, retracted)


def _rows(table: Any) -> Counter[tuple[Any, ...]]:
    if table.metadata.current_snapshot() is None:
        return Counter()
    arrow = table.scan().to_arrow()
    return Counter(zip(*(arrow.column(n).to_pylist() for n in arrow.column_names), strict=True))
