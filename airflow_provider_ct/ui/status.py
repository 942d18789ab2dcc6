"""What the "Continual tables" page shows, read from the catalog alone.

No Airflow and no FastAPI here: this module takes a PyIceberg catalog and
returns plain values, so it is tested on real tables without a web server,
and the page's numbers mean exactly what ``docs/ui.md`` says:

* **upper**: the table's ``ct.upper`` (:class:`~airflow_provider_ct.core.timeline.Timeline`);
* **lag**: ``now - upper`` in ms, never negative; the span of times before
  now that are not sealed yet (0 for a closed table);
* **newest ct.time**: the newest ``ct.time`` on ``main``;
* **snapshots kept**: every snapshot in the table's metadata (all branches);
* **ct.since**: the table property expiry writes (earliest readable time);
* **read holds**: each ``ct.read-hold.<reader>`` and its time as expiry would
  resolve it now (:func:`~airflow_provider_ct.collections.holds.hold_time`).

A batch (one tick's commit, grouped by ``ct.batch-id``) reports rows
inserted and retracted from Iceberg's own snapshot summary
(``added-records``; ``deleted-records`` + ``added-position-deletes`` +
``added-equality-deletes``), its refresh strategy (``ct.refresh``), and the
drift it corrected: the rows changed by foreign commits (snapshots without
``ct.upper``) between the previous batch and this one, which this batch's
comparison undid. Nothing here writes: holds are resolved by loading tables.

A table that cannot be read becomes a row with ``error`` set, and a catalog
that cannot be listed a :class:`CatalogStatus` with ``error`` set: the page
shows them, it never fails as a whole because one table is broken.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from airflow_provider_ct.collections.holds import hold_time, read_holds
from airflow_provider_ct.collections.registry import CollectionKeys
from airflow_provider_ct.core.frontier import Frontier, now_ms, parse_summary_timestamp
from airflow_provider_ct.core.keys import SummaryKeys, TableKeys
from airflow_provider_ct.core.tables import table_asset_uri
from airflow_provider_ct.core.timeline import Timeline, TimelineEntry, is_managed
from airflow_provider_ct.exceptions import ConfigurationError

if TYPE_CHECKING:
    from pyiceberg.catalog import Catalog
    from pyiceberg.table import Table

log = logging.getLogger(__name__)

#: Batches a history shows (the newest ones); the plot covers the same ticks.
DEFAULT_HISTORY = 60
_ERROR_CHARS = 600
_INSERTED_KEYS = ("added-records",)
_RETRACTED_KEYS = ("deleted-records", "added-position-deletes", "added-equality-deletes")


class NotShown(ConfigurationError):
    """The table asked for does not exist or is not managed (the page answers 404)."""


def _no_scrub(text: str) -> str:
    return text


@dataclass(frozen=True)
class HoldStatus:
    """One reader's hold on a table, resolved now (``time is None``: released)."""

    reader: str
    time: int | None
    why: str


@dataclass(frozen=True)
class TableStatus:
    """One managed table's row; ``error`` set means the table could not be read."""

    name: str
    asset_uri: str
    kind: str = ""
    upper: Frontier | None = None
    lag_ms: int | None = None
    newest_time: int | None = None
    snapshots: int = 0
    since: int | None = None
    holds: tuple[HoldStatus, ...] = ()
    error: str | None = None


@dataclass(frozen=True)
class Batch:
    """One batch (the snapshots of one ``ct.batch-id``) on ``main``."""

    batch_id: str | None
    committed_at_ms: int
    #: The newest ``ct.time`` the batch wrote; ``None`` for a frontier-only tick.
    time: int | None
    upper: Frontier
    snapshots: int
    inserted: int
    retracted: int
    #: ``ct.refresh`` (views), ``compaction`` (maintenance) or empty.
    strategy: str
    #: Rows changed by foreign commits just before this batch (it corrected them).
    drift_rows: int
    drift_commits: int
    #: ``committed_at - upper`` (never negative): how far behind its commit time it sealed.
    lag_ms: int

    @property
    def corrected_rows(self) -> int:
        """Rows this tick changed to make the table right: inserted plus retracted."""
        return self.inserted + self.retracted


@dataclass(frozen=True)
class TableHistory:
    """A table's row and its newest batches, oldest first."""

    status: TableStatus
    batches: tuple[Batch, ...] = ()


@dataclass(frozen=True)
class CatalogStatus:
    """Every managed table of one catalog, as of ``now_ms``."""

    catalog: str
    now_ms: int
    tables: tuple[TableStatus, ...] = ()
    #: Tables of the catalog that are not managed (not shown).
    unmanaged: int = 0
    error: str | None = None
    notes: tuple[str, ...] = field(default_factory=tuple)


def lag_of(upper: Frontier, now: int) -> int:
    """``now - upper``, at least 0; 0 for a closed table (every time is sealed)."""
    if upper.time is None:
        return 0
    return max(0, now - upper.time)


def describe_error(exc: BaseException, scrub: Callable[[str], str] = _no_scrub) -> str:
    """An error as one short line for the page (secrets scrubbed)."""
    text = scrub(f"{type(exc).__name__}: {exc}")
    return text if len(text) <= _ERROR_CHARS else text[: _ERROR_CHARS - 3] + "..."


def _kind(table: Table, timeline: Timeline) -> str:
    props = table.metadata.properties
    if CollectionKeys.KIND in props:
        return f"collection ({props[CollectionKeys.KIND]})"
    if TableKeys.AS_OF in props:
        return "continual task"
    if any(SummaryKeys.QUERY_HASH in e.summary for e in timeline.entries):
        return "view"
    return "managed"


def _since(table: Table) -> int | None:
    value = table.metadata.properties.get(CollectionKeys.SINCE)
    if value is None:
        return None
    return parse_summary_timestamp(value, key=CollectionKeys.SINCE, where="the table properties")


def _holds(catalog: Catalog, table: Table, scrub: Callable[[str], str]) -> tuple[HoldStatus, ...]:
    found = []
    for hold in read_holds(table):
        try:
            resolved = hold_time(catalog, hold)
            found.append(HoldStatus(hold.reader, resolved.time, resolved.why))
        except Exception as exc:  # a broken reader table must not hide the others
            found.append(HoldStatus(hold.reader, None, describe_error(exc, scrub)))
    return tuple(found)


def table_status(
    catalog: Catalog,
    catalog_name: str,
    table: Table,
    now: int,
    scrub: Callable[[str], str] = _no_scrub,
) -> tuple[TableStatus, Timeline | None]:
    """The row of one loaded table (with ``error`` set if its history cannot be read)."""
    name = ".".join(table.name())
    uri = table_asset_uri(catalog_name, name)
    try:
        timeline = Timeline.of(table, now=now)
        times = [e.time for e in timeline.entries if e.time is not None]
        row = TableStatus(
            name=name,
            asset_uri=uri,
            kind=_kind(table, timeline),
            upper=timeline.upper,
            lag_ms=lag_of(timeline.upper, now),
            newest_time=max(times) if times else None,
            snapshots=len(table.metadata.snapshots),
            since=_since(table),
            holds=_holds(catalog, table, scrub),
        )
    except Exception as exc:
        log.warning("status page: table %s cannot be read: %s", name, exc)
        return TableStatus(name=name, asset_uri=uri, error=describe_error(exc, scrub)), None
    return row, timeline


def catalog_status(
    catalog: Catalog,
    catalog_name: str,
    *,
    now: int | None = None,
    scrub: Callable[[str], str] = _no_scrub,
) -> CatalogStatus:
    """Every managed table of ``catalog``, sorted by name; failures become error rows."""
    at = now_ms() if now is None else now
    try:
        namespaces = sorted(catalog.list_namespaces())
    except Exception as exc:
        log.warning("status page: catalog %s cannot be listed: %s", catalog_name, exc)
        return CatalogStatus(catalog_name, at, error=describe_error(exc, scrub))
    rows: list[TableStatus] = []
    unmanaged = 0
    for name, table, error in _each_table(catalog, namespaces, scrub):
        if table is None:
            rows.append(TableStatus(name, table_asset_uri(catalog_name, name), error=error))
        elif _managed(table):
            rows.append(table_status(catalog, catalog_name, table, at, scrub)[0])
        else:
            unmanaged += 1
    return CatalogStatus(catalog_name, at, tuple(rows), unmanaged)


def _managed(table: Table) -> bool:
    try:
        return is_managed(table.metadata)
    except Exception:  # unreadable summaries: show it, as an error row
        return True


def _each_table(
    catalog: Catalog, namespaces: Iterable[tuple[str, ...]], scrub: Callable[[str], str]
) -> Iterable[tuple[str, Table | None, str | None]]:
    """``(name, table, None)`` per loadable table, ``(name, None, error)`` per broken one.

    Namespaces and tables dropped while listing are skipped, like ``iter_tables``.
    """
    from pyiceberg.exceptions import NoSuchNamespaceError, NoSuchTableError

    for namespace in namespaces:
        ns_name = ".".join(namespace)
        try:
            identifiers = sorted(catalog.list_tables(namespace))
        except NoSuchNamespaceError:
            continue
        except Exception as exc:
            yield f"{ns_name}.*", None, describe_error(exc, scrub)
            continue
        for identifier in identifiers:
            name = ".".join(identifier)
            try:
                yield name, catalog.load_table(identifier), None
            except NoSuchTableError:
                continue
            except Exception as exc:
                yield name, None, describe_error(exc, scrub)


def _count(entry: TimelineEntry, keys: tuple[str, ...]) -> int:
    total = 0
    for key in keys:
        value = entry.summary.get(key, "0")
        total += int(value) if value.isdigit() else 0
    return total


def _is_foreign(entry: TimelineEntry) -> bool:
    return entry.upper is None and entry.batch_id is None


def batches_of(timeline: Timeline) -> list[Batch]:
    """The batches on ``main``, oldest first (consecutive snapshots of one batch id merged)."""
    batches: list[Batch] = []
    group: list[TimelineEntry] = []
    group_drift = (0, 0)
    drift_rows = drift_commits = 0
    for entry in timeline.entries:
        if _is_foreign(entry):
            drift_rows += _count(entry, _INSERTED_KEYS) + _count(entry, _RETRACTED_KEYS)
            drift_commits += 1
            continue
        same_batch = (
            bool(group)
            and entry.batch_id is not None
            and entry.batch_id == group[-1].batch_id
            and drift_commits == 0
        )
        if not same_batch:
            if group:
                batches.append(_batch(group, *group_drift))
            group, group_drift = [], (drift_rows, drift_commits)
            drift_rows = drift_commits = 0
        group.append(entry)
    if group:
        batches.append(_batch(group, *group_drift))
    return batches


def _batch(group: list[TimelineEntry], drift_rows: int, drift_commits: int) -> Batch:
    last = group[-1]
    upper = last.upper if last.upper is not None else Frontier.minimum()
    times = [e.time for e in group if e.time is not None]
    strategy = last.summary.get(SummaryKeys.REFRESH) or last.summary.get(
        CollectionKeys.MAINTENANCE, ""
    )
    return Batch(
        batch_id=last.batch_id,
        committed_at_ms=last.committed_at_ms,
        time=max(times) if times else None,
        upper=upper,
        snapshots=len(group),
        inserted=sum(_count(e, _INSERTED_KEYS) for e in group),
        retracted=sum(_count(e, _RETRACTED_KEYS) for e in group),
        strategy=strategy,
        drift_rows=drift_rows,
        drift_commits=drift_commits,
        lag_ms=lag_of(upper, last.committed_at_ms),
    )


def table_history(
    catalog: Catalog,
    catalog_name: str,
    name: str,
    *,
    now: int | None = None,
    limit: int = DEFAULT_HISTORY,
    scrub: Callable[[str], str] = _no_scrub,
) -> TableHistory:
    """One table's row and its newest ``limit`` batches.

    :raises NotShown: no such table, or it is not a managed table.
    """
    from pyiceberg.exceptions import NoSuchTableError

    at = now_ms() if now is None else now
    try:
        table = catalog.load_table(name)
    except NoSuchTableError:
        raise NotShown(f"table {name!r} does not exist in catalog {catalog_name!r}") from None
    except Exception as exc:
        error = describe_error(exc, scrub)
        return TableHistory(TableStatus(name, table_asset_uri(catalog_name, name), error=error))
    if not _managed(table):
        raise NotShown(f"table {name!r} is not managed by airflow-provider-ct")
    row, timeline = table_status(catalog, catalog_name, table, at, scrub)
    if timeline is None:
        return TableHistory(row)
    return TableHistory(row, tuple(batches_of(timeline)[-limit:]))
