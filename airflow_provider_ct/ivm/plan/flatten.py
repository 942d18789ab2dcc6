"""Derived tables merged into the query that reads them, before planning.

``SELECT k, SUM(v) FROM (SELECT a AS k, b * c AS v FROM t, u WHERE ...) AS s
GROUP BY k`` is the same query as ``SELECT a AS k, SUM(b * c) AS v FROM t, u
WHERE ... GROUP BY a``: a derived table that only projects and filters can be
merged into its reader, and the merged query is a plain block the planner
already has rules for (TPC-H's q7, q8 and q9 are written this way).

Why sqlglot's ``merge_subqueries`` and not Spark's optimized plan: the
planner decides from SQL alone, before a JVM starts (the mint, the quiet
check and ``report_only`` plan without one), and the rewrites run the
merged SQL. Why only this one pattern (the reader's ``FROM`` is the derived
table alone, no join beside it): without the tables' schemas the inner
query's columns cannot be qualified, so merging beside another source could
make a column ambiguous; with the derived table alone, every column of the
reader is the derived table's, and the merge is a substitution. A derived
table that aggregates, removes duplicates, limits or windows stays what it
is, and the planner says why it runs in full.
"""

from __future__ import annotations

from typing import Any

from sqlglot import exp

from airflow_provider_ct.core.query import merge_derived_tables
from airflow_provider_ct.ivm.plan.subqueries import within


def flatten_derived_tables(tree: Any) -> Any:
    """``tree`` with a projecting derived table merged into its reader, else ``tree`` itself.

    The result is a copy when anything was merged; the caller's tree is never
    changed. The merged select keeps the reader's output names and order.
    """
    if not _mergeable(tree):
        return tree
    inner = tree.args.get("from_") or tree.args.get("from")
    if _where_subqueries(inner.this.this):
        return _substituted(tree)
    return merge_derived_tables(tree)


def _mergeable(tree: Any) -> bool:
    """Whether ``tree`` is ``SELECT ... FROM (<projecting select>) [AS] alias`` and no more."""
    if not isinstance(tree, exp.Select) or tree.args.get("joins"):
        return False
    from_ = tree.args.get("from_") or tree.args.get("from")
    source = from_.this if from_ is not None else None
    if not isinstance(source, exp.Subquery) or not isinstance(source.this, exp.Select):
        return False
    if _has_subquery_outside(tree, source):
        return False
    inner = source.this
    if any(inner.args.get(arg) for arg in ("group", "having", "distinct", "limit", "offset")):
        return False
    if inner.args.get("order") or any(
        p.find(exp.AggFunc, exp.Window, exp.Subquery, exp.Exists) for p in inner.expressions
    ):
        return False
    outside = [n for n in inner.find_all(exp.Subquery, exp.Exists) if not _in_where(n, inner)]
    if outside or (not _where_subqueries(inner) and inner.find(exp.AggFunc, exp.Window)):
        return False
    alias = source.args.get("alias")
    # ``AS s(a, b)`` renames the inner columns; sqlglot merges it, but keep it simple and safe.
    return not (alias is not None and alias.args.get("columns"))


def _has_subquery_outside(tree: Any, source: Any) -> bool:
    """Whether the reader has a subquery other than its derived table (kept as written)."""
    for node in tree.find_all(exp.Subquery, exp.Exists):
        if node is source or node.find_ancestor(exp.Subquery) is source:
            continue
        return True
    return False


def _where_subqueries(inner: Any) -> bool:
    """Whether the inner select's ``WHERE`` holds a subquery."""
    where = inner.args.get("where")
    return where is not None and where.find(exp.Subquery, exp.Exists) is not None


def _in_where(node: Any, inner: Any) -> bool:
    where = inner.args.get("where")
    return where is not None and node.find_ancestor(exp.Where) is where


def _substituted(tree: Any) -> Any:
    """The reader with each derived-table column replaced by its defining expression.

    ``tree`` itself when a column of the reader is not an output of the
    derived table (Spark would refuse the query anyway) or an output is
    not named (a ``*``).
    """
    source = (tree.args.get("from_") or tree.args.get("from")).this
    inner, alias = source.this, source.alias_or_name.lower()
    outputs: dict[str, Any] = {}
    for projection in inner.expressions:
        if isinstance(projection, exp.Star) or not projection.alias_or_name:
            return tree
        outputs[projection.alias_or_name.lower()] = projection.unalias()
    merged = tree.copy()
    inside = (merged.args.get("from_") or merged.args.get("from")).this
    stars = [s for s in merged.find_all(exp.Star) if not within(s, inside)]
    if any(not isinstance(s.parent, exp.Count) for s in stars):
        return tree  # SELECT *: the derived table's columns, not its tables'; kept as is
    names = {p.alias_or_name.lower() for p in merged.expressions}  # the reader's outputs
    order = merged.args.get("order")
    reader = [c for c in merged.find_all(exp.Column) if not within(c, inside)]
    for column in reader:
        if _orders_by_name(column, order, names):
            continue  # ORDER BY an output's name: the merged select keeps its names
        if column.table and column.table.lower() != alias:
            return tree
        found = outputs.get(column.name.lower())
        if found is None:
            return tree
        replacement = found.copy()
        if any(column is projection for projection in merged.expressions):
            replacement = exp.alias_(replacement, column.name)  # keep the output's name
        elif not isinstance(replacement, exp.Column | exp.Literal | exp.Func | exp.Paren):
            replacement = exp.paren(replacement)  # an operator keeps its operands together
        column.replace(replacement)
    merged.set("from_", inner.args.get("from_") or inner.args.get("from"))
    merged.set("joins", inner.args.get("joins"))
    where = inner.args.get("where")
    if where is not None:
        merged.where(where.this.copy(), copy=False)
    return merged


def _orders_by_name(column: Any, order: Any, names: set[str]) -> bool:
    """Whether ``column`` is a bare name in ``ORDER BY`` that names an output."""
    if order is None or column.table or not within(column, order):
        return False
    return column.name.lower() in names
