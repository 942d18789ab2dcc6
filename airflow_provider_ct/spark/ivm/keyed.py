"""Keyed subqueries in a tick: the keys the changes hold, and the block restricted to them.

When a table read in a keyed subquery changes (:mod:`airflow_provider_ct.ivm.plan.keyed`),
the block's change below any aggregation is ``P_new|K - P_old|K``: ``K`` is
every value of the key in the changed rows of every changed input (each
holds a column equal to the key), and the block is restricted to ``K``
outside and inside its subqueries. The delta terms (:mod:`.terms`) then
read the restricted block once over the inputs as they are and once as
they were; every strategy (linear, grouped, in place) sums those terms as
it sums the delta rules'.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from sqlglot import exp

from airflow_provider_ct.exceptions import KeyedReadError
from airflow_provider_ct.ivm.plan.keyed import place_keyed
from airflow_provider_ct.ivm.plan.planner import Plan

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

    from airflow_provider_ct.spark.ivm.input_changes import Bindings

log = logging.getLogger(__name__)

#: The temp view of block ``i``'s keys (one column, ``__ct_k0``).
KEYS_VIEW = "__ct_keyed_keys_{}"


def keyed_blocks(
    plan: Plan, bindings: Bindings, schemas: Mapping[str, list[str]], catalog_name: str
) -> dict[int, Any]:
    """Block index -> its tree restricted to the keys the changes hold, for every block one
    of whose subqueries reads a changed table; raises :class:`KeyedReadError` when the
    tie does not hold for this tick's changes."""
    out: dict[int, Any] = {}
    for index, block in enumerate(plan.blocks):
        moved = sorted(set(block.fixed) & bindings.changed)
        if not moved or not block.keyed:
            continue  # unkeyed moved tables: the decision runs such a tick in full
        placed = place_keyed(block.tree, schemas, catalog_name)
        if isinstance(placed, str):
            raise KeyedReadError(f"{', '.join(moved)} changed under a subquery: {placed}")
        why = placed.unkeyed(bindings.changed, block.inputs)
        if why is not None:
            raise KeyedReadError(why)
        view = KEYS_VIEW.format(index)
        _keys(bindings, placed.key_columns).createOrReplaceTempView(view)
        keys = exp.select("__ct_k0").from_(view)
        out[index] = placed.restrict(block.tree, keys)
        log.info(
            "block %d: %s changed under keyed subqueries; the rows of the keys the changes "
            "hold are read at both snapshots",
            index,
            ", ".join(moved),
        )
    return out


def _keys(bindings: Bindings, key_columns: Any) -> DataFrame:
    """The distinct key values in the changed rows of every changed input."""
    parts: list[DataFrame] = []
    for name in sorted(bindings.changed):
        change = bindings.changes[name]
        for column in key_columns(name):
            for side in (change.plus, change.minus):
                parts.append(side.select(side[f"`{_named(side, column)}`"].alias("__ct_k0")))
    if not parts:
        raise KeyedReadError("no changed table holds the subqueries' key")
    frame = parts[0]
    for part in parts[1:]:
        frame = frame.union(part)
    return frame.distinct()


def _named(frame: DataFrame, column: str) -> str:
    """``column`` as ``frame`` spells it (the plan lower-cases names; Spark keeps the case)."""
    for name in frame.columns:
        if name.lower() == column:
            return name
    raise KeyedReadError(f"the change does not hold the key column {column}")
