"""``ROLLUP``, ``CUBE``, ``GROUPING SETS`` taken apart: the finest groups, the sets over them.

``SELECT a, b, SUM(x) AS s FROM f GROUP BY ROLLUP (a, b)`` has one row per
group of each grouping set: ``(a, b)``, ``(a)``, ``()``. A changed row moves
one group of each set, and the planner has no rule for that. But every set
is a coarsening of the finest grouping, ``GROUP BY a, b``, and ``SUM``,
``COUNT``, ``MIN`` and ``MAX`` of a coarser group are the ``SUM``
(``COUNT``: the sum of the counts), ``MIN`` and ``MAX`` of its finer groups'
values. So the select is two queries: the finest groups, ``SELECT a AS
__ct_g0, b AS __ct_g1, SUM(x) AS __ct_a0 FROM f GROUP BY a, b`` (the
``group`` or ``aggregate`` strategy maintains it: its keys are outputs),
and the same select over their rows, ``SELECT __ct_g0 AS a, __ct_g1 AS b,
SUM(__ct_a0) AS s FROM <groups> GROUP BY ROLLUP (__ct_g0, __ct_g1)``, which
:mod:`.compose` recomputes over the groups' part (far fewer rows than the
inputs). ``GROUPING(a)`` and ``GROUPING_ID`` name the same keys in the
rest; ``HAVING``, windows, ``ORDER BY`` and ``LIMIT`` stay there too.

An ``AVG`` is kept as its sum and its count, and is their quotient
above. A ``SUM`` of sums has a wider decimal type than the sum (Spark adds
ten digits of precision per ``SUM``); the write job casts such a column of
the query over the parts back to the view's own type (the values are the
same sums, so they fit), and runs the query as written where a type
differs otherwise (a decimal average's quotient has its own scale and
rounding: that view does not compose). Refused (``None``): any other
aggregate (``COUNT(DISTINCT)``... a coarser group's value is not a
function of its finer groups' values), ``DISTINCT``, ``WITH ROLLUP`` (MySQL's spelling),
subqueries in the select list, an output without a name of its own, a key
that is not a column or an expression of columns (an ordinal, an alias).
"""

from __future__ import annotations

from typing import Any

from sqlglot import exp

from airflow_provider_ct.ivm.plan.aggregate_split import AGGREGATE_PREFIX, KEY_PREFIX

#: The alias the rest of the query reads the finest groups' table under.
SETS_ALIAS = "__ct_sets"
#: Aggregate -> how a coarser group's value is had from its finer groups' values.
_REAGGREGATE = {exp.Sum: exp.Sum, exp.Count: exp.Sum, exp.Min: exp.Min, exp.Max: exp.Max}
#: ``AVG``: a sum over a count, each kept per finest group.
_AVERAGED = (exp.Avg,)
_SETS = (exp.Rollup, exp.Cube, exp.GroupingSets)


def split_grouping_sets(select: Any) -> tuple[Any, Any] | None:
    """``(finest groups query, the select over SETS_ALIAS)``, or None (module docstring)."""
    if not isinstance(select, exp.Select) or not _splittable(select):
        return None
    group = select.args["group"]
    keys = _finest_keys(group)
    aggregates = _aggregates(select)
    if keys is None or aggregates is None or not aggregates:
        return None
    partials = [p for a in aggregates for p in _partials(a)]
    groups = exp.select(
        *[exp.alias_(k.copy(), f"{KEY_PREFIX}{i}") for i, k in enumerate(keys)],
        *[exp.alias_(p, f"{AGGREGATE_PREFIX}{j}") for j, p in enumerate(partials)],
    )
    for arg in ("from_", "from", "joins", "where"):
        if select.args.get(arg) is not None:
            groups.set(arg, select.args[arg].copy())
    groups.set("group", exp.Group(expressions=[k.copy() for k in keys]))
    rest = _rest(select, keys, aggregates)
    return (groups, rest) if rest is not None else None


def _splittable(select: Any) -> bool:
    group = select.args.get("group")
    if group is None or any(group.args.get(a) for a in ("rollup", "cube", "grouping_sets")):
        return False  # no sets, or ``WITH ROLLUP``
    if not any(isinstance(e, _SETS) for e in group.expressions):
        return False
    if select.args.get("distinct") or select.find(exp.Lateral):
        return False
    return all(
        isinstance(i, exp.Alias | exp.Column) and not i.find(exp.Subquery, exp.Exists)
        for i in select.expressions
    )


def _finest_keys(group: Any) -> list[Any] | None:
    """Every key any grouping set names, once each, in order; None for an ordinal."""
    keys: list[Any] = []
    for node in group.expressions:
        members = _members(node) if isinstance(node, _SETS) else [node]
        for key in members:
            if isinstance(key, exp.Literal) or key.find(exp.AggFunc, exp.Subquery):
                return None
            if not any(key == seen for seen in keys):
                keys.append(key)
    return keys


def _members(node: Any) -> list[Any]:
    """The keys a ``ROLLUP``/``CUBE``/``GROUPING SETS`` names (sets' tuples flattened)."""
    found = []
    for item in node.expressions:
        if isinstance(item, exp.Tuple):
            found.extend(item.expressions)
        elif isinstance(item, exp.Paren):
            found.extend(_members(exp.Tuple(expressions=[item.this])))
        else:
            found.append(item)
    return found


def _aggregates(select: Any) -> list[Any] | None:
    """The select's own aggregate calls, once each; None if one is not re-aggregable."""
    found: list[Any] = []
    for part in (*select.expressions, select.args.get("having"), select.args.get("order")):
        if part is None:
            continue
        for node in part.find_all(exp.AggFunc):
            if isinstance(node, exp.Grouping | exp.GroupingId):
                continue  # which keys a row's set groups by: the rest's own
            if isinstance(node.parent, exp.Window) and node.parent.this is node:
                continue  # a window's function, evaluated by the rest
            if node.parent_select is not select or any(node == seen for seen in found):
                continue
            if type(node) not in (*_REAGGREGATE, *_AVERAGED) or node.find(exp.Distinct):
                return None
            found.append(node)
    return found


def _partials(aggregate: Any) -> list[Any]:
    """What the finest groups keep of ``aggregate``: itself, or an average's sum and count."""
    if isinstance(aggregate, _AVERAGED):
        return [exp.Sum(this=aggregate.this.copy()), exp.Count(this=aggregate.this.copy())]
    return [aggregate.copy()]


def _coarser(aggregates: list[Any]) -> list[Any]:
    """Each aggregate over the finest groups' columns: a sum of sums or counts, an extreme
    of extremes, an average's sum over its count (``NULLIF``: no value is a NULL average,
    not a division by zero)."""
    found: list[Any] = []
    j = 0
    for aggregate in aggregates:
        column = exp.column(f"{AGGREGATE_PREFIX}{j}")
        if isinstance(aggregate, _AVERAGED):
            count = exp.column(f"{AGGREGATE_PREFIX}{j + 1}")
            nonzero = exp.Nullif(this=exp.Sum(this=count), expression=exp.Literal.number(0))
            found.append(exp.Div(this=exp.Sum(this=column), expression=nonzero))
            j += 2
            continue
        found.append(_REAGGREGATE[type(aggregate)](this=column))
        j += 1
    return found


def _rest(select: Any, keys: list[Any], aggregates: list[Any]) -> Any | None:
    """The select over the finest groups: keys as their columns, aggregates re-aggregated."""
    coarser = _coarser(aggregates)

    def swap(found: Any) -> Any:
        if isinstance(found.parent, exp.Window) and found.parent.this is found:
            return found
        for aggregate, over_groups in zip(aggregates, coarser, strict=True):
            if found == aggregate:
                return over_groups.copy()
        for i, key in enumerate(keys):
            if found == key:
                return exp.column(f"{KEY_PREFIX}{i}")
        return found

    rest = select.copy()
    for arg in ("from_", "from", "joins", "where"):
        rest.set(arg, None)
    items = []
    for item in rest.expressions:
        swapped = item.transform(swap)
        items.append(swapped if isinstance(item, exp.Alias) else exp.alias_(swapped, item.name))
    rest.set("expressions", items)
    for arg in ("group", "having", "order"):
        if rest.args.get(arg) is not None:
            rest.set(arg, rest.args[arg].transform(swap))
    rest.set("from_", exp.From(this=exp.to_table(SETS_ALIAS)))
    names = {i.alias_or_name.lower() for i in select.expressions}
    for column in rest.find_all(exp.Column):
        name = column.name.lower()
        if name.startswith((KEY_PREFIX, AGGREGATE_PREFIX)) and not column.table:
            continue
        in_order = column.find_ancestor(exp.Order) is not None
        if column.table or not in_order or name not in names:
            return None  # neither a key nor aggregated (nor an output ORDER BY names)
    return rest
