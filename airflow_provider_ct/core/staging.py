"""Staged batches: files written for a batch before it is appended.

A writer (the Spark job, or a PyArrow writer for small collections) puts the
Parquet files of one batch under the table location, in a folder of their
own, and describes them in a JSON manifest. Nothing is visible to readers
until :func:`~airflow_provider_ct.core.commit.compare_and_append` registers the
files. Layout::

    <table>/data/ct_batch=<batch_id>/attempt=<attempt>/...   one write attempt's files
    <staging root>/<batch_id>.attempt-<attempt>.json          that attempt's manifest

The staging root is ``<table>/ct-staging`` unless the table's
``ct.staging-dir`` names another folder inside the table, or the catalog
connection's ``ct.staging-root`` names a location elsewhere (an ordinary
bucket beside a *table bucket* that only accepts Iceberg's own layout:
:func:`staging_root`). Folder names under ``data/`` are identifiers or
``identifier=value`` (what table buckets accept); tables staged before that
used ``data/ct-batch=<id>/``, which is still read, swept and landed
(:data:`LEGACY_BATCH_FOLDER`).

Every *attempt* at a batch (a retried task, a zombie worker, a Spark job that
outlived its Airflow task) stages under a folder of its own. Two attempts of
one description therefore never share a file: the one that lands keeps its
files, the other one's are removed, and nothing a landed batch references is
ever overwritten or deleted.

The manifest is written twice: first with ``state = "writing"`` before any
data file, then with ``state = "staged"`` once every file is complete; only a
``staged`` manifest can be appended. So a crashed writer always leaves a
manifest behind that names its folder, and :func:`sweep_staged` (the
maintenance path) can find and remove the debris.

Every path read from a manifest, an XCom or the ``ct.staging-dir`` table
property is checked to stay inside the table's location before anything is
deleted or committed (:func:`check_batch_paths`).
"""

from __future__ import annotations

import dataclasses
import logging
import os
import posixpath
import uuid
from collections.abc import Iterable, Iterator, Mapping
from typing import TYPE_CHECKING, Any

import pyarrow.fs as pafs

from airflow_provider_ct.core.faults import failpoint
from airflow_provider_ct.core.frontier import now_ms
from airflow_provider_ct.core.ids import check_id as _check_id
from airflow_provider_ct.core.keys import TableKeys
from airflow_provider_ct.core.manifest import (
    STATE_STAGED,
    STATE_WRITING,
    StagedBatch,
    StagedTime,
    manifest_summary,
    write_manifest,
)
from airflow_provider_ct.core.storage import (
    Properties,
    files_under,
    filesystem,
    io_properties,
    uri_prefix,
)
from airflow_provider_ct.exceptions import StagingError

if TYPE_CHECKING:
    from pyiceberg.table import Table

    from airflow_provider_ct.core.description import BatchDescription
    from airflow_provider_ct.core.schema_change import SchemaChange

log = logging.getLogger(__name__)


# -- locations ---------------------------------------------------------------
def check_id(value: Any, what: str) -> str:
    """A batch or attempt id that is safe as one path segment (:mod:`.ids`), or StagingError."""
    return _check_id(value, what, StagingError)


def _relative_folder(value: str) -> str:
    """The ``ct.staging-dir`` property, refused unless a plain relative folder."""
    parts = value.split("/")
    if (
        not value
        or value.startswith("/")
        or "\\" in value
        or ":" in value
        or any(p in ("", ".", "..") for p in parts)
    ):
        raise StagingError(
            f"table property {TableKeys.STAGING_DIR}={value!r} must be a relative folder "
            "inside the table location (no '..', no absolute path, no scheme)"
        )
    return value


def _absolute_root(value: str) -> str:
    """The ``ct.staging-root`` setting: an absolute path or a URI with a scheme, no ``..``."""
    scheme_less = value.split("://", 1)[-1]
    if (
        not ("://" in value or value.startswith("/"))
        or "\\" in value
        or any(p in (".", "..") for p in scheme_less.split("/"))
        or not scheme_less.strip("/")
    ):
        raise StagingError(
            f"{TableKeys.STAGING_ROOT}={value!r} must be an absolute location (s3://bucket/folder "
            "or /path), without '.' or '..' segments"
        )
    return value.rstrip("/")


def staging_root(
    table_location: str,
    properties: Mapping[str, str] | None = None,
    io: Properties | None = None,
) -> str:
    """Where the manifests of a table's staged batches live.

    In order: the table's ``ct.staging-dir`` (a folder inside the table);
    else the ``ct.staging-root`` of the catalog connection (``io``, the
    table's FileIO properties) or of the table, followed by the table's
    location without its scheme (so tables never share a folder); else
    ``<table>/ct-staging``. A *table bucket* (SeaweedFS's or S3 Tables'
    REST catalog) refuses JSON beside the table, so deployments on one point
    ``ct.staging-root`` at an ordinary bucket (docs/deployment.md).
    """
    props = properties or {}
    location = table_location.rstrip("/")
    if TableKeys.STAGING_DIR in props:
        return posixpath.join(location, _relative_folder(props[TableKeys.STAGING_DIR]))
    root = (io or {}).get(TableKeys.STAGING_ROOT) or props.get(TableKeys.STAGING_ROOT)
    if root:
        return posixpath.join(_absolute_root(root), location.split("://", 1)[-1].lstrip("/"))
    return posixpath.join(location, TableKeys.STAGING_DIR_DEFAULT)


def staging_roots(
    table_location: str,
    properties: Mapping[str, str] | None = None,
    io: Properties | None = None,
) -> list[str]:
    """The staging root, then the table's default one if that differs.

    Manifests written before ``ct.staging-root`` was set stay under
    ``<table>/ct-staging``: they are still appended and swept.
    """
    root = staging_root(table_location, properties, io)
    default = posixpath.join(table_location.rstrip("/"), TableKeys.STAGING_DIR_DEFAULT)
    return [root] if root == default else [root, default]


def manifest_path(
    table_location: str,
    batch_id: str,
    properties: Mapping[str, str] | None = None,
    attempt: str = "",
    io: Properties | None = None,
) -> str:
    name = check_id(batch_id, "batch id")
    if attempt:
        name = f"{name}.attempt-{check_id(attempt, 'attempt id')}"
    return posixpath.join(staging_root(table_location, properties, io), f"{name}.json")


#: The folder under ``data/`` of one batch's attempts: ``ct_batch=<id>``, an
#: identifier-named partition-style folder, as table buckets require.
BATCH_FOLDER = "ct_batch"
#: Its name before: still read, swept and landed (refused by table buckets).
LEGACY_BATCH_FOLDER = "ct-batch"
BATCH_FOLDERS = (BATCH_FOLDER, LEGACY_BATCH_FOLDER)


def batch_data_dir(
    table_location: str, batch_id: str, attempt: str = "", *, folder: str = BATCH_FOLDER
) -> str:
    """The folder a batch's files go to; with ``attempt``, that attempt's own folder.

    :param folder: :data:`BATCH_FOLDER`, or :data:`LEGACY_BATCH_FOLDER` for
        batches staged before (checking and sweeping them).
    """
    path = posixpath.join(
        table_location.rstrip("/"), "data", f"{folder}={check_id(batch_id, 'batch id')}"
    )
    if not attempt:
        return path
    return posixpath.join(path, f"attempt={check_id(attempt, 'attempt id')}")


def new_attempt_id() -> str:
    """A fresh id for one write attempt: never shared by two attempts."""
    return f"{now_ms()}-{uuid.uuid4().hex[:12]}"


def inside(path: str, folder: str) -> bool:
    """Whether ``path`` names something strictly inside ``folder`` (no ``..`` tricks)."""
    if any(p in (".", "..") for p in path.split("/")):
        return False
    return path.startswith(folder.rstrip("/") + "/")


def check_batch_paths(
    batch: StagedBatch,
    table_location: str,
    properties: Mapping[str, str] | None = None,
    manifest: str | None = None,
    io: Properties | None = None,
) -> None:
    """Refuse a manifest whose paths leave the table's location (before any delete or commit).

    The manifest path (from XCom), its ``data_dir`` and every staged file must
    be exactly where this package puts them for the batch id and attempt the
    manifest names: an edited or hostile manifest can neither make
    :func:`discard` delete a folder elsewhere nor make a commit register
    files from outside the table.
    """
    check_id(batch.batch_id, "batch id")
    data_dir = batch.data_dir.rstrip("/")
    dirs = [
        batch_data_dir(table_location, batch.batch_id, batch.attempt, folder=f)
        for f in BATCH_FOLDERS
    ]
    if data_dir not in dirs:
        raise StagingError(
            f"staged batch {batch.batch_id}: data_dir {batch.data_dir!r} is not its folder "
            f"{dirs[0]!r} under the table location"
        )
    outside = [f for f in batch.staged_files if not inside(f, data_dir)]
    if outside:
        raise StagingError(
            f"staged batch {batch.batch_id}: {len(outside)} staged file(s) lie outside its "
            f"folder {data_dir}, e.g. {outside[0]!r}"
        )
    if manifest is not None:
        name = posixpath.basename(manifest_path(table_location, batch.batch_id, {}, batch.attempt))
        roots = staging_roots(table_location, properties, io)
        if manifest not in [posixpath.join(root, name) for root in roots]:
            raise StagingError(
                f"manifest path {manifest!r} is not where batch {batch.batch_id} keeps its "
                f"manifest ({posixpath.join(roots[0], name)!r})"
            )


def list_manifests(
    table_location: str, properties: Mapping[str, str] | None = None, io: Properties | None = None
) -> Iterator[str]:
    """Every manifest of the table, in each of its staging roots (:func:`staging_roots`)."""
    for root in staging_roots(table_location, properties, io):
        fs, local = filesystem(root, io)
        selector = pafs.FileSelector(local, allow_not_found=True, recursive=False)
        prefix = uri_prefix(root, io)
        for info in fs.get_file_info(selector):
            if info.type == pafs.FileType.File and info.path.endswith(".json"):
                yield prefix + info.path


def discard(
    batch: StagedBatch,
    manifest: str | None = None,
    *,
    table_location: str,
    properties: Mapping[str, str] | None = None,
    live: set[str] | None = None,
    io: Properties | None = None,
) -> int:
    """Delete one attempt's staged files (and its manifest). Returns files deleted.

    Only call this for an attempt known not to be on the table. Its paths are
    checked to lie in its own folder under ``table_location`` first. Files in
    ``live`` (referenced by a snapshot) are never deleted, which matters for
    manifests written before attempts had folders of their own.

    :param io: the catalog's FileIO properties (:mod:`.storage`).
    """
    check_batch_paths(batch, table_location, properties, manifest, io)
    fs, _ = filesystem(batch.data_dir, io)
    prefix = uri_prefix(batch.data_dir, io)
    deleted = 0
    for info in files_under(batch.data_dir, io):
        if not batch.attempt and "/attempt=" in info.path[len(batch.data_dir) - len(prefix) :]:
            continue  # an old-style manifest: its folder holds newer attempts' folders
        if live is not None and prefix + info.path in live:
            continue
        try:
            fs.delete_file(info.path)
        except FileNotFoundError:
            continue  # a concurrent sweep got there first
        deleted += 1
    if batch.attempt and live is None:
        _delete_if_exists(batch.data_dir, directory=True, io=io)
    else:
        prune_empty_dirs(batch.data_dir, io)
    if manifest is not None:
        _delete_if_exists(manifest, io=io)
    log.info(
        "discarded staged batch %s attempt %s (%d file(s))",
        batch.batch_id,
        batch.attempt or "-",
        deleted,
    )
    return deleted


def prune_empty_dirs(uri: str, io: Properties | None = None) -> None:
    """Remove empty folders at and below ``uri`` on a local filesystem.

    ``rmdir`` only ever removes an empty folder, so a writer that puts a file
    into one meanwhile keeps it (a recursive delete could take its file).
    Object stores have no folders: nothing to do there.
    """
    fs, local = filesystem(uri, io)
    if not isinstance(fs, pafs.LocalFileSystem):
        return
    infos = fs.get_file_info(pafs.FileSelector(local, allow_not_found=True, recursive=True))
    dirs = sorted((i.path for i in infos if i.type == pafs.FileType.Directory), reverse=True)
    for folder in [*dirs, local]:
        try:
            os.rmdir(folder)
        except OSError:
            continue  # not empty (or gone): keep it


def _delete_if_exists(uri: str, *, directory: bool = False, io: Properties | None = None) -> None:
    fs, local = filesystem(uri, io)
    kind = fs.get_file_info(local).type
    try:
        if directory and kind == pafs.FileType.Directory:
            fs.delete_dir(local)
        elif not directory and kind == pafs.FileType.File:
            fs.delete_file(local)
    except FileNotFoundError:
        pass  # deleted concurrently: the outcome wanted


def forget(manifest: str, io: Properties | None = None) -> None:
    """Drop the manifest of a batch that landed (its data files now belong to the table)."""
    _delete_if_exists(manifest, io=io)


def batch_files_live(table: Table, batch_id: str) -> bool:
    """Whether a kept snapshot references a file staged for ``batch_id`` (by any attempt).

    Snapshot expiry can remove the snapshot a batch landed in while its files
    stay live in later ones: the batch is still on the table, and a retried
    append must say so. (A batch that staged no file leaves no such trace.)
    """
    folders = tuple(
        batch_data_dir(table.location(), batch_id, folder=f) + "/" for f in BATCH_FOLDERS
    )
    return any(path.startswith(folders) for path in referenced_files(table))


def referenced_files(table: Table, snapshots: Iterable[Any] | None = None) -> set[str]:
    """Every data and delete file some snapshot references (default: every kept snapshot).

    Each manifest is read once, however many snapshots share it.
    """
    chosen = table.metadata.snapshots if snapshots is None else snapshots
    seen: set[str] = set()
    files: set[str] = set()
    for snapshot in chosen:
        for manifest in snapshot.manifests(io=table.io):
            if manifest.manifest_path in seen:
                continue
            seen.add(manifest.manifest_path)
            for entry in manifest.fetch_manifest_entry(io=table.io, discard_deleted=True):
                files.add(entry.data_file.file_path)
    return files


# -- the life of one staged batch ------------------------------------------------
def outdated_reason(table: Table | None, description: BatchDescription) -> str | None:
    """Why a description can no longer be written (its base is not the head), or None."""
    head = None if table is None else table.metadata.current_snapshot()
    head_id = None if head is None else head.snapshot_id
    if head_id == description.base_snapshot_id:
        return None
    return (
        f"target {description.target} moved on: head is {head_id}, the description was "
        f"minted against {description.base_snapshot_id}; staging nothing"
    )


def begin_batch(
    table: Table,
    description: BatchDescription,
    *,
    summary: Mapping[str, str] | None = None,
    schema_change: SchemaChange | None = None,
) -> tuple[StagedBatch, str]:
    """Write the write-ahead manifest of a new attempt at a description's batch.

    Each call is a new attempt with a folder of its own, so a retried or
    zombie writer never touches another attempt's files. Written before any
    data file, so a crashed writer leaves a findable folder.

    :param summary: snapshot-summary entries for the append to record (the
        query hash); only :data:`MANIFEST_SUMMARY_KEYS`.
    :param schema_change: the schema the files are staged under, for the
        append to commit with the batch (:mod:`.schema_change`).
    """
    try:
        checked = manifest_summary(dict(summary or {}))
    except ValueError as exc:
        raise StagingError(f"batch {description.id}: {exc}") from None
    attempt = new_attempt_id()
    batch = StagedBatch(
        batch_id=check_id(description.id, "description id"),
        target=description.target,
        lower=description.lower,
        upper=description.upper,
        base_snapshot_id=description.base_snapshot_id,
        data_dir=batch_data_dir(table.location(), description.id, attempt),
        description=description.to_json(),
        inputs=dict(description.inputs),
        state=STATE_WRITING,
        created_at_ms=now_ms(),
        attempt=attempt,
        summary=checked,
        schema_change=schema_change,
    )
    io = io_properties(table)
    path = manifest_path(table.location(), description.id, table.metadata.properties, attempt, io)
    write_manifest(batch, path, io)
    failpoint("staging.after-begin")
    return batch, path


def finish_batch(
    batch: StagedBatch, path: str, times: Iterable[StagedTime], *, io: Properties | None = None
) -> StagedBatch:
    """Record the batch's staged files; from now on it can be appended.

    :param io: the table's FileIO properties (:func:`~.storage.io_properties`).
    """
    staged = dataclasses.replace(batch, times=tuple(times), state=STATE_STAGED)
    failpoint("staging.before-finish")
    write_manifest(staged, path, io)
    return staged
