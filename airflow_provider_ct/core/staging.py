"""Staged batches: files written for a batch before it is appended.

A writer (the Spark job, or a PyArrow writer for small collections) puts the
Parquet files of one batch under the table location, in a folder of their
own, and describes them in a JSON manifest. Nothing is visible to readers
until :func:`~airflow_provider_ct.core.commit.compare_and_append` registers the
files. Layout, relative to the table location::

    data/ct-batch=<batch_id>/attempt=<attempt>/...   one write attempt's files
    ct-staging/<batch_id>.attempt-<attempt>.json      that attempt's manifest

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
import itertools
import json
import logging
import os
import posixpath
import uuid
from collections.abc import Collection, Iterable, Iterator, Mapping
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

import pyarrow.fs as pafs

from airflow_provider_ct.core import ids
from airflow_provider_ct.core.commit import AppendResult, TimedChange, compare_and_append
from airflow_provider_ct.core.faults import failpoint
from airflow_provider_ct.core.frontier import Frontier, now_ms
from airflow_provider_ct.core.keys import SummaryKeys, TableKeys
from airflow_provider_ct.core.landing import Landing, landing_of
from airflow_provider_ct.core.timeline import Timeline
from airflow_provider_ct.exceptions import FrontierError, ManifestMissingError, StagingError

if TYPE_CHECKING:
    from pyiceberg.table import Table

    from airflow_provider_ct.core.description import BatchDescription

log = logging.getLogger(__name__)

MANIFEST_FORMAT = 1
STATE_WRITING = "writing"
STATE_STAGED = "staged"
_STATES = (STATE_WRITING, STATE_STAGED)


@dataclass(frozen=True)
class StagedFile:
    path: str
    record_count: int
    size_bytes: int


@dataclass(frozen=True)
class StagedTime:
    """The files that make the contents at ``time`` final."""

    time: int
    add: tuple[StagedFile, ...] = ()
    remove: tuple[str, ...] = ()
    #: Staged position-delete files (merge-on-read retractions).
    deletes: tuple[StagedFile, ...] = ()
    #: Rows this change retracts (for reporting).
    removed_record_count: int = 0


@dataclass(frozen=True)
class StagedBatch:
    """The manifest of one staged batch."""

    batch_id: str
    target: str
    lower: Frontier
    upper: Frontier
    #: The head of the target the batch was computed against (None: empty table).
    base_snapshot_id: int | None
    data_dir: str
    times: tuple[StagedTime, ...] = ()
    #: The batch description this batch answers (opaque JSON object).
    description: Mapping[str, Any] = field(default_factory=dict)
    inputs: Mapping[str, int | None] = field(default_factory=dict)
    state: str = STATE_STAGED
    created_at_ms: int = 0
    #: The write attempt that staged these files ("" for manifests written
    #: before attempts had folders of their own).
    attempt: str = ""
    #: Snapshot-summary entries the append records with the batch (only the
    #: keys in :data:`MANIFEST_SUMMARY_KEYS`, e.g. ``ct.query-hash``).
    summary: Mapping[str, str] = field(default_factory=dict)

    @property
    def added_files(self) -> list[str]:
        return [f.path for t in self.times for f in t.add]

    @property
    def staged_files(self) -> list[str]:
        """Every file this batch wrote (data and position deletes)."""
        return [f.path for t in self.times for f in (*t.add, *t.deletes)]

    @property
    def deleted_record_count(self) -> int:
        return sum(t.removed_record_count for t in self.times)

    @property
    def added_record_count(self) -> int:
        return sum(f.record_count for t in self.times for f in t.add)

    @property
    def added_bytes(self) -> int:
        return sum(f.size_bytes for t in self.times for f in t.add)

    def changes(self) -> list[TimedChange]:
        """The batch as compare-and-append changes."""
        return [
            TimedChange(
                t.time,
                tuple(f.path for f in t.add),
                tuple(t.remove),
                tuple(f.path for f in t.deletes),
            )
            for t in self.times
        ]

    # -- JSON -----------------------------------------------------------------
    def to_json(self) -> dict[str, Any]:
        return {
            "format": MANIFEST_FORMAT,
            "batch_id": self.batch_id,
            "target": self.target,
            "lower": self.lower.to_json(),
            "upper": self.upper.to_json(),
            "base_snapshot_id": self.base_snapshot_id,
            "data_dir": self.data_dir,
            "state": self.state,
            "created_at_ms": self.created_at_ms,
            "attempt": self.attempt,
            "summary": dict(self.summary),
            "description": dict(self.description),
            "inputs": dict(self.inputs),
            "times": [
                {
                    "time": t.time,
                    "add": [asdict(f) for f in t.add],
                    "remove": list(t.remove),
                    "deletes": [asdict(f) for f in t.deletes],
                    "removed_record_count": t.removed_record_count,
                }
                for t in self.times
            ],
        }

    @classmethod
    def from_json(cls, data: Any, *, where: str = "staged batch") -> StagedBatch:
        try:
            if not isinstance(data, dict):
                raise TypeError("manifest is not a JSON object")
            if data.get("format") != MANIFEST_FORMAT:
                raise ValueError(f"unknown manifest format {data.get('format')!r}")
            if data["state"] not in _STATES:
                raise ValueError(f"unknown state {data['state']!r}")
            times = tuple(
                StagedTime(
                    time=_int(t["time"], "time"),
                    add=tuple(
                        StagedFile(
                            str(f["path"]),
                            _int(f["record_count"], "record_count"),
                            _int(f["size_bytes"], "size_bytes"),
                        )
                        for f in t["add"]
                    ),
                    remove=tuple(str(p) for p in t["remove"]),
                    deletes=tuple(
                        StagedFile(
                            str(f["path"]),
                            _int(f["record_count"], "record_count"),
                            _int(f["size_bytes"], "size_bytes"),
                        )
                        for f in t.get("deletes", [])
                    ),
                    removed_record_count=_int(t.get("removed_record_count", 0), "removed"),
                )
                for t in data["times"]
            )
            base = data["base_snapshot_id"]
            return cls(
                batch_id=str(data["batch_id"]),
                target=str(data["target"]),
                lower=_frontier(data["lower"], "lower"),
                upper=_frontier(data["upper"], "upper"),
                base_snapshot_id=None if base is None else _int(base, "base_snapshot_id"),
                data_dir=str(data["data_dir"]),
                times=times,
                description=dict(data.get("description") or {}),
                inputs=dict(data.get("inputs") or {}),
                state=str(data["state"]),
                created_at_ms=_int(data.get("created_at_ms", 0), "created_at_ms"),
                attempt=str(data.get("attempt") or ""),
                summary=_manifest_summary(data.get("summary") or {}),
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise StagingError(f"{where} is malformed: {exc!s}") from None


def _frontier(value: Any, what: str) -> Frontier:
    try:
        return Frontier.from_json(value)
    except FrontierError as exc:
        raise ValueError(f"{what}: {exc}") from None


#: Summary keys a manifest may ask the append to record: never the frontier
#: keys, the batch id or the attempt, which the append writes itself.
MANIFEST_SUMMARY_KEYS = frozenset(
    {SummaryKeys.QUERY_HASH, SummaryKeys.REFRESH, SummaryKeys.INCREMENTAL_TICKS}
)
_MAX_SUMMARY_VALUE = 200


def _manifest_summary(value: Any) -> dict[str, str]:
    """A manifest's ``summary``: known keys with short string values, or ``ValueError``."""
    if not isinstance(value, dict):
        raise TypeError(f"summary must be an object, got {value!r:.80}")
    for key, item in value.items():
        if key not in MANIFEST_SUMMARY_KEYS:
            raise ValueError(
                f"summary key {key!r:.80} is not one a manifest may set "
                f"({sorted(MANIFEST_SUMMARY_KEYS)})"
            )
        if not isinstance(item, str) or len(item) > _MAX_SUMMARY_VALUE:
            raise ValueError(f"summary {key} must be a string of at most 200 characters")
    return dict(value)


def _int(value: Any, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{what} must be an integer, got {value!r}")
    return value


# -- locations ---------------------------------------------------------------
def check_id(value: Any, what: str) -> str:
    """A batch or attempt id that is safe as one path segment (:mod:`.ids`), or StagingError."""
    return ids.check_id(value, what, StagingError)


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


def staging_root(table_location: str, properties: Mapping[str, str] | None = None) -> str:
    folder = (properties or {}).get(TableKeys.STAGING_DIR, TableKeys.STAGING_DIR_DEFAULT)
    return posixpath.join(table_location.rstrip("/"), _relative_folder(folder))


def manifest_path(
    table_location: str,
    batch_id: str,
    properties: Mapping[str, str] | None = None,
    attempt: str = "",
) -> str:
    name = check_id(batch_id, "batch id")
    if attempt:
        name = f"{name}.attempt-{check_id(attempt, 'attempt id')}"
    return posixpath.join(staging_root(table_location, properties), f"{name}.json")


def batch_data_dir(table_location: str, batch_id: str, attempt: str = "") -> str:
    """The folder a batch's files go to; with ``attempt``, that attempt's own folder."""
    folder = posixpath.join(
        table_location.rstrip("/"), "data", f"ct-batch={check_id(batch_id, 'batch id')}"
    )
    if not attempt:
        return folder
    return posixpath.join(folder, f"attempt={check_id(attempt, 'attempt id')}")


def new_attempt_id() -> str:
    """A fresh id for one write attempt: never shared by two attempts."""
    return f"{now_ms()}-{uuid.uuid4().hex[:12]}"


def _inside(path: str, folder: str) -> bool:
    """Whether ``path`` names something strictly inside ``folder`` (no ``..`` tricks)."""
    if any(p in (".", "..") for p in path.split("/")):
        return False
    return path.startswith(folder.rstrip("/") + "/")


def check_batch_paths(
    batch: StagedBatch,
    table_location: str,
    properties: Mapping[str, str] | None = None,
    manifest: str | None = None,
) -> None:
    """Refuse a manifest whose paths leave the table's location (before any delete or commit).

    The manifest path (from XCom), its ``data_dir`` and every staged file must
    be exactly where this package puts them for the batch id and attempt the
    manifest names: an edited or hostile manifest can neither make
    :func:`discard` delete a folder elsewhere nor make a commit register
    files from outside the table.
    """
    check_id(batch.batch_id, "batch id")
    expected_dir = batch_data_dir(table_location, batch.batch_id, batch.attempt)
    if batch.data_dir.rstrip("/") != expected_dir:
        raise StagingError(
            f"staged batch {batch.batch_id}: data_dir {batch.data_dir!r} is not its folder "
            f"{expected_dir!r} under the table location"
        )
    outside = [f for f in batch.staged_files if not _inside(f, expected_dir)]
    if outside:
        raise StagingError(
            f"staged batch {batch.batch_id}: {len(outside)} staged file(s) lie outside its "
            f"folder {expected_dir}, e.g. {outside[0]!r}"
        )
    if manifest is not None:
        expected = manifest_path(table_location, batch.batch_id, properties, batch.attempt)
        if manifest != expected:
            raise StagingError(
                f"manifest path {manifest!r} is not where batch {batch.batch_id} keeps its "
                f"manifest ({expected!r})"
            )


def _fs(uri: str) -> tuple[pafs.FileSystem, str]:
    """The filesystem and in-filesystem path of a URI (plain paths are local)."""
    try:
        return pafs.FileSystem.from_uri(uri)
    except Exception as exc:  # pyarrow raises ArrowInvalid, a ValueError, and others
        raise StagingError(f"cannot open staging location {uri!r}: {exc}") from None


def write_manifest(batch: StagedBatch, path: str) -> None:
    """Write the manifest atomically enough for one writer (temp file + move)."""
    fs, local = _fs(path)
    fs.create_dir(posixpath.dirname(local), recursive=True)
    tmp = f"{local}.tmp-{uuid.uuid4().hex}"
    with fs.open_output_stream(tmp) as out:
        out.write(json.dumps(batch.to_json(), indent=1, sort_keys=True).encode())
    failpoint("staging.manifest-written")
    fs.move(tmp, local)


def read_manifest(path: str) -> StagedBatch:
    fs, local = _fs(path)
    try:
        with fs.open_input_stream(local) as stream:
            raw = stream.read()
    except FileNotFoundError:
        raise ManifestMissingError(f"staged-batch manifest {path} does not exist") from None
    try:
        data = json.loads(raw)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise StagingError(f"staged-batch manifest {path} is not JSON: {exc}") from None
    return StagedBatch.from_json(data, where=f"staged-batch manifest {path}")


def list_manifests(
    table_location: str, properties: Mapping[str, str] | None = None
) -> Iterator[str]:
    root = staging_root(table_location, properties)
    fs, local = _fs(root)
    selector = pafs.FileSelector(local, allow_not_found=True, recursive=False)
    scheme_prefix = root[: len(root) - len(local)] if root.endswith(local) else ""
    for info in fs.get_file_info(selector):
        if info.type == pafs.FileType.File and info.path.endswith(".json"):
            yield scheme_prefix + info.path


def _files_under(uri: str) -> list[pafs.FileInfo]:
    """Every file below ``uri`` (recursively), as pyarrow file infos; none if it is missing."""
    fs, local = _fs(uri)
    selector = pafs.FileSelector(local, allow_not_found=True, recursive=True)
    return [i for i in fs.get_file_info(selector) if i.type == pafs.FileType.File]


def _uri_prefix(uri: str) -> str:
    """What to put before a filesystem path to spell it like ``uri`` (``file://`` or none)."""
    _, local = _fs(uri)
    return uri[: len(uri) - len(local)] if uri.endswith(local) else ""


def discard(
    batch: StagedBatch,
    manifest: str | None = None,
    *,
    table_location: str,
    properties: Mapping[str, str] | None = None,
    live: set[str] | None = None,
) -> int:
    """Delete one attempt's staged files (and its manifest). Returns files deleted.

    Only call this for an attempt known not to be on the table. Its paths are
    checked to lie in its own folder under ``table_location`` first. Files in
    ``live`` (referenced by a snapshot) are never deleted, which matters for
    manifests written before attempts had folders of their own.
    """
    check_batch_paths(batch, table_location, properties, manifest)
    fs, _ = _fs(batch.data_dir)
    prefix = _uri_prefix(batch.data_dir)
    deleted = 0
    for info in _files_under(batch.data_dir):
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
        _delete_if_exists(batch.data_dir, directory=True)
    else:
        prune_empty_dirs(batch.data_dir)
    if manifest is not None:
        _delete_if_exists(manifest)
    log.info(
        "discarded staged batch %s attempt %s (%d file(s))",
        batch.batch_id,
        batch.attempt or "-",
        deleted,
    )
    return deleted


def prune_empty_dirs(uri: str) -> None:
    """Remove empty folders at and below ``uri`` on a local filesystem.

    ``rmdir`` only ever removes an empty folder, so a writer that puts a file
    into one meanwhile keeps it (a recursive delete could take its file).
    Object stores have no folders: nothing to do there.
    """
    fs, local = _fs(uri)
    if not isinstance(fs, pafs.LocalFileSystem):
        return
    infos = fs.get_file_info(pafs.FileSelector(local, allow_not_found=True, recursive=True))
    dirs = sorted((i.path for i in infos if i.type == pafs.FileType.Directory), reverse=True)
    for folder in [*dirs, local]:
        try:
            os.rmdir(folder)
        except OSError:
            continue  # not empty (or gone): keep it


def _delete_if_exists(uri: str, *, directory: bool = False) -> None:
    fs, local = _fs(uri)
    kind = fs.get_file_info(local).type
    try:
        if directory and kind == pafs.FileType.Directory:
            fs.delete_dir(local)
        elif not directory and kind == pafs.FileType.File:
            fs.delete_file(local)
    except FileNotFoundError:
        pass  # deleted concurrently: the outcome wanted


def forget(manifest: str) -> None:
    """Drop the manifest of a batch that landed (its data files now belong to the table)."""
    _delete_if_exists(manifest)


def batch_files_live(table: Table, batch_id: str) -> bool:
    """Whether a kept snapshot references a file staged for ``batch_id`` (by any attempt).

    Snapshot expiry can remove the snapshot a batch landed in while its files
    stay live in later ones: the batch is still on the table, and a retried
    append must say so. (A batch that staged no file leaves no such trace.)
    """
    folder = batch_data_dir(table.location(), batch_id) + "/"
    return any(path.startswith(folder) for path in referenced_files(table))


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
) -> tuple[StagedBatch, str]:
    """Write the write-ahead manifest of a new attempt at a description's batch.

    Each call is a new attempt with a folder of its own, so a retried or
    zombie writer never touches another attempt's files. Written before any
    data file, so a crashed writer leaves a findable folder.

    :param summary: snapshot-summary entries for the append to record (the
        query hash); only :data:`MANIFEST_SUMMARY_KEYS`.
    """
    try:
        checked = _manifest_summary(dict(summary or {}))
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
    )
    path = manifest_path(table.location(), description.id, table.metadata.properties, attempt)
    write_manifest(batch, path)
    failpoint("staging.after-begin")
    return batch, path


def finish_batch(batch: StagedBatch, path: str, times: Iterable[StagedTime]) -> StagedBatch:
    """Record the batch's staged files; from now on it can be appended."""
    staged = dataclasses.replace(batch, times=tuple(times), state=STATE_STAGED)
    failpoint("staging.before-finish")
    write_manifest(staged, path)
    return staged


def check_appendable(
    batch: StagedBatch,
    table: Table,
    *,
    manifest: str | None = None,
    description: BatchDescription | None = None,
    allowed_times: Collection[int] | None = None,
) -> None:
    """Refuse a manifest that is not completely staged, not this table's, or not ``description``'s.

    A manifest still in state ``writing`` belongs to a writer that has not
    finished (or crashed): appending it would seal the time without its
    correction.

    :param allowed_times: the times a batch answering ``description`` may
        stage. ``None`` is a view's rule: at most one time, the description's
        ``time``. A continual task passes its batch's times
        (:func:`~airflow_provider_ct.core.continual.batch_times`): one entry
        per input time, all below the tick's time.
    """
    name = ".".join(table.name())
    if batch.state != STATE_STAGED:
        raise StagingError(
            f"staged batch {batch.batch_id} (attempt {batch.attempt or '-'}) is in state "
            f"{batch.state!r}, not {STATE_STAGED!r}: its writer has not finished (or crashed); "
            "refusing to append an incomplete correction"
        )
    if batch.target != name:
        raise StagingError(f"staged batch {batch.batch_id} is for {batch.target}, not {name}")
    check_batch_paths(batch, table.location(), table.metadata.properties, manifest)
    if description is None:
        return
    if batch.batch_id != description.id or dict(batch.description) != description.to_json():
        raise StagingError(
            f"staged batch {batch.batch_id} does not answer description {description.id}: "
            "the manifest was staged for another description"
        )
    mismatched = [
        what
        for what, ours, theirs in (
            ("lower", batch.lower, description.lower),
            ("upper", batch.upper, description.upper),
            ("base_snapshot_id", batch.base_snapshot_id, description.base_snapshot_id),
            ("inputs", dict(batch.inputs), dict(description.inputs)),
        )
        if ours != theirs
    ]
    if mismatched:
        raise StagingError(
            f"staged batch {batch.batch_id} disagrees with its description on {mismatched}"
        )
    problem = _times_problem(batch, description, allowed_times)
    if problem:
        raise StagingError(
            f"staged batch {batch.batch_id} disagrees with its description on time: {problem}"
        )


def _times_problem(
    batch: StagedBatch, description: BatchDescription, allowed: Collection[int] | None
) -> str | None:
    """What is wrong with the times a manifest stages for ``description``, or None."""
    times = [t.time for t in batch.times]
    if any(b <= a for a, b in itertools.pairwise(times)):
        return f"its times {times[:10]} do not strictly increase"
    outside = [t for t in times if description.lower.seals(t) or not description.upper.seals(t)]
    if outside:
        return (
            f"time {outside[0]} lies outside the batch's [{description.lower.to_summary()}, "
            f"{description.upper.to_summary()})"
        )
    if allowed is None:
        if times and times != [description.time]:
            return f"a view's batch stages only the tick's time {description.time}, not {times}"
        return None
    unknown = [t for t in times if t not in set(allowed)]
    if unknown:
        return (
            f"time {unknown[0]} is not one of the batch's {len(allowed)} input time(s) "
            f"{sorted(allowed)[:10]}"
        )
    return None


def append_batch(table: Table, batch: StagedBatch) -> AppendResult:
    """Compare-and-append a staged batch at its lower, against its base snapshot."""
    if batch.state != STATE_STAGED:
        raise StagingError(
            f"staged batch {batch.batch_id} is in state {batch.state!r}, not {STATE_STAGED!r}"
        )
    return compare_and_append(
        table,
        expected_upper=batch.lower,
        new_upper=batch.upper,
        batch_id=batch.batch_id,
        changes=batch.changes(),
        expected_head=batch.base_snapshot_id,
        inputs=batch.inputs,
        extra_summary={
            **batch.summary,
            **({SummaryKeys.ATTEMPT: batch.attempt} if batch.attempt else {}),
        },
    )


@dataclass(frozen=True)
class LandResult:
    """What :func:`land_staged` did with one attempt's manifest."""

    result: AppendResult
    batch: StagedBatch
    #: Files of this attempt deleted (a lost race, or another attempt landed).
    files_deleted: int = 0
    #: The attempt that is on the table (``None`` if the batch did not land).
    landed_attempt: str | None = None

    @property
    def landed_by_this_attempt(self) -> bool:
        return self.result.landed and self.landed_attempt == self.batch.attempt


def land_staged(
    table: Table,
    manifest: str,
    *,
    description: BatchDescription | None = None,
    allowed_times: Collection[int] | None = None,
) -> LandResult:
    """Append one attempt's staged batch and clean up after whatever happened.

    * landed (now, or earlier by this same attempt): the manifest is dropped,
      the files are the table's;
    * already landed by *another* attempt of the same batch: this attempt's
      files are deleted (they are referenced by nothing) and the outcome is
      "already landed";
    * lost the race: this attempt's files are deleted; the next tick corrects.

    An unknown commit outcome raises and deletes nothing.
    """
    root = staging_root(table.location(), table.metadata.properties)
    if not _inside(manifest, root) or not manifest.endswith(".json"):
        raise StagingError(
            f"manifest path {manifest!r:.200} is not a manifest in {root}, the staging folder "
            f"of {'.'.join(table.name())}"
        )
    batch = read_manifest(manifest)
    check_appendable(
        batch, table, manifest=manifest, description=description, allowed_times=allowed_times
    )
    result = append_batch(table, batch)
    live = _LiveFiles(table)
    landed = landing_of(
        Timeline.of(table),
        batch.batch_id,
        attempt=batch.attempt,
        files_live=lambda: live.any_of(batch.staged_files),
    )
    if landed.landing is Landing.MINE:
        forget(manifest)
        return LandResult(result, batch, 0, landed.attempt)
    if landed.landing is Landing.FILES_LIVE:
        # This attempt landed earlier and its snapshot has since been
        # expired: its files are the table's. Never delete them.
        forget(manifest)
        again = dataclasses.replace(
            result, landed=True, already_landed=True, reason="files already live"
        )
        return LandResult(again, batch, 0, batch.attempt)
    # Lost, or another attempt's files are on the table (ours are in a folder
    # of their own): delete ours, each checked against every kept snapshot.
    location, props = table.location(), table.metadata.properties
    deleted = discard(batch, manifest, table_location=location, properties=props, live=live.files)
    if landed.landing is Landing.OTHER_ATTEMPT:
        log.info(
            "batch %s was landed by attempt %s; removed attempt %s's %d staged file(s)",
            batch.batch_id,
            landed.attempt or "-",
            batch.attempt,
            deleted,
        )
        return LandResult(result, batch, deleted, landed.attempt)
    return LandResult(result, batch, deleted)


class _LiveFiles:
    """The files a table's kept snapshots reference, read once and only when asked."""

    def __init__(self, table: Table) -> None:
        self._table = table
        self._files: set[str] | None = None

    @property
    def files(self) -> set[str]:
        if self._files is None:
            self._files = referenced_files(self._table)
        return self._files

    def any_of(self, paths: Iterable[str]) -> bool:
        return any(p in self.files for p in paths)
