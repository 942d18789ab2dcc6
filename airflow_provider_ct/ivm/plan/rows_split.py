"""An ungrouped select taken apart: the rows its windows or limit read, and the rest over them.

``SELECT t.id, RANK() OVER (ORDER BY t.v) AS r FROM t JOIN u ON ... WHERE
...`` has no delta rule as a whole (one new row may move every rank), nor
has ``... ORDER BY t.v LIMIT 5`` (a deleted row lets another one in). But
SQL evaluates such a select in two steps: the rows (``FROM``, the joins,
``WHERE``), then the windows, ``DISTINCT``, ``ORDER BY`` and ``LIMIT`` over
them. The first step alone is a projection of a join, which the ``linear``
strategy maintains: ``SELECT t.id AS __ct_c0, t.v AS __ct_c1 FROM t JOIN u
ON ... WHERE ...``; the second reads its rows, ``SELECT __ct_c0 AS id,
RANK() OVER (ORDER BY __ct_c1) AS r FROM <rows>``. :mod:`.compose` keeps
the rows as a part of the view, so the windows or the limit are the only
work recomputed over them, and the joins and filters below are not.

The rows carry each column the rest reads, once per spelling (``t.v`` and
``v`` are two columns of the rows, which is harmless). An ``ORDER BY``
name that is an output of the select stays as written (the rest has the
same outputs). Refused (``None``): a grouped or aggregating select (the
groups split's), one without a window, ``LIMIT`` or ``DISTINCT`` to cut
below, rows that would be one input as it is (no join, no ``WHERE``:
the part would copy it and save nothing), ``LIMIT`` without ``ORDER BY``
(which rows it keeps is Spark's choice, and would differ between the
rows and the inputs), ``*``, an
output without a name of its own (Spark names it after its text),
subqueries outside ``WHERE`` and ``LATERAL`` views.
"""

from __future__ import annotations

from typing import Any

from sqlglot import exp

from airflow_provider_ct.ivm.plan.select_shape import has_own_aggregate, plainly_named

COLUMN_PREFIX = "__ct_c"
#: The alias the rest of the query reads the rows' table under.
ROWS_ALIAS = "__ct_rows"


def split_rows(select: Any) -> tuple[Any, Any] | None:
    """``(rows query, the rest of the select over ROWS_ALIAS)``, or None (module docstring).

    ``select`` is not changed; the caller puts the rows' table in place of
    the placeholder table ``ROWS_ALIAS``.
    """
    if not isinstance(select, exp.Select) or not _splittable(select):
        return None
    outputs = {i.alias_or_name.lower() for i in select.expressions}
    columns: list[Any] = []
    rest_items = [_over_rows(i, columns, set()) for i in select.expressions]
    order = select.args.get("order")
    rest_order = _over_rows(order, columns, outputs) if order is not None else None
    if not columns:
        return None  # nothing read from the rows: constants only
    rows = exp.select(*[exp.alias_(c.copy(), f"{COLUMN_PREFIX}{i}") for i, c in enumerate(columns)])
    for arg in ("from_", "from", "joins", "where"):
        if select.args.get(arg) is not None:
            rows.set(arg, select.args[arg].copy())
    rest = exp.select(*rest_items).from_(exp.to_table(ROWS_ALIAS))
    for arg in ("distinct", "limit", "offset", "qualify"):
        if select.args.get(arg) is not None:
            rest.set(arg, _over_rows(select.args[arg], columns, set()))
    if rest_order is not None:
        rest.set("order", rest_order)
    return rows, rest


def _splittable(select: Any) -> bool:
    if select.args.get("group") is not None or has_own_aggregate(select):
        return False
    if select.args.get("having") is not None or select.find(exp.Lateral):
        return False
    cut = select.find(exp.Window) or select.args.get("limit") or select.args.get("distinct")
    if cut is None:
        return False
    if select.args.get("limit") is not None and select.args.get("order") is None:
        return False
    if not select.args.get("joins") and select.args.get("where") is None:
        return False  # the rows would be a copy of the input: nothing below the cut to save
    for item in select.expressions:
        if not plainly_named(item) or item.find(exp.Subquery, exp.Exists):
            return False
    order = select.args.get("order")
    return order is None or not order.find(exp.Subquery, exp.Exists)


def _over_rows(node: Any, columns: list[Any], outputs: set[str]) -> Any:
    """``node`` with each column it reads as a column of the rows (added to ``columns``).

    :param outputs: names left as written (an ``ORDER BY`` naming an output).
    """

    def swap(found: Any) -> Any:
        if not isinstance(found, exp.Column) or not found.name:
            return found
        if not found.table and found.name.lower() in outputs:
            return found
        for i, seen in enumerate(columns):
            if seen == found:
                return exp.column(f"{COLUMN_PREFIX}{i}")
        columns.append(found.copy())
        return exp.column(f"{COLUMN_PREFIX}{len(columns) - 1}")

    swapped = node.copy().transform(swap)
    if isinstance(node, exp.Column):  # a bare output column keeps its name
        return exp.alias_(swapped, node.name)
    return swapped
