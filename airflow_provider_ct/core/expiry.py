"""Which files expired snapshots leave behind, and deleting them: one owner for every table.

Iceberg's snapshot expiry removes snapshots from the metadata; the files
only they referenced stay in storage until someone deletes them. The
collections' expiry (``collections/expiry.py``) and a view's state table
(``ivm/state/table.py``) both expire snapshots of tables the product keeps;
both delete through here, so "a file is unreachable" is decided in one
place: referenced (by an entry of any status) by an expired snapshot and by
no retained one.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyiceberg.io import FileIO
    from pyiceberg.table import Table
    from pyiceberg.table.snapshots import Snapshot

log = logging.getLogger(__name__)


def files_of(
    snapshot: Snapshot, io: FileIO, cache: dict[str, set[str]], *, live_only: bool = False
) -> set[str]:
    """Every file a snapshot references: manifest list, manifests, data and delete files.

    ``cache`` maps a manifest's path to the files its entries name (manifests
    never change), shared across the calls of one expiry (and one ``live_only``).

    :param live_only: count only the entries a reader of the snapshot reads, not
        the ``DELETED`` ones that record what the snapshot removed.
    """
    files = {snapshot.manifest_list}
    for manifest in snapshot.manifests(io):
        files.add(manifest.manifest_path)
        if manifest.manifest_path not in cache:
            entries = manifest.fetch_manifest_entry(io, discard_deleted=live_only)
            cache[manifest.manifest_path] = {e.data_file.file_path for e in entries}
        files |= cache[manifest.manifest_path]
    return files


def unreachable_files(
    io: FileIO,
    expired: Iterable[Snapshot],
    retained: Iterable[Snapshot],
    *,
    live_only: bool = False,
) -> list[str]:
    """The files ``expired`` snapshots referenced that no ``retained`` one does, sorted.

    :param live_only: see :func:`files_of`. A table whose every snapshot replaces
        all of its files (a view's state table) uses it: the newest snapshot's
        ``DELETED`` entries name the files only the expired ones still read.
    """
    cache: dict[str, set[str]] = {}
    gone: set[str] = set()
    for snapshot in expired:
        gone |= files_of(snapshot, io, cache, live_only=live_only)
    kept: set[str] = set()
    for snapshot in retained:
        kept |= files_of(snapshot, io, cache, live_only=live_only)
    return sorted(gone - kept)


def delete_files(table: Table, paths: Iterable[str]) -> int:
    """Delete files nothing references any more (or that were staged and never committed).

    A missing file is fine (deleted already); another failure is logged and
    skipped: an orphan costs storage, never correctness, and the sweep
    (``core/sweep.py``) finds what stays under a batch folder.
    """
    deleted = 0
    for path in paths:
        try:
            table.io.delete(path)
            deleted += 1
        except FileNotFoundError:
            pass
        except OSError as exc:
            log.warning("could not delete file %s: %s", path, exc)
    return deleted
