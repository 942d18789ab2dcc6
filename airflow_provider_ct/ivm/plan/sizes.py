"""The refresh rules' numbers, gathered for one tick from snapshot summaries and history.

:mod:`airflow_provider_ct.ivm.plan.refresh` and
:mod:`airflow_provider_ct.ivm.plan.read_estimate` decide from numbers; this
module reads those numbers for a tick (the inputs' live rows and estimated
change, the view's past batches, the pinned snapshots' manifests) without
reading data, for the tick's decision (:mod:`.decision`). Metadata only
(PyIceberg), so it lives beside the rules and the decision, not in the
Spark job: the job gathers the facts with one call into this floor.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from typing import Any

from sqlglot import exp

from airflow_provider_ct.core.file_cache import file_cache
from airflow_provider_ct.core.keys import SummaryKeys
from airflow_provider_ct.core.settings import (
    RETRY_INCREMENTAL_AFTER,
    SMALL_RESULT_ROWS,
    rows_on_driver,
)
from airflow_provider_ct.core.tables import live_bytes, live_rows
from airflow_provider_ct.core.timeline import Timeline
from airflow_provider_ct.ivm.changes.table_changes import estimated_change_rows
from airflow_provider_ct.ivm.plan.decision import Discovery, Fallback, RefreshSettings, SizeRules
from airflow_provider_ct.ivm.plan.keyed_parts import driver_shape
from airflow_provider_ct.ivm.plan.planner import AGGREGATE, FULL, LINEAR, Plan
from airflow_provider_ct.ivm.plan.read_estimate import (
    Restriction,
    estimate_reads,
    not_cheaper_reason,
)
from airflow_provider_ct.ivm.plan.refresh import (
    PastTick,
    history_reason,
    keyed_reads_reason,
    large_change_reason,
    outer_reads_reason,
    read_history_reason,
    small_inputs_reason,
)

log = logging.getLogger("airflow_provider_ct.write_job")

#: Prices a grouped tick's restricted reads (input -> restrictions) before
#: they run: a ``not cheaper`` fallback, or None to go on.
ReadCheck = Callable[[dict[str, list[Restriction]]], "Fallback | None"]


@dataclass(frozen=True)
class Pinned:
    """A tick's inputs as its description pinned them, its query's hash and its settings."""

    #: Input name -> its PyIceberg table.
    tables: Mapping[str, Any]
    #: Input name -> the snapshot the tick reads (None: empty then).
    snapshots: Mapping[str, int | None]
    #: The query's hash (``ct.query-hash`` of the view's batches).
    digest: str
    settings: RefreshSettings


def size_rules(pinned: Pinned, table: Any, before: Mapping[str, int | None]) -> SizeRules:
    """This tick's refresh rules, for the decision's facts (:mod:`~.ivm.plan.decision`).

    Each plan's answer is gathered once (a decision asked again after a
    fallback reuses it). ``before``: the snapshots the target's last batch
    pinned, which the change is estimated from.
    """
    answers: dict[tuple[str, str], tuple[str, Mapping[str, Any]]] = {}

    def rules(plan: Plan) -> tuple[str, Mapping[str, Any]]:
        key = (plan.strategy, plan.reason)
        if key not in answers:
            why = auto_full_reason(pinned, plan, before, table)
            answers[key] = (why, {}) if why else recent_read_estimates(pinned, plan, table)
        return answers[key]

    return rules


def recent_read_estimates(pinned: Pinned, plan: Plan, table: Any) -> tuple[str, dict[str, Any]]:
    """``(reason, details)`` when the last read estimates send the tick full at once, else empty."""
    settings = pinned.settings
    if settings.read_share <= 0 or not plan.grouped:
        return "", {}
    past = view_history(table, pinned.digest)
    retry = settings.retry_after or RETRY_INCREMENTAL_AFTER
    found = read_history_reason(past, settings.read_share, retry)
    if found is None:
        return "", {}
    reason, share = found
    return reason, {"read_estimate": {"share": share, "carried": True}}


def keyed_read_history(
    pinned: Pinned, plan: Plan, table: Any, changed: Collection[str]
) -> Fallback | None:
    """A ``not keyed`` fallback, found before any change is read, when this tick changes a
    keyed subquery's table and the view's last batches went full because their keyed reads
    reached about every file (``ct.read-share``); None otherwise.

    Why: pricing keyed reads needs the keys, so the changes are read first;
    a view whose keys always spread over every file (TPC-H's) would pay that
    on every tick for nothing. The share is carried, and estimated again
    every ``CT_RETRY_INCREMENTAL_AFTER`` batches, as for grouped ticks.
    """
    settings = pinned.settings
    if settings.read_share <= 0 or not plan.keyed_inputs & set(changed):
        return None
    retry = settings.retry_after or RETRY_INCREMENTAL_AFTER
    found = read_history_reason(view_history(table, pinned.digest), settings.read_share, retry)
    if found is None:
        return None
    reason, share = found
    details = {"read_estimate": {"share": share, "carried": True}}
    return Fallback(Discovery.NOT_KEYED, f"keyed subqueries' reads: {reason}", details)


def read_check(pinned: Pinned, table: Any, base_snapshot_id: int | None) -> ReadCheck | None:
    """The cost check a grouped tick runs on its restricted reads (``auto`` only).

    Prices the reads with Iceberg's scan planning over the pinned snapshots
    (:mod:`~airflow_provider_ct.ivm.plan.read_estimate`) and returns a
    ``not cheaper`` :class:`Fallback`, carrying the estimate, when the full
    correction would cost less.
    """
    share = pinned.settings.read_share
    if share <= 0:
        return None
    tables = {name: (pinned.tables[name], snap) for name, snap in pinned.snapshots.items()}
    target_rows = live_rows(table, base_snapshot_id)

    def check(restrictions: dict[str, list[Restriction]]) -> Fallback | None:
        estimate = estimate_reads(tables, restrictions)
        log.info("restricted reads: %s", estimate.to_json())
        reason = not_cheaper_reason(estimate, share, target_rows, SMALL_RESULT_ROWS)
        if reason is None:
            return None
        return Fallback(Discovery.NOT_CHEAPER, reason, {"read_estimate": estimate.to_json()})

    return check


def auto_full_reason(
    pinned: Pinned, plan: Plan, before: Mapping[str, int | None], table: Any
) -> str:
    """Why the tick runs in full although its history allows an incremental one, or "".

    The refresh rules (:mod:`airflow_provider_ct.ivm.plan.refresh`) decide; this
    gathers their numbers from the pinned snapshots' summaries, without
    reading data: the inputs' live rows, and their estimated change since
    the snapshots the target's last batch pinned (``before``).
    """
    settings, inputs = pinned.settings, pinned.tables
    pins = {name: snap for name, snap in pinned.snapshots.items() if snap is not None}
    rows = sum(live_rows(inputs[name], snap) for name, snap in pins.items())
    driver = keyed_on_driver(plan)
    small = small_inputs_reason(rows, settings.small_rows, plan.strategy, on_driver=driver)
    if small is not None:
        return small
    keyed = keyed_reads_reason(rows, _keyed_reads(plan, before, pins), settings.small_rows)
    if keyed is not None:
        return keyed
    changed = sum(
        estimated_change_rows(inputs[name], before.get(name), after)
        for name, after in pins.items()
        if before.get(name) != after
    )
    large = large_change_reason(plan.strategy, rows, changed, settings.large_change)
    if large is not None or plan.strategy == FULL:
        return large or ""
    if plan.nested is not None and plan.nested.outer_inputs:
        sizes = {name: live_bytes(inputs[name], snap) for name, snap in pins.items()}
        outer = outer_reads_reason(sizes, plan.nested.outer_inputs, settings.read_share)
        if outer is not None:
            return outer
    past = view_history(table, pinned.digest)
    return history_reason(past, rows, settings.retry_after) or ""


def _keyed_reads(plan: Plan, before: Mapping[str, int | None], pins: Mapping[str, int]) -> int:
    """The query's table reads when this tick changes a table its keyed subqueries read
    (not one the driver keeps as a semi-join), else 0."""
    moved = {name for name, snap in pins.items() if before.get(name) != snap}
    if not (plan.keyed_inputs - plan.semi_inputs) & moved or keyed_on_driver(plan):
        return 0
    return sum(len(list(block.tree.find_all(exp.Table))) for block in plan.blocks)


def keyed_on_driver(plan: Plan) -> bool:
    """Whether a warm driver would likely evaluate the plan's keyed block itself, with no
    Spark job (:mod:`airflow_provider_ct.spark.ivm.keyed_driver`, ``keyed_linear``): an
    in-place aggregate or a linear view over one block whose subqueries inner-join
    tables of their own, a driver that takes rows, and a file cache to fetch them from.
    Such a tick costs what its keys' rows cost, not two evaluations of the query, so the
    keyed-reads rule does not send it to full; a tick the driver then refuses runs
    Spark's keyed terms, and the view's history judges them.
    """
    if plan.strategy not in (AGGREGATE, LINEAR) or len(plan.blocks) != 1:
        return False
    if not plan.blocks[0].keyed:
        return False
    if rows_on_driver() <= 0 or file_cache() is None:
        return False
    return driver_shape(plan.blocks[0].tree) is None


def view_history(table: Any, digest: str, depth: int = 24) -> list[PastTick]:
    """The view's last batches of this query that recorded their cost, oldest first."""
    past = []
    for entry in Timeline.of(table).entries[-depth:]:
        summary = entry.summary
        if summary.get(SummaryKeys.QUERY_HASH) != digest:
            continue
        try:
            ms, rows = int(summary[SummaryKeys.COMPUTE_MS]), int(summary[SummaryKeys.INPUT_ROWS])
        except (KeyError, ValueError):
            continue  # a quiet batch, or one from before costs were recorded
        strategy = summary.get(SummaryKeys.REFRESH, FULL)
        past.append(
            PastTick(strategy, ms, rows, _float_or_none(summary.get(SummaryKeys.READ_SHARE)))
        )
    return past


def _float_or_none(value: str | None) -> float | None:
    try:
        return None if value is None else float(value)
    except ValueError:
        return None
