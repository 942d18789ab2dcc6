"""Keyed subqueries in a tick: the keys the changes hold, and the block restricted to them.

When a table read in a keyed subquery changes (:mod:`airflow_provider_ct.ivm.plan.keyed`),
the block's change below any aggregation is ``P_new|K - P_old|K``: ``K`` is
every value of the key in the changed rows of every changed input (each
holds a column equal to the key, or joins one that does: a bridge),
gathered on the driver. Each input whose every read holds the key is
scanned once, restricted to ``K`` and cached, and its rows as they were
derived from the change; the block's own conditions restrict the rest.
The delta terms (:mod:`.terms`) then read the block once over the inputs
as they are and once as they were; every strategy (linear, grouped, in
place) sums those terms as it sums the delta rules'. Under
``refresh="auto"`` the restricted reads are priced first.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from sqlglot import exp

from airflow_provider_ct.exceptions import KeyedReadError
from airflow_provider_ct.ivm.plan.keyed import KeyedRead, place_keyed
from airflow_provider_ct.ivm.plan.planner import Plan
from airflow_provider_ct.ivm.plan.read_estimate import Restriction
from airflow_provider_ct.ivm.plan.sizes import ReadCheck
from airflow_provider_ct.spark.ivm.bindings import NEW, OLD
from airflow_provider_ct.spark.ivm.days import INLINE_KEYS
from airflow_provider_ct.spark.ivm.keyed_local import LocalKeyed, local_views

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

    from airflow_provider_ct.spark.ivm.input_changes import Bindings, InputChange

log = logging.getLogger(__name__)

#: The temp view of block ``i``'s keys (one column, ``__ct_k0``).
KEYS_VIEW = "__ct_keyed_keys_{}"


@dataclass
class KeyedBlock:
    """A block restricted to the keys its changes hold, and the views its two terms read."""

    tree: Any
    #: Input -> the view of its rows at each snapshot (``new``, ``old``): restricted to
    #: the keys for the inputs that hold the key, else the pinned snapshot's view.
    views: dict[str, dict[str, str]]
    #: What the tick cached, released with the changes (:meth:`Bindings.release_arrow`).
    cached: list[DataFrame] = field(default_factory=list)
    #: Where the keys' rows were taken: ``"driver"`` (fetched by key) or ``"spark"`` (a scan).
    rows_on: str = "spark"


def keyed_blocks(
    plan: Plan,
    bindings: Bindings,
    schemas: Mapping[str, list[str]],
    catalog_name: str,
    check_reads: ReadCheck | None = None,
    local: LocalKeyed | None = None,
) -> dict[int, KeyedBlock]:
    """Block index -> the block restricted to the keys the changes hold, for every block
    one of whose subqueries reads a changed table and all of whose subqueries the tie
    holds for this tick's changes (the others' subqueries follow their own rules,
    :mod:`.subquery_terms`); raises :class:`KeyedReadError`, with ``check_reads``
    (``refresh="auto"``), when Spark's restricted reads cost what the full query's do.

    :param local: the driver's fetch of the keys' rows, tried before Spark's reads.
    """
    out: dict[int, KeyedBlock] = {}
    for index, block in enumerate(plan.blocks):
        moved = sorted(set(block.fixed) & bindings.changed)
        if not moved or not block.keyed:
            continue  # no keyed subquery moved: each subquery's rule, :mod:`.subquery_terms`
        placed = place_keyed(block.tree, schemas, catalog_name)
        if isinstance(placed, str) or placed.unkeyed(bindings.changed, block.inputs):
            continue  # each subquery's own rule, :mod:`.subquery_terms`
        out[index] = _keyed_block(bindings, block, placed, index, catalog_name, check_reads, local)
        log.info(
            "block %d: %s changed under keyed subqueries; the rows of the keys the changes "
            "hold are read at both snapshots",
            index,
            ", ".join(moved),
        )
    return out


def _keyed_block(
    bindings: Bindings,
    block: Any,
    placed: KeyedRead,
    index: int,
    catalog_name: str,
    check_reads: ReadCheck | None,
    local: LocalKeyed | None,
) -> KeyedBlock:
    """One block restricted to its keys: their rows fetched by the driver, else read by Spark."""
    values, key_type = _keys(bindings, placed)
    names = sorted(set(block.inputs) | set(block.fixed))
    columns = {name: placed.restricted_columns(name, block.inputs) for name in names}
    fetched = None
    if local is not None:
        fetched = local_views(local, bindings, block.tree, placed, columns, values, catalog_name)
    if fetched is None:
        _price(check_reads, columns, values)
    else:
        values = fetched[1]
    view = KEYS_VIEW.format(index)
    keys = _frame(bindings, values, key_type)
    keys.createOrReplaceTempView(view)
    found = KeyedBlock(None, {}, rows_on="spark" if fetched is None else "driver")
    for name in names:
        if fetched is not None and name in fetched[0]:
            found.views[name] = fetched[0][name]
            continue
        views, cached = _restricted_views(bindings, name, columns[name], keys, values)
        found.views[name] = views
        found.cached.extend(cached)
    restricted = {n for n in names if columns[n]}
    query = exp.select("__ct_k0").from_(view)
    found.tree = placed.restrict(block.tree, query, restricted)
    return found


def _price(
    check_reads: ReadCheck | None, columns: Mapping[str, list[str]], values: list[Any]
) -> None:
    """Raise :class:`KeyedReadError` when Iceberg's scan planning keeps about every file.

    The restricted reads reach the scan as ``IN`` literals (a few keys, one
    column per input) and are priced as such; any other input is read whole.
    TPC-H's changes touch keys spread over every file of ``lineitem``, and
    the tick then reads what the full query reads, plus its own jobs.
    """
    if check_reads is None:
        return
    restrictions: dict[str, list[Restriction]] = {}
    if len(values) <= INLINE_KEYS:
        kept = tuple(v for v in values if v is not None)
        for name, found in columns.items():
            if len(found) == 1:
                restrictions[name] = [Restriction(found[0], kept, has_null=None in values)]
    fallback = check_reads(restrictions)
    if fallback is not None:
        raise KeyedReadError(f"keyed subqueries' reads: {fallback.reason}", dict(fallback.details))


def _restricted_views(
    bindings: Bindings, name: str, columns: list[str], keys: DataFrame, values: list[Any]
) -> tuple[dict[str, str], list[DataFrame]]:
    """The views of input ``name`` at both snapshots, restricted to ``keys`` if it holds them.

    Why: the two terms read every input at both snapshots; an input that
    holds the key is scanned once here, filtered by a broadcast of the keys
    (null-safe: a NULL key is a key), and cached, and its rows as they were
    are those rows minus the rows it gained plus those it lost (the change
    holds only rows of these keys), so the old snapshot is not scanned.
    """
    from pyspark.sql import functions as F

    views = bindings.views[name]
    if not columns:
        return {NEW: views[NEW], OLD: views[OLD]}, []
    new = views[NEW]
    frame = keys.sparkSession.table(new)
    change = bindings.changes.get(name)
    if change is not None:  # the change's columns: those the plan reads
        frame = frame.select(*[f"`{c}`" for c in change.plus.columns])
    if len(columns) == 1 and len(values) <= INLINE_KEYS:  # literals: Iceberg prunes files
        ref = frame[f"`{_named(frame, columns[0])}`"]
        kept = ref.isin([v for v in values if v is not None])
        restricted = frame.filter(kept | ref.isNull() if None in values else kept).cache()
    else:
        condition = None
        for column in columns:
            clause = frame[f"`{_named(frame, column)}`"].eqNullSafe(keys["__ct_k0"])
            condition = clause if condition is None else condition | clause
        restricted = frame.join(F.broadcast(keys), condition, "left_semi").cache()
    names = {NEW: f"{new}_keyed", OLD: f"{views[OLD]}_keyed"}
    restricted.createOrReplaceTempView(names[NEW])
    if name not in bindings.changed or change is None:
        return {NEW: names[NEW], OLD: names[NEW]}, [restricted]
    old = restricted.exceptAll(change.plus).unionAll(change.minus)
    old.createOrReplaceTempView(names[OLD])
    return names, [restricted]


#: Most keys a keyed tick gathers on the driver; more runs the tick in full (a change that
#: touches that many keys reads about what the full query reads).
MAX_KEYS = 1_000_000


def _keys(bindings: Bindings, placed: KeyedRead) -> tuple[list[Any], Any]:
    """The distinct key values the changes hold, and their Spark type, gathered on the
    driver: in the changed rows of every changed input that holds the key (their Arrow
    tables, no Spark job), and in the rows of ``via`` that a bridged input's changed
    rows join (one job each)."""
    values: list[Any] = []
    key_type = None
    for name in sorted(bindings.changed):
        change = bindings.changes[name]
        for column in placed.key_columns(name):
            field_ = change.plus.schema[_named(change.plus, column)]
            key_type = key_type or field_.dataType
            values.extend(_change_values(change, field_.name))
        for bridge in (b for b in placed.bridges if b.input == name):
            found, via_type = _bridged_values(bindings, change, bridge)
            key_type = key_type or via_type
            values.extend(found)
        if len(values) > 4 * MAX_KEYS:
            break
    distinct = list(dict.fromkeys(values))
    if len(distinct) > MAX_KEYS:
        raise KeyedReadError(f"the changes hold more than {MAX_KEYS:,} keys")
    return distinct, key_type


def _frame(bindings: Bindings, values: list[Any], key_type: Any) -> DataFrame:
    """The keys as a frame made on the driver: broadcast to the semi-joins that restrict
    the inputs without a shuffle or a file of its own."""
    from pyspark.sql import types as T

    schema = T.StructType([T.StructField("__ct_k0", key_type or T.LongType(), True)])
    spark = next(iter(bindings.changes.values())).plus.sparkSession
    return spark.createDataFrame([(v,) for v in values], schema)


def _change_values(change: InputChange, column: str) -> list[Any]:
    """A column of the change's rows, from its Arrow tables when the driver holds them."""
    if change.arrow is not None:
        return [v for table in change.arrow for v in table.column(column).to_pylist()]
    sides = (change.plus, change.minus)
    return [r[0] for side in sides for r in side.select(f"`{column}`").collect()]


def _bridged_values(bindings: Bindings, change: InputChange, bridge: Any) -> tuple[list[Any], Any]:
    """The keys of ``via``'s rows (as they are) that the changed values of a bridged input
    join, and the key's type."""
    from pyspark.sql import functions as F

    via = change.plus.sparkSession.table(bindings.views[bridge.via][NEW])
    on = via[f"`{_named(via, bridge.via_column)}`"]
    key = via[f"`{_named(via, bridge.via_key)}`"]
    key_type = via.schema[_named(via, bridge.via_key)].dataType
    column = _named(change.plus, bridge.column)
    joined = list(dict.fromkeys(v for v in _change_values(change, column) if v is not None))
    if not joined:
        return [], key_type
    values = change.plus.select(change.plus[f"`{column}`"].alias("__ct_j")).limit(0)
    values = values.sparkSession.createDataFrame([(v,) for v in joined], values.schema)
    matched = via.join(F.broadcast(values), on == values["__ct_j"], "left_semi")
    return [r[0] for r in matched.select(key).distinct().collect()], key_type


def _named(frame: DataFrame, column: str) -> str:
    """``column`` as ``frame`` spells it (the plan lower-cases names; Spark keeps the case)."""
    for name in frame.columns:
        if name.lower() == column:
            return name
    raise KeyedReadError(f"the change does not hold the key column {column}")
