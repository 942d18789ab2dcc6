"""Small helpers shared by our operators, sensors and triggers."""

from __future__ import annotations

import ast
import json
import os
from collections.abc import Iterable, Mapping
from typing import Any

from airflow_provider_ct.core.frontier import check_timestamp, timestamp_from_datetime
from airflow_provider_ct.core.policies import parse_policies
from airflow_provider_ct.core.query import normalize_table_name
from airflow_provider_ct.core.timeline import Timeline
from airflow_provider_ct.exceptions import ConfigurationError, DescriptionError
from airflow_provider_ct.hooks.iceberg import IcebergCatalogHook

#: Deployment-wide read-only switch (0dt upgrades, incident response).
READ_ONLY_ENV = "CT_READ_ONLY"


def tick_time(context: Mapping[str, Any], override: Any = None) -> int:
    """The tick's logical time T in epoch ms.

    ``override`` (a templated argument) wins; otherwise the run's
    ``data_interval_end``, falling back to the logical date, then ``run_after``
    for manual runs that have neither.
    """
    if override not in (None, ""):
        if isinstance(override, str):
            if not override.strip().isdigit():
                raise ConfigurationError(f"time={override!r} is not epoch milliseconds")
            override = int(override.strip())
        return check_timestamp(override, "time")
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
    """An XCom value as a dict: a dict, JSON text, or a rendered Python dict literal."""
    if isinstance(value, dict):
        return value
    if isinstance(value, str):
        try:
            parsed = json.loads(value)
        except json.JSONDecodeError:
            try:
                parsed = ast.literal_eval(value)
            except (ValueError, SyntaxError):
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
    """Timelines of existing tables (a missing one is a clear error)."""
    parsed = parse_policies(policies)
    name = hook.get_config().name
    out: dict[str, Timeline] = {}
    for table in tables:
        key = normalize_table_name(table, name)
        out[key] = Timeline.of(hook.load_table(key), policy=parsed.get(key))
    return out


def target_timeline(hook: IcebergCatalogHook, target: str) -> Timeline | None:
    from pyiceberg.exceptions import NoSuchTableError

    try:
        table = hook.get_catalog().load_table(target)
    except NoSuchTableError:
        return None
    return Timeline.of(table)
