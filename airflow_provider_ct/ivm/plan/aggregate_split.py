"""A grouped select taken apart: its groups as a query of their own, the rest over them.

``SELECT k, SUM(v) AS t, RANK() OVER (ORDER BY SUM(v) DESC) AS r FROM f
GROUP BY k`` has no delta rule as a whole (one group's new sum may move
every rank), but it is two queries: the groups, ``SELECT k AS __ct_g0,
SUM(v) AS __ct_a0 FROM f GROUP BY k`` (the ``group`` strategy maintains
it: its key is an output), and a projection of each group's row, ``SELECT
__ct_g0 AS k, __ct_a0 AS t, RANK() OVER (ORDER BY __ct_a0 DESC) AS r FROM
<groups>``. SQL evaluates a grouped select in that order (groups, then
``HAVING``, then windows, then ``ORDER BY``/``LIMIT``), so the second query
over the first's rows is the same query. The same split serves a grouping
key that is not an output column (``SELECT SUM(v) FROM f GROUP BY k``:
the groups' table has it), ``HAVING`` and ``LIMIT`` over groups.

:mod:`.compose` keeps the groups as a part of the view; this module only
rewrites SQL. Refused (``None``): ``ROLLUP``/``CUBE``/``GROUPING SETS``
(one row per grouping set: the groups' query would run in full anyway),
``DISTINCT``, subqueries in the select list, an output without a name of
its own (Spark names it after its text, which the rest would not repeat),
and an expression left that
reads a column neither a key nor inside an aggregate (SQL would refuse it,
or the key is written differently than in ``GROUP BY``).
"""

from __future__ import annotations

from typing import Any

from sqlglot import exp

from airflow_provider_ct.ivm.plan.select_shape import has_own_aggregate

KEY_PREFIX = "__ct_g"
AGGREGATE_PREFIX = "__ct_a"
#: The alias the rest of the query reads the groups' table under.
GROUPS_ALIAS = "__ct_groups"


def split_groups(select: Any) -> tuple[Any, Any] | None:
    """``(groups query, the rest of the select over GROUPS_ALIAS)``, or None (module docstring).

    ``select`` is not changed. The rest's ``FROM`` is a placeholder table
    ``GROUPS_ALIAS``; the caller puts the groups' table there.
    """
    if not isinstance(select, exp.Select) or not _splittable(select):
        return None
    group = select.args.get("group")
    keys = list(group.expressions) if group is not None else []
    aggregates = _aggregates(select)
    if not aggregates:
        return None
    groups = exp.select(
        *[exp.alias_(k.copy(), f"{KEY_PREFIX}{i}") for i, k in enumerate(keys)],
        *[exp.alias_(a.copy(), f"{AGGREGATE_PREFIX}{i}") for i, a in enumerate(aggregates)],
    )
    for arg in ("from_", "from", "joins", "where", "group"):
        if select.args.get(arg) is not None:
            groups.set(arg, select.args[arg].copy())
    rest = _rest(select, keys, aggregates)
    return (groups, rest) if rest is not None else None


def _splittable(select: Any) -> bool:
    group = select.args.get("group")
    if group is None and not has_own_aggregate(select):
        return False
    if group is not None and any(group.args.get(a) for a in ("rollup", "cube", "grouping_sets")):
        return False
    if select.args.get("distinct") or select.find(exp.Lateral):
        return False
    if group is not None and not _keys_stand_alone(select, list(group.expressions)):
        return False
    return not any(i.find(exp.Subquery, exp.Exists) for i in select.expressions)


def _keys_stand_alone(select: Any, keys: list[Any]) -> bool:
    """Whether each key means the same in the groups' query, which has other outputs:
    not an ordinal (``GROUP BY 1``) nor an output's alias (``GROUP BY kk``)."""
    aliases = {
        i.alias.lower()
        for i in select.expressions
        if isinstance(i, exp.Alias)
        and not (isinstance(i.this, exp.Column) and i.this.name == i.alias)
    }
    for key in keys:
        if isinstance(key, exp.Literal):
            return False
        if isinstance(key, exp.Column) and not key.table and key.name.lower() in aliases:
            return False
    return True


def _aggregates(select: Any) -> list[Any]:
    """The select's own aggregate calls (not a window's function, not a subquery's), once each."""
    found: list[Any] = []
    for part in (*select.expressions, select.args.get("having"), select.args.get("order")):
        if part is None:
            continue
        for node in part.find_all(exp.AggFunc):
            if isinstance(node.parent, exp.Window) and node.parent.this is node:
                continue  # SUM(x) OVER (...): the window's function, evaluated by the rest
            if node.parent_select is not select or any(node == seen for seen in found):
                continue
            found.append(node)
    return found


def _rest(select: Any, keys: list[Any], aggregates: list[Any]) -> Any | None:
    """The select over the groups: aggregates and keys as the groups' columns, HAVING a WHERE."""
    items = []
    for item in select.expressions:
        if not isinstance(item, exp.Alias | exp.Column):
            return None  # Spark names it after its text, which the rest would not repeat
        swapped = _over_groups(item, keys, aggregates)
        items.append(swapped if isinstance(item, exp.Alias) else exp.alias_(swapped, item.name))
    rest = exp.select(*items)
    rest = rest.from_(exp.to_table(GROUPS_ALIAS))
    having = select.args.get("having")
    if having is not None:
        rest = rest.where(_over_groups(having.this, keys, aggregates))
    order = select.args.get("order")
    if order is not None:
        rest.set("order", _over_groups(order, keys, aggregates))
    for arg in ("limit", "offset"):
        if select.args.get(arg) is not None:
            rest.set(arg, select.args[arg].copy())
    names = {i.alias_or_name.lower() for i in select.expressions}
    for column in rest.find_all(exp.Column):
        name = column.name.lower()
        if name.startswith((KEY_PREFIX, AGGREGATE_PREFIX)) and not column.table:
            continue
        in_order = order is not None and column.find_ancestor(exp.Order) is not None
        if column.table or not in_order or name not in names:
            return None  # neither a key nor aggregated (nor an output ORDER BY names)
    return rest


def _over_groups(node: Any, keys: list[Any], aggregates: list[Any]) -> Any:
    """``node`` with each aggregate call and each grouping key as the groups' column."""

    def swap(found: Any) -> Any:
        if isinstance(found.parent, exp.Window) and found.parent.this is found:
            return found  # a window's own function: only its arguments are the groups'
        for i, aggregate in enumerate(aggregates):
            if found == aggregate:
                return exp.column(f"{AGGREGATE_PREFIX}{i}")
        if isinstance(found, exp.AggFunc):
            return found
        for i, key in enumerate(keys):
            if found == key:
                return exp.column(f"{KEY_PREFIX}{i}")
        return found

    return node.copy().transform(swap)
