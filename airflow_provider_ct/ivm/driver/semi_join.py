"""Semi- and anti-joins (``EXISTS``, ``NOT EXISTS``, ``IN (SELECT ...)``) maintained on the driver.

``SELECT ... FROM o WHERE EXISTS (SELECT 1 FROM t WHERE t.k = o.k AND p(t))``
keeps the rows of ``o`` whose key is in ``D = {t.k : p(t)}``. Read as one
more input of the delta rules, after the block's own tables:

* a change of ``o`` (or of any table of the block) is filtered by ``D`` as
  it was (``t`` at its old snapshot): for each changed row, the rows of
  ``t`` with its key are fetched by key and ``p`` evaluated on them;
* a change of ``t`` changes ``D`` only at the keys it touches: for those
  keys, ``D`` before and after is read by key at the old and new snapshot;
  a key that enters ``D`` adds the rows of ``o`` with that key (as ``o`` is
  now), one that leaves removes them. ``NOT EXISTS`` swaps the signs.

So a tick costs lookups by key on both sides, never a scan, and nothing is
kept between ticks: the old snapshot is the state. ``NOT IN`` is refused
(a NULL in its subquery makes every row unknown: Spark's). What this
takes: a subquery over one table, no join, no aggregate, tied to the block
by one equality of columns (``EXISTS``) or by its one output column
(``IN``); every other conjunct of it reads that table alone.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from sqlglot import exp

from airflow_provider_ct.core.query import input_name
from airflow_provider_ct.ivm.driver.arrow_eval import ArrowEvaluator, NotOnDriver
from airflow_provider_ct.ivm.driver.driver_join import Fetch, JoinInput, place_column
from airflow_provider_ct.ivm.plan.subqueries import semi_join_query, where_conjuncts


@dataclass(frozen=True)
class SemiJoin:
    """One ``EXISTS``/``NOT EXISTS``/``IN`` conjunct of the block, placed."""

    #: The ``WHERE`` conjunct it is (left out of the block's own condition).
    conjunct: Any
    #: The input the subquery reads, its alias there, and its key column.
    name: str
    alias: str
    inner: str
    #: ``alias.column`` of the block's column the key must equal (lower-cased).
    outer: str
    #: What else the subquery's rows must satisfy (None: nothing).
    predicate: Any
    anti: bool

    def predicate_nodes(self) -> list[Any]:
        return [self.predicate] if self.predicate is not None else []


def semi_joins(
    where: Any,
    catalog_name: str,
    inputs: Sequence[JoinInput],
    columns: Mapping[str, Sequence[str]],
) -> tuple[SemiJoin, ...]:
    """Every top-level conjunct of ``where`` that is a semi/anti-join this module takes.

    :raises NotOnDriver: a subquery conjunct it does not take (the tick then
        runs another way, with the reason logged).
    """
    out = []
    for conjunct in where_conjuncts(where):
        found = semi_join_query(conjunct)
        if found is None:
            if conjunct.find(exp.Subquery, exp.Exists) is not None:
                raise NotOnDriver("a subquery that is not a conjunct EXISTS / IN")
            continue
        query, anti, outer_expr = found
        out.append(_placed(conjunct, query, anti, outer_expr, catalog_name, inputs, columns))
    return tuple(out)


def _placed(
    conjunct: Any,
    query: Any,
    anti: bool,
    outer_expr: Any,
    catalog_name: str,
    inputs: Sequence[JoinInput],
    columns: Mapping[str, Sequence[str]],
) -> SemiJoin:
    table = (query.args.get("from_") or query.args.get("from")).this
    name = input_name(table, catalog_name)
    if name is None:
        raise NotOnDriver(f"a subquery reading the CTE {table.name}")
    alias = table.alias_or_name.lower()
    own = {c.lower() for c in columns[name]}

    def inner(column: Any) -> bool:  # SQL's scoping: the subquery's own table first
        qualifier = column.table.lower()
        return qualifier == alias if qualifier else column.name.lower() in own

    keys: list[tuple[str, str]] = []
    alone: list[Any] = []
    where = query.args.get("where")
    for part in where_conjuncts(where.this) if where is not None else []:
        found = [c for c in part.find_all(exp.Column)]
        if all(inner(c) for c in found):
            alone.append(part)
            continue
        left, right = (part.this, part.expression) if isinstance(part, exp.EQ) else (None, None)
        pair = [c for c in (left, right) if isinstance(c, exp.Column)]
        if len(pair) != 2 or inner(pair[0]) == inner(pair[1]):
            raise NotOnDriver(f"the subquery's {part.sql()} ties it other than by one equality")
        mine, theirs = (pair[0], pair[1]) if inner(pair[0]) else (pair[1], pair[0])
        keys.append((mine.name.lower(), ".".join(place_column(theirs, inputs))))
    if outer_expr is not None:  # x IN (SELECT c FROM t ...)
        selected = query.expressions[0].unalias() if len(query.expressions) == 1 else None
        if keys or not isinstance(selected, exp.Column) or not isinstance(outer_expr, exp.Column):
            raise NotOnDriver("an IN subquery other than column IN (SELECT column ...)")
        keys.append((selected.name.lower(), ".".join(place_column(outer_expr, inputs))))
    if len(keys) != 1:
        raise NotOnDriver(f"a subquery tied by {len(keys)} equalities, not one")
    predicate = exp.and_(*alone, copy=True) if alone else None
    inner_column, outer_column = keys[0]
    return SemiJoin(conjunct, name, alias, inner_column, outer_column, predicate, anti)


#: The Spark types of a semi-join's predicate nodes, by node key.
Types = Mapping[str, pa.DataType]


def present_keys(semi: SemiJoin, fetch: Fetch, side: str, keys: pa.Array, types: Types) -> pa.Array:
    """The values among ``keys`` that the subquery's rows hold on ``side`` (``D``, by key)."""
    keys = pc.unique(pc.drop_null(keys))
    if not len(keys):
        return keys
    rows = fetch(semi.name, side, semi.inner, keys)
    if semi.predicate is not None and rows.num_rows:
        rows = rows.filter(ArrowEvaluator(rows, semi.alias, types).mask(semi.predicate))
    column = _column(rows, semi.inner)
    return pc.unique(pc.drop_null(rows.column(column)))


def filtered(rows: pa.Table, semi: SemiJoin, fetch: Fetch, side: str, types: Types) -> pa.Table:
    """Joined rows (``alias.column``) the semi-join keeps, ``D`` as on ``side``."""
    if not rows.num_rows:
        return rows
    values = rows.column(semi.outer)
    found = present_keys(semi, fetch, side, values, types)
    try:  # the two columns' types may differ (Spark's equality casts them)
        hit = pc.fill_null(pc.is_in(values, value_set=found.cast(values.type)), False)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError) as exc:
        raise NotOnDriver(f"{semi.outer} matched with {semi.name}.{semi.inner}: {exc}") from None
    return rows.filter(pc.invert(hit) if semi.anti else hit)


def flipped(
    semi: SemiJoin,
    change: tuple[pa.Table, pa.Table],
    fetch: Fetch,
    types: Types,
    sides: tuple[str, str],
) -> tuple[pa.Array, pa.Array]:
    """The keys that enter ``D`` and those that leave it with the subquery's change.

    :param change: the inner table's inserted and deleted rows.
    :param sides: the old and the new side's names for ``fetch``.
    """
    touched = [rows.column(_column(rows, semi.inner)) for rows in change if rows.num_rows]
    if not touched:
        empty = pa.array([], type=change[0].schema.field(_column(change[0], semi.inner)).type)
        return empty, empty
    keys = pc.unique(pc.drop_null(pa.chunked_array(touched).combine_chunks()))
    before = present_keys(semi, fetch, sides[0], keys, types)
    after = present_keys(semi, fetch, sides[1], keys, types)
    entering = after.filter(pc.invert(pc.is_in(after, value_set=before)))
    leaving = before.filter(pc.invert(pc.is_in(before, value_set=after)))
    return entering, leaving


def _column(rows: pa.Table, lowered: str) -> str:
    for name in rows.column_names:
        if name.lower() == lowered:
            return name
    raise NotOnDriver(f"the subquery's column {lowered} was not read")
