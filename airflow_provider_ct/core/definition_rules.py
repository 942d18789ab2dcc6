"""Definitions that cannot be maintained, refused before anything runs.

Parsing (:mod:`.query`) refuses SQL that is not a query at all; the rules
here refuse queries and names that parse but could never give an exact,
reproducible table, so a DAG import (or, for a templated query, the mint)
fails in milliseconds with a :class:`QueryError` naming the problem, before
a JVM starts and before any table is created:

* **duplicate output column names**: an Iceberg table cannot have two
  columns of one name; the write job would fail after the whole query ran.
  Spark resolves names case-insensitively, so ``x`` and ``X`` collide.
* **nondeterministic functions in a view** (``rand()``, ``uuid()``,
  ``current_timestamp()``, ``TABLESAMPLE`` ...: the list is
  :data:`~.query.NONDETERMINISTIC_FUNCTIONS`): a view's contents at a time
  must be a function of its inputs at that time. With ``rand()`` every tick
  rewrites the whole table and no tick can be reproduced or verified; a
  retried write stages different rows than the failed one. Materialize
  refuses these in materialized views for the same reason. The tick's time
  is read deterministically with ``mz_now()`` / ``ct_time()`` in a
  continual task (docs/decisions.md, "Definitions refused at parse time").
* **a target named like a table the product keeps for itself**: a view's
  aggregate state lives in ``<target>`` + :data:`~.tables.STATE_TABLE_SUFFIX`; a
  definition whose output ends in that suffix would write into another
  view's state (or have its own state table collide with it); the parts of
  a view's query kept apart live in ``<target>`` +
  :data:`~.tables.PART_TABLE_INFIX` + a digest, so a target holding that
  mark is refused too.
"""

from __future__ import annotations

from typing import Any

from sqlglot import exp

from airflow_provider_ct.core.query import ParsedQuery, nondeterministic_calls
from airflow_provider_ct.core.tables import PART_TABLE_INFIX, STATE_TABLE_SUFFIX
from airflow_provider_ct.exceptions import QueryError

#: Suffixes of table names the product keeps for itself.
RESERVED_SUFFIXES = (STATE_TABLE_SUFFIX,)
#: How a definition reads the tick's time deterministically (continual tasks).
TICK_TIME_FUNCTIONS = "mz_now() or ct_time()"


def check_view_query(parsed: ParsedQuery) -> None:
    """Refuse a view's query that no table can be kept equal to (see the module docstring)."""
    calls = nondeterministic_calls(parsed.expression)
    if calls:
        spelled = ", ".join(c if c == "tablesample" else f"{c}()" for c in calls)
        raise QueryError(
            f"the view's query calls nondeterministic {spelled}: a view must be a function of "
            "its inputs, or every tick rewrites it and no tick can be reproduced; compute such "
            f"values in the inputs, or read the tick's time with {TICK_TIME_FUNCTIONS} in a "
            "continual task"
        )
    check_output_names(parsed.expression)


def output_names(tree: Any) -> list[str]:
    """The named output columns of a query (``*`` and unaliased expressions,
    which Spark names itself, are not checked).

    A ``UNION`` takes its names from its first branch, as Spark does.
    """
    while isinstance(tree, exp.SetOperation | exp.Subquery):
        tree = tree.this if isinstance(tree, exp.Subquery) else tree.left
    if not isinstance(tree, exp.Select):
        return []
    names = []
    for projection in tree.expressions:
        if isinstance(projection, exp.Alias):
            names.append(projection.alias)
        elif isinstance(projection, exp.Column) and not isinstance(projection.this, exp.Star):
            names.append(projection.name)
    return [n for n in names if n]


def check_output_names(tree: Any) -> None:
    """Refuse two output columns of one name (compared as Spark does, ignoring case)."""
    seen: dict[str, str] = {}
    duplicates: list[str] = []
    for name in output_names(tree):
        key = name.lower()
        if key in seen and seen[key] not in duplicates:
            duplicates.append(seen[key])
        seen.setdefault(key, name)
    if duplicates:
        names = ", ".join(repr(n) for n in duplicates)
        raise QueryError(
            f"the query has more than one output column named {names}: a table's columns need "
            "distinct names (give each an alias of its own with AS)"
        )


def check_target_name(name: str) -> None:
    """Refuse an output table named like one the product keeps for itself.

    :param name: the normalized ``namespace.table``.
    """
    table = name.rsplit(".", 1)[-1].lower()
    if PART_TABLE_INFIX in table:
        raise QueryError(
            f"target {name!r} holds {PART_TABLE_INFIX!r}, the mark of the tables that keep the "
            f"parts of a view's query (<target>{PART_TABLE_INFIX}<digest>): choose another name"
        )
    for suffix in RESERVED_SUFFIXES:
        if table.endswith(suffix):
            raise QueryError(
                f"target {name!r} ends in {suffix!r}, the suffix of the tables the product keeps "
                "for itself (a view's aggregate state is <target>" + suffix + "): choose "
                "another name"
            )
