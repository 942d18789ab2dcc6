"""``JOIN t USING (k)`` as the ``ON`` join it stands for, where the inputs' columns say how.

The delta rules read a join's equalities from ``ON``; ``USING (k)`` hides
them, and its output ``k`` (written bare) is one column merged from both
sides. For an inner join that column is the left side's ``k`` (a row pairs
only equal, non-NULL keys), and for a ``LEFT JOIN`` too (an unmatched row's
right ``k`` is NULL, the merged one its own); for a ``RIGHT JOIN`` it is the
right side's. So ``FROM a JOIN b USING (k)`` plans as ``FROM a JOIN b ON
a.k = b.k`` with every bare ``k`` of that select written ``a.k``: the same
rows. A ``FULL JOIN`` (where the merged key is a ``COALESCE`` of both), a
select with ``*`` (which lists ``k`` once), and a key the inputs' columns do
not place on exactly one table before the join are left as written; the
planner then names them.

Only the plan reads the rewritten query: the full correction runs the
query as the user wrote it, and the two agree because the rows do.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import Any

from sqlglot import exp

from airflow_provider_ct.core.query import input_name
from airflow_provider_ct.ivm.plan.select_shape import sources


def using_as_on(tree: Any, catalog_name: str, columns: Mapping[str, Collection[str]]) -> Any:
    """``tree`` with each ``USING`` join this module takes written with ``ON`` (a copy)."""
    tree = tree.copy()
    lowered = {name: {c.lower() for c in cols} for name, cols in columns.items()}
    for select in list(tree.find_all(exp.Select)):
        if any(j.args.get("using") for j in select.args.get("joins") or []):
            _rewrite(select, catalog_name, lowered)
    return tree


def _rewrite(select: Any, catalog_name: str, columns: Mapping[str, set[str]]) -> None:
    """Each ``USING`` join of ``select`` (in order) as ``ON``, where it can be; in place."""
    if not all(_is_count_star(e) for e in select.expressions if e.find(exp.Star)):
        return
    tables = sources(select)
    owned = [_columns(t, catalog_name, columns) for t in tables]
    merged: dict[str, str] = {}  # a key merged by an earlier USING -> the table it reads
    for index, join in enumerate(select.args.get("joins") or [], start=1):
        using = join.args.get("using")
        side = (join.args.get("side") or "").upper()
        right = owned[index]
        if not using or side == "FULL" or right is None:
            continue
        names = [u.name.lower() for u in using]
        found = [merged.get(n) or _owner(tables[:index], owned[:index], n) for n in names]
        left = [a for a in found if a is not None]
        if len(left) != len(names) or any(n not in right for n in names):
            continue
        alias = tables[index].alias_or_name
        join.set("using", None)
        join.set("on", exp.and_(*(_equal(a, alias, n) for a, n in zip(left, names, strict=True))))
        for a, n in zip(left, names, strict=True):
            merged[n] = alias if side == "RIGHT" else a
        _qualify_bare(select, merged)


def _columns(table: Any, catalog_name: str, columns: Mapping[str, set[str]]) -> set[str] | None:
    if not isinstance(table, exp.Table):
        return None
    name = input_name(table, catalog_name)
    return columns.get(name) if name is not None else None


def _owner(tables: list[Any], owned: list[set[str] | None], name: str) -> str | None:
    """The alias of the one table among ``tables`` that has ``name`` (None: none, several,
    or one whose columns are unknown)."""
    if any(o is None for o in owned):
        return None
    found = [t.alias_or_name for t, o in zip(tables, owned, strict=True) if o and name in o]
    return found[0] if len(found) == 1 else None


def _equal(left: str, right: str, name: str) -> Any:
    return exp.EQ(this=exp.column(name, table=left), expression=exp.column(name, table=right))


def _qualify_bare(select: Any, kept: Mapping[str, str]) -> None:
    """Write each bare column of ``select`` (not of its subqueries) named in ``kept`` with
    its table."""
    for column in list(select.find_all(exp.Column)):
        name = column.name.lower()
        if column.table or name not in kept or column.parent_select is not select:
            continue
        qualified: Any = exp.column(column.name, table=kept[name])
        if isinstance(column.parent, exp.Select) and column in column.parent.expressions:
            qualified = exp.alias_(qualified, column.name)  # the output keeps its name
        column.replace(qualified)


def _is_count_star(node: Any) -> bool:
    """``COUNT(*)`` (its ``*`` lists no column), aliased or not."""
    star = node.find(exp.Star)
    return star is not None and isinstance(star.parent, exp.Count)
