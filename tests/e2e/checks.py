"""What every end-to-end backfill must produce, checked against DuckDB."""

from __future__ import annotations

from collections import Counter
from datetime import UTC, datetime, timedelta
from typing import Any

from airflow_provider_ct.core.frontier import timestamp_from_datetime
from airflow_provider_ct.core.timeline import Timeline
from tests.e2e_dags.e2e_dags import INTERVALS, START, VIEWS, sql_for
from tests.helpers import fed_snapshots, oracle, rows_of

FROM_DATE = START.replace(tzinfo=UTC)
TO_DATE = FROM_DATE + timedelta(hours=INTERVALS - 1)
TICKS = [timestamp_from_datetime(FROM_DATE + timedelta(hours=h)) for h in range(INTERVALS)]


def iso(moment: datetime) -> str:
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


def check_backfilled_view(
    runs: list[dict[str, Any]], catalog: Any, dag_id: str
) -> list[Counter[tuple[Any, ...]]]:
    """One backfill run per interval, one snapshot per run, each equal to DuckDB.

    Returns the view's contents at each tick, for comparisons across stacks.
    """
    assert [r["run_type"] for r in runs] == ["backfill"] * INTERVALS, runs
    assert [r["state"] for r in runs] == ["success"] * INTERVALS, runs
    ends = [timestamp_from_datetime(datetime.fromisoformat(r["data_interval_end"])) for r in runs]
    assert ends == TICKS
    namespace = VIEWS[dag_id][0]
    table = catalog.load_table(f"{namespace}.revenue")
    timeline = Timeline.of(table)
    entries = [e for e in timeline.entries if e.time is not None]
    assert [e.time for e in entries] == TICKS  # one snapshot per interval, at its end
    contents = []
    for tick, entry in zip(TICKS, entries, strict=True):
        # The oracle reads what the run's feed task wrote for this tick (its stamped
        # commits in the inputs' history), not the view's ct.inputs; the pins must match.
        fed = fed_snapshots(catalog, namespace, tick)
        assert entry.inputs == fed, tick
        rows = rows_of(table, entry.snapshot_id)
        assert rows, f"empty view at {tick}"
        assert rows == oracle(catalog, sql_for(namespace), fed), tick
        contents.append(rows)
    return contents
