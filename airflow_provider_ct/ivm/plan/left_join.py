"""A block's one ``LEFT JOIN``: which table is preserved, which optional, on what keys.

Split from :mod:`.planner`, which decides the strategy: this reads the join
from the SQL. The ``linear`` strategy's left-join rule needs the equalities
of ``ON`` by side (the optional side's changed keys restrict the preserved
side), so ``ON`` needs at least one equality of columns qualified by both
tables; other conjuncts are kept as they are (:func:`_equalities`).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass
from typing import Any

from sqlglot import exp

from airflow_provider_ct.core.query import (
    input_name,
)
from airflow_provider_ct.ivm.plan.refusals import NotIncremental
from airflow_provider_ct.ivm.plan.select_shape import sources


@dataclass(frozen=True)
class LeftJoin:
    """``preserved LEFT JOIN optional ON preserved.a = optional.b AND ...``."""

    preserved: str
    optional: str
    #: Column names of the preserved / optional side, pairwise equal in ``ON``.
    preserved_keys: tuple[str, ...]
    optional_keys: tuple[str, ...]


def left_join(select: Any, joins: list[Any], tables: list[Any], names: list[str]) -> Any:
    """The block's one LEFT JOIN of two tables, if that is its join.

    Inner and cross joins need nothing more; other outer joins (more than
    one join, another side, a table joined with itself) are the chain's
    (:mod:`.outer_joins`): this shape keeps its own routes (the driver's
    left-join rows).
    """
    sides = [(j.side or "").upper() for j in joins]
    for join, side in zip(joins, sides, strict=True):
        kind = (join.kind or "").upper()
        if kind in {"SEMI", "ANTI"} or join.args.get("using"):
            raise NotIncremental(f"{kind or 'USING'} joins are recomputed in full")
        if side and join.args.get("on") is None:
            raise NotIncremental(f"a {side} JOIN without ON is recomputed in full")
    if not any(sides) or len(joins) != 1 or sides[0] != "LEFT" or names[0] == names[1]:
        return None  # inner joins only, or a chain of joins for :mod:`.outer_joins`
    preserved_alias = tables[0].alias_or_name.lower()
    optional_alias = tables[1].alias_or_name.lower()
    pairs = _equalities(joins[0].args["on"], preserved_alias, optional_alias)
    return LeftJoin(
        preserved=names[0],
        optional=names[1],
        preserved_keys=tuple(p for p, _ in pairs),
        optional_keys=tuple(o for _, o in pairs),
    )


def _equalities(on: Any, preserved: str, optional: str) -> list[tuple[str, str]]:
    """The ``a.x = b.y`` conjuncts of ``ON`` as (preserved column, optional column) pairs.

    Other conjuncts (``o.comment NOT LIKE ...``, ``p.x > 0``) may stay: the
    rule recomputes a preserved row's output from the optional rows with its
    keys, and every conjunct only narrows which of those it matches. At least
    one equality is needed, or no key restricts the recomputation.
    """
    on = on.unnest()  # ON (a = b AND c = d), as TPC-DS writes it
    conjuncts = [c.unnest() for c in on.flatten()] if isinstance(on, exp.And) else [on]
    pairs: list[tuple[str, str]] = []
    for c in conjuncts:
        pair = _key_pair(c, preserved, optional)
        if pair is not None:
            pairs.append(pair)
    if not pairs:
        raise NotIncremental(
            "a LEFT JOIN whose ON has no equality of a column of each table, both qualified"
            " (write ON p.a = o.b where the inputs' schemas are not known)"
        )
    return pairs


def _key_pair(conjunct: Any, preserved: str, optional: str) -> tuple[str, str] | None:
    """``preserved.x = optional.y`` (either order) as ``(x, y)``; anything else ``None``."""
    if not isinstance(conjunct, exp.EQ):
        return None
    left, right = conjunct.this, conjunct.expression
    if not (isinstance(left, exp.Column) and isinstance(right, exp.Column)):
        return None
    sides = {left.table.lower(): left.name, right.table.lower(): right.name}
    if set(sides) != {preserved, optional}:
        return None
    return sides[preserved], sides[optional]


def qualify_outer_join_columns(
    tree: Any, catalog_name: str, columns: Mapping[str, Collection[str]]
) -> Any:
    """``tree`` with each outer join's unqualified ``ON`` columns qualified by their table.

    The left-join rule must know which side an ``ON`` column belongs to, and
    TPC-H-style SQL leaves them bare (``ON c_custkey = o_custkey``); only the
    inputs' schemas (``columns``: input name -> column names) can say. A
    column goes to the one table of its select that has it; one that none or
    several have, or a select reading a derived table or CTE, is left as
    written (the planner then names it). Returns a copy; ``tree`` is kept.
    """
    tree = tree.copy()
    lowered = {name: {c.lower() for c in cols} for name, cols in columns.items()}
    for join in list(tree.find_all(exp.Join)):
        on = join.args.get("on")
        select = join.parent_select
        if on is None or not join.side or select is None:
            continue
        scope = _scope_columns(select, catalog_name, lowered)
        if scope is None:
            continue
        for column in on.find_all(exp.Column):
            owners = [a for a, cols in scope.items() if column.name.lower() in cols]
            if not column.table and len(owners) == 1:
                column.set("table", exp.to_identifier(owners[0]))
    return tree


def _scope_columns(
    select: Any, catalog_name: str, columns: Mapping[str, set[str]]
) -> dict[str, set[str]] | None:
    """Alias -> column names of every table ``select`` reads; ``None`` if one is not an input."""
    scope: dict[str, set[str]] = {}
    for source in sources(select):
        if not isinstance(source, exp.Table):
            return None
        name = input_name(source, catalog_name)
        if name is None or name not in columns:
            return None
        scope[source.alias_or_name] = columns[name]
    return scope
