"""End to end: real Airflow components run a REST-created backfill of a view.

Starts ``airflow standalone`` (scheduler, dag-processor, triggerer, API server;
SQLite, LocalExecutor) on free ports in its own process group, creates a
backfill of four intervals through ``POST /api/v2/backfills``, and checks the
view's table: one snapshot per interval, ``ct.time`` equal to each run's tick
time, contents equal to DuckDB over the inputs pinned for that time.
Everything started is stopped, also when the test fails.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from airflow_provider_ct.core.catalog import CatalogConfig
from airflow_provider_ct.core.frontier import timestamp_from_datetime
from airflow_provider_ct.core.timeline import Timeline
from tests.helpers import oracle, rows_of
from tests.pgserver import free_port

ROOT = Path(__file__).resolve().parents[2]
pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.spark]
DAG_ID = "revenue_backfill_e2e"


class Api:
    def __init__(self, base: str) -> None:
        self.base = base

    def call(self, method: str, path: str, body: Any = None) -> Any:
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(
            self.base + path,
            data=data,
            method=method,
            headers={"Content-Type": "application/json"},
        )
        with urllib.request.urlopen(request, timeout=30) as response:
            return json.load(response)


@pytest.fixture
def airflow_stack(tmp_path: Path) -> Iterator[tuple[Api, Path]]:
    home = tmp_path / "airflow-home"
    home.mkdir()
    port = free_port()
    env = {
        **os.environ,
        "AIRFLOW_HOME": str(home),
        "AIRFLOW__CORE__DAGS_FOLDER": str(ROOT / "tests" / "e2e_dags"),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "AIRFLOW__CORE__PARALLELISM": "4",
        "AIRFLOW__CORE__EXECUTOR": "LocalExecutor",
        "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_ALL_ADMINS": "True",
        "AIRFLOW__API__PORT": str(port),
        "AIRFLOW__CORE__EXECUTION_API_SERVER_URL": f"http://127.0.0.1:{port}/execution/",
        "AIRFLOW__LOGGING__WORKER_LOG_SERVER_PORT": str(free_port()),
        "AIRFLOW__LOGGING__TRIGGER_LOG_SERVER_PORT": str(free_port()),
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
    }
    for key in (
        "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN",
        "AIRFLOW__CORE__UNIT_TEST_MODE",
        "AIRFLOW_CONN_ICEBERG_CATALOG_DEFAULT",
    ):
        env.pop(key, None)
    log = (home / "standalone.log").open("w")
    proc = subprocess.Popen(
        [str(Path(sys.executable).parent / "airflow"), "standalone"],
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    api = Api(f"http://127.0.0.1:{port}/api/v2")
    try:
        deadline = time.monotonic() + 240
        while True:
            try:
                dags = api.call("GET", "/dags")
                if any(d["dag_id"] == DAG_ID for d in dags["dags"]):
                    break
            except OSError:
                pass
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(
                    "Airflow did not come up:\n" + (home / "standalone.log").read_text()[-4000:]
                )
            time.sleep(2)
        yield api, home
    finally:
        try:
            os.killpg(proc.pid, signal.SIGTERM)
            proc.wait(timeout=30)
        except (ProcessLookupError, subprocess.TimeoutExpired):
            os.killpg(proc.pid, signal.SIGKILL)
        log.close()


def test_rest_backfill_produces_one_snapshot_per_interval_matching_duckdb(
    airflow_stack: tuple[Api, Path],
) -> None:
    api, home = airflow_stack
    backfill = api.call(
        "POST",
        "/backfills",
        {
            "dag_id": DAG_ID,
            "from_date": "2026-02-01T00:00:00Z",
            "to_date": "2026-02-01T03:00:00Z",
            "max_active_runs": 1,
            "run_backwards": False,
            "reprocess_behavior": "none",
        },
    )
    assert backfill["dag_id"] == DAG_ID
    api.call("PATCH", f"/dags/{DAG_ID}", {"is_paused": False})
    deadline = time.monotonic() + 1500
    while True:
        runs = api.call("GET", f"/dags/{DAG_ID}/dagRuns?order_by=logical_date")["dag_runs"]
        states = [r["state"] for r in runs]
        if len(runs) >= 4 and all(s in ("success", "failed") for s in states):
            break
        assert time.monotonic() < deadline, f"backfill did not finish: {states}"
        time.sleep(5)
    assert [r["run_type"] for r in runs] == ["backfill"] * 4
    assert states == ["success"] * 4, (home / "standalone.log").read_text()[-4000:]

    catalog = CatalogConfig.embedded(home).load()
    table = catalog.load_table("e2e.revenue")
    timeline = Timeline.of(table)
    ends = [timestamp_from_datetime(datetime.fromisoformat(r["data_interval_end"])) for r in runs]
    assert ends == [timestamp_from_datetime(datetime(2026, 2, 1, h, tzinfo=UTC)) for h in range(4)]
    assert [t for t, _ in timeline.data_times()] == ends
    sys.path.insert(0, str(ROOT / "tests" / "e2e_dags"))
    import revenue_e2e

    for (time_ms, snapshot), entry in zip(
        timeline.data_times(), [e for e in timeline.entries if e.time is not None], strict=True
    ):
        assert entry.inputs is not None
        assert rows_of(table, snapshot) == oracle(catalog, revenue_e2e.SQL, entry.inputs), time_ms
