"""Spark's types for a nested plan's outer query evaluated on the driver (analyses, no job).

The driver evaluates the outer query's pieces (:mod:`airflow_provider_ct.ivm.plan.outer_shape`)
with Spark's type for every node, found where Spark would type it:

* conjuncts, aggregate arguments and plain outputs: over the outer query's
  sources (the inner rows' view and the joined tables), each scalar
  subquery's placeholder written back as the subquery;
* a scalar subquery's own conditions and arguments over the inner rows, its
  aggregates and the value around them as an aggregate query over them;
* a grouped query's aggregates and outputs as that aggregate query;
* the outputs as the whole outer query types them (what the target holds).

The inner rows' view is registered (an empty frame of the inner schema)
only when an analysis is not already kept (:mod:`.analysis_cache`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import pyarrow as pa
from sqlglot import exp

from airflow_provider_ct.ivm.driver.arrow_eval import node_key, typed_nodes
from airflow_provider_ct.ivm.plan.having import INNER_VIEW
from airflow_provider_ct.ivm.plan.outer_shape import (
    MAIN,
    SCALAR_ALIAS,
    OuterScalar,
    OuterShape,
    aggregate_alias,
)
from airflow_provider_ct.ivm.plan.rewrites import bind_tables
from airflow_provider_ct.spark.ivm.analysis_cache import analyzed, spark_types

if TYPE_CHECKING:
    from airflow_provider_ct.spark.ivm.in_place import Aggregation


def outer_types(agg: Aggregation, shape: OuterShape) -> dict[str, pa.DataType]:
    """Every node of ``shape`` the driver evaluates, by node key -> its Arrow type."""
    scalars = {f"s{s.index}": s.subquery for s in shape.scalars}

    def back(node: Any) -> Any:
        if isinstance(node, exp.Column) and node.table == SCALAR_ALIAS:
            return scalars[node.name].copy()
        return node

    plain = [*shape.early, *shape.late, *_arguments(shape.calls)]
    if shape.group is None:
        plain += [o for _, o in shape.outputs]
    else:
        plain += list(shape.group)
    out = _typed(agg, typed_nodes(plain), back, lambda: _sources(agg, shape), "outer rows")
    for scalar in shape.scalars:
        out.update(_scalar_types(agg, shape, scalar))
    if shape.group is not None:
        out.update(_group_types(agg, shape))
    return out


def _arguments(calls: tuple[Any, ...]) -> list[Any]:
    return [c.this for c in calls if c.this is not None and not isinstance(c.this, exp.Star)]


def _sources(agg: Aggregation, shape: OuterShape) -> str:
    joined = [f"{agg.new_views[j.name]} AS {j.alias}" for j in shape.joins]
    return ", ".join([shape.inner_source(shape.alias), *joined])


def _scalar_types(
    agg: Aggregation, shape: OuterShape, scalar: OuterScalar
) -> dict[str, pa.DataType]:
    def source() -> str:
        return shape.inner_source(scalar.alias)

    own = [scalar.where] if scalar.where is not None else []
    out = _typed(agg, typed_nodes([*own, *_arguments(scalar.calls)]), None, source, "scalar rows")
    nodes = [*scalar.calls, *typed_nodes([scalar.value])]
    out.update(_typed(agg, nodes, _calls_back(scalar.index, scalar.calls), source, "scalar"))
    return out


def _group_types(agg: Aggregation, shape: OuterShape) -> dict[str, pa.DataType]:
    assert shape.group is not None
    having = [shape.having] if shape.having is not None else []
    nodes = [*shape.calls, *typed_nodes([*(o for _, o in shape.outputs), *having])]
    grouped = ", ".join(g.sql(dialect="spark") for g in shape.group)

    def source() -> str:
        return _sources(agg, shape) + (f" GROUP BY {grouped}" if grouped else "")

    return _typed(agg, nodes, _calls_back(MAIN, shape.calls), source, "groups")


def _calls_back(index: int, calls: tuple[Any, ...]) -> Callable[[Any], Any]:
    def back(node: Any) -> Any:
        if isinstance(node, exp.Column) and node.table == aggregate_alias(index):
            return calls[int(node.name[1:])].copy()
        return node

    return back


def _typed(
    agg: Aggregation,
    nodes: list[Any],
    back: Callable[[Any], Any] | None,
    source: Callable[[], str],
    what: str,
) -> dict[str, pa.DataType]:
    """``nodes`` typed as the items of ``SELECT ... FROM source()`` (each written ``back``).

    Kept by the items (the nodes qualified by the query's aliases): the source
    is built, and the inputs' views registered, only when the analysis runs.
    """
    if not nodes:
        return {}
    written = [n.copy().transform(back) if back is not None else n for n in nodes]
    items = ", ".join(f"{node_key(n)} AS __ct_t{i}" for i, n in enumerate(written))

    def compute() -> dict[str, pa.DataType]:
        register_inner(agg)
        return spark_types(agg.spark, f"SELECT {items} FROM {source()}", nodes)

    return analyzed(agg.analysis_key, f"outer {what} {items}", compute)


def register_inner(agg: Aggregation) -> None:
    """The inner rows' view, empty, with the inner select's schema (for analyses only)."""
    agg.spark.createDataFrame([], agg.schema).createOrReplaceTempView(INNER_VIEW)


def output_schema(agg: Aggregation, tree: Any, columns: list[str]) -> pa.Schema:
    """The target's columns as the whole outer query (``tree``, markers typed) types them."""
    from pyspark.sql.pandas.types import to_arrow_schema

    def compute() -> pa.Schema:
        register_inner(agg)
        sql = bind_tables(tree, agg.new_views, agg.catalog_name).sql(dialect="spark")
        schema = to_arrow_schema(agg.spark.sql(sql).schema)
        by_name = {f.name.lower(): f for f in schema}
        return pa.schema([by_name[c.lower()].with_name(c) for c in columns])

    what = f"outer output {tree.sql(dialect='spark')} {columns}"
    return analyzed(agg.analysis_key, what, compute)
