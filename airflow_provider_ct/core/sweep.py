"""Sweep what staged batches leave behind, without ever touching a live file.

Writers stage files under ``data/ct_batch=<id>/attempt=<attempt>/`` (before:
``data/ct-batch=<id>/...``, still swept) and a manifest under the staging
root (see :mod:`.staging`). Losers of a race
delete their own files at once; what remains after crashes, killed jobs,
lost appends and retried tasks is removed here, by the maintenance path.

The rules, per manifest (the table refreshed *after* everything was listed):

* its batch is on ``main`` by this attempt, or any of its files is referenced
  by a kept snapshot: it landed; the manifest is dropped, the files are the
  table's;
* its batch is on ``main`` by another attempt: this attempt's files go (each
  checked against every kept snapshot first);
* it *may still land* (its lower is the table's upper and its base is the
  head): kept, whatever its age or state; a compare-and-append of it could be
  in flight, and a writer could still be adding files;
* otherwise it can never land (the upper or the head moved on, and neither
  moves back: rollbacks are refused): its files go.

Files under ``data/ct_batch=*`` (and ``ct-batch=*``) that no manifest accounts for (a crash
before the manifest existed, an unreadable manifest, a collection write that
died before its commit) and half-written manifests go once they are older
than the grace period and no kept snapshot references them.

Why list and read first and refresh after: a writer writes its manifest
before any data file, so every data file listed has a manifest that was
listed too; a manifest read before the refresh whose batch lands after it
had its base as the head at the refresh, so it is classified "may still
land" and kept; and one that landed and was dropped before it was read
landed before the refresh, so its files are in the live set.
"""

from __future__ import annotations

import logging
import posixpath
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import pyarrow.fs as pafs

from airflow_provider_ct.core.frontier import now_ms
from airflow_provider_ct.core.landing import Landing, landing_of
from airflow_provider_ct.core.manifest import StagedBatch, read_manifest
from airflow_provider_ct.core.staging import (
    BATCH_FOLDERS,
    check_batch_paths,
    discard,
    forget,
    list_manifests,
    referenced_files,
    staging_roots,
)
from airflow_provider_ct.core.storage import (
    Properties,
    files_under,
    filesystem,
    io_properties,
    uri_prefix,
)
from airflow_provider_ct.core.timeline import Timeline
from airflow_provider_ct.exceptions import StagingError

if TYPE_CHECKING:
    from pyiceberg.table import Table

log = logging.getLogger(__name__)

#: Default age before a file no manifest accounts for counts as debris.
DEFAULT_GRACE_MS = 3_600_000


@dataclass(frozen=True)
class SweepReport:
    """What one sweep did: batch ids by outcome, and files deleted."""

    landed: tuple[str, ...] = ()
    discarded: tuple[str, ...] = ()
    kept: tuple[str, ...] = ()
    files_deleted: int = 0
    orphans_deleted: int = 0
    skipped: tuple[str, ...] = ()


@dataclass
class _Listing:
    #: ``(uri, info)`` of every file under ``data/ct_batch=*`` and ``data/ct-batch=*``.
    files: list[tuple[str, pafs.FileInfo]]
    manifests: list[str]
    #: ``(uri, info)`` of manifests whose writer died before renaming them.
    half_written: list[tuple[str, pafs.FileInfo]]
    #: The table's FileIO properties (:mod:`.storage`).
    io: dict[str, str]


#: Listings retried when a folder vanishes while it is read (a concurrent discard).
_LIST_TRIES = 5


def _list(table: Table) -> _Listing:
    """Everything staged under the table, listed again if a folder vanishes meanwhile.

    Local listings of a tree that concurrent writers prune (a losing
    attempt's folder is removed at once) can fail with ``FileNotFoundError``
    half-way; the listing is then simply taken again.
    """
    for attempt in range(1, _LIST_TRIES + 1):
        try:
            return _list_once(table)
        except FileNotFoundError as exc:
            if attempt == _LIST_TRIES:
                raise StagingError(
                    f"could not list the staged files of {'.'.join(table.name())}: folders "
                    f"vanished during {_LIST_TRIES} listings ({exc})"
                ) from None
            log.debug("listing staged files again: %s", exc)
    raise AssertionError("unreachable")


def _list_once(table: Table) -> _Listing:
    location = table.location().rstrip("/")
    data = posixpath.join(location, "data")
    io = io_properties(table)
    fs, local = filesystem(data, io)
    prefix = uri_prefix(data, io)
    batch_dirs = [
        prefix + info.path
        for info in fs.get_file_info(pafs.FileSelector(local, allow_not_found=True))
        if info.type == pafs.FileType.Directory
        and info.base_name.startswith(tuple(f"{f}=" for f in BATCH_FOLDERS))
    ]
    files = [(prefix + info.path, info) for d in batch_dirs for info in files_under(d, io)]
    props = table.metadata.properties
    half = [
        (uri_prefix(root, io) + i.path, i)
        for root in staging_roots(location, props, io)
        for i in files_under(root, io)
        if ".json.tmp-" in i.base_name
    ]
    return _Listing(files, list(list_manifests(location, props, io)), half, io)


def _older_than(info: pafs.FileInfo, cutoff_ms: int) -> bool:
    mtime = info.mtime
    return mtime is not None and mtime.timestamp() * 1000 < cutoff_ms


def sweep_staged(
    table: Table,
    *,
    grace_ms: int = DEFAULT_GRACE_MS,
    now: int | None = None,
    keep: Sequence[str] = (),
) -> SweepReport:
    """Remove staged leftovers of ``table`` by the rules in the module docstring.

    :param grace_ms: age before files no manifest accounts for are removed;
        it must exceed the longest time a writer without a manifest (a
        collection write) takes from its first file to its commit.
    :param keep: batch ids to leave alone whatever their state.
    """
    cutoff = (now_ms() if now is None else now) - grace_ms
    location, props = table.location(), table.metadata.properties
    listing = _list(table)
    # Read every manifest before the refresh: one that lands (and is dropped)
    # after this point is then seen as live or as "may still land".
    read = [(path, _readable(path, location, props, listing.io)) for path in listing.manifests]
    table.refresh()
    timeline = Timeline.of(table)
    live = referenced_files(table)
    landed: list[str] = []
    discarded: list[str] = []
    kept: list[str] = []
    skipped: list[str] = []
    protected: list[str] = []
    deleted = 0
    for path, batch in read:
        if batch is None:
            skipped.append(path)
            continue
        outcome = _classify(batch, timeline, live, keep)
        if outcome == "kept":
            kept.append(batch.batch_id)
            protected.append(batch.data_dir.rstrip("/") + "/")
        elif outcome == "landed":
            forget(path, listing.io)
            landed.append(batch.batch_id)
        else:
            deleted += discard(
                batch, path, table_location=location, properties=props, live=live, io=listing.io
            )
            discarded.append(batch.batch_id)
    orphans = _sweep_orphans(listing, live, protected, cutoff)
    report = SweepReport(
        tuple(landed), tuple(discarded), tuple(kept), deleted, orphans, tuple(skipped)
    )
    log.info(
        "swept staging of %s: %d landed, %d discarded (%d file(s)), %d kept, %d orphan "
        "file(s) deleted",
        timeline.table,
        len(landed),
        len(discarded),
        deleted,
        len(kept),
        orphans,
    )
    return report


def _readable(
    path: str, location: str, props: dict[str, str], io: Properties
) -> StagedBatch | None:
    try:
        batch = read_manifest(path, io)
        check_batch_paths(batch, location, props, path, io)
    except StagingError as exc:
        log.warning("skipping staged-batch manifest %s: %s", path, exc)
        return None
    return batch


def _classify(batch: StagedBatch, timeline: Timeline, live: set[str], keep: Sequence[str]) -> str:
    """``kept``, ``landed`` or ``discard`` for one attempt's manifest (see :mod:`.landing`)."""
    if batch.batch_id in keep:
        return "kept"
    landed = landing_of(
        timeline,
        batch.batch_id,
        attempt=batch.attempt,
        files_live=lambda: any(f in live for f in batch.staged_files),
    )
    if landed.landing in (Landing.MINE, Landing.FILES_LIVE):
        return "landed"
    if landed.landing is Landing.OTHER_ATTEMPT:
        return "discard"  # ours are checked against `live` before any delete
    if batch.lower == timeline.upper and batch.base_snapshot_id == timeline.head_snapshot_id:
        return "kept"  # may still land: an append of it could be in flight
    return "discard"


def _sweep_orphans(listing: _Listing, live: set[str], protected: list[str], cutoff_ms: int) -> int:
    """Delete files no manifest protects and no snapshot references, older than the cutoff.

    A half-written manifest of a live writer deleted here makes that
    writer's rename fail, and it writes the manifest again
    (:func:`~airflow_provider_ct.core.manifest.write_manifest`).
    """
    deleted = 0
    for uri, info in [*listing.files, *listing.half_written]:
        if uri in live or any(uri.startswith(p) for p in protected):
            continue
        if not _older_than(info, cutoff_ms):
            continue
        fs, local = filesystem(uri, listing.io)
        try:
            fs.delete_file(local)
        except FileNotFoundError:
            continue  # deleted by a discard above
        deleted += 1
    return deleted
