"""A subquery's change in a tick: the block's rows it moves, as restricted terms.

The rules are the planner's (:mod:`airflow_provider_ct.ivm.plan.subquery_changes`),
decided from the SQL and the inputs' columns before any data is read;
this module carries them out for one tick. The changed tables read in a
block's subqueries are applied one after the other, each in a *bracket*:
the block over its own reads as they were, with the subqueries' reads of
the tables applied before as they are now, of this table now minus as it
was, of the ones after as they were. Each bracket is restricted to the
rows its subqueries can move:

* a ``tied`` subquery: the rows whose outer side is one of the values the
  table's changed rows hold in the tied column (a temp view of them; the
  subquery itself is restricted to them too when it alone bounds the
  bracket); an uncorrelated ``NOT IN`` first checks that its set neither
  gained nor lost a ``NULL`` and did not empty or fill at the two sides;
* a ``value`` subquery: evaluated at both sides, one Spark job; an equal
  value moves no row, else the rows whose compared expression lies between
  the two values (a one-row temp view).

A bracket every subquery of which moves no row is left out; a rule that
cannot bound this tick (a ``NULL`` value, a set that changed its ``NULL``)
raises :class:`~airflow_provider_ct.exceptions.KeyedReadError`, and the
tick runs in full with the reason, as a keyed rule that does not hold.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from sqlglot import exp

from airflow_provider_ct.exceptions import KeyedReadError
from airflow_provider_ct.ivm.plan.block import Block
from airflow_provider_ct.ivm.plan.reads import subquery_key
from airflow_provider_ct.ivm.plan.rewrites import bind_tables
from airflow_provider_ct.ivm.plan.scopes import direct_subqueries
from airflow_provider_ct.ivm.plan.subquery_changes import (
    Route,
    SubqueryRule,
    subquery_rules,
    unbounded,
)
from airflow_provider_ct.spark.ivm.bindings import NEW, OLD

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = logging.getLogger(__name__)

#: The temp view of block ``b``'s bracket ``j``, subquery ``s``: its keys or its two values.
BOUND_VIEW = "__ct_sq_{}_{}_{}"


class Bindings(Protocol):
    """What the brackets read of a tick's bindings (:class:`.input_changes.Bindings`, which
    imports this module: named here by its shape, not imported back)."""

    views: dict[str, dict[str, str]]
    changed: set[str]
    changes: dict[str, Any]


@dataclass(frozen=True)
class Bracket:
    """One changed subquery table's terms: the block restricted to the rows it moves."""

    table: str
    tree: Any
    #: The subquery tables applied before this one (read as they are now).
    earlier: tuple[str, ...]


@dataclass
class SubqueryBlock:
    """A block whose subqueries' tables changed: its rules and the brackets they give."""

    rules: tuple[SubqueryRule, ...]
    catalog_name: str
    brackets: list[Bracket] = field(default_factory=list)
    #: Per changed table, what its bracket was restricted by (or why it was left out).
    notes: dict[str, str] = field(default_factory=dict)

    def views(
        self, block: Block, bindings: Bindings, bracket: Bracket, side: str
    ) -> dict[str, str]:
        """The bindings of a bracket's term: the block's reads as they were, the subqueries'
        reads of earlier tables now, of this one at ``side``, of the rest as they were."""
        views = bindings.views
        chosen = {
            key: views[name][OLD] for key, name in zip(block.occurrences, block.inputs, strict=True)
        }
        for name in block.fixed:
            state = NEW if name in bracket.earlier else OLD
            chosen[subquery_key(name)] = views[name][side if name == bracket.table else state]
        return chosen


def subqueries_now(block: Block, bindings: Bindings) -> dict[str, str]:
    """The subqueries' reads as they are now: the delta rules of the block's own reads
    apply after their changes (the brackets above)."""
    views = bindings.views
    return {key: views[name][NEW] for name in block.fixed for key in (name, subquery_key(name))}


def subquery_blocks(
    spark: SparkSession,
    blocks: Mapping[int, Block],
    bindings: Bindings,
    schemas: Mapping[str, list[str]],
    catalog_name: str,
) -> dict[int, SubqueryBlock]:
    """Block index -> its brackets, for each block of ``blocks`` whose subqueries read a
    changed table; raises :class:`KeyedReadError` when a rule cannot bound the change."""
    out: dict[int, SubqueryBlock] = {}
    for index, block in blocks.items():
        moved = sorted(set(block.fixed) & bindings.changed)
        rules = subquery_rules(block.tree, schemas, catalog_name)
        why = unbounded(rules, moved)
        if why is not None:
            raise KeyedReadError(why)
        found = SubqueryBlock(rules, catalog_name)
        for position, table in enumerate(moved):
            bracket = Bracket(table, None, tuple(moved[:position]))
            tree = _restricted(spark, index, position, block, bracket, bindings, found)
            if tree is not None:
                found.brackets.append(Bracket(table, tree, bracket.earlier))
        log.info("block %d: subqueries' tables changed: %s", index, found.notes)
        out[index] = found
    return out


def _restricted(
    spark: SparkSession,
    index: int,
    position: int,
    block: Block,
    bracket: Bracket,
    bindings: Bindings,
    found: SubqueryBlock,
) -> Any | None:
    """The block restricted to the rows the bracket's table moves, or None if none."""
    readers = [r for r in found.rules if bracket.table in r.inputs]
    conditions: list[tuple[SubqueryRule, Any, Any]] = []
    side = {s: found.views(block, bindings, bracket, s) for s in (NEW, OLD)}
    for rule in readers:
        view = BOUND_VIEW.format(index, position, rule.index)
        if rule.route is Route.TIED:
            conditions.append(_tied(spark, block, rule, bracket, bindings, side, view, found))
        else:
            condition = _value(spark, block, rule, side, view, found.catalog_name)
            if condition is not None:
                conditions.append((rule, condition, None))
    if not conditions:
        found.notes[bracket.table] = "no subquery's value moved"
        return None
    tree = block.tree.copy()
    subs = direct_subqueries(tree)  # before the bounds' own subqueries join the tree
    if len(conditions) == 1 and conditions[0][2] is not None:
        rule, _, inner = conditions[0]
        subs[rule.index].where(inner, copy=False)
    tree.where(exp.or_(*(c for _, c, _ in conditions)), copy=False)
    found.notes[bracket.table] = "; ".join(r.describe() for r, _, _ in conditions)
    return tree


def _tied(
    spark: SparkSession,
    block: Block,
    rule: SubqueryRule,
    bracket: Bracket,
    bindings: Bindings,
    side: Mapping[str, Mapping[str, str]],
    view: str,
    found: SubqueryBlock,
) -> tuple[SubqueryRule, Any, Any]:
    """The rows whose outer side holds a value the change holds in the tied column, and
    the subquery's own restriction to them; an uncorrelated ``NOT IN`` after its check,
    and without restricting its set."""
    from pyspark.sql import functions as F

    assert rule.tied_column is not None and rule.outer_sql and rule.inner_sql
    if rule.checks_set:
        _check_set(spark, block, rule, side, found.catalog_name)
    change = bindings.changes[bracket.table]
    column = F.col(f"`{rule.tied_column}`").alias("__ct_k0")
    keys = change.plus.select(column).union(change.minus.select(column)).distinct()
    keys.where(F.col("__ct_k0").isNotNull()).createOrReplaceTempView(view)
    query = exp.Subquery(this=exp.select("__ct_k0").from_(view))
    outer = exp.In(this=exp.maybe_parse(rule.outer_sql, dialect="spark"), query=query)
    if rule.checks_set:  # its set restricted would lose the NULL that makes rows unknown
        return rule, outer, None
    inner = exp.In(this=exp.maybe_parse(rule.inner_sql, dialect="spark"), query=query.copy())
    return rule, outer, inner


def _check_set(
    spark: SparkSession,
    block: Block,
    rule: SubqueryRule,
    side: Mapping[str, Mapping[str, str]],
    catalog_name: str,
) -> None:
    """Raise unless the ``NOT IN``'s set holds a ``NULL`` and some row at both sides alike."""
    counts = []
    for name in (NEW, OLD):
        sub = _bound_subquery(block, rule, side[name], catalog_name)
        output = sub.expressions[0].unalias()
        sub.set("expressions", [exp.alias_(output, "__ct_x")])
        counts.append(
            f"(SELECT COUNT(*) > 0 AS e, COUNT(*) > COUNT(__ct_x) AS h FROM ({sub.sql('spark')}))"
        )
    query = f"SELECT n.e = o.e AND n.h = o.h FROM {counts[0]} n CROSS JOIN {counts[1]} o"
    row = spark.sql(query).collect()[0][0]
    if not row:
        raise KeyedReadError(
            f"subquery {rule.index + 1}'s NOT IN set gained or lost a NULL, or emptied or "
            "filled: every row may move"
        )


def _value(
    spark: SparkSession,
    block: Block,
    rule: SubqueryRule,
    side: Mapping[str, Mapping[str, str]],
    view: str,
    catalog_name: str,
) -> Any | None:
    """The rows between the subquery's two values, None when the value did not move."""
    new, old = (
        _bound_subquery(block, rule, side[s], catalog_name).sql(dialect="spark") for s in (NEW, OLD)
    )
    frame = spark.sql(f"SELECT ({new}) AS a, ({old}) AS b")
    a, b = frame.collect()[0]
    if (a == b and a is not None) or (a is None and b is None):
        return None
    if a is None or b is None or a != a or b != b or rule.outer_sql is None:
        raise KeyedReadError(
            f"subquery {rule.index + 1}'s value moved from {b!r} to {a!r}: every row may move"
        )
    both = spark.createDataFrame([(a, b)], frame.schema)  # ordered as Spark compares them
    bounds = both.selectExpr("least(a, b) AS lo", "greatest(a, b) AS hi")
    bounds.createOrReplaceTempView(view)
    compared: Any = exp.maybe_parse(rule.outer_sql, dialect="spark")
    low = exp.Subquery(this=exp.select("lo").from_(view))
    high = exp.Subquery(this=exp.select("hi").from_(view))
    return exp.Between(this=compared, low=low, high=high)


def _bound_subquery(
    block: Block, rule: SubqueryRule, views: Mapping[str, str], catalog_name: str
) -> Any:
    """Subquery ``rule.index`` of ``block`` alone, its tables bound to ``views``' subquery
    reads."""
    sub = direct_subqueries(block.tree)[rule.index].copy()
    own = {name: views[subquery_key(name)] for name in rule.inputs}
    return bind_tables(sub, own, catalog_name)
