"""``COUNT(DISTINCT x)`` per group: the (group, value) pairs kept in place, counted over.

A distinct count has no inverse: deleting a row with value ``x`` lowers the
count only if no other row of the group holds ``x``, which the count alone
cannot say. What it needs is each pair's multiplicity, and that is exactly
the state of an in-place aggregate grouped by the view's keys *and* ``x``,
counting rows: a pair whose count reaches zero leaves the state, a new one
enters it, both exactly and without reading the inputs. So the view is
split (:mod:`.nested`): the *inner* select is

    SELECT g0 AS __ct_g0, ..., x AS __ct_d, COUNT(*) AS __ct_n
    FROM <the view's sources> WHERE <its filter> GROUP BY g0, ..., x

kept in place, and the *outer* query is the view's own select list over the
pairs' rows, grouped again by the keys, each ``COUNT(DISTINCT x)`` now
``COUNT(__ct_d)``, its ``HAVING``, ``ORDER BY`` and ``LIMIT`` unchanged:
NULL ``x`` is a pair of its own that ``COUNT`` skips, as ``COUNT(DISTINCT)``
does, and a group whose values are all NULL still counts 0. The outer
query is recomputed every tick over the pairs, as for every nested plan:
the pairs are fewer than the rows they come from (TPC-H q16: a pair per
part kind and supplier, from the join of ``partsupp`` and ``part``).

Other calls beside it re-aggregate over the pairs: ``COUNT(*)`` is the sum
of the pairs' row counts, ``COUNT(y)`` of their counts (0 without pairs),
``SUM(y)`` the sum of their sums cast back to the per-pair sum's type
(Spark widens a sum of decimal sums; the cast, typed from the inner's
analysis at the tick, keeps the view's type and arithmetic), ``MIN`` and
``MAX`` the extremum of the pairs' extrema. ``AVG`` (Spark's rounding of
the quotient) and distinct sums are left to the grouped plan.

Taken only where the rewrite is plainly the same query: one distinct
value, the keys are expressions (not positions, ``ROLLUP``, ``CUBE`` or
grouping sets), every output column keeps its name (a bare key, or an
alias), and no subquery above the grouping. Otherwise the view keeps the
plan it had; and a tick whose pairs cannot be kept in place (a
floating-point value or sum, found when the job reads the types) runs
that plan too (:attr:`~.planner.Plan.unnested`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sqlglot import exp

from airflow_provider_ct.ivm.plan.having import INNER_VIEW, TYPED_PREFIX

#: The inner's column holding the distinct value, and its row count.
DISTINCT_COLUMN = "__ct_d"
PAIR_ROWS = "__ct_n"


def group_column(index: int) -> str:
    return f"__ct_g{index}"


def split_distinct(tree: Any) -> tuple[Any, Any] | None:
    """``(inner select, outer query)`` for a select whose aggregates are one distinct count
    and calls that re-aggregate, else None (the query is planned as it is)."""
    if not isinstance(tree, exp.Select) or tree.args.get("distinct") is not None:
        return None
    calls = _calls(tree)
    if calls is None or tree.find(exp.Window) is not None:
        return None
    keys = _keys(tree)
    if keys is None:
        return None
    outer = _outer(tree, keys, calls)
    if outer is None:
        return None
    inner = tree.copy()
    for arg in ("having", "order", "limit", "offset", "qualify"):
        inner.set(arg, None)
    items = [exp.alias_(k.copy(), group_column(i)) for i, k in enumerate(keys)]
    items += [exp.alias_(calls.value.copy(), DISTINCT_COLUMN), exp.alias_(_count_star(), PAIR_ROWS)]
    items += [exp.alias_(call.copy(), column) for call, column in calls.partials.values()]
    inner.set("expressions", items)
    inner.set("group", exp.Group(expressions=[*(k.copy() for k in keys), calls.value.copy()]))
    return inner, outer


@dataclass(frozen=True)
class _Calls:
    """A select's aggregate calls: the distinct count's value, and the others per pair."""

    value: Any
    #: Each other call's text -> (the call, the inner column of its value per pair).
    partials: dict[str, tuple[Any, str]]


#: Calls whose value over a group is a re-aggregate of their values over its pairs.
_PARTIAL = (exp.Count, exp.Sum, exp.Min, exp.Max)


def _calls(select: Any) -> _Calls | None:
    """The select's aggregate calls, when they are ``COUNT(DISTINCT x)`` of one same ``x``
    (at least once) and ``COUNT``, ``SUM``, ``MIN``, ``MAX`` of plain values; else None."""
    calls = [c for c in select.find_all(exp.AggFunc) if c.find_ancestor(exp.Select) is select]
    values: list[Any] = []
    partials: dict[str, tuple[Any, str]] = {}
    for call in calls:
        inside = call.this
        if isinstance(call, exp.Count) and isinstance(inside, exp.Distinct):
            if len(inside.expressions) != 1:
                return None
            values.append(inside.expressions[0])
        elif isinstance(call, exp.Count) and isinstance(inside, exp.Star):
            continue  # the pairs' own row count
        elif isinstance(call, _PARTIAL) and not _nested_calls(call):
            text = call.sql(dialect="spark")
            partials.setdefault(text, (call, f"__ct_a{len(partials)}"))
        else:
            return None
    if not values or any(v != values[0] for v in values[1:]):
        return None
    return _Calls(values[0], partials)


def _nested_calls(call: Any) -> bool:
    """Whether ``call`` holds another aggregate, a distinct or more than one argument."""
    inside = [n for n in call.find_all(exp.AggFunc, exp.Distinct) if n is not call]
    return bool(inside) or bool(call.args.get("expressions"))


def _regrouped(call: Any, calls: _Calls) -> Any:
    """A call of the view over its pairs' rows: a count of the values, or a re-aggregate
    (a count is the sum of the pairs' counts, 0 without pairs; a sum the sum of their sums,
    cast back to the per-pair sum's type, which Spark would widen)."""
    if isinstance(call, exp.Count) and isinstance(call.this, exp.Distinct):
        return exp.Count(this=exp.column(DISTINCT_COLUMN))
    if isinstance(call, exp.Count) and isinstance(call.this, exp.Star):
        return exp.Coalesce(this=exp.Sum(this=exp.column(PAIR_ROWS)), expressions=[_zero()])
    column = exp.column(calls.partials[call.sql(dialect="spark")][1])
    if isinstance(call, exp.Count):
        return exp.Coalesce(this=exp.Sum(this=column), expressions=[_zero()])
    if isinstance(call, exp.Sum):
        typed = f"{TYPED_PREFIX}{column.name}"
        return exp.Anonymous(this=typed, expressions=[exp.Sum(this=column.copy())])
    return type(call)(this=column)


def _zero() -> Any:
    return exp.Literal.number(0)


def _keys(select: Any) -> list[Any] | None:
    """The ``GROUP BY`` expressions (none: one group); None for positions or grouping sets."""
    group = select.args.get("group")
    if group is None:
        return []
    if any(group.args.get(a) for a in ("rollup", "cube", "grouping_sets", "totals")):
        return None
    keys = list(group.expressions)
    if any(isinstance(k, exp.Literal | exp.Rollup | exp.Cube | exp.GroupingSets) for k in keys):
        return None
    return keys


def _outer(select: Any, keys: list[Any], calls: _Calls) -> Any:
    """The view's select over the pairs (:data:`INNER_VIEW`); None when a name would change
    or a column of the sources is still read."""
    above = [*select.expressions, select.args.get("having"), select.args.get("order")]
    if any(part is not None and part.find(exp.Select) for part in above):
        return None  # a subquery above the grouping (its WHERE's are the inner's)
    outer = select.copy()
    outer.set("joins", None)
    outer.set("where", None)
    source = exp.From(this=exp.Table(this=exp.to_identifier(INNER_VIEW)))
    outer.set("from_" if "from_" in outer.args else "from", source)
    names = [item.alias_or_name for item in select.expressions]
    items = []
    for item, name in zip(outer.expressions, names, strict=True):
        bare = isinstance(item, exp.Column)
        if not bare and not isinstance(item, exp.Alias):
            return None  # Spark names an expression by its text: the name would change
        replaced = _over_pairs(item, keys, calls)
        items.append(exp.alias_(replaced, name) if bare else replaced)
    outer.set("expressions", items)
    if keys:
        columns = [exp.column(group_column(i)) for i in range(len(keys))]
        outer.set("group", exp.Group(expressions=columns))
    for arg in ("having", "order"):
        part = outer.args.get(arg)
        if part is not None:
            outer.set(arg, _over_pairs(part, keys, calls))
    pairs = {group_column(i) for i in range(len(keys))} | {DISTINCT_COLUMN, PAIR_ROWS}
    pairs |= {column for _, column in calls.partials.values()}
    if _reads_other_than(items, pairs):
        return None  # a column of the sources that is not a key
    after = [outer.args.get(arg) for arg in ("having", "order")]  # may name output columns
    return None if _reads_other_than(after, pairs | set(names)) else outer


def _reads_other_than(nodes: list[Any], names: set[str]) -> bool:
    """Whether a column of ``nodes`` (None: none) is not one of ``names``."""
    return any(
        column.name not in names
        for node in nodes
        if node is not None
        for column in node.find_all(exp.Column)
    )


def _over_pairs(node: Any, keys: list[Any], calls: _Calls) -> Any:
    """``node`` with every aggregate call over the pairs' columns and every key a key column."""

    def over(part: Any) -> Any:
        if isinstance(part, exp.AggFunc):
            return _regrouped(part, calls)
        index = next((i for i, key in enumerate(keys) if part == key), None)
        return part if index is None else exp.column(group_column(index))

    return node.transform(over)


def _count_star() -> Any:
    return exp.Count(this=exp.Star())


__all__ = ["DISTINCT_COLUMN", "PAIR_ROWS", "group_column", "split_distinct"]
