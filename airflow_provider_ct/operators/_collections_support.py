"""Argument parsing and asset announcements shared by the collection operators.

The collection operators live in two modules (:mod:`.collections` for
registration and writes, :mod:`.collections_upkeep` for ticking, maintenance
and read holds); what both need is here, so neither imports the other's
private helpers and both parse their arguments and announce uppers alike.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from airflow.sdk import BaseOperator

from airflow_provider_ct.assets import emit_frontier_event, first_alias, table_asset
from airflow_provider_ct.core.frontier import Frontier, parse_timestamp
from airflow_provider_ct.core.sealed import frontier_event_extra
from airflow_provider_ct.exceptions import ConfigurationError
from airflow_provider_ct.hooks.iceberg import IcebergCatalogHook


def optional_time(value: Any, what: str = "time") -> int | None:
    """A templated time argument, or ``None`` when it is not given."""
    if value in (None, ""):
        return None
    return parse_timestamp(value, what)


def announce_upper(
    operator: BaseOperator,
    context: Any,
    hook: IcebergCatalogHook,
    collection: str,
    upper: Frontier,
    **fields: Any,
) -> None:
    """Emit ``collection``'s asset event through the operator's first AssetAlias outlet.

    Called only when the collection's upper moved; see ``assets.py`` for why an alias.
    """
    alias = first_alias(operator.outlets)
    if alias is None:
        return
    catalog_name = hook.get_config().name
    asset = table_asset(collection, catalog_name)
    table = asset.name.removeprefix(f"{catalog_name}.")
    extra = frontier_event_extra(table=table, upper=upper, **fields)
    emit_frontier_event(context, alias, asset, extra)


def name_list(value: Sequence[str] | None, what: str) -> list[str] | None:
    """A list of names; a plain string is refused, since ``list("ops")`` is ``["o", "p", "s"]``."""
    if value is None:
        return None
    if isinstance(value, str | bytes):
        raise ConfigurationError(f"{what} must be a list of names, got the string {value!r:.100}")
    return list(value)
