"""Which views keep their aggregates in place: the shape, decided from the SQL alone.

A view whose select list holds only its grouping keys and bare ``SUM(x)``,
``COUNT(x)``, ``COUNT(*)``, ``AVG(x)``, ``MIN(x)`` and ``MAX(x)`` calls
(aliased or not) can be maintained without recomputing any group: each
group's new value is its old state plus the aggregate of the signed change
of the rows below the aggregation (``new = old + agg(inserted) -
agg(deleted)``). The state is, per group, its row count and, per distinct
argument, its sum and its count of non-NULL values, and per ``MIN``/``MAX``
call its extremum (:mod:`~airflow_provider_ct.ivm.state.aggregate_state`).
``MIN`` and ``MAX`` are not invertible: an insert moves the extremum
exactly, but a deletion of a value at the extremum leaves the group's new
extremum unknown, and only those groups' extrema are read again from the
new inputs (:mod:`airflow_provider_ct.spark.ivm.in_place_rescan`).

An expression over such aggregates and literals (TPC-H q14's ``100.00 *
SUM(...) / SUM(...)``) is kept too: its aggregates are kept as hidden
operands, and the expression is :class:`Derived`, evaluated by Spark over
their values (one local relation per tick, no job) so that its decimal
rules, rounding and NULLs are Spark's own. ``STDDEV`` and ``VARIANCE``
(``_SAMP``, ``_POP``) are such expressions, over a count and two sums
(:mod:`.moments`).

What this module refuses, with the reason (the view then keeps the ``group``
strategy, or runs in full without ``GROUP BY``): ``DISTINCT`` inside an
aggregate, ``FILTER``, ``HAVING``, an expression mixing aggregates with
columns or windows, and any other aggregate function. Whether the
arguments' *types* allow exact arithmetic (integral or decimal sums, an
order Python compares as Spark does for ``MIN``/``MAX``: not floating
point) is only known to Spark; the write job checks it
(:mod:`airflow_provider_ct.spark.ivm.in_place`).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from sqlglot import exp

from airflow_provider_ct.ivm.plan.moments import Moment, moment_call, moment_expression, square_sql

SUM, COUNT, AVG, MIN, MAX = "sum", "count", "avg", "min", "max"
#: The aggregates kept as an extremum per group (not invertible: see the module).
EXTREMA = (MIN, MAX)


@dataclass(frozen=True)
class Aggregate:
    """One output column computed from the state."""

    #: 0-based position in the select list (the target's column); None: an
    #: operand of a :class:`Derived` column only.
    position: int | None
    #: ``sum``, ``count``, ``avg``, ``min`` or ``max``.
    function: str
    #: Index into :attr:`InPlace.arguments`; ``None`` for ``COUNT(*)``.
    argument: int | None


@dataclass(frozen=True)
class Derived:
    """An output column computed by Spark from aggregate values (an expression over them)."""

    #: 0-based position in the select list.
    position: int
    #: Spark SQL of the expression, each aggregate call replaced by the column
    #: ``__ct_v<i>`` (``i``: the call's index in :attr:`InPlace.aggregates`).
    sql: str
    #: No operand: the same value in every group (:func:`is_constant`).
    constant: bool = False
    #: Per ``STDDEV``/``VARIANCE`` call in it (:mod:`.moments`), the indexes in
    #: :attr:`InPlace.aggregates` of its ``COUNT(x)``, ``SUM(x)`` and ``SUM`` of squares.
    moments: tuple[tuple[int, int, int], ...] = ()


def operand(index: int) -> str:
    """The column a :class:`Derived` expression reads aggregate ``index`` as."""
    return f"__ct_v{index}"


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
    derived: tuple[Derived, ...] = ()

    def call_sql(self, index: int) -> str:
        """Spark SQL of aggregate ``index`` (``SUM(x)``, ``COUNT(*)``...)."""
        aggregate = self.aggregates[index]
        if aggregate.argument is None:
            return "COUNT(*)"
        return f"{aggregate.function.upper()}({self.arguments[aggregate.argument]})"

    @property
    def extrema(self) -> tuple[tuple[str, int], ...]:
        """The distinct ``(min|max, argument)`` pairs whose extremum the state keeps, in order.

        Index ``e`` in this tuple names the state's columns ``__ct_x<e>``.
        """
        out: list[tuple[str, int]] = []
        for a in self.aggregates:
            if a.function in EXTREMA and a.argument is not None:
                pair = (a.function, a.argument)
                if pair not in out:
                    out.append(pair)
        return tuple(out)

    def extremum_of(self, aggregate: Aggregate) -> int:
        """The index in :attr:`extrema` of a ``MIN``/``MAX`` aggregate."""
        assert aggregate.argument is not None
        return self.extrema.index((aggregate.function, aggregate.argument))

    def squares(self) -> dict[int, int]:
        """The arguments that are squares (of :mod:`.moments`) -> the argument squared."""
        out = {}
        for derived in self.derived:
            for _, total, squares in derived.moments:
                base, square = self.aggregates[total].argument, self.aggregates[squares].argument
                assert base is not None and square is not None
                out[square] = base
        return out

    def functions(self) -> str:
        """``SUM, COUNT(*), AVG``: for reasons and reports."""
        names = []
        for a in self.aggregates:
            name = "COUNT(*)" if a.argument is None else a.function.upper()
            if name not in names:
                names.append(name)
        return ", ".join(names) or "each group's row count"


def in_place_shape(select: Any, items: list[Any], key_positions: tuple[int, ...]) -> InPlace | str:
    """The view's in-place aggregates, or why it has none (a reason for the plan)."""
    if select.args.get("having") is not None:
        return "HAVING filters on aggregates"
    arguments: list[str] = []
    aggregates: list[Aggregate] = []
    derived: list[Derived] = []
    for position, item in enumerate(items):
        if position in key_positions:
            continue
        node = item.unalias()
        found = _aggregate(node)
        if isinstance(found, str) and is_constant(node):
            derived.append(Derived(position, node.sql(dialect="spark"), constant=True))
            continue
        if isinstance(found, str):
            expression = _derived(node, arguments, aggregates)
            if expression is None:
                return f"{item.sql(dialect='spark')}: {found}"
            if not isinstance(expression, Derived):
                return f"{item.sql(dialect='spark')}: {expression}"
            derived.append(replace(expression, position=position))
            continue
        aggregates.append(Aggregate(position, found[0], _argument(arguments, found[1])))
    if not aggregates and not key_positions:
        return "no aggregate in the select list"
    return InPlace(tuple(arguments), tuple(aggregates), derived=tuple(derived))


#: The nodes a constant output is made of: literals, casts and signs of them.
_CONSTANT_NODES = (
    exp.Literal,
    exp.Null,
    exp.Boolean,
    exp.Cast,
    exp.Paren,
    exp.Neg,
    exp.DataType,
    exp.DataTypeParam,
)


def is_constant(node: Any) -> bool:
    """Whether ``node`` is the same value in every group (a literal, a cast of one).

    Such an output (TPC-DS's ``'s' AS sale_type`` beside the aggregates) is a
    :class:`Derived` column without operands: Spark evaluates it like the
    others, so its type is the full query's. Functions are left out, even
    constant ones: ``current_date()`` would be evaluated at each group's
    last change, not at the tick.
    """
    return all(isinstance(n, _CONSTANT_NODES) for n in node.walk())


def _argument(arguments: list[str], argument: str | None) -> int | None:
    """The index of ``argument`` among the distinct arguments (added when new)."""
    if argument is None:
        return None
    if argument not in arguments:
        arguments.append(argument)
    return arguments.index(argument)


def _derived(node: Any, arguments: list[str], aggregates: list[Aggregate]) -> Derived | str | None:
    """``node`` as an expression over hidden aggregates; a reason; None: no aggregate in it."""
    calls = [c for c in node.find_all(exp.AggFunc) if c.find_ancestor(exp.AggFunc) is None]
    if not calls or node.find(exp.Window) is not None:
        return None
    holder = exp.Paren(this=node.copy())  # the root itself may be the call replaced
    moments = []
    for call in [c for c in holder.find_all(exp.AggFunc) if c.find_ancestor(exp.AggFunc) is None]:
        moment = moment_call(call)
        found = _aggregate(call) if moment is None else moment
        if isinstance(found, str):
            return f"{call.sql(dialect='spark')} in an expression: {found}"
        if isinstance(found, Moment):
            hidden = tuple(_hidden(arguments, aggregates, f, a) for f, a in _moment_calls(found))
            names = [operand(i) for i in hidden]
            call.replace(moment_expression(found, *names))
            moments.append((hidden[0], hidden[1], hidden[2]))
            continue
        call.replace(exp.column(operand(_hidden(arguments, aggregates, *found))))
    if any(not c.name.startswith("__ct_v") for c in holder.find_all(exp.Column)):
        return "an expression over aggregates and columns"
    return Derived(-1, holder.this.sql(dialect="spark"), moments=tuple(moments))


def _moment_calls(moment: Moment) -> list[tuple[str, str]]:
    """The hidden ``(function, argument)`` a moment is computed from: n, Σx, Σx²."""
    return [(COUNT, moment.argument), (SUM, moment.argument), (SUM, square_sql(moment.argument))]


def _hidden(
    arguments: list[str], aggregates: list[Aggregate], function: str, argument: str | None
) -> int:
    """The index of a hidden aggregate (an operand of a derived column), added when new."""
    hidden = Aggregate(None, function, _argument(arguments, argument))
    if hidden not in aggregates:
        aggregates.append(hidden)
    return aggregates.index(hidden)


def _aggregate(node: Any) -> tuple[str, str | None] | str:
    """``(function, argument SQL)`` of a bare SUM / COUNT / AVG / MIN / MAX call, or why not."""
    if isinstance(node, exp.Filter):
        return "an aggregate with FILTER"
    kinds = {exp.Sum: SUM, exp.Count: COUNT, exp.Avg: AVG, exp.Min: MIN, exp.Max: MAX}
    function = next((name for kind, name in kinds.items() if type(node) is kind), None)
    if function is None:
        if node.find(exp.AggFunc) is not None:
            return (
                "not a bare SUM, COUNT, AVG, MIN or MAX (an expression over aggregates, "
                "another aggregate function...)"
            )
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
