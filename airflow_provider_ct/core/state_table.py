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

from airflow_provider_ct.core.keys import SummaryKeys, TableKeys
from airflow_provider_ct.exceptions import StateMismatchError

log = logging.getLogger(__name__)

SUFFIX = "__ct_state"


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
        table = _state_table(catalog, name, target, rows.schema)
        properties = {SummaryKeys.QUERY_HASH: digest, SummaryKeys.STATE_INPUTS: pins_json(pins)}
        if table.current_snapshot() is None:
            table.append(rows, snapshot_properties=properties)
        else:
            table.overwrite(rows, snapshot_properties=properties)
    except Exception as exc:
        log.warning("could not keep the aggregate state in %s: %s", name, exc)
        return False
    log.info("kept the aggregate state of %d groups in %s", rows.num_rows, name)
    return True


def _state_table(catalog: Any, name: str, target: str, schema: pa.Schema) -> Any:
    from pyiceberg.exceptions import NoSuchTableError

    properties = {TableKeys.STATE_OF: target, "format-version": "2"}
    try:
        table = catalog.load_table(name)
    except NoSuchTableError:
        return catalog.create_table(name, schema=schema, properties=properties)
    if _fits(table, schema):
        return table
    log.info("%s has other columns than the view's state now: created again", name)
    catalog.drop_table(name)
    return catalog.create_table(name, schema=schema, properties=properties)


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
