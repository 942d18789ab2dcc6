"""A windowed select whose partition keys are not outputs: its rows with the keys, then
the outputs alone.

``SELECT c, COUNT(*) OVER (PARTITION BY k) AS n FROM t`` changes only the
rows of the partitions a change touches, but the target has no ``k`` to
find them by, so the windows' rule refuses it and the view ran in full.
The same select with the keys added as outputs, ``SELECT c, COUNT(*) OVER
(PARTITION BY k) AS n, k AS __ct_p0 FROM t``, is one the windows' rule
maintains (its keys are outputs now); the view's rows are that query's
rows without the added columns, ``SELECT c, n FROM <partitions>``, a
projection the ``linear`` strategy maintains from the first's change.
:mod:`.compose` keeps the first as a part of the view.

Refused (``None``): a select without windows, or whose windows' keys are
outputs already (the windows' rule takes it whole) or that share no key;
a grouped or aggregating select (the groups split's); ``DISTINCT``,
``ORDER BY``, ``LIMIT`` (the rows split's); ``*``; an output without a
name of its own (Spark names it after its text, which the rest would not
repeat) or two outputs of one name.
"""

from __future__ import annotations

from typing import Any

from sqlglot import exp

from airflow_provider_ct.ivm.plan.select_shape import has_own_aggregate, plainly_named
from airflow_provider_ct.ivm.plan.windows import (
    output_position,
    own_windows,
    shared_partition_keys,
)

KEY_PREFIX = "__ct_p"
#: The alias the rest of the query reads the partitions' table under.
PARTITIONS_ALIAS = "__ct_partitions"


def split_partitions(select: Any) -> tuple[Any, Any] | None:
    """``(the select with its partition keys as outputs, its outputs over PARTITIONS_ALIAS)``,
    or None (module docstring). ``select`` is not changed."""
    if not isinstance(select, exp.Select) or not _splittable(select):
        return None
    keys = shared_partition_keys(select)
    if isinstance(keys, str):
        return None
    missing = [k for k in keys if output_position(select, k) is None]
    if not missing:
        return None
    below = select.copy()
    for number, key in enumerate(missing):
        below.append(
            "expressions",
            exp.alias_(exp.maybe_parse(key, dialect="spark"), f"{KEY_PREFIX}{number}"),
        )
    names = [item.alias_or_name for item in select.expressions]
    rest = exp.select(*[exp.column(name, quoted=True) for name in names]).from_(
        exp.to_table(PARTITIONS_ALIAS)
    )
    return below, rest


def _splittable(select: Any) -> bool:
    if not own_windows(select):
        return False
    if select.args.get("group") is not None or has_own_aggregate(select):
        return False
    for arg in ("having", "distinct", "order", "limit", "offset", "qualify"):
        if select.args.get(arg) is not None:
            return False
    names: set[str] = set()
    for item in select.expressions:
        if not plainly_named(item) or not item.alias_or_name:
            return False
        name = item.alias_or_name.lower()
        if name in names or name.startswith(KEY_PREFIX):
            return False
        names.add(name)
    return True
