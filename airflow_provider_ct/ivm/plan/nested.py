"""A query over one aggregate kept in place: the aggregate's state, the rest over its rows.

TPC-H q15 reads ``WITH revenue AS (SELECT l_suppkey, SUM(...) FROM lineitem
... GROUP BY l_suppkey)`` twice: joined with ``supplier`` and under
``MAX``. Nothing of the outer query has a cheap delta rule (a change of one
supplier's revenue may move the maximum, and with it every row), but the
outer query is cheap *given* the aggregate's rows: a few thousand groups
against the millions of line items they sum. So the aggregate is kept in
place, as a view's own aggregates are (its state, the signed change added
per group), and each tick recomputes the outer query in full over the
groups' rows, which are computed from the state, never from the fact
table, and over the other tables it reads. The result is diffed with the
target like any full correction.

Three shapes split that way, each into an *inner* select (planned on its
own: it must keep its aggregates in place) and an *outer* query that reads
the inner's rows as the view :data:`INNER_VIEW`:

* one ``WITH`` clause of one CTE that aggregates (q15), read any number of
  times;
* one derived table in ``FROM`` or a join that aggregates (``FROM (SELECT
  k, COUNT(*) AS n ... GROUP BY k) AS t(k, n) JOIN ...``);
* ``HAVING`` and ``ORDER BY ... LIMIT n`` over a grouped select (the
  groups a predicate keeps, the top groups): the outer is ``SELECT * FROM
  inner WHERE <having> ORDER BY <positions> LIMIT n``, ``HAVING``'s
  aggregate calls being hidden columns of the inner (``__ct_h<i>``),
  which the target does not get.

Why recompute the outer and not give it delta rules of its own: its input
is the state, already on the driver and small (the driver holds it whole,
``CT_STATE_GROUPS``), so the outer costs what it costs over a small table,
however its shape; a delta rule per outer shape would be many rules for a
part of the tick that is not where the time goes. What this does not make
cheaper: an outer query that reads large tables itself (the refresh rules
price it: :func:`outer_share`), and a state too large for the driver (the
tick runs in full, as for any in-place view).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sqlglot import exp

from airflow_provider_ct.core.query import (
    input_name,
)
from airflow_provider_ct.ivm.plan.distinct import split_distinct
from airflow_provider_ct.ivm.plan.having import INNER_VIEW, having_over_rows, output_position


@dataclass(frozen=True)
class Nested:
    """How a view splits into an inner aggregate kept in place and an outer query."""

    #: What the inner is, for reasons and explain (``WITH revenue``, ``derived table t``...).
    what: str
    #: Spark SQL of the outer query, reading the inner's rows as :data:`INNER_VIEW`.
    outer_sql: str
    #: The inputs the outer query reads itself (besides the inner's rows), normalized.
    outer_inputs: tuple[str, ...]
    #: Whether the query has a plan of its own when the inner does not keep its
    #: aggregates in place (``HAVING``: the grouped plan recomputes affected groups).
    optional: bool = False


def split_nested(tree: Any, catalog_name: str) -> tuple[Any, Nested] | str | None:
    """``(inner select, Nested)`` for a query of one of the module's shapes.

    A string: the query has a CTE or an aggregating derived table this does
    not split (the reason). ``None``: neither (a plain query).
    """
    if _with(tree) is not None:
        return _from_cte(tree, catalog_name)
    if not isinstance(tree, exp.Select):
        return None
    derived = [s for s in _sources(tree) if isinstance(s, exp.Subquery)]
    if derived:
        return _from_derived(tree, derived, catalog_name)
    distinct = split_distinct(tree)
    if distinct is not None:
        inner, outer = distinct
        return inner, _nested("COUNT(DISTINCT ...)", outer, catalog_name, optional=True)
    grouped = tree.args.get("group") is not None
    # HAVING without GROUP BY aggregates all rows into one group, which it keeps or drops.
    if tree.args.get("having") is not None or (grouped and tree.args.get("limit") is not None):
        return _from_grouped(tree, catalog_name)
    return None


def _from_cte(tree: Any, catalog_name: str) -> tuple[Any, Nested] | str:
    with_ = _with(tree)
    ctes = list(with_.expressions)
    if with_.args.get("recursive"):
        return "a recursive WITH clause is recomputed in full"
    if len(ctes) != 1:
        return f"a WITH clause of {len(ctes)} CTEs is recomputed in full (one is kept in place)"
    cte = ctes[0]
    name = cte.alias_or_name
    inner = cte.this
    if not isinstance(inner, exp.Select):
        return f"the CTE {name} is not one SELECT: recomputed in full"
    outer = tree.copy()
    outer.set(_WITH_ARG if _WITH_ARG in outer.args else "with", None)
    reads = [t for t in outer.find_all(exp.Table) if _names(t, name)]
    if not reads:
        return f"the CTE {name} is never read: recomputed in full"
    renamed = cte.args["alias"].args.get("columns")  # WITH r(a, b) AS (...)
    for table in reads:
        alias = table.args.get("alias") or exp.TableAlias(this=exp.to_identifier(table.name))
        if renamed and not alias.args.get("columns"):
            alias = exp.TableAlias(this=alias.this, columns=[c.copy() for c in renamed])
        table.replace(exp.Table(this=exp.to_identifier(INNER_VIEW), alias=alias))
    return inner, _nested(f"WITH {name}", outer, catalog_name)


def _from_derived(tree: Any, derived: list[Any], catalog_name: str) -> tuple[Any, Nested] | str:
    if len(derived) != 1:
        return "more than one derived table (subqueries in FROM) is recomputed in full"
    source = derived[0]
    inner = source.this
    name = source.alias_or_name or "(unnamed)"
    if not isinstance(inner, exp.Select) or not _aggregates(inner):
        return (
            f"the derived table {name} is recomputed in full: a derived table (a subquery in "
            "FROM) is kept when it aggregates, or when it only projects and filters and is "
            "the query's only source"
        )
    outer = tree.copy()
    copied = next(s for s in _sources(outer) if isinstance(s, exp.Subquery))
    alias = copied.args.get("alias")
    copied.replace(exp.Table(this=exp.to_identifier(INNER_VIEW), alias=alias))
    return inner, _nested(f"derived table {name}", outer, catalog_name)


def _from_grouped(tree: Any, catalog_name: str) -> tuple[Any, Nested] | str | None:
    """``GROUP BY ... [HAVING p] [ORDER BY ... LIMIT n]``: the grouped select, then its
    rows that pass ``p``, then its top rows; None: a ``HAVING`` this does not split."""
    if tree.args.get("offset") is not None:
        return "LIMIT with OFFSET is recomputed in full"
    items = list(tree.expressions)
    inner = tree.copy()
    for arg in ("having", "limit"):
        inner.set(arg, None)
    outer = exp.select("*").from_(exp.Table(this=exp.to_identifier(INNER_VIEW)))
    having = tree.args.get("having")
    if having is not None:
        predicate = having_over_rows(having.this, items, inner, tree)
        if predicate is None:
            return None  # the grouped plan recomputes the affected groups, HAVING and all
        outer = outer.where(predicate)
    limit = tree.args.get("limit")
    if limit is not None:
        inner.set("order", None)
        order = _order_by_positions(tree.args.get("order"), items)
        if isinstance(order, str):
            return order
        if order is not None:
            outer.set("order", order)
        outer.set("limit", limit.copy())
    what = "ORDER BY ... LIMIT" if limit is not None else "HAVING"
    return inner, _nested(what, outer, catalog_name, optional=limit is None)


def _order_by_positions(order: Any, items: list[Any]) -> Any:
    """``ORDER BY`` with each term its 1-based output position; a reason when a term is no
    output column; None without ``ORDER BY``."""
    if order is None:
        return None
    terms = []
    for term in order.expressions:
        position = output_position(term.this, items)
        if position is None:
            return "an ORDER BY term that is not an output column: LIMIT is recomputed in full"
        ordered = term.copy()
        ordered.set("this", exp.Literal.number(position))
        terms.append(ordered)
    return exp.Order(expressions=terms)


def _nested(what: str, outer: Any, catalog_name: str, *, optional: bool = False) -> Nested:
    names = (input_name(t, catalog_name) for t in outer.find_all(exp.Table))
    inputs = tuple(dict.fromkeys(name for name in names if name is not None))
    return Nested(what, outer.sql(dialect="spark"), inputs, optional)


#: sqlglot's argument name for a query's ``WITH`` (``with_`` since it renamed
#: its keyword-named arguments, as ``from_``).
_WITH_ARG = "with_"


def _with(tree: Any) -> Any:
    return tree.args.get(_WITH_ARG) or tree.args.get("with")


def _names(table: Any, name: str) -> bool:
    """Whether the table node reads the CTE ``name`` (unqualified, case-insensitive)."""
    return not table.db and not table.catalog and table.name.lower() == name.lower()


def _sources(select: Any) -> list[Any]:
    """The FROM source and every joined one."""
    from_ = select.args.get("from_") or select.args.get("from")
    first = [from_.this] if from_ is not None else []
    return [*first, *(j.this for j in select.args.get("joins") or [])]


def _aggregates(select: Any) -> bool:
    """Whether ``select`` groups or has an aggregate call of its own."""
    if select.args.get("group") is not None:
        return True
    return any(c.find_ancestor(exp.Select) is select for c in select.find_all(exp.AggFunc))


def outer_share(nested: Nested, sizes: dict[str, int]) -> float:
    """The share of the inputs' bytes that the outer query reads itself (0 to 1).

    :param sizes: input name -> its live bytes at the pinned snapshot.
    """
    total = sum(sizes.values())
    if total <= 0:
        return 0.0
    return sum(sizes.get(n, 0) for n in nested.outer_inputs) / total
