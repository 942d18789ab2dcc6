"""The affected days of a ``partition`` tick: found, bounded, reported.

A day key (``CAST(ts AS DATE)``, :class:`~airflow_provider_ct.ivm.plan.group_keys.KeyRange`)
turns the affected groups into days, and days into ranges of the bare
column that Iceberg prunes by. Kept apart from :mod:`.incremental`, which
decides when a tick may use them, because these are the day arithmetic
alone: the cast's semantics on Arrow values, the SQL and DataFrame filters,
the report.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.compute as pc

from airflow_provider_ct.ivm.plan.group_keys import KeyRange
from airflow_provider_ct.ivm.plan.planner import Plan
from airflow_provider_ct.ivm.plan.rewrites import InlineKeys, day_ranges, restrict_to_days

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

#: Up to this many affected keys are written into the query as literals.
INLINE_KEYS = 1000

#: A day-keyed restriction: the key, its column's Spark type, and the affected days.
Days = dict[tuple[KeyRange, str], InlineKeys]


def restrict_days(tree: Any, days: Days) -> Any:
    """``tree`` with each day key's column restricted to its affected days' ranges."""
    for (key_range, column_type), values in days.items():
        column = f"{key_range.alias}.{key_range.column}"
        tree = restrict_to_days(tree, column, column_type, values)
    return tree


def arrow_days(
    tables: Sequence[pa.Table], column: str, zone: str, instants: bool
) -> InlineKeys | None:
    """The distinct days of ``column`` in ``tables`` (``None``: too many, or no such column).

    :param instants: the column is Spark's ``TIMESTAMP`` (an instant, stored
        as UTC): its day is the date in ``zone``, also for a value that
        reached Arrow without a time zone.
    """
    import datetime as _dt
    from zoneinfo import ZoneInfo

    tz = ZoneInfo(zone)
    days: set[_dt.date] = set()
    has_null = False
    for table in tables:
        names = [n for n in table.column_names if n.lower() == column.lower()]
        if len(names) != 1:
            return None
        for value in pc.unique(table.column(names[0])).to_pylist():
            if value is None:
                has_null = True
            elif isinstance(value, _dt.datetime):
                if instants:
                    aware = value if value.tzinfo is not None else value.replace(tzinfo=_dt.UTC)
                    value = aware.astimezone(tz)
                days.add(value.date())
            else:
                days.add(value)
        if len(days) > INLINE_KEYS:
            return None
    return InlineKeys(tuple(sorted(days)), has_null)


def only_days(persisted: DataFrame, columns: list[str], plan: Plan, days: Days) -> DataFrame:
    """The target's rows of the affected days: its own partitions or statistics prune the read."""
    from pyspark.sql import functions as F

    for (key_range, _), values in days.items():
        column = persisted[f"`{columns[plan.key_positions[key_range.index]]}`"]
        kept = column.isin(list(values.values)) if values.values else F.lit(False)
        persisted = persisted.where(kept | column.isNull() if values.has_null else kept)
    return persisted


def days_report(days: Days) -> dict[str, list[str]]:
    """``alias.column`` -> the day ranges its reads were restricted to (for the report)."""
    return {
        f"{key_range.alias}.{key_range.column}": [
            f"{start.isoformat()}..{end.isoformat()}" for start, end in day_ranges(values.values)
        ]
        + (["NULL"] if values.has_null else [])
        for (key_range, _), values in days.items()
    }


#: Up to this many affected keys are written into the query as literals.
INLINE_KEYS = 1000
