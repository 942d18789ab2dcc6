"""A keyed subquery's SQL taken apart: the pieces :mod:`.keyed_parts` builds parts of.

Each function reads one subquery (or the conjunct holding it) and returns
a piece or why it cannot: its columns qualified by their scopes' aliases,
its conditions split into its tables' own and those reading the outer
query, its ties (equalities of its columns with outer ones), and its
aggregates replaced by placeholder columns. Pure functions of the SQL
and the tables' columns; :mod:`.keyed_parts` decides what they make.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import Any

from sqlglot import exp

from airflow_provider_ct.ivm.plan.subqueries import where_conjuncts

#: The aggregates a part computes per key (exactly, as Spark does, or the driver refuses).
AGGREGATES = (exp.Sum, exp.Count, exp.Avg, exp.Min, exp.Max)


AGGREGATE_ALIAS = "__ct_agg"


def aggregate_alias(index: int) -> str:
    """The qualifier of part ``index``'s aggregate placeholders."""
    return f"{AGGREGATE_ALIAS}{index}"


def holds(node: Any, sub: Any) -> bool:
    return any(found is sub for found in node.find_all(exp.Select))


def in_conjunct(select: Any, sub: Any) -> bool:
    """Whether ``sub`` is (in) a conjunct of ``select``'s ``WHERE``."""
    where = select.args.get("where")
    conjuncts = where_conjuncts(where.this) if where is not None else []
    return any(c is sub or holds(c, sub) for c in conjuncts)


def qualified_copy(
    sub: Any, inner: dict[str, str], outer: dict[str, str], lower: Mapping[str, set[str]]
) -> Any:
    """A copy of ``sub`` whose every column names its table's alias, or why not: bare
    columns are the one subquery table's that has them (SQL's innermost scope), else the
    one block table's that has them."""
    copy = sub.copy()
    for column in list(copy.find_all(exp.Column)):
        if column.find_ancestor(exp.Select) is not copy:
            continue  # a subquery's own subquery: placed in its own scope
        if column.args.get("db") or not column.name:
            return f"column {column.sql()} is not placed"
        table = column.table.lower()
        if table:
            if table not in inner and table not in outer:
                return f"column {column.sql()} is not placed"
            continue
        name = column.name.lower()
        owners = [a for a, t in inner.items() if name in lower.get(t, set())]
        if not owners:
            owners = [a for a, t in outer.items() if name in lower.get(t, set())]
        if len(owners) != 1:
            return f"column {column.name} is not placed in exactly one table"
        column.set("table", exp.to_identifier(owners[0]))
    return copy


def conditions(select: Any) -> list[Any]:
    """The conjuncts of ``select``'s ``WHERE`` and of its joins' ``ON``."""
    where = select.args.get("where")
    found = list(where_conjuncts(where.this)) if where is not None else []
    for join in select.args.get("joins") or []:
        if join.args.get("on") is not None:
            found += where_conjuncts(join.args["on"])
    return found


def split_conditions(select: Any, inner: Collection[str]) -> tuple[list[Any], list[Any]]:
    """The subquery's conditions (``WHERE`` and its joins' ``ON``) on its own tables, and
    those that read the block."""
    own: list[Any] = []
    correlated: list[Any] = []
    for conjunct in conditions(select):
        if conjunct.find(exp.Select):
            continue  # a subquery of its own: a part of its own (:attr:`KeyedPart.parts`)
        tables = {c.table.lower() for c in conjunct.find_all(exp.Column)}
        (own if tables <= set(inner) else correlated).append(conjunct)
    return own, correlated


def first_tie(
    correlated: list[Any], inner: Collection[str], outer: dict[str, str]
) -> tuple[tuple[str, str], tuple[str, str], list[Any]] | str:
    """The first equality of a subquery column with a block column (each as ``(alias,
    column)``), and the rest."""
    for position, conjunct in enumerate(correlated):
        if not isinstance(conjunct, exp.EQ):
            continue
        sides = [conjunct.this, conjunct.expression]
        if not all(isinstance(s, exp.Column) for s in sides):
            continue
        mine = [s for s in sides if s.table.lower() in inner]
        theirs = [s for s in sides if s.table.lower() not in inner and s.table.lower() in outer]
        if len(mine) == 1 and len(theirs) == 1:
            rest = correlated[:position] + correlated[position + 1 :]
            tied = (theirs[0].table.lower(), theirs[0].name.lower())
            return (mine[0].table.lower(), mine[0].name.lower()), tied, rest
    return "a subquery not tied by an equality with a block column is evaluated by Spark"


def column_ties(
    rest: list[Any], inner: Collection[str], outer: dict[str, str]
) -> tuple[tuple[tuple[str, str], tuple[str, str]], ...] | str:
    """A scalar's correlated conjuncts beyond its tie, each an equality of one of its
    columns with an outer one; or why not."""
    found = []
    for conjunct in rest:
        tie = first_tie([conjunct], inner, outer)
        if isinstance(tie, str):
            return "a scalar subquery correlated beyond column equalities is evaluated by Spark"
        found.append(tie[:2])
    return tuple(found)


def tied_first(inner: dict[str, str], tied: str) -> tuple[tuple[str, str], ...]:
    """The subquery's tables as ``(alias, input)``, the tied one first; empty for one."""
    if len(inner) == 1:
        return ()
    return ((tied, inner[tied]), *((a, n) for a, n in inner.items() if a != tied))


def and_all(conjuncts: list[Any]) -> Any:
    return exp.and_(*conjuncts, copy=True) if conjuncts else None


def aggregated(sub: Any) -> bool:
    """Whether ``sub`` aggregates (an aggregate of its own, not of its subqueries')."""
    return any(a.find_ancestor(exp.Select) is sub for a in sub.find_all(exp.AggFunc))


def outer_column(
    column: Any, outer: dict[str, str], lower: Mapping[str, set[str]]
) -> tuple[str, str] | None:
    if column.table:
        alias = column.table.lower()
        return (alias, column.name.lower()) if alias in outer else None
    owners = [a for a, t in outer.items() if column.name.lower() in lower.get(t, set())]
    return (owners[0], column.name.lower()) if len(owners) == 1 else None


def aggregates_out(
    expression: Any, index: int, *, start: int = 0, keys: Collection[str] = ()
) -> tuple[Any, tuple[Any, ...]] | tuple[str, tuple]:
    """``expression`` with each aggregate replaced by ``__ct_agg<index>.a<j>`` (``j`` from
    ``start``), and them; a column outside them (no single value per key, unless its SQL
    is one of ``keys``: a grouping key) or an aggregate the driver does not compute is
    refused."""
    copy = expression.copy()
    found: list[Any] = []
    for agg in list(copy.find_all(exp.AggFunc)):
        if agg.find_ancestor(exp.AggFunc) is not None:
            continue
        if not isinstance(agg, AGGREGATES) or agg.find(exp.Distinct):
            return f"{agg.sql()} per key is evaluated by Spark", ()
        if any(isinstance(n, exp.AggFunc) for n in agg.this.walk()) if agg.this else False:
            return "an aggregate of an aggregate is evaluated by Spark", ()
        found.append(agg.copy())
        replacement = exp.column(f"a{start + len(found) - 1}", table=aggregate_alias(index))
        if agg is copy:
            copy = replacement
        else:
            agg.replace(replacement)
    for column in copy.find_all(exp.Column):
        if column.table != aggregate_alias(index) and column.sql(dialect="spark") not in keys:
            return "a column outside the aggregates of a subquery is evaluated by Spark", ()
    return copy, tuple(found)
