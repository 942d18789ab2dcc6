"""The SQL rewrites an incremental tick applies to the blocks the planner found.

The planner (:mod:`.planner`) decides *whether* and *how* a query is
maintained incrementally; these functions produce the SQL that does it:

* :func:`bind_tables` points a block's inputs at the temp views of one
  choice of bindings (``new``, ``old``, ``plus``, ``minus``: the delta rules);
* :func:`key_select` reads only a ``group`` block's grouping keys, to find the
  groups a change affects;
* :func:`rows_select` reads an ``aggregate`` block's rows below the
  aggregation: its grouping keys and its aggregates' arguments;
* :func:`restrict_to_keys` and :func:`restrict_columns_to_keys` keep only the
  affected groups' rows, through a keys view or, for a few keys of one
  simple type, as literals (:class:`InlineKeys`).

Kept apart from the planner because they run in the Spark job on every
tick, over trees the planner already validated, and change for other
reasons (what Spark and Iceberg prune well) than the strategy does.
"""

from __future__ import annotations

import datetime as _dt
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from sqlglot import exp

from airflow_provider_ct.core.query import input_name
from airflow_provider_ct.ivm.plan.reads import occurrence_key, subquery_key
from airflow_provider_ct.ivm.plan.refusals import NotIncremental
from airflow_provider_ct.ivm.plan.select_shape import block_tables

#: Temp views a tick registers (``__ct_keyed_keys_0``...): never an input to bind.
TICK_VIEW_PREFIX = "__ct_"


def bind_tables(tree: Any, views: Mapping[str, str], catalog_name: str) -> Any:
    """A copy of ``tree`` (a block) with each read of an input replaced by the view bound to it.

    :param views: by :func:`~.reads.occurrence_key`, and a subquery's reads by
        :func:`~.reads.subquery_key`; a read without a key of its own gets the
        view of the input's name, so a mapping by input names binds every
        read alike.
    """
    copy = tree.copy()
    seen: dict[str, int] = {}
    for table, in_subquery in _tables_in_order(copy):
        name = input_name(table, catalog_name)
        if name is None:
            continue  # a CTE, or a view of the tick's own (a keyed block's keys)
        index = seen.get(name, 0)
        seen[name] = index + 1
        view = views.get(subquery_key(name)) if in_subquery else None
        view = view or views.get(occurrence_key(name, index)) or views[name]
        alias = table.args.get("alias") or exp.TableAlias(this=exp.to_identifier(table.name))
        table.replace(exp.Table(this=exp.to_identifier(view), alias=alias))
    return copy


def _tables_in_order(tree: Any) -> list[tuple[Any, bool]]:
    """The named tables of ``tree``, each with whether a subquery reads it: a block's in
    ``FROM``-then-joins order, as the planner listed its inputs (so the n-th read of a
    table is the same read for both), then those of its subqueries.

    Without a key of its own, a subquery's table is bound like a further
    read of it: exact while it is unchanged, as whichever binding it gets
    (``new`` or ``old``) reads the same rows; a tick that changes it binds
    it by :func:`~.reads.subquery_key` (:mod:`.subquery_changes`).
    """
    everything = [t for t in tree.find_all(exp.Table) if t.name]
    if isinstance(tree, exp.Select) and (tree.args.get("from_") or tree.args.get("from")):
        try:
            first = [t for t in block_tables(tree) if t.name]
        except NotIncremental:
            return [(t, False) for t in everything]
        rest = [t for t in everything if not any(t is f for f in first)]
        return [*((t, False) for t in first), *((t, True) for t in rest)]
    return [(t, False) for t in everything]


def key_select(tree: Any, key_sql: tuple[str, ...]) -> Any:
    """A block's FROM/WHERE with the grouping keys as its only (distinct) columns."""
    tree = tree.copy()
    for arg in ("group", "having", "order", "limit", "distinct"):
        tree.set(arg, None)
    keys = [
        exp.alias_(exp.maybe_parse(k, dialect="spark"), f"__ct_k{i}") for i, k in enumerate(key_sql)
    ]
    tree.set("expressions", keys)
    tree.set("distinct", exp.Distinct())
    return tree


def rows_select(tree: Any, key_sql: tuple[str, ...], arguments: tuple[str, ...]) -> Any:
    """A block's FROM/WHERE with its keys (``__ct_k<i>``) and aggregate arguments
    (``__ct_a<j>``) as its columns, one row per row below the aggregation."""
    tree = tree.copy()
    for arg in ("group", "having", "order", "limit", "distinct"):
        tree.set(arg, None)
    columns = [
        *(
            exp.alias_(exp.maybe_parse(k, dialect="spark"), f"__ct_k{i}")
            for i, k in enumerate(key_sql)
        ),
        *(
            exp.alias_(exp.maybe_parse(a, dialect="spark"), f"__ct_a{j}")
            for j, a in enumerate(arguments)
        ),
    ]
    tree.set("expressions", columns or [exp.alias_(exp.Literal.number(1), "__ct_one")])
    return tree


@dataclass(frozen=True)
class InlineKeys:
    """A few values of one key, written into the query as literals.

    ``IN (1, 2, 3)`` needs no job to evaluate a subquery, and Iceberg's scan
    planning prunes files by their column statistics, which a subquery
    hides from it. Values are ints, strings, booleans or dates.
    """

    values: tuple[Any, ...]
    #: A NULL key is a group of its own (matched with ``IS NULL``).
    has_null: bool = False

    def literals(self) -> list[Any]:
        return [_literal(v) for v in self.values]


def _literal(value: Any) -> Any:
    if isinstance(value, _dt.datetime):  # a datetime is a date too: refuse it first
        raise TypeError(f"no inline literal for {value!r}")
    if isinstance(value, _dt.date):
        return exp.cast(exp.Literal.string(value.isoformat()), "DATE")
    if isinstance(value, bool | int | str):
        return exp.convert(value)
    raise TypeError(f"no inline literal for {value!r}")


def _in_keys(ref: Any, keys: InlineKeys, null_safe: bool) -> Any:
    """``ref IN (...)``, ``OR ref IS NULL`` for a NULL key when ``null_safe``; FALSE if none."""
    parts: list[Any] = []
    if keys.values:
        parts.append(exp.In(this=ref.copy(), expressions=keys.literals()))
    if null_safe and keys.has_null:
        parts.append(exp.Is(this=ref.copy(), expression=exp.Null()))
    if not parts:
        return exp.false()
    return exp.paren(exp.or_(*parts)) if len(parts) > 1 else parts[0]


def restrict_to_keys(
    tree: Any, key_sql: tuple[str, ...], keys_view: str, inline: InlineKeys | None = None
) -> Any:
    """A block keeping only rows whose grouping keys are in ``keys_view`` (``__ct_k<i>``).

    ``<=>`` so that a NULL key is a key like any other (a group of its own).
    The filter sits below the aggregation, so a kept group is whole. With
    ``inline`` (one key only) the keys are literals instead of the view.
    """
    tree = tree.copy()
    if inline is not None:
        if len(key_sql) != 1:
            raise ValueError("inline keys restrict a single key")
        ref = exp.paren(exp.maybe_parse(key_sql[0], dialect="spark"))
        condition = _in_keys(ref, inline, null_safe=True)
    else:
        matches = [f"__ct_keys.__ct_k{i} <=> ({k})" for i, k in enumerate(key_sql)]
        condition = exp.maybe_parse(
            f"EXISTS (SELECT 1 FROM {keys_view} AS __ct_keys WHERE {' AND '.join(matches)})",
            dialect="spark",
        )
    return tree.where(condition, append=tree.args.get("where") is not None, copy=False)


def restrict_columns_to_keys(
    tree: Any, columns: list[str], keys_view: str, inline: InlineKeys | None = None
) -> Any:
    """``tree`` keeping only rows whose ``columns`` are each in ``keys_view.__ct_k0``.

    Redundant with :func:`restrict_to_keys` on a key's equality class, but it
    lets Spark filter every input before the join, not the join's output.
    Plain ``IN``: these columns sit in an equality, which no NULL passes.
    With ``inline``, the keys are literals instead of the view.
    """
    tree = tree.copy()
    keys: Any = exp.maybe_parse(f"SELECT __ct_k0 FROM {keys_view}", dialect="spark")
    for column in columns:
        alias, name = column.split(".", 1)
        ref = exp.column(name, table=alias, quoted=True)
        if inline is not None:
            condition = _in_keys(ref, inline, null_safe=False)
        else:
            condition = exp.In(this=ref, query=exp.Subquery(this=keys.copy()))
        tree = tree.where(condition, append=True, copy=False)
    return tree


#: Spark types a day range can bound, and the literal type that bounds them.
DAY_BOUND_TYPES = {"date": "DATE", "timestamp": "TIMESTAMP", "timestamp_ntz": "TIMESTAMP_NTZ"}


def day_ranges(days: tuple[Any, ...]) -> list[tuple[_dt.date, _dt.date]]:
    """``days`` as ``[start, end)`` ranges, consecutive days merged (fewer, wider predicates)."""
    ranges: list[tuple[_dt.date, _dt.date]] = []
    one = _dt.timedelta(days=1)
    for day in sorted(set(days)):
        if ranges and ranges[-1][1] == day:
            ranges[-1] = (ranges[-1][0], day + one)
        else:
            ranges.append((day, day + one))
    return ranges


def restrict_to_days(tree: Any, column: str, column_type: str, days: InlineKeys) -> Any:
    """``tree`` keeping only rows whose ``column`` lies in one of ``days`` (or is NULL if one is).

    Implied by the block's own restriction to the affected days of
    ``CAST(column AS DATE)`` (a :class:`~.group_keys.KeyRange`), so it changes no
    result; it is there because a range of the bare column is what Spark
    hands to Iceberg, which then skips every file of other days by its
    partition values and column statistics. Day starts are midnights in the
    session's time zone, as the cast computes them.

    :param column: ``alias.column``, as the block names it.
    :param column_type: the column's Spark type (a key of :data:`DAY_BOUND_TYPES`).
    """
    literal_type = DAY_BOUND_TYPES[column_type]
    alias, name = column.split(".", 1)
    ref = exp.column(name, table=alias, quoted=True)

    def bound(day: _dt.date) -> Any:
        text = day.isoformat() if literal_type == "DATE" else f"{day.isoformat()} 00:00:00"
        return exp.cast(exp.Literal.string(text), literal_type)

    parts: list[Any] = [
        exp.and_(ref.copy() >= bound(start), ref.copy() < bound(end))
        for start, end in day_ranges(days.values)
    ]
    if days.has_null:
        parts.append(exp.Is(this=ref.copy(), expression=exp.Null()))
    condition = exp.paren(exp.or_(*parts)) if parts else exp.false()
    return tree.copy().where(condition, append=tree.args.get("where") is not None, copy=False)
