"""Scale-out paths for real: a Spark standalone cluster and a PostgreSQL catalog."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from airflow_provider_ct.core.catalog import CatalogConfig
from airflow_provider_ct.core.timeline import Timeline
from airflow_provider_ct.operators.append import AppendOperator
from airflow_provider_ct.operators.write import WriteOperator
from tests.conftest import _pg_config, connection_json, sqlite_config
from tests.helpers import mint_view_tick, oracle, rows_of
from tests.sparkcluster import running_spark_cluster
from tests.test_view_correctness import DETAIL_SQL, Shop

pytestmark = [pytest.mark.spark, pytest.mark.slow]


def _tick(
    config: CatalogConfig,
    conn_id: str,
    target: str,
    sql: str,
    time: int,
    snapshots: dict[str, int | None],
    spark_conn_id: str | None = None,
) -> Counter[tuple[Any, ...]]:
    """Mint, write through spark-submit, append; returns the oracle's rows for T.

    The oracle reads the inputs at ``snapshots``, which the test recorded when
    it wrote them (not at the snapshots the description pinned).
    """
    catalog = config.load()
    desc = mint_view_tick(catalog, target, sql, time).description
    assert desc is not None
    report = WriteOperator(
        task_id="w",
        target=target,
        sql=sql,
        description=desc.to_json(),
        spark_conn_id=spark_conn_id,
        iceberg_conn_id=conn_id,
        driver_memory="1g",
        engine="spark-submit",
    ).execute({})
    out = AppendOperator(task_id="a", report=report, iceberg_conn_id=conn_id).execute({})
    assert out["appended"], out
    return oracle(catalog, sql, snapshots)


def _two_ticks(
    config: CatalogConfig, conn_id: str, spark_conn_id: str | None, monkeypatch: pytest.MonkeyPatch
) -> tuple[Any, list[Counter[tuple[Any, ...]]]]:
    monkeypatch.setenv(f"AIRFLOW_CONN_{conn_id.upper()}", connection_json(config))
    catalog = config.load()
    shop = Shop(catalog, "scale", seed=21)
    sql = DETAIL_SQL.replace("shop.", "scale.")
    expected = []
    for n in (1, 2):
        shop.mutate(1000 * n - 500)
        shop.seal(1000 * n)
        snapshots = shop.snapshots_at(1000 * n)
        expected.append(
            _tick(config, conn_id, "scale.view", sql, 1000 * n, snapshots, spark_conn_id)
        )
    return catalog.load_table("scale.view"), expected


def test_write_job_on_a_standalone_cluster_matches_the_oracle(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Both ticks' write jobs run on the cluster and land DuckDB's answer at each time.

    No local-mode baseline: the oracle over the test's own snapshots is the
    stronger check, and tests/e2e/test_backfill_rest.py compares a cluster
    backfill with a local one tick by tick through Airflow.
    """
    with running_spark_cluster() as cluster:
        host, port = cluster.host_port
        monkeypatch.setenv(
            "AIRFLOW_CONN_CT_SPARK_CLUSTER",
            json.dumps({"conn_type": "spark", "host": host, "port": port}),
        )
        table, expected = _two_ticks(
            sqlite_config(tmp_path / "cluster"), "ct_cluster_cat", "ct_spark_cluster", monkeypatch
        )
        # Both ticks' write jobs ran on the cluster, not in local mode.
        assert cluster.app_names().count("ct-write-scale.view") == 2, cluster.app_names()
    assert expected[0] != expected[1]  # the second tick had something to change
    assert rows_of(table) == expected[-1]
    assert rows_of(table, Timeline.of(table).snapshot_at(1000)) == expected[0]


@pytest.mark.postgres
def test_postgres_catalog_ticks_match_the_oracle(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, pg_server: Any
) -> None:
    """The same two ticks with the catalog on PostgreSQL (tests/e2e compares it with SQLite)."""
    table, expected = _two_ticks(
        _pg_config(pg_server, tmp_path / "pg"), "ct_pg_cat", None, monkeypatch
    )
    assert expected[0] != expected[1]
    assert rows_of(table) == expected[-1]
    assert rows_of(table, Timeline.of(table).snapshot_at(1000)) == expected[0]
    assert [t for t, _ in Timeline.of(table).data_times()] == [1000, 2000]
