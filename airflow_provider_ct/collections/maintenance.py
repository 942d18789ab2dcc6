"""Snapshot expiry and small-file compaction for managed tables.

Ticks write a snapshot per collection per interval, and small blind writes
write small files; both make every commit slower (PyIceberg copies the whole
metadata on each change) and every read open more files. Maintenance bounds
them without taking away anything a reader still needs.

**Expiry** keeps, on ``main``, every snapshot from the one holding the
table's contents at ``since`` onwards, where

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

**Compaction** rewrites the small data files of the head into fewer files in
one snapshot that carries the upper forward (``ct.upper`` = the current
upper) and has neither ``ct.time`` nor ``ct.lower``: it changes no contents,
so it vouches for no time, and the next compare-and-append's ``ct.lower``
still equals the upper before it. Its Iceberg operation is ``replace``
(files rewritten, rows unchanged), so the quiet check, incremental changes
and continual tasks downstream skip it as they skip Spark's
``rewrite_data_files``. Data files that position deletes apply to
(views and continual tasks write them) are left alone; collections never
write delete files, so they compact fully. Partitioned tables are skipped.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

from airflow_provider_ct.collections.holds import HoldTime, hold_time, read_holds
from airflow_provider_ct.collections.registry import CollectionKeys, is_read_only, table_name
from airflow_provider_ct.collections.rows import arrow_schema, delete_files, write_parquet
from airflow_provider_ct.core.commit import commit_once, replace_producer
from airflow_provider_ct.core.frontier import now_ms
from airflow_provider_ct.core.keys import SummaryKeys
from airflow_provider_ct.core.sweep import DEFAULT_GRACE_MS, SweepReport, sweep_staged
from airflow_provider_ct.core.timeline import Timeline, main_ancestry
from airflow_provider_ct.exceptions import CommitStateUnknownError, ConfigurationError

if TYPE_CHECKING:
    from pyiceberg.catalog import Catalog
    from pyiceberg.io import FileIO
    from pyiceberg.table import Table
    from pyiceberg.table.metadata import TableMetadata
    from pyiceberg.table.snapshots import Snapshot

log = logging.getLogger(__name__)

#: Keep every time of the last hour readable by default.
DEFAULT_RETENTION_MS = 3_600_000
#: Data files below this size are compacted.
DEFAULT_SMALL_FILE_BYTES = 8 * 1024 * 1024
#: Compact only when at least this many small files exist.
DEFAULT_MIN_FILES = 8
#: Compacted files grow up to about this size.
DEFAULT_TARGET_FILE_BYTES = 128 * 1024 * 1024


@dataclass(frozen=True)
class MaintenanceSettings:
    """How maintenance treats each table (defaults above)."""

    retention_ms: int = DEFAULT_RETENTION_MS
    expire: bool = True
    delete_files: bool = True
    compact: bool = True
    small_file_bytes: int = DEFAULT_SMALL_FILE_BYTES
    min_files: int = DEFAULT_MIN_FILES
    target_file_bytes: int = DEFAULT_TARGET_FILE_BYTES
    #: Remove staged leftovers (crashed writers, lost races) after expiry.
    sweep: bool = True
    #: Age before files no manifest accounts for count as debris (see sweep_staged).
    sweep_grace_ms: int = DEFAULT_GRACE_MS

    def __post_init__(self) -> None:
        """Refuse settings that would expire what they should keep.

        A negative retention puts the readable-since time in the future, so
        expiry would drop every snapshot no read hold protects.
        """
        for name, least in (
            ("retention_ms", 0),
            ("small_file_bytes", 0),
            ("min_files", 1),
            ("target_file_bytes", 1),
            ("sweep_grace_ms", 0),
        ):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < least:
                raise ConfigurationError(
                    f"maintenance setting {name}={value!r:.100} must be an integer >= {least}"
                )


# -- expiry --------------------------------------------------------------------------------
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


def plan_expiry(
    catalog: Catalog, table: Table, *, retention_ms: int = DEFAULT_RETENTION_MS, now: int
) -> ExpiryPlan:
    """Which snapshots of ``table`` (as loaded) no reader needs any more."""
    name = table_name(table)
    timeline = Timeline.of(table)
    if not timeline.managed:
        raise ConfigurationError(f"table {name} is not managed by airflow-provider-ct")
    holds = tuple(hold_time(catalog, h) for h in read_holds(table))
    since = max(0, now - retention_ms)
    for held in holds:
        if held.time is not None:
            since = min(since, held.time)
    entries = timeline.entries
    metadata = table.metadata
    if not entries:
        return ExpiryPlan(name, now, since, holds, None, (), len(metadata.snapshots))
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


def _files_of(snapshot: Snapshot, io: FileIO, cache: dict[str, set[str]]) -> set[str]:
    """Every file a snapshot references: manifest list, manifests, data and delete files."""
    files = {snapshot.manifest_list}
    for manifest in snapshot.manifests(io):
        files.add(manifest.manifest_path)
        if manifest.manifest_path not in cache:
            entries = manifest.fetch_manifest_entry(io, discard_deleted=False)
            cache[manifest.manifest_path] = {e.data_file.file_path for e in entries}
        files |= cache[manifest.manifest_path]
    return files


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
    cache: dict[str, set[str]] = {}
    gone: set[str] = set()
    for snapshot_id in plan.expire:
        snapshot = before.snapshot_by_id(snapshot_id)
        if snapshot is not None:
            gone |= _files_of(snapshot, table.io, cache)
    kept: set[str] = set()
    for snapshot in _retained_snapshots(table, before, plan):
        kept |= _files_of(snapshot, table.io, cache)
    return delete_files(table, sorted(gone - kept))


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
    from pyiceberg.exceptions import CommitFailedException
    from pyiceberg.table.update.snapshot import ExpireSnapshots

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
    head = before.current_snapshot()
    previous_since = int(before.properties.get(CollectionKeys.SINCE, "0") or 0)
    tx = table.transaction()
    ExpireSnapshots(tx).by_ids(list(plan.expire)).commit()
    tx.set_properties({CollectionKeys.SINCE: str(max(previous_since, plan.since))})
    try:
        commit_once(table, tx, head.snapshot_id if head is not None else None)
    except CommitFailedException as exc:
        log.info("expiry of %s lost to a concurrent commit (%s); next run retries", name, exc)
        return ExpiryReport(name, "contended", since=plan.since, holds=held)
    except ValueError as exc:  # a concurrent expiry removed some of them first
        log.info("expiry of %s raced another expiry (%s); next run retries", name, exc)
        return ExpiryReport(name, "contended", since=plan.since, holds=held)
    table.refresh()
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


# -- compaction -----------------------------------------------------------------------------
@dataclass(frozen=True)
class CompactionReport:
    table: str
    status: str  # compacted | nothing-to-compact | partitioned | contended | read-only
    files_rewritten: int = 0
    files_written: int = 0
    records: int = 0
    snapshot_id: int | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "table": self.table,
            "status": self.status,
            "files_rewritten": self.files_rewritten,
            "files_written": self.files_written,
            "records": self.records,
            "snapshot_id": self.snapshot_id,
        }


def _bins(tasks: list[Any], target_bytes: int) -> list[list[Any]]:
    """Group small files (smallest first) into bins of about ``target_bytes``."""
    bins: list[list[Any]] = []
    current: list[Any] = []
    size = 0
    for task in sorted(tasks, key=lambda t: t.file.file_size_in_bytes):
        if current and size + task.file.file_size_in_bytes > target_bytes:
            bins.append(current)
            current, size = [], 0
        current.append(task)
        size += task.file.file_size_in_bytes
    if current:
        bins.append(current)
    return [b for b in bins if len(b) > 1]


def compact(
    catalog: Catalog,
    name: str,
    *,
    small_file_bytes: int = DEFAULT_SMALL_FILE_BYTES,
    min_files: int = DEFAULT_MIN_FILES,
    target_file_bytes: int = DEFAULT_TARGET_FILE_BYTES,
    read_only: bool | None = None,
) -> CompactionReport:
    """Rewrite the head's small data files of ``name`` into fewer files, in one snapshot."""
    from pyiceberg.exceptions import CommitFailedException
    from pyiceberg.expressions import AlwaysTrue
    from pyiceberg.io.pyarrow import ArrowScan, parquet_files_to_data_files
    from pyiceberg.manifest import DataFileContent

    table = catalog.load_table(name)
    if is_read_only(table, read_only):
        return CompactionReport(name, "read-only")
    timeline = Timeline.of(table)
    if not timeline.managed:
        raise ConfigurationError(f"table {name} is not managed by airflow-provider-ct")
    if timeline.head_snapshot_id is None:
        return CompactionReport(name, "nothing-to-compact")
    if not table.spec().is_unpartitioned():
        return CompactionReport(name, "partitioned")
    small = [
        task
        for task in table.scan().plan_files()
        if not task.delete_files
        and task.file.content == DataFileContent.DATA
        and task.file.file_size_in_bytes < small_file_bytes
    ]
    bins = _bins(small, target_file_bytes) if len(small) >= min_files else []
    if not bins:
        return CompactionReport(name, "nothing-to-compact")
    batch_id = f"compact-{uuid.uuid4().hex}"
    schema, arrow = table.schema(), arrow_schema(table)
    written: list[str] = []
    records = 0
    for group in bins:
        data = ArrowScan(table.metadata, table.io, schema, AlwaysTrue()).to_table(group)
        expected = sum(t.file.record_count for t in group)
        if data.num_rows != expected:  # no deletes apply, so every record must come back
            delete_files(table, written)
            raise ConfigurationError(
                f"compaction of {name}: read {data.num_rows} rows from files holding {expected}"
            )
        written.append(write_parquet(table, batch_id, data.cast(arrow)))
        records += data.num_rows
    tx = table.transaction()
    props = {
        SummaryKeys.UPPER: timeline.upper.to_summary(),
        SummaryKeys.BATCH_ID: batch_id,
        CollectionKeys.MAINTENANCE: "compaction",
    }
    producer = replace_producer(tx, props)
    rewritten = [task for group in bins for task in group]
    for task in rewritten:
        producer.delete_data_file(task.file)
    for data_file in parquet_files_to_data_files(table.io, tx.table_metadata, iter(written)):
        producer.append_data_file(data_file)
    producer.commit()
    try:
        commit_once(table, tx, timeline.head_snapshot_id)
    except CommitFailedException as exc:
        clean = getattr(producer, "_clean_all_uncommitted", None)  # its manifests
        if clean is not None:
            clean()
        delete_files(table, written)
        log.info("compaction of %s lost to a concurrent commit (%s)", name, exc)
        return CompactionReport(name, "contended")
    except Exception as exc:
        raise CommitStateUnknownError(
            f"compaction of {name} has an unknown outcome: {exc}; its files are kept"
        ) from exc
    table.refresh()
    head = table.metadata.current_snapshot()
    log.info(
        "compacted %s: %d small file(s) -> %d file(s), %d record(s)",
        name,
        len(rewritten),
        len(written),
        records,
    )
    return CompactionReport(
        name,
        "compacted",
        files_rewritten=len(rewritten),
        files_written=len(written),
        records=records,
        snapshot_id=head.snapshot_id if head is not None else None,
    )


# -- both -----------------------------------------------------------------------------------
@dataclass(frozen=True)
class MaintenanceReport:
    expiry: tuple[ExpiryReport, ...] = ()
    compaction: tuple[CompactionReport, ...] = ()
    errors: dict[str, str] = field(default_factory=dict)
    sweeps: dict[str, SweepReport] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {
            "expiry": [r.to_json() for r in self.expiry],
            "compaction": [r.to_json() for r in self.compaction],
            "sweeps": {name: asdict(r) for name, r in self.sweeps.items()},
            "errors": dict(self.errors),
        }


def maintain(
    catalog: Catalog,
    tables: Iterable[str],
    settings: MaintenanceSettings | None = None,
    *,
    now: int | None = None,
    read_only: bool | None = None,
) -> MaintenanceReport:
    """Compact, expire, then sweep staged leftovers of each table.

    Compaction goes first so that expiry can drop the snapshots that still
    referenced the small files once no reader needs them; the sweep goes
    last, so files only expired snapshots referenced are gone by then. One
    table's failure does not stop the others. In read-only mode nothing is
    swept either.
    """
    chosen = settings or MaintenanceSettings()
    expiry: list[ExpiryReport] = []
    compaction: list[CompactionReport] = []
    errors: dict[str, str] = {}
    sweeps: dict[str, SweepReport] = {}
    for name in tables:
        try:
            if chosen.compact:
                compaction.append(
                    compact(
                        catalog,
                        name,
                        small_file_bytes=chosen.small_file_bytes,
                        min_files=chosen.min_files,
                        target_file_bytes=chosen.target_file_bytes,
                        read_only=read_only,
                    )
                )
            if chosen.expire:
                expiry.append(
                    expire_snapshots(
                        catalog,
                        name,
                        retention_ms=chosen.retention_ms,
                        now=now,
                        delete_unreferenced=chosen.delete_files,
                        read_only=read_only,
                    )
                )
            if chosen.sweep:
                table = catalog.load_table(name)
                if not is_read_only(table, read_only):
                    # File ages are wall-clock ages, whatever time the tick is for.
                    sweeps[name] = sweep_staged(table, grace_ms=chosen.sweep_grace_ms)
        except Exception as exc:
            log.exception("maintenance of %s failed", name)
            errors[name] = f"{type(exc).__name__}: {exc}"
    return MaintenanceReport(tuple(expiry), tuple(compaction), errors, sweeps)
