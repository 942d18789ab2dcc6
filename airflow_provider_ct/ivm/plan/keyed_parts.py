"""A keyed block's subqueries taken apart, for the driver to evaluate them key by key.

A keyed subquery (:mod:`.keyed`) depends, for an outer row of key ``k``,
only on its own table's rows whose tied column is ``k``. So once the tick
holds those rows (fetched by key), each kind is a small computation per
key rather than a query:

* a **scalar** ``x < (SELECT 0.2 * AVG(l_quantity) FROM lineitem WHERE
  l_partkey = p_partkey)`` (TPC-H q17) is one value per key: its aggregates
  over the key's rows, the expression around them, put in the subquery's
  place as a column of the outer rows (a key without rows gets the value
  of no rows: ``NULL``, or ``0`` for ``COUNT``);
* an **IN** ``o_orderkey IN (SELECT l_orderkey FROM lineitem GROUP BY
  l_orderkey HAVING SUM(l_quantity) > 300)`` (q18) is one boolean per key:
  the key has rows (after the subquery's ``WHERE``) and its ``HAVING``
  holds;
* an **EXISTS** / **NOT EXISTS** with conditions between the two rows (q21's
  ``l2.l_suppkey <> l1.l_suppkey``) is one boolean per outer row: some row
  of its key passes them.

A subquery may inner-join several tables (TPC-H q2's ``MIN(ps_supplycost)``
over ``partsupp``, ``supplier``, ``nation``, ``region``): its rows of a key
are then the tied table's rows of that key joined with the others by the
subquery's equalities, each fetched by the values it joins on, so they
still cost the key's matches.

This module only takes the SQL apart (with the tables' columns, to place
bare columns); :mod:`airflow_provider_ct.ivm.driver.keyed_terms` evaluates.
Every column of a part is qualified: the subquery's own by their aliases
(SQL's innermost scope: a subquery's table shadows a block table of the
same name), the block's by theirs.

A subquery's own subqueries in its ``WHERE`` (TPC-H q20's ``IN`` over
``part`` and scalar over ``lineitem``, inside its ``IN`` over
``partsupp``) are parts of that subquery (:attr:`KeyedPart.parts`), taken
apart in its scope and evaluated over its rows; a scalar may be tied by
several column equalities (:attr:`KeyedPart.ties`: its value is then per
outer row's tied columns). What it does not take (an outer join, a
subquery three deep or outside its parent's ``WHERE`` conjuncts, a
correlation other than column equalities outside ``EXISTS``,
``DISTINCT`` aggregates) is refused with the reason, and the tick
evaluates the block in Spark as before.
"""

from __future__ import annotations

from collections.abc import Collection, Iterator, Mapping
from dataclasses import dataclass, replace
from itertools import count
from typing import Any

from sqlglot import exp

from airflow_provider_ct.ivm.plan.keyed_sql import (
    aggregate_alias,
    aggregated,
    aggregates_out,
    and_all,
    column_ties,
    first_tie,
    holds,
    in_conjunct,
    outer_column,
    qualified_copy,
    split_conditions,
    tied_first,
)
from airflow_provider_ct.ivm.plan.scopes import direct_subqueries, subquery_owner, table_scope
from airflow_provider_ct.ivm.plan.select_shape import outer_join, sources
from airflow_provider_ct.ivm.plan.subqueries import unnegated, where_conjuncts

SCALAR = "scalar"
IN = "in"
EXISTS = "exists"

#: The placeholders' qualifiers: a part's value in the outer rows; an aggregate in a key's
#: row, per part (``__ct_agg<index>``: the parts' types share one map).
VALUE_ALIAS = "__ct_keyed"


@dataclass(frozen=True)
class KeyedPart:
    """One keyed subquery of a block's ``WHERE``, as the driver evaluates it."""

    kind: str
    #: The block's ``WHERE`` conjunct holding it (a node of the block's tree).
    conjunct: Any
    #: That conjunct with the subquery replaced by :attr:`placeholder` (``NOT`` kept).
    replaced: Any
    #: The subquery's table that holds the tie (its one table, or the one of several whose
    #: column the tie names), and its alias there (lower-cased).
    input: str
    alias: str
    #: The subquery table's column tied to the key, and the block's ``(alias, column)``.
    tie: str
    outer: tuple[str, str]
    #: Conditions on the subquery's table alone (qualified), or None.
    where: Any = None
    #: ``EXISTS`` only: conditions between its rows and the outer row (qualified), or None.
    correlated: Any = None
    #: ``SCALAR``: its output expression; ``IN``: its ``HAVING`` (or None); aggregates
    #: replaced by ``__ct_agg<index>.a<j>`` columns, :attr:`aggregates` in that order.
    value: Any = None
    aggregates: tuple[Any, ...] = ()
    index: int = 0
    #: Every table of the subquery as ``(alias, input)``, the tied one first; empty: that
    #: one alone. The others are inner-joined by the equalities of :attr:`where`.
    tables: tuple[tuple[str, str], ...] = ()
    #: ``SCALAR`` only: further equalities of a subquery column with an outer one, as
    #: ``((alias, column), (outer alias, column))`` (TPC-H q20's ``l_suppkey =
    #: ps_suppkey`` beside ``l_partkey = ps_partkey``): its value is per outer row's
    #: columns, not per key.
    ties: tuple[tuple[tuple[str, str], tuple[str, str]], ...] = ()
    #: The subquery's own subqueries, evaluated over its rows (its ``WHERE``'s conjuncts).
    parts: tuple[KeyedPart, ...] = ()
    #: For a part inside a subquery, that subquery (qualified): the scope its conjunct is
    #: typed in; None: the block's.
    scope: Any = None

    @property
    def reads(self) -> tuple[tuple[str, str], ...]:
        """Every table the subquery reads as ``(alias, input)``, the tied one first."""
        return self.tables or ((self.alias, self.input),)

    @property
    def placeholder(self) -> Any:
        """The column holding this part's value in the outer rows."""
        return exp.column(f"v{self.index}", table=VALUE_ALIAS)

    def original(self, node: Any) -> Any:
        """A copy of ``node`` (a part of :attr:`value`) with the aggregates written back."""
        names = {f"a{j}": agg for j, agg in enumerate(self.aggregates)}

        def back(found: Any) -> Any:
            if isinstance(found, exp.Column) and found.table == aggregate_alias(self.index):
                return names[found.name].copy()
            return found

        return node.copy().transform(back)


def keyed_parts(
    select: Any, columns: Mapping[str, Collection[str]], catalog_name: str
) -> list[KeyedPart] | str:
    """Every subquery of ``select`` as a :class:`KeyedPart`, or why the driver does not take one.

    :param columns: input name -> its column names (the pinned snapshots').
    """
    lower = {name: {c.lower() for c in cols} for name, cols in columns.items()}
    subs = direct_subqueries(select)
    indexes = count(len(subs))
    found = _parts_of(select, table_scope(select, catalog_name), lower, catalog_name, indexes)
    if isinstance(found, str):
        return found
    return list(found) or "the block has no subquery"


def _parts_of(
    select: Any,
    outer: dict[str, str],
    lower: Mapping[str, set[str]],
    catalog_name: str,
    indexes: Iterator[int],
    *,
    nested: bool = False,
) -> tuple[KeyedPart, ...] | str:
    """The parts of ``select``'s subqueries (numbered in tree order; a subquery's own
    subqueries are numbered from ``indexes``), or why one is refused."""
    where = select.args.get("where")
    conjuncts = where_conjuncts(where.this) if where is not None else []
    parts: list[KeyedPart] = []
    owners: list[Any] = []
    for position, sub in enumerate(direct_subqueries(select)):
        conjunct = next((c for c in conjuncts if c is sub or holds(c, sub)), None)
        if conjunct is None:
            return "a subquery outside the conjuncts of WHERE is evaluated by Spark"
        index = next(indexes) if nested else position
        found = _part(conjunct, sub, outer, lower, catalog_name, index, indexes)
        if isinstance(found, str):
            return found
        if nested:
            found = replace(found, scope=select)
        parts.append(found)
        owners.append(subquery_owner(sub))
    return _shared_conjuncts(parts, owners)


def _shared_conjuncts(parts: list[KeyedPart], owners: list[Any]) -> tuple[KeyedPart, ...] | str:
    """``parts``, those sharing one conjunct (``EXISTS a OR EXISTS b``) each holding the
    conjunct with all of their placeholders, evaluated once their values are all in
    (:func:`~airflow_provider_ct.ivm.driver.keyed_terms.kept_rows`)."""
    shared: dict[int, list[int]] = {}
    for position, part in enumerate(parts):
        shared.setdefault(id(part.conjunct), []).append(position)
    out = list(parts)
    for positions in (p for p in shared.values() if len(p) > 1):
        if any(parts[p].kind != EXISTS for p in positions):
            return "a condition holding several subqueries other than EXISTS is evaluated by Spark"
        conjunct = parts[positions[0]].conjunct
        pairs = [(owners[p], parts[p].placeholder) for p in positions]
        combined = _substituted(conjunct, pairs)
        for p in positions:
            out[p] = replace(parts[p], replaced=combined)
    return tuple(out)


def _exists_logic(conjunct: Any) -> bool:
    """Whether ``conjunct`` is ``EXISTS`` subqueries under ``AND``, ``OR`` and ``NOT`` only:
    two-valued, so each is its placeholder's boolean wherever it stands."""
    connectives = (exp.And, exp.Or, exp.Not, exp.Paren, exp.Exists)
    return all(
        isinstance(node, connectives)
        for node in conjunct.walk()
        if node.find_ancestor(exp.Exists) is None
    )


def _substituted(conjunct: Any, pairs: list[tuple[Any, Any]]) -> Any:
    """A copy of ``conjunct`` with each ``(EXISTS node, placeholder)``'s node replaced; the
    nodes are matched by their place among the conjunct's outermost ``EXISTS``."""
    copy = conjunct.copy()
    originals = _outermost_exists(conjunct)
    copies = _outermost_exists(copy)
    for owner, placeholder in pairs:
        at = next(i for i, node in enumerate(originals) if node is owner)
        if copies[at] is copy:
            return placeholder
        copies[at].replace(placeholder)
    return copy


def _outermost_exists(node: Any) -> list[Any]:
    return [e for e in node.find_all(exp.Exists) if e.find_ancestor(exp.Exists) is None]


def driver_shape(select: Any) -> str | None:
    """Why the driver would not take ``select``'s keyed subqueries, from SQL alone; None
    if it may (placing bare columns needs the tables' columns: :func:`keyed_parts`).

    For the refresh rules, which price a keyed tick before it reads anything.
    """
    where = select.args.get("where")
    conjuncts = where_conjuncts(where.this) if where is not None else []
    for sub in direct_subqueries(select):
        if not any(c is sub or holds(c, sub) for c in conjuncts):
            return "a subquery outside the conjuncts of WHERE is evaluated by Spark"
        why = _sub_shape(sub)
        if why is not None:
            return why
    return None


def _sub_shape(sub: Any, depth: int = 0) -> str | None:
    """Why the driver would not join a subquery's own tables, or None."""
    if not sources(sub):
        return "a subquery without a table is evaluated by Spark"
    for nested in direct_subqueries(sub):
        if depth or not in_conjunct(sub, nested):
            return "a subquery inside a subquery other than in a conjunct of its WHERE"
        why = _sub_shape(nested, depth + 1)
        if why is not None:
            return why
    if any(not isinstance(t, exp.Table) for t in sources(sub)):
        return "a subquery over a derived table is evaluated by Spark"
    if outer_join(sub) is not None:
        return "a subquery with an outer join or USING is evaluated by Spark"
    if any(sub.args.get(a) for a in ("distinct", "limit", "offset", "order", "qualify")):
        return "a subquery with DISTINCT, ORDER BY or LIMIT is evaluated by Spark"
    if sub.find(exp.Window):
        return "a subquery with a window is evaluated by Spark"
    return None


def _part(
    conjunct: Any,
    sub: Any,
    outer: dict[str, str],
    lower: Mapping[str, set[str]],
    catalog_name: str,
    index: int,
    indexes: Iterator[int],
) -> KeyedPart | str:
    """One subquery taken apart (its own subqueries too), or why not."""
    why = _sub_shape(sub)
    if why is not None:
        return why
    inner = table_scope(sub, catalog_name)
    if len(inner) != len(sources(sub)):
        return "a subquery reading a table twice under one alias is evaluated by Spark"
    qualified = qualified_copy(sub, inner, outer, lower)
    if isinstance(qualified, str):
        return qualified
    nested = _parts_of(qualified, inner, lower, catalog_name, indexes, nested=True)
    if isinstance(nested, str):
        return nested
    part = _taken_apart(conjunct, sub, qualified, inner, outer, lower, index)
    return replace(part, parts=nested) if isinstance(part, KeyedPart) else part


def _taken_apart(
    conjunct: Any,
    sub: Any,
    qualified: Any,
    inner: dict[str, str],
    outer: dict[str, str],
    lower: Mapping[str, set[str]],
    index: int,
) -> KeyedPart | str:
    """The part of one subquery by its kind, or why not."""
    owner = subquery_owner(sub)
    node, negated = unnegated(conjunct)
    if isinstance(node, exp.Exists):
        return _exists(conjunct, qualified, inner, outer, index)
    if isinstance(owner, exp.Exists) and _exists_logic(conjunct):  # TPC-DS q35's ``a OR b``
        part = _exists(conjunct, qualified, inner, outer, index)
        if isinstance(part, str):
            return part
        return replace(part, replaced=_substituted(conjunct, [(owner, part.placeholder)]))
    if negated:
        return "a negated subquery other than NOT EXISTS is evaluated by Spark"
    if isinstance(node, exp.In) and node.args.get("query") is not None:
        return _in(conjunct, node, qualified, inner, lower, outer, index)
    if owner is not None and isinstance(owner, exp.In | exp.Exists):
        return "an IN or EXISTS inside an expression is evaluated by Spark"
    return _scalar(conjunct, sub, qualified, inner, outer, index)


def _exists(
    conjunct: Any, sub: Any, inner: dict[str, str], outer: dict[str, str], index: int
) -> KeyedPart | str:
    if sub.args.get("group") or sub.args.get("having") or aggregated(sub):
        return "an EXISTS over an aggregate is evaluated by Spark"
    own, correlated = split_conditions(sub, inner)
    tie = first_tie(correlated, inner, outer)
    if isinstance(tie, str):
        return tie
    (alias, column), tied, rest = tie
    placeholder = exp.column(f"v{index}", table=VALUE_ALIAS)
    _, negated = unnegated(conjunct)
    replaced = exp.not_(placeholder) if negated else placeholder
    return KeyedPart(
        EXISTS,
        conjunct,
        replaced,
        inner[alias],
        alias,
        column,
        tied,
        and_all(own),
        and_all(rest),
        index=index,
        tables=tied_first(inner, alias),
    )


def _in(
    conjunct: Any,
    node: Any,
    sub: Any,
    inner: dict[str, str],
    lower: Mapping[str, set[str]],
    outer: dict[str, str],
    index: int,
) -> KeyedPart | str:
    """``x IN (SELECT tie FROM t [WHERE own] [GROUP BY tie [HAVING h]])``."""
    outputs = [e.unalias() for e in sub.expressions]
    if len(outputs) != 1 or not isinstance(outputs[0], exp.Column):
        return "an IN whose subquery does not output one column is evaluated by Spark"
    if not isinstance(node.this, exp.Column):
        return "an IN of an expression is evaluated by Spark"
    output = outputs[0]
    if output.table.lower() not in inner:
        return "an IN whose subquery outputs a column of the block is evaluated by Spark"
    group = sub.args.get("group")
    if group is not None and [g.sql() for g in group.expressions] != [output.sql()]:
        return "an IN whose subquery groups by other than its output is evaluated by Spark"
    if group is None and (sub.args.get("having") or aggregated(sub)):
        return "an IN over an aggregate without GROUP BY is evaluated by Spark"
    own, correlated = split_conditions(sub, inner)
    if correlated:
        return "a correlated IN is evaluated by Spark"
    tied = outer_column(node.this, outer, lower)
    if tied is None:
        return f"IN's column {node.this.sql()} is not a column of the block"
    having = sub.args.get("having")
    value, aggregates = aggregates_out(having.this, index) if having is not None else (None, ())
    if isinstance(value, str):
        return value
    alias = output.table.lower()
    placeholder = exp.column(f"v{index}", table=VALUE_ALIAS)
    return KeyedPart(
        IN,
        conjunct,
        placeholder,
        inner[alias],
        alias,
        output.name.lower(),
        tied,
        and_all(own),
        value=value,
        aggregates=aggregates,
        index=index,
        tables=tied_first(inner, alias),
    )


def _scalar(
    conjunct: Any, sub: Any, qualified: Any, inner: dict[str, str], outer: dict, index: int
) -> KeyedPart | str:
    """``... (SELECT f(aggregates) FROM t WHERE tie [AND own]) ...``: one value per key."""
    if len(qualified.expressions) != 1 or qualified.args.get("group"):
        return "a scalar subquery with GROUP BY is evaluated by Spark"
    if qualified.args.get("having"):
        return "a scalar subquery with HAVING is evaluated by Spark"
    own, correlated = split_conditions(qualified, inner)
    tie = first_tie(correlated, inner, outer)
    if isinstance(tie, str):
        return tie
    (alias, column), tied, rest = tie
    ties = column_ties(rest, inner, outer)
    if isinstance(ties, str):
        return ties
    value, aggregates = aggregates_out(qualified.expressions[0].unalias(), index)
    if isinstance(value, str):
        return value
    if not aggregates:
        return "a scalar subquery without an aggregate is evaluated by Spark"
    placeholder = exp.column(f"v{index}", table=VALUE_ALIAS)
    replaced = conjunct.copy()
    target = next(s for s in replaced.find_all(exp.Select) if s == sub)
    node = target.parent if isinstance(target.parent, exp.Subquery) else target
    if node is replaced:
        return "a scalar subquery alone as a condition is evaluated by Spark"
    node.replace(placeholder)
    return KeyedPart(
        SCALAR,
        conjunct,
        replaced,
        inner[alias],
        alias,
        column,
        tied,
        and_all(own),
        value=value,
        aggregates=aggregates,
        index=index,
        tables=tied_first(inner, alias),
        ties=ties,
    )
