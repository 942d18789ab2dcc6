"""The terms of a block whose joins hold outer joins, and the restricted views they read.

The rule each read's change follows is the planner's
(:class:`~airflow_provider_ct.ivm.plan.outer_joins.ReadRule`, decided
before any work); this module only carries it out. A plain read adds the
block over its gained rows and subtracts it over its lost ones, like an
inner join's. A restricted read adds the block over the read as it is and
subtracts it over the read as it was, with the rule's other read narrowed
to the keys the change holds (and the changing read itself narrowed on
its own key, null-safe), each narrowed read a temp view registered by
:func:`register_outer_restrictions` before the terms are evaluated.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from airflow_provider_ct.ivm.plan.block import Block
from airflow_provider_ct.ivm.plan.outer_joins import ReadRule
from airflow_provider_ct.ivm.plan.planner import Plan
from airflow_provider_ct.spark.ivm.bindings import MINUS, NEW, OLD, PLUS
from airflow_provider_ct.spark.ivm.input_changes import Bindings
from airflow_provider_ct.spark.ivm.subquery_terms import subqueries_now

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

#: One term: its sign, and the view bound to each read of the block.
SignedViews = tuple[int, dict[str, str]]
#: The bindings of a read's two terms: over its change, or over it whole, now and before.
_PLAIN = ((1, PLUS), (-1, MINUS))
_WHOLE = ((1, NEW), (-1, OLD))


def outer_terms(index: int, block: Block, bindings: Bindings) -> list[SignedViews]:
    """The signed bindings of block ``index``'s terms, read by read (earlier reads now)."""
    assert block.outer is not None
    views = bindings.views
    reads = tuple(zip(block.occurrences, block.inputs, strict=True))
    out: list[SignedViews] = []
    for rule in block.outer.rules:
        key, name = reads[rule.position]
        if name not in bindings.changed:
            continue
        chosen = subqueries_now(block, bindings)
        chosen |= {
            other_key: views[other][NEW if i < rule.position else OLD]
            for i, (other_key, other) in enumerate(reads)
        }
        if rule.restricted is None:
            out += [(sign, {**chosen, key: views[name][side]}) for sign, side in _PLAIN]
            continue
        if not rule.narrowed:
            out += [(sign, {**chosen, key: views[name][side]}) for sign, side in _WHOLE]
            continue
        restricted_key = reads[rule.restricted][0]
        chosen[restricted_key] = _narrowed(chosen[restricted_key], index, rule, "r")
        for sign, side in _WHOLE:
            out.append((sign, {**chosen, key: _narrowed(views[name][side], index, rule, "c")}))
    return out


def _narrowed(view: str, index: int, rule: ReadRule, role: str) -> str:
    """The temp view of ``view`` narrowed for block ``index``'s rule of one read: ``r`` the
    restricted read, ``c`` the changing one (a self-join narrows one view both ways)."""
    return f"{view}_o{index}_{rule.position}{role}"


def register_outer_restrictions(spark: SparkSession, plan: Plan, bindings: Bindings) -> None:
    """Register every narrowed read the outer terms of ``plan`` bind, for this tick's changes."""
    for index, block in enumerate(plan.blocks):
        if block.outer is None:
            continue
        for rule in block.outer.rules:
            name = block.inputs[rule.position]
            if rule.restricted is None or not rule.narrowed or name not in bindings.changed:
                continue
            _register_rule(spark, index, block, rule, bindings)


def _register_rule(
    spark: SparkSession, index: int, block: Block, rule: ReadRule, bindings: Bindings
) -> None:
    """The rule's other read narrowed to the change's keys (plain equality: a NULL key
    matches nothing), and the changing read narrowed to them null-safe (both bindings)."""
    from pyspark.sql import functions as F

    assert rule.restricted is not None
    name, views = block.inputs[rule.position], bindings.views
    change = bindings.changes[name]
    column = F.col(f"`{rule.change_column}`").alias("__ct_o")
    keys = F.broadcast(change.plus.select(column).union(change.minus.select(column)).distinct())
    other = block.inputs[rule.restricted]
    base = views[other][NEW if rule.restricted < rule.position else OLD]
    _semi(spark.table(base), keys, rule.restricted_column, False).createOrReplaceTempView(
        _narrowed(base, index, rule, "r")
    )
    for side in (NEW, OLD):
        view = views[name][side]
        narrowed = _semi(spark.table(view), keys, rule.change_column, True)
        narrowed.createOrReplaceTempView(_narrowed(view, index, rule, "c"))


def _semi(frame: DataFrame, keys: DataFrame, column: str, null_safe: bool) -> DataFrame:
    mine = frame[f"`{column}`"]
    condition = mine.eqNullSafe(keys["__ct_o"]) if null_safe else mine == keys["__ct_o"]
    return frame.join(keys, condition, "left_semi")
