"""A block's parameters evaluated at both snapshots, and put in the driver's tree as placeholders.

A parameter (:mod:`airflow_provider_ct.ivm.plan.parameters`) is an
uncorrelated scalar subquery a conjunct of ``WHERE`` compares the row with.
Spark evaluates it over its tables as the tick pins them and as the last
batch read them, each as ``SELECT (<subquery>)``: Spark's own value, type
and errors (more than one row), and an analysis error if it names a column
of the outer row after all (correlated: not a parameter; the tick runs as
before). A value is kept by the warm driver per subquery and snapshots
(:mod:`.analysis_cache`), so the old side is usually the last tick's new
side, and a tick runs one small job per parameter.

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

from sqlglot import exp

from airflow_provider_ct.core.query import normalize_table_name, qualified_table_name
from airflow_provider_ct.ivm.driver.parameter_rows import Parameter, literal_value
from airflow_provider_ct.ivm.plan.parameters import (
    PLACEHOLDER,
    parameter_conjuncts,
    parameter_query,
)
from airflow_provider_ct.ivm.plan.rewrites import bind_tables
from airflow_provider_ct.ivm.plan.subqueries import fixed_subquery_tables
from airflow_provider_ct.spark.ivm.analysis_cache import analyzed
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
    tables = sorted(
        {
            normalize_table_name(qualified_table_name(t), agg.catalog_name)
            for t in query.find_all(exp.Table)
            if t.name
        }
    )
    if not _alone(agg, query, tables):
        return None
    new = _value(agg, query, {t: pins.get(t) for t in tables})
    old = _value(agg, query, {t: before.get(t) for t in tables})
    if new is None or old is None:
        return None
    (new_value, kind), (old_value, old_kind) = new, old
    if kind != old_kind or not (literal_value(new_value, kind) and literal_value(old_value, kind)):
        log.info("a parameter of type %s is left to Spark", kind)
        return None
    return Parameter(name, old_value, new_value, kind)


def _alone(agg: Aggregation, query: Any, tables: list[str]) -> bool:
    """Whether Spark analyzes the subquery alone (no outer column): kept per query and schemas."""
    from pyspark.errors import PySparkException

    if any(t not in agg.new_views for t in tables):
        return False

    def analyze() -> bool:
        bound = bind_tables(query, agg.new_views, agg.catalog_name).sql(dialect="spark")
        try:
            agg.spark.sql(f"SELECT ({bound}) AS __ct_value").schema  # noqa: B018
        except PySparkException as exc:
            log.info("a scalar subquery is not a parameter: %s", str(exc).split("\n")[0])
            return False
        return True

    return analyzed(agg.analysis_key, f"parameter alone {query.sql(dialect='spark')}", analyze)


def _value(agg: Aggregation, query: Any, snapshots: Mapping[str, int | None]) -> Any:
    """``(value, Arrow type)`` of the subquery over ``snapshots``, or None (kept per snapshots)."""
    sql = query.sql(dialect="spark")
    key = (agg.analysis_key, sql, tuple(sorted(snapshots.items())))
    return analyzed(
        key if agg.analysis_key is not None else None,
        "parameter",
        lambda: _run(agg, query, snapshots),
    )


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
