"""Differential collections: the caller states what the collection should hold.

The desired contents are small (a configuration, a registry, a status
table), computed in the worker with PyArrow. Writing them means correcting
the table: read the head file by file, take the multiset difference
(``desired - head`` is inserted, ``head - desired`` retracted), and commit it
with compare-and-append at ``t = max(now, upper)``. When that loses (a tick,
another writer or a foreign commit moved the table), we re-read the table
and correct again: the desired state, not the stale correction, is what
lands. A correction that turns out empty commits nothing.

Two operations state the desired contents:

* :meth:`DifferentialCollection.replace`: the full desired contents;
* :meth:`DifferentialCollection.update`: retract some rows and insert
  others. Without a remembered desired state the delta is applied to the
  table's head and, on a lost race, to the new head, so updates from
  separate tasks compose instead of overwriting each other.

**Read-only mode.** The desired state is still accepted: it is kept as a
*pending desired* Parquet file under ``<table>/ct-desired/`` (or beside
the manifests when ``ct.staging-root`` puts those elsewhere; an unlinked
file, like a staged batch; nothing is committed) and lands when writes are
allowed again, through :meth:`DifferentialCollection.sync`, which every
tick calls for collections with pending desired state. The newest pending
state wins; a write stated later while writable supersedes older pending
ones.
"""

from __future__ import annotations

import logging
import posixpath
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from airflow_provider_ct.collections.registry import (
    CollectionKind,
    backoff,
    is_read_only,
    load_collection,
    table_name,
)
from airflow_provider_ct.collections.rows import (
    LostChange,
    RowBag,
    StagedChange,
    append_change_now,
    arrow_schema,
    contents,
    read_live_files,
    signed_bags,
    stage_change,
    to_arrow,
)
from airflow_provider_ct.core.commit import AppendResult
from airflow_provider_ct.core.expiry import delete_files
from airflow_provider_ct.core.frontier import Frontier, is_ascii_digits, now_ms
from airflow_provider_ct.core.landing import landing_of
from airflow_provider_ct.core.staging import inside, staging_root
from airflow_provider_ct.core.storage import filesystem, io_properties, is_s3
from airflow_provider_ct.core.timeline import Timeline
from airflow_provider_ct.exceptions import (
    CollectionClosedError,
    CommitError,
    CommitStateUnknownError,
    RetractionError,
)

if TYPE_CHECKING:
    from pyiceberg.catalog import Catalog
    from pyiceberg.table import Table

log = logging.getLogger(__name__)

#: Folder (relative to the table location) of pending desired states.
DESIRED_DIR = "ct-desired"

#: SyncResult statuses.
LANDED = "landed"
IN_SYNC = "in-sync"
PENDING = "pending"


@dataclass(frozen=True)
class SyncResult:
    """What stating (or syncing) a desired state did.

    ``landed``: a correction was committed at ``time``; ``in-sync``: the
    table already held the desired contents (nothing committed); ``pending``:
    read-only mode, the desired state waits under ``ct-desired/``.
    """

    collection: str
    status: str
    upper: Frontier
    time: int | None = None
    inserted: int = 0
    retracted: int = 0
    attempts: int = 0
    batch_id: str | None = None

    @property
    def landed(self) -> bool:
        return self.status == LANDED

    def to_json(self) -> dict[str, Any]:
        return {
            "collection": self.collection,
            "status": self.status,
            "upper": self.upper.to_json(),
            "time": self.time,
            "inserted": self.inserted,
            "retracted": self.retracted,
            "attempts": self.attempts,
            "batch_id": self.batch_id,
        }


# -- pending desired states ---------------------------------------------------------------
@dataclass(frozen=True)
class _LostCorrection:
    """A correction whose commit lost a race: its batch id, desired rows and staged change."""

    batch_id: str
    desired: RowBag
    change: LostChange


@dataclass(frozen=True)
class PendingDesired:
    """A desired state stated while writes were off, waiting to land."""

    path: str
    stated_at_ms: int


def _desired_roots(table: Table) -> list[str]:
    """Where pending desired states live: beside the manifests when those leave the table.

    ``<table>/ct-desired/`` by default; a table whose staging root is
    elsewhere (``ct.staging-root``: a table bucket refuses files outside
    Iceberg's layout) keeps them under ``<staging root>/desired/``, and
    states kept in the table before are still found (listed second).
    """
    location = table.location().rstrip("/")
    default = posixpath.join(location, DESIRED_DIR)
    root = staging_root(location, table.metadata.properties, io_properties(table))
    if inside(root, location):
        return [default]
    return [posixpath.join(root, "desired"), default]


def list_pending(table: Table) -> list[PendingDesired]:
    """Pending desired states of ``table``, oldest first."""
    out: list[PendingDesired] = []
    for root in _desired_roots(table):
        fs, local = filesystem(root, io_properties(table))
        prefix = root[: len(root) - len(local)] if root.endswith(local) else ""
        for info in fs.get_file_info(pafs.FileSelector(local, allow_not_found=True)):
            base = posixpath.basename(info.path)
            if info.type != pafs.FileType.File or not base.endswith(".parquet"):
                continue
            stamp = base.split("-", 1)[0]
            if is_ascii_digits(stamp) and len(stamp) <= 19:  # else not one of ours
                out.append(PendingDesired(prefix + info.path, int(stamp)))
    return sorted(out, key=lambda p: (p.stated_at_ms, p.path))


def write_pending(table: Table, data: pa.Table, stated_at_ms: int) -> PendingDesired:
    """Keep ``data`` as the newest pending desired state, seen whole or not at all.

    On a filesystem a temporary file, then a rename; on an object store one
    upload (an object appears when complete, and a rename is a copy there).
    """
    root = _desired_roots(table)[0]
    fs, local = filesystem(root, io_properties(table))
    name = f"{stated_at_ms:013d}-{uuid.uuid4().hex}.parquet"
    if is_s3(root):
        pq.write_table(data, posixpath.join(local, name), filesystem=fs)
        return PendingDesired(f"{root}/{name}", stated_at_ms)
    fs.create_dir(local, recursive=True)
    tmp = posixpath.join(local, f".{name}.tmp")
    pq.write_table(data, tmp, filesystem=fs)
    fs.move(tmp, posixpath.join(local, name))
    return PendingDesired(f"{root}/{name}", stated_at_ms)


def read_pending(table: Table, pending: PendingDesired) -> pa.Table:
    fs, local = filesystem(pending.path, io_properties(table))
    return to_arrow(pq.read_table(local, filesystem=fs), arrow_schema(table), what="pending state")


def drop_pending(table: Table, pendings: list[PendingDesired]) -> None:
    delete_files(table, [p.path for p in pendings])


# -- the collection ---------------------------------------------------------------------------
class DifferentialCollection:
    """The writer of one differential collection.

    The object remembers the last desired state it established, like
    Materialize's differential write task: a later :meth:`update` applies to
    it, and :meth:`sync` corrects the table back to it (e.g. after a foreign
    commit). A fresh object (an Airflow task) knows no desired state and
    takes the table's head (or the newest pending state) as its base.

    :param table: the collection's table (see :meth:`open`).
    :param read_only: the deployment's read-only mode; ``None`` reads ``CT_READ_ONLY``.
    :param clock: epoch-ms wall clock.
    :param max_attempts: give up after this many lost races (``None``: never).
    """

    def __init__(
        self,
        table: Table,
        *,
        read_only: bool | None = None,
        clock: Callable[[], int] = now_ms,
        max_attempts: int | None = None,
    ) -> None:
        self._table = table
        self._name = table_name(table)
        self._schema = arrow_schema(table)
        self._read_only = read_only
        self._clock = clock
        self._max_attempts = max_attempts
        self._desired: RowBag | None = None

    @classmethod
    def open(cls, catalog: Catalog, name: str, **kwargs: Any) -> DifferentialCollection:
        """The writer of the registered differential collection ``name``."""
        return cls(load_collection(catalog, name, CollectionKind.DIFFERENTIAL), **kwargs)

    @property
    def name(self) -> str:
        return self._name

    @property
    def table(self) -> Table:
        return self._table

    def writable(self) -> bool:
        self._table.refresh()
        return not is_read_only(self._table, self._read_only)

    # -- stating the desired contents ---------------------------------------------------------
    def replace(self, rows: Any) -> SyncResult:
        """Make the collection hold exactly ``rows`` (a multiset; order is irrelevant)."""
        desired = RowBag.of(to_arrow(rows, self._schema, what="desired rows"))
        return self._state(desired, superseded=self._pending_now())

    def update(self, *, retract: Any = (), insert: Any = ()) -> SyncResult:
        """Retract ``retract`` and insert ``insert`` (one atomic change).

        Every retracted row must be in the desired state (the remembered one,
        the newest pending one, or else the table's head), else
        :class:`~airflow_provider_ct.exceptions.RetractionError`.
        """
        ins, _ = signed_bags(insert, self._schema)
        ret, _ = signed_bags(retract, self._schema)
        pending = self._pending_now()
        base: RowBag | None = self._desired
        if pending:
            base = RowBag.of(read_pending(self._table, pending[-1]))
        if base is not None:
            if not base.contains(ret):
                raise RetractionError(
                    f"collection {self._name}: the desired state does not hold the row(s) to "
                    f"retract, e.g. {base.missing(ret)[:3]}"
                )
            return self._state(base.minus(ret).plus(ins), superseded=pending)
        if not self.writable():
            head = contents(read_live_files(self._table))
            if not head.contains(ret):
                raise RetractionError(
                    f"collection {self._name} does not hold the row(s) to retract, "
                    f"e.g. {head.missing(ret)[:3]}"
                )
            return self._keep_pending(head.minus(ret).plus(ins))
        return self._correct(lambda head: _apply_delta(self._name, head, ret, ins))

    def sync(self) -> SyncResult:
        """Land the newest pending desired state, or re-impose the remembered one.

        Does nothing in read-only mode (status ``pending`` if a state waits)
        and nothing without a desired state (status ``in-sync``).
        """
        pending = self._pending_now()
        if not self.writable():
            upper = Timeline.of(self._table).upper
            return SyncResult(self._name, PENDING if pending else IN_SYNC, upper)
        if pending:
            desired = RowBag.of(read_pending(self._table, pending[-1]))
            result = self._correct(lambda head: desired)
            drop_pending(self._table, pending)
            log.info(
                "landed the pending desired state of %s stated at %d (%s)",
                self._name,
                pending[-1].stated_at_ms,
                result.status,
            )
            return result
        if self._desired is not None:
            remembered = self._desired
            return self._correct(lambda head: remembered)
        return SyncResult(self._name, IN_SYNC, Timeline.of(self._table).upper)

    def desired(self) -> pa.Table:
        """The desired contents as this object knows them (remembered, pending or head)."""
        pending = self._pending_now()
        if pending:
            return read_pending(self._table, pending[-1])
        if self._desired is not None:
            return self._desired.to_arrow(self._schema)
        return contents(read_live_files(self._table)).to_arrow(self._schema)

    def pending(self) -> list[PendingDesired]:
        return self._pending_now()

    # -- internals ---------------------------------------------------------------------------
    def _pending_now(self) -> list[PendingDesired]:
        return list_pending(self._table)

    def _state(self, desired: RowBag, superseded: list[PendingDesired]) -> SyncResult:
        if not self.writable():
            return self._keep_pending(desired)
        result = self._correct(lambda head: desired)
        # Pending states stated before this write are older than it: superseded.
        drop_pending(self._table, superseded)
        return result

    def _keep_pending(self, desired: RowBag) -> SyncResult:
        self._desired = desired
        saved = write_pending(self._table, desired.to_arrow(self._schema), self._clock())
        log.info(
            "collection %s is read-only: desired state (%d row(s)) kept as %s until writes "
            "are allowed",
            self._name,
            len(desired),
            saved.path,
        )
        return SyncResult(self._name, PENDING, Timeline.of(self._table).upper)

    def _correct(self, want: Callable[[RowBag], RowBag]) -> SyncResult:
        """Commit ``want(head) - head`` against the current head, re-syncing after lost races.

        A commit whose outcome was unknown may have landed: its batch id is
        looked for on ``main`` first, so that the result says where it landed
        instead of "in-sync" (the re-read head would already be the desired one).
        """
        table = self._table
        attempt = 0
        unknown: list[tuple[str, StagedChange, RowBag]] = []
        lost: _LostCorrection | None = None
        try:
            while True:
                attempt += 1
                table.refresh()
                timeline = Timeline.of(table)
                for batch_id, change, desired in unknown:
                    found = landing_of(timeline, batch_id).entry
                    if found is not None and found.time is not None:
                        return self._landed(
                            batch_id, change, desired, found.time, timeline, attempt
                        )
                if timeline.upper.is_empty:
                    raise CollectionClosedError(f"collection {self._name} is closed")
                kept, lost = lost, None
                try:
                    staged = self._staged(want, timeline, attempt, kept)
                except FileNotFoundError as exc:  # the head we loaded was replaced and expired
                    log.info("re-reading %s: a file of its old head is gone (%s)", self._name, exc)
                    backoff(attempt)
                    continue
                if isinstance(staged, SyncResult):
                    return staged
                batch_id, desired, change = staged
                try:
                    result, time = append_change_now(
                        table, timeline, batch_id, change, self._clock()
                    )
                except CommitStateUnknownError as exc:
                    log.warning("correction of %s: %s; checking again", self._name, exc)
                    unknown.append((batch_id, change, desired))
                    backoff(attempt)
                    continue
                if result.landed:
                    return self._landed(batch_id, change, desired, time, result, attempt)
                lost = _LostCorrection(batch_id, desired, LostChange.of(table, timeline, change))
                log.debug(
                    "correction of %s lost (%s); re-syncing to the table", self._name, result.reason
                )
                if self._max_attempts is not None and attempt >= self._max_attempts:
                    raise CommitError(
                        f"correction of {self._name} lost {attempt} races in a row; giving up"
                    )
                backoff(attempt)
        finally:
            if lost is not None:
                lost.change.discard()

    def _staged(
        self,
        want: Callable[[RowBag], RowBag],
        timeline: Timeline,
        attempt: int,
        lost: _LostCorrection | None,
    ) -> tuple[str, RowBag, StagedChange] | SyncResult:
        """The correction to commit against ``timeline``'s head: batch id, desired rows, files.

        The last attempt's, when it lost to commits that left the same files
        (:class:`LostChange`: a tick); otherwise its files are deleted and the
        head is read again. A :class:`SyncResult` when there is nothing to
        commit: the head is already desired, or writes were switched off.
        """
        table = self._table
        if lost is not None:
            if lost.change.applies_at(timeline) and not is_read_only(table, self._read_only):
                return lost.batch_id, lost.desired, lost.change.change
            lost.change.discard()
        files = read_live_files(table)
        head = contents(files)
        desired = want(head)
        if is_read_only(table, self._read_only):  # switched off while we retried
            return self._keep_pending(desired)
        inserts, retracts = desired.minus(head), head.minus(desired)
        if not inserts and not retracts:
            self._desired = desired
            return SyncResult(self._name, IN_SYNC, timeline.upper, attempts=attempt)
        batch_id = f"desired-{uuid.uuid4().hex}"
        return batch_id, desired, stage_change(table, batch_id, files, inserts, retracts)

    def _landed(
        self,
        batch_id: str,
        change: StagedChange,
        desired: RowBag,
        time: int,
        after: Timeline | AppendResult,
        attempt: int,
    ) -> SyncResult:
        self._desired = desired
        log.info(
            "corrected %s at %d: +%d -%d row(s) (attempt %d)",
            self._name,
            time,
            change.inserted,
            change.retracted,
            attempt,
        )
        return SyncResult(
            self._name,
            LANDED,
            after.upper,
            time=time,
            inserted=change.inserted,
            retracted=change.retracted,
            attempts=attempt,
            batch_id=batch_id,
        )


def _apply_delta(name: str, head: RowBag, retract: RowBag, insert: RowBag) -> RowBag:
    if not head.contains(retract):
        raise RetractionError(
            f"collection {name} does not hold the row(s) to retract, e.g. "
            f"{head.missing(retract)[:3]}"
        )
    return head.minus(retract).plus(insert)
