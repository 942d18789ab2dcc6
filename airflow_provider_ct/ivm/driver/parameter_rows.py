"""A block's parameters on the driver: their values as literals, and the rows a move flips.

A parameter (:mod:`airflow_provider_ct.ivm.plan.parameters`) is an
uncorrelated scalar subquery a conjunct compares the row with. The tick
evaluates it at both snapshots (Spark, :mod:`airflow_provider_ct.spark.ivm.parameters`)
and puts a placeholder column in its place in the driver's tree. Here:

* :meth:`Parameter.bound` writes a value in the placeholder's place, as a
  literal typed as Spark typed the subquery, so the conjunct is evaluated
  with the value of one side (:class:`~.arrow_eval.ArrowEvaluator`);
* :func:`flipped_rows` scans the conjunct's input at the new snapshot for
  the rows whose conjunct is true under one value and not under the other:
  the rows the move of the value adds (true under the new value) and
  removes (true under the old one). Both values apply to the same rows,
  so a row that changed too is judged as it is now, as the telescoping
  sum of the plan module wants.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from decimal import Decimal, localcontext
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from sqlglot import exp

from airflow_provider_ct.ivm.driver.arrow_eval import ArrowEvaluator, NotOnDriver, node_key
from airflow_provider_ct.ivm.driver.driver_join import NEW, OLD
from airflow_provider_ct.ivm.driver.keyed_rows import SnapshotRows
from airflow_provider_ct.ivm.state.aggregate_state import spark_decimal_average


@dataclass(frozen=True)
class Parameter:
    """One parameter's values on both sides, as Python values of its Spark type."""

    #: The placeholder column's name in the driver's tree.
    name: str
    old: Any
    new: Any
    #: The Arrow type of the subquery's Spark type.
    arrow_type: pa.DataType
    #: Where the values were computed: ``driver`` (both sides) or ``spark``.
    computed_on: str = "spark"

    @property
    def moved(self) -> bool:
        return (self.old is None) != (self.new is None) or self.old != self.new

    def literal(self, side: str) -> Any:
        """The value on ``side`` (``NEW``/``OLD``) as a sqlglot literal."""
        value = self.new if side == NEW else self.old
        if value is None:
            return exp.Null()
        if isinstance(value, str):
            return exp.Literal.string(value)
        if isinstance(value, bool) or not isinstance(value, int | Decimal):
            raise NotOnDriver(f"a parameter of type {self.arrow_type} is Spark's")
        text = format(value, "f") if isinstance(value, Decimal) else str(value)
        return exp.Literal(this=text, is_string=False)  # one node, a sign included

    def types(self) -> dict[str, pa.DataType]:
        """The Spark types of both sides' literals, by node key (for the evaluator)."""
        return {node_key(self.literal(side)): self.arrow_type for side in (OLD, NEW)}


def literal_value(value: Any, arrow_type: pa.DataType) -> bool:
    """Whether a parameter's value can be written as an exact literal on the driver."""
    if value is None:
        return True
    if isinstance(value, bool):
        return False
    if isinstance(value, str):
        return pa.types.is_string(arrow_type) or pa.types.is_large_string(arrow_type)
    return isinstance(value, int | Decimal) and (
        pa.types.is_integer(arrow_type) or pa.types.is_decimal(arrow_type)
    )


def bound(condition: Any, parameters: Mapping[str, Parameter], sides: Mapping[str, str]) -> Any:
    """A copy of ``condition`` with each placeholder replaced by its value on its side.

    :param sides: placeholder name -> ``NEW`` or ``OLD``.
    """

    def place(node: Any) -> Any:
        if isinstance(node, exp.Column) and not node.table and node.name in parameters:
            return parameters[node.name].literal(sides[node.name])
        return node

    return condition.copy().transform(place)


def placeholders(condition: Any, parameters: Mapping[str, Parameter]) -> list[str]:
    """The parameters ``condition`` names, in tree order."""
    found = [c.name for c in condition.find_all(exp.Column) if not c.table]
    return [n for n in dict.fromkeys(found) if n in parameters]


def flipped_rows(
    rows: SnapshotRows,
    conjunct: Any,
    alias: str,
    parameter: Parameter,
    sides: Mapping[str, str],
    types: Mapping[str, pa.DataType],
) -> tuple[pa.Table, pa.Table]:
    """The rows whose ``conjunct`` the parameter's move turns true, and those it turns false.

    :param rows: the conjunct's input at the new snapshot.
    :param sides: the side of every other parameter the conjunct names (it names one).
    """
    before = bound(conjunct, {parameter.name: parameter}, {**sides, parameter.name: OLD})
    after = bound(conjunct, {parameter.name: parameter}, {**sides, parameter.name: NEW})

    def masks(table: pa.Table) -> tuple[pa.Array, pa.Array]:
        evaluator = ArrowEvaluator(table, alias, types)
        return evaluator.mask(before), evaluator.mask(after)

    def flips(table: pa.Table) -> pa.Array:
        old, new = masks(table)
        return pc.not_equal(old, new)

    moved = rows.where_true(flips)
    if not moved.num_rows:
        return moved, moved
    old, new = masks(moved)
    return moved.filter(new), moved.filter(old)


def aggregate_value(function: str, values: pa.Array | None, rows: int, kind: pa.DataType) -> Any:
    """``function`` of ``values`` (``rows`` rows; ``values`` None for ``COUNT(*)``) as Spark
    computes it into ``kind``, its result type; :class:`NotOnDriver` where Spark may differ.

    Sums are exact (Python integers and decimals); ``AVG`` of decimals is
    Spark's rounding (:func:`~..state.aggregate_state.spark_decimal_average`);
    a sum past its type (Spark wraps or returns NULL), an ``AVG`` of
    integers (a double) or an extremum of another type than integers,
    decimals and strings is Spark's to compute.
    """
    if function == "COUNT":
        return rows if values is None else rows - values.null_count
    assert values is not None
    present = pc.drop_null(values)
    if not len(present):
        return None
    if function in ("MIN", "MAX"):
        if not _ordered(present.type):
            raise NotOnDriver(f"{function} of {present.type} is Spark's")
        found = pc.min_max(present)
        return found["min" if function == "MIN" else "max"].as_py()
    total = _exact_sum(present.to_pylist())
    if function == "SUM" and _fits(total, kind):
        return total
    if function == "AVG" and pa.types.is_decimal(kind) and pa.types.is_decimal(present.type):
        average = spark_decimal_average(Decimal(total), len(present), kind.precision, kind.scale)
        if average is not None:
            return average
    raise NotOnDriver(f"{function} into {kind} is Spark's")


def _ordered(kind: pa.DataType) -> bool:
    """Types whose order Arrow and Spark agree on (strings: by their UTF-8 bytes)."""
    return pa.types.is_integer(kind) or pa.types.is_decimal(kind) or pa.types.is_string(kind)


def _exact_sum(values: list[Any]) -> Any:
    with localcontext() as context:
        context.prec = 200
        return sum(values, Decimal(0) if isinstance(values[0], Decimal) else 0)


def _fits(total: Any, kind: pa.DataType) -> bool:
    """Whether a sum is a value of ``kind`` (Spark's sum type) as it is."""
    if pa.types.is_decimal(kind) and isinstance(total, Decimal):
        digits = total.adjusted() + 1 if total else 0
        return digits <= kind.precision - kind.scale
    if pa.types.is_int64(kind) and isinstance(total, int):
        return -(2**63) <= total < 2**63
    return False
