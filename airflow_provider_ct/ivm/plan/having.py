"""``HAVING`` over the rows of an aggregate kept in place: the predicate the outer query applies.

A grouped select ``SELECT k, SUM(v) AS t ... GROUP BY k HAVING COUNT(*) > 1
AND t > 2`` keeps its groups in place without the ``HAVING`` (:mod:`.nested`):
every aggregate call of the predicate becomes a hidden column of the kept
select (``COUNT(*) AS __ct_h0``), every grouping column or output alias
the output column it names, and the outer query filters the groups' rows
with the predicate rewritten over those columns. The target never gets the
hidden columns.

A scalar subquery of the predicate over *the same rows* as the block
(TPC-H q11: ``SUM(x) > (SELECT SUM(x) * 0.0001 FROM <the same tables> WHERE
<the same conditions>)``) is an aggregate of the groups' rows, so it reads
the kept rows instead of the tables: ``SUM`` of the groups' sums, ``SUM``
of their counts (0 when there is no group), ``MIN`` of their minima,
``MAX`` of their maxima. The groups partition exactly the rows the
subquery aggregates, so the value is the same; and the re-aggregate is
cast back to the type of the original call (a sum of sums has a wider
decimal type, which would change the arithmetic around it), written as a
marker call ``__ct_as_<column>(...)`` that the tick replaces with a cast to
the hidden column's Spark type (:func:`typed_outer`, known only there).
Any other subquery in ``HAVING`` is left to the grouped plan.
"""

from __future__ import annotations

from typing import Any

from sqlglot import exp

#: The view the outer query reads the inner select's rows as (a tick's own view).
INNER_VIEW = "__ct_nested"
#: A marker call: cast its argument to the Spark type of the inner's column named after it.
TYPED_PREFIX = "__ct_as_"
_RE_AGGREGATE = {exp.Sum: exp.Sum, exp.Count: exp.Sum, exp.Min: exp.Min, exp.Max: exp.Max}


def having_over_rows(predicate: Any, items: list[Any], inner: Any, block: Any) -> Any:
    """``HAVING``'s predicate over the inner rows, or None when it cannot be.

    Adds the hidden columns to ``inner``'s select list. None: a subquery
    other than a same-rows scalar, or a column that is no named output column.
    """
    holder = exp.Paren(this=predicate.copy())  # a root node replaced stays in the tree
    hidden: dict[str, str] = {}
    for node in [n for n in holder.find_all(exp.Subquery, exp.Exists) if _outermost(n)]:
        scalar = _over_rows(node, block, inner, hidden)
        if scalar is None:
            return None
        node.replace(scalar)
    for call in _calls(holder):
        call.replace(exp.column(_hidden(call, inner, hidden)))
    for column in list(holder.find_all(exp.Column)):
        if _is_view_column(column, hidden):
            continue
        position = output_position(column, items)
        if position is None or not _named(items[position - 1]):
            return None
        column.replace(exp.column(items[position - 1].alias_or_name, quoted=True))
    return holder.this


def _over_rows(node: Any, block: Any, inner: Any, hidden: dict[str, str]) -> Any:
    """A same-rows scalar subquery re-aggregated over the inner rows; None: not one."""
    select = node.this if isinstance(node, exp.Subquery) else None
    if not isinstance(select, exp.Select) or len(select.expressions) != 1:
        return None
    if _rows_of(select) != _rows_of(block) or select.args.get("group") is not None:
        return None
    holder = exp.Paren(this=select.expressions[0].unalias().copy())
    calls = _calls(holder)
    if not calls or holder.find(exp.Subquery, exp.Exists, exp.Window) is not None:
        return None
    for call in calls:
        kind = _RE_AGGREGATE.get(type(call))
        if kind is None or isinstance(call.this, exp.Distinct) or call.args.get("expressions"):
            return None
        column = _hidden(call, inner, hidden)
        again: Any = kind(this=exp.column(column))
        if isinstance(call, exp.Count):
            again = exp.func("COALESCE", again, exp.Literal.number(0))
        call.replace(exp.Anonymous(this=f"{TYPED_PREFIX}{column}", expressions=[again]))
    if any(not _is_view_column(c, hidden) for c in holder.find_all(exp.Column)):
        return None
    return exp.select(holder.this).from_(exp.Table(this=exp.to_identifier(INNER_VIEW))).subquery()


def _rows_of(select: Any) -> str:
    """``select``'s sources and conditions, as SQL: what rows it aggregates."""
    copy = select.copy()
    for arg in ("group", "having", "order", "limit", "offset", "distinct"):
        copy.set(arg, None)
    copy.set("expressions", [exp.Literal.number(1)])
    return str(copy.sql(dialect="spark"))


def _calls(node: Any) -> list[Any]:
    """The outermost aggregate calls of ``node`` (not those of its subqueries)."""
    return [
        c
        for c in node.find_all(exp.AggFunc)
        if c.find_ancestor(exp.AggFunc) is None and c.find_ancestor(exp.Subquery) is None
    ]


def _hidden(call: Any, inner: Any, hidden: dict[str, str]) -> str:
    """The hidden column of ``inner`` holding ``call`` per group (added when new)."""
    text = call.sql(dialect="spark")
    if text not in hidden:
        hidden[text] = f"__ct_h{len(hidden)}"
        inner.select(exp.alias_(call.copy(), hidden[text]), copy=False)
    return hidden[text]


def _is_view_column(column: Any, hidden: dict[str, str]) -> bool:
    return not column.table and column.name in hidden.values()


def _outermost(node: Any) -> bool:
    return node.find_ancestor(exp.Subquery, exp.Exists) is None


def _named(item: Any) -> bool:
    """Whether Spark names ``item``'s output column as sqlglot does (an alias or a column)."""
    return bool(item.alias) or isinstance(item, exp.Column)


def output_position(term: Any, items: list[Any]) -> int | None:
    """The 1-based select-list position ``term`` names: an ordinal, an output alias or
    column, or an item's own expression; None when it names anything else."""
    if isinstance(term, exp.Literal) and term.is_int:
        n = int(term.name)
        return n if 1 <= n <= len(items) else None
    text = term.sql(dialect="spark")
    for n, item in enumerate(items, start=1):
        if item.unalias().sql(dialect="spark") == text:
            return n
    if isinstance(term, exp.Column) and not term.table:
        for n, item in enumerate(items, start=1):
            if item.alias_or_name.lower() == term.name.lower():
                return n
    return None


def typed_outer(tree: Any, types: dict[str, str]) -> Any:
    """``tree`` with each marker call a cast to its column's Spark type (``types``: by
    lower-cased column name)."""
    for call in list(tree.find_all(exp.Anonymous)):
        name = str(call.this).lower()  # sqlglot writes an unknown function in capitals
        if name.startswith(TYPED_PREFIX):
            target = exp.DataType.build(types[name[len(TYPED_PREFIX) :]], dialect="spark")
            call.replace(exp.Cast(this=call.expressions[0], to=target))
    return tree
