"""A change's rows under ``P LEFT JOIN O ON ..., D1, D2 ...`` (inner joins after), on the driver.

TPC-DS's sales-with-returns shape: a fact ``LEFT JOIN`` its returns by the
order's keys, then inner (or comma) joins to dimensions by the fact's
columns. The pair ``U = P ⟕ O`` is one input of the inner joins' delta
rules (:mod:`.driver_join`), telescoped in the order ``P, O, D1, ...``:

* ``P``'s and ``O``'s changes are ``U``'s, by the left-join rule
  (:func:`~.left_join_rows.left_terms`), joined with every ``Dj`` as it
  was;
* a change of ``Dj`` joins ``U`` as it is now: the rows of ``P`` its keys
  reach, fetched by ``P``'s column and left-joined with ``O`` now.

Summed, exactly ``U_new ⋈ D_new - U_old ⋈ D_old``. Inside the inner joins'
machinery ``U`` is one table with ``P``'s alias: its rows carry ``P``'s
columns as ``P``'s and ``O``'s under an ``o.`` prefix, renamed back once
the term is joined. So each dimension must be tied by equalities to
``P``'s columns or to each other (not to ``O``'s), and the ``ON`` of the
left join alone pairs ``P`` with ``O``; anything else raises
:class:`~.arrow_eval.NotOnDriver` and Spark's jobs run the tick.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
from sqlglot import exp

from airflow_provider_ct.ivm.driver.arrow_eval import NotOnDriver
from airflow_provider_ct.ivm.driver.driver_join import (
    Count,
    Fetch,
    JoinInput,
    JoinShape,
    Prefilter,
    inner_conditions,
    joined_tables,
    qualified,
    tables_shape,
    term_rows,
)
from airflow_provider_ct.ivm.driver.left_join_rows import LeftShape, Mask, left_rows, left_terms

#: The name the pair goes by among the inner joins' inputs.
PAIR = "__ct_left_pair"


@dataclass(frozen=True)
class LeftInnerShape:
    """The block's left-joined pair and the inner joins over it."""

    left: LeftShape
    #: ``PAIR`` (with the preserved table's alias) first, then the dimensions.
    inner: JoinShape


def left_inner_shape(
    tree: Any, catalog_name: str, columns: Mapping[str, Sequence[str]]
) -> LeftInnerShape:
    """The shape of ``FROM P LEFT JOIN O ON ... [JOIN D ON ... | , D] ...``, or NotOnDriver.

    The inner joins may also come before the ``LEFT JOIN`` (:func:`_check_pair_only`).
    """
    from_ = tree.args.get("from_") or tree.args.get("from")
    joins = list(tree.args.get("joins") or [])
    lefts = [i for i, j in enumerate(joins) if (j.args.get("side") or "").upper() == "LEFT"]
    if len(joins) < 2 or len(lefts) != 1 or joins[lefts[0]].args.get("on") is None:
        raise NotOnDriver("one LEFT JOIN ... ON among inner joins of tables is not this")
    first = joins[lefts[0]]
    rest = [j for j in joins if j is not first]
    tables = [from_.this if from_ is not None else None, first.this, *(j.this for j in rest)]
    if any(not isinstance(t, exp.Table) for t in tables):
        raise NotOnDriver("a LEFT JOIN of two tables, then inner joins of tables, is not this")
    conditions = [tree.args["where"].this] if tree.args.get("where") is not None else []
    conditions.extend(inner_conditions(rest, after=" beside a LEFT JOIN"))
    inputs = joined_tables(tables, catalog_name, columns)
    preserved, optional = inputs[0], inputs[1]
    if lefts[0] > 0:
        _check_pair_only(first.args["on"], preserved, optional)
    pairs = _pairs(first.args["on"], preserved, optional)
    left = LeftShape(preserved, optional, pairs, first.args["on"], None)
    pair = JoinInput(
        preserved.alias, PAIR, (*preserved.columns, *_prefixed(optional, optional.columns))
    )
    condition = exp.and_(*conditions) if conditions else None
    tables_in = [(i.alias, i.name) for i in (pair, *inputs[2:])]
    inner = tables_shape(tables_in, condition, {PAIR: pair.columns, **columns})
    return LeftInnerShape(left, inner)


def left_inner_terms(
    shape: LeftInnerShape,
    changes: Mapping[str, tuple[pa.Table, pa.Table]],
    fetch: Fetch,
    on: Mask,
    prefilter: Prefilter | None = None,
    count: Count | None = None,
) -> list[tuple[int, pa.Table]]:
    """The signed joined rows (columns ``alias.column``) whose sum is the block's change.

    :param changes: input name -> its (inserted, deleted) rows, for the inputs that changed.
    """
    left = shape.left
    paired = _pair_fetch(left, fetch, on)
    if count is not None:  # the pair's matches are about its preserved table's
        counted = count

        def count_pair(name: str, side: str, column: str, values: pa.Array) -> int | None:
            return counted(left.preserved.name if name == PAIR else name, side, column, values)

        count = count_pair
    out: list[tuple[int, pa.Table]] = []
    own = {n: c for n, c in changes.items() if n in (left.preserved.name, left.optional.name)}
    for sign, rows in left_terms(left, own, fetch, on):
        if rows.num_rows:
            joined = term_rows(shape.inner, 0, _as_pair(left, rows), paired, prefilter, count=count)
            out.append((sign, _unpaired(left, joined)))
    for position, dimension in enumerate(shape.inner.inputs[1:], start=1):
        for sign, rows in zip((1, -1), changes.get(dimension.name, ()), strict=False):
            if rows.num_rows:
                joined = term_rows(shape.inner, position, rows, paired, prefilter, count=count)
                out.append((sign, _unpaired(left, joined)))
    return out


def _pair_fetch(left: LeftShape, fetch: Fetch, on: Mask) -> Fetch:
    """A :data:`Fetch` that serves ``PAIR`` as ``P`` (by its column) left-joined with ``O``."""

    def pair_or_table(name: str, side: str, column: str, values: pa.Array) -> pa.Table:
        if name != PAIR:
            return fetch(name, side, column, values)
        rows = qualified(fetch(left.preserved.name, side, column, values), left.preserved.alias)
        return _as_pair(left, left_rows(left, rows, side, fetch, on))

    return pair_or_table


def _as_pair(left: LeftShape, rows: pa.Table) -> pa.Table:
    """Joined ``P ⟕ O`` rows (``p.x``, ``o.y``) as the pair's own (``x``, ``o.y``)."""
    cut = len(left.preserved.alias) + 1
    prefix = f"{left.preserved.alias}."
    return rows.rename_columns([c[cut:] if c.startswith(prefix) else c for c in rows.column_names])


def _unpaired(left: LeftShape, rows: pa.Table) -> pa.Table:
    """A term's rows with the pair's ``p.o.y`` columns named ``o.y`` again."""
    prefix = f"{left.preserved.alias}.{left.optional.alias}."
    cut = len(left.preserved.alias) + 1
    return rows.rename_columns([c[cut:] if c.startswith(prefix) else c for c in rows.column_names])


def _prefixed(table: JoinInput, columns: Sequence[str]) -> tuple[str, ...]:
    return tuple(f"{table.alias}.{c.lower()}" for c in columns)


def _check_pair_only(on: Any, preserved: JoinInput, optional: JoinInput) -> None:
    """:class:`NotOnDriver` unless every column ``on`` reads is the first table's or the
    optional one's: a ``LEFT JOIN`` after inner joins is then the same join made first.

    ``(P JOIN D ON p.d = d.k) LEFT JOIN O ON p.o = o.k`` and ``(P LEFT JOIN O
    ON p.o = o.k) JOIN D ON p.d = d.k`` hold the same rows: a row of ``P``
    meets the same rows of ``O`` either way, and ``D``'s condition does not
    read ``O`` (it could not, written before it). TPC-DS q75 writes its sales
    with returns so.
    """
    for column in on.find_all(exp.Column):
        if _side(column, preserved, optional) is None:
            raise NotOnDriver(f"a LEFT JOIN after inner joins whose ON reads {column.sql()}")


def _pairs(
    on: Any, preserved: JoinInput, optional: JoinInput
) -> tuple[tuple[tuple[str, str], tuple[str, str]], ...]:
    """``ON``'s equalities of a preserved column with an optional one (at least one)."""
    found = []
    conjuncts = on.this if isinstance(on, exp.Paren) else on
    for conjunct in conjuncts.flatten() if isinstance(conjuncts, exp.And) else [conjuncts]:
        if not isinstance(conjunct, exp.EQ):
            continue
        a, b = (
            _side(conjunct.this, preserved, optional),
            _side(conjunct.expression, preserved, optional),
        )
        if a is not None and b is not None and {a[0], b[0]} == {preserved.alias, optional.alias}:
            found.append((a, b) if a[0] == preserved.alias else (b, a))
    if not found:
        raise NotOnDriver("a LEFT JOIN whose ON pairs no column of each side")
    return tuple(found)


def _side(node: Any, preserved: JoinInput, optional: JoinInput) -> tuple[str, str] | None:
    """(alias, column) of a column node of one of the two tables, else None."""
    if not isinstance(node, exp.Column):
        return None
    name = node.name.lower()
    owners = [
        t.alias
        for t in (preserved, optional)
        if (not node.table or node.table.lower() == t.alias)
        and name in {c.lower() for c in t.columns}
    ]
    return (owners[0], name) if len(owners) == 1 else None
