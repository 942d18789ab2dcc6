"""Whether a view tick may be computed incrementally, from the target's history.

An incremental tick computes the view's change from its inputs' changes
since the snapshots the target's last batch pinned, and applies it to the
target's head. That is exact only if the head is what that batch made it:
the result of the query over those snapshots. So before every incremental
tick we check, from metadata alone (PyIceberg, no Spark):

* the head is the description's base and our own view batch (not a foreign
  commit: drift), ``main`` was not rolled back, the target's schema is the
  one that batch wrote, the query's text hashes to the batch's
  ``ct.query-hash``, and the description pins the inputs the batch pinned
  (:func:`~airflow_provider_ct.core.quiet.same_query_batch`), and the parts
  a composed tick reads, the parts that batch recorded (``ct.parts``);
* each input's old
  snapshot is still in its metadata, the new one descends from it, and its
  schema did not change (:func:`~airflow_provider_ct.core.quiet.snapshots_between`).

Anything else runs the full correction for this tick, with the reason; the
full correction compares the whole query with the whole head, so it repairs
whatever happened. ``verify_every`` forces it every N-th tick.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from airflow_provider_ct.core.keys import SummaryKeys
from airflow_provider_ct.core.quiet import same_query_batch, snapshots_between
from airflow_provider_ct.core.timeline import TimelineEntry, parse_pins
from airflow_provider_ct.ivm.changes.table_changes import estimated_change_rows

if TYPE_CHECKING:
    from pyiceberg.table import Table

    from airflow_provider_ct.core.description import BatchDescription


@dataclass(frozen=True)
class IncrementalBase:
    """What an incremental tick starts from."""

    #: The batch whose result the head is.
    batch_id: str
    #: Each input's snapshot as that batch pinned it (``None``: empty then).
    before: dict[str, int | None]
    #: Incremental ticks since the last full correction, this one excluded.
    incremental_ticks: int
    #: The inputs whose rows may have changed since that batch's pins.
    changed: frozenset[str] = frozenset()


def incremental_base(
    target: Table | None,
    description: BatchDescription,
    *,
    sql: str,
    inputs: Mapping[str, Table],
    minted: Collection[str] | None = None,
) -> tuple[IncrementalBase | None, str]:
    """The base of an incremental tick, or ``None`` and why the tick must run in full.

    :param minted: a composed tick's minted inputs (see
        :func:`~airflow_provider_ct.core.quiet.same_query_batch`).
    """
    last, reason = same_query_batch(target, description, sql=sql, inputs=inputs, minted=minted)
    if last is None:
        return None, reason
    recorded, missing = _recorded_pins(last, description)
    if missing:
        return None, f"the last batch {last.batch_id} did not read the parts {missing}"
    before = {name: recorded[name] for name in description.inputs}
    for name in sorted(description.inputs):
        old, new = before[name], description.inputs[name]
        if new is None and old is not None:
            return None, f"input {name} has no snapshot at the tick's time, but had {old}"
        if old is None or new is None:
            continue
        chain, problem = snapshots_between(name, inputs[name], old, new)
        if chain is None:
            return None, problem
    assert last.batch_id is not None  # last_view_batch only returns our batches
    ticks = _incremental_ticks(last.summary)
    return IncrementalBase(last.batch_id, before, ticks, _changed(before, description, inputs)), ""


def _recorded_pins(
    last: TimelineEntry, description: BatchDescription
) -> tuple[dict[str, int | None], list[str]]:
    """The last batch's pins, its parts' (``ct.parts``) among them, and the parts the
    description pins that it did not read (a composed tick after a full one)."""
    before = dict(last.inputs or {})
    value = last.summary.get(SummaryKeys.PARTS)
    if value is not None:
        before |= parse_pins(value, f"snapshot {last.snapshot_id}", SummaryKeys.PARTS)
    return before, sorted(n for n in description.inputs if n not in before)


def _changed(
    before: Mapping[str, int | None], description: BatchDescription, inputs: Mapping[str, Table]
) -> frozenset[str]:
    """The inputs whose rows may differ from the batch's pins, from snapshot summaries.

    A managed input's frontier moves by commits of no file, so a new
    snapshot id alone does not mean new rows; a snapshot summary that
    cannot be read counts as a change.
    """
    moved = set()
    for name, after in description.inputs.items():
        old = before.get(name)
        if old == after:
            continue
        if after is None or name not in inputs or estimated_change_rows(inputs[name], old, after):
            moved.add(name)
    return frozenset(moved)


def _incremental_ticks(summary: Mapping[str, str]) -> int:
    value = summary.get(SummaryKeys.INCREMENTAL_TICKS, "0")
    return int(value) if value.isascii() and value.isdigit() else 0
