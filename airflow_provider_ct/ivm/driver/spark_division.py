"""Spark's decimal division, exactly: the driver's ``a / b`` gives Spark's digits or nothing.

Spark 3.5 divides two decimals as ``java.math.BigDecimal.divide(that, 39,
DOWN)`` (``DecimalType.MAX_SCALE + 1`` places, the rounding mode of
``Decimal.MATH_CONTEXT``, both read from ``Decimal`` in ``spark-sql-api``):
the quotient *truncated* to 39 places. It then rounds that half-up to the
result type's scale ``s`` and gives NULL when the result's integer digits
pass its precision. Half of a unit at ``s ≤ 38`` is a multiple of
``10**-39``, so truncating at 39 places never moves a quotient across it:
Spark's result is the exact quotient rounded half-up at ``s`` once, which
is what this computes, on integers (a Decimal context would round at a
count of significant digits instead).

A zero divisor is Spark's NULL without ANSI mode and an error with it: the
evaluator leaves such a row to Spark (:class:`~.arrow_eval.NotOnDriver`).
"""

from __future__ import annotations

from decimal import Decimal


def spark_divide(
    dividend: Decimal | int, divisor: Decimal | int, precision: int, scale: int
) -> Decimal | None:
    """``dividend / divisor`` as Spark's ``DECIMAL(precision, scale)`` (None: its overflow).

    ``divisor`` must not be zero (Spark's answer depends on ANSI mode).
    """
    a, a_exponent = _unscaled(Decimal(dividend))
    b, b_exponent = _unscaled(Decimal(divisor))
    assert b != 0, "a zero divisor is Spark's to answer"
    shift = scale + a_exponent - b_exponent  # quotient * 10**scale = a * 10**shift / b
    numerator, denominator = (a * 10**shift, b) if shift >= 0 else (a, b * 10**-shift)
    result = _half_up(numerator, denominator)
    if abs(result) >= 10**precision:
        return None
    return Decimal(result).scaleb(-scale)


def _unscaled(value: Decimal) -> tuple[int, int]:
    """``(n, e)`` with ``value == n * 10**e``."""
    sign, digits, exponent = value.as_tuple()
    assert isinstance(exponent, int), "a finite decimal"
    unscaled = int("".join(map(str, digits)) or "0")
    return (-unscaled if sign else unscaled), exponent


def _half_up(numerator: int, denominator: int) -> int:
    """``numerator / denominator`` rounded to an integer, ties away from zero (Java's HALF_UP)."""
    quotient, remainder = divmod(abs(numerator), abs(denominator))
    if 2 * remainder >= abs(denominator):
        quotient += 1
    return -quotient if (numerator < 0) != (denominator < 0) else quotient
