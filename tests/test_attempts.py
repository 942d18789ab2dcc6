"""Two attempts of one view tick (a retried write whose first attempt still runs).

The scenario that once made a view unreadable: attempt B passes its "is the
base still the head?" check, then attempt A stages and lands, then B writes.
Each attempt now stages under its own folder, so B cannot touch A's files;
whichever appends second finds the batch landed and removes its own files.
Checked against DuckDB over inputs the test chose, in both orders.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from airflow_provider_ct.core.catalog import CatalogConfig
from airflow_provider_ct.core.faults import ENV as FAILPOINTS
from airflow_provider_ct.core.reports import WriteReport, WriteStatus
from airflow_provider_ct.core.staging import list_manifests, referenced_files
from airflow_provider_ct.core.sweep import sweep_staged
from airflow_provider_ct.core.tables import create_managed_table
from airflow_provider_ct.core.timeline import Timeline
from airflow_provider_ct.operators.append import AppendOperator
from airflow_provider_ct.spark.write_job import run_write
from tests.conftest import SPARK_CATALOG_CONN as CONN
from tests.helpers import advance, local_path, mint_view_tick, oracle, replace_contents, rows_of

pytestmark = [pytest.mark.spark, pytest.mark.faults]

EVENTS = pa.schema([("id", pa.int64()), ("kind", pa.string()), ("amount", pa.int64())])
SQL = "SELECT kind, COUNT(*) AS n, SUM(amount) AS total FROM {ns}.events GROUP BY kind"
T1, T2 = 1_700_000_000_000, 1_700_000_060_000


def _files_under(uri: str) -> set[str]:
    return {f"file://{p}" for p in local_path(uri).rglob("*") if p.is_file()}


def _append(report: WriteReport) -> dict[str, Any]:
    op = AppendOperator(task_id="append", report=report.to_json(), iceberg_conn_id=CONN)
    out: dict[str, Any] = op.execute({})
    return out


def _events(table: Any, time_ms: int, rows: list[tuple[int, str, int]]) -> None:
    data = pa.Table.from_pylist(
        [dict(zip(EVENTS.names, r, strict=True)) for r in rows], schema=EVENTS
    )
    replace_contents(table, time_ms, data)
    advance(table, time_ms)


@pytest.mark.parametrize("lands_first", ["A", "B"])
def test_two_attempts_of_one_tick_never_share_files(
    spark: Any,
    spark_catalog_config: CatalogConfig,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    lands_first: str,
) -> None:
    ns = f"attempts_{lands_first.lower()}"
    catalog = spark_catalog_config.load()
    events = create_managed_table(catalog, f"{ns}.events", EVENTS)
    target, sql = f"{ns}.totals", SQL.format(ns=ns)
    # A first tick lands normally, so the second one has a base and retractions.
    _events(events, T1, [(1, "a", 10), (2, "b", 5), (3, "a", 7)])
    first = mint_view_tick(catalog, target, sql, T1).description
    assert _append(run_write(spark, spark_catalog_config, sql, first))["appended"]
    _events(events, T2, [(1, "a", 10), (3, "a", 8), (4, "c", 1), (4, "c", 1)])
    desc = mint_view_tick(catalog, target, sql, T2).description

    # Attempt B passes the base check, then pauses before writing anything.
    marker = tmp_path / "b-paused"
    monkeypatch.setenv(FAILPOINTS, f"staging.after-begin=sleep:6@{marker}")
    reports: dict[str, WriteReport] = {}
    b = threading.Thread(
        target=lambda: reports.setdefault("B", run_write(spark, spark_catalog_config, sql, desc))
    )
    b.start()
    deadline = time.monotonic() + 120
    while not marker.exists():
        assert time.monotonic() < deadline, "attempt B never reached its pause"
        time.sleep(0.1)
    # Attempt A runs meanwhile (the failpoint fires once) and, in order "A", lands.
    reports["A"] = run_write(spark, spark_catalog_config, sql, desc)
    outcomes = {}
    if lands_first == "A":
        outcomes["A"] = _append(reports["A"])
    b.join(timeout=300)
    assert not b.is_alive()
    assert {r.status for r in reports.values()} == {WriteStatus.STAGED}
    assert reports["A"].manifest != reports["B"].manifest
    second = "B" if lands_first == "A" else "A"
    if lands_first == "B":
        outcomes["B"] = _append(reports["B"])
    outcomes[second] = _append(reports[second])

    # One batch landed, by the attempt that appended first; the other says so.
    assert outcomes[lands_first]["appended"] and not outcomes[lands_first]["already_appended"]
    assert outcomes[second]["appended"] and outcomes[second]["already_appended"]
    assert outcomes[second]["landed_attempt"] == outcomes[lands_first]["attempt"]
    assert outcomes[second]["files_deleted"] >= 1
    table = catalog.load_table(target)
    timeline = Timeline.of(table)
    assert [e.batch_id for e in timeline.entries].count(desc.id) == 1
    # Readable (every referenced file exists) and equal to the query.
    assert all(local_path(f).exists() for f in referenced_files(table))
    pinned = {f"{ns}.events": events.metadata.current_snapshot_id}
    expected = oracle(catalog, sql, pinned)
    assert rows_of(table) == expected
    assert Counter(tuple(r) for r in spark.table(f"ct.{target}").collect()) == expected
    # The second attempt left nothing behind: no manifest, no file of its own.
    assert list(list_manifests(table.location(), table.metadata.properties)) == []
    assert _files_under(f"{table.location()}/data") == referenced_files(table)
    assert sweep_staged(table, grace_ms=0).orphans_deleted == 0
