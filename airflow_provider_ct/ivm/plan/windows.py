"""Window functions with ``PARTITION BY``: the partitions a change touches, recomputed.

``SELECT c, ts, v, SUM(v) OVER (PARTITION BY c ORDER BY ts) AS running FROM t``
computes each output row from the rows of its partition alone. So a change
can only alter the rows of the partitions whose keys it holds, and those
partitions' rows come out the same from the query restricted (below the
windows, in ``WHERE``) to those keys: whole partitions are kept or dropped.
That is the ``group`` strategy's rule with the partitioning keys in place of
the grouping keys (the rewrites, the affected keys from the inputs' changes
and the correction of only those keys' target rows are the same), and the
``partition`` strategy's when a key is the day of an input column.

The rule needs one set of keys every window partitions by (each window's
``PARTITION BY`` holds all of them; more keys in one window only split
partitions further), and each key among the output columns, so the target's
rows of a partition can be found. Ranking for top-k per key
(``ROW_NUMBER() ... <= k`` around it) needs a derived table and runs in
full; so does a window without ``PARTITION BY`` (one partition: every change
touches all rows).
"""

from __future__ import annotations

from typing import Any

from sqlglot import exp


def own_windows(select: Any) -> list[Any]:
    """The window calls of ``select`` itself (not of its subqueries)."""
    return [w for w in select.find_all(exp.Window) if w.find_ancestor(exp.Select) is select]


def windowed(call: Any) -> bool:
    """Whether an aggregate call is a window function's (``SUM(v) OVER (...)``)."""
    return isinstance(call.find_ancestor(exp.Window, exp.Select), exp.Window)


def shared_partition_keys(select: Any) -> list[str] | str:
    """The Spark SQL of the keys every window of ``select`` partitions by, in order;
    or why the windows have no such keys."""
    for arg in ("group", "distinct", "having", "limit", "offset"):
        if select.args.get(arg):
            return f"window functions with {arg.upper()} are recomputed in full"
    common: list[str] | None = None
    for window in own_windows(select):
        keys = [p.sql(dialect="spark") for p in window.args.get("partition_by") or []]
        if not keys:
            return "a window without PARTITION BY (one partition) is recomputed in full"
        common = keys if common is None else [k for k in common if k in keys]
    if not common:
        return "windows that share no PARTITION BY key are recomputed in full"
    return list(dict.fromkeys(common))


def output_position(select: Any, key: str) -> int | None:
    """The position in ``select``'s list of the output that is the key ``key`` (Spark SQL):
    the same expression, or an output named as the unqualified column ``key``."""
    items = list(select.expressions)
    by_sql = {i.unalias().sql(dialect="spark"): n for n, i in reversed(list(enumerate(items)))}
    found = by_sql.get(key)
    if found is None:
        node: Any = exp.maybe_parse(key, dialect="spark")
        if isinstance(node, exp.Column) and not node.table:
            by_name = {i.alias_or_name.lower(): n for n, i in reversed(list(enumerate(items)))}
            found = by_name.get(node.name.lower())
    return found


def window_keys(select: Any) -> tuple[tuple[int, ...], tuple[str, ...]] | str:
    """The positions in the select list and Spark SQL of the keys every window
    partitions by; or why the windows have no such keys."""
    common = shared_partition_keys(select)
    if isinstance(common, str):
        return common
    positions: list[int] = []
    for key in common:
        found = output_position(select, key)
        if found is None:
            return (
                f"the windows' PARTITION BY key {key} is not an output column, so the "
                "target's rows of a partition cannot be found"
            )
        positions.append(found)
    return tuple(positions), tuple(common)
