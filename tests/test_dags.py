"""Operators run by real Airflow (``dag.test()``), Spark through spark-submit."""

from __future__ import annotations

import importlib
import json
import sys
import threading
import time as _time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from airflow_provider_ct.core.catalog import CatalogConfig
from airflow_provider_ct.core.frontier import Frontier, timestamp_from_datetime
from airflow_provider_ct.core.tables import create_managed_table
from airflow_provider_ct.core.timeline import Timeline
from tests.conftest import SCHEMA
from tests.helpers import advance, oracle, rows_of
from tests.warm import private_warm_dir

ROOT = Path(__file__).resolve().parent.parent
pytestmark = [pytest.mark.airflow]


def test_example_dags_import_cleanly() -> None:
    from airflow.dag_processing.dagbag import DagBag

    # The SQL pipeline example resolves its folder against the catalog when parsed:
    # its input exists first, as `make demo` creates it (docs/pipelines.md).
    sys.path.insert(0, str(ROOT / "dags_examples"))
    from sql_pipeline_landing import create_landing

    create_landing(CatalogConfig.embedded().load())
    bag = DagBag(dag_folder=str(ROOT / "dags_examples"))
    assert bag.import_errors == {}
    sql_dag = bag.dags["shop_sql_pipeline"]
    groups = ["order_events", "orders_valid", "revenue_daily", "land_events"]
    assert list(sql_dag.task_group.children) == groups
    assert sql_dag.get_task("revenue_daily.mint").upstream_task_ids == {"orders_valid.append"}
    assert "revenue_per_customer" in bag.dags
    dag = bag.dags["revenue_per_customer"]
    assert dag.max_active_runs == 1
    ids = set(dag.task_ids)
    assert {
        "feed_shop",
        "view_shop_revenue_per_customer.mint",
        "view_shop_revenue_per_customer.write",
        "view_shop_revenue_per_customer.append",
    } <= ids
    append = dag.get_task("view_shop_revenue_per_customer.append")
    assert append.asset.uri == "iceberg://ct/shop/revenue_per_customer"
    assert [a.name for a in append.outlets] == ["ct-frontier:ct.shop.revenue_per_customer"]


def _load_example() -> Any:
    """The example DAG module as the test DAG bundle (tests/dags) loads it."""
    sys.path.insert(0, str(ROOT / "dags_examples"))
    import revenue_per_customer

    return revenue_per_customer


@pytest.mark.spark
@pytest.mark.slow
def test_example_dag_ticks_match_duckdb_and_sealed_reruns_change_nothing(
    airflow_db: None, default_catalog: CatalogConfig
) -> None:
    module = _load_example()
    dag = module.dag
    catalog = default_catalog.load()
    target = "shop.revenue_per_customer"
    starts = [datetime(2026, 3, 1, h, tzinfo=UTC) for h in (0, 1, 2)]
    for start in starts:
        run = dag.test(logical_date=start)
        assert run.state == "success", run.state
        end = run.data_interval_end  # the tick time T of this run
        table = catalog.load_table(target)
        timeline = Timeline.of(table)
        assert timeline.upper == Frontier.sealing(timestamp_from_datetime(end))
        head = timeline.entries[-1]
        assert head.time == timestamp_from_datetime(end)
        # The oracle reads the inputs as the run's feed task left them (their heads: the
        # feed commits them at T and nothing writes them after), not ct.inputs.
        fed = {
            name: catalog.load_table(name).metadata.current_snapshot().snapshot_id
            for name in (f"{module.NAMESPACE}.orders", f"{module.NAMESPACE}.customers")
        }
        assert rows_of(table) == oracle(catalog, module.REVENUE_SQL, fed)
    times = [t for t, _ in Timeline.of(catalog.load_table(target)).data_times()]
    assert times == [timestamp_from_datetime(s) for s in starts]  # manual runs end at logical
    # Re-running an interval that is already below the upper: mint skips, nothing changes.
    head_before = catalog.load_table(target).metadata.current_snapshot().snapshot_id
    run = dag.test(logical_date=starts[0])
    assert run.state == "success"
    assert catalog.load_table(target).metadata.current_snapshot().snapshot_id == head_before


def test_deferrable_frontier_sensor_defers_then_resumes_when_the_input_advances(
    airflow_db: None,
    default_catalog: CatalogConfig,
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    catalog = default_catalog.load()
    table = create_managed_table(catalog, "wait.input", SCHEMA)
    tick = datetime(2026, 4, 1, 1, tzinfo=UTC)
    t_ms = timestamp_from_datetime(tick)
    advance(table, t_ms - 10)  # behind T
    monkeypatch.setenv("CT_TEST_WAIT_TIME", str(t_ms))
    sys.path.insert(0, str(ROOT / "tests" / "dags"))
    import frontier_wait

    dag = frontier_wait.dag

    def advance_later() -> None:
        _time.sleep(4)
        advance(catalog.load_table("wait.input"), t_ms)

    thread = threading.Thread(target=advance_later)
    thread.start()
    started = _time.monotonic()
    with caplog.at_level("INFO"):
        run = dag.test(logical_date=tick)
    thread.join()
    assert run.state == "success"
    assert _time.monotonic() - started >= 3.5  # it really waited for the input
    assert "(from the triggerer)" in caplog.text  # resumed through execute_complete


def test_trigger_serialization_round_trip() -> None:
    from airflow_provider_ct.triggers.frontier import FrontierTrigger

    trigger = FrontierTrigger(
        tables=["a.b"],
        time=5,
        iceberg_conn_id="c",
        policies={"a.b": "wallclock:10"},
        poll_interval=2.0,
    )
    path, kwargs = trigger.serialize()
    assert path == "airflow_provider_ct.triggers.frontier.FrontierTrigger"
    again = FrontierTrigger(**json.loads(json.dumps(kwargs)))
    assert again.serialize() == (path, kwargs)


def test_trigger_run_fires_only_once_the_input_seals(default_catalog: CatalogConfig) -> None:
    import asyncio

    from airflow_provider_ct.triggers.frontier import FrontierTrigger

    catalog = default_catalog.load()
    table = create_managed_table(catalog, "trig.input", SCHEMA)
    advance(table, 5)

    async def scenario() -> dict[str, Any]:
        trigger = FrontierTrigger(tables=["trig.input"], time=10, poll_interval=0.2)
        events = trigger.run()
        first = asyncio.ensure_future(events.__anext__())
        await asyncio.sleep(1.0)
        assert not first.done(), "fired before the input sealed the time"
        await asyncio.to_thread(advance, catalog.load_table("trig.input"), 10)
        event = await asyncio.wait_for(first, 10)
        return dict(event.payload)

    payload = asyncio.run(scenario())
    assert payload == {"status": "success", "time": 10}


def test_mint_fails_before_spark_for_a_missing_input(
    airflow_db: None, default_catalog: CatalogConfig
) -> None:
    from airflow_provider_ct import MintOperator
    from airflow_provider_ct.exceptions import ConfigurationError

    op = MintOperator(task_id="m", target="ns.v", sql="SELECT * FROM ns.missing", time=5)
    with pytest.raises(ConfigurationError, match="'ns.missing' does not exist"):
        op.execute({})


def test_mint_holds_collection_inputs_once_and_only_those(
    airflow_db: None, default_catalog: CatalogConfig
) -> None:
    """A view reading a managed collection registers its read hold when it mints."""
    from airflow.sdk.exceptions import AirflowSkipException

    from airflow_provider_ct import MintOperator
    from airflow_provider_ct.collections.holds import read_holds
    from airflow_provider_ct.collections.registration import register_collection

    catalog = default_catalog.load()
    register_collection(catalog, "ops.status", SCHEMA, "differential")
    create_managed_table(catalog, "ops.plain", SCHEMA)
    for name in ("ops.status", "ops.plain"):
        advance(catalog.load_table(name), 20)
    sql = "SELECT s.k, p.v FROM ops.status AS s JOIN ops.plain AS p ON s.k = p.k"

    MintOperator(task_id="m", target="ops.view", sql=sql, time=5).execute({})
    status = catalog.load_table("ops.status")
    assert [(h.reader, h.since) for h in read_holds(status)] == [("ops.view", 5)]
    assert read_holds(catalog.load_table("ops.plain")) == []  # not a collection: untouched
    commits = len(status.metadata.metadata_log)
    MintOperator(task_id="m", target="ops.view", sql=sql, time=6).execute({})
    assert len(catalog.load_table("ops.status").metadata.metadata_log) == commits

    with pytest.raises(AirflowSkipException):  # a read-only deployment writes nothing
        MintOperator(task_id="r", target="ops.other", sql=sql, time=5, read_only=True).execute({})
    assert [h.reader for h in read_holds(catalog.load_table("ops.status"))] == ["ops.view"]


@pytest.mark.spark
@pytest.mark.slow
def test_continual_task_example_dag_runs_through_airflow(
    airflow_db: None, default_catalog: CatalogConfig, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The upsert, audit-log and retention tasks through dag.test(), as ``make demo`` runs them.

    On the warm engine (``CT_EXAMPLE_ENGINE=warm``, the demo's setting): the
    nine jobs share one driver instead of starting nine JVMs. The continual
    job through spark-submit is covered by tests/test_job_errors.py and the
    fault-injection tests.
    """
    sys.path.insert(0, str(ROOT / "dags_examples"))
    monkeypatch.setenv("CT_EXAMPLE_ENGINE", "warm")
    import continual_tasks

    continual_tasks = importlib.reload(continual_tasks)  # ENGINE is read at import
    catalog = default_catalog.load()
    runs = [datetime(2026, 5, 1, 0, m, tzinfo=UTC) for m in (0, 10, 20)]
    with private_warm_dir():
        for logical in runs:
            run = continual_tasks.dag.test(logical_date=logical)
            assert run.state == "success", run.state
    events = catalog.load_table("events.append_only").scan().to_arrow().to_pylist()
    assert events, "the feed appended nothing"
    # Model of each task over the input's snapshots (rows inserted per time).
    by_time: dict[int, list[dict[str, Any]]] = {}
    table = catalog.load_table("events.append_only")
    timeline = Timeline.of(table)
    for time, snapshot in timeline.data_times():
        rows = table.scan(snapshot_id=snapshot).to_arrow().to_pylist()
        by_time[time] = rows
    times = sorted(by_time)
    inserted = {
        t: [r for r in by_time[t] if r not in (by_time[p] if (p := _prev(times, t)) else [])]
        for t in times
    }
    upsert: dict[int, int] = {}
    audit: list[tuple[Any, ...]] = []
    for t in times:  # the first tick is the as-of: its snapshot (the first feed) counts
        batch = inserted[t]
        for key in {r["key"] for r in batch}:
            upsert[key] = max(r["val"] for r in batch if r["key"] == key)
        audit += [(r["key"], r["val"], r["ts"]) for r in batch if r["anomaly"]]
    assert rows_of(catalog.load_table("events.upsert")) == {(k, v): 1 for k, v in upsert.items()}
    from collections import Counter

    assert rows_of(catalog.load_table("events.audit_log")) == Counter(audit)
    # Retention with SNAPSHOT = true: everything at the as-of counts, minus > 1 h old.
    last = times[-1]
    recent = Counter(
        (r["key"], r["val"], r["ts"])
        for r in by_time[last]
        if r["ts"] >= min(last, max(times)) - 3_600_000
    )
    assert rows_of(catalog.load_table("events.recent_events")) == recent


def _prev(times: list[int], t: int) -> int | None:
    earlier = [x for x in times if x < t]
    return earlier[-1] if earlier else None
