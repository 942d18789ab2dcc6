"""Spark's types for a keyed block's subqueries evaluated on the driver (analyses, no job).

The driver's evaluator (:class:`~airflow_provider_ct.ivm.driver.arrow_eval.ArrowEvaluator`)
computes every node exactly and casts it to the type Spark gives it, or
refuses. A keyed part (:mod:`airflow_provider_ct.ivm.plan.keyed_parts`)
holds nodes in four places, each typed where Spark would type it:

* its tables' own conditions and its aggregates' arguments: over those
  tables alone (joined as the subquery joins them);
* its aggregates and the expression around them: as an aggregate query
  over those tables (the placeholders written back as the aggregates);
* ``EXISTS``' conditions between the two rows: over the subquery's tables
  and the block tables they name;
* the conjunct in the block: over the block's tables, the placeholder
  written back as the subquery itself (a scalar subquery's type is its
  value's); ``IN`` and ``EXISTS`` placeholders are booleans. A subquery's
  own subqueries are typed alike, their conjuncts over that subquery's
  tables.

Each analysis is kept per schemas (:mod:`.analysis_cache`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pyarrow as pa
from sqlglot import exp

from airflow_provider_ct.ivm.driver.arrow_eval import node_key, typed_nodes
from airflow_provider_ct.ivm.plan.keyed_parts import SCALAR, VALUE_ALIAS, KeyedPart
from airflow_provider_ct.ivm.plan.rewrites import bind_tables
from airflow_provider_ct.ivm.plan.scopes import table_scope
from airflow_provider_ct.spark.ivm.analysis_cache import analyzed, spark_types
from airflow_provider_ct.spark.ivm.in_place import Aggregation, types_over


def part_types(agg: Aggregation, parts: Sequence[KeyedPart]) -> dict[str, pa.DataType]:
    """Every node of ``parts`` the driver evaluates, by node key -> its Arrow type."""
    out: dict[str, pa.DataType] = {}
    for part in parts:
        own = [part.where] if part.where is not None else []
        own += [a.this for a in part.aggregates if a.this is not None]
        own = [n for n in own if not isinstance(n, exp.Star)]
        out.update(_own_types(agg, part, typed_nodes(own)))
        if part.aggregates or part.value is not None:
            out.update(_value_types(agg, part))
        if part.correlated is not None:
            out.update(_correlated_types(agg, part))
        out.update(_conjunct_types(agg, part))
        out.update(part_types(agg, part.parts))
    return out


def _scope(agg: Aggregation, part: KeyedPart) -> Any:
    """The ``SELECT`` whose ``WHERE`` holds the part: the block, or the subquery around it."""
    return part.scope if part.scope is not None else agg.plan.blocks[0].tree


def _own_types(agg: Aggregation, part: KeyedPart, nodes: list[Any]) -> dict[str, pa.DataType]:
    """Nodes over the subquery's own tables: one table's as any input's, several joined."""
    if len(part.reads) == 1:
        return types_over(agg, part.input, part.alias, nodes)
    if not nodes:
        return {}
    select = ", ".join(f"{node_key(n)} AS __ct_t{i}" for i, n in enumerate(nodes))
    sql = f"SELECT {select} FROM {_reads(agg, part)}"
    return analyzed(
        agg.analysis_key, f"keyed own {sql}", lambda: spark_types(agg.spark, sql, nodes)
    )


def _reads(agg: Aggregation, part: KeyedPart) -> str:
    """The subquery's tables as a ``FROM`` list over the pinned inputs' views."""
    return ", ".join(f"{agg.new_views[name]} AS {alias}" for alias, name in part.reads)


def _value_types(agg: Aggregation, part: KeyedPart) -> dict[str, pa.DataType]:
    """The aggregates and the value around them, as an aggregate query over the table."""
    nodes = list(part.aggregates)
    if part.value is not None:
        nodes += typed_nodes([part.value])
    items = ", ".join(
        f"{part.original(n).sql(dialect='spark')} AS __ct_t{i}" for i, n in enumerate(nodes)
    )
    sql = f"SELECT {items} FROM {_reads(agg, part)}"
    return analyzed(
        agg.analysis_key, f"keyed value {sql}", lambda: spark_types(agg.spark, sql, nodes)
    )


def _correlated_types(agg: Aggregation, part: KeyedPart) -> dict[str, pa.DataType]:
    """``EXISTS``' conditions between the rows: over its table and the block's they name."""
    scope = table_scope(_scope(agg, part), agg.catalog_name)
    named = {c.table.lower() for c in part.correlated.find_all(exp.Column)}
    reads = [_reads(agg, part)]
    reads += [
        f"{agg.new_views[scope[a]]} AS {a}" for a in sorted(named - {a for a, _ in part.reads})
    ]
    nodes = typed_nodes([part.correlated])
    items = ", ".join(f"{node_key(n)} AS __ct_t{i}" for i, n in enumerate(nodes))
    sql = f"SELECT {items} FROM {', '.join(reads)}"
    return analyzed(
        agg.analysis_key, f"keyed correlated {sql}", lambda: spark_types(agg.spark, sql, nodes)
    )


def _conjunct_types(agg: Aggregation, part: KeyedPart) -> dict[str, pa.DataType]:
    """The conjunct's nodes over the block's tables, the subquery in its placeholder's place."""
    if part.kind != SCALAR:
        return {node_key(part.placeholder): pa.bool_()}
    subquery = _subquery(part.conjunct)

    def back(node: Any) -> Any:
        if isinstance(node, exp.Column) and node.table == VALUE_ALIAS:
            return subquery.copy()
        return node

    nodes = typed_nodes([part.replaced])
    tree = _scope(agg, part).copy()
    for arg in ("where", "group", "having", "order", "limit", "distinct"):
        tree.set(arg, None)
    items = [exp.alias_(n.copy().transform(back), f"__ct_t{i}") for i, n in enumerate(nodes)]
    tree.set("expressions", items)
    sql = bind_tables(tree, agg.new_views, agg.catalog_name).sql(dialect="spark")
    # Kept by the placeholder's name too: the SQL writes the subquery back, and the same
    # subquery is another part's index on a tick whose fixed lists were inlined.
    what = f"keyed conjunct {node_key(part.placeholder)} {sql}"
    return analyzed(agg.analysis_key, what, lambda: spark_types(agg.spark, sql, nodes))


def _subquery(conjunct: Any) -> Any:
    """The conjunct's scalar subquery, as a ``Subquery`` node."""
    select = conjunct.find(exp.Select)
    return select.parent if isinstance(select.parent, exp.Subquery) else exp.Subquery(this=select)
