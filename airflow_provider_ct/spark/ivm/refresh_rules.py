"""The refresh rules' numbers, gathered for one tick from snapshot summaries and history.

:mod:`airflow_provider_ct.ivm.plan.refresh` and
:mod:`airflow_provider_ct.ivm.plan.read_estimate` decide from numbers; this
module reads those numbers for a tick (the inputs' live rows and estimated
change, the view's past batches, the pinned snapshots' manifests) without
reading data, so :mod:`.write_job` only asks "full, and why?".
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from airflow_provider_ct.core.keys import SummaryKeys
from airflow_provider_ct.core.query import query_hash
from airflow_provider_ct.core.settings import RETRY_INCREMENTAL_AFTER, SMALL_RESULT_ROWS
from airflow_provider_ct.core.tables import live_rows
from airflow_provider_ct.core.timeline import Timeline
from airflow_provider_ct.exceptions import IncrementalNotCheaperError
from airflow_provider_ct.ivm.changes.table_changes import estimated_change_rows
from airflow_provider_ct.ivm.plan.planner import FULL
from airflow_provider_ct.ivm.plan.read_estimate import (
    Restriction,
    estimate_reads,
    not_cheaper_reason,
)
from airflow_provider_ct.ivm.plan.refresh import (
    PastTick,
    history_reason,
    large_change_reason,
    read_history_reason,
    small_inputs_reason,
)
from airflow_provider_ct.spark.tick import Tick

log = logging.getLogger("airflow_provider_ct.write_job")


def recent_read_estimates(tick: Tick, table: Any) -> tuple[str, dict[str, Any]]:
    """``(reason, details)`` when the last read estimates send the tick full at once, else empty."""
    if tick.read_share <= 0 or not tick.plan.grouped:
        return "", {}
    past = view_history(table, query_hash(tick.sql))
    found = read_history_reason(past, tick.read_share, tick.retry_after or RETRY_INCREMENTAL_AFTER)
    if found is None:
        return "", {}
    reason, share = found
    return reason, {"read_estimate": {"share": share, "carried": True}}


def read_check(
    tick: Tick, inputs: dict[str, Any], table: Any
) -> Callable[[dict[str, list[Restriction]]], None] | None:
    """The cost check a grouped tick runs on its restricted reads (``auto`` only).

    Prices the reads with Iceberg's scan planning over the pinned snapshots
    (:mod:`~airflow_provider_ct.ivm.plan.read_estimate`) and raises
    :class:`IncrementalNotCheaperError`, carrying the estimate, when the
    full correction would cost less.
    """
    if tick.read_share <= 0:
        return None
    pinned = {name: (inputs[name], snap) for name, snap in tick.desc.inputs.items()}
    target_rows = live_rows(table, tick.desc.base_snapshot_id)

    def check(restrictions: dict[str, list[Restriction]]) -> None:
        estimate = estimate_reads(pinned, restrictions)
        log.info("restricted reads: %s", estimate.to_json())
        reason = not_cheaper_reason(estimate, tick.read_share, target_rows, SMALL_RESULT_ROWS)
        if reason is not None:
            raise IncrementalNotCheaperError(reason, estimate.to_json())

    return check


def auto_full_reason(
    tick: Tick, inputs: dict[str, Any], before: dict[str, int | None], table: Any
) -> str | None:
    """Why the tick runs in full although its history allows an incremental one, or None.

    The refresh rules (:mod:`airflow_provider_ct.ivm.plan.refresh`) decide; this
    gathers their numbers from the pinned snapshots' summaries, without
    reading data: the inputs' live rows, and their estimated change since
    the snapshots the target's last batch pinned (``before``).
    """
    pinned = {name: snap for name, snap in tick.desc.inputs.items() if snap is not None}
    rows = sum(live_rows(inputs[name], snap) for name, snap in pinned.items())
    small = small_inputs_reason(rows, tick.small_rows)
    if small is not None:
        return small
    changed = sum(
        estimated_change_rows(inputs[name], before.get(name), after)
        for name, after in pinned.items()
        if before.get(name) != after
    )
    large = large_change_reason(tick.plan.strategy, rows, changed, tick.large_change)
    if large is not None or tick.plan.strategy == FULL:
        return large
    past = view_history(table, query_hash(tick.sql))
    return history_reason(past, rows, tick.retry_after)


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
