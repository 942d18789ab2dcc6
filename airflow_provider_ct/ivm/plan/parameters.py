"""Uncorrelated scalar subqueries in ``WHERE`` as parameters: a value of each snapshot.

TPC-H q22 keeps the customers whose balance is above the average balance:
``c_acctbal > (SELECT AVG(c_acctbal) FROM customer WHERE ...)``. The
subquery reads a table that changes on every tick, so as a fixed filter
(:mod:`.subqueries`) it sent every tick in full. But it names no column
of the outer row: it is one value ``p`` for every row, a *parameter* of
the block. Between two snapshots the block changes by

    B(R1, p1) - B(R0, p0) = [B(R1, p1) - B(R1, p0)] + [B(R1, p0) - B(R0, p0)]

The second bracket is the usual delta rules with ``p0`` as a constant. The
first holds only the rows of ``R1`` whose conjunct is true under one value
and not the other (a customer whose balance lies between the two
averages): added under ``p1``, removed under ``p0``. Those *flipped* rows
are found by evaluating the conjunct both ways over the input the conjunct
reads (:mod:`airflow_provider_ct.ivm.driver.parameter_rows`), and are few
when the value moves little, which an aggregate over many rows does.

Told from the SQL here (the shape); the tick evaluates the values at both
snapshots and confirms the subquery is uncorrelated (Spark analyzes it
alone), and on the driver only (:mod:`airflow_provider_ct.spark.ivm.parameters`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sqlglot import exp

from airflow_provider_ct.core.query import (
    input_name,
    nondeterministic_calls,
)
from airflow_provider_ct.ivm.plan.subqueries import where_conjuncts

#: The name a parameter's place takes in the driver's tree (``__ct_param0``...).
PLACEHOLDER = "__ct_param"


def parameter_query(conjunct: Any) -> Any | None:
    """The scalar subquery (a ``SELECT``) a conjunct compares the row with, else None.

    The conjunct holds exactly one subquery, a scalar one (not under ``IN``
    or ``EXISTS``) of one output, without window or nondeterministic calls,
    whose qualified columns all name its own tables (an outer alias would
    make it correlated; an unqualified outer column is found when Spark
    analyzes it alone, and the tick then runs as it did before).
    """
    found = list(conjunct.find_all(exp.Subquery, exp.Exists))
    nested_in = [n for n in conjunct.find_all(exp.In) if n.args.get("query") is not None]
    if len(found) != 1 or nested_in or not isinstance(found[0], exp.Subquery):
        return None
    query = found[0].this
    if not isinstance(query, exp.Select) or len(query.expressions) != 1:
        return None
    if query.find(exp.Window, exp.Subquery, exp.Exists) or nondeterministic_calls(query):
        return None
    own = {t.alias_or_name.lower() for t in query.find_all(exp.Table)}
    if any(c.table and c.table.lower() not in own for c in query.find_all(exp.Column)):
        return None
    if _may_tie(query, own):
        return None
    return query


def _may_tie(query: Any, own: set[str]) -> bool:
    """Whether the subquery's ``WHERE`` equals two columns not both qualified as its own.

    TPC-H q17 writes its correlation bare (``l_partkey = p_partkey``): told
    from the SQL alone, such an equality may tie the subquery to the outer
    row (the keyed rule's shape, :mod:`.keyed`), so it is not a parameter.
    """
    where = query.args.get("where")
    for conjunct in where_conjuncts(where.this) if where is not None else []:
        sides = (conjunct.this, conjunct.expression) if isinstance(conjunct, exp.EQ) else ()
        columns = [s for s in sides if isinstance(s, exp.Column)]
        if len(columns) == 2 and not all(c.table and c.table.lower() in own for c in columns):
            return True
    return False


@dataclass(frozen=True)
class AggregateShape:
    """A parameter of one aggregate over one table: what the driver computes itself."""

    #: ``SUM``, ``COUNT``, ``AVG``, ``MIN`` or ``MAX``.
    function: str
    #: The aggregated expression (None: ``COUNT(*)``) and the ``WHERE`` (None: none).
    argument: Any
    where: Any
    table: Any
    alias: str


#: sqlglot's aggregate nodes the driver computes, by name.
_AGGREGATES: dict[type, str] = {
    exp.Sum: "SUM",
    exp.Count: "COUNT",
    exp.Avg: "AVG",
    exp.Min: "MIN",
    exp.Max: "MAX",
}


def aggregate_shape(query: Any) -> AggregateShape | None:
    """``SELECT f(x) FROM t [alias] [WHERE c]`` (one bare aggregate, one table), else None."""
    if query.args.get("joins") or any(
        query.args.get(a) for a in ("group", "having", "distinct", "limit", "offset", "qualify")
    ):
        return None
    from_ = query.args.get("from_") or query.args.get("from")
    table = from_.this if from_ is not None else None
    call = query.expressions[0].unalias() if len(query.expressions) == 1 else None
    function = _AGGREGATES.get(type(call)) if call is not None else None
    if call is None or function is None or not isinstance(table, exp.Table) or not table.name:
        return None
    argument = None if isinstance(call.this, exp.Star) else call.this
    if argument is not None and argument.find(exp.AggFunc, exp.Distinct):
        return None
    where = query.args.get("where")
    return AggregateShape(
        function, argument, where.this if where is not None else None, table, table.alias_or_name
    )


def parameter_conjuncts(select: Any) -> list[Any]:
    """The top-level conjuncts of ``select``'s ``WHERE`` that compare with a parameter."""
    where = select.args.get("where")
    if where is None:
        return []
    return [c for c in where_conjuncts(where.this) if parameter_query(c) is not None]


def parameter_tables(select: Any, catalog_name: str, fixed: tuple[str, ...]) -> tuple[str, ...]:
    """The tables of ``fixed`` read by parameters' subqueries and by no other subquery.

    A table the block itself reads as well stays a parameter table: its
    changes there are the delta rules', its changes to the value are the
    flipped rows'.
    """
    if not fixed:
        return ()
    params = parameter_conjuncts(select)
    inside: set[str] = set()
    for conjunct in params:
        inside.update(_names(conjunct, catalog_name))
    kinds = (exp.Subquery, exp.Exists, exp.In)
    theirs = {id(node) for conjunct in params for node in conjunct.find_all(*kinds)}
    elsewhere: set[str] = set()
    for node in select.find_all(*kinds):
        if isinstance(node, exp.Subquery) and isinstance(node.parent, exp.From | exp.Join):
            continue
        if id(node) not in theirs:
            elsewhere.update(_names(node, catalog_name))
    return tuple(sorted((inside - elsewhere) & set(fixed)))


def _names(node: Any, catalog_name: str) -> set[str]:
    found = {input_name(t, catalog_name) for t in node.find_all(exp.Table)}
    return {name for name in found if name is not None}
