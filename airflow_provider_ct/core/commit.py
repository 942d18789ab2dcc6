"""Compare-and-append on an Iceberg table's frontier.

The only way this package changes a managed table. One call is one catalog
commit that lands only if

* the table's upper (``ct.upper`` on ``main``) still equals ``expected_upper``,
  and
* ``main`` still points at the snapshot the caller based its work on
  (``expected_head``, by default the head read at the start of this call),

enforced by the catalog itself through an ``AssertRefSnapshotId`` requirement.
If anything else committed in between, the commit fails and we report the
table's current upper: losing a race is an ordinary outcome, not an error.

PyIceberg's ``Table.append`` and ``Transaction.commit_transaction`` retry a
stale commit by rebasing it onto the new head, which would silently turn
compare-and-append into blind append. We therefore build the snapshots in a
transaction but hand its updates to ``catalog.commit_table`` exactly once,
with requirements of our own.

A batch whose files were staged under a new schema (a view's
``on_schema_change``, :mod:`.schema_change`) carries that schema in the same
transaction, ahead of its snapshots: the schema and the batch land in one
commit or not at all, and the commit then also asserts that the table's
schema is still the one the change was planned against.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from airflow_provider_ct.core.faults import failpoint
from airflow_provider_ct.core.frontier import Frontier
from airflow_provider_ct.core.keys import SummaryKeys, TableKeys
from airflow_provider_ct.core.landing import landing_of
from airflow_provider_ct.core.producers import (
    TimedChange,
    discard_producers,
    stage_snapshots,
)
from airflow_provider_ct.core.schema_change import (
    SchemaChange,
    apply_schema_change,
    schema_conflict,
)
from airflow_provider_ct.core.timeline import Timeline
from airflow_provider_ct.exceptions import CommitError, CommitStateUnknownError

if TYPE_CHECKING:
    from pyiceberg.table import Table, Transaction
    from pyiceberg.table.metadata import TableMetadata

log = logging.getLogger(__name__)

#: Sentinel: "use whatever head this call reads".
HEAD_AS_READ: Any = object()


@dataclass(frozen=True)
class AppendResult:
    """What a compare-and-append did.

    ``landed`` is true when the table now holds this batch, either because
    this call committed it or because an earlier attempt with the same
    ``batch_id`` did (``already_landed``). Otherwise ``upper`` is the current
    upper the caller lost to, and ``reason`` says why.
    """

    landed: bool
    upper: Frontier
    head_snapshot_id: int | None
    batch_id: str
    already_landed: bool = False
    snapshot_ids: tuple[int, ...] = ()
    reason: str = ""
    details: dict[str, Any] = field(default_factory=dict)


def _validate_batch(
    expected_upper: Frontier, new_upper: Frontier, changes: Sequence[TimedChange]
) -> None:
    if expected_upper.is_empty:
        raise CommitError("cannot append to a closed collection (its upper is the empty frontier)")
    if not expected_upper < new_upper:
        raise CommitError(
            f"new upper {new_upper.to_summary()} must be beyond the expected upper "
            f"{expected_upper.to_summary()}: uppers only move forward"
        )
    previous: int | None = None
    for change in changes:
        if expected_upper.seals(change.time):
            raise CommitError(
                f"change at time {change.time} is below the expected upper "
                f"{expected_upper.to_summary()}: sealed times are immutable"
            )
        if not new_upper.seals(change.time):
            raise CommitError(
                f"change at time {change.time} is not below the new upper {new_upper.to_summary()}"
            )
        if previous is not None and change.time <= previous:
            raise CommitError(
                f"change times must strictly increase, got {change.time} after {previous}"
            )
        previous = change.time


def commit_once(
    table: Table, tx: Transaction, expected_head: int | None, *, follow: bool = False
) -> None:
    """Commit ``tx``'s updates in one catalog call that asserts ``main`` is ``expected_head``.

    The single, non-rebasing catalog commit of :func:`compare_and_append`,
    also used by commits that are not appends (snapshot expiry, compaction,
    a view's state table): a concurrent commit makes it fail with PyIceberg's
    ``CommitFailedException`` instead of being rebased over.

    :param follow: also do what PyIceberg's own commit does after the catalog
        call: ``table`` takes the new metadata, and old metadata files go as
        the table's ``write.metadata.delete-after-commit.enabled`` and
        ``write.metadata.previous-versions-max`` say (tables the product keeps
        for itself bound their metadata this way).
    """
    from pyiceberg.table.update import AssertRefSnapshotId, AssertTableUUID

    requirements: list[Any] = [
        AssertTableUUID(uuid=table.metadata.table_uuid),
        AssertRefSnapshotId(ref="main", snapshot_id=expected_head),  # type: ignore[call-arg]
    ]
    requirements += [
        r for r in tx._requirements if not isinstance(r, AssertRefSnapshotId | AssertTableUUID)
    ]
    if follow:
        table._do_commit(tx._updates, tuple(requirements))
        return
    table.catalog.commit_table(table, tuple(requirements), tx._updates)


def _adoption_properties(metadata: TableMetadata) -> dict[str, str]:
    """What an empty, unflagged table gets with its first batch, in the same commit.

    The managed flag, and a name mapping so Parquet staged without field ids
    can be read (unless the batch's schema change already set one).
    """
    from pyiceberg.table import TableProperties

    props = {TableKeys.MANAGED: "true"}
    if TableProperties.DEFAULT_NAME_MAPPING not in metadata.properties:
        mapping = metadata.schema().name_mapping.model_dump_json()
        props[TableProperties.DEFAULT_NAME_MAPPING] = mapping
    return props


def compare_and_append(
    table: Table,
    *,
    expected_upper: Frontier,
    new_upper: Frontier,
    batch_id: str,
    add_files: Sequence[str] = (),
    remove_files: Sequence[str] = (),
    time: int | None = None,
    changes: Sequence[TimedChange] | None = None,
    expected_head: int | None = HEAD_AS_READ,
    inputs: Mapping[str, int | None] | None = None,
    extra_summary: Mapping[str, str] | None = None,
    schema_change: SchemaChange | None = None,
) -> AppendResult:
    """Append a batch to ``table`` if its upper is still ``expected_upper``.

    Either pass ``changes`` (one :class:`TimedChange` per data time, each
    becoming one snapshot, all landing in one atomic commit), or the
    single-time shorthand ``add_files`` / ``remove_files`` / ``time`` (``time``
    defaults to the last time below ``new_upper``). With no files and no
    ``changes`` the commit only advances the upper.

    :param table: a PyIceberg table; it is refreshed, and refreshed again after.
    :param expected_upper: the upper the batch was computed against.
    :param new_upper: the upper after the batch; must be beyond ``expected_upper``.
    :param batch_id: unique id of the batch; a retry with the same id that
        finds it already on ``main`` reports success instead of writing twice.
    :param expected_head: the snapshot id the batch was computed against
        (``None`` for an empty table). Defaults to the head read by this call.
    :param inputs: pinned input snapshots, recorded as ``ct.inputs``.
    :param schema_change: the schema the batch's files were staged under
        (:mod:`.schema_change`), committed in the same catalog commit as the
        batch's snapshots and only with them; the commit then also asserts
        the schema it was planned against.
    :return: an :class:`AppendResult`; a lost race is ``landed=False``.
    """
    changes = _as_changes(changes, add_files, remove_files, time, new_upper)
    _validate_batch(expected_upper, new_upper, changes)
    _refresh(table, batch_id, "before committing; nothing was committed")
    timeline, adopt = _writable_timeline(table, expected_upper, expected_head)
    mismatch = _check_preconditions(timeline, expected_upper, expected_head, batch_id)
    mismatch = mismatch or _check_schema(table, timeline, schema_change, batch_id)
    if mismatch is not None:
        return mismatch
    tx = _transaction(table, schema_change)
    producers = stage_snapshots(
        table,
        expected_upper=expected_upper,
        new_upper=new_upper,
        changes=changes,
        batch_id=batch_id,
        inputs=inputs,
        extra_summary=extra_summary,
        tx=tx,
    )[1]
    _set_properties(tx, new_upper, adopt)
    lost = _commit_or_lose(table, tx, producers, timeline, expected_upper, batch_id)
    if lost is not None:
        return lost
    return _landed(table, batch_id, expected_upper, new_upper)


def _set_properties(tx: Transaction, new_upper: Frontier, adopt: bool) -> None:
    """The table properties the batch's commit sets: the upper reached, adoption's."""
    properties = _adoption_properties(tx.table_metadata) if adopt else {}
    properties[TableKeys.UPPER_HIGH_WATER] = new_upper.to_summary()
    tx.set_properties(properties)


def _transaction(table: Table, schema_change: SchemaChange | None) -> Transaction:
    """The batch's transaction, carrying its schema change (if any) ahead of its snapshots.

    First, so that the snapshots record the new schema's id and their files
    are checked against it.
    """
    tx = table.transaction()
    if schema_change is not None:
        apply_schema_change(tx, schema_change)
    return tx


def _check_schema(
    table: Table, timeline: Timeline, change: SchemaChange | None, batch_id: str
) -> AppendResult | None:
    """A lost race if another schema change got to the table first, else ``None``.

    The catalog asserts the same at the commit; checked here too so that
    the transaction is never built on a schema it cannot commit.
    """
    if change is None:
        return None
    conflict = schema_conflict(table.metadata, change)
    if conflict is None:
        return None
    log.info("batch %s on %s lost: %s", batch_id, timeline.table, conflict)
    return AppendResult(
        landed=False,
        upper=timeline.upper,
        head_snapshot_id=timeline.head_snapshot_id,
        batch_id=batch_id,
        reason=conflict,
    )


def _landed(table: Table, batch_id: str, lower: Frontier, upper: Frontier) -> AppendResult:
    """The result of a commit the catalog accepted, read back from the table."""
    _refresh(table, batch_id, "after the commit was accepted")
    landed = Timeline.of(table)
    snapshot_ids = tuple(e.snapshot_id for e in landed.entries if e.batch_id == batch_id)
    log.info(
        "compare-and-append of batch %s on %s landed: upper %s -> %s in %d snapshot(s)",
        batch_id,
        landed.table,
        lower.to_summary(),
        upper.to_summary(),
        len(snapshot_ids),
    )
    return AppendResult(
        landed=True,
        upper=landed.upper,
        head_snapshot_id=landed.head_snapshot_id,
        batch_id=batch_id,
        snapshot_ids=snapshot_ids,
    )


def _as_changes(
    changes: Sequence[TimedChange] | None,
    add_files: Sequence[str],
    remove_files: Sequence[str],
    time: int | None,
    new_upper: Frontier,
) -> list[TimedChange]:
    """The batch as a list of changes, from ``changes`` or the single-time shorthand."""
    if changes is not None:
        if add_files or remove_files or time is not None:
            raise CommitError("pass either changes= or add_files/remove_files/time, not both")
        return list(changes)
    if not (add_files or remove_files or time is not None):
        return []
    if time is None:
        if new_upper.is_empty or new_upper.time == 0:
            raise CommitError("pass time= when the new upper is empty or 0")
        time = int(new_upper.time) - 1  # type: ignore[arg-type]
    return [TimedChange(time, tuple(add_files), tuple(remove_files))]


def _writable_timeline(
    table: Table, expected_upper: Frontier, expected_head: Any
) -> tuple[Timeline, bool]:
    """The table's timeline, and whether this commit adopts a table without our frontier.

    An unflagged table (created by plain PyIceberg or Spark) is adopted when
    it is empty, or when the caller computed its batch against exactly its
    current head from the minimum (a view's first tick over a table the user
    created and perhaps filled): nothing of it is sealed yet, so it starts at
    the minimum. Read as external, its upper would be the wall clock. Any
    other write to such a table is refused: it is not ours.
    """
    timeline = Timeline.of(table)
    if timeline.managed:
        return timeline, False
    head = timeline.head_snapshot_id
    adoptable = head is None or (
        expected_head is not HEAD_AS_READ
        and expected_head == head
        and expected_upper == Frontier.minimum()
    )
    if not adoptable:
        raise CommitError(
            f"table {timeline.table} is not managed by airflow-provider-ct (no "
            f"{TableKeys.MANAGED} property and no {SummaryKeys.UPPER} on main); "
            "refusing to write its frontier"
        )
    return replace(timeline, managed=True, upper=Frontier.minimum()), True


def _commit_or_lose(
    table: Table,
    tx: Transaction,
    producers: Sequence[Any],
    timeline: Timeline,
    expected_upper: Frontier,
    batch_id: str,
) -> AppendResult | None:
    """Commit once; ``None`` when it landed, the outcome when the catalog rejected it.

    A transport or server failure leaves the outcome open: the staged files
    are kept (they may be referenced now) and a retry decides. Anything else
    (a bug) propagates as itself.
    """
    from pyiceberg.exceptions import CommitFailedException

    head = timeline.head_snapshot_id
    try:
        failpoint("commit.before-catalog-commit")
        commit_once(table, tx, head)
        failpoint("commit.after-catalog-commit")
    except CommitFailedException as exc:
        discard_producers(producers)
        _refresh(table, batch_id, "after it rejected the commit")
        current = Timeline.of(table)
        if landing_of(current, batch_id).on_table:  # a concurrent retry of it won
            return _already(current, batch_id)
        log.info(
            "compare-and-append of batch %s on %s lost: expected upper %s at head %s, "
            "now upper %s at head %s (%s)",
            batch_id,
            timeline.table,
            expected_upper.to_summary(),
            head,
            current.upper.to_summary(),
            current.head_snapshot_id,
            exc,
        )
        return AppendResult(
            landed=False,
            upper=current.upper,
            head_snapshot_id=current.head_snapshot_id,
            batch_id=batch_id,
            reason=f"commit rejected by the catalog: {exc}",
        )
    except catalog_transport_errors() as exc:
        raise CommitStateUnknownError(
            f"commit of batch {batch_id} on {timeline.table} has an unknown outcome: {exc}; "
            "retry with the same batch id"
        ) from exc
    return None


def _refresh(table: Table, batch_id: str, when: str) -> None:
    """Re-read ``table`` from its catalog; an unreachable catalog is CommitStateUnknownError.

    Not a raw SQLAlchemy or socket error: every caller of compare-and-append
    already handles an unknown outcome the right way for an outage too (keep
    the staged files, retry the same batch id), and ``when`` tells the
    operator whether anything can have been committed.
    """
    try:
        table.refresh()
    except catalog_transport_errors() as exc:
        raise CommitStateUnknownError(
            f"commit of batch {batch_id} on {'.'.join(table.name())}: the catalog could not be "
            f"read {when} ({exc}); retry with the same batch id"
        ) from exc


def catalog_transport_errors() -> tuple[type[BaseException], ...]:
    """Errors after which the catalog may or may not have committed.

    PyIceberg's own ``CommitStateUnknownException``, OS and socket errors,
    a database error of the SQL catalog (PostgreSQL gone mid-commit), an
    HTTP failure of a REST catalog.
    """
    from pyiceberg.exceptions import CommitStateUnknownException, ServerError

    errors: list[type[BaseException]] = [CommitStateUnknownException, ServerError, OSError]
    try:
        from sqlalchemy.exc import DBAPIError

        errors.append(DBAPIError)
    except ImportError:  # pragma: no cover - the SQL catalog pulls SQLAlchemy in
        pass
    try:
        from requests import RequestException

        errors.append(RequestException)
    except ImportError:  # pragma: no cover
        pass
    return tuple(errors)


def accept_frontier_regression(table: Table) -> Frontier:
    """Accept that ``main`` was deliberately moved back, reopening times from its upper on.

    Records ``main``'s current upper as the highest one reached (one commit,
    asserting the head), after which compare-and-append writes on top of it
    again. Times at or beyond that upper that had been sealed can then be
    rewritten: this is the explicit, logged opt-in that :class:`Timeline`
    asks for when it refuses a regressed table. Returns the accepted upper.
    """
    table.refresh()
    timeline = Timeline.from_metadata(
        table.metadata, name=".".join(table.name()), check_regression=False
    )
    tx = table.transaction()
    tx.set_properties({TableKeys.UPPER_HIGH_WATER: timeline.upper.to_summary()})
    commit_once(table, tx, timeline.head_snapshot_id)
    table.refresh()
    log.warning(
        "accepted a frontier regression on %s: times from %s on are writable again",
        timeline.table,
        timeline.upper.to_summary(),
    )
    return timeline.upper


def _already(timeline: Timeline, batch_id: str) -> AppendResult:
    return AppendResult(
        landed=True,
        already_landed=True,
        upper=timeline.upper,
        head_snapshot_id=timeline.head_snapshot_id,
        batch_id=batch_id,
        snapshot_ids=tuple(e.snapshot_id for e in timeline.entries if e.batch_id == batch_id),
        reason="batch already on main",
    )


def _check_preconditions(
    timeline: Timeline, expected_upper: Frontier, expected_head: Any, batch_id: str
) -> AppendResult | None:
    """A result to return without committing, or ``None`` to go ahead."""
    if landing_of(timeline, batch_id).on_table:
        log.info("batch %s is already on %s; reporting success", batch_id, timeline.table)
        return _already(timeline, batch_id)
    if timeline.upper != expected_upper:
        return AppendResult(
            landed=False,
            upper=timeline.upper,
            head_snapshot_id=timeline.head_snapshot_id,
            batch_id=batch_id,
            reason=f"upper is {timeline.upper.to_summary()}, expected "
            f"{expected_upper.to_summary()}",
        )
    if expected_head is not HEAD_AS_READ and timeline.head_snapshot_id != expected_head:
        return AppendResult(
            landed=False,
            upper=timeline.upper,
            head_snapshot_id=timeline.head_snapshot_id,
            batch_id=batch_id,
            reason=f"head is snapshot {timeline.head_snapshot_id}, expected {expected_head}",
        )
    return None
