"""Adopting a table the user created first as a managed collection.

Teams create tables themselves (Spark SQL, PyIceberg) to choose partitioning,
properties and grants, and sometimes fill them before any collection writer
runs. Such a table has no frontier of ours: read as an external table its
upper is the wall clock, and compare-and-append refuses to write it. Adopting
it makes it ours with one compare-and-append on its current head:

* the commit moves the upper from the minimum to ``T + 1`` and carries
  ``ct.time = T`` (the adoption time), so whatever the table holds is the
  collection's contents at ``T``, without rewriting a file (the full
  correction against the table, for a state nobody has stated yet, is empty);
* the same commit sets ``ct.managed`` and a name mapping
  (:func:`~airflow_provider_ct.core.commit.compare_and_append` adopts a table
  whose batch was computed from the minimum against exactly its head), so a
  writer that committed in between makes it lose, and we adopt the new head;
* the table keeps its schema, partition spec, sort order and properties.

Refused before anything is written: a table a view or continual task
maintains (:mod:`airflow_provider_ct.core.owner`), one whose head holds
equality deletes (PyIceberg cannot read them, and every collection write
reads the head), and a declared schema the table does not fit
(:func:`check_schema_fits`). Why the rows mean the same for both kinds, and
what it costs, is in docs/decisions.md ("Adopting a collection").
"""

from __future__ import annotations

import logging
import uuid
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from airflow_provider_ct.collections.registry import CollectionKeys, backoff, table_name
from airflow_provider_ct.core.commit import compare_and_append
from airflow_provider_ct.core.frontier import Frontier, check_timestamp
from airflow_provider_ct.core.keys import TableKeys
from airflow_provider_ct.core.owner import Owner
from airflow_provider_ct.core.tables import UNKNOWN_ROWS, live_rows
from airflow_provider_ct.core.timeline import Timeline
from airflow_provider_ct.exceptions import (
    CollectionError,
    CommitError,
    CommitStateUnknownError,
    OwnershipError,
    SchemaMismatchError,
)

if TYPE_CHECKING:
    import pyarrow as pa
    from pyiceberg.schema import Schema
    from pyiceberg.table import Table
    from pyiceberg.types import IcebergType

log = logging.getLogger(__name__)

#: Give up adopting after this many lost races (writers that keep committing).
DEFAULT_ADOPTION_ATTEMPTS = 20


@dataclass(frozen=True)
class Adoption:
    """One adoption that landed: the table's head became the contents at ``time``.

    ``adopted_snapshot_id`` is the user's head the commit was made on
    (``None``: the table was empty); ``snapshot_id`` is the adoption's own
    snapshot; ``rows`` the head's live rows per its summary (``None`` when
    the summary does not say).
    """

    collection: str
    time: int
    upper: Frontier
    adopted_snapshot_id: int | None
    snapshot_id: int | None
    rows: int | None
    batch_id: str
    attempts: int

    def describe(self) -> str:
        held = (
            "empty" if self.adopted_snapshot_id is None else f"snapshot {self.adopted_snapshot_id}"
        )
        rows = "" if self.rows is None else f", {self.rows} row(s)"
        return (
            f"adopted {self.collection} at {self.time} ({held}{rows} kept as its contents "
            f"at {self.time}); upper now {self.upper.to_summary()}"
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "collection": self.collection,
            "time": self.time,
            "upper": self.upper.to_json(),
            "adopted_snapshot_id": self.adopted_snapshot_id,
            "snapshot_id": self.snapshot_id,
            "rows": self.rows,
            "batch_id": self.batch_id,
            "attempts": self.attempts,
        }


# -- checks (nothing is written by any of them) -----------------------------------------------
def check_not_owned(table: Table) -> None:
    """Refuse a table a view or continual task maintains: two writers would fight over it.

    A collection's writers and a view's ticks would each correct the other's
    rows on every run, and each run would look successful.
    """
    name = table_name(table)
    owner = Owner.of(table)
    if owner is not None:
        raise OwnershipError(
            f"table {name} is maintained by {owner} (a view or continual task); registering "
            "it as a collection would let two definitions correct each other's rows, so "
            f"nothing was written. Register a collection of its own, or unset its properties "
            f"{TableKeys.OWNER_DAG!r} and {TableKeys.OWNER_GROUP!r} if the view is gone"
        )
    if TableKeys.AS_OF in table.metadata.properties:
        raise OwnershipError(
            f"table {name} is the output of a continual task ({TableKeys.AS_OF} is set); "
            "registering it as a collection would give it two writers, so nothing was written"
        )


def check_adoptable(table: Table) -> None:
    """Refuse, before anything is written, a table no collection writer could keep exact."""
    check_not_owned(table)
    snapshot = table.metadata.current_snapshot()
    summary = {} if snapshot is None or snapshot.summary is None else snapshot.summary
    equality = str(summary.get("total-equality-deletes", "0") or "0")
    if equality != "0":
        raise CollectionError(
            f"table {table_name(table)} holds {equality} equality-deleted row(s): PyIceberg "
            "cannot apply equality deletes, and every collection write reads the table's "
            "rows. Nothing was written; rewrite them away first (Spark: CALL "
            "<catalog>.system.rewrite_data_files(table => ..., options => "
            "map('delete-file-threshold', '1'))), then register again"
        )


def _type_text(kind: IcebergType) -> str:
    """A type as text without field ids or nullability: what "the same type" compares."""
    from pyiceberg.types import ListType, MapType, StructType

    if isinstance(kind, StructType):
        return (
            "struct<"
            + ", ".join(f"{f.name}: {_type_text(f.field_type)}" for f in kind.fields)
            + ">"
        )
    if isinstance(kind, ListType):
        return f"list<{_type_text(kind.element_type)}>"
    if isinstance(kind, MapType):
        return f"map<{_type_text(kind.key_type)}, {_type_text(kind.value_type)}>"
    return str(kind)


def _columns(schema: Schema) -> list[tuple[str, str]]:
    return [(f.name, _type_text(f.field_type)) for f in schema.fields]


def declared_iceberg_schema(declared: Schema | pa.Schema) -> Schema:
    """A declared schema as Iceberg converts it when it creates the table (same types)."""
    from pyiceberg.catalog import Catalog

    return Catalog._convert_schema_if_needed(declared)


def check_schema_fits(table: Table, declared: Schema | pa.Schema) -> None:
    """Refuse a table whose columns are not the declared ones: names, order and types.

    Order counts because writers take positional rows (lists) in the
    table's column order. Nullability does not: the declaration through the
    operator cannot say ``NOT NULL``, and the table's own constraint still
    refuses a null when a write brings one.
    """
    have = _columns(table.schema())
    want = _columns(declared_iceberg_schema(declared))
    if have == want:
        return
    have_types, want_types = dict(have), dict(want)
    problems = [
        f"column {n} ({t}) is declared but not in the table" for n, t in want if n not in have_types
    ]
    problems += [
        f"column {n} ({t}) is in the table but not declared" for n, t in have if n not in want_types
    ]
    problems += [
        f"column {n} is {have_types[n]} in the table, {t} in the declaration"
        for n, t in want
        if n in have_types and have_types[n] != t
    ]
    if not problems:
        problems = [
            f"the columns are in another order: the table has {[n for n, _ in have]}, the "
            f"declaration {[n for n, _ in want]}"
        ]
    raise SchemaMismatchError(
        f"table {table_name(table)} does not fit the collection's declared schema: "
        + "; ".join(problems)
        + ". Nothing was written; declare the table's columns "
        + f"({', '.join(f'{n}: {t}' for n, t in have)}) or change the table"
    )


# -- the adoption commit -----------------------------------------------------------------------
def adopt_table(
    table: Table, *, now: int, max_attempts: int = DEFAULT_ADOPTION_ATTEMPTS
) -> Adoption | None:
    """Make ``table`` (no frontier of ours) a managed table whose contents at ``now`` are its head.

    One compare-and-append on the head as read: ``ct.time = now``, upper
    ``now + 1``, no file added or removed. A commit that loses to another
    writer is retried on the new head (what the table holds *then* is
    adopted); one whose outcome was unknown is looked for by its batch id.
    Returns ``None`` when someone else made the table ours first (another
    registration, a tick): it is not adopted twice.
    """
    check_timestamp(now, "adoption time")
    name = table_name(table)
    batch_id = f"adopt-{uuid.uuid4().hex}"
    for attempt in range(1, max_attempts + 1):
        table.refresh()
        timeline = Timeline.of(table)
        if timeline.managed:
            if timeline.find_batch(batch_id) is None:
                log.info("%s was made ours meanwhile by someone else: not adopting it again", name)
                return None
            return _adoption(table, timeline, batch_id, now, attempt)
        check_adoptable(table)
        head = timeline.head_snapshot_id
        try:
            result = compare_and_append(
                table,
                expected_upper=Frontier.minimum(),
                new_upper=Frontier.sealing(now),
                batch_id=batch_id,
                time=now,
                expected_head=head,
                extra_summary={CollectionKeys.ADOPTED: "none" if head is None else str(head)},
            )
        except CommitStateUnknownError as exc:
            log.warning("adoption of %s: %s; checking again", name, exc)
        except CommitError:
            table.refresh()
            if table.metadata.current_snapshot_id == head:
                raise  # not a writer that got in first: a real refusal
            log.info("adoption of %s: the head moved from %s; adopting the new head", name, head)
        else:
            if result.landed:
                return _adoption(table, Timeline.of(table), batch_id, now, attempt)
            log.info("adoption of %s lost (%s); adopting the new head", name, result.reason)
        backoff(attempt)
    raise CommitError(
        f"could not adopt {name} in {max_attempts} attempts: other writers kept committing to it"
    )


def _adoption(table: Table, timeline: Timeline, batch_id: str, now: int, attempt: int) -> Adoption:
    """The record of the adoption ``batch_id`` (made at ``now``) that landed on ``table``."""
    entry = timeline.find_batch(batch_id)
    adopted = None if entry is None else entry.summary.get(CollectionKeys.ADOPTED)
    snapshot_id = None if entry is None else entry.snapshot_id
    rows = live_rows(table, snapshot_id) if snapshot_id is not None else UNKNOWN_ROWS
    adoption = Adoption(
        collection=table_name(table),
        time=now,
        upper=timeline.upper,
        adopted_snapshot_id=int(adopted) if adopted not in (None, "none") else None,
        snapshot_id=snapshot_id,
        rows=None if rows == UNKNOWN_ROWS else rows,
        batch_id=batch_id,
        attempts=attempt,
    )
    log.info("%s", adoption.describe())
    return adoption
