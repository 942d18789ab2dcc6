"""Quiet ticks: proving from metadata alone that a tick cannot change its target.

Most ticks of a view find that no input changed. Running the write job for
them starts a JVM (~15 s) to compute an empty correction and commit only the
frontier. Here we decide, with PyIceberg reads of table metadata only, that
the correction *must* be empty, so the write operator can stage an empty
batch without Spark and the ordinary compare-and-append commits it.

A view tick is **quiet** when all of these hold (anything else, including
anything we cannot read, runs Spark, which corrects exactly):

* the target's head is the description's base, and it is a batch of a view
  (``ct.batch-id``, ``ct.inputs`` and ``ct.query-hash`` on it): not a
  foreign commit (drift), and ``main`` was not rolled back below the highest
  upper it reached;
* the target's schema is the one that batch was written with;
* the query's text hashes to that batch's ``ct.query-hash`` and the query
  calls nothing nondeterministic (``rand()``, ``current_timestamp()``...);
* the description pins the same inputs as that batch's ``ct.inputs``, and for
  each input either the same snapshot, or a newer one that descends on
  ``main`` from the old one through snapshots that change no row: ``replace``
  (compaction) or a commit whose live manifests are its parent's (an empty
  append, e.g. an upstream view's quiet tick); the old snapshot must still be
  in the input's metadata (not expired) and the input's schema must not have
  changed.

Why that is enough: the head is the result of our last batch, which made the
table equal to the query over the inputs it pinned (the write job computed
``desired - persisted`` against exactly that head, or the batch was itself
quiet). Same query, same input rows, same schemas: the desired rows are the
same, and nothing else wrote the table, so ``desired - persisted`` is empty.

A continual task's tick is quiet when its job would process no input time:
the output exists with its as-of, its head is the base, and the input has no
change in ``[lower, upper)`` (:func:`~airflow_provider_ct.core.continual.input_times`,
which already ignores ``replace`` snapshots). Its job would stage nothing
either, and the output's upper would still advance.
"""

from __future__ import annotations

import logging
from collections.abc import Collection, Mapping
from typing import TYPE_CHECKING, Any, NamedTuple

from airflow_provider_ct.core.continual import REPLACE, batch_times, window
from airflow_provider_ct.core.keys import SummaryKeys, TableKeys
from airflow_provider_ct.core.manifest import StagedBatch, StagedTime
from airflow_provider_ct.core.query import nondeterministic_calls, parse_query, query_hash
from airflow_provider_ct.core.staging import begin_batch, finish_batch
from airflow_provider_ct.core.storage import io_properties
from airflow_provider_ct.core.timeline import Timeline, TimelineEntry, highest_upper
from airflow_provider_ct.exceptions import CTError

if TYPE_CHECKING:
    from pyiceberg.table import Table
    from pyiceberg.table.snapshots import Snapshot

    from airflow_provider_ct.core.description import BatchDescription

log = logging.getLogger(__name__)

#: The reason every quiet decision starts with.
NO_INPUT_CHANGED = "no input changed"


class Quiet(NamedTuple):
    """Whether a tick is provably quiet, and why (or why not)."""

    quiet: bool
    reason: str


def _not(reason: str) -> Quiet:
    return Quiet(False, reason)


# -- views --------------------------------------------------------------------------------
def view_tick_is_quiet(
    target: Table | None,
    description: BatchDescription,
    *,
    sql: str,
    inputs: Mapping[str, Table],
    catalog_name: str = "ct",
) -> Quiet:
    """Whether a view tick can only produce an empty correction (see the module docstring).

    :param target: the view's table as loaded now (``None``: it does not exist).
    :param sql: the view's query, exactly as the write job would get it.
    :param inputs: every input the query reads, loaded now.
    """
    last, reason = same_query_batch(target, description, sql=sql, inputs=inputs)
    if last is None:
        return _not(reason)
    calls = nondeterministic_calls(parse_query(sql, catalog_name=catalog_name).expression)
    if calls:
        return _not(f"the query is not a function of its inputs alone (it calls {calls})")
    before = dict(last.inputs or {})
    notes: list[str] = []
    for name in sorted(before):
        change = _input_change(name, inputs[name], before[name], description.inputs[name])
        if change is not None:
            return _not(change)
        if before[name] != description.inputs[name]:
            notes.append(f"{name} {before[name]} -> {description.inputs[name]} changed no row")
    detail = "; ".join(notes) if notes else "every input is at the same snapshot"
    return Quiet(True, f"{NO_INPUT_CHANGED} since batch {last.batch_id} ({detail})")


def same_query_batch(
    target: Table | None,
    description: BatchDescription,
    *,
    sql: str,
    inputs: Mapping[str, Table],
    minted: Collection[str] | None = None,
) -> tuple[TimelineEntry | None, str]:
    """The head as our last batch of this very query over these inputs, or ``None`` and why.

    What a quiet tick and an incremental tick both build on: the head is
    the query's result over the snapshots that batch pinned (``ct.inputs``).

    :param minted: the inputs the minted description pins, when ``description``
        is a composed tick's, which pins what the query over the parts reads
        (parts, recorded apart in ``ct.parts``, and perhaps a few inputs):
        the last batch must have pinned the minted ones
        (:func:`~airflow_provider_ct.ivm.plan.history.incremental_base`
        compares the parts).
    """
    last, reason = last_view_batch(target, description)
    if last is None:
        return None, reason
    recorded = last.summary.get(SummaryKeys.QUERY_HASH)
    if recorded is None:
        return None, f"the last batch {last.batch_id} recorded no query hash: cannot prove quiet"
    if recorded != query_hash(sql):
        return None, f"the query changed since the last batch {last.batch_id}"
    before = dict(last.inputs or {})
    pinned = sorted(description.inputs if minted is None else minted)
    if sorted(before) != pinned or (minted is None and sorted(inputs) != sorted(before)):
        return None, f"the inputs {pinned} are not those of the last batch {sorted(before)}"
    return last, ""


def last_view_batch(
    target: Table | None, description: BatchDescription
) -> tuple[TimelineEntry | None, str]:
    """The target's head as our last view batch, or ``None`` and why it is not one."""
    if target is None:
        return None, "the target does not exist yet"
    metadata = target.metadata
    head = metadata.current_snapshot()
    if head is None:
        return None, "the target has no batch yet"
    if head.snapshot_id != description.base_snapshot_id:
        return None, (
            f"the target's head {head.snapshot_id} is not the description's base "
            f"{description.base_snapshot_id}"
        )
    try:
        timeline = Timeline.from_metadata(
            metadata, name=".".join(target.name()), check_regression=False
        )
        high, _ = highest_upper(metadata)
    except CTError as exc:
        return None, f"cannot read the target's history: {exc}"
    last = timeline.entries[-1] if timeline.entries else None
    if last is None or last.batch_id is None or last.inputs is None or last.time is None:
        return None, (
            f"the target's head {head.snapshot_id} is not a view batch of ours (a foreign "
            "commit: drift)"
        )
    if last.upper != description.lower or timeline.upper < high:
        return None, (
            f"the target's upper {timeline.upper.to_summary()} is not the description's lower "
            f"{description.lower.to_summary()} or is below the highest upper "
            f"{high.to_summary()} (main was rolled back)"
        )
    if metadata.current_schema_id != head.schema_id:
        return None, "the target's schema changed since the last batch"
    return last, ""


def _input_change(name: str, table: Table, before: int | None, after: int | None) -> str | None:
    """Why ``name`` may hold other rows at ``after`` than at ``before``; ``None``: same rows."""
    if before is None or after is None:
        # Spark reads an input without a snapshot with the table's current
        # schema, and which one the last batch saw is not recorded.
        return f"input {name} has no snapshot at the tick's time (before: {before}, now: {after})"
    chain, problem = snapshots_between(name, table, before, after)
    if chain is None:
        return problem
    for snapshot in chain:
        if not _changes_no_row(table, snapshot):
            operation = "?" if snapshot.summary is None else snapshot.summary.operation.value
            return f"input {name} changed: snapshot {snapshot.snapshot_id} ({operation})"
    return None


def snapshots_between(
    name: str, table: Table, before: int, after: int
) -> tuple[list[Snapshot] | None, str]:
    """The snapshots after ``before`` up to ``after`` on its ancestry, oldest first.

    ``None`` and the reason when what happened between them cannot be seen
    from the metadata: ``before`` expired, ``after`` does not descend from it
    (a rollback, another branch, an expired snapshot in between), or the
    input's schema changed (then Spark may read the pinned rows differently
    than last time).
    """
    metadata = table.metadata
    old, new = metadata.snapshot_by_id(before), metadata.snapshot_by_id(after)
    if old is None:
        return None, (
            f"input {name}: snapshot {before} pinned by the last batch has expired; what "
            "happened since cannot be seen"
        )
    if new is None:
        return None, f"input {name}: pinned snapshot {after} is not in its metadata"
    chain: list[Snapshot] = []
    current: Snapshot | None = new
    while current is not None and current.snapshot_id != before:
        chain.append(current)
        parent = current.parent_snapshot_id
        current = None if parent is None else metadata.snapshot_by_id(parent)
    if current is None:
        return None, (
            f"input {name}: snapshot {after} does not descend from {before} through kept "
            "snapshots (rolled back, another branch, or expired in between)"
        )
    if old.schema_id != new.schema_id:
        return None, f"input {name}'s schema changed between snapshots {before} and {after}"
    problem = _schema_change(name, table, after)
    if problem is not None:
        return None, problem
    return list(reversed(chain)), ""


def _schema_change(name: str, table: Table, pinned: int) -> str | None:
    """Why the pinned snapshot may be read with another schema than before (or ``None``).

    Whether Spark reads a pinned snapshot with the snapshot's schema or the
    table's current one, both are the same as last time when they are equal.
    """
    snapshot = table.metadata.snapshot_by_id(pinned)
    if snapshot is None:
        return f"input {name}: pinned snapshot {pinned} is not in its metadata"
    if snapshot.schema_id == table.metadata.current_schema_id:
        return None
    return f"input {name}'s schema changed after its pinned snapshot {pinned}"


def _changes_no_row(table: Table, snapshot: Snapshot) -> bool:
    """Whether ``snapshot`` holds exactly its parent's rows, by its metadata alone.

    ``replace`` is Iceberg's operation for rewriting files without changing
    rows (compaction). Any other commit changes nothing only if it keeps
    exactly its parent's live manifests (an append of no file: a frontier
    commit or a quiet tick of an upstream view). Manifests are immutable, so
    the same live manifests mean the same live files.
    """
    if snapshot.summary is not None and snapshot.summary.operation.value == REPLACE:
        return True
    parent_id = snapshot.parent_snapshot_id
    return parent_id is not None and same_live_files(table, parent_id, snapshot.snapshot_id)


def same_live_files(table: Table, before: int | None, after: int | None) -> bool:
    """Whether snapshots ``before`` and ``after`` of ``table`` hold exactly the same files.

    ``None`` is the empty table (no snapshot). Manifests are immutable, so the
    same live manifests mean the same data and delete files: a change staged
    against ``before`` applies unchanged at ``after`` when only frontier
    commits (ticks, checkpoints) came between. ``False`` when either snapshot
    is not in the metadata (expired): then nobody can tell.
    """
    if before == after:
        return True
    manifests: list[set[str]] = []
    for snapshot_id in (before, after):
        if snapshot_id is None:
            manifests.append(set())
            continue
        snapshot = table.metadata.snapshot_by_id(snapshot_id)
        if snapshot is None:
            return False
        manifests.append(_live_manifests(table, snapshot))
    return manifests[0] == manifests[1]


def _live_manifests(table: Table, snapshot: Snapshot) -> set[str]:
    """The manifests of ``snapshot`` that hold a live (added or existing) file."""
    return {
        m.manifest_path
        for m in snapshot.manifests(io=table.io)
        if m.has_added_files() or m.has_existing_files()
    }


# -- continual tasks ----------------------------------------------------------------------
def continual_tick_is_quiet(
    output: Table | None,
    description: BatchDescription,
    *,
    input_name: str,
    input_table: Table,
    snapshot: bool = False,
) -> Quiet:
    """Whether a continual task's job would process no time for ``description``.

    The times are :func:`~airflow_provider_ct.core.continual.batch_times`,
    the job's own rule: a ``SNAPSHOT = true`` batch that covers the as-of is
    never quiet, even when the input did not change in it.
    """
    if output is None:
        return _not("the output does not exist yet (first tick)")
    as_of = output.metadata.properties.get(TableKeys.AS_OF)
    if as_of is None or not as_of.isascii() or not as_of.isdigit():
        return _not(f"the output has no as-of ({TableKeys.AS_OF}) yet: first tick")
    head = output.metadata.current_snapshot()
    head_id = None if head is None else head.snapshot_id
    if head_id != description.base_snapshot_id:
        return _not(
            f"the output's head {head_id} is not the description's base "
            f"{description.base_snapshot_id}"
        )
    lower, upper = window(description)
    try:
        timeline = Timeline.of(input_table)
    except CTError as exc:  # the job would fail on it too: let it say so
        return _not(f"cannot read input {input_name}'s history: {exc}")
    times = batch_times(timeline, description, as_of=int(as_of), snapshot=snapshot)
    if times:
        return _not(f"input {input_name} has {len(times)} time(s) to process in [{lower}, {upper})")
    window_text = f"[{lower}, {upper})"
    return Quiet(True, f"{NO_INPUT_CHANGED}: input {input_name} has no change in {window_text}")


# -- staging ------------------------------------------------------------------------------
def stage_empty_batch(
    table: Table,
    description: BatchDescription,
    *,
    record_time: bool,
    summary: Mapping[str, str] | None = None,
) -> tuple[StagedBatch, str]:
    """Stage a batch with no file for a quiet tick; the ordinary append commits it.

    :param record_time: a view's batch states that its contents at the tick's
        time are the head's (one change with no file: ``ct.time`` recorded); a
        continual task's quiet batch only advances the upper, as its job does
        when no input time falls into the batch.
    :return: the staged batch and its manifest path.
    """
    batch, manifest = begin_batch(table, description, summary=summary)
    times: Any = (StagedTime(description.time),) if record_time else ()
    return finish_batch(batch, manifest, times, io=io_properties(table)), manifest
