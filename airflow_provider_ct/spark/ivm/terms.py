"""The delta rules as terms: which binding of each input every block of the plan runs over.

A view's change below any aggregation is a signed sum of its blocks, each
evaluated over one choice of bindings (``new``, ``old``, ``plus``,
``minus``: :mod:`.input_changes`). For an inner join of inputs
``A1..An``, the change of ``Ai`` joins the inputs before it as they are
now and the ones after it as they were (``ΔA⋈B_old + A_new⋈ΔB``), each
read of a table read twice being an input of its own; a block whose
keyed subqueries read a changed table is read twice instead, restricted to
the keys the changes hold (:mod:`.keyed`); a block whose other subqueries'
tables changed adds a bracket per table (:mod:`.subquery_terms`); a
``LEFT JOIN`` adds the terms of the rows whose optional side changed, and
a chain with other outer joins follows each read's rule
(:mod:`.outer_terms`). The
incremental corrections (:mod:`.incremental`) and the in-place aggregates
(:mod:`.in_place`) evaluate the same terms.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from airflow_provider_ct.ivm.plan.block import Block
from airflow_provider_ct.ivm.plan.planner import Plan
from airflow_provider_ct.spark.ivm.bindings import MINUS, NEW, OLD, PLUS
from airflow_provider_ct.spark.ivm.input_changes import Bindings
from airflow_provider_ct.spark.ivm.outer_terms import outer_terms, register_outer_restrictions
from airflow_provider_ct.spark.ivm.subquery_terms import subqueries_now

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


@dataclass(frozen=True)
class Term:
    """One block of the query over one choice of bindings, added or subtracted."""

    sign: int
    block: Block
    #: The view bound to each read of a table
    #: (:func:`~airflow_provider_ct.ivm.plan.reads.occurrence_key`).
    views: dict[str, str]


def terms(plan: Plan, bindings: Bindings) -> list[Term]:
    """The signed terms whose sum is the change of the rows below any aggregation."""
    out: list[Term] = []
    for index, block in enumerate(plan.blocks):
        keyed = bindings.keyed.get(index)
        if keyed is not None:
            restricted = replace(block, tree=keyed.tree)
            for sign, side in ((1, NEW), (-1, OLD)):
                views = {name: names[side] for name, names in keyed.views.items()}
                out.append(Term(sign, restricted, views))
            continue
        moved = sorted(set(block.fixed) & bindings.changed)
        brackets = bindings.subqueries.get(index)
        if moved and brackets is None:  # the decision sends such a tick full
            raise ValueError(f"no delta rule: {', '.join(moved)} changed under a subquery")
        if brackets is not None:
            for bracket in brackets.brackets:
                restricted = replace(block, tree=bracket.tree)
                for sign, side in ((1, NEW), (-1, OLD)):
                    views = brackets.views(block, bindings, bracket, side)
                    out.append(Term(sign, restricted, views))
        if block.left_join is not None:
            out.extend(_left_join_terms(block, bindings))
            continue
        if block.outer is not None:
            signed = outer_terms(index, block, bindings)
            out.extend(Term(sign, block, views) for sign, views in signed)
            continue
        reads = tuple(zip(block.occurrences, block.inputs, strict=True))
        for position, (key, name) in enumerate(reads):
            if name not in bindings.changed:
                continue
            chosen = subqueries_now(block, bindings)
            chosen |= {
                other_key: bindings.views[other][NEW if i < position else OLD]
                for i, (other_key, other) in enumerate(reads)
            }
            for sign, side in ((1, PLUS), (-1, MINUS)):
                out.append(Term(sign, block, {**chosen, key: bindings.views[name][side]}))
    return out


def _left_join_terms(block: Block, bindings: Bindings) -> list[Term]:
    """``ΔP ⟕ O_old`` and, for the keys ``K`` changed in ``O``, ``P|K ⟕ O_new - P|K ⟕ O_old``."""
    join = block.left_join
    assert join is not None
    views = bindings.views
    out: list[Term] = []
    preserved, optional = join.preserved, join.optional
    if preserved in bindings.changed:
        for sign, side in ((1, PLUS), (-1, MINUS)):
            chosen = {preserved: views[preserved][side], optional: views[optional][OLD]}
            out.append(Term(sign, block, chosen))
    if optional in bindings.changed:
        restricted = f"{views[preserved][NEW]}_k"
        for sign, side in ((1, NEW), (-1, OLD)):
            chosen = {preserved: restricted, optional: views[optional][side]}
            out.append(Term(sign, block, chosen))
    return out


def register_restrictions(spark: SparkSession, plan: Plan, bindings: Bindings) -> None:
    """Every restricted read the terms of ``plan`` bind: the left join's and the outer chains'."""
    _register_left_join_restrictions(spark, plan, bindings)
    register_outer_restrictions(spark, plan, bindings)


def _register_left_join_restrictions(spark: SparkSession, plan: Plan, bindings: Bindings) -> None:
    """``P_new`` restricted to the join keys that changed in ``O`` (plain equality: a NULL
    key of ``P`` matches nothing in any ``O``, so its rows do not depend on ``O``)."""
    from pyspark.sql import functions as F

    for block in plan.blocks:
        join = block.left_join
        if join is None or join.optional not in bindings.changed:
            continue
        change = bindings.changes[join.optional]
        okeys = [F.col(f"`{k}`").alias(f"__ct_j{i}") for i, k in enumerate(join.optional_keys)]
        keys = change.plus.select(*okeys).union(change.minus.select(*okeys)).distinct()
        new = spark.table(bindings.views[join.preserved][NEW])
        condition = None
        for i, k in enumerate(join.preserved_keys):
            clause = new[f"`{k}`"] == keys[f"__ct_j{i}"]
            condition = clause if condition is None else condition & clause
        restricted = new.join(F.broadcast(keys), condition, "left_semi")
        restricted.createOrReplaceTempView(f"{bindings.views[join.preserved][NEW]}_k")
