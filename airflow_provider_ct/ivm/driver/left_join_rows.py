"""The rows a change adds and removes below an aggregation over one ``LEFT JOIN``, on the driver.

The left-join delta rule the Spark path evaluates (``spark/ivm/terms.py``),
here over rows fetched by key (:mod:`.driver_join` fetches inner joins'
partners the same way): for ``P LEFT JOIN O ON p.k = o.k AND ...``,

* a change of ``P`` joins ``O`` as it was: ``ΔP ⟕ O_old``;
* a change of ``O`` moves only the preserved rows with the keys ``K`` it
  holds, so those rows are fetched from ``P`` as it is now and joined
  with ``O`` before and after: ``P_new|K ⟕ O_new - P_new|K ⟕ O_old``.

Summed, exactly ``P_new ⟕ O_new - P_old ⟕ O_old``. The rows of ``P`` are
fetched by the first key column alone: one whose other keys are outside
``K`` meets the same ``O`` rows on both sides, so its two terms cancel.

Each ``⟕`` is computed as SQL defines it: the candidate pairs are the rows
equal on every key pair (NULL keys match nothing), ``ON`` (all of it, the
filters beside the equalities too) is evaluated on them, and a preserved
row none of whose pairs ``ON`` keeps appears once with the optional
columns NULL. ``WHERE`` is evaluated afterwards, on the joined rows.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from sqlglot import exp

from airflow_provider_ct.ivm.driver.arrow_eval import NotOnDriver
from airflow_provider_ct.ivm.driver.driver_join import (
    NEW,
    OLD,
    Fetch,
    JoinInput,
    column_of,
    join_on,
    joined_tables,
    qualified,
)
from airflow_provider_ct.ivm.plan.left_join import LeftJoin

#: Joined rows -> which of them a condition keeps (``ON``, evaluated with Spark's types).
Mask = Callable[[pa.Table], pa.Array]
#: Hidden column numbering the preserved rows of one ``⟕``.
_ROW = "__ct_lrow"


@dataclass(frozen=True)
class LeftShape:
    """The block's ``preserved LEFT JOIN optional``: its tables, key pairs and conditions."""

    preserved: JoinInput
    optional: JoinInput
    #: ((preserved alias, column), (optional alias, column)) pairs, lower-cased.
    pairs: tuple[tuple[tuple[str, str], tuple[str, str]], ...]
    #: The whole ``ON``; ``WHERE`` (None: none).
    on: Any
    where: Any

    @property
    def inputs(self) -> tuple[JoinInput, JoinInput]:
        return self.preserved, self.optional


def left_shape(
    tree: Any, catalog_name: str, columns: Mapping[str, Sequence[str]], join: LeftJoin
) -> LeftShape:
    """The block's left join (the planner's :class:`LeftJoin` placed on its two tables)."""
    from_ = tree.args.get("from_") or tree.args.get("from")
    (joined,) = tree.args.get("joins") or [None]
    tables: list[Any] = [from_.this if from_ is not None else None]
    tables.append(joined.this if joined is not None else None)
    if any(not isinstance(t, exp.Table) for t in tables):
        raise NotOnDriver("a LEFT JOIN of something other than two tables")
    preserved, optional = joined_tables(tables, catalog_name, columns)
    pairs = tuple(
        ((preserved.alias, p.lower()), (optional.alias, o.lower()))
        for p, o in zip(join.preserved_keys, join.optional_keys, strict=True)
    )
    where = tree.args.get("where")
    return LeftShape(preserved, optional, pairs, joined.args["on"], where.this if where else None)


def left_terms(
    shape: LeftShape,
    changes: Mapping[str, tuple[pa.Table, pa.Table]],
    fetch: Fetch,
    on: Mask,
) -> list[tuple[int, pa.Table]]:
    """The signed joined rows (columns ``alias.column``) whose sum is the join's change.

    :param changes: input name -> its (inserted, deleted) rows, for the inputs that changed.
    """
    preserved, optional = shape.inputs
    out: list[tuple[int, pa.Table]] = []
    if preserved.name in changes:
        for sign, rows in zip((1, -1), changes[preserved.name], strict=True):
            if rows.num_rows:
                out.append(
                    (sign, left_rows(shape, qualified(rows, preserved.alias), OLD, fetch, on))
                )
    if optional.name in changes:
        (first_p, first_o), *_ = shape.pairs
        keys = pa.concat_arrays(
            [
                r.column(column_of(optional, first_o[1])).combine_chunks()
                for r in changes[optional.name]
            ]
        )
        values = pc.unique(pc.drop_null(keys))
        if len(values):
            rows = fetch(preserved.name, NEW, column_of(preserved, first_p[1]), values)
            moved = qualified(rows, preserved.alias)
            for sign, side in ((1, NEW), (-1, OLD)):
                out.append((sign, left_rows(shape, moved, side, fetch, on)))
    return out


def left_rows(shape: LeftShape, rows: pa.Table, side: str, fetch: Fetch, on: Mask) -> pa.Table:
    """``rows ⟕ optional`` as of ``side``: ``ON``'s pairs, and the rows no pair kept."""
    optional = shape.optional
    (first_p, first_o), *_ = shape.pairs
    values = pc.unique(pc.drop_null(rows.column(f"{first_p[0]}.{first_p[1]}")))
    fetched = fetch(optional.name, side, column_of(optional, first_o[1]), values)
    partners = qualified(fetched, optional.alias)
    numbered = rows.append_column(_ROW, pa.array(range(rows.num_rows), pa.int64()))
    pairs = join_on(numbered, partners, list(shape.pairs))
    matched = pairs.filter(on(pairs)) if pairs.num_rows else pairs
    alone = numbered.filter(
        pc.invert(pc.is_in(numbered.column(_ROW), value_set=matched.column(_ROW)))
    )
    extended = {
        name: alone.column(name).cast(matched.schema.field(name).type)
        if name in alone.column_names
        else pa.nulls(alone.num_rows, matched.schema.field(name).type)
        for name in matched.column_names
    }
    both = pa.concat_tables([matched, pa.table(extended, schema=matched.schema)])
    return both.drop_columns([_ROW])
