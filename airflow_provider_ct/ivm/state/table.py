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

import json
import logging
from collections.abc import Mapping
from typing import Any

import pyarrow as pa

from airflow_provider_ct.core.file_cache import live_entries
from airflow_provider_ct.core.keys import SummaryKeys, TableKeys
from airflow_provider_ct.exceptions import StateMismatchError

log = logging.getLogger(__name__)

SUFFIX = "__ct_state"
#: Snapshots a state table keeps: its head and the two before it, so a tick
#: that read one just before a newer write still finds its files.
KEPT_SNAPSHOTS = 3
#: Old metadata files are deleted as commits go (Iceberg's own properties).
_METADATA_KEPT = {
    "write.metadata.delete-after-commit.enabled": "true",
    "write.metadata.previous-versions-max": str(KEPT_SNAPSHOTS),
}


def state_table_name(target: str) -> str:
    """The state table of view ``target`` (same namespace)."""
    return f"{target}{SUFFIX}"


def pins_json(pins: Mapping[str, int | None]) -> str:
    return json.dumps(dict(sorted(pins.items())), sort_keys=True)


def read_state(
    catalog: Any, target: str, digest: str, pins: Mapping[str, int | None]
) -> tuple[pa.Table, int]:
    """``(rows, snapshot id)`` of the state kept for ``digest`` at input snapshots ``pins``.

    :raises StateMismatchError: no state, or one kept for another query, other
        input snapshots, or last written by something else (the message says which).
    """
    from pyiceberg.exceptions import NoSuchTableError

    name = state_table_name(target)
    try:
        table = catalog.load_table(name)
    except NoSuchTableError:
        raise StateMismatchError(f"no kept state yet ({name} does not exist)") from None
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
    return table.scan(snapshot_id=snapshot.snapshot_id).to_arrow(), snapshot.snapshot_id


def write_state(
    catalog: Any, target: str, rows: pa.Table, digest: str, pins: Mapping[str, int | None]
) -> bool:
    """Replace the kept state with ``rows`` for ``digest`` at ``pins``; False if it failed.

    Never raises for a failed commit: the tick's batch does not depend on
    it (a later tick rebuilds). A state table whose columns no longer match
    (a changed definition) is dropped and created again.
    """
    name = state_table_name(target)
    # Every column optional: Spark's nullability flags differ between the
    # rebuild's aggregation and a change's, and a required column would refuse one.
    rows = rows.cast(pa.schema([f.with_nullable(True) for f in rows.schema]))
    try:
        table, old_files = _state_table(catalog, name, target, rows.schema)
        properties = {SummaryKeys.QUERY_HASH: digest, SummaryKeys.STATE_INPUTS: pins_json(pins)}
        expired = _replace(table, old_files, rows, properties)
    except Exception as exc:
        log.warning("could not keep the aggregate state in %s: %s", name, exc)
        return False
    _delete_unreachable(table, expired)
    log.info("kept the aggregate state of %d groups in %s", rows.num_rows, name)
    return True


def _replace(
    table: Any, old_files: list[Any], rows: pa.Table, properties: dict[str, str]
) -> list[Any]:
    """Commit one snapshot holding only ``rows``, expiring the oldest snapshots in the same commit.

    The state table is the product's own, so the product keeps it small: each
    tick would otherwise add a snapshot (and a file) for ever. Returns the
    snapshots expired, whose files :func:`_delete_unreachable` removes.
    """
    from pyiceberg.io.pyarrow import _dataframe_to_data_files
    from pyiceberg.table.update.snapshot import ExpireSnapshots

    newest = sorted(table.metadata.snapshots, key=lambda s: s.sequence_number or 0)
    kept = newest[-(KEPT_SNAPSHOTS - 1) :] if KEPT_SNAPSHOTS > 1 else []
    expired = [s for s in newest if s not in kept]
    with table.transaction() as tx:
        producer = tx.update_snapshot(snapshot_properties=properties).overwrite()
        for data_file in old_files:
            producer.delete_data_file(data_file)
        if rows.num_rows:  # no groups: a snapshot of no files (PyIceberg cannot bin-pack none)
            for data_file in _dataframe_to_data_files(tx.table_metadata, rows, table.io):
                producer.append_data_file(data_file)
        producer.commit()
        if expired:
            ExpireSnapshots(tx).by_ids([s.snapshot_id for s in expired]).commit()
    return expired


def _delete_unreachable(table: Any, expired: list[Any]) -> None:
    """Delete the manifest lists, manifests and data files only ``expired`` snapshots reached."""
    if not expired:
        return
    try:
        reachable = _files(table, table.metadata.snapshots)
        for path in sorted(_files(table, expired) - reachable):
            table.io.delete(path)
    except Exception as exc:  # orphans cost storage, never correctness
        log.warning("could not delete expired state files of %s: %s", table.name(), exc)


def _files(table: Any, snapshots: list[Any]) -> set[str]:
    out: set[str] = set()
    for snapshot in snapshots:
        out.add(snapshot.manifest_list)
        for manifest in snapshot.manifests(table.io):
            out.add(manifest.manifest_path)
            out.update(e.data_file.file_path for e in live_entries(manifest, table.io))
    return out


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
    if not _fits(table, schema) or any(task.delete_files for task in tasks):
        log.info("%s has other columns than the view's state now, or deletes: created again", name)
        catalog.drop_table(name)
        return catalog.create_table(name, schema=schema, properties=properties), []
    if any(table.properties.get(k) != v for k, v in _METADATA_KEPT.items()):
        with table.transaction() as tx:
            tx.set_properties(**_METADATA_KEPT)
    return table, [task.file for task in tasks]


def _fits(table: Any, schema: pa.Schema) -> bool:
    """The table's columns are ``schema``'s: same names and types, in order."""
    from pyiceberg.io.pyarrow import schema_to_pyarrow

    have = schema_to_pyarrow(table.schema(), include_field_ids=False)
    if have.names != schema.names:
        return False
    return all(_same_type(h.type, w.type) for h, w in zip(have, schema, strict=True))


def _same_type(have: pa.DataType, want: pa.DataType) -> bool:
    text = {pa.large_string(): pa.string(), pa.large_binary(): pa.binary()}
    return text.get(have, have) == text.get(want, want)
