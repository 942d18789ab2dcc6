"""Airflow assets of managed tables: announcing frontiers, and ticking on them.

Every managed table is an Airflow :class:`~airflow.sdk.Asset`
(:func:`table_asset`). A writer announces that it moved a table's upper
with an asset event whose ``extra`` is a frontier event
(:func:`airflow_provider_ct.core.sealed.frontier_event_extra`). It emits it
through an :class:`~airflow.sdk.AssetAlias` outlet (:func:`frontier_alias`)
rather than a plain ``Asset`` outlet, because Airflow emits an event for
every plain outlet of a successful task: a loser of compare-and-append, a
quiet retry or a tick that did not move anything succeeds too, and must not
tell downstream DAGs that something was sealed. Through an alias, only the
events the task adds exist; DAGs scheduled on the table's ``Asset`` are
triggered by them all the same.

A reader with ``time="sealed"`` ticks at the latest time its inputs have
sealed (:func:`sealed_tick_time`): the run's triggering events are checked
against the input tables, whose uppers bound the tick; never the wall clock.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Any

from airflow.sdk import Asset, AssetAlias

from airflow_provider_ct.core.continual import parse_continual_task
from airflow_provider_ct.core.frontier import Frontier
from airflow_provider_ct.core.query import normalize_table_name, parse_query
from airflow_provider_ct.core.sealed import newest_upper, sealed_time
from airflow_provider_ct.core.tables import table_asset_uri
from airflow_provider_ct.core.timeline import Timeline

log = logging.getLogger(__name__)

#: ``time=`` value of views and continual tasks that tick at what their inputs sealed.
SEALED = "sealed"
#: Prefix of the aliases frontier events are emitted through.
ALIAS_PREFIX = "ct-frontier:"


def table_asset(table: str, catalog_name: str = "ct") -> Asset:
    """The Airflow Asset of a managed table (schedule other DAGs on it)."""
    name = normalize_table_name(table, catalog_name)
    return Asset(name=f"{catalog_name}.{name}", uri=table_asset_uri(catalog_name, name))


def frontier_alias(what: str) -> AssetAlias:
    """The alias a writer emits frontier events through (``what``: a table or a tick DAG)."""
    return AssetAlias(name=f"{ALIAS_PREFIX}{what}")


def first_alias(outlets: Sequence[Any]) -> AssetAlias | None:
    """The alias a writer task emits its frontier events through (its first AssetAlias outlet)."""
    return next((o for o in outlets if isinstance(o, AssetAlias)), None)


def emit_frontier_event(
    context: Mapping[str, Any], alias: AssetAlias, asset: Asset, extra: dict[str, Any]
) -> None:
    """Add one asset event for ``asset`` through ``alias`` (an outlet of the running task)."""
    events = context.get("outlet_events")
    if events is None:  # execute() called outside a task run (a script, a unit test)
        log.info("no outlet_events in the context: not announcing %s %s", asset.name, extra)
        return
    events[alias].add(asset, extra=extra)
    log.info("announced %s: %s", asset.name, extra)


def view_input_assets(sql: str, catalog_name: str = "ct") -> list[Asset]:
    """The assets of a view's inputs, for ``schedule=`` of its DAG."""
    parsed = parse_query(sql, catalog_name=catalog_name)
    return [table_asset(name, catalog_name) for name in parsed.inputs]


def continual_task_input_assets(
    definition: str, namespace: str | None = None, catalog_name: str = "ct"
) -> list[Asset]:
    """The assets of a continual task's input, then its references (schedule on the first)."""
    task = parse_continual_task(definition, default_namespace=namespace, catalog_name=catalog_name)
    return [table_asset(name, catalog_name) for name in (task.input, *task.references)]


def _events_of(context: Mapping[str, Any], asset: Asset) -> Sequence[Any]:
    accessor = context.get("triggering_asset_events")
    if not accessor:
        return ()
    try:
        return list(accessor[asset])
    except KeyError:
        return ()


def announced_uppers(
    context: Mapping[str, Any], inputs: Sequence[str], catalog_name: str
) -> dict[str, Frontier]:
    """Per input with triggering events in this run, the newest upper they announce."""
    announced: dict[str, Frontier] = {}
    for name in inputs:
        asset = table_asset(name, catalog_name)
        events = sorted(_events_of(context, asset), key=lambda e: e.timestamp)
        if events:
            extras = [
                (f"asset event of {asset.name} at {e.timestamp.isoformat()}", e.extra)
                for e in events
            ]
            announced[name] = newest_upper(name, extras)
    return announced


def sealed_tick_time(
    context: Mapping[str, Any], inputs: Mapping[str, Timeline], catalog_name: str
) -> int | None:
    """The run's tick time: the latest time every input sealed (events checked, tables bound).

    ``None`` when no input sealed anything yet.
    """
    announced = announced_uppers(context, list(inputs), catalog_name)
    actual = {name: timeline.upper for name, timeline in inputs.items()}
    time = sealed_time(announced, actual)
    log.info(
        "sealed time %s from events %s and table uppers %s",
        time,
        {k: v.to_summary() for k, v in announced.items()},
        {k: v.to_summary() for k, v in actual.items()},
    )
    return time
