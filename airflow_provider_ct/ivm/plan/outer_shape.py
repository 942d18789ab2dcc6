"""A nested plan's outer query taken apart for the driver: its sources, filters and outputs.

A nested plan (:mod:`.nested`) keeps an inner aggregate in place and runs
the query around it over every group's row. Those outer queries are small
(TPC-H q11 keeps the parts whose value passes a share of the total, q15
joins the suppliers whose revenue is the maximum, q16 counts suppliers per
brand, type and size), and over a few thousand rows a Spark query costs
more than the rest of the tick. This module reads an outer query into the
pieces the driver evaluates (:mod:`airflow_provider_ct.ivm.driver.outer_rows`),
or says why it cannot:

* its sources: the inner rows under one alias, and tables joined to them by
  an equality with an inner column (fetched by those values);
* its conjuncts, split into those over the inner rows alone (applied before
  any fetch, so q15 fetches only the suppliers at the maximum) and the rest;
* uncorrelated scalar subqueries over the inner rows (q11's total, q15's
  ``MAX``), replaced by placeholder columns and computed once;
* its outputs by name, grouped (q16) or not, and ``HAVING`` over the groups.

What it refuses (the outer then runs in Spark, as before): another kind of
join, a table tied to another table, subqueries other than those scalars,
``DISTINCT``, ``LIMIT``, windows, ``COUNT(DISTINCT)``, an
output without a name Spark would give it plainly. ``ORDER BY`` is read
past: a view's rows have no order.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from sqlglot import exp

from airflow_provider_ct.core.query import (
    input_name,
)
from airflow_provider_ct.ivm.plan.having import INNER_VIEW
from airflow_provider_ct.ivm.plan.keyed_sql import (
    aggregate_alias,
    aggregates_out,
    conditions,
    qualified_copy,
)
from airflow_provider_ct.ivm.plan.select_shape import outer_join
from airflow_provider_ct.ivm.plan.select_shape import sources as read_sources

#: The qualifier of the scalar subqueries' placeholder columns (``__ct_scalar.s<i>``).
SCALAR_ALIAS = "__ct_scalar"
#: The index of the main select's aggregate placeholders (``__ct_agg<MAIN>.a<j>``); a
#: scalar subquery ``i`` uses ``i``.
MAIN = 999


@dataclass(frozen=True)
class OuterJoin:
    """A table of the outer query, joined to the inner rows by one equality."""

    alias: str
    #: The input's normalized name.
    name: str
    #: Its column the equality reads, and the inner column it equals.
    column: str
    inner: str


@dataclass(frozen=True)
class OuterScalar:
    """An uncorrelated scalar subquery over the inner rows, computed once per tick."""

    index: int
    #: The inner's alias in the subquery.
    alias: str
    where: Any | None
    #: Its aggregate calls (columns qualified), and its value with them replaced by
    #: ``__ct_agg<index>.a<j>``.
    calls: tuple[Any, ...]
    value: Any
    #: The subquery as written (columns qualified), for Spark to type its value.
    subquery: Any

    @property
    def column(self) -> Any:
        """The placeholder column holding the value in the outer query's conjuncts."""
        return exp.column(f"s{self.index}", table=SCALAR_ALIAS)


@dataclass(frozen=True)
class OuterShape:
    """The outer query as the driver evaluates it (every column ``alias.column``)."""

    #: The inner rows' alias.
    alias: str
    joins: tuple[OuterJoin, ...]
    #: Conjuncts over the inner rows and the scalars alone, then the others.
    early: tuple[Any, ...]
    late: tuple[Any, ...]
    scalars: tuple[OuterScalar, ...]
    #: Output name (lower-cased) -> its expression (grouped: aggregates replaced).
    outputs: tuple[tuple[str, Any], ...]
    #: ``GROUP BY``'s expressions; ``()`` with aggregates and no ``GROUP BY`` (one
    #: group); None: not an aggregate query.
    group: tuple[Any, ...] | None
    #: The main select's aggregate calls (``__ct_agg<MAIN>.a<j>`` in ``outputs``).
    calls: tuple[Any, ...]
    #: ``HAVING`` over the groups, its aggregates replaced likewise.
    having: Any | None
    #: The inner rows' column names as the outer query reads them.
    names: tuple[str, ...]
    #: The tree the pieces were taken from (columns qualified, scalars as written).
    tree: Any

    def inner_source(self, alias: str) -> str:
        """The inner rows' view read as ``alias``, with the names the query gives its
        columns (for Spark's analyses)."""
        listed = ", ".join(f"`{n}`" for n in self.names)
        return f"{INNER_VIEW} AS {alias}({listed})"

    def read_columns(self, join: OuterJoin) -> list[str]:
        """The columns of a joined table the query reads (its equality's first)."""
        found = dict.fromkeys([join.column])
        for column in self.tree.find_all(exp.Column):
            if column.table.lower() == join.alias:
                found.setdefault(column.name.lower())
        return list(found)


def outer_shape(
    tree: Any,
    inner_columns: Sequence[str],
    tables: Mapping[str, Sequence[str]],
    catalog_name: str,
) -> OuterShape | str:
    """The outer query ``tree`` (markers typed) in pieces, or why the driver leaves it.

    :param inner_columns: the inner select's output names.
    :param tables: input name (normalized) -> its columns, for the tables the outer reads.
    """
    if not isinstance(tree, exp.Select):
        return "the outer query is not one SELECT"
    for arg, what in (("distinct", "DISTINCT"), ("limit", "LIMIT")):
        if tree.args.get(arg) is not None:
            return f"{what} in the outer query is evaluated by Spark"
    if tree.args.get("offset") is not None or tree.find(exp.Window):
        return "OFFSET or a window in the outer query is evaluated by Spark"
    sources = _sources(tree, catalog_name)
    if isinstance(sources, str):
        return sources
    tree = tree.copy()
    tree.set("order", None)  # a view's rows have no order (and ORDER BY may name outputs)
    names = _inner_names(tree, inner_columns)
    if isinstance(names, str):
        return names
    lower = {n: {c.lower() for c in cs} for n, cs in tables.items()}
    lower[INNER_VIEW] = {c.lower() for c in names}
    missing = [n for n in sources.values() if n not in lower]
    if missing:
        return f"the outer query reads {missing[0]}, whose columns are not known"
    alias = next(a for a, n in sources.items() if n == INNER_VIEW)
    qualified = _qualified(tree, sources, lower)
    if isinstance(qualified, str):
        return qualified
    return _pieces(qualified, alias, sources, names)


def _inner_names(tree: Any, inner_columns: Sequence[str]) -> tuple[str, ...] | str:
    """The inner rows' column names as the outer query reads them: renamed by the alias's
    column list (``AS t(k, n)``, the same at every read), else the inner select's."""
    found = set()
    for table in tree.find_all(exp.Table):
        if table.name == INNER_VIEW and not table.db:
            alias = table.args.get("alias")
            renamed = alias.args.get("columns") if alias is not None else None
            found.add(tuple(c.name.lower() for c in renamed) if renamed else None)
    if len(found) != 1:
        return "the inner rows are read under different column names"
    names = found.pop()
    if names is None:
        return tuple(c.lower() for c in inner_columns)
    if len(names) != len(inner_columns):
        return "the inner rows' column list does not match its columns"
    return names


def _pieces(
    tree: Any,
    alias: str,
    sources: dict[str, str],
    names: tuple[str, ...],
) -> OuterShape | str:
    scalars: list[OuterScalar] = []
    conjuncts = []
    for conjunct in conditions(tree):
        replaced = _scalars_out(conjunct, scalars)
        if isinstance(replaced, str):
            return replaced
        conjuncts.append(replaced)
    joins = _joins(conjuncts, alias, sources)
    if isinstance(joins, str):
        return joins
    tied = {id(c) for _, c in joins}
    rest = [c for c in conjuncts if id(c) not in tied]
    early = [c for c in rest if _tables(c) <= {alias, SCALAR_ALIAS}]
    late = [c for c in rest if not _tables(c) <= {alias, SCALAR_ALIAS}]
    outputs = _outputs(tree, alias, names, joined=bool(joins))
    if isinstance(outputs, str):
        return outputs
    grouped = _grouped(tree, outputs)
    if isinstance(grouped, str):
        return grouped
    group, calls, replaced_outputs, having = grouped
    return OuterShape(
        alias,
        tuple(j for j, _ in joins),
        tuple(early),
        tuple(late),
        tuple(scalars),
        replaced_outputs,
        group,
        calls,
        having,
        names,
        tree,
    )


def _sources(tree: Any, catalog_name: str) -> dict[str, str] | str:
    """Alias (lower-cased) -> normalized table name (the inner rows: ``INNER_VIEW``)."""
    if not read_sources(tree):
        return "the outer query reads no table"
    join = outer_join(tree)
    if join is not None:
        kind = " ".join(str(join.args.get(a) or "") for a in ("side", "kind")).strip()
        return f"a {kind or 'USING'} join in the outer query is evaluated by Spark"
    found: dict[str, str] = {}
    for source in read_sources(tree):
        if not isinstance(source, exp.Table):
            return "a derived table in the outer query is evaluated by Spark"
        is_inner = source.name == INNER_VIEW and not source.db
        name = INNER_VIEW if is_inner else input_name(source, catalog_name)
        if name is None:
            return f"the CTE {source.name} in the outer query is evaluated by Spark"
        alias = (source.alias or source.name).lower()
        if alias in found:
            return f"the alias {alias} is read twice in the outer query"
        found[alias] = name
    if list(found.values()).count(INNER_VIEW) != 1:
        return "the outer query reads the inner rows other than once"
    return found


def _qualified(tree: Any, sources: dict[str, str], lower: Mapping[str, set[str]]) -> Any:
    """A copy of ``tree`` with every column of it and of its subqueries qualified."""
    copy = qualified_copy(tree, sources, {}, lower)
    if isinstance(copy, str):
        return copy
    for sub in list(copy.find_all(exp.Select)):
        if sub is copy:
            continue
        if any(t.name != INNER_VIEW or t.db for t in sub.find_all(exp.Table)):
            return "a subquery of the outer query that reads a table is evaluated by Spark"
        inner = _sources(sub, "")
        if isinstance(inner, str):
            return inner
        placed = qualified_copy(sub, inner, {}, lower)
        if isinstance(placed, str):
            return f"a correlated subquery in the outer query is evaluated by Spark ({placed})"
        sub.replace(placed)
    return copy


def _scalars_out(conjunct: Any, scalars: list[OuterScalar]) -> Any | str:
    """The conjunct with each scalar subquery replaced by its placeholder column."""
    copy = conjunct.copy()
    for sub in list(copy.find_all(exp.Subquery)):
        select = sub.this
        if not isinstance(select, exp.Select) or sub.find_ancestor(exp.Subquery) is not None:
            return "a nested subquery in the outer query is evaluated by Spark"
        if sub is copy or not isinstance(sub.parent, exp.Binary) or len(select.expressions) != 1:
            return "a subquery other than a scalar in the outer query is evaluated by Spark"
        scalar = _scalar(select, len(scalars))
        if isinstance(scalar, str):
            return scalar
        scalars.append(scalar)
        sub.replace(scalar.column)
    if copy.find(exp.Select) is not None:
        return "an IN or EXISTS subquery in the outer query is evaluated by Spark"
    return copy


def _scalar(select: Any, index: int) -> OuterScalar | str:
    for arg in ("group", "having", "limit", "distinct", "joins"):
        if select.args.get(arg):
            return f"a scalar subquery with {arg.upper()} in the outer query is evaluated by Spark"
    from_ = select.args.get("from_") or select.args.get("from")
    alias = (from_.this.alias or from_.this.name).lower()
    value, calls = aggregates_out(select.expressions[0].unalias(), index)
    if isinstance(value, str):
        return value
    if not calls:
        return "a scalar subquery that does not aggregate is evaluated by Spark"
    where = select.args.get("where")
    sub = exp.Subquery(this=select.copy())
    return OuterScalar(index, alias, where.this.copy() if where else None, calls, value, sub)


def _joins(
    conjuncts: list[Any], alias: str, sources: dict[str, str]
) -> list[tuple[OuterJoin, Any]] | str:
    """Each table's first equality with an inner column (the conjunct consumed by it)."""
    found: list[tuple[OuterJoin, Any]] = []
    for other, name in sources.items():
        if other == alias:
            continue
        for conjunct in conjuncts:
            if not isinstance(conjunct, exp.EQ):
                continue
            sides: list[Any] = [conjunct.left, conjunct.right]
            if not all(isinstance(s, exp.Column) for s in sides):
                continue
            tables = [s.table.lower() for s in sides]
            if sorted(tables) == sorted([alias, other]):
                mine, theirs = (sides[0], sides[1]) if tables[0] == other else sides[::-1]
                join = OuterJoin(other, name, mine.name.lower(), theirs.name.lower())
                found.append((join, conjunct))
                break
        else:
            return f"{name} is not joined to the inner rows by an equality: evaluated by Spark"
    return found


def _tables(node: Any) -> set[str]:
    return {c.table.lower() for c in node.find_all(exp.Column)}


def _outputs(
    tree: Any, alias: str, names: Sequence[str], *, joined: bool
) -> list[tuple[str, Any]] | str:
    """(name, expression) per output column, ``*`` expanded over the inner rows (the only
    source: with a joined table, ``*`` is Spark's); two outputs of one name are refused."""
    found: list[tuple[str, Any]] = []
    for item in tree.expressions:
        if isinstance(item, exp.Star) and not joined:
            found += [(c, exp.column(c, table=alias)) for c in names]
        elif isinstance(item, exp.Alias):
            found.append((item.alias.lower(), item.this))
        elif isinstance(item, exp.Column) and not isinstance(item.this, exp.Star):
            found.append((item.name.lower(), item))
        else:
            return f"the output {item.sql()} has no plain name: evaluated by Spark"
    if len({n for n, _ in found}) < len(found):
        return "two outputs of the outer query have one name: evaluated by Spark"
    return found


def _grouped(
    tree: Any, outputs: list[tuple[str, Any]]
) -> tuple[tuple[Any, ...] | None, tuple[Any, ...], tuple[tuple[str, Any], ...], Any] | str:
    """``(group, calls, outputs, having)``: outputs and ``HAVING`` with aggregates replaced
    when the query aggregates (grouping keys must be columns)."""
    group_node = tree.args.get("group")
    having = tree.args.get("having")
    has_calls = any(isinstance(e, exp.AggFunc) for _, o in outputs for e in o.walk())
    if group_node is None and not has_calls and having is None:
        return None, (), tuple(outputs), None
    group = tuple(group_node.expressions) if group_node is not None else ()
    if not all(isinstance(g, exp.Column) for g in group):
        return "GROUP BY an expression in the outer query is evaluated by Spark"
    keys = {g.sql(dialect="spark") for g in group}
    calls: list[Any] = []
    replaced: list[tuple[str, Any]] = []
    for name, output in [*outputs, ("HAVING", having.this if having is not None else None)]:
        if output is None:
            continue
        value, found = aggregates_out(output, MAIN, start=len(calls), keys=keys)
        if isinstance(value, str):
            return f"{name} in the outer query: {value}"
        calls += found
        replaced.append((name, value))
    condition = replaced.pop()[1] if having is not None else None
    return group, tuple(calls), tuple(replaced), condition


__all__ = ["MAIN", "SCALAR_ALIAS", "OuterJoin", "OuterScalar", "OuterShape", "aggregate_alias"]
