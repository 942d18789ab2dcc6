"""The rows a change adds and removes below an aggregation over inner-joined inputs, on the driver.

The delta rules of a join (the telescoping sum the Spark path evaluates in
``spark/ivm/incremental.terms``): for each changed input ``i``, in the block's
order, its change (inserted rows with sign +1, deleted rows with -1) joined
with the inputs before it at their new snapshot and the inputs after it at
their old one. Summed, the terms are exactly the change of the join.

Here each term starts from the change's rows and joins one input at a
time, always one the rows so far are tied to by an equality of the
``WHERE`` or an ``ON``: of that input only the rows whose join column holds
a value the rows so far carry are fetched
(:class:`~.snapshot_files.SnapshotRows`), so a term costs its matches, not
a scan. The block's whole condition is then evaluated on the joined rows by
:class:`~.arrow_eval.ArrowEvaluator` (the equalities again, harmlessly).

What this takes: inner and comma joins of tables, each tied to the others
through equalities of columns, or crossed with a small table read whole
where the caller allows (:data:`Whole`); a table read twice is two inputs
here, told apart by their aliases (each read's change is a term of its own,
fetched rows are shared by table and snapshot). Anything else (an outer
join, a cross join the caller does not allow, join columns of types Arrow
would not compare as Spark does) raises :class:`~.arrow_eval.NotOnDriver`
and the tick uses Spark's jobs.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from sqlglot import exp

from airflow_provider_ct.core.query import input_name
from airflow_provider_ct.ivm.driver.arrow_eval import ArrowEvaluator, NotOnDriver

#: A fetch of an input's rows: (input, ``"new"`` or ``"old"``, column, values) -> rows.
Fetch = Callable[[str, str, str, pa.Array], pa.Table]
NEW, OLD = "new", "old"
#: How many rows a fetch would match (same arguments as :data:`Fetch`); None: unknown.
Count = Callable[[str, str, str, pa.Array], int | None]
#: Rows of one table (columns ``alias.column``) -> the rows to join: (alias, rows) -> rows.
Prefilter = Callable[[str, pa.Table], pa.Table]
#: All of an input's rows as of a side (``"new"``/``"old"``), for a table no equality
#: ties to the others, to be crossed with so many rows (input, side, rows) -> rows; it
#: raises :class:`NotOnDriver` when the product would pass its limit.
Whole = Callable[[str, str, int], pa.Table]
#: The hidden column a cross join pairs every row on.
_CROSS = "__ct_cross"


@dataclass(frozen=True)
class JoinInput:
    """One table of the block: its alias, the input it reads and the columns the block uses."""

    alias: str
    name: str
    columns: tuple[str, ...]


@dataclass(frozen=True)
class JoinShape:
    """The block's tables in order, the column equalities tying them, and its whole condition."""

    inputs: tuple[JoinInput, ...]
    #: ((alias, column), (alias, column)) with two different aliases, lower-cased.
    equalities: tuple[tuple[tuple[str, str], tuple[str, str]], ...]
    #: ``WHERE`` and every ``ON``, as one sqlglot condition (None: none).
    condition: Any


def join_shape(
    tree: Any,
    catalog_name: str,
    columns: Mapping[str, Sequence[str]],
    exclude: Sequence[Any] = (),
) -> JoinShape:
    """The join of a block, or :class:`NotOnDriver` for a shape this module does not take.

    :param columns: input name -> the columns of it the block reads.
    :param exclude: conjuncts of ``WHERE`` left out of the condition (the
        semi-joins, which :mod:`.semi_join` applies).
    """
    from_ = tree.args.get("from_") or tree.args.get("from")
    joins = list(tree.args.get("joins") or [])
    tables = [from_.this if from_ is not None else None, *(j.this for j in joins)]
    if any(not isinstance(t, exp.Table) for t in tables):
        raise NotOnDriver("a FROM that is not tables")
    conditions = []
    if tree.args.get("where") is not None:
        kept = [c for c in _conjuncts(tree.args["where"].this) if not any(c is e for e in exclude)]
        conditions = [exp.and_(*kept)] if kept else []
    conditions.extend(inner_conditions(joins))
    inputs = joined_tables(tables, catalog_name, columns)
    condition = exp.and_(*conditions) if conditions else None
    equalities = _equalities(condition, inputs) if condition is not None else ()
    return JoinShape(tuple(inputs), equalities, condition)


def inner_conditions(joins: Sequence[Any], after: str = "") -> list[Any]:
    """The ``ON`` of each of ``joins``, all inner or comma joins; else :class:`NotOnDriver`."""
    out = []
    for join in joins:
        kind = (join.args.get("kind") or "").upper()
        if join.args.get("side") or kind not in ("", "INNER", "CROSS") or join.args.get("using"):
            raise NotOnDriver(f"a {join.args.get('side') or kind or 'USING'} join{after}")
        if join.args.get("on") is not None:
            out.append(join.args["on"])
    return out


def joined_tables(
    tables: Sequence[Any], catalog_name: str, columns: Mapping[str, Sequence[str]]
) -> list[JoinInput]:
    """Each table node as a :class:`JoinInput`; :class:`NotOnDriver` for a CTE's name."""
    inputs = []
    for table in tables:
        name = input_name(table, catalog_name)
        if name is None:
            raise NotOnDriver(f"a join reading the CTE {table.name}")
        inputs.append(JoinInput(table.alias_or_name.lower(), name, tuple(columns[name])))
    return inputs


def tables_shape(
    tables: Sequence[tuple[str, str]], condition: Any, columns: Mapping[str, Sequence[str]]
) -> JoinShape:
    """The join of ``tables`` (``(alias, input)``, in order) under ``condition``: a keyed
    subquery's own tables, whose columns ``condition`` names qualified."""
    inputs = tuple(JoinInput(alias, name, tuple(columns[name])) for alias, name in tables)
    equalities = _equalities(condition, inputs) if condition is not None else ()
    return JoinShape(inputs, equalities, condition)


def _equalities(
    condition: Any, inputs: Sequence[JoinInput]
) -> tuple[tuple[tuple[str, str], tuple[str, str]], ...]:
    """The conjuncts ``a.x = b.y`` of ``condition`` joining two different tables.

    An ``OR`` whose every branch holds the same equality implies it (TPC-H
    q19 repeats ``p_partkey = l_partkey`` in each branch): it joins too.
    The whole condition is still evaluated on the joined rows.
    """
    out: list[tuple[tuple[str, str], tuple[str, str]]] = []
    for conjunct in _conjuncts(condition):
        for pair in _implied(conjunct, inputs):
            if pair not in out:
                out.append(pair)
    return tuple(out)


def _implied(
    conjunct: Any, inputs: Sequence[JoinInput]
) -> list[tuple[tuple[str, str], tuple[str, str]]]:
    """The join equalities one conjunct implies: itself, or those common to an OR's branches."""
    if isinstance(conjunct, exp.Or):
        common: list[Any] | None = None
        for branch in _disjuncts(conjunct):
            found = [p for c in _conjuncts(branch) for p in _implied(c, inputs)]
            common = found if common is None else [p for p in common if p in found]
        return common or []
    if not isinstance(conjunct, exp.EQ):
        return []
    left, right = conjunct.this, conjunct.expression
    if not (isinstance(left, exp.Column) and isinstance(right, exp.Column)):
        return []
    a, b = _place(left, inputs), _place(right, inputs)
    if a[0] == b[0]:
        return []
    return [(a, b) if a < b else (b, a)]


def single_table_conjuncts(shape: JoinShape) -> dict[str, list[Any]]:
    """Per alias, conditions over that table alone which the block's condition implies.

    What may filter a table's rows before they join (a join cannot bring back
    a row such a condition rejects): the top-level conjuncts that read one
    table, and of an ``OR`` whose every branch has some for a table, the
    ``OR`` of those (TPC-H q19: each branch's conditions on ``part`` and on
    ``lineitem``). Sound under SQL's three-valued logic: a joined row the
    condition keeps has a true branch, so each table's part of that branch
    is true of the row's part from that table. A conjunct whose columns
    cannot be placed is left to the final evaluation.
    """
    if shape.condition is None:
        return {}
    return _implied_filters(shape.condition, shape.inputs)


def conjunct_prefilter(
    conjuncts: Mapping[str, Sequence[Any]], types: Mapping[str, pa.DataType]
) -> Prefilter:
    """A :data:`Prefilter` keeping each table's rows that pass its ``conjuncts`` (by alias),
    evaluated with Spark's ``types``."""

    conditions = {a: exp.and_(*cs, copy=True) for a, cs in conjuncts.items() if cs}

    def keep(alias: str, rows: pa.Table) -> pa.Table:
        condition = conditions.get(alias)
        if condition is None or not rows.num_rows:
            return rows
        return rows.filter(ArrowEvaluator.joined(rows, types).mask(condition))

    return keep


def _implied_filters(condition: Any, inputs: Sequence[JoinInput]) -> dict[str, list[Any]]:
    out: dict[str, list[Any]] = {}
    for conjunct in _conjuncts(condition):
        owner = _owner(conjunct, inputs)
        if owner is not None:
            out.setdefault(owner, []).append(conjunct)
            continue
        branches = _disjuncts(conjunct)
        if len(branches) < 2:
            continue
        implied = [_implied_filters(branch, inputs) for branch in branches]
        for alias in set.intersection(*(set(b) for b in implied)):
            either = exp.or_(*(exp.and_(*b[alias], copy=True) for b in implied), copy=False)
            out.setdefault(alias, []).append(either)
    return out


def _owner(conjunct: Any, inputs: Sequence[JoinInput]) -> str | None:
    """The one table a conjunct reads (None: several, none, or a subquery)."""
    columns = list(conjunct.find_all(exp.Column))
    if not columns or conjunct.find(exp.Subquery) is not None:
        return None
    try:
        owners = {_place(c, inputs)[0] for c in columns}
    except NotOnDriver:
        return None
    return owners.pop() if len(owners) == 1 else None


def _conjuncts(condition: Any) -> list[Any]:
    """The top-level ``AND`` operands, through parentheses."""
    return _operands(condition, exp.And)


def _disjuncts(condition: Any) -> list[Any]:
    """The top-level ``OR`` operands, through parentheses."""
    return _operands(condition, exp.Or)


def _operands(condition: Any, kind: type[exp.Connector]) -> list[Any]:
    while isinstance(condition, exp.Paren):
        condition = condition.this
    if isinstance(condition, kind):
        return [*_operands(condition.left, kind), *_operands(condition.right, kind)]
    return [condition]


def place_column(column: Any, inputs: Sequence[JoinInput]) -> tuple[str, str]:
    """(alias, column) of a column of the block, lower-cased (see :func:`_place`)."""
    return _place(column, inputs)


def _place(column: Any, inputs: Sequence[JoinInput]) -> tuple[str, str]:
    """(alias, column) of a column node, lower-cased; unqualified: the one table that has it."""
    name = column.name.lower()
    owners = [
        i.alias
        for i in inputs
        if (not column.table or column.table.lower() == i.alias)
        and name in {c.lower() for c in i.columns}
    ]
    if len(owners) != 1:
        raise NotOnDriver(f"column {column.sql()} is not placed in exactly one table")
    return owners[0], name


def term_rows(
    shape: JoinShape,
    position: int,
    change: pa.Table,
    fetch: Fetch,
    prefilter: Prefilter | None = None,
    all_new: bool = False,
    count: Count | None = None,
    whole: Whole | None = None,
) -> pa.Table:
    """One delta-rule term's joined rows (columns ``alias.column``), before the condition.

    :param position: the changed input's index in ``shape.inputs``.
    :param change: its rows on its columns (the inserted or the deleted ones).
    :param prefilter: applied to each table's rows (qualified) before they
        join: the condition's conjuncts that read that table alone (the
        whole condition is evaluated afterwards all the same).
    :param all_new: every other table as it is now (the term of an input
        after all of the block's tables: a semi-join's subquery).
    :param count: tells which of several join columns matches fewer rows
        (TPC-H q9's ``lineitem`` by ``l_partkey`` and ``l_suppkey``: by the
        supplier most of the table would be fetched, then joined).
    :param whole: reads a table no equality ties to the joined ones whole, and
        pairs it with every row so far (TPC-DS q88's one-row parts, crossed);
        None: such a table raises :class:`NotOnDriver`.
    """
    keep = prefilter or (lambda _alias, rows: rows)
    joined = keep(shape.inputs[position].alias, qualified(change, shape.inputs[position].alias))
    done = {shape.inputs[position].alias}
    while len(done) < len(shape.inputs):
        index, pairs = _next(shape, done, crossed=whole is not None)
        other = shape.inputs[index]
        state = NEW if all_new or index < position else OLD
        if not pairs:
            assert whole is not None
            crossed = whole(other.name, state, joined.num_rows)
            fetched = keep(other.alias, qualified(crossed, other.alias))
            joined = _crossed(joined, fetched)
        else:
            column, values = _fetched_by(joined, other, state, pairs, count)
            fetched = fetch(other.name, state, column, values)
            joined = join_on(joined, keep(other.alias, qualified(fetched, other.alias)), pairs)
        done.add(other.alias)
    return joined


def _crossed(left: pa.Table, right: pa.Table) -> pa.Table:
    """Every row of ``left`` with every row of ``right`` (a cross join)."""
    if not left.num_rows or not right.num_rows:
        return pa.schema([*left.schema, *right.schema]).empty_table()
    left = left.append_column(_CROSS, pa.array(np.zeros(left.num_rows, dtype=np.int8)))
    right = right.append_column(_CROSS, pa.array(np.zeros(right.num_rows, dtype=np.int8)))
    return left.join(right, keys=_CROSS, join_type="inner").drop_columns([_CROSS])


def _fetched_by(
    joined: pa.Table,
    other: JoinInput,
    state: str,
    pairs: list[tuple[tuple[str, str], tuple[str, str]]],
    count: Count | None,
) -> tuple[str, pa.Array]:
    """The column of ``other`` to fetch by, and its values: of the pairs, the fewest matches."""
    best: tuple[int, str, pa.Array] | None = None
    for done, mine in pairs:
        values = pc.unique(pc.drop_null(joined.column(_name(done))))
        column = column_of(other, mine[1])
        if count is None or len(pairs) == 1:
            return column, values
        matches = count(other.name, state, column, values)
        if matches is None:
            return column, values
        if best is None or matches < best[0]:
            best = (matches, column, values)
    assert best is not None
    return best[1], best[2]


def _next(
    shape: JoinShape, done: set[str], *, crossed: bool = False
) -> tuple[int, list[tuple[tuple[str, str], tuple[str, str]]]]:
    """The first table (in block order) not joined yet that an equality ties to the joined
    ones; with ``crossed``, else the first not joined yet (no pairs: a cross join)."""
    for index, candidate in enumerate(shape.inputs):
        if candidate.alias in done:
            continue
        pairs = []
        for a, b in shape.equalities:
            if a[0] in done and b[0] == candidate.alias:
                pairs.append((a, b))
            elif b[0] in done and a[0] == candidate.alias:
                pairs.append((b, a))
        if pairs:
            return index, pairs
    if crossed:
        return next(i for i, c in enumerate(shape.inputs) if c.alias not in done), []
    raise NotOnDriver("a cross join (a table no equality ties to the others)")


def join_on(
    left: pa.Table, right: pa.Table, pairs: list[tuple[tuple[str, str], tuple[str, str]]]
) -> pa.Table:
    """Inner join on every pair; NULL keys match nothing, as SQL's ``=``."""
    left_keys = [_name(a) for a, _ in pairs]
    right_keys = [_name(b) for _, b in pairs]
    for lk, rk in zip(left_keys, right_keys, strict=True):
        left, right = _comparable(left, lk, right, rk)
    left = left.filter(_all_valid(left, left_keys))
    right = right.filter(_all_valid(right, right_keys))
    if not left.num_rows or not right.num_rows:
        return pa.schema([*left.schema, *right.schema]).empty_table()
    return left.join(
        right, keys=left_keys, right_keys=right_keys, join_type="inner", coalesce_keys=False
    )


def _comparable(left: pa.Table, lk: str, right: pa.Table, rk: str) -> tuple[pa.Table, pa.Table]:
    """Both key columns of one type: integers widen to 64 bits; other differing types refuse."""
    lt, rt = left.schema.field(lk).type, right.schema.field(rk).type
    if lt == rt:
        return left, right
    if pa.types.is_integer(lt) and pa.types.is_integer(rt):
        return _cast(left, lk, pa.int64()), _cast(right, rk, pa.int64())
    if {lt, rt} <= {pa.string(), pa.large_string()}:
        return _cast(left, lk, pa.large_string()), _cast(right, rk, pa.large_string())
    raise NotOnDriver(f"join columns {lk} ({lt}) and {rk} ({rt}) differ in type")


def _cast(table: pa.Table, name: str, to: pa.DataType) -> pa.Table:
    index = table.schema.get_field_index(name)
    return table.set_column(index, pa.field(name, to), table.column(name).cast(to))


def _all_valid(table: pa.Table, names: list[str]) -> pa.Array:
    mask = pa.array([True] * table.num_rows, pa.bool_())
    for name in names:
        mask = pc.and_(mask, pc.is_valid(table.column(name)))
    return mask


def qualified(rows: pa.Table, alias: str) -> pa.Table:
    return rows.rename_columns([f"{alias}.{c.lower()}" for c in rows.column_names])


def _name(placed: tuple[str, str]) -> str:
    return f"{placed[0]}.{placed[1]}"


def column_of(table: JoinInput, lowered: str) -> str:
    """The input's own spelling of a lower-cased column name."""
    return spelled(table.columns, lowered)


def spelled(columns: Sequence[str], lowered: str) -> str:
    """``lowered`` as ``columns`` spell it (the plan lower-cases names; tables keep the case);
    :class:`NotOnDriver` when none of them is it."""
    for name in columns:
        if name.lower() == lowered.lower():
            return name
    raise NotOnDriver(f"column {lowered} was not read")
