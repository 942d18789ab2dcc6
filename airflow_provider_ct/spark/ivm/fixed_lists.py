"""A block's fixed ``[NOT] IN`` subqueries as literal lists, so the driver can join its change.

A subquery in ``WHERE`` over tables the tick did not change is a fixed
filter of the delta rules (:mod:`airflow_provider_ct.ivm.plan.subqueries`),
but the driver's joins (:mod:`.in_place_join`) evaluate no subquery, so a
view with one (TPC-H q16's ``ps_suppkey NOT IN (SELECT s_suppkey FROM
supplier WHERE s_comment LIKE ...)``) went to Spark's delta-rule joins,
which read the other inputs whole. When such a subquery is uncorrelated
and none of its tables moved since the last batch (a keyed block's
subquery may read a changed table: it has a value on each side), its
value is one list for every row: Spark evaluates it once, and the conjunct
becomes ``x [NOT] IN (v1, v2, ...)``, which the driver evaluates. The values
are kept by the warm driver per subquery and snapshots of its tables, so a
tick whose subquery tables did not move runs no job for it.

Only top-level conjuncts of ``WHERE`` are replaced, where an unknown result
filters the row as ``FALSE`` does: ``x NOT IN`` a list holding NULL is then
``FALSE``, ``x IN`` such a list is ``x IN`` its other values, and an empty
list is ``TRUE`` for ``NOT IN`` (even for a NULL ``x``, as SQL says) and
``FALSE`` for ``IN``. A subquery Spark cannot analyze alone (it names a
column of the outer query: correlated), of more than :data:`MAX_VALUES`
values, or of a type without an exact literal keeps its place, and the
tick takes the route it took before.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from sqlglot import exp

from airflow_provider_ct.core.query import (
    normalize_table_name,
    qualified_table_name,
    reads_query_name,
)
from airflow_provider_ct.ivm.plan.rewrites import InlineKeys, bind_tables
from airflow_provider_ct.ivm.plan.subqueries import (
    fixed_subquery_tables,
    semi_join_query,
    unnegated,
    where_conjuncts,
)
from airflow_provider_ct.spark.ivm.analysis_cache import analyzed

if TYPE_CHECKING:
    from airflow_provider_ct.spark.ivm.in_place import Aggregation

log = logging.getLogger(__name__)

#: Most values a subquery may have to be written into the query as a list.
MAX_VALUES = 1000


def inline_fixed_lists(
    agg: Aggregation, pins: Mapping[str, int | None], before: Mapping[str, int | None]
) -> Aggregation:
    """``agg`` with its block's fixed uncorrelated ``[NOT] IN`` subqueries as literal lists.

    :param pins: input -> the snapshot the tick reads (the values' key);
        ``before``: the snapshot the last batch read. Only a subquery none
        of whose tables moved between them is fixed: a keyed block's
        subquery over a changed table has a value on each side.
    ``agg`` itself when there is nothing to replace.
    """
    block = agg.plan.blocks[0]
    where = block.tree.args.get("where")
    if len(agg.plan.blocks) != 1 or where is None or not set(block.fixed) - set(block.semi):
        return agg
    tree = block.tree.copy()
    replaced = 0
    for conjunct in where_conjuncts(tree.args["where"].this):
        found = _in_subquery(conjunct)
        if found is None or semi_join_query(conjunct) is not None:
            continue  # a semi-join is the driver's own (kept by key)
        node, anti = found
        values = _values(agg, node.args["query"], pins, before)
        if values is not None:
            conjunct.replace(_in_list(node.this, values, anti))
            replaced += 1
    if not replaced:
        return agg
    fixed = fixed_subquery_tables(tree, agg.catalog_name)
    if isinstance(fixed, str):  # cannot be: the tree only lost subqueries
        return agg
    log.info("%d fixed subquery(ies) of the block evaluated once, as literal lists", replaced)
    semi = tuple(n for n in block.semi if n in fixed)
    blocks = (replace(block, tree=tree, fixed=fixed, semi=semi),)
    return replace(agg, plan=replace(agg.plan, blocks=blocks))


def _in_subquery(conjunct: Any) -> tuple[Any, bool] | None:
    """``(the IN node, whether under NOT)`` of ``x IN (query)`` / ``NOT x IN (query)``."""
    node, anti = unnegated(conjunct)
    if isinstance(node, exp.In) and node.args.get("query") is not None:
        return node, anti
    return None


def _values(
    agg: Aggregation,
    query: Any,
    pins: Mapping[str, int | None],
    before: Mapping[str, int | None],
) -> InlineKeys | None:
    """The subquery's distinct values as literals, or None (moved, correlated, too many,
    inexact)."""
    while isinstance(query, exp.Subquery):
        query = query.this
    if reads_query_name(query):
        return None  # a CTE's rows are not an input's
    tables = sorted(
        {normalize_table_name(qualified_table_name(t), agg.catalog_name) for t in _tables(query)}
    )
    if not tables or any(t not in agg.new_views or pins.get(t) != before.get(t) for t in tables):
        return None
    key = (agg.analysis_key, tuple((t, pins.get(t)) for t in tables))
    sql = bind_tables(query, agg.new_views, agg.catalog_name).sql(dialect="spark")
    values = analyzed(key, f"fixed list {sql}", lambda: _collected(agg.spark, sql))
    if values is None:
        return None
    try:
        keys = InlineKeys(tuple(v for v in values if v is not None), None in values)
        keys.literals()
    except TypeError:  # a float, a decimal, a timestamp: no exact literal
        return None
    return keys


def _tables(query: Any) -> list[Any]:
    return [t for t in query.find_all(exp.Table) if t.name]


def _collected(spark: Any, sql: str) -> tuple[Any, ...] | None:
    """The one column's distinct values (a job), or None when it is not a fixed small list."""
    from pyspark.errors import AnalysisException

    try:
        frame = spark.sql(sql)
    except AnalysisException as exc:  # an outer column: the subquery is correlated
        log.info("a fixed subquery is left in place: %s", str(exc).split("\n")[0])
        return None
    if len(frame.columns) != 1:
        return None
    rows = frame.distinct().limit(MAX_VALUES + 1).collect()
    if len(rows) > MAX_VALUES:
        return None
    return tuple(r[0] for r in rows)


def _in_list(value: Any, keys: InlineKeys, anti: bool) -> Any:
    """The conjunct with the subquery's values in place (see the module docstring)."""
    if anti and keys.has_null:
        return exp.false()
    if not keys.values:
        return exp.true() if anti else exp.false()
    found = exp.In(this=value.copy(), expressions=keys.literals())
    return exp.Not(this=exp.paren(found)) if anti else found
