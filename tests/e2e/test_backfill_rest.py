"""REST-created backfills on real Airflow: local mode, a Spark cluster, a PostgreSQL catalog.

Three backfills are created through ``POST /api/v2/backfills`` and run at the
same time by the real scheduler and LocalExecutor: the baseline (local Spark,
SQLite catalog), the same with the write job on a Spark standalone cluster,
and the same with the catalog on PostgreSQL. Each must leave one snapshot per
interval with ``ct.time`` at the interval's end, its inputs pinned to the
snapshots the feed wrote for that time, and contents equal to DuckDB over
those; and each variant must equal the baseline tick by tick. One component
differs per variant, so a mismatch names its cause.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.checks import FROM_DATE, INTERVALS, TO_DATE, iso
from tests.e2e.conftest import Stack
from tests.e2e_dags.e2e_dags import VIEWS

pytestmark = [
    pytest.mark.timeout(2400),
    pytest.mark.e2e,
    pytest.mark.slow,
    pytest.mark.spark,
    pytest.mark.postgres,
]

LOCAL = "revenue_backfill_rest"
CLUSTER = "revenue_backfill_cluster"
POSTGRES = "revenue_backfill_pg"
Runs = dict[str, list[dict[str, Any]]]  # finished runs per DAG
Contents = list[Counter[tuple[Any, ...]]]  # a view's rows at each tick


@pytest.fixture(scope="module")
def backfilled(stack: Stack) -> Runs:
    """The three backfills, created at once; their finished runs per DAG."""
    api = stack.api
    for dag_id in (LOCAL, CLUSTER, POSTGRES):
        backfill = api.create_backfill(dag_id, iso(FROM_DATE), iso(TO_DATE))
        assert backfill["dag_id"] == dag_id
        api.set_paused(dag_id, False)  # queued runs never start on a paused DAG
    return {
        dag_id: api.wait_for_runs(dag_id, INTERVALS, timeout=2000)
        for dag_id in (LOCAL, CLUSTER, POSTGRES)
    }


@pytest.fixture(scope="module")
def checked(stack: Stack, backfilled: Runs) -> Callable[[str], Contents]:
    """A DAG's checked contents per tick; each DAG is checked against DuckDB once."""
    done: dict[str, Contents] = {}

    def check(dag_id: str) -> Contents:
        if dag_id not in done:
            done[dag_id] = stack.check_view(backfilled[dag_id], dag_id)
        return done[dag_id]

    return check


def test_rest_backfill_in_local_mode_matches_duckdb(checked: Callable[[str], Contents]) -> None:
    checked(LOCAL)


def test_write_job_on_a_spark_cluster_gives_the_same_table_as_local_mode(
    stack: Stack, checked: Callable[[str], Contents]
) -> None:
    assert checked(CLUSTER) == checked(LOCAL)
    # The master ran this DAG's write jobs, one per interval, and no others.
    apps = Counter(stack.spark.app_names())
    assert apps[f"ct-write-{VIEWS[CLUSTER][0]}.revenue"] == INTERVALS, apps
    assert not any(VIEWS[LOCAL][0] in name or VIEWS[POSTGRES][0] in name for name in apps), apps


def test_run_durations_are_recorded_per_engine(backfilled: Runs, artifacts: Path) -> None:
    """Each backfill run's wall time (sensor, mint, write, append and the feed task).

    Written to ``test-artifacts/e2e-run-seconds.json`` for the docs: the
    local DAGs write on the warm engine, the cluster DAG through spark-submit.
    A measurement, not a timing assertion (the machine's load decides it).
    """
    seconds = {
        dag_id: [_seconds(run) for run in runs] for dag_id, runs in sorted(backfilled.items())
    }
    assert all(len(values) == INTERVALS for values in seconds.values()), seconds
    assert all(s > 0 for values in seconds.values() for s in values), seconds
    (artifacts / "e2e-run-seconds.json").write_text(json.dumps(seconds, indent=2) + "\n")
    print(f"e2e backfill run seconds: {seconds}")


def _seconds(run: dict[str, Any]) -> float:
    start = datetime.fromisoformat(run["start_date"])
    end = datetime.fromisoformat(run["end_date"])
    return round((end - start).total_seconds(), 1)


def test_catalog_on_postgres_gives_the_same_table_as_on_sqlite(
    checked: Callable[[str], Contents],
) -> None:
    assert checked(POSTGRES) == checked(LOCAL)
