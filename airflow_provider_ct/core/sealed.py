"""Frontier events: what a table's append announces, and the time its readers may tick at.

Every append that moves a table's upper announces it (in Airflow: an asset
event whose ``extra`` is :func:`frontier_event_extra`). A reader scheduled on
those announcements ticks at the **latest time every input has sealed**:

* each input's events in this run are checked: well-formed, about that
  input, uppers never going backwards (several queued events: the newest
  counts), and covered by the table's actual upper (the table is the truth;
  an event ahead of it is another table's, or the table went backwards);
* the bound of every input is its table's actual upper, read now, which is
  at or past everything its events announced. Not the events' own upper:
  Airflow does not hand every event to some run (an event arriving while
  the next run waits behind ``max_active_runs`` joins that run's queue
  entry but not its consumed events, see docs/pipelines.md), so only the
  table guarantees that no sealed write is left behind;
* uppers are exclusive: ``upper = u`` seals ``t < u``, so the tick time is
  ``min(upper_i) - 1``. An empty (closed) upper bounds nothing.

Nothing here knows Airflow; ``airflow_provider_ct.assets`` feeds it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from airflow_provider_ct.core.frontier import Frontier, check_timestamp
from airflow_provider_ct.exceptions import AssetEventError, FrontierError, FrontierRegressionError

#: The ``extra`` key every frontier event carries; its value is the new upper
#: (epoch ms, or ``None`` for a closed table).
UPPER_KEY = "upper"
#: The key naming the table (``namespace.table``) the event is about.
TABLE_KEY = "table"


def frontier_event_extra(
    *,
    table: str,
    upper: Frontier,
    lower: Frontier | None = None,
    time: int | None = None,
    snapshot_id: int | None = None,
    batch_id: str | None = None,
    rows_inserted: int | None = None,
    rows_retracted: int | None = None,
    refresh: str | None = None,
    kind: str,
) -> dict[str, Any]:
    """The ``extra`` of one frontier event; what a writer does not know is left out.

    ``kind`` says which writer announced it (``view``, ``continual-task``,
    ``blind-write``, ``differential-write``, ``tick``), so a reader of the
    event log can tell a data change from a frontier-only tick.
    """
    extra: dict[str, Any] = {TABLE_KEY: table, UPPER_KEY: upper.to_json(), "kind": kind}
    optional = {
        "lower": None if lower is None else lower.to_json(),
        "time": time,
        "snapshot_id": snapshot_id,
        "batch_id": batch_id,
        "rows_inserted": rows_inserted,
        "rows_retracted": rows_retracted,
        "refresh": refresh,
    }
    extra.update({k: v for k, v in optional.items() if v is not None})
    return extra


def event_upper(extra: Any, table: str, where: str) -> Frontier:
    """The upper one event announces for ``table``, or :class:`AssetEventError` saying why not."""
    if not isinstance(extra, Mapping):
        raise AssetEventError(f"{where}: extra must be an object, got {extra!r:.200}")
    if UPPER_KEY not in extra:
        raise AssetEventError(
            f"{where}: extra has no {UPPER_KEY!r} (not a frontier event of airflow-provider-ct?): "
            f"{dict(extra)!r:.200}"
        )
    named = extra.get(TABLE_KEY)
    if named is not None and named != table:
        raise AssetEventError(f"{where}: the event is about {named!r}, not {table!r}")
    try:
        return Frontier.from_json(extra[UPPER_KEY])
    except FrontierError as exc:
        raise AssetEventError(f"{where}: bad {UPPER_KEY!r}: {exc}") from None


def newest_upper(table: str, extras: Sequence[tuple[str, Any]]) -> Frontier:
    """The newest of one table's event uppers (given oldest first, as ``(where, extra)``).

    Uppers only move forward; an event whose upper is below an earlier one's
    is refused rather than ignored, because it means the events are not
    this table's history.
    """
    if not extras:
        raise AssetEventError(f"no events for {table}")
    newest: Frontier | None = None
    for where, extra in extras:
        upper = event_upper(extra, table, where)
        if newest is not None and upper < newest:
            raise AssetEventError(
                f"{where}: upper {upper.to_summary()} of {table} is behind the upper "
                f"{newest.to_summary()} of an earlier event: uppers never go backwards"
            )
        newest = upper
    assert newest is not None
    return newest


def sealed_time(
    announced: Mapping[str, Frontier], table_uppers: Mapping[str, Frontier]
) -> int | None:
    """The latest time every input has sealed, or ``None`` when nothing is.

    :param announced: per input with events in this run, the newest upper they
        announce; each must be covered by the table's upper.
    :param table_uppers: every input's actual upper, read from the table now:
        the bounds.
    """
    unknown = sorted(set(announced) - set(table_uppers))
    if unknown:
        raise AssetEventError(f"events for tables that are not inputs: {unknown}")
    bound = Frontier.empty()
    for name, actual in sorted(table_uppers.items()):
        upper = announced.get(name, actual)
        if actual < upper:
            raise FrontierRegressionError(
                f"an event says {name} sealed up to {upper.to_summary()}, but the table's upper "
                f"is {actual.to_summary()}: the table went backwards, or the event is not its"
            )
        bound = bound.meet(actual)
    if bound.is_empty:
        raise AssetEventError(
            f"every input is closed ({sorted(table_uppers)}): there is no latest sealed time"
        )
    assert bound.time is not None
    if bound.time == 0:
        return None
    return check_timestamp(bound.time - 1, "sealed time")
