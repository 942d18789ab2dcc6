"""Grouping keys a change can be traced to without a join: equal columns and days.

The planner (:mod:`.planner`) asks three questions of a grouped block's keys,
answered here from the SQL alone (sqlglot):

* where each key is in the select list (:func:`output_key_positions`): the
  target's rows of a group are found by those columns;
* which input columns equal each key on every row the block keeps (the
  equality classes of inner-join ``ON`` and ``WHERE`` conjuncts): the
  affected keys can then be read from the inputs' changes, no join;
* which keys are the day of an input column (``CAST(ts AS DATE)``,
  ``TO_DATE(ts)``, ``DATE(ts)``): the affected days then bound that
  column's reads, which Iceberg prunes files by.

Kept apart from the planner, which decides the strategy; these only
describe keys.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from sqlglot import exp

from airflow_provider_ct.ivm.plan.refusals import NotIncremental


@dataclass(frozen=True)
class KeyColumns:
    """Input columns equal to one grouping key on every row the block keeps.

    Found through the block's column equalities (inner-join ``ON`` and
    ``WHERE`` conjuncts, ``o.cust = c.id``). A changed row of an input that
    holds such a column can only move groups whose key is that column's
    value, so the affected keys come from the inputs' changes alone, with no
    join (see :mod:`airflow_provider_ct.spark.ivm.incremental`).
    """

    #: Index of the key in :attr:`~.planner.Plan.key_sql`.
    index: int
    #: ``(input, alias, column)`` of every column in the key's equality class.
    members: tuple[tuple[str, str, str], ...]

    def columns_of(self, name: str) -> list[str]:
        """``alias.column`` of the members that belong to input ``name``."""
        return [f"{a}.{c}" for n, a, c in self.members if n == name]


@dataclass(frozen=True)
class KeyRange:
    """A grouping key that is the day of one input column (``CAST(t.ts AS DATE)``).

    Rows of day ``d`` are exactly the rows whose column lies in ``[d, d + 1)``
    (midnight in the session's time zone, as the cast computes it), so the
    affected days bound the column: a predicate Iceberg prunes files with,
    which the cast itself hides from it.
    """

    #: Index of the key in :attr:`~.planner.Plan.key_sql`.
    index: int
    input: str
    alias: str
    column: str


def key_ranges(aliases: dict[str, str], keys: tuple[str, ...]) -> tuple[KeyRange, ...]:
    """The grouping keys that are the day (a ``DATE`` cast) of an input column.

    :param aliases: lower-cased alias -> input name, for every table of the block.
    """
    classes = _ColumnClasses(aliases)
    out = []
    for index, key in enumerate(keys):
        column = _day_of(exp.maybe_parse(key, dialect="spark"))
        ref = classes.ref(column) if column is not None else None
        if ref is not None:
            out.append(KeyRange(index, aliases[ref[0]], ref[0], ref[1]))
    return tuple(out)


def _day_of(node: Any) -> Any:
    """The column ``node`` takes the day of (``CAST(c AS DATE)``, ``TO_DATE(c)``), if any."""
    while isinstance(node, exp.Paren):
        node = node.this
    day_cast = isinstance(node, exp.Cast) and node.to.is_type(exp.DataType.Type.DATE)
    to_date = isinstance(node, exp.TsOrDsToDate) and node.args.get("format") is None
    if not (day_cast or to_date):
        return None
    inner = node.this
    return inner if isinstance(inner, exp.Column) and inner.name else None


def affected_keys_steps(
    keys: tuple[str, ...], key_columns: tuple[KeyColumns, ...], ranges: tuple[KeyRange, ...]
) -> list[str]:
    """The plan's explanation of how a grouped tick finds its affected keys."""
    lines = [
        f"affected days of {keys[r.index]}: reads of {r.input} restricted to those days of "
        f"{r.alias}.{r.column} (pruned by partitions and column statistics)"
        for r in ranges
    ]
    if ranges:
        return [
            *lines,
            "affected keys: the grouping keys of the changed rows below the aggregation",
        ]
    for found in key_columns:
        columns = ", ".join(f"{a}.{c}" for _, a, c in found.members)
        lines.append(
            f"affected keys: {keys[found.index]} read from the changed rows of {columns} "
            "where every changed input has one of them (no join)"
        )
    lines.append(
        f"{'otherwise a' if lines else 'A'}ffected keys: the grouping keys of the changed rows "
        "below the aggregation"
    )
    return lines


def key_columns(
    select: Any, aliases: dict[str, str], keys: tuple[str, ...]
) -> tuple[KeyColumns, ...]:
    """Each grouping key that is a column, with every input column equal to it.

    Only for inner joins (the caller checks): a ``LEFT JOIN`` row may carry a
    NULL key while the preserved side's column holds a value, so its
    equalities prove nothing.

    :param aliases: lower-cased alias -> input name, for every table of the block.
    """
    classes = _ColumnClasses(aliases)
    conjuncts: list[Any] = []
    where = select.args.get("where")
    if where is not None:
        conjuncts.extend(_conjuncts(where.this))
    for join in select.args.get("joins") or []:
        if join.args.get("on") is not None:
            conjuncts.extend(_conjuncts(join.args["on"]))
    for c in conjuncts:
        if isinstance(c, exp.EQ):
            classes.union(c.this, c.expression)
    out = []
    for index, key in enumerate(keys):
        members = classes.members(exp.maybe_parse(key, dialect="spark"))
        if members:
            out.append(KeyColumns(index, members))
    return tuple(out)


def _conjuncts(node: Any) -> list[Any]:
    while isinstance(node, exp.Paren):
        node = node.this
    return list(node.flatten()) if isinstance(node, exp.And) else [node]


class _ColumnClasses:
    """Union-find over ``(alias, column)``: columns proven equal on every kept row."""

    def __init__(self, aliases: dict[str, str]) -> None:
        self.aliases = aliases
        self.parent: dict[tuple[str, str], tuple[str, str]] = {}

    def ref(self, node: Any) -> tuple[str, str] | None:
        if not isinstance(node, exp.Column) or not node.name:
            return None
        table = node.table.lower()
        if not table and len(self.aliases) == 1:
            table = next(iter(self.aliases))
        return (table, node.name.lower()) if table in self.aliases else None

    def find(self, ref: tuple[str, str]) -> tuple[str, str]:
        while self.parent.get(ref, ref) != ref:
            ref = self.parent[ref]
        return ref

    def union(self, left: Any, right: Any) -> None:
        a, b = self.ref(left), self.ref(right)
        if a is not None and b is not None:
            self.parent.setdefault(a, a)
            self.parent.setdefault(b, b)
            self.parent[self.find(a)] = self.find(b)

    def members(self, node: Any) -> tuple[tuple[str, str, str], ...]:
        ref = self.ref(node)
        if ref is None:
            return ()
        root = self.find(ref)
        refs = {r for r in self.parent if self.find(r) == root} | {ref}
        return tuple(sorted((self.aliases[a], a, c) for a, c in refs))


def output_key_positions(select: Any, items: list[Any]) -> tuple[tuple[int, ...], tuple[str, ...]]:
    """Positions in the select list of every grouping key (each must be an output column)."""
    by_sql = {i.unalias().sql(dialect="spark"): n for n, i in reversed(list(enumerate(items)))}
    by_alias = {i.alias.lower(): n for n, i in enumerate(items) if i.alias}
    positions: list[int] = []
    keys: list[str] = []
    for key in select.args["group"].expressions:
        if isinstance(key, exp.Literal) and key.is_int:
            n = int(key.name) - 1
            if not 0 <= n < len(items):
                raise NotIncremental(f"GROUP BY {key.name} names no select item")
            positions.append(n)
            keys.append(items[n].unalias().sql(dialect="spark"))
            continue
        text = key.sql(dialect="spark")
        n_or_none = by_sql.get(text)
        if n_or_none is None and isinstance(key, exp.Column) and not key.table:
            n_or_none = by_alias.get(key.name.lower())
            if n_or_none is not None:
                text = items[n_or_none].unalias().sql(dialect="spark")
        if n_or_none is None:
            raise NotIncremental(
                f"grouping key {text} is not an output column, so the target's rows of a "
                "group cannot be found"
            )
        positions.append(n_or_none)
        keys.append(text)
    if not positions:
        raise NotIncremental("GROUP BY without keys is recomputed in full")
    return tuple(positions), tuple(keys)


def single_reads(
    columns: tuple[KeyColumns, ...], ranges: tuple[KeyRange, ...], repeated: frozenset[str]
) -> tuple[tuple[KeyColumns, ...], tuple[KeyRange, ...]]:
    """The key columns and day ranges without those of an input read more than once.

    A changed row of ``nation`` in ``nation n1, nation n2`` moves the groups
    of ``n1.n_name`` as ``n1`` and any group as ``n2``: a key column of one
    read does not bound what a change of that table affects, so those
    inputs' affected keys come from the rows below the aggregation instead.
    """
    kept = []
    for found in columns:
        members = tuple(m for m in found.members if m[0] not in repeated)
        if members:
            kept.append(replace(found, members=members))
    return tuple(kept), tuple(r for r in ranges if r.input not in repeated)
