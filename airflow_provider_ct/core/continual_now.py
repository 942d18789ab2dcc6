"""``mz_now()`` in a continual task: the input time being processed, in the type asked for.

Materialize's ``mz_now()`` is a timestamp type of its own that compares with
numbers and with timestamps alike, so its users write both
``ts < mz_now() - 3600000`` (epoch ms) and ``ts + INTERVAL '2s' > mz_now()``.
Spark has no such type, so each call is replaced by a literal of the type its
context needs: ``TIMESTAMP_MILLIS(t)`` where it meets a timestamp, the number
``t`` otherwise. The context is read off the expression: ``mz_now()`` inside
arithmetic or a comparison (or ``BETWEEN``) whose other side holds an
``INTERVAL``, a cast to a date/time type, a current-time function or a column
whose name is a date/time column of a table the task reads.
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Any

from sqlglot import exp

NOW_FUNCTIONS = ("mz_now", "ct_time")
TEMPORAL_TYPES = (
    exp.DataType.Type.DATE,
    exp.DataType.Type.TIMESTAMP,
    exp.DataType.Type.TIMESTAMPTZ,
    exp.DataType.Type.TIMESTAMPLTZ,
    exp.DataType.Type.TIMESTAMPNTZ,
)
_COMPARISONS = (exp.EQ, exp.NEQ, exp.GT, exp.GTE, exp.LT, exp.LTE, exp.NullSafeEQ)
_CLOCKS = (exp.CurrentTimestamp, exp.CurrentDate, exp.TimeStrToTime, exp.StrToTime)


def _temporal(node: Any, temporal_columns: Collection[str]) -> bool:
    if node is None:
        return False
    for sub in node.walk():
        if isinstance(sub, (exp.Interval, *_CLOCKS)):
            return True
        if isinstance(sub, exp.Cast) and sub.to.is_type(*TEMPORAL_TYPES):
            return True
        if isinstance(sub, exp.Column) and sub.name.lower() in temporal_columns:
            return True
    return False


def _others(parent: Any, node: Any) -> list[Any]:
    if isinstance(parent, exp.Between):
        parts = [parent.this, parent.args.get("low"), parent.args.get("high")]
        return [p for p in parts if p is not node]
    return [parent.expression if parent.this is node else parent.this]


def wants_timestamp(call: Any, temporal_columns: Collection[str]) -> bool:
    """Whether ``call`` (an ``mz_now()``) meets a date/time value (else: epoch ms)."""
    node, parent = call, call.parent
    while isinstance(parent, (exp.Paren, exp.Add, exp.Sub, exp.Neg)):
        if isinstance(parent, (exp.Add, exp.Sub)) and _temporal(
            _others(parent, node)[0], temporal_columns
        ):
            return True
        node, parent = parent, parent.parent
    if isinstance(parent, (*_COMPARISONS, exp.Between)):
        return any(_temporal(o, temporal_columns) for o in _others(parent, node))
    return False


def with_time(tree: Any, time: int, temporal_columns: Collection[str] = ()) -> Any:
    """``tree`` with every ``mz_now()``/``ct_time()`` replaced by ``time`` (epoch ms).

    Changes ``tree`` in place (callers pass a copy) and returns it.
    """
    columns = {c.lower() for c in temporal_columns}
    for call in list(tree.find_all(exp.Anonymous)):
        if str(call.this).lower() not in NOW_FUNCTIONS:
            continue
        literal = exp.Literal.number(time)
        if wants_timestamp(call, columns):
            call.replace(exp.Anonymous(this="timestamp_millis", expressions=[literal]))
        else:
            call.replace(literal)
    return tree
