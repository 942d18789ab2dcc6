"""Derived columns of in-place aggregates: expressions over kept aggregates, by Spark.

A column such as TPC-H q14's ``100.00 * SUM(...) / SUM(...)`` is kept as
hidden operands (:class:`~airflow_provider_ct.ivm.plan.in_place.Derived`);
its value per affected group is Spark's own, from the operands' values,
so that its decimal rules, rounding and NULLs are Spark's. Split from
:mod:`.in_place`, which calls it for the affected groups' rows.
"""

from __future__ import annotations

import datetime
import decimal
from typing import TYPE_CHECKING, Any

from airflow_provider_ct.exceptions import NotInPlaceError
from airflow_provider_ct.ivm.plan.in_place import Derived, operand
from airflow_provider_ct.ivm.plan.rewrites import bind_tables
from airflow_provider_ct.ivm.state.aggregate_state import (
    GroupState,
    moment_overflow,
    operand_values,
)
from airflow_provider_ct.spark.ivm.analysis_cache import analyzed

if TYPE_CHECKING:
    from airflow_provider_ct.spark.ivm.in_place import Aggregation


def derived_values(agg: Aggregation, groups: list[GroupState]) -> dict[int, list[Any]] | None:
    """Each derived column's value per group, computed by Spark from the aggregates' values.

    One ``VALUES`` relation of the groups' aggregate values, each a literal
    cast to its aggregate's own Spark type, and a projection of the derived
    expressions over it: Spark's optimizer folds that on the driver (a local
    relation: no job, unlike a DataFrame made from Python rows, which is an
    RDD), with its own decimal rules, rounding and NULLs. A constant column
    is evaluated once, by the same projection over no operand.
    """
    in_place = agg.in_place
    if not in_place.derived:
        return None
    constants = [d for d in in_place.derived if d.constant]
    values = dict(zip((d.position for d in constants), _constants(agg, constants), strict=True))
    out = {position: [value] * len(groups) for position, value in values.items()}
    computed = [d for d in in_place.derived if not d.constant]
    overflow = moment_overflow(groups, in_place)
    if overflow is not None:
        raise NotInPlaceError(overflow)
    if computed and groups:
        rows = _projected(agg, computed, groups)
        out.update({d.position: [r[j + 1] for r in rows] for j, d in enumerate(computed)})
    return {d.position: out.get(d.position, []) for d in in_place.derived}


def _constants(agg: Aggregation, constants: list[Derived]) -> tuple[Any, ...]:
    """The constant columns' values (one folded projection, kept with the view's analyses)."""
    if not constants:
        return ()
    items = ", ".join(f"{d.sql} AS `__ct_d{j}`" for j, d in enumerate(constants))
    return analyzed(
        agg.analysis_key, "constants", lambda: tuple(agg.spark.sql(f"SELECT {items}").collect()[0])
    )


def _projected(agg: Aggregation, computed: list[Derived], groups: list[GroupState]) -> list[Any]:
    """Spark's rows ``(index, value...)`` of the ``computed`` columns over the groups."""
    from pyspark.sql.pandas.types import to_arrow_type

    fields = analyzed(agg.analysis_key, "operands", lambda: _operand_fields(agg))
    arrow = [to_arrow_type(f.dataType) for f in fields]
    types = [f.dataType.simpleString() for f in fields]
    rows_sql = ", ".join(
        "("
        + ", ".join([str(i), *(_typed_literal(v, t) for v, t in zip(row, types, strict=True))])
        + ")"
        for i, row in enumerate(operand_values(groups, agg.in_place, arrow))
    )
    names = ", ".join(["__ct_i", *(operand(i) for i in range(len(fields)))])
    projected = ", ".join(f"{d.sql} AS `__ct_d{j}`" for j, d in enumerate(computed))
    sql = f"SELECT __ct_i, {projected} FROM VALUES {rows_sql} AS t({names})"
    return sorted(agg.spark.sql(sql).collect(), key=lambda r: r[0])


def _typed_literal(value: Any, spark_type: str) -> str:
    """``value`` as Spark SQL of exactly ``spark_type`` (decimals as text: no float on the way)."""
    if value is None:
        return f"CAST(NULL AS {spark_type})"
    if isinstance(value, float):
        text = repr(value)  # the shortest text that reads back as the same double
    elif isinstance(value, decimal.Decimal):
        text = format(value, "f")  # never an exponent
    elif isinstance(value, bool):
        text = "true" if value else "false"
    elif isinstance(value, str):  # MIN/MAX of a string: Spark's escapes in a literal
        text = value.replace("\\", "\\\\").replace("'", "\\'")
    elif isinstance(value, datetime.datetime):  # an aware one carries its offset
        text = value.isoformat(sep=" ")
    elif isinstance(value, datetime.date):
        text = value.isoformat()
    else:
        text = str(int(value))
    return f"CAST('{text}' AS {spark_type})"


def _operand_fields(agg: Aggregation) -> list[Any]:
    """The Spark field of every aggregate call of the view (analysis only: no job)."""
    from sqlglot import exp

    tree = agg.plan.blocks[0].tree.copy()
    for arg in ("having", "order", "limit", "distinct"):
        tree.set(arg, None)
    calls = [
        exp.alias_(exp.maybe_parse(agg.in_place.call_sql(i), dialect="spark"), operand(i))
        for i in range(len(agg.in_place.aggregates))
    ]
    tree.set("expressions", calls)
    bound = bind_tables(tree, agg.new_views, agg.catalog_name).sql(dialect="spark")
    return list(agg.spark.sql(bound).schema.fields)
