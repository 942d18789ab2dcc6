"""Collection operators and the tick DAG, run by real Airflow (``dag.test()``) or ``execute``."""

from __future__ import annotations

import os
import sys
import time
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from airflow_provider_ct.collections import (
    AppendOnlyCollection,
    read_holds,
    register_collection,
)
from airflow_provider_ct.core.catalog import CatalogConfig
from airflow_provider_ct.core.frontier import Frontier, now_ms
from airflow_provider_ct.core.tables import create_managed_table
from airflow_provider_ct.core.timeline import Timeline
from airflow_provider_ct.exceptions import CollectionClosedError, ReadOnlyError
from tests.conftest import SCHEMA
from tests.helpers import live_data_files, local_path, rows_of

ROOT = Path(__file__).resolve().parent.parent
pytestmark = [pytest.mark.airflow]


def _dag(module: str) -> Any:
    sys.path.insert(0, str(ROOT / "tests" / "dags"))
    return __import__(module).dag


def test_tick_dag_advances_compacts_and_expires(
    airflow_db: None, default_catalog: CatalogConfig
) -> None:
    catalog = default_catalog.load()
    register_collection(catalog, "tick.events", SCHEMA, "append-only")
    register_collection(catalog, "other.events", SCHEMA, "append-only")  # another namespace
    with AppendOnlyCollection.open(catalog, "tick.events", batch_interval_ms=0) as writer:
        for i in range(3):
            writer.blind_write([(i, "e")])
    before = len(catalog.load_table("tick.events").metadata.snapshots)
    started = now_ms()
    run = _dag("collections_tick").test(logical_date=datetime(2026, 6, 1, tzinfo=UTC))
    assert run.state == "success", run.state
    table = catalog.load_table("tick.events")
    timeline = Timeline.of(table)
    assert started <= int(timeline.upper.time) <= now_ms()  # ticked to the wall clock
    assert len(live_data_files(table)) == 1  # three small files compacted into one
    assert rows_of(table) == Counter({(0, "e"): 1, (1, "e"): 1, (2, "e"): 1})
    assert len(table.metadata.snapshots) < before + 2  # expiry ran after tick and compaction
    # Outside the DAG's namespaces: untouched.
    assert catalog.load_table("other.events").metadata.current_snapshot() is None


def test_writes_fed_from_xcom_land(airflow_db: None, default_catalog: CatalogConfig) -> None:
    run = _dag("collections_writes").test(logical_date=datetime(2026, 6, 2, tzinfo=UTC))
    assert run.state == "success", run.state
    catalog = default_catalog.load()
    assert rows_of(catalog.load_table("wr.log")) == Counter({(1, "a"): 1, (2, "b"): 1})
    assert rows_of(catalog.load_table("wr.state")) == Counter({(2, "b"): 1, (3, "c"): 1})


def test_operators_in_read_only_mode(
    airflow_db: None, default_catalog: CatalogConfig, monkeypatch: pytest.MonkeyPatch
) -> None:
    from airflow_provider_ct.operators.collections import (
        BlindWriteOperator,
        DifferentialWriteOperator,
    )
    from airflow_provider_ct.operators.collections_upkeep import TickCollectionsOperator

    catalog = default_catalog.load()
    register_collection(catalog, "ro.log", SCHEMA, "append-only")
    register_collection(catalog, "ro.state", SCHEMA, "differential")
    monkeypatch.setenv("CT_READ_ONLY", "yes")
    with pytest.raises(ReadOnlyError, match="read-only"):
        BlindWriteOperator(task_id="b", collection="ro.log", rows=[[1, "x"]]).execute({})
    report = DifferentialWriteOperator(
        task_id="d", collection="ro.state", desired=[{"k": 1, "v": "wanted"}]
    ).execute({})
    assert report["status"] == "pending"
    ticked = TickCollectionsOperator(task_id="t", time=1_000).execute({})
    assert {c["status"] for c in ticked["collections"]} == {"read-only"}
    assert catalog.load_table("ro.state").metadata.current_snapshot() is None
    monkeypatch.delenv("CT_READ_ONLY")
    ticked = TickCollectionsOperator(task_id="t", time=2_000).execute({})
    assert {c["collection"]: c["synced"] for c in ticked["collections"]} == {
        "ro.log": None,
        "ro.state": "landed",
    }
    assert rows_of(catalog.load_table("ro.state")) == Counter({(1, "wanted"): 1})


def test_register_close_and_reader_operators(
    airflow_db: None, default_catalog: CatalogConfig
) -> None:
    from airflow_provider_ct.operators.collections import (
        BlindWriteOperator,
        CloseCollectionOperator,
        RegisterCollectionOperator,
    )
    from airflow_provider_ct.operators.collections_upkeep import (
        MaintainTablesOperator,
        RegisterReaderOperator,
    )

    RegisterCollectionOperator(
        task_id="r", collection="op.log", columns={"k": "int64", "v": "string"}, kind="append-only"
    ).execute({})
    receipt = BlindWriteOperator(
        task_id="b",
        collection="op.log",
        rows={"rows": [[1, "x"], [2, "y"], [1, "x"]], "diffs": [1, 1, -1]},
    ).execute({})
    assert (receipt["inserted"], receipt["retracted"]) == (1, 0)  # +1 and -1 of (1, x) cancel
    catalog = default_catalog.load()
    assert rows_of(catalog.load_table("op.log")) == Counter({(2, "y"): 1})

    create_managed_table(catalog, "op.view", SCHEMA)
    RegisterReaderOperator(task_id="h", reader="op.view", inputs=["op.log"], since="5").execute({})
    holds = read_holds(catalog.load_table("op.log"))
    assert [(h.reader, h.since) for h in holds] == [("op.view", 5)]
    maintained = MaintainTablesOperator(task_id="m", retention_ms=0).execute({})
    assert maintained["expiry"][0]["holds"] == ["op.view@5"]

    closed = CloseCollectionOperator(task_id="c", collection="op.log").execute({})
    assert closed["upper"] is None
    assert Timeline.of(catalog.load_table("op.log")).upper == Frontier.empty()
    with pytest.raises(CollectionClosedError):
        BlindWriteOperator(task_id="b2", collection="op.log", rows=[[3, "z"]]).execute({})


def test_bad_operator_arguments_fail_at_parse_time() -> None:
    from airflow_provider_ct.exceptions import CollectionError, ConfigurationError
    from airflow_provider_ct.operators.collections import (
        BlindWriteOperator,
        DifferentialWriteOperator,
        RegisterCollectionOperator,
    )

    with pytest.raises(ValueError, match="exactly one"):
        BlindWriteOperator(task_id="b", collection="x.y")
    with pytest.raises(ValueError, match="desired"):
        DifferentialWriteOperator(task_id="d", collection="x.y", desired=[], insert=[])
    with pytest.raises(CollectionError, match="'sideways' is not one of"):
        RegisterCollectionOperator(task_id="r", collection="x.y", columns={}, kind="sideways")
    op = RegisterCollectionOperator(
        task_id="r2", collection="x.y", columns={"a": "no-such-type"}, kind="differential"
    )
    with pytest.raises(ConfigurationError, match="unknown Arrow type"):
        op.execute({})


def test_example_status_dag_keeps_status_and_audit_log(
    airflow_db: None, default_catalog: CatalogConfig
) -> None:
    sys.path.insert(0, str(ROOT / "tests" / "dags"))
    import example_collections

    catalog = default_catalog.load()
    logical = [datetime(2026, 7, 1, h, tzinfo=UTC) for h in range(4)]
    for when in logical:
        run = example_collections.status_dag.test(logical_date=when)
        assert run.state == "success", run.state
    status = catalog.load_table("ops.service_status")
    # One row per service, always: the differential collection mirrors the last probe.
    assert sorted(r[0] for r in rows_of(status).elements()) == ["api", "billing", "search"]
    audit = catalog.load_table("ops.audit_log")
    assert len({r[2] for r in rows_of(audit).elements()}) == len(logical)  # one batch per run
    assert example_collections.tick_dag.test().state == "success"
    assert Timeline.of(catalog.load_table("ops.audit_log")).upper.time >= now_ms() - 60_000


def test_maintain_operator_honours_the_sweep_settings(default_catalog: CatalogConfig) -> None:
    """``sweep=False`` sweeps nothing; ``sweep_grace_ms`` decides which leftovers are old enough.

    The leftover is what a blind write that died before its commit leaves:
    a file in a batch folder that no manifest accounts for, here ten
    minutes old (younger than the default grace of an hour).
    """
    from airflow_provider_ct.collections import MaintenanceSettings
    from airflow_provider_ct.collections.rows import write_parquet
    from airflow_provider_ct.operators.collections_upkeep import MaintainTablesOperator
    from airflow_provider_ct.tick_dag import collections_dag

    catalog = default_catalog.load()
    table = register_collection(catalog, "sw.log", SCHEMA, "append-only")
    with AppendOnlyCollection.open(catalog, "sw.log", batch_interval_ms=0) as writer:
        writer.blind_write([(1, "kept")])
    data = pa.table({"k": [2], "v": ["lost"]}, schema=SCHEMA)
    [written] = write_parquet(table, "blind-died", data)
    leftover = local_path(written)
    ten_minutes_ago = time.time() - 600
    os.utime(leftover, (ten_minutes_ago, ten_minutes_ago))

    off = MaintainTablesOperator(task_id="off", sweep=False, sweep_grace_ms=0).execute({})
    assert off["sweeps"] == {}
    assert leftover.exists()
    # The same through the tick DAG's settings (they used to be dropped there).
    settings = MaintenanceSettings(sweep=False, sweep_grace_ms=0)
    dag = collections_dag(dag_id="ct_no_sweep", maintenance=settings)
    assert dag.get_task("maintain").execute({})["sweeps"] == {}
    assert leftover.exists()
    young = MaintainTablesOperator(task_id="young").execute({})  # the default grace: an hour
    assert young["sweeps"]["sw.log"]["orphans_deleted"] == 0
    assert leftover.exists()
    swept = MaintainTablesOperator(task_id="swept", sweep_grace_ms=60_000).execute({})
    assert swept["sweeps"]["sw.log"]["orphans_deleted"] == 1
    assert not leftover.exists()
    assert rows_of(catalog.load_table("sw.log")) == Counter({(1, "kept"): 1})


def test_tick_dag_passes_every_maintenance_setting_to_the_maintain_task() -> None:
    """Including ``sweep`` and ``sweep_grace_ms``, which the factory once dropped."""
    from dataclasses import fields

    from airflow_provider_ct.collections import MaintenanceSettings
    from airflow_provider_ct.tick_dag import collections_dag

    settings = MaintenanceSettings(sweep=False, sweep_grace_ms=5_000, retention_ms=7)
    task = collections_dag(dag_id="ct_sweep_settings", maintenance=settings).get_task("maintain")
    assert (task.sweep, task.sweep_grace_ms, task.retention_ms) == (False, 5_000, 7)
    for field in fields(settings):
        assert getattr(task, field.name) == getattr(settings, field.name), field.name
    default = collections_dag(dag_id="ct_sweep_default").get_task("maintain")
    assert default.sweep is True
