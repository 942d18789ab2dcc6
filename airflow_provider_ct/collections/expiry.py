"""Snapshot expiry for managed tables: drop the history no reader needs any more.

Ticks write a snapshot per collection per interval; every snapshot kept makes
each commit slower (PyIceberg copies the whole metadata on each change).
Expiry bounds them without taking away anything a reader still needs.

It keeps, on ``main``, every snapshot from the one holding the table's
contents at ``since`` onwards, where

``since = min(now - retention, hold time of every read hold on the table)``

(see :mod:`.holds`), and also every snapshot that was ``main``'s head within
the retention by the wall clock (a backfill's fresh snapshots carry old
logical times, and a writer that loaded the table a moment ago may still
read the head it saw).
Older ``main`` snapshots, and unreferenced snapshots older than the
retention, are removed with PyIceberg's ``ExpireSnapshots`` in one catalog
commit that asserts ``main``'s head (never rebased over a concurrent commit);
the files only they referenced are then deleted. The table property
``ct.since`` records the earliest time still readable.

Planning (:func:`plan_expiry`) is kept apart from committing
(:func:`expire_snapshots`) so that tests and the UI can ask what would go,
and why the rest stays, without changing the table.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from airflow_provider_ct.collections.holds import HoldTime, hold_time, read_holds
from airflow_provider_ct.collections.registry import CollectionKeys, is_read_only, table_name
from airflow_provider_ct.core.commit import commit_once
from airflow_provider_ct.core.expiry import delete_files, unreachable_files
from airflow_provider_ct.core.frontier import now_ms
from airflow_provider_ct.core.timeline import Timeline, main_ancestry
from airflow_provider_ct.exceptions import ConfigurationError

if TYPE_CHECKING:
    from pyiceberg.catalog import Catalog
    from pyiceberg.table import Table
    from pyiceberg.table.metadata import TableMetadata
    from pyiceberg.table.snapshots import Snapshot

log = logging.getLogger(__name__)

#: Keep every time of the last hour readable by default.
DEFAULT_RETENTION_MS = 3_600_000


@dataclass(frozen=True)
class ExpiryPlan:
    """What expiry would remove from one table, and why the rest stays."""

    table: str
    now: int
    #: The earliest time whose contents stay readable.
    since: int
    holds: tuple[HoldTime, ...]
    #: The oldest snapshot kept on ``main``.
    keep_from: int | None
    expire: tuple[int, ...]
    retained: int


@dataclass(frozen=True)
class ExpiryReport:
    """What one expiry run did to one table (its JSON is the maintain task's XCom).

    ``holds`` names each hold as ``reader@time``, so a report that kept more
    than the retention says which reader held it back.
    """

    table: str
    status: str  # expired | nothing-to-expire | contended | read-only
    expired: tuple[int, ...] = ()
    retained: int = 0
    since: int | None = None
    files_deleted: int = 0
    holds: tuple[str, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {
            "table": self.table,
            "status": self.status,
            "expired": len(self.expired),
            "retained": self.retained,
            "since": self.since,
            "files_deleted": self.files_deleted,
            "holds": list(self.holds),
        }


def _ancestry_ids(metadata: TableMetadata, snapshot_id: int) -> set[int]:
    from pyiceberg.table.snapshots import ancestors_of

    return {s.snapshot_id for s in ancestors_of(metadata.snapshot_by_id(snapshot_id), metadata)}


def _since(holds: tuple[HoldTime, ...], *, retention_ms: int, now: int) -> int:
    """The earliest time to keep readable: the retention's start, or an earlier hold's time."""
    since = max(0, now - retention_ms)
    for held in holds:
        if held.time is not None:
            since = min(since, held.time)
    return since


def _oldest_kept(timeline: Timeline, since: int, *, retention_ms: int, now: int) -> int:
    """The index in ``timeline.entries`` (not empty) of the oldest ``main`` snapshot kept.

    The smallest of three floors, each protecting a different reader; the
    comments say which.
    """
    entries = timeline.entries
    # The snapshot holding the contents at `since` (Timeline.snapshot_at's rule)
    # and everything after it stay: readers at any time >= since, and
    # incremental readers walking parent links, find an unbroken chain.
    keep = len(entries) - 1
    at_since = [i for i, e in enumerate(entries) if e.time is not None and e.time <= since]
    if at_since:
        keep = at_since[-1]
    else:
        later = [i for i, e in enumerate(entries) if e.time is not None]
        keep = later[0] if later else keep
    # A snapshot stays while it was main's head within the retention (its
    # successor is recent): writers and readers that loaded the table a moment
    # ago may still be reading its files.
    recent = [i for i, e in enumerate(entries) if e.committed_at_ms >= now - retention_ms]
    if recent:
        keep = min(keep, max(0, recent[0] - 1))
    # The newest snapshot carrying ct.upper stays, and all after it: the
    # frontier is read from it (a foreign commit after it carries none, and
    # expiring it would leave main below the upper it had reached).
    setter = [i for i, e in enumerate(entries) if e.snapshot_id == timeline.upper_snapshot_id]
    if setter:
        keep = min(keep, setter[0])
    return keep


def plan_expiry(
    catalog: Catalog, table: Table, *, retention_ms: int = DEFAULT_RETENTION_MS, now: int
) -> ExpiryPlan:
    """Which snapshots of ``table`` (as loaded) no reader needs any more."""
    name = table_name(table)
    timeline = Timeline.of(table)
    if not timeline.managed:
        raise ConfigurationError(f"table {name} is not managed by airflow-provider-ct")
    holds = tuple(hold_time(catalog, h) for h in read_holds(table))
    since = _since(holds, retention_ms=retention_ms, now=now)
    entries = timeline.entries
    metadata = table.metadata
    if not entries:
        return ExpiryPlan(name, now, since, holds, None, (), len(metadata.snapshots))
    keep = _oldest_kept(timeline, since, retention_ms=retention_ms, now=now)
    candidates = {e.snapshot_id for e in entries[:keep]}
    main_ids = {e.snapshot_id for e in entries}
    # Snapshots on no ref's history (rolled back) go once older than the retention.
    protected: set[int] = set()
    for ref_name, ref in metadata.refs.items():
        if ref_name != "main":
            protected |= _ancestry_ids(metadata, ref.snapshot_id)
    for snapshot in metadata.snapshots:
        if snapshot.snapshot_id not in main_ids and snapshot.timestamp_ms < now - retention_ms:
            candidates.add(snapshot.snapshot_id)
    expire = tuple(sorted(candidates - protected))
    return ExpiryPlan(
        name,
        now,
        since,
        holds,
        entries[keep].snapshot_id,
        expire,
        len(metadata.snapshots) - len(expire),
    )


def _retained_snapshots(table: Table, before: TableMetadata, plan: ExpiryPlan) -> list[Snapshot]:
    """The snapshots whose files must survive: all left, or just the oldest kept on main.

    On a table whose only ref is ``main`` and whose expired snapshots were all
    older ``main`` ancestors, a file an expired snapshot referenced and some
    kept snapshot still needs is referenced by the oldest kept one: files and
    manifests are never re-added once dropped, so their lifetimes along a
    linear history are contiguous. That saves reading every kept snapshot's
    manifest list on each run (a ticking collection keeps many).
    """
    main_ids = {s.snapshot_id for s in main_ancestry(before)}
    oldest = before.snapshot_by_id(plan.keep_from) if plan.keep_from is not None else None
    if set(before.refs) == {"main"} and set(plan.expire) <= main_ids and oldest is not None:
        return [oldest]
    return list(table.metadata.snapshots)


def _delete_unreachable(table: Table, before: TableMetadata, plan: ExpiryPlan) -> int:
    """Delete the files only expired snapshots referenced (an entry of any status references)."""
    expired = [before.snapshot_by_id(snapshot_id) for snapshot_id in plan.expire]
    retained = _retained_snapshots(table, before, plan)
    gone = unreachable_files(table.io, [s for s in expired if s is not None], retained)
    return delete_files(table, gone)


def _commit_expiry(table: Table, name: str, plan: ExpiryPlan) -> bool:
    """Remove ``plan.expire`` and raise ``ct.since`` in one commit; False when it lost a race.

    The commit asserts the head the plan was made from, so a concurrent
    commit makes it fail instead of being rebased over (the plan's choice
    of what to keep depended on that head). Losing is not an error: the
    next maintenance run plans again.
    """
    from pyiceberg.exceptions import CommitFailedException
    from pyiceberg.table.update.snapshot import ExpireSnapshots

    before = table.metadata
    head = before.current_snapshot()
    previous_since = int(before.properties.get(CollectionKeys.SINCE, "0") or 0)
    tx = table.transaction()
    ExpireSnapshots(tx).by_ids(list(plan.expire)).commit()
    tx.set_properties({CollectionKeys.SINCE: str(max(previous_since, plan.since))})
    try:
        commit_once(table, tx, head.snapshot_id if head is not None else None)
    except CommitFailedException as exc:
        log.info("expiry of %s lost to a concurrent commit (%s); next run retries", name, exc)
        return False
    except ValueError as exc:  # a concurrent expiry removed some of them first
        log.info("expiry of %s raced another expiry (%s); next run retries", name, exc)
        return False
    return True


def expire_snapshots(
    catalog: Catalog,
    name: str,
    *,
    retention_ms: int = DEFAULT_RETENTION_MS,
    now: int | None = None,
    delete_unreferenced: bool = True,
    read_only: bool | None = None,
) -> ExpiryReport:
    """Expire the snapshots of ``name`` that no hold and no retention keeps.

    :param retention_ms: keep every time of the last ``retention_ms``
        readable, and every snapshot committed in that window.
    :param delete_unreferenced: also delete the files only expired snapshots used.
    :param read_only: the deployment's mode (``None``: ``CT_READ_ONLY``);
        maintenance commits, so read-only mode skips it.
    """
    table = catalog.load_table(name)
    current = now_ms() if now is None else now
    if is_read_only(table, read_only):
        return ExpiryReport(name, "read-only")
    plan = plan_expiry(catalog, table, retention_ms=retention_ms, now=current)
    held = tuple(f"{h.hold.reader}@{h.time}" for h in plan.holds)
    if not plan.expire:
        return ExpiryReport(
            name, "nothing-to-expire", retained=plan.retained, since=plan.since, holds=held
        )
    before = table.metadata
    if not _commit_expiry(table, name, plan):
        return ExpiryReport(name, "contended", since=plan.since, holds=held)
    table.refresh()
    # The metadata from before the commit still lists the expired snapshots,
    # so the files only they referenced can be found after they are gone.
    deleted = _delete_unreachable(table, before, plan) if delete_unreferenced else 0
    log.info(
        "expired %d snapshot(s) of %s (since %d, %d kept, %d file(s) deleted, holds %s)",
        len(plan.expire),
        name,
        plan.since,
        len(table.metadata.snapshots),
        deleted,
        held,
    )
    return ExpiryReport(
        name,
        "expired",
        expired=plan.expire,
        retained=len(table.metadata.snapshots),
        since=plan.since,
        files_deleted=deleted,
        holds=held,
    )


def readable_since(table: Table) -> int:
    """The earliest time whose contents expiry guarantees are still readable (``ct.since``)."""
    return int(table.metadata.properties.get(CollectionKeys.SINCE, "0") or 0)
