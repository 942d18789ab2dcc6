"""In-place aggregates in the write job: Spark aggregates the change, the driver adds.

For a plan with the ``aggregate`` strategy (:mod:`~airflow_provider_ct.ivm.plan.in_place`):

* **The change's state.** The delta rules' terms (:func:`.incremental.terms`)
  give the rows below the aggregation that the inputs' changes add and
  remove; one Spark aggregation turns them into each affected group's signed
  row count and, per argument, signed sum and non-NULL count (a small table,
  pulled through Arrow). ``SUM`` over the signed values keeps Spark's sum
  type, so the view's decimal precision and scale carry over.
* **Kept state plus change**, on the driver, exactly
  (:func:`~airflow_provider_ct.ivm.state.state_add.add_change`, in Arrow), gives the
  affected groups' rows; they are diffed with the target's rows of those
  groups by the usual correction (:func:`.diff.compute_correction`).
* **Rebuild.** Without a usable state (:mod:`~airflow_provider_ct.ivm.state.table`)
  the state of every group is aggregated from the pinned inputs in one
  scan, and the whole target is diffed against its rows: the full
  correction, computed through the state, which is then kept.

``MIN``/``MAX`` keep each group's extremum: the change carries, per
extremum, that of the values it inserted and that of the values it
deleted, and the groups whose extremum may have been deleted are read
again (:mod:`.in_place_rescan`, the ``rescan`` given to :func:`correct`).

Left to the plan's fallback: an argument of a floating-point or other
inexact type under ``SUM``/``AVG``, of a floating-point or nested type
under ``MIN``/``MAX`` (Spark orders ``NaN`` above every number), a
grouping key of a floating-point or nested type (``NaN`` and ``-0.0``
group as Spark normalizes them, not as Python compares them)
(:func:`inexact_types` says which), and more groups
than the driver holds (:class:`NotInPlaceError`, found while pulling them;
``in_place_tick`` turns either into a fallback for the tick's decision).
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from airflow_provider_ct.exceptions import NotInPlaceError, StateMismatchError
from airflow_provider_ct.ivm.driver.arrow_eval import (
    ArrowEvaluator,
    NotOnDriver,
    node_key,
    typed_nodes,
)
from airflow_provider_ct.ivm.driver.in_place_driver import Expressions
from airflow_provider_ct.ivm.driver.in_place_driver import change_state as change_state_rows
from airflow_provider_ct.ivm.driver.kept_state import KeptState, StateDelta, state_rows
from airflow_provider_ct.ivm.driver.parameter_rows import Parameter
from airflow_provider_ct.ivm.plan.in_place import AVG, MAX, SUM, InPlace
from airflow_provider_ct.ivm.plan.planner import Plan
from airflow_provider_ct.ivm.plan.rewrites import bind_tables, rows_select
from airflow_provider_ct.ivm.state.aggregate_state import (
    ROWS,
    Rescan,
    count_column,
    key_column,
    output_rows,
    sum_column,
)
from airflow_provider_ct.ivm.state.extrema import (
    change_schema,
    extremum_column,
    missing_columns,
    removed_column,
)
from airflow_provider_ct.ivm.state.state_add import Added, add_change
from airflow_provider_ct.ivm.state.state_rows import every_row
from airflow_provider_ct.spark.diff import compute_correction
from airflow_provider_ct.spark.fingerprints import Correction
from airflow_provider_ct.spark.ivm.analysis_cache import analyzed, spark_types
from airflow_provider_ct.spark.ivm.in_place_derived import derived_values
from airflow_provider_ct.spark.ivm.in_place_diff import driver_correction
from airflow_provider_ct.spark.ivm.input_changes import Bindings, Scratch
from airflow_provider_ct.spark.ivm.nested import outer_correction
from airflow_provider_ct.spark.ivm.terms import register_restrictions, terms

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

log = logging.getLogger(__name__)

SIGN = "__ct_sign"


@dataclass(frozen=True)
class Aggregation:
    """One view's in-place computation in one job: its plan, inputs and target's shape."""

    spark: SparkSession
    plan: Plan
    catalog_name: str
    #: Input name -> the view its pinned snapshot (``new``) is registered as.
    new_views: Mapping[str, str]
    #: The query's Spark schema, in its select list's order (the rows' types).
    schema: Any
    #: The target's columns, in the table's order (what the diff compares).
    columns: list[str]
    scratch: Scratch
    #: Most groups the driver keeps (the state of every group is held there).
    max_groups: int
    #: Most rows the driver evaluates or diffs without Spark (0: always Spark).
    driver_rows: int = 0
    #: Most rows of the target the driver reads to diff the affected groups'
    #: (a narrow target's limit, :func:`~airflow_provider_ct.core.settings.full_rows_on_driver`).
    target_rows_on_driver: int = 0
    #: The target (PyIceberg) and the snapshot the batch is based on, for the
    #: driver's diff; ``None``: diff in Spark.
    table: Any = None
    base_snapshot_id: int | None = None
    #: What the analyses of this tick depend on (:mod:`.analysis_cache`); None: not kept.
    analysis_key: tuple[Any, ...] | None = None
    #: The inputs (PyIceberg) and their pinned snapshots, for reading stale
    #: extrema on the driver (:mod:`.in_place_rescan`); None: only Spark reads them.
    inputs: Mapping[str, Any] | None = None
    pins: Mapping[str, int | None] | None = None
    #: A nested plan's (:attr:`Plan.nested`): the target's columns, which the outer
    #: query computes; ``schema`` and ``columns`` are then the inner select's.
    target_columns: list[str] | None = None
    #: The block's parameters, evaluated at both snapshots, when its tree holds their
    #: placeholders (the driver's copy, :mod:`.parameters`).
    parameters: tuple[Parameter, ...] = ()

    @property
    def in_place(self) -> InPlace:
        assert self.plan.in_place is not None
        return self.plan.in_place

    @property
    def scalar(self) -> bool:
        return not self.plan.key_sql

    def rows(self, views: Mapping[str, str], block: Any = None) -> DataFrame:
        """The block's rows below the aggregation over ``views``: keys, then arguments.

        :param block: a term's block (a keyed one is restricted); default the plan's.
        """
        block = block or self.plan.blocks[0]
        tree = rows_select(block.tree, self.plan.key_sql, self.in_place.arguments)
        return self.spark.sql(bind_tables(tree, views, self.catalog_name).sql(dialect="spark"))


@dataclass
class InPlaceResult:
    """A tick's correction and the state to keep once its batch is staged."""

    correction: Correction
    #: The whole state, or what changed in it (kept by deltas).
    state: pa.Table | StateDelta
    groups: int


def inexact_types(agg: Aggregation) -> str | None:
    """Why a key or summed argument is not exact (float keys, float sums), or None."""
    from pyspark.sql import types as T

    keys, arguments = _row_fields(agg)
    for field in keys:
        inexact = (T.FloatType, T.DoubleType, T.MapType, T.ArrayType, T.StructType)
        if isinstance(field.dataType, inexact):
            return f"grouping key of type {field.dataType.simpleString()}"
    exact = (T.ByteType, T.ShortType, T.IntegerType, T.LongType, T.DecimalType)
    ordered = (*exact, T.DateType, T.TimestampType, T.TimestampNTZType, T.StringType, T.BooleanType)
    summed = _summed(agg.in_place)
    compared = {j for _, j in agg.in_place.extrema}
    squared = _unsquarable(agg.in_place, [f.dataType for f in arguments], wide=True)
    if squared is not None:
        return squared
    for j, field in enumerate(arguments):
        if j in summed and not isinstance(field.dataType, exact):
            return (
                f"SUM/AVG of {agg.in_place.arguments[j]} ({field.dataType.simpleString()}): "
                "only integral and decimal sums are exact"
            )
        if j in compared and not isinstance(field.dataType, ordered):
            return (
                f"MIN/MAX of {agg.in_place.arguments[j]} ({field.dataType.simpleString()}): "
                "kept only for types the driver orders as Spark does (not floating point)"
            )
    return None


def unsummed_squares(agg: Aggregation) -> str | None:
    """Why Spark may not sum this view's squares over a tick's change, or None.

    A ``BIGINT``'s square may pass :data:`~airflow_provider_ct.ivm.plan.moments.WIDE`:
    Spark's square is then NULL, which the state's counts reveal, and so is a
    rebuild's overflowing sum (NULL beside a count). A *change's* sum that
    overflows is NULL beside a signed count that may be zero (an update), so
    nothing reveals it: Spark sums squares of narrower types only (the
    driver's sums are checked, and take any).
    """
    if not agg.in_place.squares():
        return None
    _, arguments = _row_fields(agg)
    return _unsquarable(agg.in_place, [f.dataType for f in arguments], wide=False)


def _row_fields(agg: Aggregation) -> tuple[list[Any], list[Any]]:
    """The Spark fields of the rows below the aggregation: the keys', the arguments'."""
    fields = analyzed(agg.analysis_key, "rows", lambda: agg.rows(agg.new_views).schema.fields)
    key_count = len(agg.plan.key_sql)
    return list(fields[:key_count]), list(fields[key_count:])


def _unsquarable(in_place: InPlace, kinds: list[Any], *, wide: bool) -> str | None:
    """Why an argument of ``STDDEV``/``VARIANCE`` is not kept in place (``kinds``: the
    arguments' Spark types; ``wide``: ``BIGINT`` allowed), or None."""
    from pyspark.sql import types as T

    integral = (T.ByteType, T.ShortType, T.IntegerType, *((T.LongType,) if wide else ()))
    digits = 19 if wide else 16  # narrow: every square below 10**32
    for base in in_place.squares().values():
        kind = kinds[base]
        if isinstance(kind, integral):
            continue
        decimal = isinstance(kind, T.DecimalType) and kind.scale <= 3
        if decimal and kind.precision - kind.scale <= digits:
            continue
        return (
            f"STDDEV/VARIANCE of {in_place.arguments[base]} ({kind.simpleString()}): "
            f"kept only for integers of at most {64 if wide else 32} bits and decimals of scale "
            f"at most 3 and {digits} integer digits"
            + ("" if wide else " when Spark sums the change (the driver did not take it)")
        )
    return None


def _summed(in_place: InPlace) -> set[int]:
    """Arguments whose sum is kept (those of ``SUM`` and ``AVG``; ``COUNT`` needs none)."""
    return {
        a.argument
        for a in in_place.aggregates
        if a.argument is not None and a.function in (SUM, AVG)
    }


def change_state(agg: Aggregation, bindings: Bindings) -> pa.Table:
    """Each affected group's signed row count, sums and counts, from the inputs' changes."""
    from pyspark.sql import functions as F

    register_restrictions(agg.spark, agg.plan, bindings)
    parts = [
        agg.rows(term.views, term.block).withColumn(SIGN, F.lit(term.sign))
        for term in terms(agg.plan, bindings)
    ]
    frame = parts[0] if parts else agg.rows(agg.new_views).limit(0).withColumn(SIGN, F.lit(1))
    for part in parts[1:]:
        frame = frame.unionByName(part)
    sign = F.col(SIGN)
    summed = _summed(agg.in_place)
    values = [F.sum(sign).cast("long").alias(ROWS)]
    for j in range(len(agg.in_place.arguments)):
        argument = F.col(f"__ct_a{j}")
        total = F.sum(F.when(sign > 0, argument).otherwise(-argument))
        values.append(total.alias(sum_column(j)) if j in summed else _no_sum(j))
        counted = F.sum(F.when(argument.isNotNull(), sign).otherwise(F.lit(0)))
        values.append(counted.cast("long").alias(count_column(j)))
    for e, (function, j) in enumerate(agg.in_place.extrema):
        extremum = F.max if function == MAX else F.min
        argument = F.col(f"__ct_a{j}")
        values.append(extremum(F.when(sign > 0, argument)).alias(extremum_column(e)))
        values.append(extremum(F.when(sign < 0, argument)).alias(removed_column(e)))
    return pull(_grouped(agg, frame).agg(*values), agg.max_groups, "changed groups")


def driver_change_state(
    agg: Aggregation, plus: pa.Table, minus: pa.Table, schema: pa.Schema
) -> pa.Table | None:
    """:func:`change_state` on the driver, from the one input's change as Arrow.

    ``None`` when Spark must compute it (an expression or value
    :mod:`~airflow_provider_ct.ivm.driver.arrow_eval` leaves to Spark; the reason
    is logged). ``schema``: the kept state's.
    """
    schema = changes_schema(agg, schema)
    parts = expressions(agg)
    alias = tables_alias(agg.plan.blocks[0].tree)
    try:
        types = node_types(agg, parts)
        sides = [(1, ArrowEvaluator(plus, alias, types)), (-1, ArrowEvaluator(minus, alias, types))]
        return change_state_rows(sides, parts, schema)
    except NotOnDriver as exc:
        log.info("the change's state is computed by Spark: %s", exc)
        return None


def expressions(agg: Aggregation) -> Expressions:
    from sqlglot import exp

    where = agg.plan.blocks[0].tree.args.get("where")
    return Expressions(
        where=where.this if where is not None else None,
        keys=tuple(exp.maybe_parse(k, dialect="spark") for k in agg.plan.key_sql),
        arguments=tuple(exp.maybe_parse(a, dialect="spark") for a in agg.in_place.arguments),
        summed=frozenset(_summed(agg.in_place)),
        extrema=agg.in_place.extrema,
    )


def changes_schema(agg: Aggregation, kept: pa.Schema) -> pa.Schema:
    """A change's schema from the kept state's (its deleted extrema added).

    :raises StateMismatchError: the kept state has no extremum column (kept
        before the view had them): it is rebuilt.
    """
    count = len(agg.in_place.extrema)
    missing = missing_columns(kept.names, count)
    if missing:
        raise StateMismatchError(f"the kept state has no column {missing[0]} (an older state)")
    return change_schema(kept, count)


def tables_alias(tree: Any) -> str:
    from_ = tree.args.get("from_") or tree.args.get("from")
    return str(from_.this.alias_or_name)


def node_types(agg: Aggregation, parts: Expressions) -> dict[str, pa.DataType]:
    """The Spark type of every node the driver evaluates: one analysis, no job (kept)."""
    what = f"nodes {parts.where is not None and node_key(parts.where)}"
    return analyzed(agg.analysis_key, what, lambda: _node_types(agg, parts))


def _node_types(agg: Aggregation, parts: Expressions) -> dict[str, pa.DataType]:
    from sqlglot import exp

    roots = [*parts.keys, *parts.arguments, *([parts.where] if parts.where is not None else [])]
    nodes = typed_nodes(roots)
    if not nodes:  # COUNT(*) alone: nothing to type (and no select list to analyse)
        return {}
    tree = agg.plan.blocks[0].tree.copy()
    for arg in ("where", "group", "having", "order", "limit", "distinct"):
        tree.set(arg, None)
    tree.set("expressions", [exp.alias_(n.copy(), f"__ct_t{i}") for i, n in enumerate(nodes)])
    bound = bind_tables(tree, agg.new_views, agg.catalog_name).sql(dialect="spark")
    return spark_types(agg.spark, bound, nodes)


def types_over(agg: Aggregation, name: str, alias: str, nodes: list[Any]) -> dict[str, pa.DataType]:
    """The Spark types of ``nodes`` over one input read as ``alias`` (an analysis, kept)."""
    if not nodes:
        return {}
    select = ", ".join(f"{node_key(n)} AS __ct_t{i}" for i, n in enumerate(nodes))
    sql = f"SELECT {select} FROM {agg.new_views[name]} AS {alias}"
    what = f"types {name} {alias} {select}"
    return analyzed(agg.analysis_key, what, lambda: spark_types(agg.spark, sql, nodes))


def full_state(agg: Aggregation) -> pa.Table:
    """The state of every group, aggregated from the pinned inputs (one scan)."""
    from pyspark.sql import functions as F

    summed = _summed(agg.in_place)
    values = [F.count(F.lit(1)).alias(ROWS)]
    for j in range(len(agg.in_place.arguments)):
        argument = F.col(f"__ct_a{j}")
        values.append(F.sum(argument).alias(sum_column(j)) if j in summed else _no_sum(j))
        values.append(F.count(argument).alias(count_column(j)))
    for e, (function, j) in enumerate(agg.in_place.extrema):
        extremum = F.max if function == MAX else F.min
        values.append(extremum(F.col(f"__ct_a{j}")).alias(extremum_column(e)))
    frame = agg.rows(agg.new_views)
    return pull(_grouped(agg, frame).agg(*values), agg.max_groups, "groups")


def _no_sum(j: int) -> Any:
    from pyspark.sql import functions as F

    return F.lit(None).cast("long").alias(sum_column(j))


def _grouped(agg: Aggregation, frame: DataFrame) -> Any:
    """``frame`` grouped by the view's keys, renamed to the state's key columns."""
    keys = [f"__ct_k{i}" for i in range(len(agg.plan.key_sql))]
    return frame.groupBy(*[frame[k].alias(key_column(i)) for i, k in enumerate(keys)])


def pull(frame: DataFrame, limit: int, what: str) -> pa.Table:
    from pyspark.sql.pandas.types import to_arrow_schema

    batches = frame.limit(limit + 1)._collect_as_arrow()
    schema = to_arrow_schema(frame.schema)
    table = pa.Table.from_batches(batches, schema=schema) if batches else schema.empty_table()
    if table.num_rows > limit:
        raise NotInPlaceError(f"more than {limit} {what}: the state is kept on the driver")
    return table


def correct(
    agg: Aggregation,
    persisted: Callable[[], DataFrame | None],
    kept: KeptState | None,
    change: pa.Table,
    rescan: Rescan | None = None,
) -> InPlaceResult:
    """The correction from ``kept + change`` (a rebuild: ``kept`` None, ``change`` the full state).

    ``persisted`` builds the target's head as a Spark frame (None: empty),
    asked for only when the driver cannot diff. Only the groups in
    ``change`` are compared with the target: their rows (``<=>`` on every
    key), or the whole target in a rebuild. ``rescan`` reads the extrema a
    deletion may have removed (:mod:`.in_place_rescan`). The state to keep
    is a delta of the touched groups where the kept state was read by
    their keys (:mod:`~airflow_provider_ct.ivm.driver.kept_state`), else whole.
    """
    keys, arguments = len(agg.plan.key_sql), len(agg.in_place.arguments)
    located = None
    if kept is not None and agg.target_columns is None and not agg.scalar:
        located = kept.located(change, keys)
    added = add_change(
        None if kept is None else kept.whole() if located is None else state_rows(located),
        change,
        keys,
        arguments,
        scalar=agg.scalar,
        extrema=agg.in_place.extrema,
        rescan=rescan,
    )
    state = added.state
    if agg.target_columns is not None:  # nested: the outer query over every group's row
        outer = outer_correction(agg, _every_row(agg, state), persisted, agg.target_columns)
        outer.notes["affected_groups"] = len(added)
        return InPlaceResult(outer, state, state.num_rows)
    kept_as: pa.Table | StateDelta = state
    if kept is not None and located is not None:
        kept_as = kept.delta(added, located)
    rows = functools.partial(_output, agg, added)
    correction = driver_correction(agg, added.key_table(), rows, rebuild=kept is None)
    if correction is None:
        desired = _desired(agg, added)
        have = persisted()
        if have is not None and kept is not None and not agg.scalar:
            have = _affected_rows(agg, have, change)
        correction = compute_correction(desired, have, agg.columns, on_driver=True)
    correction.notes["affected_groups"] = len(added)
    if isinstance(kept_as, StateDelta):
        correction.notes["state_kept_as"] = "delta"
        return InPlaceResult(correction, kept_as, kept_as.groups)
    return InPlaceResult(correction, kept_as, state.num_rows)


def _output(agg: Aggregation, added: Added) -> pa.Table:
    """The affected groups' rows of the view, as its Arrow schema (derived columns included):
    column-wise from their state, or group by group where a column needs it."""
    from pyspark.sql.pandas.types import to_arrow_schema

    schema = to_arrow_schema(agg.schema)
    keys = agg.plan.key_positions
    rows = every_row(added.affected, agg.in_place, keys, schema, scalar=agg.scalar)
    if rows is not None:
        return rows
    groups = added.groups
    return output_rows(
        groups,
        agg.in_place,
        keys,
        schema,
        scalar=agg.scalar,
        derived=derived_values(agg, groups),
    )


def _every_row(agg: Aggregation, state: pa.Table) -> pa.Table:
    """Every group's row of the view (a nested plan's inner): the state's groups are all
    affected."""
    key_count, arguments = len(agg.plan.key_sql), len(agg.in_place.arguments)
    every = Added(state, state, key_count, arguments, len(agg.in_place.extrema))
    return _output(agg, every)


def _desired(agg: Aggregation, added: Added) -> DataFrame:
    rows = _output(agg, added)
    frame = agg.scratch.frame(agg.spark, rows, agg.schema)
    return frame.select(*[f"`{c}`" for c in agg.columns])


def _affected_rows(agg: Aggregation, persisted: DataFrame, change: pa.Table) -> DataFrame:
    """The target's rows whose keys are those of ``change``'s groups."""
    from pyspark.sql import functions as F
    from pyspark.sql import types as T

    names = [key_column(i) for i in range(len(agg.plan.key_sql))]
    fields = [agg.schema.fields[p] for p in agg.plan.key_positions]
    key_schema = T.StructType(
        [T.StructField(n, f.dataType, True) for n, f in zip(names, fields, strict=True)]
    )
    keys = agg.scratch.frame(agg.spark, change.select(names), key_schema)
    condition = None
    for name, position in zip(names, agg.plan.key_positions, strict=True):
        column = agg.schema.fields[position].name
        clause = persisted[f"`{column}`"].eqNullSafe(keys[name])
        condition = clause if condition is None else condition & clause
    return persisted.join(F.broadcast(keys), condition, "left_semi")
