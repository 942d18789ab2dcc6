"""Append-only collections: blind writes that always land, batched.

A blind write is a list of rows with diffs (``+1`` inserts a copy, ``-1``
retracts one) that does not depend on what the collection holds. It lands at
*some* time ``t = max(now, upper)`` with one compare-and-append that moves
the upper to ``t + 1``. Losing the race (a tick or another writer moved the
upper first) is not an error: the batch is retried at a new time (staged
again only when the table's files changed meanwhile, which a tick does not),
so contention never reaches the caller. Only read-only mode
(:class:`~airflow_provider_ct.exceptions.ReadOnlyError`), a closed collection
(:class:`~airflow_provider_ct.exceptions.CollectionClosedError`) and a
retraction of a row the collection does not hold
(:class:`~airflow_provider_ct.exceptions.RetractionError`) are refused.

Writes arriving close together are batched: one writer thread per
:class:`AppendOnlyCollection` commits everything queued since its last
commit, and commits at most once per ``batch_interval_ms``. A retried batch
keeps its batch id, so a commit whose outcome was unknown is recognised on
``main`` instead of being written twice.
"""

from __future__ import annotations

import logging
import queue
import threading
import time as _time
import uuid
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from airflow_provider_ct.collections.registry import (
    CollectionKind,
    backoff,
    collection_read_only,
    deployment_read_only,
    load_collection,
    table_name,
)
from airflow_provider_ct.collections.rows import (
    LiveFile,
    LostChange,
    RowBag,
    StagedChange,
    append_change_now,
    arrow_schema,
    contents,
    read_live_files,
    signed_bags,
    stage_change,
)
from airflow_provider_ct.core.frontier import Frontier, now_ms
from airflow_provider_ct.core.landing import landing_of
from airflow_provider_ct.core.timeline import Timeline
from airflow_provider_ct.exceptions import (
    CollectionClosedError,
    CollectionError,
    CommitError,
    CommitStateUnknownError,
    ReadOnlyError,
    RetractionError,
)

if TYPE_CHECKING:
    from pyiceberg.catalog import Catalog
    from pyiceberg.table import Table

log = logging.getLogger(__name__)

#: Default: at most one commit per second per writer (Materialize's default
#: batch duration for storage-managed collections is of that order).
DEFAULT_BATCH_INTERVAL_MS = 1_000


@dataclass(frozen=True)
class WriteReceipt:
    """Where one blind write landed.

    ``time`` is the logical time the rows belong to (``None`` when the write's
    rows cancelled out and nothing had to be committed); ``upper`` is the
    collection's upper right after; ``batched_with`` counts the writes that
    shared the commit.
    """

    collection: str
    batch_id: str
    time: int | None
    upper: Frontier
    inserted: int
    retracted: int
    attempts: int
    batched_with: int

    def to_json(self) -> dict[str, Any]:
        return {
            "collection": self.collection,
            "batch_id": self.batch_id,
            "time": self.time,
            "upper": self.upper.to_json(),
            "inserted": self.inserted,
            "retracted": self.retracted,
            "attempts": self.attempts,
            "batched_with": self.batched_with,
        }


@dataclass
class _Request:
    inserts: RowBag
    retracts: RowBag
    future: Future[WriteReceipt]


_STOP = object()

#: A lost attempt: its requests and its staged change.
_Lost = tuple[list[_Request], LostChange]


class AppendOnlyCollection:
    """The writer of one append-only collection in this process.

    Thread-safe: call :meth:`blind_write` (waits) or :meth:`submit` (returns
    a future) from any thread; one background thread batches and commits.
    Use as a context manager, or call :meth:`shutdown`, to flush and stop it.

    :param table: the collection's table (see :meth:`open`); owned by the writer.
    :param batch_interval_ms: at most one commit per this interval.
    :param read_only: the deployment's read-only mode; ``None`` reads
        ``CT_READ_ONLY`` at every write. The collection's own switch is the
        table property ``ct.collection.read-only``.
    :param clock: epoch-ms wall clock (tests pass their own).
    :param max_attempts: give up after this many lost races (``None``: never;
        contention is always transient because the upper only moves forward).
    """

    def __init__(
        self,
        table: Table,
        *,
        batch_interval_ms: int = DEFAULT_BATCH_INTERVAL_MS,
        read_only: bool | None = None,
        clock: Callable[[], int] = now_ms,
        max_attempts: int | None = None,
    ) -> None:
        self._table = table
        self._name = table_name(table)
        self._schema = arrow_schema(table)
        self._interval_s = max(0, batch_interval_ms) / 1000
        self._read_only = read_only
        self._clock = clock
        self._max_attempts = max_attempts
        self._queue: queue.Queue[Any] = queue.Queue()
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._stopping = threading.Event()
        # What the writer thread last saw; lets submit() refuse early.
        self._collection_read_only = collection_read_only(table)
        self._closed = False

    @classmethod
    def open(cls, catalog: Catalog, name: str, **kwargs: Any) -> AppendOnlyCollection:
        """The writer of the registered append-only collection ``name``."""
        return cls(load_collection(catalog, name, CollectionKind.APPEND_ONLY), **kwargs)

    @property
    def name(self) -> str:
        return self._name

    def __enter__(self) -> AppendOnlyCollection:
        return self

    def __exit__(self, *exc: object) -> None:
        self.shutdown()

    # -- writing -------------------------------------------------------------------------
    def _read_only_now(self) -> bool:
        deployment = deployment_read_only() if self._read_only is None else self._read_only
        return deployment or self._collection_read_only

    def submit(self, rows: Any, diffs: Sequence[int] | None = None) -> Future[WriteReceipt]:
        """Queue a blind write; the future resolves once it landed.

        Bad rows, read-only mode and a closed collection are refused here,
        before anything is queued.
        """
        if self._read_only_now():
            raise ReadOnlyError(
                f"collection {self._name} is read-only: blind writes are refused (they would "
                "have no time to land at); retry once writes are allowed"
            )
        if self._closed:
            raise CollectionClosedError(f"collection {self._name} is closed")
        inserts, retracts = signed_bags(rows, self._schema, diffs)
        request = _Request(inserts, retracts, Future())
        with self._lock:
            if self._stopping.is_set():
                raise CollectionError(f"the writer of {self._name} is shut down")
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._run, name=f"ct-append-only-{self._name}", daemon=True
                )
                self._thread.start()
            self._queue.put(request)
        return request.future

    def blind_write(
        self, rows: Any, diffs: Sequence[int] | None = None, *, timeout: float | None = None
    ) -> WriteReceipt:
        """Write ``rows`` (with ``diffs``, default all ``+1``) and wait until they landed."""
        return self.submit(rows, diffs).result(timeout)

    def shutdown(self, *, wait: bool = True) -> None:
        """Commit what is queued, then stop the writer thread."""
        with self._lock:
            if self._stopping.is_set():
                thread = self._thread
            else:
                self._stopping.set()
                self._queue.put(_STOP)
                thread = self._thread
        if wait and thread is not None:
            thread.join()

    # -- the writer thread ------------------------------------------------------------------
    def _run(self) -> None:
        while True:
            item = self._queue.get()
            if item is _STOP:
                return
            batch = [item]
            stop = False
            while True:
                try:
                    more = self._queue.get_nowait()
                except queue.Empty:
                    break
                if more is _STOP:
                    stop = True
                    break
                batch.append(more)
            started = _time.monotonic()
            try:
                self._land(batch)
            except BaseException as exc:  # never leave a caller waiting forever
                log.exception("blind write to %s failed", self._name)
                for request in batch:
                    if not request.future.done():
                        request.future.set_exception(exc)
            if stop:
                return
            # Rate limit: the next commit no sooner than one interval after this
            # one started; writes arriving meanwhile join the next batch. A
            # shutdown flushes at once.
            remaining = self._interval_s - (_time.monotonic() - started)
            if remaining > 0:
                self._stopping.wait(remaining)

    def _fail(self, requests: Sequence[_Request], exc: Exception) -> None:
        for request in requests:
            if not request.future.done():
                request.future.set_exception(exc)

    def _land(self, batch: list[_Request]) -> None:
        """Commit ``batch`` at some time >= the upper, retrying at a new time when we lose.

        One batch id for every attempt: an attempt whose outcome was unknown
        is then recognised on ``main`` by the next one instead of landing twice.
        """
        batch_id = f"blind-{uuid.uuid4().hex}"
        in_flight: list[_Request] = []
        lost: _Lost | None = None
        attempt = 0
        try:
            while True:
                attempt += 1
                timeline = self._read_head(batch, batch_id, in_flight, attempt)
                if timeline is None:
                    return
                kept, lost = lost, None
                try:
                    staged = self._staged(batch, batch_id, timeline, attempt, kept)
                except FileNotFoundError as exc:  # the head we loaded was replaced and expired
                    log.info("re-reading %s: a file of its old head is gone (%s)", self._name, exc)
                    backoff(attempt)
                    continue
                if staged is None:
                    return
                accepted, change = staged
                try:
                    result, time = append_change_now(
                        self._table, timeline, batch_id, change, self._clock()
                    )
                except CommitStateUnknownError as exc:
                    log.warning(
                        "blind write %s to %s: %s; checking again", batch_id, self._name, exc
                    )
                    in_flight = accepted
                    backoff(attempt)
                    continue
                if result.landed:
                    self._resolve(accepted, batch_id, time, result.upper, attempt, len(batch))
                    return
                lost = (accepted, LostChange.of(self._table, timeline, change))
                if self._give_up(accepted, batch_id, timeline, result.reason, attempt):
                    return
                backoff(attempt)
        finally:
            if lost is not None:
                lost[1].discard()

    def _staged(
        self,
        batch: list[_Request],
        batch_id: str,
        timeline: Timeline,
        attempt: int,
        lost: _Lost | None,
    ) -> tuple[list[_Request], StagedChange] | None:
        """The requests to land together and their change, staged against ``timeline``'s head.

        The last attempt's, when it lost to commits that left the same files
        (:class:`LostChange`: a tick); otherwise its files are deleted and the
        head is read again. ``None`` when the batch is settled without a
        commit: every request refused, or their rows cancel out.
        """
        if lost is not None:
            if lost[1].applies_at(timeline):
                return lost[0], lost[1].change
            lost[1].discard()
        pending = [r for r in batch if not r.future.done()]
        files = read_live_files(self._table) if any(r.retracts for r in pending) else []
        accepted, inserts, retracts = self._accept(pending, files)
        if not accepted:
            return None
        if not inserts and not retracts:
            self._resolve(accepted, batch_id, None, timeline.upper, attempt, len(batch))
            return None
        return accepted, stage_change(self._table, batch_id, files, inserts, retracts)

    def _read_head(
        self, batch: list[_Request], batch_id: str, in_flight: list[_Request], attempt: int
    ) -> Timeline | None:
        """The table's timeline now, or ``None`` when the batch is settled without a commit.

        Settled means: an earlier attempt with an unknown outcome did land
        (``in_flight`` get their receipts), or the collection was closed or
        switched to read-only meanwhile (every request fails). The switches
        are remembered so that :meth:`submit` refuses the next write early.
        """
        table = self._table
        table.refresh()
        timeline = Timeline.of(table)
        found = landing_of(timeline, batch_id).entry
        if found is not None:
            self._resolve(in_flight, batch_id, found.time, timeline.upper, attempt, len(batch))
            return None
        self._collection_read_only = collection_read_only(table)
        if timeline.upper.is_empty:
            self._closed = True
            self._fail(batch, CollectionClosedError(f"collection {self._name} is closed"))
            return None
        if self._read_only_now():
            self._fail(
                batch,
                ReadOnlyError(f"collection {self._name} became read-only before the write"),
            )
            return None
        return timeline

    def _accept(
        self, pending: list[_Request], files: list[LiveFile]
    ) -> tuple[list[_Request], RowBag, RowBag]:
        """The requests that can land together, and their net inserts and retractions.

        Requests are applied in queue order to the head's contents (``files``),
        so a retraction may take back a row an earlier request of the same
        batch inserted; one retracting a row that is not there fails alone
        (:class:`~airflow_provider_ct.exceptions.RetractionError`) without
        holding back the others. A row both inserted and retracted within the
        batch cancels out and is not written at all.
        """
        running = contents(files) if files else RowBag()
        accepted: list[_Request] = []
        inserts, retracts = RowBag(), RowBag()
        for request in pending:
            if request.retracts:
                if not running.contains(request.retracts):
                    request.future.set_exception(
                        RetractionError(
                            f"collection {self._name} does not hold the row(s) to retract, "
                            f"e.g. {running.missing(request.retracts)[:3]}"
                        )
                    )
                    continue
                running = running.minus(request.retracts)
            running = running.plus(request.inserts)
            accepted.append(request)
            inserts = inserts.plus(request.inserts)
            retracts = retracts.plus(request.retracts)
        both = inserts.counts & retracts.counts  # inserted and retracted in one batch
        inserts = RowBag(inserts.counts - both, inserts.originals)
        retracts = RowBag(retracts.counts - both, retracts.originals)
        return accepted, inserts, retracts

    def _give_up(
        self,
        accepted: list[_Request],
        batch_id: str,
        timeline: Timeline,
        reason: str,
        attempt: int,
    ) -> bool:
        """After a lost race: True (the requests failed) once ``max_attempts`` races are lost.

        Otherwise the caller backs off and tries again at a new time; losing
        is transient, since the upper only moves forward.
        """
        log.debug(
            "blind write %s to %s lost at upper %s (%s); retrying at a new time",
            batch_id,
            self._name,
            timeline.upper.to_summary(),
            reason,
        )
        if self._max_attempts is None or attempt < self._max_attempts:
            return False
        self._fail(
            accepted,
            CommitError(f"blind write to {self._name} lost {attempt} races in a row; giving up"),
        )
        return True

    def _resolve(
        self,
        requests: Sequence[_Request],
        batch_id: str,
        time: int | None,
        upper: Frontier,
        attempts: int,
        batched: int,
    ) -> None:
        if time is not None:
            log.info(
                "blind write %s to %s landed at %d (%d write(s), attempt %d)",
                batch_id,
                self._name,
                time,
                batched,
                attempts,
            )
        for request in requests:
            if not request.future.done():
                request.future.set_result(
                    WriteReceipt(
                        collection=self._name,
                        batch_id=batch_id,
                        time=time,
                        upper=upper,
                        inserted=len(request.inserts),
                        retracted=len(request.retracts),
                        attempts=attempts,
                        batched_with=batched,
                    )
                )


def blind_write(
    catalog: Catalog,
    name: str,
    rows: Any,
    diffs: Sequence[int] | None = None,
    **kwargs: Any,
) -> WriteReceipt:
    """One blind write from a short-lived process (an Airflow task): write and wait."""
    with AppendOnlyCollection.open(catalog, name, **kwargs) as collection:
        return collection.blind_write(rows, diffs)
