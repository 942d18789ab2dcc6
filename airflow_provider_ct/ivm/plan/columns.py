"""Which columns of each input a plan reads: an incremental tick reads only those of a change.

Kept apart from the planner, which decides the strategy; this answers a
question every strategy's tick asks of the plan it runs.
"""

from __future__ import annotations

from typing import Any

from sqlglot import exp

from airflow_provider_ct.core.query import input_name
from airflow_provider_ct.ivm.plan.planner import Block, Plan
from airflow_provider_ct.ivm.plan.select_shape import block_tables, is_count_star


def referenced_columns(
    plan: Plan, schemas: dict[str, list[str]], catalog_name: str
) -> dict[str, list[str]]:
    """The columns of each input that the plan's blocks read, in schema order.

    An incremental tick reads its inputs' changes from their data files;
    reading only these columns keeps the cost of a change spread over the
    table's files down, and nets away changes to columns the view never
    reads. Conservative: a ``*``, a ``NATURAL`` join or a column this cannot
    place (a struct field, an alias) means every column of every input.

    :param schemas: input name -> its column names.
    """
    every = {name: list(columns) for name, columns in schemas.items()}
    wanted: dict[str, set[str]] = {name: set() for name in schemas}
    for block in plan.blocks:
        placed = _block_columns(block, schemas, catalog_name)
        if placed is None:
            return every
        for name, found in placed.items():
            wanted[name] |= found
    out = {}
    for name, names in schemas.items():
        kept = [c for c in names if c.lower() in wanted[name]]
        if not kept and name in plan.keyed_inputs:
            kept = list(names)  # read only in keyed subqueries: a change's key is needed
        out[name] = kept or names[:1]  # a view that reads no column still counts rows
    return out


def _block_columns(
    block: Block, schemas: dict[str, list[str]], catalog_name: str
) -> dict[str, set[str]] | None:
    """Lower-cased columns read per input of ``block``; ``None``: cannot tell."""
    tree = block.tree
    if any(not is_count_star(s) and not _exists_output(s) for s in tree.find_all(exp.Star)):
        return None
    if any(j.args.get("method") for j in tree.args.get("joins") or []):
        return None
    block_tables(tree)  # refuses a FROM that is not a table
    aliases: dict[str, set[str]] = {}  # a subquery may reuse an alias: every owner reads it
    for table in tree.find_all(exp.Table):
        name = input_name(table, catalog_name)
        if name is None:
            return None  # a CTE's columns are not an input's
        aliases.setdefault(table.alias_or_name.lower(), set()).add(name)
    lower = {name: {c.lower() for c in columns} for name, columns in schemas.items()}
    placed: dict[str, set[str]] = {}
    for column in tree.find_all(exp.Column):
        name = column.name.lower()
        if column.args.get("db") or column.args.get("catalog"):
            return None  # a.s.f: a struct field, or a name this cannot place
        if column.table:
            found = [n for n in aliases.get(column.table.lower(), ()) if name in lower.get(n, ())]
            if not found:
                return None
            for owner in found:
                placed.setdefault(owner, set()).add(name)
            continue
        owners = [n for n in set().union(*aliases.values()) if name in lower.get(n, set())]
        if not owners:
            return None
        for owner in owners:
            placed.setdefault(owner, set()).add(name)
    return placed


def _exists_output(star: Any) -> bool:
    """Whether ``star`` is the output of an ``EXISTS`` subquery (which reads no column)."""
    select = star.parent
    if not isinstance(select, exp.Select) or not any(e is star for e in select.expressions):
        return False
    node = select.parent
    while isinstance(node, exp.Subquery | exp.Paren):
        node = node.parent
    return isinstance(node, exp.Exists)
