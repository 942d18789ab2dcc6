"""Where a view's in-place aggregate state lives: an Iceberg table beside the target.

``<target>__ct_state`` holds one row per group (see
:mod:`.aggregate_state`). Iceberg has no transaction across two tables, so
the state is a *cache*: each snapshot of it records the definition it was
computed for (the query's hash) and the input snapshots it reflects
(``ct.state-inputs``). A tick uses it only when those are exactly the
definition it runs and the snapshots its change starts from (the pins of
the target's last batch); anything else (no state yet, a crash or a lost
race between the target's commit and this one, a hand edit, a changed
query) makes the tick rebuild it from the inputs. Correctness never depends
on this table; only the next tick's cost does. Keyed by input snapshots,
not by the target's batches, because the state is a function of the inputs
alone: a quiet tick that moved the target's frontier without new input
snapshots leaves it valid.

A hand edit is caught because every snapshot this module writes carries
both keys, and a snapshot written by anything else carries neither.
"""

from __future__ import annotations

import contextlib
import json
import logging
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from airflow_provider_ct.core.batch_files import BatchFiles
from airflow_provider_ct.core.commit import commit_once
from airflow_provider_ct.core.expiry import delete_files, unreachable_files
from airflow_provider_ct.core.keys import SummaryKeys, TableKeys
from airflow_provider_ct.core.producers import stage_files, staged_data_files
from airflow_provider_ct.core.schema_change import diff_schemas
from airflow_provider_ct.core.staging import batch_data_dir, new_attempt_id
from airflow_provider_ct.core.tables import load_table_or_none, state_table_name
from airflow_provider_ct.exceptions import StateMismatchError

log = logging.getLogger(__name__)

#: Snapshots a state table keeps: its head and the two before it, so a tick
#: that read one just before a newer write still finds its files.
KEPT_SNAPSHOTS = 3
#: Old metadata files are deleted as commits go (Iceberg's own properties).
_METADATA_KEPT = {
    "write.metadata.delete-after-commit.enabled": "true",
    "write.metadata.previous-versions-max": str(KEPT_SNAPSHOTS),
}


def pins_json(pins: Mapping[str, int | None]) -> str:
    return json.dumps(dict(sorted(pins.items())), sort_keys=True)


@dataclass(frozen=True)
class StateHead:
    """The kept state's table at the snapshot a tick starts from (checked, not read)."""

    table: Any
    snapshot_id: int

    @property
    def data_files(self) -> int:
        """Live data files (every delta adds one; a rewrite leaves one per partition)."""
        return int(self._summary.get("total-data-files", "0"))

    @property
    def groups(self) -> int:
        """Live rows: the groups kept."""
        records = int(self._summary.get("total-records", "0"))
        return records - int(self._summary.get("total-position-deletes", "0"))

    @property
    def _summary(self) -> Mapping[str, str]:
        snapshot = self.table.metadata.snapshot_by_id(self.snapshot_id)
        return snapshot.summary if snapshot is not None and snapshot.summary else {}


def state_head(catalog: Any, target: str, digest: str, pins: Mapping[str, int | None]) -> StateHead:
    """The state kept for ``digest`` at input snapshots ``pins``, without reading it.

    :raises StateMismatchError: no state, or one kept for another query, other
        input snapshots, or last written by something else (the message says which).
    """
    name = state_table_name(target)
    table = load_table_or_none(catalog, name)
    if table is None:
        raise StateMismatchError(f"no kept state yet ({name} does not exist)")
    snapshot = table.current_snapshot()
    summary = snapshot.summary if snapshot is not None else None
    kept_for = summary.get(SummaryKeys.STATE_INPUTS) if summary is not None else None
    if snapshot is None or summary is None or kept_for is None:
        raise StateMismatchError(f"{name}'s head was not written by a tick (an edit?)")
    if summary.get(SummaryKeys.QUERY_HASH) != digest:
        raise StateMismatchError(f"{name} was kept for another definition of the view")
    if kept_for != pins_json(pins):
        raise StateMismatchError(
            f"{name} reflects input snapshots {kept_for}, the change starts from {pins_json(pins)}"
        )
    return StateHead(table, snapshot.snapshot_id)


def read_state(
    catalog: Any, target: str, digest: str, pins: Mapping[str, int | None]
) -> tuple[pa.Table, int]:
    """``(rows, snapshot id)`` of the state kept for ``digest`` at input snapshots ``pins``.

    :raises StateMismatchError: as :func:`state_head`.
    """
    head = state_head(catalog, target, digest, pins)
    return head.table.scan(snapshot_id=head.snapshot_id).to_arrow(), head.snapshot_id


def write_state_delta(
    head: StateHead,
    rows: pa.Table,
    retracted: Sequence[tuple[str, int]],
    digest: str,
    pins: Mapping[str, int | None],
    *,
    batch_id: str,
) -> bool:
    """Keep the state by what changed: ``rows`` (the touched groups' new rows) added,
    the ``retracted`` positions (their old rows) deleted; False if it failed.

    One commit asserting ``head``: the state's untouched groups are neither
    read nor written, so a tick costs its touched groups, not the state's
    size (a million-group state took 0.5 s to write whole). Never raises,
    like :func:`write_state`: a state not kept is rebuilt by a later tick.
    """
    table, staged = head.table, []
    try:
        rows = rows.cast(_nullable(rows.schema)).select(table.schema().column_names)
        folder = batch_data_dir(table.location(), batch_id, new_attempt_id())
        files = BatchFiles(table, folder)
        data = [part.file.path for part in files.write_rows(rows)] if rows.num_rows else []
        staged += data
        deletes = [f.path for f in files.write_deletes(retracted)] if retracted else []
        staged += deletes
        properties = {SummaryKeys.QUERY_HASH: digest, SummaryKeys.STATE_INPUTS: pins_json(pins)}
        tx = table.transaction()
        stage_files(table, tx, data, deletes, properties)
        expired = _expire(table, tx)
        commit_once(table, tx, head.snapshot_id, follow=True)
    except Exception as exc:
        log.warning("could not keep the aggregate state in %s: %s", table.name(), exc)
        if staged:
            delete_files(table, staged)  # a loser's files; the sweep finds them if this fails
        return False
    _delete_unreachable(table, expired)
    log.info(
        "kept the aggregate state in %s: %d groups written, %d retracted",
        ".".join(table.name()),
        rows.num_rows,
        len(retracted),
    )
    return True


def _nullable(schema: pa.Schema) -> pa.Schema:
    """Every column optional: Spark's nullability flags differ between the rebuild's
    aggregation and a change's, and a required column would refuse one."""
    return pa.schema([f.with_nullable(True) for f in schema])


def write_state(
    catalog: Any,
    target: str,
    rows: pa.Table,
    digest: str,
    pins: Mapping[str, int | None],
    *,
    batch_id: str | None = None,
) -> bool:
    """Replace the kept state with ``rows`` for ``digest`` at ``pins``; False if it failed.

    Never raises for a failed write or commit: the tick's batch does not
    depend on it (a later tick rebuilds). A state table whose columns no
    longer match (a changed definition) is dropped and created again.

    The files go where every staged batch's go (``data/ct_batch=<id>/attempt=<a>/``,
    through :class:`~airflow_provider_ct.core.batch_files.BatchFiles`), the
    commit asserts the head it replaces (:func:`~airflow_provider_ct.core.commit.commit_once`),
    and a failed commit deletes its own files; what a crash or an outage
    leaves there, the sweep (``core/sweep.py``, run on the state table by
    ``maintain``) removes.

    :param batch_id: the target's batch this state belongs to (its folder's name).
    """
    name = state_table_name(target)
    rows = rows.cast(_nullable(rows.schema))
    table, staged = None, []
    try:
        table, old_files = _state_table(catalog, name, target, rows.schema)
        folder = batch_data_dir(table.location(), batch_id or _state_batch_id(), new_attempt_id())
        staged = [part.file.path for part in BatchFiles(table, folder).write_rows(rows)]
        properties = {SummaryKeys.QUERY_HASH: digest, SummaryKeys.STATE_INPUTS: pins_json(pins)}
        expired = _replace(table, old_files, staged, properties)
    except Exception as exc:
        log.warning("could not keep the aggregate state in %s: %s", name, exc)
        if table is not None and staged:
            delete_files(table, staged)  # a loser's files; the sweep finds them if this fails
        return False
    _delete_unreachable(table, expired)
    log.info("kept the aggregate state of %d groups in %s", rows.num_rows, name)
    return True


def _state_batch_id() -> str:
    """A batch folder for a state written outside a tick (tests, a rebuild by hand)."""
    return f"state-{uuid.uuid4().hex[:12]}"


def _replace(
    table: Any, old_files: list[Any], staged: list[str], properties: dict[str, str]
) -> list[Any]:
    """Commit one snapshot holding only ``staged``; expire the oldest snapshots in that commit.

    The state table is the product's own, so the product keeps it small: each
    tick would otherwise add a snapshot (and a file) for ever. The commit
    asserts the head it was planned from; a concurrent writer makes it fail.
    Returns the snapshots expired, whose files the caller deletes.
    """
    head = table.metadata.current_snapshot()
    tx = table.transaction()
    producer = tx.update_snapshot(snapshot_properties=properties).overwrite()
    for data_file in old_files:
        producer.delete_data_file(data_file)
    for data_file in staged_data_files(table, tx.table_metadata, staged):
        producer.append_data_file(data_file)
    producer.commit()
    expired = _expire(table, tx)
    commit_once(table, tx, head.snapshot_id if head is not None else None, follow=True)
    return expired


def _expire(table: Any, tx: Any) -> list[Any]:
    """Expire, in ``tx``, all but the newest snapshots (the one ``tx`` adds is kept);
    returns those expired, whose files the caller deletes after the commit."""
    from pyiceberg.table.update.snapshot import ExpireSnapshots

    newest = sorted(table.metadata.snapshots, key=lambda s: s.sequence_number or 0)
    kept = newest[-(KEPT_SNAPSHOTS - 1) :] if KEPT_SNAPSHOTS > 1 else []
    expired = [s for s in newest if s not in kept]
    if expired:
        ExpireSnapshots(tx).by_ids([s.snapshot_id for s in expired]).commit()
    return expired


def _delete_unreachable(table: Any, expired: list[Any]) -> None:
    """Delete the files only ``expired`` snapshots reached (after the commit that expired them)."""
    if not expired:
        return
    try:
        gone = unreachable_files(table.io, expired, table.metadata.snapshots, live_only=True)
        delete_files(table, gone)
    except Exception as exc:  # orphans cost storage, never correctness
        log.warning("could not delete expired state files of %s: %s", table.name(), exc)


def _state_table(catalog: Any, name: str, target: str, schema: pa.Schema) -> tuple[Any, list[Any]]:
    """The state table to write ``schema``'s rows to, and the data files its head holds.

    Created when missing; created again when its columns no longer fit or its
    head has delete files (an edit: a snapshot of data files only would keep
    applying them). A table from before metadata files were bounded gets the
    properties that bound them.
    """
    from pyiceberg.exceptions import NoSuchTableError

    properties = {TableKeys.STATE_OF: target, "format-version": "2", **_METADATA_KEPT}
    try:
        table = catalog.load_table(name)
    except NoSuchTableError:
        return catalog.create_table(name, schema=schema, properties=properties), []
    tasks = list(table.scan().plan_files()) if table.current_snapshot() is not None else []
    if diff_schemas(table.schema(), schema) or any(task.delete_files for task in tasks):
        # Deletes: an edit's, or the deltas' (write_state_delta) a whole write replaces.
        log.info("%s has other columns than the view's state now, or deletes: created again", name)
        try:
            catalog.purge_table(name)  # its files too: nothing else reads them
        except Exception as exc:  # a catalog that does not purge: dropped, files left
            log.info("could not purge %s (%s): dropped instead", name, exc)
            with contextlib.suppress(NoSuchTableError):
                catalog.drop_table(name)
        return catalog.create_table(name, schema=schema, properties=properties), []
    if any(table.properties.get(k) != v for k, v in _METADATA_KEPT.items()):
        with table.transaction() as tx:
            tx.set_properties(**_METADATA_KEPT)
    return table, [task.file for task in tasks]
