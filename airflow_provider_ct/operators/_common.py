"""Small helpers shared by our operators, sensors and triggers."""

from __future__ import annotations

import ast
import json
import os
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

from airflow_provider_ct.core.frontier import parse_timestamp, timestamp_from_datetime
from airflow_provider_ct.core.policies import parse_policies
from airflow_provider_ct.core.query import normalize_table_name
from airflow_provider_ct.core.timeline import Timeline
from airflow_provider_ct.exceptions import ConfigurationError, DescriptionError
from airflow_provider_ct.hooks.iceberg import IcebergCatalogHook

if TYPE_CHECKING:
    from pyiceberg.table import Table

#: Deployment-wide read-only switch (0dt upgrades, incident response).
READ_ONLY_ENV = "CT_READ_ONLY"


def tick_time(context: Mapping[str, Any], override: Any = None) -> int:
    """The tick's logical time T in epoch ms.

    ``override`` (a templated argument) wins; otherwise the run's
    ``data_interval_end``, falling back to the logical date, then ``run_after``
    for manual runs that have neither. A malformed override (``"-5"``, ``"²"``,
    out of range) raises :class:`FrontierError` naming it.
    """
    if override not in (None, ""):
        return parse_timestamp(override, "time")
    for key in ("data_interval_end", "logical_date"):
        value = context.get(key)
        if value is not None:
            return timestamp_from_datetime(value)
    dag_run = context.get("dag_run")
    run_after = getattr(dag_run, "run_after", None)
    if run_after is not None:
        return timestamp_from_datetime(run_after)
    raise ConfigurationError("cannot tell the tick time: no data interval, logical date or time=")


def read_only_default(read_only: bool | None) -> bool:
    if read_only is not None:
        return read_only
    return os.environ.get(READ_ONLY_ENV, "").strip().lower() in ("1", "true", "yes", "on")


def load_json_object(value: Any, what: str) -> dict[str, Any]:
    """An XCom value as a dict: a dict, JSON text, or a rendered Python dict literal.

    Hostile text (deep nesting, ``{[1]: 2}``) raises :class:`DescriptionError`,
    never the parsers' own ``RecursionError`` or ``TypeError``.
    """
    if isinstance(value, dict):
        return value
    if isinstance(value, str):
        try:
            parsed = json.loads(value)
        except (json.JSONDecodeError, RecursionError):
            try:
                parsed = ast.literal_eval(value)
            except (ValueError, SyntaxError, TypeError, RecursionError, MemoryError):
                raise DescriptionError(
                    f"{what} is neither JSON nor a dict: {value!r:.200}"
                ) from None
        if isinstance(parsed, dict):
            return parsed
    raise DescriptionError(
        f"{what} must be a JSON object, got {type(value).__name__}: {value!r:.200}"
    )


def timelines(
    hook: IcebergCatalogHook,
    tables: Iterable[str],
    policies: Mapping[str, str] | None = None,
) -> dict[str, Timeline]:
    """Timelines of existing tables (a missing one is a clear error).

    Policy keys are checked against ``tables`` before any table is loaded, so
    a typo fails fast instead of leaving its input on the default policy.
    """
    catalog_name = hook.get_config().name
    names = [normalize_table_name(t, catalog_name) for t in tables]
    parsed = parse_policies(policies, names, catalog_name)
    return {name: Timeline.of(hook.load_table(name), policy=parsed.get(name)) for name in names}


def load_table_or_none(hook: IcebergCatalogHook, name: str) -> Table | None:
    """The table ``name``, or ``None`` if it does not exist (before a first tick)."""
    from pyiceberg.exceptions import NoSuchTableError

    try:
        return hook.get_catalog().load_table(name)
    except NoSuchTableError:
        return None


def target_timeline(hook: IcebergCatalogHook, target: str) -> Timeline | None:
    table = load_table_or_none(hook, target)
    return None if table is None else Timeline.of(table)
