"""The same backfill with Airflow's metadata database on PostgreSQL (docs/deployment.md).

A second, separate Airflow (its own home, ports and embedded Iceberg catalog)
keeps its metadata in a fresh PostgreSQL database instead of SQLite; the
REST backfill must give the same result: one snapshot per interval, each
pinned to and equal to DuckDB over the inputs the feed wrote for its time.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from airflow_provider_ct.core.catalog import CatalogConfig
from devtools.devstack import LocalAirflow
from tests.e2e.checks import FROM_DATE, INTERVALS, TO_DATE, check_backfilled_view, iso
from tests.e2e_dags.e2e_dags import VIEWS
from tests.pgserver import PgServer

pytestmark = [
    pytest.mark.timeout(2400),
    pytest.mark.e2e,
    pytest.mark.slow,
    pytest.mark.spark,
    pytest.mark.postgres,
]

ROOT = Path(__file__).resolve().parents[2]
DAG_ID = "revenue_backfill_rest"


def test_backfill_with_the_metadata_db_on_postgres(tmp_path: Path, pg_server: PgServer) -> None:
    home = tmp_path / "airflow-home"
    env = {"AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": pg_server.create_database("airflow_meta")}
    with LocalAirflow(home=home, dags_folder=ROOT / "tests" / "e2e_dags", env=env) as airflow:
        api = airflow.start(list(VIEWS))
        api.create_backfill(DAG_ID, iso(FROM_DATE), iso(TO_DATE))
        api.set_paused(DAG_ID, False)
        runs = api.wait_for_runs(DAG_ID, INTERVALS, timeout=1800)
        assert not (home / "airflow.db").exists()  # nothing went to SQLite
        check_backfilled_view(runs, CatalogConfig.embedded(home).load(), DAG_ID)
