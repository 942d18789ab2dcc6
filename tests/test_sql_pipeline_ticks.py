"""An SDP-format SQL folder ticked through ``dag.test()``, every dataset checked against DuckDB.

The folder (``tests/pipelines/shop``): a streaming table over the
append-only ``raw_orders`` (a continual task), a view joining it with
``customers`` (which the test updates and deletes from), and a view over
that view through a temporary view. The test writes the inputs with
PyIceberg and keeps the same rows in Python; the oracle is DuckDB over
those rows, never over what the pipeline wrote.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import pyarrow as pa
import pytest

from airflow_provider_ct.core.catalog import CatalogConfig
from airflow_provider_ct.core.frontier import Frontier
from airflow_provider_ct.core.timeline import Timeline
from tests.helpers import rows_of, run_at_sealed_time, task_xcom
from tests.pipelines.customers import CustomersInput
from tests.pipelines.shop_oracle import CUSTOMERS, DATASETS, RAW, expected
from tests.warm import private_warm_dir

pytestmark = [pytest.mark.spark, pytest.mark.airflow, pytest.mark.slow]


class Shop(CustomersInput):
    """The inputs in the catalog and the same rows in Python."""

    def __init__(self, catalog: Any) -> None:
        catalog.create_namespace("sqlp")
        self.catalog = catalog
        self.raw_table = catalog.create_table("sqlp.raw_orders", RAW)
        self.customers_table = catalog.create_table("sqlp.customers", CUSTOMERS)
        self.raw: list[tuple[int, int, int, str]] = []
        self.customers: dict[int, str] = {}

    def order(self, *rows: tuple[int, int, int, str]) -> None:
        self.raw_table.append(
            pa.Table.from_pylist([dict(zip(RAW.names, r, strict=True)) for r in rows], RAW)
        )
        self.raw += rows

    def expected(self, dataset: str) -> Counter[tuple[Any, ...]]:
        raw = pa.Table.from_pylist([dict(zip(RAW.names, r, strict=True)) for r in self.raw], RAW)
        customers = pa.Table.from_pylist(
            [{"customer_id": k, "region": v} for k, v in self.customers.items()], CUSTOMERS
        )
        return expected(raw, customers, dataset)

    def actual(self, dataset: str) -> Counter[tuple[Any, ...]]:
        return rows_of(self.catalog.load_table(f"sqlp.{dataset}"))

    def check(self) -> None:
        for dataset in DATASETS:
            assert self.actual(dataset) == self.expected(dataset), dataset


@pytest.fixture
def shop(airflow_db: None, default_catalog: CatalogConfig, monkeypatch: pytest.MonkeyPatch) -> Any:
    monkeypatch.setenv("CT_TEST_SQL_PIPELINE", "1")
    with private_warm_dir():
        world = Shop(default_catalog.load())
        import sys
        from pathlib import Path

        sys.path.insert(0, str(Path(__file__).resolve().parent / "dags"))
        import sql_pipeline_shop

        yield world, sql_pipeline_shop.dag


def _tick(world: Shop, dag: Any, **conf: Any) -> int:
    time = run_at_sealed_time(dag, world.last_commit_ms(), conf)
    for dataset in DATASETS:
        upper = Timeline.of(world.catalog.load_table(f"sqlp.{dataset}")).upper
        assert upper == Frontier.sealing(time), dataset  # one time for the whole run
    return time


def test_a_sql_folder_ticks_every_dataset_at_one_time_as_duckdb_says(shop: Any) -> None:
    world, dag = shop
    assert [g for g in dag.task_group.children] == ["orders", "customer_revenue", "region_revenue"]
    for customer_id, region in ((1, "eu"), (2, "us"), (3, "eu")):
        world.customer(customer_id, region)
    world.order(
        (1, 1, 100, "placed"), (2, 1, 50, "placed"), (3, 2, 70, "test"), (4, 3, 5, "placed")
    )
    _tick(world, dag)  # the streaming table's first tick takes the input's whole contents
    world.check()

    # Appends to the stream, an update and a delete of the table it is joined with.
    world.order((5, 2, 30, "placed"), (6, 2, 40, "placed"), (7, 3, 9, "placed"))
    world.customer(2, "eu")
    world.customer(3, None)
    _tick(world, dag)
    world.check()

    world.order((8, 4, 11, "placed"), (9, 4, 12, "placed"), (10, 1, 1, "test"))
    world.customer(4, "apac")
    world.customer(1, "us")
    _tick(world, dag)
    world.check()
    assert world.expected("region_revenue")  # the oracle is not trivially empty

    # Nothing changed: every dataset's frontier moves, no row does.
    before = {d: world.actual(d) for d in DATASETS}
    _tick(world, dag)
    assert {d: world.actual(d) for d in DATASETS} == before
    world.check()


def test_a_full_refresh_of_one_view_rewrites_it_and_leaves_its_readers_alone(shop: Any) -> None:
    world, dag = shop
    world.customer(1, "eu")
    world.order((1, 1, 100, "placed"), (2, 1, 50, "placed"))
    _tick(world, dag)
    world.check()

    tables = {d: world.catalog.load_table(f"sqlp.{d}") for d in DATASETS}
    before = {d: t.metadata.current_snapshot_id for d, t in tables.items()}
    time = run_at_sealed_time(dag, world.last_commit_ms(), {"full_refresh": ["customer_revenue"]})
    after = {d: world.catalog.load_table(f"sqlp.{d}") for d in DATASETS}
    # Its reader skipped the run: same snapshot, frontier not moved.
    assert after["region_revenue"].metadata.current_snapshot_id == before["region_revenue"]
    assert Timeline.of(after["region_revenue"]).upper != Frontier.sealing(time)
    # The refreshed view ticked in full, at the run's time (and so did what it reads).
    assert after["customer_revenue"].metadata.current_snapshot_id != before["customer_revenue"]
    assert Timeline.of(after["customer_revenue"]).upper == Frontier.sealing(time)
    assert Timeline.of(after["orders"]).upper == Frontier.sealing(time)
    run_id = _last_run_id(dag.dag_id)
    # Quiet without the refresh (no input changed): the write ran, and in full.
    assert task_xcom(dag.dag_id, run_id, "customer_revenue.write")["strategy"] == "full"
    world.check()


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
