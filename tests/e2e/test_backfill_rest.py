"""REST-created backfills on real Airflow: local Spark + SQLite, and a Spark cluster + PostgreSQL.

Both backfills are created through ``POST /api/v2/backfills`` and run at the
same time by the real scheduler and LocalExecutor. Each must leave one
snapshot per interval with ``ct.time`` at the interval's end and contents
equal to DuckDB over the inputs pinned for that time; and the cluster +
PostgreSQL table must equal the local + SQLite table tick by tick.
"""

from __future__ import annotations

import pytest

from tests.e2e.checks import FROM_DATE, INTERVALS, TO_DATE, check_backfilled_view, iso
from tests.e2e.conftest import Stack

pytestmark = [
    pytest.mark.timeout(2400),
    pytest.mark.e2e,
    pytest.mark.slow,
    pytest.mark.spark,
    pytest.mark.postgres,
]

LOCAL = "revenue_backfill_rest"
CLUSTER = "revenue_backfill_cluster"


def test_rest_backfills_on_local_and_cluster_match_duckdb_and_each_other(stack: Stack) -> None:
    api = stack.api
    for dag_id in (LOCAL, CLUSTER):
        backfill = api.create_backfill(dag_id, iso(FROM_DATE), iso(TO_DATE))
        assert backfill["dag_id"] == dag_id
        api.set_paused(dag_id, False)  # queued runs never start on a paused DAG
    runs = {
        dag_id: api.wait_for_runs(dag_id, INTERVALS, timeout=1800) for dag_id in (LOCAL, CLUSTER)
    }
    try:
        local = check_backfilled_view(runs[LOCAL], stack.embedded.load(), LOCAL)
        cluster = check_backfilled_view(runs[CLUSTER], stack.postgres.load(), CLUSTER)
    except AssertionError as exc:
        raise AssertionError(f"{exc}\n--- Airflow log tail ---\n{stack.log_tail()}") from exc
    assert cluster == local
