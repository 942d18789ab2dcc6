"""What a write job reports and what an append did: typed, validated at every border.

Both travel as plain JSON (Airflow XCom, the warm driver's frames, the
``--report`` file of ``spark-submit``). Each crosses into a process that did
not produce it, so each is parsed with :meth:`from_json`, which names what is
wrong with a malformed one: a report of ``{}``, a wrong status or a manifest
that is not a path must fail the append, never pass as "nothing to append".
The job side (``spark/``) and the Airflow side (``operators/``) both import
this module; neither imports the other.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from airflow_provider_ct.exceptions import DescriptionError


class WriteStatus(StrEnum):
    """How a write ended: staged a batch, found its description outdated, or a dry run."""

    STAGED = "staged"
    OUTDATED = "outdated"
    DRY_RUN = "dry_run"


#: The fields each status requires to be non-empty strings.
_REQUIRED: dict[WriteStatus, tuple[str, ...]] = {
    WriteStatus.STAGED: ("description_id", "target", "manifest"),
    WriteStatus.OUTDATED: ("description_id", "target"),
    WriteStatus.DRY_RUN: ("description_id", "target"),
}
_COUNTS = ("rows_to_insert", "rows_to_delete", "staged_bytes")
_KNOWN = frozenset({"status", "description_id", "target", "manifest", "reason", "quiet", *_COUNTS})


@dataclass
class WriteReport:
    """What a write (a Spark job, or a quiet tick without one) did.

    ``extra`` carries what only some jobs say (the strategy and plan of a
    view's tick, a continual task's input times, the phases' seconds); it is
    reported and logged, never decided on.
    """

    status: WriteStatus
    description_id: str
    target: str
    rows_to_insert: int = 0
    rows_to_delete: int = 0
    manifest: str | None = None
    staged_bytes: int = 0
    reason: str = ""
    #: A quiet tick: the batch was staged from metadata alone, no Spark job ran.
    quiet: bool = False
    extra: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {
            **self.extra,
            "status": str(self.status),
            "description_id": self.description_id,
            "target": self.target,
            "rows_to_insert": self.rows_to_insert,
            "rows_to_delete": self.rows_to_delete,
            "manifest": self.manifest,
            "staged_bytes": self.staged_bytes,
            "reason": self.reason,
            "quiet": self.quiet,
        }

    @classmethod
    def from_json(cls, value: Any) -> WriteReport:
        """A report whose fields are all present and well-typed, or :class:`DescriptionError`."""
        data = json_object(value, "write report")
        try:
            status = WriteStatus(str(data.get("status")))
        except ValueError:
            raise DescriptionError(
                f"write report field 'status' must be one of {sorted(s.value for s in WriteStatus)}"
                f", got {data.get('status')!r}: {data!r:.200}"
            ) from None
        for name in _REQUIRED[status]:
            if not isinstance(data.get(name), str) or not data[name]:
                raise DescriptionError(
                    f"write report field {name!r} must be a non-empty string, got "
                    f"{data.get(name)!r:.100}"
                )
        _check_type(data, "quiet", bool, "a bool")
        _check_type(data, "reason", str, "a string")
        for name in _COUNTS:
            _check_type(data, name, int, "an integer")
        manifest = data.get("manifest")
        if manifest is not None and not isinstance(manifest, str):
            raise DescriptionError(
                f"write report field 'manifest' must be a path: {manifest!r:.100}"
            )
        return cls(
            status=status,
            description_id=str(data.get("description_id")),
            target=str(data.get("target")),
            rows_to_insert=int(data.get("rows_to_insert") or 0),
            rows_to_delete=int(data.get("rows_to_delete") or 0),
            manifest=manifest,
            staged_bytes=int(data.get("staged_bytes") or 0),
            reason=str(data.get("reason") or ""),
            quiet=bool(data.get("quiet", False)),
            extra={k: v for k, v in data.items() if k not in _KNOWN},
        )


@dataclass
class AppendOutcome:
    """What the append task did with one write report: its XCom.

    ``appended`` is true when the batch is on the table (this attempt's or,
    ``already_appended``, an earlier one's); false when the write staged
    nothing (``status`` says why) or the batch lost its race (``upper`` is
    the one it lost to; the next tick corrects).
    """

    appended: bool
    target: str
    batch_id: str = ""
    already_appended: bool = False
    #: The write's status when there was nothing to append.
    status: str = str(WriteStatus.STAGED)
    attempt: str = ""
    landed_attempt: str | None = None
    #: The target's upper after the append, as frontier JSON.
    upper: Any = None
    snapshot_ids: list[int] = field(default_factory=list)
    rows_inserted: int = 0
    rows_deleted: int = 0
    files_deleted: int = 0
    reason: str = ""
    quiet: bool = False

    def to_json(self) -> dict[str, Any]:
        return {
            "appended": self.appended,
            "already_appended": self.already_appended,
            "status": self.status,
            "batch_id": self.batch_id,
            "attempt": self.attempt,
            "landed_attempt": self.landed_attempt,
            "target": self.target,
            "upper": self.upper,
            "snapshot_ids": list(self.snapshot_ids),
            "rows_inserted": self.rows_inserted,
            "rows_deleted": self.rows_deleted,
            "files_deleted": self.files_deleted,
            "reason": self.reason,
            "quiet": self.quiet,
        }


def json_object(value: Any, what: str) -> dict[str, Any]:
    """``value`` as a JSON object (a dict, or its JSON text), or a clear error."""
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except (json.JSONDecodeError, RecursionError) as exc:
            raise DescriptionError(f"{what} is not JSON: {exc}") from None
    if not isinstance(value, dict):
        raise DescriptionError(
            f"{what} must be a JSON object, got {type(value).__name__}: {value!r:.200}"
        )
    return value


def _check_type(data: dict[str, Any], name: str, kind: type, what: str) -> None:
    value = data.get(name)
    if (
        name in data
        and value is not None
        and (not isinstance(value, kind) or (kind is int and isinstance(value, bool)))
    ):
        raise DescriptionError(f"write report field {name!r} must be {what}, got {value!r:.100}")
