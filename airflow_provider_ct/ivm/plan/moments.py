"""``STDDEV`` and ``VARIANCE`` kept in place: each an expression over two sums and a count.

A group's sample variance is ``(n·Σx² - (Σx)²) / (n·(n-1))`` and its
population variance the same over ``n²``; a standard deviation is the
square root of one. ``n = COUNT(x)``, ``Σx = SUM(x)`` and ``Σx² =
SUM(x·x)`` are invertible: a change adds its own to them, so the
in-place rule (:mod:`.in_place`) keeps the three as hidden aggregates and
evaluates the expression from them per affected group, as it does for any
expression over aggregates. No group is recomputed when a row leaves it.

Exactness, which the in-place rule never gives up:

* The three operands are exact: ``x·x`` is computed as ``DECIMAL(38, 6)``
  (Spark's type for the product of two ``DECIMAL(22, 3)``),
  which holds the square of every integer of at most 32 bits and of every
  decimal of scale at most 3 and at most 16 integer digits without
  rounding; the write job refuses other types (floating point: the view
  keeps its fallback). A ``BIGINT``'s square may pass it: Spark then gives
  NULL, which the kept counts reveal, and so Spark does not sum a
  change's squares of one (a NULL sum beside a signed count of zero would
  reveal nothing); the driver's sums are checked and take it. A numerator
  past 32 integer digits is refused per tick before Spark evaluates it
  (:func:`~airflow_provider_ct.ivm.state.aggregate_state.moment_overflow`).
* The numerator ``n·Σx² - (Σx)²`` is then computed exactly (decimal
  arithmetic on integers and scale-6 values: nothing rounds), so it is
  never negative and cancellation cannot occur. The only roundings are
  the three of the last step: to a double, the division, the square root.
  Spark's own ``STDDEV`` accumulates central moments in doubles, merged in
  an order that depends on its partitioning; the two agree to the last
  few bits, not bit for bit, and neither is more "the" answer than the
  other (``docs/decisions.md``).
* NULLs are Spark's: ``n`` counts non-NULL values only; the sample forms
  are NULL below two values, the population forms below one
  (``spark.sql.legacy.statisticalAggregate`` off, Spark's default).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sqlglot import exp

#: Each function's (population?, square root?).
_KINDS: dict[type, tuple[bool, bool]] = {
    exp.Stddev: (False, True),
    exp.StddevSamp: (False, True),
    exp.StddevPop: (True, True),
    exp.Variance: (False, False),
    exp.VariancePop: (True, False),
}
#: The type squares and the numerator are computed in (exact for the types the job allows).
WIDE = "DECIMAL(38, 6)"
#: The type a value is squared as: every ``BIGINT`` and decimal of scale at most 3 and 19
#: integer digits, narrow enough that the driver's Arrow multiplies two of them.
SQUARED = "DECIMAL(22, 3)"
#: What ``WIDE`` holds left of its point.
WIDE_INTEGER_DIGITS = 32


@dataclass(frozen=True)
class Moment:
    """One ``STDDEV``/``VARIANCE`` call: its argument and which of the four forms it is."""

    #: Spark SQL of the argument, in the block's scope.
    argument: str
    population: bool
    root: bool


def moment_call(node: Any) -> Moment | str | None:
    """The call as a :class:`Moment`; a reason it cannot be kept; None: not such a call."""
    kind = _KINDS.get(type(node))
    if kind is None:
        return None
    argument = node.this
    if isinstance(argument, exp.Distinct):
        return "DISTINCT inside an aggregate"
    if argument is None or argument.find(exp.AggFunc) is not None:
        return "an aggregate over an aggregate"
    return Moment(argument.sql(dialect="spark"), *kind)


def square_sql(argument: str) -> str:
    """Spark SQL of ``argument``'s square, exact for the types the write job allows."""
    cast = f"CAST({argument} AS {SQUARED})"
    return f"{cast} * {cast}"


def moment_expression(moment: Moment, count: str, total: str, squares: str) -> Any:
    """The call as an expression over the columns holding ``COUNT``, ``SUM`` and ``SUM`` of
    squares (a sqlglot node, Spark's types and NULLs)."""
    n, s = count, total
    exact = f"CAST({n} AS {WIDE}) * {squares} - CAST({s} AS {WIDE}) * CAST({s} AS {WIDE})"
    numerator = f"CAST({exact} AS DOUBLE)"
    denominator = f"{n} * {n}" if moment.population else f"{n} * ({n} - 1)"
    value = f"{numerator} / CAST({denominator} AS DOUBLE)"
    if moment.root:
        value = f"SQRT({value})"
    least = 0 if moment.population else 1
    return exp.maybe_parse(f"CASE WHEN {n} > {least} THEN {value} END", dialect="spark")
