"""Staged batches: files written for a batch before it is appended.

A writer (the Spark job, or a PyArrow writer for small collections) puts the
Parquet files of one batch under the table location, in a folder of their
own, and describes them in a JSON manifest. Nothing is visible to readers
until :func:`~airflow_provider_ct.core.commit.compare_and_append` registers the
files. Layout, relative to the table location::

    data/ct-batch=<batch_id>/part-*.parquet     data files (stay there once appended)
    ct-staging/<batch_id>.json                  the manifest

The manifest is written twice: first with ``state = "writing"`` before any
data file, then with ``state = "staged"`` once every file is complete. So a
crashed writer always leaves a manifest behind that names its folder, and
:func:`cleanup_staged` can find and remove the debris.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import posixpath
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

import pyarrow.fs as pafs

from airflow_provider_ct.core.commit import AppendResult, TimedChange, compare_and_append
from airflow_provider_ct.core.frontier import Frontier, now_ms
from airflow_provider_ct.core.keys import TableKeys
from airflow_provider_ct.core.timeline import Timeline
from airflow_provider_ct.exceptions import FrontierError, StagingError

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
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise StagingError(f"{where} is malformed: {exc!s}") from None


def _frontier(value: Any, what: str) -> Frontier:
    try:
        return Frontier.from_json(value)
    except FrontierError as exc:
        raise ValueError(f"{what}: {exc}") from None


def _int(value: Any, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{what} must be an integer, got {value!r}")
    return value


# -- locations ---------------------------------------------------------------
def staging_root(table_location: str, properties: Mapping[str, str] | None = None) -> str:
    folder = (properties or {}).get(TableKeys.STAGING_DIR, TableKeys.STAGING_DIR_DEFAULT)
    return posixpath.join(table_location.rstrip("/"), folder)


def manifest_path(
    table_location: str, batch_id: str, properties: Mapping[str, str] | None = None
) -> str:
    return posixpath.join(staging_root(table_location, properties), f"{batch_id}.json")


def batch_data_dir(table_location: str, batch_id: str) -> str:
    return posixpath.join(table_location.rstrip("/"), "data", f"ct-batch={batch_id}")


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
    tmp = f"{local}.tmp-{now_ms()}"
    with fs.open_output_stream(tmp) as out:
        out.write(json.dumps(batch.to_json(), indent=1, sort_keys=True).encode())
    fs.move(tmp, local)


def read_manifest(path: str) -> StagedBatch:
    fs, local = _fs(path)
    try:
        with fs.open_input_stream(local) as stream:
            raw = stream.read()
    except FileNotFoundError:
        raise StagingError(f"staged-batch manifest {path} does not exist") from None
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


def discard(batch: StagedBatch, manifest: str | None = None) -> int:
    """Delete a batch's data folder (and its manifest). Returns files deleted.

    Only call this for a batch known not to be on the table: an appended
    batch's data files are the table's files.
    """
    fs, local = _fs(batch.data_dir)
    deleted = 0
    info = fs.get_file_info(local)
    if info.type == pafs.FileType.Directory:
        deleted = sum(
            1
            for f in fs.get_file_info(pafs.FileSelector(local, recursive=True))
            if f.type == pafs.FileType.File
        )
        fs.delete_dir(local)
    if manifest is not None:
        mfs, mlocal = _fs(manifest)
        if mfs.get_file_info(mlocal).type == pafs.FileType.File:
            mfs.delete_file(mlocal)
    log.info("discarded staged batch %s (%d file(s))", batch.batch_id, deleted)
    return deleted


def forget(manifest: str) -> None:
    """Drop the manifest of a batch that landed (its data files now belong to the table)."""
    fs, local = _fs(manifest)
    if fs.get_file_info(local).type == pafs.FileType.File:
        fs.delete_file(local)


def live_files(table: Table) -> set[str]:
    """Every data and delete file the table's current snapshot references."""
    snapshot = table.metadata.current_snapshot()
    if snapshot is None:
        return set()
    return {
        entry.data_file.file_path
        for manifest in snapshot.manifests(io=table.io)
        for entry in manifest.fetch_manifest_entry(io=table.io, discard_deleted=True)
    }


@dataclass(frozen=True)
class CleanupReport:
    landed: tuple[str, ...] = ()
    discarded: tuple[str, ...] = ()
    kept: tuple[str, ...] = ()
    files_deleted: int = 0


def cleanup_staged(
    timeline: Timeline,
    table_location: str,
    *,
    properties: Mapping[str, str] | None = None,
    grace_ms: int = 3_600_000,
    now: int | None = None,
    keep: Sequence[str] = (),
    table: Table | None = None,
) -> CleanupReport:
    """Remove what staged batches left behind.

    * a batch on ``main`` (its id in a snapshot summary): forget its manifest;
    * a batch whose lower is below the current upper can never land (the CAS
      would fail forever): delete its files;
    * any other batch older than ``grace_ms`` is assumed crashed: delete.
    Batches named in ``keep`` are left alone. Pass ``table`` so that a batch
    whose snapshot was expired but whose files are still live is recognised as
    landed (without it, only the batch ids on ``main`` tell).
    """
    current = now_ms() if now is None else now
    live = None if table is None else live_files(table)
    landed: list[str] = []
    discarded: list[str] = []
    kept: list[str] = []
    files = 0
    for path in list_manifests(table_location, properties):
        try:
            batch = read_manifest(path)
        except StagingError as exc:
            log.warning("skipping unreadable staged-batch manifest %s: %s", path, exc)
            continue
        if batch.batch_id in keep:
            kept.append(batch.batch_id)
        elif timeline.find_batch(batch.batch_id) is not None or (
            live is not None and any(f in live for f in batch.staged_files)
        ):
            # On main, or its snapshot expired but its files are still table
            # files: either way the data folder belongs to the table now.
            forget(path)
            landed.append(batch.batch_id)
        elif batch.lower < timeline.upper or current - batch.created_at_ms > grace_ms:
            files += discard(batch, path)
            discarded.append(batch.batch_id)
        else:
            kept.append(batch.batch_id)
    return CleanupReport(tuple(landed), tuple(discarded), tuple(kept), files)


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


def begin_batch(table: Table, description: BatchDescription) -> tuple[StagedBatch, str]:
    """Write the write-ahead manifest of a description's batch; returns it and its path.

    Written before any data file, so a crashed writer leaves a findable folder.
    """
    batch = StagedBatch(
        batch_id=description.id,
        target=description.target,
        lower=description.lower,
        upper=description.upper,
        base_snapshot_id=description.base_snapshot_id,
        data_dir=batch_data_dir(table.location(), description.id),
        description=description.to_json(),
        inputs=dict(description.inputs),
        state=STATE_WRITING,
        created_at_ms=now_ms(),
    )
    path = manifest_path(table.location(), description.id, table.metadata.properties)
    write_manifest(batch, path)
    return batch, path


def finish_batch(batch: StagedBatch, path: str, times: Iterable[StagedTime]) -> StagedBatch:
    """Record the batch's staged files; from now on it can be appended."""
    staged = dataclasses.replace(batch, times=tuple(times), state=STATE_STAGED)
    write_manifest(staged, path)
    return staged


def append_batch(table: Table, batch: StagedBatch) -> AppendResult:
    """Compare-and-append a staged batch at its lower, against its base snapshot."""
    return compare_and_append(
        table,
        expected_upper=batch.lower,
        new_upper=batch.upper,
        batch_id=batch.batch_id,
        changes=batch.changes(),
        expected_head=batch.base_snapshot_id,
        inputs=batch.inputs,
    )
