"""Batch descriptions: what one tick is allowed to write.

A description is minted from the target's upper before any work happens and
travels as plain JSON (Airflow XCom) to the write job and the append:

``{id, target, lower, upper, time, base_snapshot_id, inputs}``

* ``lower``: the target's upper when minted; the batch lands only there;
* ``upper``: the upper after the batch (``time + 1`` for a view tick);
* ``time``: the data time written (a view tick's ``T``);
* ``base_snapshot_id``: the target's head when minted (``None``: empty);
* ``inputs``: each input table pinned to the snapshot holding it at ``time``;
* ``table_uuid`` (optional): the target table's uuid when minted, so a later
  mint can tell a table that went backwards from one dropped and recreated
  under the same name (not part of the id: it adds nothing the base snapshot
  does not pin).

The id is derived from the content, so minting the same tick twice (a
retried task, a second deployment) yields the same description, never a
second valid one for the same lower.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from airflow_provider_ct.core.frontier import Frontier, check_timestamp
from airflow_provider_ct.core.ids import check_id, id_part
from airflow_provider_ct.core.reports import json_object
from airflow_provider_ct.exceptions import DescriptionError, FrontierError

FIELDS = ("id", "target", "lower", "upper", "time", "base_snapshot_id", "inputs")
#: Characters of the target's name kept in a derived id (the digest makes it unique).
_TARGET_CHARS = 120


@dataclass(frozen=True)
class BatchDescription:
    target: str
    lower: Frontier
    upper: Frontier
    time: int
    base_snapshot_id: int | None
    inputs: Mapping[str, int | None] = field(default_factory=dict)
    id: str = ""
    table_uuid: str | None = None

    def __post_init__(self) -> None:
        if not self.lower < self.upper:
            raise DescriptionError(
                f"description for {self.target}: lower {self.lower} must be below upper "
                f"{self.upper}"
            )
        if self.lower.seals(self.time) or not self.upper.seals(self.time):
            raise DescriptionError(
                f"description for {self.target}: time {self.time} is outside "
                f"[{self.lower.to_summary()}, {self.upper.to_summary()})"
            )
        if not self.id:
            object.__setattr__(self, "id", self.derive_id())
        check_id(self.id, "batch id", DescriptionError)

    def derive_id(self) -> str:
        """A stable id from the description's content."""
        payload = json.dumps(
            [
                self.target,
                self.lower.to_json(),
                self.upper.to_json(),
                self.time,
                self.base_snapshot_id,
                sorted(self.inputs.items()),
            ],
            separators=(",", ":"),
        )
        digest = hashlib.sha256(payload.encode()).hexdigest()[:20]
        target = id_part(self.target, _TARGET_CHARS)
        return f"{target}-{id_part(self.lower.to_summary(), 40)}-{digest}"

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "target": self.target,
            "lower": self.lower.to_json(),
            "upper": self.upper.to_json(),
            "time": self.time,
            "base_snapshot_id": self.base_snapshot_id,
            "inputs": dict(self.inputs),
            "table_uuid": self.table_uuid,
        }

    @classmethod
    def from_json(cls, data: Any) -> BatchDescription:
        """Parse a description, naming what is wrong with a malformed one."""
        data = json_object(data, "batch description")
        missing = [k for k in FIELDS if k not in data]
        if missing:
            raise DescriptionError(f"batch description lacks {missing}: {data!r:.200}")
        try:
            inputs = data["inputs"]
            if not isinstance(inputs, dict) or not all(
                isinstance(k, str)
                and (v is None or (isinstance(v, int) and not isinstance(v, bool)))
                for k, v in inputs.items()
            ):
                raise DescriptionError(f"'inputs' must map table names to snapshot ids: {inputs!r}")
            base = data["base_snapshot_id"]
            if base is not None and (isinstance(base, bool) or not isinstance(base, int)):
                raise DescriptionError(f"'base_snapshot_id' must be an integer or null: {base!r}")
            if not isinstance(data["target"], str) or not isinstance(data["id"], str):
                raise DescriptionError("'target' and 'id' must be strings")
            table_uuid = data.get("table_uuid")
            if table_uuid is not None and not isinstance(table_uuid, str):
                raise DescriptionError(f"'table_uuid' must be a string or null: {table_uuid!r}")
            desc = cls(
                target=data["target"],
                lower=Frontier.from_json(data["lower"]),
                upper=Frontier.from_json(data["upper"]),
                time=check_timestamp(data["time"], "description time"),
                base_snapshot_id=base,
                inputs=dict(inputs),
                id=data["id"],
                table_uuid=table_uuid,
            )
        except FrontierError as exc:
            raise DescriptionError(f"batch description has a bad time or frontier: {exc}") from None
        if desc.id != desc.derive_id():
            raise DescriptionError(
                f"batch description id {desc.id!r:.100} does not match its content (expected "
                f"{desc.derive_id()!r}): it was edited or corrupted on the way"
            )
        return desc
