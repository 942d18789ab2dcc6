"""A keyed block's restricted inputs taken on the driver, as Spark views of a few rows.

Spark's keyed read (:mod:`.keyed`) scans each input that holds the key,
filtered to the keys ``K`` the changes hold; when those keys reach every
file, that scan is the full query's. The warm driver fetches the same rows
by key from its decoded files at both snapshots
(:mod:`airflow_provider_ct.ivm.driver.keyed_fetch`), and Spark's two terms
then read them as small local views: Spark still evaluates the block, its
subqueries and their types exactly as written, over the keys' rows only.

Before the other inputs are fetched, ``K`` is narrowed by the block's
filters on an input joined by its key: a block row of key ``k`` holds a row
of that input whose key is ``k`` and which passes its conditions, so a key
none of whose rows pass them, as they are or as they were, has no block
rows on either side and adds nothing (TPC-H q17 keeps the parts of one
brand and container: a thousandth of the parts its changed lines name).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.compute as pc
from sqlglot import exp

from airflow_provider_ct.ivm.driver.arrow_eval import (
    ArrowEvaluator,
    NotOnDriver,
    node_key,
    typed_nodes,
)
from airflow_provider_ct.ivm.driver.driver_join import (
    join_shape,
    single_table_conjuncts,
    spelled,
)
from airflow_provider_ct.ivm.driver.keyed_fetch import KeyedFetch
from airflow_provider_ct.ivm.plan.keyed import KeyedRead
from airflow_provider_ct.spark.ivm.analysis_cache import spark_types
from airflow_provider_ct.spark.ivm.bindings import NEW, OLD

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from airflow_provider_ct.spark.ivm.input_changes import Bindings, Scratch

log = logging.getLogger(__name__)


@dataclass
class LocalKeyed:
    """The driver's fetch, and where its rows are written for Spark to read."""

    fetch: KeyedFetch
    scratch: Scratch


@dataclass(frozen=True)
class _Narrowing:
    """An input joined by its key whose own conditions bound which keys have block rows."""

    name: str
    alias: str
    column: str
    condition: Any


def local_views(
    local: LocalKeyed,
    bindings: Bindings,
    tree: Any,
    placed: KeyedRead,
    columns: Mapping[str, list[str]],
    values: list[Any],
    catalog_name: str,
) -> tuple[dict[str, dict[str, str]], list[Any]] | None:
    """The keyed inputs' views from rows the driver fetched, and the keys that matter.

    :param columns: input -> the key columns it is restricted by (none: read whole).
    :returns: input -> ``{new, old}`` views for each restricted input, and
        ``values`` narrowed; None when the driver does not take them (logged).
    """
    keyed = {name: found for name, found in columns.items() if found}
    if not keyed:
        return None  # no input holds the key in every read: nothing to fetch by it
    if any(len(found) > 1 for found in keyed.values()):
        log.info("keyed rows are read by Spark: an input holds the key in two columns")
        return None
    why = local.fetch.refusal(keyed, values)
    if why is not None:
        log.info("keyed rows are read by Spark: %s", why)
        return None
    spark = next(iter(bindings.changes.values())).plus.sparkSession
    views: dict[str, dict[str, str]] = {}
    try:
        for narrowing in _narrowings(tree, placed, keyed, catalog_name, local.fetch.columns):
            fetched = local.fetch.rows(narrowing.name, keyed[narrowing.name][0], values)
            views[narrowing.name] = _views(local, bindings, spark, narrowing.name, fetched)
            values = _narrowed(spark, views[narrowing.name], narrowing, fetched)
        for name in sorted(set(keyed) - set(views)):
            fetched = local.fetch.rows(name, keyed[name][0], values)
            views[name] = _views(local, bindings, spark, name, fetched)
    except NotOnDriver as exc:
        log.info("keyed rows are read by Spark: %s", exc)
        return None
    log.info("keyed rows of %d key(s) fetched on the driver", len(values))
    return views, values


def _views(
    local: LocalKeyed,
    bindings: Bindings,
    spark: SparkSession,
    name: str,
    fetched: tuple[pa.Table, pa.Table],
) -> dict[str, str]:
    """Input ``name``'s ``fetched`` rows (as they are, as they were) as two temp views."""
    new, old = fetched
    base = bindings.views[name]
    schema = spark.table(base[NEW]).select(*[f"`{c}`" for c in local.fetch.columns[name]]).schema
    names = {NEW: f"{base[NEW]}_keyed", OLD: f"{base[OLD]}_keyed"}
    local.scratch.frame(spark, new, schema).createOrReplaceTempView(names[NEW])
    if old is new:
        return {NEW: names[NEW], OLD: names[NEW]}
    local.scratch.frame(spark, old, schema).createOrReplaceTempView(names[OLD])
    return names


def _narrowed(
    spark: SparkSession,
    views: Mapping[str, str],
    narrowing: _Narrowing,
    fetched: tuple[pa.Table, pa.Table],
) -> list[Any]:
    """The keys of ``narrowing``'s rows (as they are or as they were) that pass its conditions.

    On the driver over the fetched rows, with Spark's types (one analysis,
    no job); a condition the driver leaves to Spark is one Spark query.
    """
    try:
        found = _narrowed_on_driver(spark, views, narrowing, fetched)
    except (NotOnDriver, pa.ArrowException) as exc:
        log.info("keyed rows: narrowed by Spark: %s", exc)
        found = _narrowed_by_spark(spark, views, narrowing)
    log.info("keyed rows: %s's own conditions keep %d key(s)", narrowing.name, len(found))
    return found


def _narrowed_on_driver(
    spark: SparkSession,
    views: Mapping[str, str],
    narrowing: _Narrowing,
    fetched: tuple[pa.Table, pa.Table],
) -> list[Any]:
    """The passing keys from the fetched rows (both sides), NULL included as Spark's
    ``DISTINCT`` keeps it; :class:`NotOnDriver` for a condition the evaluator refuses."""
    nodes = typed_nodes([narrowing.condition])
    select = ", ".join(f"{node_key(n)} AS __ct_t{i}" for i, n in enumerate(nodes))
    sql = f"SELECT {select} FROM {views[NEW]} AS {narrowing.alias}"
    types = spark_types(spark, sql, nodes)
    found: dict[Any, None] = {}
    for rows in {id(t): t for t in fetched}.values():
        kept = rows.filter(ArrowEvaluator(rows, narrowing.alias, types).mask(narrowing.condition))
        column = kept.column(spelled(rows.column_names, narrowing.column))
        found.update(dict.fromkeys(pc.unique(column.combine_chunks()).to_pylist()))
    return list(found)


def _narrowed_by_spark(
    spark: SparkSession, views: Mapping[str, str], narrowing: _Narrowing
) -> list[Any]:
    column = exp.column(narrowing.column, table=narrowing.alias, quoted=True).sql("spark")
    sides = " UNION ALL ".join(f"SELECT * FROM {v}" for v in dict.fromkeys(views.values()))
    query = (
        f"SELECT DISTINCT {column} FROM ({sides}) AS {narrowing.alias} "
        f"WHERE {narrowing.condition.sql('spark')}"
    )
    return [row[0] for row in spark.sql(query).collect()]


def _narrowings(
    tree: Any,
    placed: KeyedRead,
    keyed: Mapping[str, list[str]],
    catalog_name: str,
    columns: Mapping[str, Sequence[str]],
) -> list[_Narrowing]:
    """The block's inputs joined by the key that carry conditions of their own (inner joins)."""
    try:
        shape = join_shape(tree, catalog_name, columns)
    except NotOnDriver:
        return []  # not a plain inner join of tables: no narrowing, the keys stay as they are
    filters = single_table_conjuncts(shape)
    out = []
    for name, alias, column in placed.members:
        if name in keyed and keyed[name][0] == column and filters.get(alias):
            condition = exp.and_(*filters[alias], copy=True)
            out.append(_Narrowing(name, alias, column, condition))
    return out
