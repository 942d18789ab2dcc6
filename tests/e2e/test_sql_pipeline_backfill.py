"""The SQL folder ``tests/pipelines/shop`` under the real scheduler, backfilled through REST.

``POST /api/v2/backfills`` over three past hours of ``sql_pipeline_backfill``
(tests/e2e_dags/e2e_sql_pipeline.py): each run feeds the inputs at its
interval's end, then ticks the streaming table, the view over it and the
view over that view (through a temporary view) at that same time. Checked
per tick: every dataset's contents as of the tick equal DuckDB over the
inputs' contents at that tick, read from the inputs' own history (the
feed's batch ids), never from what the pipeline recorded.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

import pytest

from airflow_provider_ct.core.frontier import Frontier, timestamp_from_datetime
from airflow_provider_ct.core.timeline import Timeline
from tests.e2e.checks import FROM_DATE, TICKS, TO_DATE, iso
from tests.e2e.conftest import Stack
from tests.e2e_dags import e2e_dags
from tests.helpers import rows_of
from tests.pipelines.shop_feed import INTERVALS, NAMESPACE, SQL_PIPELINE_DAG, START
from tests.pipelines.shop_oracle import DATASETS, expected

pytestmark = [pytest.mark.timeout(2400), pytest.mark.e2e, pytest.mark.slow, pytest.mark.spark]


def _fed(table: Any, batch_id: str) -> int:
    """The snapshot the feed committed under ``batch_id`` (the test's record of the input)."""
    from pyiceberg.table.snapshots import ancestors_of

    found = [
        s.snapshot_id
        for s in ancestors_of(table.current_snapshot(), table.metadata)
        if s.summary is not None and s.summary.additional_properties.get("ct.batch-id") == batch_id
    ]
    assert len(found) == 1, (batch_id, found)
    return int(found[0])


def test_a_sql_folder_backfilled_through_rest_matches_duckdb_at_every_tick(stack: Stack) -> None:
    assert (START, INTERVALS) == (e2e_dags.START, e2e_dags.INTERVALS)  # the same closed hours
    api = stack.api
    backfill = api.create_backfill(SQL_PIPELINE_DAG, iso(FROM_DATE), iso(TO_DATE))
    assert backfill["dag_id"] == SQL_PIPELINE_DAG
    api.set_paused(SQL_PIPELINE_DAG, False)
    runs = api.wait_for_runs(SQL_PIPELINE_DAG, INTERVALS, timeout=2000)
    assert [r["run_type"] for r in runs] == ["backfill"] * INTERVALS, runs
    assert [r["state"] for r in runs] == ["success"] * INTERVALS, (runs, stack.log_tail())
    ends = [timestamp_from_datetime(datetime.fromisoformat(r["data_interval_end"])) for r in runs]
    assert ends == TICKS
    catalog = stack.embedded.load()
    raw = catalog.load_table(f"{NAMESPACE}.raw_orders")
    customers = catalog.load_table(f"{NAMESPACE}.customers")
    seen_rows = 0
    for tick in TICKS:
        inputs = (
            raw.scan(snapshot_id=_fed(raw, f"feed-raw_orders-{tick}")).to_arrow(),
            customers.scan(snapshot_id=_fed(customers, f"feed-customers-{tick}")).to_arrow(),
        )
        for dataset in DATASETS:
            table = catalog.load_table(f"{NAMESPACE}.{dataset}")
            timeline = Timeline.of(table)
            assert timeline.upper == Frontier.sealing(TICKS[-1]), dataset
            rows = rows_of(table, timeline.snapshot_at(tick))
            assert rows == expected(*inputs, dataset), (dataset, tick)
            seen_rows += len(rows)
    assert seen_rows > 0
