"""The dry run's analysis of a query's columns, from the inputs' schemas (no Spark).

sqlglot qualifies every column against the inputs' schemas; a column it
cannot place is reported only when its name is a column of no input and no
alias of the query (a lambda's variable, a generator's output, a select
alias): sqlglot's resolution of Spark SQL is not Spark's, and a folder
Spark would run must never be refused for it. What is left is a name Spark
cannot resolve either: a typo, a column that was renamed.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from sqlglot import exp
from sqlglot.errors import OptimizeError, SqlglotError
from sqlglot.optimizer.qualify import qualify
from sqlglot.schema import MappingSchema

_UNRESOLVED = re.compile(
    r"Column '(?P<a>[^']+)' could not be resolved(?:\. Line: (?P<line>\d+))?"
    r"|Unknown column: (?P<b>\S+)"
)


def unknown_column(
    tree: Any, schema: MappingSchema, columns: Mapping[str, Mapping[str, str]]
) -> tuple[str, int | None] | None:
    """A column no input has, and its line in the query's text (None if sqlglot did not say).

    :param columns: the inputs' columns by table (every table the query reads).
    """
    try:
        qualify(tree.copy(), schema=schema, dialect="spark")
    except OptimizeError as exc:
        match = _UNRESOLVED.search(str(exc))
        if match is None:
            return None
        name = (match["a"] or match["b"] or "").strip('`"').split(".")[-1].lower()
        known = {c.lower() for table in columns.values() for c in table}
        if not name or name in known or name in _aliases(tree):
            return None
        return name, int(match["line"]) if match["line"] else None
    except (SqlglotError, ValueError, KeyError):
        return None
    return None


def _aliases(tree: Any) -> set[str]:
    """Every name the query itself introduces: select and table aliases, lambda variables."""
    names = {a.alias.lower() for a in tree.find_all(exp.Alias) if a.alias}
    for alias in tree.find_all(exp.TableAlias):
        names |= {c.name.lower() for c in alias.columns}
        names.add(alias.name.lower())
    for function in tree.find_all(exp.Lambda):
        names |= {v.name.lower() for v in function.expressions}
    return names
