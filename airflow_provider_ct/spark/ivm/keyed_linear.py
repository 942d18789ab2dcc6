"""A linear view's keyed tick on the driver: the keys' rows as they are, against the target's.

TPC-H q2 keeps, per part, the suppliers whose cost is the part's minimum
(a correlated ``MIN`` over four tables). Its rows are not aggregated, so
the in-place route (:mod:`.keyed_driver` summing two signed sides into a
state) does not apply, and Spark's keyed terms evaluate the query twice,
at about its full cost. But a keyed block's rows of a key ``k`` depend
only on the inputs' rows of ``k`` (:mod:`airflow_provider_ct.ivm.plan.keyed`),
so when an output column holds the key (q2 outputs ``p_partkey``), the
target's rows of the keys ``K`` a tick's changes hold must become the
block's rows of ``K`` as the inputs are now, and no other row moves:

1. ``K`` and the block's rows of ``K`` at the pinned snapshots, computed on
   the driver exactly as the in-place route's new side (fetched by key from
   the warm driver's file cache, subqueries per key, Spark's types);
2. the output columns evaluated over those rows;
3. the target's rows whose key column is in ``K`` (by its sorted index, or
   read whole when small), diffed with them by value (multisets): the
   correction inserts what is missing and retracts what is surplus.

One side instead of two, and the target's own rows compared, so a drifted
row of an affected key is corrected too.

Without an output holding the key (TPC-H q20 outputs supplier names), the
target's rows of ``K`` cannot be found by key. When the target is small
enough to read whole, both sides are computed: the target less the
block's rows of ``K`` as the inputs were, plus them as they are
(multisets by value, :func:`moved`), diffed with the target as above. An
old row the target lacks (it drifted) leaves the tick to Spark.

Whatever the driver refuses (an expression or type it does not evaluate,
more rows than ``CT_DRIVER_DIFF_ROWS``, a large target without the key
among its outputs) leaves the tick to Spark's linear route.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar

import pyarrow as pa
import pyarrow.compute as pc
from sqlglot import exp

from airflow_provider_ct.core.tables import live_rows
from airflow_provider_ct.ivm.changes.snapshot_files import DRIVER_READ_FILES, rows_with_positions
from airflow_provider_ct.ivm.driver.arrow_eval import ArrowEvaluator, NotOnDriver
from airflow_provider_ct.ivm.driver.driver_join import (
    NEW,
    OLD,
    conjunct_prefilter,
    place_column,
    single_table_conjuncts,
)
from airflow_provider_ct.ivm.driver.in_place_driver import Expressions, diff_rows
from airflow_provider_ct.ivm.driver.keyed_rows import SideReaders, SnapshotRows
from airflow_provider_ct.ivm.plan.decision import TickDecision
from airflow_provider_ct.ivm.plan.planner import LINEAR
from airflow_provider_ct.spark.fingerprints import Correction
from airflow_provider_ct.spark.ivm.in_place import Aggregation
from airflow_provider_ct.spark.ivm.in_place_tick import aggregation
from airflow_provider_ct.spark.ivm.keyed_driver import (
    KeyedDriverRead,
    changed_keys,
    keyed_read,
    keyed_types,
    report,
    side_rows,
)
from airflow_provider_ct.spark.tick import Computed, Target, Tick

log = logging.getLogger(__name__)

T = TypeVar("T")


def keyed_linear_computed(tick: Tick, target: Target, decision: TickDecision) -> Computed | None:
    """A linear keyed tick computed on the driver, or None (Spark's linear route)."""
    plan = decision.plan
    if plan.strategy != LINEAR or len(plan.blocks) != 1 or not plan.blocks[0].keyed:
        return None
    agg = driver_aggregation(tick, target, decision)
    if agg is None or decision.base is None:
        return None
    inputs = tick.inputs()
    read = keyed_read(tick, agg, inputs, decision.base.before, fixed_moved=False)
    if read is None:
        return None
    sides = driver_sides(tick, decision)
    correction = on_driver_or_none(
        "the keyed linear tick", lambda: _correction(agg, read, inputs, sides)
    )
    if correction is None:
        return None
    details = {**report(read), **correction.notes}
    return Computed.of(decision, correction, details)


def _correction(
    agg: Aggregation,
    read: KeyedDriverRead,
    inputs: Mapping[str, Any],
    sides: Mapping[str, Mapping[str, int | None]],
) -> Correction | None:
    """The target's rows of the changed keys diffed with the block's rows of them now; or,
    without an output holding the key, the whole (small) target moved by the keys' rows
    as they were and as they are."""
    outputs = block_outputs(agg)
    types = keyed_types(agg, read, Expressions(read.shape.condition, outputs, (), frozenset()))
    if types is None:
        return None
    key = _key_output(read, outputs)
    reader = SideReaders(inputs, sides if key is None else {NEW: sides[NEW]}, read.columns)
    keys = changed_keys(read, reader, agg.driver_rows)
    prefilter = conjunct_prefilter(single_table_conjuncts(read.shape), types)
    names = [f.name for f in agg.schema.fields]

    def side(which: str, schema: pa.Schema) -> pa.Table:
        rows = side_rows(read, keys, which, reader, prefilter, types, agg.driver_rows)
        evaluator = ArrowEvaluator.joined(rows, types)
        if read.shape.condition is not None and rows.num_rows:
            kept = rows.filter(evaluator.mask(read.shape.condition))
            evaluator = ArrowEvaluator.joined(kept, types)
        read.details["joined_rows"] = read.details.get("joined_rows", 0) + evaluator.rows.num_rows
        return typed_rows(evaluator, outputs, names, agg.columns, schema)

    if key is not None:
        have = _target_rows(agg, _column(agg.columns, names[key]), keys)
        want = side(NEW, have.schema)
    else:
        have = whole_target(agg)
        want = moved(have, side(OLD, have.schema), side(NEW, have.schema), agg.columns)
    diff = diff_rows(want, have, agg.columns)
    inserted, retracted = diff.inserts.num_rows, len(diff.retractions)
    log.info("keyed linear rows diffed on the driver: +%d -%d", inserted, retracted)
    correction = Correction(diff.inserts, diff.retractions, inserted, retracted, diffed_on="driver")
    correction.notes.update(
        joined_rows=read.details.pop("joined_rows", 0),
        target_rows_read=have.num_rows,
        keyed_sides=1 if key is not None else 2,
    )
    return correction


def driver_aggregation(tick: Tick, target: Target, decision: TickDecision) -> Aggregation | None:
    """The tick's view as a linear driver route takes it; None when no such route may run
    (a verified tick compares two Spark corrections; no base or target to diff with; a
    schema change; the driver's limit is 0)."""
    if decision.verify or decision.base is None or target.schema_change is not None:
        return None
    agg = aggregation(tick, target, decision)
    if agg.table is None or agg.base_snapshot_id is None or agg.driver_rows <= 0:
        return None
    return agg


def driver_sides(tick: Tick, decision: TickDecision) -> dict[str, dict[str, int | None]]:
    """The inputs' snapshots on each side of the tick (its changes read: the clock noted)."""
    assert decision.base is not None
    tick.clock.lap("changes")
    return {NEW: dict(tick.desc.inputs), OLD: dict(decision.base.before)}


def on_driver_or_none(what: str, compute: Callable[[], T]) -> T | None:
    """``compute()``, or None (logged) when the driver refuses what it meets on the way."""
    try:
        return compute()
    except (NotOnDriver, pa.ArrowException) as exc:
        log.info("%s is computed by Spark: %s", what, exc)
        return None


def moved(have: pa.Table, old: pa.Table, new: pa.Table, columns: Sequence[str]) -> pa.Table:
    """The target's rows ``have`` less the keys' rows as they were (``old``), plus them as
    they are (``new``): multisets by value. A row of ``old`` the target lacks means it
    drifted: :class:`NotOnDriver` (Spark's route, which reads it whole)."""
    missing = diff_rows(old, have, columns)
    if missing.inserts.num_rows:
        raise NotOnDriver(f"the target lacks {missing.inserts.num_rows} of the keys' rows")
    kept = set(missing.retractions)  # the target's rows no old row matched
    files = have.column("_file").to_pylist()
    positions = have.column("_pos").to_pylist()
    mask = [(f, p) in kept for f, p in zip(files, positions, strict=True)]
    rest = have.filter(pa.array(mask, pa.bool_())).select(list(columns))
    return pa.concat_tables([rest, new.select(list(columns))])


def block_outputs(
    agg: Aggregation, columns: Mapping[str, Sequence[str]] | None = None
) -> tuple[Any, ...]:
    """The block's select list, aliases removed, a ``*`` or ``t.*`` expanded to the
    columns of its tables in order when ``columns`` (every column of each input) are
    given, as Spark expands it; else a ``*`` is Spark's."""
    block = agg.plan.blocks[0]
    outputs: list[Any] = []
    for item in block.tree.expressions:
        node = item.unalias()
        star = isinstance(node, exp.Star) or (
            isinstance(node, exp.Column) and isinstance(node.this, exp.Star)
        )
        if star and columns is not None:
            outputs.extend(_expanded(block, node, columns))
        elif node.find(exp.Star):
            raise NotOnDriver("a select list the driver does not expand")
        else:
            outputs.append(node)
    if len(outputs) != len(agg.schema.fields):
        raise NotOnDriver("a select list the driver does not expand")
    return tuple(outputs)


def _expanded(block: Any, star: Any, columns: Mapping[str, Sequence[str]]) -> list[Any]:
    """The columns ``star`` stands for: each table's (of ``star``'s table only, for
    ``t.*``), in the order of ``FROM`` and the joins, qualified by the table's alias."""
    tree = block.tree
    joins = list(tree.args.get("joins") or [])
    if any(j.args.get("using") or j.args.get("method") for j in joins):
        raise NotOnDriver("a * over a USING or NATURAL join (its keys listed once)")
    modifiers = star.this if isinstance(star, exp.Column) else star
    if any(modifiers.args.get(k) for k in ("except", "replace", "rename")):
        raise NotOnDriver("a * with EXCEPT, REPLACE or RENAME")
    from_ = tree.args.get("from_") or tree.args.get("from")
    tables = [from_.this if from_ is not None else None, *(j.this for j in joins)]
    if any(not isinstance(t, exp.Table) for t in tables) or len(tables) != len(block.inputs):
        raise NotOnDriver("a * over something other than tables")
    only = star.table.lower() if isinstance(star, exp.Column) else None
    out: list[Any] = []
    for table, name in zip(tables, block.inputs, strict=True):
        alias = table.alias_or_name
        if only is None or alias.lower() == only:
            out.extend(exp.column(c, table=alias) for c in columns[name])
    return out


def _key_output(read: KeyedDriverRead, outputs: Sequence[Any]) -> int | None:
    """The position of an output that is a column in the key's equality class, or None."""
    members = {(alias, column) for _, alias, column in read.placed.members}
    for position, output in enumerate(outputs):
        plain = isinstance(output, exp.Column) and not output.find(exp.Star)
        if plain and place_column(output, read.shape.inputs) in members:
            return position
    return None


def _column(columns: Sequence[str], name: str) -> str:
    """The target's spelling of the query's output ``name``."""
    for column in columns:
        if column.lower() == name.lower():
            return column
    raise NotOnDriver(f"the target has no column {name}")


def typed_rows(
    evaluator: ArrowEvaluator,
    outputs: Sequence[Any],
    names: Sequence[str],
    columns: Sequence[str],
    schema: pa.Schema,
) -> pa.Table:
    """The output columns over the rows, named and typed as the target's."""
    by_name = {
        _column(columns, n): evaluator.column(o) for n, o in zip(names, outputs, strict=True)
    }
    arrays = []
    for column in columns:
        value = by_name[column]
        kind = schema.field(column).type
        arrays.append(value if value.type == kind else value.cast(kind, safe=True))
    return pa.table(arrays, names=list(columns))


def whole_target(agg: Aggregation) -> pa.Table:
    """The target's rows with ``_file`` and ``_pos``, when it is small enough to read."""
    assert agg.base_snapshot_id is not None
    limit = max(agg.driver_rows, agg.target_rows_on_driver)
    if live_rows(agg.table, agg.base_snapshot_id) > limit:
        raise NotOnDriver(f"the target holds more than {limit:,} rows")
    have = rows_with_positions(
        agg.table, agg.base_snapshot_id, agg.columns, None, DRIVER_READ_FILES
    )
    if have is None:
        raise NotOnDriver("the target has more files than the driver reads")
    return have


def _target_rows(agg: Aggregation, column: str, keys: pa.Array) -> pa.Table:
    """The target's rows whose ``column`` is one of ``keys`` (NULL matching NULL), with
    ``_file`` and ``_pos``: looked up in its sorted index, or read whole when small."""
    assert agg.base_snapshot_id is not None
    reader = SnapshotRows(agg.table, agg.base_snapshot_id, agg.columns)
    if reader.files <= DRIVER_READ_FILES:
        found = reader.located_by_index(column, keys)
        if found is not None:
            return found
    have = whole_target(agg)
    wanted = keys.cast(have.schema.field(column).type)
    return have.filter(pc.is_in(have.column(column), value_set=wanted, skip_nulls=False))
