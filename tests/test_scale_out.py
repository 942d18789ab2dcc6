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


def test_write_job_on_a_standalone_cluster_matches_local_mode(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    local_table, local_expected = _two_ticks(
        sqlite_config(tmp_path / "local"), "ct_local_cat", None, monkeypatch
    )
    with running_spark_cluster() as cluster:
        host, port = cluster.host_port
        monkeypatch.setenv(
            "AIRFLOW_CONN_CT_SPARK_CLUSTER",
            json.dumps({"conn_type": "spark", "host": host, "port": port}),
        )
        cluster_table, cluster_expected = _two_ticks(
            sqlite_config(tmp_path / "cluster"), "ct_cluster_cat", "ct_spark_cluster", monkeypatch
        )
        # Both ticks' write jobs ran on the cluster, not in local mode.
        assert cluster.app_names().count("ct-write-scale.view") == 2, cluster.app_names()
    assert local_expected == cluster_expected  # same deterministic inputs
    assert rows_of(cluster_table) == rows_of(local_table) == local_expected[-1]
    for table in (local_table, cluster_table):
        timeline = Timeline.of(table)
        assert rows_of(table, timeline.snapshot_at(1000)) == local_expected[0]


@pytest.mark.postgres
def test_postgres_catalog_gives_the_same_view_as_sqlite(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, pg_server: Any
) -> None:
    lite_table, lite_expected = _two_ticks(
        sqlite_config(tmp_path / "lite"), "ct_lite_cat", None, monkeypatch
    )
    pg_table, pg_expected = _two_ticks(
        _pg_config(pg_server, tmp_path / "pg"), "ct_pg_cat", None, monkeypatch
    )
    assert pg_expected == lite_expected
    assert rows_of(pg_table) == rows_of(lite_table) == lite_expected[-1]
    assert [t for t, _ in Timeline.of(pg_table).data_times()] == [1000, 2000]
