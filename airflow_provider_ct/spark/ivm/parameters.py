"""A block's parameters evaluated at both snapshots, and put in the driver's tree as placeholders.

A parameter (:mod:`airflow_provider_ct.ivm.plan.parameters`) is an
uncorrelated scalar subquery a conjunct of ``WHERE`` compares the row with.
Spark analyzes it alone as ``SELECT (<subquery>)``: its type, or an
analysis error if it names a column of the outer row after all
(correlated: not a parameter; the tick runs as before). Its value over
its tables as the tick pins them and as the last batch read them: one
aggregate over one table is computed on the driver from the table's
cached columns, as Spark computes it (:func:`_on_driver`); anything else
is that query run by Spark (its own value and errors, more than one row
included). A value is kept by the warm driver per subquery and snapshots
(:mod:`.analysis_cache`), so the old side is usually the last tick's new
side.

The driver's tree gets a placeholder column in the subquery's place
(:data:`~airflow_provider_ct.ivm.plan.parameters.PLACEHOLDER`), which the
driver's joins bind to one side's value
(:mod:`airflow_provider_ct.ivm.driver.parameter_rows`). Spark's own route
never sees it: it evaluates the subquery as written (a tick that moved a
parameter's table and that the driver does not take runs in full).
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Mapping
from dataclasses import replace
from typing import TYPE_CHECKING, Any

import pyarrow as pa
from sqlglot import exp

from airflow_provider_ct.core.query import (
    input_name,
    normalize_table_name,
    qualified_table_name,
    reads_query_name,
)
from airflow_provider_ct.exceptions import ChangesUnavailableError
from airflow_provider_ct.ivm.changes.snapshot_files import snapshot_schema
from airflow_provider_ct.ivm.driver.arrow_eval import ArrowEvaluator, NotOnDriver, typed_nodes
from airflow_provider_ct.ivm.driver.keyed_rows import SnapshotRows, cache_refusal, column_bytes
from airflow_provider_ct.ivm.driver.parameter_rows import (
    Parameter,
    aggregate_value,
    literal_value,
)
from airflow_provider_ct.ivm.plan.parameters import (
    PLACEHOLDER,
    AggregateShape,
    aggregate_shape,
    parameter_conjuncts,
    parameter_query,
)
from airflow_provider_ct.ivm.plan.rewrites import bind_tables
from airflow_provider_ct.ivm.plan.subqueries import fixed_subquery_tables
from airflow_provider_ct.spark.ivm.analysis_cache import analyzed
from airflow_provider_ct.spark.ivm.in_place import types_over
from airflow_provider_ct.spark.snapshots import read_at

if TYPE_CHECKING:
    from airflow_provider_ct.spark.ivm.in_place import Aggregation

log = logging.getLogger(__name__)


def inline_parameters(
    agg: Aggregation, pins: Mapping[str, int | None], before: Mapping[str, int | None]
) -> Aggregation:
    """``agg`` with its block's parameters as placeholders and their values; else ``agg``.

    All or none: a parameter Spark cannot evaluate alone, or whose value has
    no exact literal on the driver, leaves the block as it was.
    """
    block = agg.plan.blocks[0]
    if len(agg.plan.blocks) != 1 or not block.params:
        return agg
    tree = block.tree.copy()
    found: list[Parameter] = []
    for index, conjunct in enumerate(parameter_conjuncts(tree)):
        query = parameter_query(conjunct)
        assert query is not None  # parameter_conjuncts found it
        name = f"{PLACEHOLDER}{index}"
        parameter = _evaluated(agg, query, name, pins, before)
        if parameter is None:
            return agg
        query.parent.replace(exp.column(name))
        found.append(parameter)
    fixed = fixed_subquery_tables(tree, agg.catalog_name)
    if isinstance(fixed, str):  # cannot be: the tree only lost subqueries
        return agg
    moved = [p.name for p in found if p.moved]
    log.info(
        "%d parameter(s) of the block evaluated at both snapshots (moved: %s)",
        len(found),
        ", ".join(moved) or "none",
    )
    semi = tuple(n for n in block.semi if n in fixed)
    blocks = (replace(block, tree=tree, fixed=fixed, semi=semi, params=()),)
    plan = replace(agg.plan, blocks=blocks)
    return replace(agg, plan=plan, parameters=tuple(found))


def _evaluated(
    agg: Aggregation,
    query: Any,
    name: str,
    pins: Mapping[str, int | None],
    before: Mapping[str, int | None],
) -> Parameter | None:
    """The parameter's values on both sides, or None (correlated, an error, no literal)."""
    if reads_query_name(query):
        return None  # a CTE's rows are not an input's
    tables = sorted(
        {
            normalize_table_name(qualified_table_name(t), agg.catalog_name)
            for t in query.find_all(exp.Table)
            if t.name
        }
    )
    kind = _alone(agg, query, tables)
    if kind is None:
        return None
    new = _value(agg, query, {t: pins.get(t) for t in tables}, kind)
    old = _value(agg, query, {t: before.get(t) for t in tables}, kind)
    if new is None or old is None:
        return None
    if not (literal_value(new[0], kind) and literal_value(old[0], kind)):
        log.info("a parameter of type %s is left to Spark", kind)
        return None
    on = "driver" if old[1] == new[1] == "driver" else "spark"
    return Parameter(name, old[0], new[0], kind, on)


def _alone(agg: Aggregation, query: Any, tables: list[str]) -> pa.DataType | None:
    """The subquery's type as Spark analyzes it alone; None: it names an outer column, or
    has a type without an Arrow one. Kept per query and schemas."""
    from pyspark.errors import PySparkException
    from pyspark.sql.pandas.types import to_arrow_type

    if any(t not in agg.new_views for t in tables):
        return None

    def analyze() -> pa.DataType | None:
        bound = bind_tables(query, agg.new_views, agg.catalog_name).sql(dialect="spark")
        try:
            field = agg.spark.sql(f"SELECT ({bound}) AS __ct_value").schema.fields[0]
            return to_arrow_type(field.dataType)
        except (PySparkException, TypeError) as exc:
            log.info("a scalar subquery is not a parameter: %s", str(exc).split("\n")[0])
            return None

    return analyzed(agg.analysis_key, f"parameter alone {query.sql(dialect='spark')}", analyze)


def _value(
    agg: Aggregation, query: Any, snapshots: Mapping[str, int | None], kind: pa.DataType
) -> tuple[Any, str] | None:
    """``(value, where computed)`` of the subquery over ``snapshots``, or None: kept per
    snapshots.

    On the driver when it is one aggregate over one table whose columns the
    file cache holds (:func:`_on_driver`), else a Spark job.
    """
    sql = query.sql(dialect="spark")
    key = (agg.analysis_key, sql, tuple(sorted(snapshots.items())))

    def compute() -> tuple[Any, str] | None:
        try:
            return _on_driver(agg, query, snapshots, kind), "driver"
        except NotOnDriver as exc:
            log.info("a parameter is evaluated by Spark: %s", exc)
        found = _run(agg, query, snapshots)
        return None if found is None else (found[0], "spark")

    return analyzed(key if agg.analysis_key is not None else None, "parameter", compute)


def _on_driver(
    agg: Aggregation, query: Any, snapshots: Mapping[str, int | None], kind: pa.DataType
) -> Any:
    """The value of a one-aggregate subquery from the table's cached columns, as Spark's."""
    shape = aggregate_shape(query)
    if shape is None or agg.inputs is None:
        raise NotOnDriver("not one aggregate over one table")
    name = input_name(shape.table, agg.catalog_name)
    if name is None:
        raise NotOnDriver(f"{shape.table.name} is a CTE, not an input")
    table, snapshot = agg.inputs.get(name), snapshots.get(name)
    if table is None:
        raise NotOnDriver(f"{name} is not an input")
    if snapshot is None:
        return aggregate_value(shape.function, pa.nulls(0), 0, kind)
    from pyspark.errors import PySparkException

    nodes = [n for n in (shape.argument, shape.where) if n is not None]
    try:
        types = types_over(agg, name, shape.alias, typed_nodes(nodes))
    except PySparkException as exc:
        raise NotOnDriver(f"the subquery's nodes over {name}: {exc}") from None
    wanted = {c.name.lower() for n in nodes for c in n.find_all(exp.Column)}
    try:
        names = [
            f.name for f in snapshot_schema(table, table.metadata.snapshot_by_id(snapshot)).fields
        ]
        columns = [c for c in names if c.lower() in wanted] or names[:1]
        why = cache_refusal(column_bytes(table, snapshot, columns))
        if why is not None:
            raise NotOnDriver(why)
        rows = SnapshotRows(table, snapshot, columns).where_true(_kept(shape, types))
        evaluator = ArrowEvaluator(rows, shape.alias, types)
        values = evaluator.column(shape.argument) if shape.argument is not None else None
        return aggregate_value(shape.function, values, rows.num_rows, kind)
    except (ValueError, KeyError, ChangesUnavailableError, pa.ArrowException) as exc:
        raise NotOnDriver(f"{name} at {snapshot}: {exc}") from None


def _kept(shape: AggregateShape, types: Mapping[str, pa.DataType]) -> Any:
    """A file's rows the subquery's ``WHERE`` keeps, as a mask."""

    def keep(rows: pa.Table) -> pa.Array:
        if shape.where is None:
            return pa.array([True] * rows.num_rows, pa.bool_())
        return ArrowEvaluator(rows, shape.alias, types).mask(shape.where)

    return keep


def _run(agg: Aggregation, query: Any, snapshots: Mapping[str, int | None]) -> Any:
    from pyspark.errors import PySparkException
    from pyspark.sql.pandas.types import to_arrow_type

    views, made = _views(agg, snapshots)
    try:
        bound = bind_tables(query, views, agg.catalog_name).sql(dialect="spark")
        frame = agg.spark.sql(f"SELECT ({bound}) AS __ct_value")
        kind = to_arrow_type(frame.schema.fields[0].dataType)
        return frame.collect()[0][0], kind
    except (PySparkException, TypeError) as exc:
        log.info("a scalar subquery is not a parameter: %s", str(exc).split("\n")[0])
        return None
    finally:
        for view in made:
            agg.spark.catalog.dropTempView(view)


def _views(
    agg: Aggregation, snapshots: Mapping[str, int | None]
) -> tuple[dict[str, str], list[str]]:
    """A view per table at its snapshot: the tick's own where it pins that snapshot."""
    views: dict[str, str] = {}
    made: list[str] = []
    for name, snapshot in snapshots.items():
        if agg.pins is not None and agg.pins.get(name) == snapshot and name in agg.new_views:
            views[name] = agg.new_views[name]
            continue
        view = f"__ct_param_{uuid.uuid4().hex[:12]}"
        read_at(agg.spark, f"{agg.catalog_name}.{name}", snapshot).createOrReplaceTempView(view)
        views[name] = view
        made.append(view)
    return views, made
