"""What a change of a table read in a subquery does to a block: a rule per subquery.

A subquery in ``WHERE`` is a fixed filter of the delta rules while its
tables do not change (:mod:`.subqueries`); the keyed rule (:mod:`.keyed`)
maintains a block whose subqueries are all tied to one key that every
changed table holds. Many blocks are neither: the generated queries and
TPC-DS read the fact table in the block *and* in a subquery tied to a
column of a dimension, tie two subqueries to two keys, compare with an
uncorrelated aggregate, or use ``NOT IN``. For those the block's change
splits in two, by the order the tick applies the changes:

    B(M1, S1) - B(M0, S0) = [B(M1, S1) - B(M0, S1)] + [B(M0, S1) - B(M0, S0)]

``M`` the block's own reads, ``S`` its subqueries' (a table read in both is
two reads). The first bracket is the delta rules with every subquery read
as it is now; the second holds only the block's rows (as they were) whose
subqueries' values moved, and telescopes over the changed subquery tables
one at a time. A rule per subquery bounds those rows before any data is
read, from the SQL and the inputs' columns:

* ``tied``: the subquery is tied to the row by a top-level equality of its
  ``WHERE`` (``EXISTS``, ``NOT EXISTS``, a correlated scalar or count) or by
  ``x IN (SELECT c ...)``, whose inner side is a column of one table the
  subquery reads once. A change of that table moves only the rows whose
  outer side equals a value the changed rows hold there: a row's subquery
  reads only the rows its equality keeps. ``NOT IN`` (or an ``IN`` under a
  ``NOT``) is tied too when it is uncorrelated, but a ``NULL`` appearing in
  its set or the set emptying moves every row: the tick checks both at
  the two snapshots (``checks_set``).
* ``value``: an uncorrelated scalar subquery compared with an expression
  of the row. The tick evaluates it at both snapshots: equal values move
  no row; else only rows whose expression lies between the two values can
  flip (a ``NULL`` value moves every row).
* ``whole``: anything else (a change of a table the tie does not name, a
  subquery inside a subquery, a tie by an expression): a change of its
  tables has no bound, and the tick runs in full, as before.

Pure and without Spark: the tick (:mod:`airflow_provider_ct.spark.ivm.subquery_terms`)
carries the rules out.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from sqlglot import exp

from airflow_provider_ct.core.query import input_name
from airflow_provider_ct.ivm.plan.keyed import Tie, tie_of
from airflow_provider_ct.ivm.plan.scopes import (
    Classes,
    direct_subqueries,
    negated_within,
    subquery_owner,
    table_scope,
)

#: The comparisons a ``value`` rule bounds by the two values.
_COMPARISONS = (exp.EQ, exp.NEQ, exp.GT, exp.GTE, exp.LT, exp.LTE)


class Route(StrEnum):
    """How a change of a subquery's table moves the block's rows."""

    TIED = "tied"
    VALUE = "value"
    WHOLE = "whole"


@dataclass(frozen=True)
class SubqueryRule:
    """One direct subquery of a block (in :func:`direct_subqueries` order) and its rule."""

    index: int
    route: Route
    #: Every input the subquery reads, at any depth.
    inputs: frozenset[str]
    why: str
    #: ``tied``: the input whose column ties it, and that column.
    tied_input: str | None = None
    tied_column: str | None = None
    #: ``tied``: the subquery's side of the tie, in its own scope (restricted inside).
    inner_sql: str | None = None
    #: ``tied`` and ``value``: the row's side, in the block's scope.
    outer_sql: str | None = None
    #: ``tied``: an uncorrelated ``NOT IN`` whose set's NULL and emptiness the tick checks.
    checks_set: bool = False

    def bounds(self, name: str) -> bool:
        """Whether a change of input ``name`` moves only rows this rule can name."""
        if name not in self.inputs:
            return True
        if self.route is Route.TIED:
            return name == self.tied_input
        return self.route is Route.VALUE

    def describe(self) -> str:
        return f"subquery {self.index + 1}: {self.route.value} ({self.why})"


def subquery_rules(
    select: Any, columns: Mapping[str, Collection[str]], catalog_name: str
) -> tuple[SubqueryRule, ...]:
    """The rule of each direct subquery of ``select`` (a block), placed with the columns."""
    lower = {name: {c.lower() for c in cols} for name, cols in columns.items()}
    outer = table_scope(select, catalog_name)
    return tuple(
        _rule(index, sub, select, outer, lower, catalog_name)
        for index, sub in enumerate(direct_subqueries(select))
    )


def unbounded(rules: tuple[SubqueryRule, ...], changed: Collection[str]) -> str | None:
    """Why a change of ``changed`` moves rows no rule names, or None."""
    for name in sorted(changed):
        for rule in rules:
            if not rule.bounds(name):
                return f"{name} changed and is read in a subquery: {rule.why}"
    return None


def _rule(
    index: int,
    sub: Any,
    select: Any,
    outer: dict[str, str],
    lower: Mapping[str, set[str]],
    catalog_name: str,
) -> SubqueryRule:
    reads = [n for t in sub.find_all(exp.Table) if (n := input_name(t, catalog_name))]
    inputs = frozenset(reads)
    correlated = _correlated(sub, lower, catalog_name)
    owner = subquery_owner(sub)
    if not correlated and not isinstance(owner, exp.In | exp.Exists):
        return _value_rule(index, sub, inputs)
    if direct_subqueries(sub):
        return SubqueryRule(index, Route.WHOLE, inputs, "it holds a subquery of its own")
    negated = isinstance(owner, exp.In) and negated_within(owner, select)
    if negated and correlated:
        why = "a correlated NOT IN: a NULL in its rows makes it unknown for the row"
        return SubqueryRule(index, Route.WHOLE, inputs, why)
    tie = tie_of(sub, outer, table_scope(sub, catalog_name), lower, Classes())
    if isinstance(tie, str) or tie.member is None:
        why = tie if isinstance(tie, str) else "it is tied by an expression, not a column"
        return SubqueryRule(index, Route.WHOLE, inputs, why)
    return _tied_rule(index, sub, tie, reads, negated)


def _tied_rule(index: int, sub: Any, tie: Tie, reads: list[str], negated: bool) -> SubqueryRule:
    assert tie.member is not None
    name, _, column = tie.member
    inputs = frozenset(reads)
    if reads.count(name) != 1:
        why = f"it reads {name}, whose column ties it, more than once"
        return SubqueryRule(index, Route.WHOLE, inputs, why)
    alias, outer_column = tie.outer
    outer_sql = exp.column(outer_column, table=alias, quoted=True).sql(dialect="spark")
    owner = subquery_owner(sub)
    what = "a NOT IN" if negated else "an IN" if isinstance(owner, exp.In) else "an equality"
    return SubqueryRule(
        index,
        Route.TIED,
        inputs,
        f"tied by {what} to {name}.{column}",
        tied_input=name,
        tied_column=column,
        inner_sql=tie.inner.sql(dialect="spark"),
        outer_sql=outer_sql,
        checks_set=negated,
    )


def _value_rule(index: int, sub: Any, inputs: frozenset[str]) -> SubqueryRule:
    """An uncorrelated scalar subquery: compared with the row, bounded by its two values."""
    node = sub
    while isinstance(node.parent, exp.Subquery | exp.Paren):
        node = node.parent
    compared = node.parent
    if isinstance(compared, _COMPARISONS) and len(sub.expressions) == 1:
        other = compared.expression if compared.this is node else compared.this
        if not other.find(exp.Subquery, exp.Exists, exp.Select):
            why = "an uncorrelated value, compared with the row"
            return SubqueryRule(
                index, Route.VALUE, inputs, why, outer_sql=other.sql(dialect="spark")
            )
    why = "an uncorrelated value the row is not compared with: moved only if it changes"
    return SubqueryRule(index, Route.VALUE, inputs, why)


def _correlated(sub: Any, lower: Mapping[str, set[str]], catalog_name: str) -> bool:
    """Whether ``sub`` names a column of an outer row (at any depth: its own tables are
    every table inside it; an unqualified column is its own if one of them has it)."""
    tables = [t for t in sub.find_all(exp.Table)]
    own = {t.alias_or_name.lower() for t in tables}
    names = [input_name(t, catalog_name) for t in tables]
    own_columns = set().union(*(lower.get(n, set()) for n in names if n)) if names else set()
    for column in sub.find_all(exp.Column):
        if column.table:
            if column.table.lower() not in own:
                return True
        elif column.name and column.name.lower() not in own_columns:
            return True
    return False
