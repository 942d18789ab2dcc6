"""The scopes of a query's subqueries, read from the SQL with the tables' columns.

Which ``SELECT`` a subquery belongs to and what uses it (an ``IN``, an
``EXISTS``, a scalar's place), each scope's tables by alias, a column
resolved innermost scope first (SQL's rule, bare names placed by the
tables' columns), and the classes of columns its equalities make equal.
The keyed rule (:mod:`.keyed`) and the driver's parts (:mod:`.keyed_parts`)
both read queries this way; neither owns it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from sqlglot import exp

from airflow_provider_ct.core.query import (
    input_name,
)
from airflow_provider_ct.ivm.plan.select_shape import sources
from airflow_provider_ct.ivm.plan.subqueries import where_conjuncts


def negated_within(node: Any, select: Any) -> bool:
    """Whether a ``NOT`` sits between ``node`` and ``select`` (where NULL and FALSE differ)."""
    parent = node.parent
    while parent is not None and parent is not select:
        if isinstance(parent, exp.Not):
            return True
        parent = parent.parent
    return False


def direct_subqueries(select: Any) -> list[Any]:
    """The ``SELECT``s directly under ``select`` (its subqueries, not theirs), in tree order."""
    return [
        s for s in select.find_all(exp.Select) if s is not select and _parent_select(s) is select
    ]


def _parent_select(node: Any) -> Any:
    parent = node.parent
    while parent is not None and not isinstance(parent, exp.Select):
        parent = parent.parent
    return parent


def subquery_owner(sub: Any) -> Any:
    """The node that uses subquery ``sub``: an ``IN``, an ``EXISTS``, or a scalar's ``Subquery``."""
    node = sub.parent
    while isinstance(node, exp.Subquery | exp.Paren):
        if isinstance(node.parent, exp.In | exp.Exists):
            return node.parent
        node = node.parent
    return node


def in_tie(sub: Any) -> tuple[Any, Any] | None:
    """``(outer column, output)`` of ``x IN (SELECT output ...)`` when the output keys the
    subquery (not aggregated, or grouped by exactly the output); else None."""
    node = subquery_owner(sub)
    if not isinstance(node, exp.In) or not isinstance(node.this, exp.Column):
        return None
    if len(sub.expressions) != 1 or sub.args.get("limit") or sub.args.get("offset"):
        return None
    output = sub.expressions[0].unalias()
    group = sub.args.get("group")
    if group is not None:
        keys = [k.sql(dialect="spark") for k in group.expressions]
        if keys != [output.sql(dialect="spark")]:
            return None
    elif any(a.find_ancestor(exp.Select) is sub for a in sub.find_all(exp.AggFunc)):
        return None
    return node.this, output


def column_equalities(sub: Any) -> list[Any]:
    """The subquery's top-level ``WHERE`` conjuncts that equal two columns."""
    where = sub.args.get("where")
    if where is None:
        return []
    return [
        c
        for c in where_conjuncts(where.this)
        if isinstance(c, exp.EQ)
        and isinstance(c.this, exp.Column)
        and isinstance(c.expression, exp.Column)
    ]


def both_own(conjunct: Any, own: set[str]) -> bool:
    """Whether both columns of an equality are qualified by the subquery's own tables."""
    sides = (conjunct.this, conjunct.expression)
    return all(c.table and c.table.lower() in own for c in sides)


def block_equalities(select: Any) -> list[Any]:
    """The block's own column equalities (``WHERE`` and inner joins' ``ON``)."""
    conjuncts: list[Any] = []
    where = select.args.get("where")
    if where is not None:
        conjuncts.extend(where_conjuncts(where.this))
    for join in select.args.get("joins") or []:
        if join.args.get("on") is not None and not join.side:
            conjuncts.extend(where_conjuncts(join.args["on"]))
    return [c for c in conjuncts if isinstance(c, exp.EQ)]


def table_scope(select: Any, catalog_name: str) -> dict[str, str]:
    """Lower-cased alias -> input name, for the tables of ``select``'s ``FROM`` and joins."""
    found = {
        t.alias_or_name.lower(): input_name(t, catalog_name)
        for t in sources(select)
        if isinstance(t, exp.Table)
    }
    return {alias: name for alias, name in found.items() if name is not None}


def resolve(
    node: Any, scopes: list[dict[str, str]], lower: Mapping[str, set[str]]
) -> tuple[int, str, str, str] | None:
    """``(scope index, input, alias, column)`` of a column, innermost scope first (SQL's rule)."""
    if not isinstance(node, exp.Column) or not node.name:
        return None
    name = node.name.lower()
    for index, scope in enumerate(scopes):
        if node.table:
            alias = node.table.lower()
            if alias in scope:
                return index, scope[alias], alias, name
            continue
        owners = [a for a, table in scope.items() if name in lower.get(table, set())]
        if len(owners) == 1:
            return index, scope[owners[0]], owners[0], name
        if owners:
            return None  # ambiguous: Spark refuses it too
    return None


class Classes:
    """Union-find over ``(alias, column)`` of the block: columns equal on every kept row."""

    def __init__(self) -> None:
        self.parent: dict[tuple[str, str], tuple[str, str]] = {}

    def find(self, ref: tuple[str, str]) -> tuple[str, str]:
        self.parent.setdefault(ref, ref)
        while self.parent[ref] != ref:
            ref = self.parent[ref]
        return ref

    def union(self, a: tuple[str, str], b: tuple[str, str]) -> None:
        self.parent[self.find(a)] = self.find(b)

    def members(self, root: tuple[str, str]) -> set[tuple[str, str]]:
        return {r for r in list(self.parent) if self.find(r) == root} | {root}
