"""The manifest of a staged batch: what one write attempt staged, and for which description.

A writer describes the files it staged for a batch in a JSON manifest (see
:mod:`.staging` for where it lives and :mod:`.landing` for how it lands).
This module is the manifest's model and its JSON form, validated on every
read: a manifest crosses processes (the Spark job writes it, the append reads
it) and may be edited or truncated, so a malformed one is a clear
:class:`~airflow_provider_ct.exceptions.StagingError`, never a crash later.
"""

from __future__ import annotations

import json
import posixpath
import uuid
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

from airflow_provider_ct.core.faults import failpoint
from airflow_provider_ct.core.frontier import Frontier
from airflow_provider_ct.core.keys import SummaryKeys, TableKeys
from airflow_provider_ct.core.producers import TimedChange
from airflow_provider_ct.core.refresh_state import REFRESH_STATE
from airflow_provider_ct.core.schema_change import SchemaChange
from airflow_provider_ct.core.storage import Properties, filesystem, is_s3
from airflow_provider_ct.exceptions import FrontierError, ManifestMissingError, StagingError

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
    #: The schema the files were staged under, when it is not yet the table's:
    #: the append commits it with the batch (:mod:`.schema_change`).
    schema_change: SchemaChange | None = None

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
        change = self.schema_change
        return {
            **({} if change is None else {"schema_change": change.to_json()}),
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
                summary=manifest_summary(data.get("summary") or {}),
                schema_change=_schema_change(data.get("schema_change")),
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise StagingError(f"{where} is malformed: {exc!s}") from None


def _schema_change(value: Any) -> SchemaChange | None:
    return None if value is None else SchemaChange.from_json(value)


def _frontier(value: Any, what: str) -> Frontier:
    try:
        return Frontier.from_json(value)
    except FrontierError as exc:
        raise ValueError(f"{what}: {exc}") from None


#: Summary keys a manifest may ask the append to record: never the frontier
#: keys, the batch id or the attempt, which the append writes itself.
MANIFEST_SUMMARY_KEYS = frozenset(
    {
        SummaryKeys.QUERY_HASH,
        SummaryKeys.REFRESH,
        SummaryKeys.INCREMENTAL_TICKS,
        SummaryKeys.COMPUTE_MS,
        SummaryKeys.INPUT_ROWS,
        SummaryKeys.READ_SHARE,
        SummaryKeys.PARTS,
        REFRESH_STATE,
    }
)
_MAX_SUMMARY_VALUE = 200
#: The refresh state lists every source table, the parts every part: longer, still bounded.
_MAX_SUMMARY_VALUES = {REFRESH_STATE: 65_536, SummaryKeys.PARTS: 65_536}


def manifest_summary(value: Any) -> dict[str, str]:
    """A manifest's ``summary``: known keys with short string values, or ``ValueError``."""
    if not isinstance(value, dict):
        raise TypeError(f"summary must be an object, got {value!r:.80}")
    for key, item in value.items():
        if key not in MANIFEST_SUMMARY_KEYS:
            raise ValueError(
                f"summary key {key!r:.80} is not one a manifest may set "
                f"({sorted(MANIFEST_SUMMARY_KEYS)})"
            )
        limit = _MAX_SUMMARY_VALUES.get(key, _MAX_SUMMARY_VALUE)
        if not isinstance(item, str) or len(item) > limit:
            raise ValueError(f"summary {key} must be a string of at most {limit} characters")
    return dict(value)


def _int(value: Any, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{what} must be an integer, got {value!r}")
    return value


#: Tries of a manifest write whose temporary file vanished before its rename.
_WRITE_TRIES = 3


def write_manifest(batch: StagedBatch, path: str, io: Properties | None = None) -> None:
    """Write the manifest so a reader sees all of it or nothing.

    On an object store one PUT is that already (an object appears whole when
    its upload completes; a crashed writer leaves none), and a rename is a
    copy that stores keeping only Iceberg's layout may refuse: written in
    place. On a filesystem: a temporary file, then a rename. A sweep with a
    short grace may take the temporary file for a crashed writer's debris
    and delete it between the write and the rename; the rename then fails
    with ``FileNotFoundError`` and the write is simply done again (the
    content is the same).

    :param io: the catalog's FileIO properties (:mod:`.storage`).
    """
    text = json.dumps(batch.to_json(), indent=1, sort_keys=True).encode()
    if is_s3(path):
        _put_object(path, text, io)
        return
    fs, local = filesystem(path, io)
    fs.create_dir(posixpath.dirname(local), recursive=True)
    for attempt in range(1, _WRITE_TRIES + 1):
        tmp = f"{local}.tmp-{uuid.uuid4().hex}"
        with fs.open_output_stream(tmp) as out:
            out.write(text)
        failpoint("staging.manifest-written")
        try:
            fs.move(tmp, local)
            return
        except FileNotFoundError:
            if attempt == _WRITE_TRIES:
                raise StagingError(
                    f"manifest {path}: its temporary file vanished before the rename "
                    f"{_WRITE_TRIES} times (a sweep with a grace shorter than a write?)"
                ) from None


def _put_object(path: str, text: bytes, io: Properties | None) -> None:
    """One object at ``path``; a refusal names the setting that moves manifests elsewhere."""
    fs, local = filesystem(path, io)
    try:
        with fs.open_output_stream(local) as out:
            out.write(text)
    except OSError as exc:
        hint = ""
        if "ACCESS_DENIED" in str(exc) or "AccessDenied" in str(exc):
            hint = (
                f"; a table bucket (S3 Tables, a REST catalog's managed storage) accepts only "
                f"Iceberg's own files: set {TableKeys.STAGING_ROOT} in the catalog connection to "
                "a folder of an ordinary bucket (docs/deployment.md)"
            )
        raise StagingError(f"cannot write the staged-batch manifest {path}: {exc}{hint}") from None
    failpoint("staging.manifest-written")


def read_manifest(path: str, io: Properties | None = None) -> StagedBatch:
    fs, local = filesystem(path, io)
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
