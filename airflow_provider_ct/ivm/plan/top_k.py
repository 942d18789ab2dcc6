"""Top-k: ``ORDER BY ... LIMIT k`` over rows that are neither grouped nor windowed.

The operator's rule. The view holds ``V``, the first ``k`` rows of ``R`` (the
rows under the limit) in the order. A tick brings ``R``'s change as rows it
gained (``I``) and lost (``D``), by the delta rules of the rows below (the
``linear`` plan of the select without its ``ORDER BY``/``LIMIT``), pairs that
cancel removed. Then:

* ``V`` has fewer than ``k`` rows: it is all of ``R``, so the new top is the
  first ``k`` of ``V - D + I``;
* no lost row sorts at or before ``V``'s last one (a tie counts as before:
  the view may hold any of the tied rows): no row of ``V`` was lost, and the
  rows of ``R`` outside ``V`` sort after all of it, so the new top is the
  first ``k`` of ``V + I``;
* else a lost row may have been one of ``V``'s, and the row that replaces it
  is one the view never held: the tick recomputes the top over the inputs
  (the operator's whole subtree), found while computing, as a change that
  cannot be computed exactly.

The order is written over the output columns (by alias, by position, or as
the output's own expression): the rule sorts the view's rows, which hold
nothing else. ``LIMIT`` without ``ORDER BY`` picks any ``k`` rows, so any
correction is as right as any other: refused, the view is recomputed. So
are ``OFFSET`` and a limit that is not a literal.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sqlglot import exp

#: The strategy's name (``ct.refresh``, ``explain``).
TOP = "top"


@dataclass(frozen=True)
class OrderKey:
    """One ``ORDER BY`` item, as an output column's position."""

    position: int
    descending: bool
    nulls_first: bool

    def sql(self, columns: list[str]) -> str:
        """The item over the view's ``columns`` (quoted Spark SQL)."""
        name = columns[self.position].replace("`", "``")
        way = "DESC" if self.descending else "ASC"
        return f"`{name}` {way} NULLS {'FIRST' if self.nulls_first else 'LAST'}"


@dataclass(frozen=True)
class TopK:
    """The order and the limit the view keeps."""

    order: tuple[OrderKey, ...]
    limit: int
    #: The ``ORDER BY`` terms as the query wrote them (for reasons and ``explain``).
    written: str = ""

    def order_sql(self, columns: list[str]) -> str:
        return ", ".join(key.sql(columns) for key in self.order)

    def describe(self, columns: list[str] | None = None) -> str:
        keys = self.order_sql(columns) if columns is not None else self.written
        return f"ORDER BY {keys} LIMIT {self.limit}"


def top_k_split(select: Any) -> tuple[Any, TopK] | str:
    """The select without its ``ORDER BY``/``LIMIT``, and the top it keeps; or why not.

    Only for a select whose ``LIMIT`` is over plain rows: the caller plans a
    grouped or windowed select by its own rules.
    """
    if select.args.get("offset") is not None:
        return "OFFSET is recomputed in full"
    limit = _limit(select)
    if limit is None:
        return "a LIMIT that is not a whole number is recomputed in full"
    order = select.args.get("order")
    if order is None or not order.expressions:
        return "LIMIT without ORDER BY keeps any rows: recomputed in full"
    items = list(select.expressions)
    keys = []
    for ordered in order.expressions:
        position = _output_position(ordered.this, items)
        if position is None:
            return (
                f"ORDER BY {ordered.this.sql(dialect='spark')} is not an output column, so "
                "the view's rows cannot be ordered: LIMIT is recomputed in full"
            )
        desc, nulls_first = bool(ordered.args.get("desc")), bool(ordered.args.get("nulls_first"))
        keys.append(OrderKey(position, desc, nulls_first))
    inner = select.copy()
    inner.set("order", None)
    inner.set("limit", None)
    written = ", ".join(o.sql(dialect="spark") for o in order.expressions)
    return inner, TopK(tuple(keys), limit, written)


def top_reason(top: TopK, rows: str) -> str:
    """The plan's reason: the top's rule over the rows' (``rows``: the linear reason)."""
    return (
        f"{top.describe()} over rows maintained by delta rules ({rows}): the new top is "
        "the view's rows with the change applied; a tick that loses one of them "
        "recomputes the top in full"
    )


def top_step(top: TopK) -> str:
    return (
        f"top {top.limit}: sort the view's rows with the rows gained, less those lost "
        f"({top.describe()}); when a lost row sorts at or before the view's last, "
        "recompute in full"
    )


def _limit(select: Any) -> int | None:
    node = select.args.get("limit")
    value = node.args.get("expression") if node is not None else None
    if not isinstance(value, exp.Literal) or value.is_string:
        return None
    try:
        number = int(value.this)
    except ValueError:
        return None
    return number if number >= 0 else None


def _output_position(node: Any, items: list[Any]) -> int | None:
    """The select-list position ``node`` names: an alias, a 1-based position, an output."""
    if isinstance(node, exp.Literal) and not node.is_string:
        try:
            index = int(node.this) - 1
        except ValueError:
            return None
        return index if 0 <= index < len(items) else None
    if isinstance(node, exp.Column) and not node.table:
        name = node.name.lower()
        named = [i for i, item in enumerate(items) if item.alias_or_name.lower() == name]
        if len(named) == 1:
            return named[0]
    text = node.sql(dialect="spark")
    same = [i for i, item in enumerate(items) if item.unalias().sql(dialect="spark") == text]
    if same:
        return same[0]
    if isinstance(node, exp.Column):  # t.b for an output b, when one output is column b
        same = [i for i, item in enumerate(items) if _same_column(item.unalias(), node)]
        return same[0] if len(same) == 1 else None
    return None


def _same_column(item: Any, node: exp.Column) -> bool:
    if not isinstance(item, exp.Column) or item.name.lower() != node.name.lower():
        return False
    return not item.table or not node.table or item.table.lower() == node.table.lower()
