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

from collections.abc import Callable, Collection, Sequence
from typing import Any

from sqlglot import exp

from airflow_provider_ct.exceptions import CTError

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


#: What Spark's analysis says an operand of ``mz_now()`` is: a date or timestamp
#: (``"temporal"``), an interval, anything else (``"other"``), or None where it
#: could not say (then the operand's words decide, :func:`_temporal`).
OperandKind = Callable[[Any], "str | None"]


def _is_temporal(node: Any, temporal_columns: Collection[str], kind_of: OperandKind | None) -> bool:
    kind = kind_of(node) if kind_of is not None and node is not None else None
    if kind is None:
        return _temporal(node, temporal_columns)
    return kind in ("temporal", "interval")


def wants_timestamp(
    call: Any, temporal_columns: Collection[str], kind_of: OperandKind | None = None
) -> bool:
    """Whether ``call`` (an ``mz_now()``) meets a date/time value (else: epoch ms).

    ``kind_of`` types an operand (Spark's analysis, in the job); where it
    cannot, or without it, the operand's words decide.
    """
    node, parent = call, call.parent
    while isinstance(parent, (exp.Paren, exp.Add, exp.Sub, exp.Neg)):
        if isinstance(parent, (exp.Add, exp.Sub)) and _is_temporal(
            _others(parent, node)[0], temporal_columns, kind_of
        ):
            return True
        node, parent = parent, parent.parent
    if isinstance(parent, (*_COMPARISONS, exp.Between)):
        others = [o for o in _others(parent, node) if o is not None]
        return any(_is_temporal(o, temporal_columns, kind_of) for o in others)
    return False


def now_calls(tree: Any) -> list[Any]:
    """The ``mz_now()``/``ct_time()`` calls of ``tree``, in the order a copy finds them too."""
    return [c for c in tree.find_all(exp.Anonymous) if str(c.this).lower() in NOW_FUNCTIONS]


def now_stamps(
    tree: Any, temporal_columns: Collection[str] = (), kind_of: OperandKind | None = None
) -> tuple[bool, ...]:
    """For each call of :func:`now_calls`, whether it is a timestamp (else epoch ms).

    Decided once per statement, where the tables are bound and Spark can type
    the operands; every time the statement runs reuses it (:func:`with_time`).
    """
    columns = {c.lower() for c in temporal_columns}
    return tuple(wants_timestamp(call, columns, kind_of) for call in now_calls(tree))


def with_time(
    tree: Any,
    time: int,
    temporal_columns: Collection[str] = (),
    stamps: Sequence[bool] | None = None,
) -> Any:
    """``tree`` with every ``mz_now()``/``ct_time()`` replaced by ``time`` (epoch ms).

    ``stamps`` (:func:`now_stamps` of the same statement) says which calls
    are timestamps; without it the operands' words decide. Changes ``tree``
    in place (callers pass a copy) and returns it.
    """
    calls = now_calls(tree)
    if stamps is None:
        stamps = now_stamps(tree, temporal_columns)
    if len(stamps) != len(calls):
        raise CTError(f"{len(stamps)} mz_now() types for {len(calls)} calls")
    for call, stamp in zip(calls, stamps, strict=True):
        literal = exp.Literal.number(time)
        if stamp:
            call.replace(exp.Anonymous(this="timestamp_millis", expressions=[literal]))
        else:
            call.replace(literal)
    return tree
