"""Ticking: keep every registered collection readable at recent times.

A collection nobody writes to would keep its upper where the last write left
it, and a reader asking for its contents "as of now" would wait forever. A
tick advances the upper of every registered collection to ``now`` with a
frontier-only compare-and-append (no files, no ``ct.time``).

Ticks are best-effort: losing the race means someone else (another ticker,
a blind writer) advanced the upper, which is exactly what a tick wants, so
it is not retried. Closed collections are skipped quietly, and in read-only
mode nothing is ticked. A differential collection with a pending desired
state (stated in read-only mode) gets it landed first, once writes are
allowed again.

A collection whose kind property was set by hand on a table without our
frontier is adopted by its first tick (:mod:`.adoption`).

A quiet collection's newest contents are restated now and then (a
*checkpoint*: the tick carries ``ct.time``), so that snapshot expiry can drop
the ticks before it; see :func:`tick_collections`.

A long-lived :class:`Ticker` leaves alone a collection whose upper someone
moved within the last half interval (a write, another ticker): the upper is
recent already, and a tick would only race the writer. As a writer's commit
resets Materialize's tick interval, a busy collection is then not committed
to by the ticker at all, and a writer retrying on a loaded machine does not
lose to tick after tick. The upper then lags now by at most one and a half
intervals.

Ticks create a snapshot per collection per interval; run
:func:`~airflow_provider_ct.collections.maintenance.maintain` along (the tick
DAG does) so expiry bounds them.
"""

from __future__ import annotations

import logging
import threading
import time as _time
import uuid
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from airflow_provider_ct.collections.adoption import adopt_table
from airflow_provider_ct.collections.differential import DifferentialCollection, list_pending
from airflow_provider_ct.collections.maintenance import (
    MaintenanceReport,
    MaintenanceSettings,
    maintain,
)
from airflow_provider_ct.collections.registry import (
    CollectionKind,
    collection_kind,
    is_read_only,
    list_collections,
    table_name,
)
from airflow_provider_ct.core.commit import compare_and_append
from airflow_provider_ct.core.frontier import Frontier, check_timestamp, now_ms
from airflow_provider_ct.core.timeline import Timeline, is_managed
from airflow_provider_ct.exceptions import CollectionError, CommitStateUnknownError

if TYPE_CHECKING:
    from pyiceberg.catalog import Catalog
    from pyiceberg.table import Table

log = logging.getLogger(__name__)

#: Default tick interval: every minute (the tick DAG's schedule).
DEFAULT_TICK_INTERVAL_MS = 60_000
#: Default checkpoint interval: a quiet collection's contents are restated
#: every ten minutes, so expiry can bound its history (retention + this).
DEFAULT_CHECKPOINT_MS = 600_000

ADVANCED = "advanced"
CURRENT = "current"
CONTENDED = "contended"
CLOSED = "closed"
READ_ONLY = "read-only"
UNKNOWN = "unknown"
ERROR = "error"


@dataclass(frozen=True)
class TickOutcome:
    """What one tick did to one collection.

    ``advanced``: the upper moved to the tick's time; ``current``: it was
    already there (or recent enough, see ``fresh_ms``); ``contended``: someone
    else moved the table first (fine);
    ``closed`` / ``read-only``: skipped; ``unknown``: the catalog did not say
    whether the tick landed (harmless: a tick has no data); ``error``: see
    ``detail``. ``synced`` is the status of a pending desired state landed first.
    """

    collection: str
    status: str
    upper: Frontier | None = None
    synced: str | None = None
    detail: str = ""

    def to_json(self) -> dict[str, Any]:
        return {
            "collection": self.collection,
            "status": self.status,
            "upper": None if self.upper is None else self.upper.to_json(),
            "synced": self.synced,
            "detail": self.detail,
        }


@dataclass(frozen=True)
class TickReport:
    time: int
    outcomes: tuple[TickOutcome, ...]
    maintenance: MaintenanceReport | None = None

    @property
    def errors(self) -> dict[str, str]:
        out = {o.collection: o.detail for o in self.outcomes if o.status == ERROR}
        if self.maintenance is not None:
            out.update({f"maintenance:{k}": v for k, v in self.maintenance.errors.items()})
        return out

    def statuses(self) -> dict[str, str]:
        return {o.collection: o.status for o in self.outcomes}

    def to_json(self) -> dict[str, Any]:
        return {
            "time": self.time,
            "collections": [o.to_json() for o in self.outcomes],
            "maintenance": None if self.maintenance is None else self.maintenance.to_json(),
        }


def _checkpoint_time(timeline: Timeline, checkpoint_ms: int | None) -> int | None:
    """The ``ct.time`` a tick should vouch for, or ``None`` for a frontier-only tick.

    A checkpoint restates the head as the contents at the current upper. It
    is only made when the newest data snapshot is ``checkpoint_ms`` older than
    the upper and every snapshot after it is one of ours (ticks, compaction:
    they carry ``ct.upper`` and change no contents), so the head's contents
    are exactly the collection's; after a foreign commit (drift) the tick
    stays frontier-only.
    """
    if checkpoint_ms is None or timeline.upper.time is None:
        return None
    data = [i for i, e in enumerate(timeline.entries) if e.time is not None]
    if not data:
        return None  # never written: frontier-only ticks expire on their own
    last = timeline.entries[data[-1]]
    if timeline.upper.time - int(last.time) < checkpoint_ms:  # type: ignore[arg-type]
        return None
    if any(e.upper is None for e in timeline.entries[data[-1] + 1 :]):
        return None
    return timeline.upper.time


def tick_table(
    table: Table,
    *,
    now: int,
    read_only: bool | None = None,
    checkpoint_ms: int | None = None,
    fresh_ms: int = 0,
) -> TickOutcome:
    """Advance one collection's upper to ``now`` (best-effort, one attempt).

    :param checkpoint_ms: see :func:`tick_collections`.
    :param fresh_ms: leave the upper where it is when it is within this many
        milliseconds of ``now`` (``current``).
    """
    check_timestamp(now, "tick time")
    name = table_name(table)
    table.refresh()
    if is_read_only(table, read_only):
        return TickOutcome(name, READ_ONLY)
    if not is_managed(table.metadata):
        return _adopt(table, name, now)
    synced: str | None = None
    differential = collection_kind(table) == CollectionKind.DIFFERENTIAL
    if Timeline.of(table).upper.is_empty:
        if differential and list_pending(table):
            log.warning("collection %s is closed: its pending desired state can never land", name)
        return TickOutcome(name, CLOSED, Frontier.empty())
    if differential and list_pending(table):
        writer = DifferentialCollection(table, read_only=read_only, clock=lambda: now)
        synced = writer.sync().status
        table.refresh()
    timeline = Timeline.of(table)
    upper = timeline.upper
    if upper.is_empty:  # closed while we synced
        return TickOutcome(name, CLOSED, upper, synced)
    if upper.time is not None and (upper.time >= now or now - upper.time < fresh_ms):
        return TickOutcome(name, CURRENT, upper, synced)
    checkpoint = _checkpoint_time(timeline, checkpoint_ms)
    try:
        result = compare_and_append(
            table,
            expected_upper=upper,
            new_upper=Frontier.at(now),
            batch_id=f"tick-{now}-{uuid.uuid4().hex[:12]}",
            time=checkpoint,
        )
    except CommitStateUnknownError as exc:
        return TickOutcome(name, UNKNOWN, upper, synced, str(exc))
    if result.landed:
        detail = "" if checkpoint is None else f"checkpoint at {checkpoint}"
        return TickOutcome(name, ADVANCED, result.upper, synced, detail)
    log.debug("tick of %s lost (%s): someone else advanced it", name, result.reason)
    return TickOutcome(name, CONTENDED, result.upper, synced, result.reason)


def _adopt(table: Table, name: str, now: int) -> TickOutcome:
    """The first tick of a collection marked by hand (no frontier of ours): adopt it.

    Its kind property was set outside :func:`register_collection` (Spark's
    ``ALTER TABLE ... SET TBLPROPERTIES``); read as an external table its
    upper would be the wall clock and the tick could never land. Adoption
    is the tick: the table's rows become the contents at ``now - 1``, so the
    upper moves from the minimum to ``now``, the time every collection of
    the tick advances to. Refusals (a table a view maintains, equality
    deletes) raise, and the tick reports an error.
    """
    adoption = adopt_table(table, now=max(0, now - 1))
    if adoption is None:
        table.refresh()
        upper = Timeline.of(table).upper
        return TickOutcome(name, CONTENDED, upper, detail="adopted by someone else first")
    return TickOutcome(name, ADVANCED, adoption.upper, detail=adoption.describe())


def tick_collections(
    catalog: Catalog,
    *,
    namespaces: Iterable[str] | None = None,
    now: int | None = None,
    read_only: bool | None = None,
    maintenance: MaintenanceSettings | None = None,
    extra_tables: Iterable[str] = (),
    checkpoint_ms: int | None = DEFAULT_CHECKPOINT_MS,
    fresh_ms: int = 0,
) -> TickReport:
    """Tick every registered collection in ``namespaces`` (default: all).

    A named namespace that does not exist or holds no registered collection
    is refused before anything is ticked (see :func:`list_collections`).

    :param now: the tick's time (epoch ms); default the wall clock. All
        collections advance to the same time.
    :param checkpoint_ms: when a collection's newest contents are this much
        older than its upper, the tick also vouches for them at the upper
        (``ct.time``); without that, expiry would have to keep every tick
        since the last write. ``None``: ticks are always frontier-only.
    :param read_only: the deployment's mode; ``None`` reads ``CT_READ_ONLY``.
    :param fresh_ms: leave a collection alone whose upper is within this many
        milliseconds of ``now`` (:class:`Ticker` passes half its interval).
    :param maintenance: also compact and expire the collections (and
        ``extra_tables``, e.g. views) with these settings.
    """
    time = now_ms() if now is None else check_timestamp(now, "tick time")
    outcomes: list[TickOutcome] = []
    collections = list_collections(catalog, namespaces)
    for info in collections:
        try:
            outcomes.append(
                tick_table(
                    info.table,
                    now=time,
                    read_only=read_only,
                    checkpoint_ms=checkpoint_ms,
                    fresh_ms=fresh_ms,
                )
            )
        except Exception as exc:
            log.exception("tick of %s failed", info.name)
            outcomes.append(TickOutcome(info.name, ERROR, detail=f"{type(exc).__name__}: {exc}"))
    report = None
    if maintenance is not None:
        names = [c.name for c in collections] + [t for t in extra_tables]
        report = maintain(catalog, names, maintenance, now=time, read_only=read_only)
    counts: dict[str, int] = {}
    for outcome in outcomes:
        counts[outcome.status] = counts.get(outcome.status, 0) + 1
    log.info("tick at %d over %d collection(s): %s", time, len(outcomes), counts)
    return TickReport(time, tuple(outcomes), report)


class Ticker:
    """Tick on a fixed interval in a long-lived process (the DAG is the Airflow way).

    :param interval_ms: time between ticks; a collection whose upper moved
        within the last half of it is left alone (see the module's docstring).
    :param maintenance_every: run maintenance every this many ticks (0: never).
    """

    def __init__(
        self,
        catalog: Catalog,
        *,
        interval_ms: int = DEFAULT_TICK_INTERVAL_MS,
        namespaces: Iterable[str] | None = None,
        read_only: bool | None = None,
        clock: Callable[[], int] = now_ms,
        maintenance: MaintenanceSettings | None = None,
        maintenance_every: int = 0,
        checkpoint_ms: int | None = DEFAULT_CHECKPOINT_MS,
    ) -> None:
        self.catalog = catalog
        self.interval_s = interval_ms / 1000
        self.fresh_ms = interval_ms // 2
        if isinstance(namespaces, str):  # list("ops") would be three one-letter namespaces
            raise CollectionError(
                f"namespaces must be a list of names, got the string {namespaces!r}"
            )
        self.namespaces = None if namespaces is None else list(namespaces)
        self.read_only = read_only
        self.clock = clock
        self.maintenance = maintenance
        self.maintenance_every = maintenance_every
        self.checkpoint_ms = checkpoint_ms
        #: The most recent reports (a long-lived ticker keeps only these).
        self.reports: deque[TickReport] = deque(maxlen=100)
        self._count = 0

    def tick(self) -> TickReport:
        self._count += 1
        run_maintenance = (
            self.maintenance is not None
            and self.maintenance_every > 0
            and self._count % self.maintenance_every == 0
        )
        report = tick_collections(
            self.catalog,
            namespaces=self.namespaces,
            now=self.clock(),
            read_only=self.read_only,
            maintenance=self.maintenance if run_maintenance else None,
            checkpoint_ms=self.checkpoint_ms,
            fresh_ms=self.fresh_ms,
        )
        self.reports.append(report)
        return report

    def run(self, stop: threading.Event) -> None:
        """Tick until ``stop`` is set, one tick per interval (a slow tick delays the next)."""
        while not stop.is_set():
            started = _time.monotonic()
            try:
                self.tick()
            except Exception:
                log.exception("tick failed; trying again next interval")
            stop.wait(max(0.0, self.interval_s - (_time.monotonic() - started)))
