"""Which views keep their aggregates in place: the shape, decided from the SQL alone.

A view whose select list holds only its grouping keys and bare ``SUM(x)``,
``COUNT(x)``, ``COUNT(*)`` and ``AVG(x)`` calls (aliased or not) can be
maintained without recomputing any group: each group's new value is its old
state plus the aggregate of the signed change of the rows below the
aggregation (``new = old + agg(inserted) - agg(deleted)``). The state is,
per group, its row count and, per distinct argument, its sum and its count
of non-NULL values (:mod:`~airflow_provider_ct.core.aggregate_state`).

What this module refuses, with the reason (the view then keeps the ``group``
strategy, or runs in full without ``GROUP BY``): ``DISTINCT`` inside an
aggregate, ``FILTER``, ``HAVING``, an expression over aggregates (``100 *
SUM(a) / SUM(b)``: its value needs Spark's decimal rules on the whole
expression), ``MIN``/``MAX`` (a deleted extreme needs the group's other rows)
and any other aggregate function. Whether the arguments' *types* allow exact
arithmetic (integral or decimal, not floating point) is only known to Spark;
the write job checks it (:mod:`airflow_provider_ct.spark.in_place`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sqlglot import exp

SUM, COUNT, AVG = "sum", "count", "avg"


@dataclass(frozen=True)
class Aggregate:
    """One output column computed from the state."""

    #: 0-based position in the select list (the target's column).
    position: int
    #: ``sum``, ``count`` or ``avg``.
    function: str
    #: Index into :attr:`InPlace.arguments`; ``None`` for ``COUNT(*)``.
    argument: int | None


@dataclass(frozen=True)
class InPlace:
    """How a view's aggregates are kept: their arguments and where each lands."""

    #: Spark SQL of each distinct argument, in the block's scope.
    arguments: tuple[str, ...]
    aggregates: tuple[Aggregate, ...]
    #: The strategy (and its reason) that runs when the write job refuses
    #: in-place maintenance (inexact types, too many groups): ``group``,
    #: ``partition`` or ``full``.
    fallback: str = "full"
    fallback_reason: str = ""

    def functions(self) -> str:
        """``SUM, COUNT(*), AVG``: for reasons and reports."""
        names = []
        for a in self.aggregates:
            name = "COUNT(*)" if a.argument is None else a.function.upper()
            if name not in names:
                names.append(name)
        return ", ".join(names)


def in_place_shape(select: Any, items: list[Any], key_positions: tuple[int, ...]) -> InPlace | str:
    """The view's in-place aggregates, or why it has none (a reason for the plan)."""
    if select.args.get("having") is not None:
        return "HAVING filters on aggregates"
    arguments: list[str] = []
    aggregates: list[Aggregate] = []
    for position, item in enumerate(items):
        if position in key_positions:
            continue
        node = item.unalias()
        found = _aggregate(node)
        if isinstance(found, str):
            return f"{item.sql(dialect='spark')}: {found}"
        function, argument = found
        index = None
        if argument is not None:
            if argument not in arguments:
                arguments.append(argument)
            index = arguments.index(argument)
        aggregates.append(Aggregate(position, function, index))
    if not aggregates:
        return "no aggregate in the select list"
    return InPlace(tuple(arguments), tuple(aggregates))


def _aggregate(node: Any) -> tuple[str, str | None] | str:
    """``(function, argument SQL)`` of a bare SUM / COUNT / AVG call, or why not."""
    if isinstance(node, exp.Filter):
        return "an aggregate with FILTER"
    kinds = {exp.Sum: SUM, exp.Count: COUNT, exp.Avg: AVG}
    function = next((name for kind, name in kinds.items() if type(node) is kind), None)
    if function is None:
        if node.find(exp.AggFunc) is not None:
            return "not a bare SUM, COUNT or AVG (an expression over aggregates, MIN, MAX...)"
        return "neither a grouping key nor an aggregate"
    argument = node.this
    if isinstance(argument, exp.Distinct):
        return "DISTINCT inside an aggregate"
    if argument is None or argument.find(exp.AggFunc) is not None:
        return "an aggregate over an aggregate"
    if isinstance(argument, exp.Star):
        if function != COUNT:
            return f"{function.upper()}(*)"
        return COUNT, None
    if node.args.get("expressions"):
        return "an aggregate of several arguments"
    return function, argument.sql(dialect="spark")
