"""What a SELECT is made of, read from its tree: its own aggregates, a ``UNION ALL``'s branches.

Small questions the planner (:mod:`.planner`) and the columns' reading
(:mod:`.columns`) ask of a select, apart from the plans they lead to.
"""

from __future__ import annotations

from typing import Any

from sqlglot import exp

from airflow_provider_ct.core.query import qualified_table_name
from airflow_provider_ct.ivm.plan.refusals import NotIncremental
from airflow_provider_ct.ivm.plan.windows import own_windows, windowed


def sources(select: Any) -> list[Any]:
    """What ``select`` reads from: its ``FROM`` and every join's, in order (tables or not)."""
    from_ = select.args.get("from_") or select.args.get("from")
    joined = [j.this for j in select.args.get("joins") or []]
    return [from_.this, *joined] if from_ is not None else joined


def outer_join(select: Any) -> Any | None:
    """``select``'s first join that is not an inner or cross join by ``ON`` (an outer join,
    a semi or anti join, ``USING``), or None."""
    for join in select.args.get("joins") or []:
        kind = (join.args.get("kind") or "").upper()
        if join.args.get("side") or kind not in ("", "INNER", "CROSS") or join.args.get("using"):
            return join
    return None


def has_own_aggregate(select: Any) -> bool:
    """Whether ``select`` aggregates (an aggregate call of its own, not of a subquery's,
    nor a window function's)."""
    return any(
        c.find_ancestor(exp.Select) is select and not windowed(c)
        for c in select.find_all(exp.AggFunc)
    )


def plainly_named(item: Any) -> bool:
    """Whether a select item has a name of its own (a column or an alias) and reads no
    ``*`` (``COUNT(*)`` is a call): what a query over a split's rows can name again."""
    if any(not isinstance(star.parent, exp.Count) for star in item.find_all(exp.Star)):
        return False
    return isinstance(item, exp.Alias | exp.Column)


def is_count_star(node: Any) -> bool:
    star = node.find(exp.Star)
    return star is not None and isinstance(star.parent, exp.Count)


def union_all_leaves(tree: Any) -> list[Any]:
    """The branches of a ``UNION ALL`` (one: a plain select); refused: other set operations."""
    if isinstance(tree, exp.Select):
        return [tree]
    if isinstance(tree, exp.Union) and not isinstance(tree, exp.Except | exp.Intersect):
        if tree.args.get("distinct"):
            raise NotIncremental("UNION (without ALL) removes duplicates across branches")
        if tree.args.get("limit") or tree.args.get("order"):
            raise NotIncremental("ORDER BY / LIMIT over a UNION is recomputed in full")
        return [*union_all_leaves(tree.left), *union_all_leaves(tree.right)]
    if isinstance(tree, exp.Subquery):
        return union_all_leaves(tree.this)
    raise NotIncremental(f"{tree.key.upper()} is recomputed in full")


def check_linear_select(select: Any) -> None:
    """A block without aggregation: no aggregate, no window, no DISTINCT, no LIMIT."""
    if own_windows(select):
        raise NotIncremental("window functions inside a UNION ALL are recomputed in full")
    if select.args.get("group") is not None or has_own_aggregate(select):
        raise NotIncremental("an aggregate below the top of the query is recomputed in full")
    if select.args.get("distinct"):
        raise NotIncremental("DISTINCT inside a UNION ALL is recomputed in full")
    if select.args.get("limit") or select.args.get("offset"):
        raise NotIncremental("LIMIT is recomputed in full")
    if select.args.get("having") is not None:
        raise NotIncremental("HAVING without GROUP BY is recomputed in full")


def block_tables(select: Any) -> list[Any]:
    """The FROM table and every joined one, in order."""
    from_ = select.args.get("from_") or select.args.get("from")
    if from_ is not None and isinstance(from_.this, exp.Subquery):
        raise NotIncremental(
            "a derived table (a subquery in FROM) is recomputed in full unless it only "
            "projects and filters and is the query's only source"
        )
    if from_ is None or not isinstance(from_.this, exp.Table):
        raise NotIncremental("the FROM clause is not a table")
    return [from_.this, *(j.this for j in select.args.get("joins") or [])]


def qualified_name(table: Any) -> str:
    """A table node's name as the query wrote it (``catalog.db.name``, parts present only).

    Public because the rewrites (:mod:`.rewrites`) and the driver's joins name
    a block's inputs the same way the planner did when it found them.
    """
    return qualified_table_name(table)
