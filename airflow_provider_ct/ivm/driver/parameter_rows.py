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
from decimal import Decimal
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from sqlglot import exp

from airflow_provider_ct.ivm.driver.arrow_eval import ArrowEvaluator, NotOnDriver, node_key
from airflow_provider_ct.ivm.driver.driver_join import NEW, OLD
from airflow_provider_ct.ivm.driver.keyed_rows import SnapshotRows


@dataclass(frozen=True)
class Parameter:
    """One parameter's values on both sides, as Python values of its Spark type."""

    #: The placeholder column's name in the driver's tree.
    name: str
    old: Any
    new: Any
    #: The Arrow type of the subquery's Spark type.
    arrow_type: pa.DataType

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
