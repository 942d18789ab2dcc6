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


def flatten_derived_tables(tree: Any) -> Any:
    """``tree`` with a projecting derived table merged into its reader, else ``tree`` itself.

    The result is a copy when anything was merged; the caller's tree is never
    changed. The merged select keeps the reader's output names and order.
    """
    if not _mergeable(tree):
        return tree
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
    if inner.args.get("order") or inner.find(exp.AggFunc, exp.Window, exp.Subquery, exp.Exists):
        return False
    alias = source.args.get("alias")
    # ``AS s(a, b)`` renames the inner columns; sqlglot merges it, but keep it simple and safe.
    return not (alias is not None and alias.args.get("columns"))


def _has_subquery_outside(tree: Any, source: Any) -> bool:
    """Whether the reader has a subquery other than its derived table (kept as written)."""
    for node in tree.find_all(exp.Subquery, exp.Exists):
        if node is source:
            continue
        return True
    return False
