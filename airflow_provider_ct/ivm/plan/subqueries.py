"""Subqueries in a block's ``WHERE``: which tables they read, and which are semi-joins.

Two rules of the planner (:mod:`.planner`) read subqueries, and both only
their shape, from SQL alone:

* every subquery in ``WHERE`` (or in a projection's select list) is a *fixed
  filter* of the delta rules while the tables it reads do not change
  (:func:`fixed_subquery_tables`; a tick that changes one adds what each
  subquery's own rule bounds, :mod:`.subquery_changes`);
* an ``EXISTS`` / ``NOT EXISTS`` / ``IN`` conjunct over one table tied by one
  equality is a *semi-join*, whose table an in-place tick maintains on the
  driver (:func:`semi_join_query`, :func:`semi_tables`;
  :mod:`..driver.semi_join` places it with the tables' columns).

Kept apart from the planner, which chooses strategies; refusals are
returned as reasons (as :mod:`.windows` does) and the planner raises them.
"""

from __future__ import annotations

from typing import Any

from sqlglot import exp

from airflow_provider_ct.core.query import (
    input_name,
    nondeterministic_calls,
    reads_query_name,
)


def semi_join_query(conjunct: Any) -> tuple[Any, bool, Any] | None:
    """``(subquery, anti, outer expression or None)`` of a semi/anti-join conjunct, else None.

    ``EXISTS (q)``, ``NOT EXISTS (q)`` and ``x IN (q)`` (not ``NOT IN``: a NULL
    in ``q`` makes it unknown everywhere) where ``q`` reads one table, with no
    join, aggregate, window, subquery, ``DISTINCT``, ``LIMIT`` or grouping.
    Only the shape: how ``q`` is tied to the block is found with the
    tables' columns, when a tick runs (:mod:`..driver.semi_join`).
    """
    node, anti = unnegated(conjunct)
    if isinstance(node, exp.Exists):
        query, outer = node.this, None
    elif isinstance(node, exp.In) and node.args.get("query") is not None and not anti:
        query, outer = node.args["query"], node.this
    else:
        return None
    while isinstance(query, exp.Subquery):
        query = query.this
    if not isinstance(query, exp.Select) or query.args.get("joins"):
        return None
    from_ = query.args.get("from_") or query.args.get("from")
    if from_ is None or not isinstance(from_.this, exp.Table) or not from_.this.name:
        return None
    if any(query.args.get(a) for a in ("group", "having", "distinct", "limit", "offset")):
        return None
    if query.find(exp.AggFunc, exp.Window, exp.Subquery, exp.Exists):
        return None
    if any(isinstance(n, exp.In) and n.args.get("query") for n in query.find_all(exp.In)):
        return None
    if not _tied_by_one_equality(query, from_.this.alias_or_name.lower()):
        return None
    return query, anti, outer


def unnegated(conjunct: Any) -> tuple[Any, bool]:
    """``(predicate, whether under NOT)``: ``conjunct`` through parentheses and one ``NOT``."""
    while isinstance(conjunct, exp.Paren):
        conjunct = conjunct.this
    anti = isinstance(conjunct, exp.Not)
    node = conjunct.this if anti else conjunct
    while isinstance(node, exp.Paren):
        node = node.this
    return node, anti


def _tied_by_one_equality(query: Any, alias: str) -> bool:
    """Whether the subquery's qualified columns tie it to the block by at most one equality.

    What can be told without schemas (TPC-H q21's ``l2.l_suppkey <> l1.l_suppkey``
    cannot be maintained by key): a conjunct naming the subquery's alias and
    another one must be ``inner = outer``, and only one may. Unqualified
    columns are placed when a tick runs, with the tables' columns.
    """
    where = query.args.get("where")
    ties = 0
    for conjunct in where_conjuncts(where.this) if where is not None else []:
        qualifiers = {c.table.lower() for c in conjunct.find_all(exp.Column) if c.table}
        if alias not in qualifiers or len(qualifiers) < 2:
            continue
        sides = (conjunct.this, conjunct.expression) if isinstance(conjunct, exp.EQ) else ()
        if len(qualifiers) != 2 or not all(isinstance(c, exp.Column) for c in sides):
            return False
        ties += 1
    return ties <= 1


def semi_tables(select: Any, catalog_name: str, fixed: tuple[str, ...]) -> tuple[str, ...]:
    """The tables of ``fixed`` read only by semi-join conjuncts of ``WHERE``."""
    where = select.args.get("where")
    if where is None or not fixed:
        return ()
    semi: set[str] = set()
    other: set[str] = set()
    for conjunct in where_conjuncts(where.this):
        found = semi_join_query(conjunct)
        names = {input_name(t, catalog_name) for t in conjunct.find_all(exp.Table)}
        tables = {name for name in names if name is not None}
        (semi if found is not None else other).update(tables)
    return tuple(sorted(semi - other))


def where_conjuncts(condition: Any) -> list[Any]:
    """The top-level ``AND`` operands of a condition, through parentheses."""
    while isinstance(condition, exp.Paren):
        condition = condition.this
    if isinstance(condition, exp.And):
        return [*where_conjuncts(condition.left), *where_conjuncts(condition.right)]
    return [condition]


def fixed_subquery_tables(select: Any, catalog_name: str) -> tuple[str, ...] | str:
    """The tables read inside ``select``'s subqueries in ``WHERE`` (or in the select list
    of a projection), or why it has others.

    Why such a block can still tick incrementally: while none of these
    tables changes, each subquery is a fixed function of the outer row, a
    filter or a value like any other, and the delta rules hold for the
    outer tables. A tick that changes one of them adds the rows it moves,
    as each subquery's rule bounds them (:mod:`.subquery_changes`), or runs
    in full where a rule has no bound (:mod:`.decision`).
    """
    found: set[str] = set()
    where = select.args.get("where")
    for node in select.find_all(exp.Subquery, exp.Exists, exp.In):
        if isinstance(node, exp.In) and node.args.get("query") is None:
            continue
        if isinstance(node, exp.Subquery) and isinstance(node.parent, exp.From | exp.Join):
            continue  # a derived table: block_tables refuses it with its reason
        in_where = where is not None and _in_wheres(node, select)
        if not in_where and not _in_projection(node, select):
            return "a subquery outside WHERE is recomputed in full"
        query = node.args.get("query") if isinstance(node, exp.In) else node.this
        if query is None or query.find(exp.Window) or nondeterministic_calls(query):
            return "a subquery with window or nondeterministic calls is recomputed in full"
        if reads_query_name(query):
            return "a subquery reading a CTE is recomputed in full"
        for table in query.find_all(exp.Table):
            name = input_name(table, catalog_name)
            if name is not None:
                found.add(name)
    return tuple(sorted(found))


def _in_projection(node: Any, select: Any) -> bool:
    """Whether ``node`` is a subquery in the select list of ``select``, a projection (no
    grouping, aggregate, window, ``DISTINCT`` or ``LIMIT`` of its own): a value of each
    row like a column, which the delta rules carry as they carry a filter's value (the
    grouped strategies would read it as a key, which they are not asked to)."""
    if _owner(node) is not select or not any(within(node, i) for i in select.expressions):
        return False
    if any(select.args.get(a) for a in ("group", "having", "distinct", "limit")):
        return False
    own = (n for n in select.find_all(exp.AggFunc, exp.Window) if _owner(n) is select)
    return next(own, None) is None


def projected_subquery(select: Any) -> bool:
    """Whether ``select`` holds a subquery in its select list (a projection's value)."""
    return any(
        _owner(node) is select and any(within(node, i) for i in select.expressions)
        for node in select.find_all(exp.Subquery)
    )


def _owner(node: Any) -> Any:
    owner = node.parent
    while owner is not None and not isinstance(owner, exp.Select):
        owner = owner.parent
    return owner


def _in_wheres(node: Any, select: Any) -> bool:
    """Whether ``node`` sits in ``select``'s ``WHERE``, or in the ``WHERE`` of a subquery
    that does, and so on down (TPC-H q20's ``IN`` inside an ``IN``): a subquery in a select
    list, a ``HAVING`` or a ``FROM`` at any level is not."""
    while True:
        owner = node.parent
        while owner is not None and not isinstance(owner, exp.Select):
            owner = owner.parent
        where = owner.args.get("where") if owner is not None else None
        if where is None or not within(node, where):
            return False
        if owner is select:
            return True
        node = owner


def within(node: Any, ancestor: Any) -> bool:
    """Whether ``ancestor`` (a node, by identity) is above ``node`` in its tree."""
    parent = node.parent
    while parent is not None and parent is not ancestor:
        parent = parent.parent
    return parent is ancestor
