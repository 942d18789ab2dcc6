"""A pipeline of SQL and Python files, and SDP's ``init`` project, ticked through ``dag.test()``.

``tests/pipelines/mixed``: a SQL streaming table over ``raw_events``, and in
Python (SDP's decorators) a view from ``spark.sql`` joining it with
``customers``, a temporary view and a view over it built with DataFrame
calls (recomputed in full), and a streaming table from
``spark.readStream``. Five ticks, each checked against DuckDB over the
rows the test wrote (``tests/pipelines/mixed_oracle.py``), the fourth a
full refresh of the streaming table ``events`` through the DAG's param
(its rows the source's now, only it committed, its append retried landing
once). ``tests/pipelines/sdp_init``: the project ``spark-pipelines init``
writes, dry-run and ticked unchanged.
"""

from __future__ import annotations

import sys
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from pyiceberg.expressions import EqualTo

from airflow_provider_ct.core.catalog import CatalogConfig
from airflow_provider_ct.core.frontier import Frontier
from airflow_provider_ct.core.timeline import Timeline
from tests.helpers import XComTI, rows_of, run_at_sealed_time, task_xcom
from tests.pipelines.customers import CustomersInput
from tests.pipelines.mixed_oracle import CUSTOMERS, DATASETS, RAW, expected
from tests.warm import private_warm_dir

pytestmark = [pytest.mark.spark, pytest.mark.airflow, pytest.mark.slow]

FOLDERS = Path(__file__).resolve().parent / "pipelines"
Row = tuple[int, int, int, str]


class Shop(CustomersInput):
    """The inputs in the catalog and the same rows in Python."""

    def __init__(self, catalog: Any) -> None:
        catalog.create_namespace("mixp")
        self.catalog = catalog
        self.raw_table = catalog.create_table("mixp.raw_events", RAW)
        self.customers_table = catalog.create_table("mixp.customers", CUSTOMERS)
        self.raw: dict[int, Row] = {}  # the raw table now
        self.inserted: list[Row] = []  # every raw row ever inserted
        self.events: list[Row] = []  # what the streaming table ``events`` processed
        self.customers: dict[int, str] = {}

    def event(self, *rows: Row) -> None:
        data = [dict(zip(RAW.names, r, strict=True)) for r in rows]
        self.raw_table.append(pa.Table.from_pylist(data, RAW))
        self.raw.update({r[0]: r for r in rows})
        self.inserted += rows
        self.events += [r for r in rows if r[3] != "test"]

    def forget(self, event_id: int) -> None:
        """Delete a raw row: a streaming table keeps what it processed."""
        self.raw_table.delete(EqualTo("event_id", event_id))
        del self.raw[event_id]

    def refreshed(self) -> None:
        """``events`` after its full refresh: the raw rows of now, processed once."""
        self.events = [r for r in self.raw.values() if r[3] != "test"]

    def expected(self, dataset: str) -> Counter[tuple[Any, ...]]:
        def arrow(rows: list[Row]) -> pa.Table:
            return pa.Table.from_pylist([dict(zip(RAW.names, r, strict=True)) for r in rows], RAW)

        customers = pa.Table.from_pylist(
            [{"customer_id": k, "region": v} for k, v in self.customers.items()], CUSTOMERS
        )
        return expected(arrow(self.events), arrow(self.inserted), customers, dataset)

    def table(self, dataset: str) -> Any:
        return self.catalog.load_table(f"mixp.{dataset}")

    def check(self) -> None:
        for dataset in DATASETS:
            assert rows_of(self.table(dataset)) == self.expected(dataset), dataset

    def heads(self) -> dict[str, int | None]:
        return {d: self.table(d).metadata.current_snapshot_id for d in DATASETS}


def _dag(kind: str, monkeypatch: pytest.MonkeyPatch) -> Any:
    monkeypatch.setenv("CT_TEST_SQL_PIPELINE_MIXED", kind)
    sys.path.insert(0, str(Path(__file__).resolve().parent / "dags"))
    sys.modules.pop("sql_pipeline_mixed", None)
    import sql_pipeline_mixed

    return sql_pipeline_mixed.dag


@pytest.fixture
def mixed(
    airflow_db: None, default_catalog: CatalogConfig, monkeypatch: pytest.MonkeyPatch
) -> Iterator[tuple[Shop, Any]]:
    with private_warm_dir():
        world = Shop(default_catalog.load())
        yield world, _dag("mixed", monkeypatch)


def _tick(world: Shop, dag: Any, **conf: Any) -> int:
    return run_at_sealed_time(dag, world.last_commit_ms(), conf)


def test_sql_and_python_datasets_tick_five_times_as_duckdb_says_with_a_full_refresh(
    mixed: tuple[Shop, Any],
) -> None:
    world, dag = mixed
    assert list(dag.task_group.children) == [
        "events",
        "customer_spend",
        "region_big",
        "large_events",
    ]
    assert dag.get_task("region_big.write").refresh == "full"  # DataFrame calls: full
    assert dag.get_task("customer_spend.write").refresh == "auto"  # spark.sql: its plan
    for customer_id, region in ((1, "eu"), (2, "us"), (3, "eu")):
        world.customer(customer_id, region)
    world.event((1, 1, 80, "buy"), (2, 1, 40, "buy"), (3, 2, 70, "test"), (4, 3, 120, "buy"))
    time = _tick(world, dag)
    world.check()
    for dataset in DATASETS:  # one time for the whole run
        assert Timeline.of(world.table(dataset)).upper == Frontier.sealing(time), dataset

    world.event((5, 2, 60, "buy"), (6, 2, 55, "buy"), (7, 3, 9, "buy"))
    world.customer(2, "eu")
    world.customer(3, None)
    _tick(world, dag)
    world.check()
    run_id = _last_run_id(dag.dag_id)  # spark.sql kept incrementally; DataFrame calls in full
    assert task_xcom(dag.dag_id, run_id, "customer_spend.write")["strategy"] == "aggregate"
    assert task_xcom(dag.dag_id, run_id, "region_big.write")["strategy"] == "full"

    # A raw row deleted: the streaming table keeps what it processed (no refresh yet).
    world.forget(1)
    world.event((8, 1, 200, "buy"))
    world.customer(3, "apac")
    _tick(world, dag)
    world.check()
    assert (1, 1, 80) in rows_of(world.table("events"))

    # Full refresh of the streaming table: its rows are the raw rows of now, and
    # nothing else commits (its readers skip the run).
    before = world.heads()
    time = _tick(world, dag, full_refresh=["events"])
    world.refreshed()
    assert rows_of(world.table("events")) == world.expected("events")
    assert (1, 1, 80) not in rows_of(world.table("events"))
    after = world.heads()
    assert [d for d in DATASETS if after[d] != before[d]] == ["events"]
    assert Timeline.of(world.table("events")).upper == Frontier.sealing(time)
    _retry_lands_once(world, dag, after)

    # The next tick: the readers tick from the refreshed content.
    # (``dag.test()`` in one process keeps the last run's conf in the DAG's params: reset it.)
    world.event((9, 3, 300, "buy"))
    _tick(world, dag, full_refresh=[])
    world.check()
    assert Timeline.of(world.table("events")).entries[-1].operation == "append"  # no refresh
    assert world.expected("region_big")  # the oracle is not trivially empty


def _retry_lands_once(world: Shop, dag: Any, heads: dict[str, int | None]) -> None:
    """The full refresh's append run again with its write's report: already landed."""
    from airflow_provider_ct.operators.continual import ContinualAppendOperator

    run_id = _last_run_id(dag.dag_id)
    minted = task_xcom(dag.dag_id, run_id, "events.mint")
    report = task_xcom(dag.dag_id, run_id, "events.write")
    assert report["rows_to_delete"] > 0  # the truncation: every row it held
    original = dag.get_task("events.append")
    retry = ContinualAppendOperator(
        task_id="retry",
        write_task_id="events.write",
        description_task_id="events.mint",
        definition=original.definition,
        namespace=original.namespace,
        iceberg_conn_id=original.iceberg_conn_id,
        full_refresh=True,
    )
    outcome = retry.execute({"ti": XComTI({"events.mint": minted, "events.write": report})})
    assert outcome["already_appended"]
    assert world.heads() == heads


def _last_run_id(dag_id: str) -> str:
    from airflow.models.dagrun import DagRun
    from airflow.utils.session import create_session
    from sqlalchemy import select

    with create_session() as session:
        run = session.scalars(
            select(DagRun).where(DagRun.dag_id == dag_id).order_by(DagRun.id.desc())
        ).first()
        assert run is not None
        return str(run.run_id)


def test_the_project_spark_pipelines_init_writes_dry_runs_and_ticks_unchanged(
    airflow_db: None,
    default_catalog: CatalogConfig,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    from airflow_provider_ct.pipelines.cli import main

    assert main(["dry-run", str(FOLDERS / "sdp_init"), "--no-spark"]) == 0
    out = capsys.readouterr().out
    assert "default.example_python_materialized_view  [materialized view" in out
    assert "inputs: none" in out and "plan: constant" in out
    catalog = default_catalog.load()
    assert catalog.list_namespaces() == []  # the dry run wrote nothing
    with private_warm_dir():
        dag = _dag("init", monkeypatch)
        for _ in range(2):  # the second tick: nothing changes, every frontier moves
            time = run_at_sealed_time(dag, 0, {})
            for name in ("example_python_materialized_view", "example_sql_materialized_view"):
                table = catalog.load_table(f"default.{name}")
                assert Timeline.of(table).upper == Frontier.sealing(time), name
    # SDP's example: ids 0..9, and the SQL view keeps the even ones.
    assert rows_of(catalog.load_table("default.example_python_materialized_view")) == Counter(
        (i,) for i in range(10)
    )
    assert rows_of(catalog.load_table("default.example_sql_materialized_view")) == Counter(
        (i,) for i in range(0, 10, 2)
    )
