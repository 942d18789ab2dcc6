"""A block's one ``LEFT JOIN``: which table is preserved, which optional, on what keys.

Split from :mod:`.planner`, which decides the strategy: this reads the join
from the SQL. The ``linear`` strategy's left-join rule needs the equalities
of ``ON`` by side (the optional side's changed keys restrict the preserved
side), so only a conjunction of column equalities, each qualified by both
tables, is taken; anything else runs the view in full with the reason.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sqlglot import exp

from airflow_provider_ct.ivm.plan.refusals import NotIncremental


@dataclass(frozen=True)
class LeftJoin:
    """``preserved LEFT JOIN optional ON preserved.a = optional.b AND ...``."""

    preserved: str
    optional: str
    #: Column names of the preserved / optional side, pairwise equal in ``ON``.
    preserved_keys: tuple[str, ...]
    optional_keys: tuple[str, ...]


def left_join(select: Any, joins: list[Any], tables: list[Any], names: list[str]) -> Any:
    """The block's one LEFT JOIN, if any; inner and cross joins need nothing more."""
    sides = [(j.side or "").upper() for j in joins]
    for join, side in zip(joins, sides, strict=True):
        kind = (join.kind or "").upper()
        if kind in {"SEMI", "ANTI"} or join.args.get("using"):
            raise NotIncremental(f"{kind or 'USING'} joins are recomputed in full")
        if side and join.args.get("on") is None:
            raise NotIncremental(f"a {side} JOIN without ON is recomputed in full")
    if not any(sides):
        return None
    if len(joins) != 1 or sides[0] != "LEFT":
        raise NotIncremental(
            "outer joins other than one LEFT JOIN of two tables are recomputed in full"
        )
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
    """``a.x = b.y AND ...`` as (preserved column, optional column) pairs."""
    conjuncts = list(on.flatten()) if isinstance(on, exp.And) else [on]
    pairs: list[tuple[str, str]] = []
    for c in conjuncts:
        if not isinstance(c, exp.EQ):
            raise NotIncremental("a LEFT JOIN whose ON is not a conjunction of equalities")
        left, right = c.this, c.expression
        if not (isinstance(left, exp.Column) and isinstance(right, exp.Column)):
            raise NotIncremental("a LEFT JOIN whose ON compares expressions, not columns")
        sides = {left.table.lower(): left.name, right.table.lower(): right.name}
        if set(sides) != {preserved, optional}:
            raise NotIncremental("a LEFT JOIN whose ON columns are not qualified by both tables")
        pairs.append((sides[preserved], sides[optional]))
    return pairs
