"""A table's timeline: which snapshot holds the table's contents at which time.

Two kinds of tables are read here:

* **Managed tables** (every commit goes through this package) carry
  ``ct.time`` / ``ct.lower`` / ``ct.upper`` / ``ct.batch-id`` / ``ct.inputs`` in
  their snapshot summaries. The upper is the ``ct.upper`` of the newest
  snapshot on ``main`` that carries one; the contents at a sealed time ``t``
  are those of the newest snapshot whose ``ct.time <= t``.
* **External tables** (written by anything else) have only commit times. A
  snapshot's time is its ``timestamp-ms``; the upper comes from an
  :class:`UpperPolicy`: the wall clock minus an allowance for late commits
  (:class:`WallClockUpper`) or a watermark the producer writes into a summary
  key of its own (:class:`SummaryKeyUpper`).

Only the ancestry of ``main`` counts: snapshots that were rolled back or live
on other branches are not part of the table's history.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

from airflow_provider_ct.core.frontier import Frontier, now_ms, parse_summary_timestamp
from airflow_provider_ct.core.keys import SummaryKeys, TableKeys
from airflow_provider_ct.exceptions import (
    FrontierRegressionError,
    MalformedSummaryError,
    TimeNotSealedError,
)

if TYPE_CHECKING:
    from pyiceberg.table import Table
    from pyiceberg.table.metadata import TableMetadata
    from pyiceberg.table.snapshots import Snapshot

#: Default allowance for late commits to external tables: commit timestamps
#: come from writers' clocks, so a commit can carry a time slightly in the past.
DEFAULT_LATE_COMMIT_ALLOWANCE_MS = 1_000


@dataclass(frozen=True)
class TimelineEntry:
    """One snapshot on ``main`` as this package sees it."""

    snapshot_id: int
    committed_at_ms: int
    #: The data time the snapshot's contents belong to; ``None`` for managed
    #: snapshots that only advance the frontier, or foreign commits on a
    #: managed table (drift), whose contents no time vouches for.
    time: int | None
    lower: Frontier | None = None
    upper: Frontier | None = None
    batch_id: str | None = None
    inputs: dict[str, int | None] | None = None
    summary: dict[str, str] = field(default_factory=dict, compare=False, repr=False)
    #: The Iceberg snapshot operation: append, overwrite, delete or replace.
    operation: str = ""


class UpperPolicy(Protocol):
    """How an external table's upper is decided."""

    def upper(self, entries: tuple[TimelineEntry, ...], now: int) -> Frontier: ...


@dataclass(frozen=True)
class WallClockUpper:
    """Times older than ``now - allowance_ms`` are final for an external table."""

    allowance_ms: int = DEFAULT_LATE_COMMIT_ALLOWANCE_MS

    def upper(self, entries: tuple[TimelineEntry, ...], now: int) -> Frontier:
        return Frontier.at(max(0, now - self.allowance_ms))


@dataclass(frozen=True)
class SummaryKeyUpper:
    """The producer writes its own watermark (epoch ms) under ``key``."""

    key: str

    def upper(self, entries: tuple[TimelineEntry, ...], now: int) -> Frontier:
        for entry in reversed(entries):
            value = entry.summary.get(self.key)
            if value is not None:
                return Frontier.from_summary(
                    value, key=self.key, where=f"snapshot {entry.snapshot_id}"
                )
        return Frontier.minimum()


def _operation_of(snapshot: Snapshot) -> str:
    if snapshot.summary is None:
        return ""
    return str(snapshot.summary.operation.value)


def _summary_of(snapshot: Snapshot) -> dict[str, str]:
    if snapshot.summary is None:
        return {}
    return {str(k): str(v) for k, v in snapshot.summary.additional_properties.items()}


def parse_pins(value: str, where: str, key: str = SummaryKeys.INPUTS) -> dict[str, int | None]:
    """A summary's ``{table: snapshot id | null}`` (``ct.inputs``, ``ct.parts``), checked."""
    try:
        parsed = json.loads(value)
    except json.JSONDecodeError as exc:
        raise MalformedSummaryError(
            f"snapshot-summary key {key!r} in {where} is not JSON: {exc}"
        ) from None
    if not isinstance(parsed, dict) or not all(
        isinstance(k, str) and (v is None or (isinstance(v, int) and not isinstance(v, bool)))
        for k, v in parsed.items()
    ):
        raise MalformedSummaryError(
            f"snapshot-summary key {key!r} in {where} must map table names "
            f"to snapshot ids or null, got {value!r}"
        )
    return parsed


def _managed_entry(snapshot: Snapshot) -> TimelineEntry:
    summary = _summary_of(snapshot)
    where = f"snapshot {snapshot.snapshot_id}"
    time_value = summary.get(SummaryKeys.TIME)
    lower_value = summary.get(SummaryKeys.LOWER)
    upper_value = summary.get(SummaryKeys.UPPER)
    inputs_value = summary.get(SummaryKeys.INPUTS)
    entry = TimelineEntry(
        snapshot_id=snapshot.snapshot_id,
        committed_at_ms=snapshot.timestamp_ms,
        time=None
        if time_value is None
        else parse_summary_timestamp(time_value, key=SummaryKeys.TIME, where=where),
        lower=None
        if lower_value is None
        else Frontier.from_summary(lower_value, key=SummaryKeys.LOWER, where=where),
        upper=None
        if upper_value is None
        else Frontier.from_summary(upper_value, key=SummaryKeys.UPPER, where=where),
        batch_id=summary.get(SummaryKeys.BATCH_ID),
        inputs=None if inputs_value is None else parse_pins(inputs_value, where),
        summary=summary,
        operation=_operation_of(snapshot),
    )
    if entry.time is not None and entry.upper is not None and not entry.upper.seals(entry.time):
        raise MalformedSummaryError(
            f"{where} has {SummaryKeys.TIME}={entry.time} not below its "
            f"{SummaryKeys.UPPER}={entry.upper.to_summary()}"
        )
    if entry.time is not None and entry.lower is not None and entry.lower.seals(entry.time):
        raise MalformedSummaryError(
            f"{where} has {SummaryKeys.TIME}={entry.time} below its "
            f"{SummaryKeys.LOWER}={entry.lower.to_summary()}: it would rewrite a sealed time"
        )
    if entry.time is not None and entry.upper is None:
        raise MalformedSummaryError(f"{where} has {SummaryKeys.TIME} but no {SummaryKeys.UPPER}")
    return entry


def _external_entry(snapshot: Snapshot) -> TimelineEntry:
    return TimelineEntry(
        snapshot_id=snapshot.snapshot_id,
        committed_at_ms=snapshot.timestamp_ms,
        time=snapshot.timestamp_ms,
        summary=_summary_of(snapshot),
        operation=_operation_of(snapshot),
    )


def main_ancestry(metadata: TableMetadata) -> list[Snapshot]:
    """Snapshots on ``main`` from the oldest retained ancestor to the head."""
    from pyiceberg.table.snapshots import ancestors_of

    head = metadata.current_snapshot()
    return list(reversed(list(ancestors_of(head, metadata))))


def is_managed(metadata: TableMetadata, ancestry: Iterable[Snapshot] | None = None) -> bool:
    """A table is managed if flagged so, or if any snapshot on main carries ``ct.upper``."""
    if metadata.properties.get(TableKeys.MANAGED, TableKeys.MANAGED_DEFAULT).lower() == "true":
        return True
    snapshots = main_ancestry(metadata) if ancestry is None else ancestry
    return any(SummaryKeys.UPPER in _summary_of(s) for s in snapshots)


@dataclass(frozen=True)
class Timeline:
    """The history of one table on ``main``, oldest snapshot first."""

    table: str
    managed: bool
    head_snapshot_id: int | None
    entries: tuple[TimelineEntry, ...]
    upper: Frontier
    #: The snapshot whose summary the upper was read from (managed tables).
    upper_snapshot_id: int | None = None
    #: The table's uuid: a table dropped and recreated under the same name has a new one.
    table_uuid: str | None = None
    #: The highest upper ``main`` reached (managed tables; see :func:`highest_upper`).
    high_water: Frontier | None = None

    @classmethod
    def of(
        cls,
        table: Table,
        *,
        policy: UpperPolicy | None = None,
        now: int | None = None,
    ) -> Timeline:
        """The timeline of a loaded PyIceberg table (as of its loaded metadata)."""
        return cls.from_metadata(
            table.metadata, name=".".join(table.name()), policy=policy, now=now
        )

    @classmethod
    def from_metadata(
        cls,
        metadata: TableMetadata,
        *,
        name: str,
        policy: UpperPolicy | None = None,
        now: int | None = None,
        check_regression: bool = True,
    ) -> Timeline:
        """The timeline of ``metadata``; see :meth:`of`.

        :param check_regression: refuse (:class:`FrontierRegressionError`) a
            managed table whose ``main`` is below the highest upper it ever
            reached; only :func:`accept_frontier_regression` turns this off.
        """
        ancestry = main_ancestry(metadata)
        head = metadata.current_snapshot()
        head_id = head.snapshot_id if head is not None else None
        uuid = str(metadata.table_uuid)
        if is_managed(metadata, ancestry):
            entries = tuple(_managed_entry(s) for s in ancestry)
            upper, upper_snapshot = _managed_upper(name, entries)
            high, high_snapshot = highest_upper(metadata)
            if check_regression:
                _refuse_regression(name, upper, upper_snapshot, high, high_snapshot)
            return cls(name, True, head_id, entries, upper, upper_snapshot, uuid, high)
        entries = tuple(_external_entry(s) for s in ancestry)
        chosen = policy if policy is not None else WallClockUpper()
        upper = chosen.upper(entries, now_ms() if now is None else now)
        return cls(name, False, head_id, entries, upper, None, uuid)

    def snapshot_at(self, time: int, *, require_sealed: bool = True) -> int | None:
        """The snapshot whose contents are the table at ``time``.

        ``None`` means the table held nothing at ``time`` (no snapshot yet).
        With ``require_sealed`` (the default), asking for a time the upper does
        not yet seal raises :class:`TimeNotSealedError`: its contents may still
        change.
        """
        if require_sealed and not self.upper.seals(time):
            raise TimeNotSealedError(
                f"table {self.table}: time {time} is not sealed (upper is "
                f"{self.upper.to_summary()}); its contents may still change"
            )
        chosen: int | None = None
        for entry in self.entries:
            if entry.time is not None and entry.time <= time:
                chosen = entry.snapshot_id
        return chosen

    def data_times(self) -> list[tuple[int, int]]:
        """``(time, snapshot_id)`` for every snapshot that holds a data time."""
        return [(e.time, e.snapshot_id) for e in self.entries if e.time is not None]

    def find_batch(self, batch_id: str) -> TimelineEntry | None:
        """The newest snapshot on main written for ``batch_id``, if any."""
        for entry in reversed(self.entries):
            if entry.batch_id == batch_id:
                return entry
        return None

    def entry(self, snapshot_id: int) -> TimelineEntry | None:
        for entry in self.entries:
            if entry.snapshot_id == snapshot_id:
                return entry
        return None


def _managed_upper(name: str, entries: tuple[TimelineEntry, ...]) -> tuple[Frontier, int | None]:
    """The newest ``ct.upper`` on main, refusing histories whose upper went backwards."""
    upper = Frontier.minimum()
    upper_snapshot: int | None = None
    for entry in entries:
        if entry.upper is None:
            continue
        if entry.upper < upper:
            raise FrontierRegressionError(
                f"table {name}: snapshot {entry.snapshot_id} sets {SummaryKeys.UPPER}="
                f"{entry.upper.to_summary()}, behind {upper.to_summary()} set by snapshot "
                f"{upper_snapshot}; an upper must never go backwards"
            )
        if entry.lower is not None and upper_snapshot is not None and entry.lower != upper:
            raise FrontierRegressionError(
                f"table {name}: snapshot {entry.snapshot_id} claims {SummaryKeys.LOWER}="
                f"{entry.lower.to_summary()} but the upper before it was {upper.to_summary()}"
            )
        upper, upper_snapshot = entry.upper, entry.snapshot_id
    return upper, upper_snapshot


def highest_upper(metadata: TableMetadata) -> tuple[Frontier, int | None]:
    """The highest upper ``main`` is known to have reached, and the snapshot that set it.

    Every compare-and-append records it in the ``ct.upper-high-water`` table
    property, which no rollback touches. Tables written before that property
    existed fall back to the snapshot log: the uppers of snapshots that were
    once ``main``'s head and are still kept.
    """
    value = metadata.properties.get(TableKeys.UPPER_HIGH_WATER)
    if value is not None:
        return (
            Frontier.from_summary(
                value, key=TableKeys.UPPER_HIGH_WATER, where="the table properties"
            ),
            None,
        )
    best, best_id = Frontier.minimum(), None
    for log_entry in metadata.snapshot_log:
        snapshot = metadata.snapshot_by_id(log_entry.snapshot_id)
        upper = None if snapshot is None else _summary_of(snapshot).get(SummaryKeys.UPPER)
        if upper is None:
            continue
        frontier = Frontier.from_summary(upper, where=f"snapshot {log_entry.snapshot_id}")
        if best < frontier:
            best, best_id = frontier, log_entry.snapshot_id
    return best, best_id


def _refuse_regression(
    name: str,
    upper: Frontier,
    upper_snapshot: int | None,
    high: Frontier,
    high_snapshot: int | None,
) -> None:
    if not upper < high:
        return
    where = f" (snapshot {high_snapshot})" if high_snapshot is not None else ""
    raise FrontierRegressionError(
        f"table {name}: main's upper is {upper.to_summary()} (snapshot {upper_snapshot}), "
        f"but the table had already reached {high.to_summary()}{where}: main was rolled back "
        "or reset, which would reopen times that were sealed. Nothing is written on top of "
        "it. To recover, move main forward again to the snapshot that had the higher upper "
        "(Spark: CALL <catalog>.system.set_current_snapshot(...); PyIceberg: "
        "table.manage_snapshots().set_current_snapshot(...)), or, if times from "
        f"{upper.to_summary()} on may really be rewritten, call "
        "airflow_provider_ct.core.commit.accept_frontier_regression(table)"
    )
