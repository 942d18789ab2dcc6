"""``A RIGHT JOIN B ON c`` planned as ``B LEFT JOIN A ON c``: one outer-join rule, two spellings.

The two are the same query: every row of ``B`` is kept, matched with the
rows of ``A`` that pass ``c`` or extended with NULLs. The left-join rule
(:mod:`.left_join`) names the preserved and the optional side by their
place in ``FROM``, so a right join written by a user reaches that rule once
its two sides trade places. Only the select's first join moves (joins
associate to the left: ``A RIGHT JOIN B ... JOIN C`` is ``(B LEFT JOIN A)
JOIN C``), and only where the select list names its columns: a ``*``
would list the columns in the other order. The swap is the planner's; the
query a full refresh runs is the user's as written.
"""

from __future__ import annotations

from typing import Any

from sqlglot import exp

from airflow_provider_ct.ivm.plan.select_shape import is_count_star


def as_left_joins(tree: Any) -> Any:
    """``tree`` with every select's leading ``RIGHT JOIN`` turned around; a copy if any was."""
    swappable = [s for s in tree.find_all(exp.Select) if _swappable(s)]
    if not swappable:
        return tree
    tree = tree.copy()
    for select in [s for s in tree.find_all(exp.Select) if _swappable(s)]:
        _swap(select)
    return tree


def _swappable(select: Any) -> bool:
    joins = select.args.get("joins") or []
    from_ = select.args.get("from_") or select.args.get("from")
    if not joins or from_ is None:
        return False
    first = joins[0]
    if (first.side or "").upper() != "RIGHT" or first.args.get("on") is None:
        return False
    if first.kind or first.args.get("using") or first.args.get("method"):
        return False
    return not any(
        isinstance(item, exp.Star) or (item.find(exp.Star) and not is_count_star(item))
        for item in select.expressions
    )


def _swap(select: Any) -> None:
    """``FROM a RIGHT JOIN b ON c`` becomes ``FROM b LEFT JOIN a ON c`` in place."""
    from_ = select.args.get("from_") or select.args.get("from")
    first = select.args["joins"][0]
    preserved, optional = first.this, from_.this
    from_.set("this", preserved.copy())
    first.set("this", optional.copy())
    first.set("side", "LEFT")
