"""A materialized view over real Spark and Iceberg, checked tick by tick against DuckDB.

The expected rows are DuckDB's, over the input snapshots the test itself
recorded when it wrote the inputs (:meth:`Shop.snapshots_at`), never over the
snapshots the product pinned (a description's ``inputs``, ``ct.inputs``): a
pinning bug must show up as a difference.
"""

from __future__ import annotations

import random
from collections import Counter
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from airflow_provider_ct.core.catalog import CatalogConfig
from airflow_provider_ct.core.manifest import read_manifest
from airflow_provider_ct.core.mint import mint
from airflow_provider_ct.core.staging import list_manifests
from airflow_provider_ct.core.tables import create_managed_table
from airflow_provider_ct.core.timeline import Timeline
from airflow_provider_ct.exceptions import SchemaMismatchError
from airflow_provider_ct.operators.append import AppendOperator
from airflow_provider_ct.spark.write_job import run_write
from tests.conftest import SPARK_CATALOG_CONN as CONN
from tests.helpers import (
    advance,
    local_path,
    mint_view_tick,
    oracle,
    replace_contents,
    rows_of,
)

pytestmark = [pytest.mark.spark, pytest.mark.slow]

ORDERS = pa.schema(
    [
        ("order_id", pa.int64()),
        ("customer_id", pa.int64()),
        ("amount_cents", pa.int64()),
        ("note", pa.string()),
    ]
)
CUSTOMERS = pa.schema([("id", pa.int64()), ("name", pa.string()), ("region", pa.string())])

# Row-level join: duplicates and NULLs survive into the result.
DETAIL_SQL = """
SELECT o.customer_id, c.name, c.region, o.amount_cents, o.note
FROM shop.orders o LEFT JOIN shop.customers c ON o.customer_id = c.id
"""
# Aggregation: revenue per customer.
REVENUE_SQL = """
SELECT c.name, c.region, SUM(o.amount_cents) AS revenue_cents, COUNT(*) AS orders
FROM ct.shop.orders AS o JOIN ct.shop.customers AS c ON o.customer_id = c.id
GROUP BY c.name, c.region
"""


class Shop:
    """Inputs that change every tick: inserts, updates, deletes, duplicates and NULLs."""

    def __init__(self, catalog: Any, namespace: str, seed: int) -> None:
        self.catalog = catalog
        self.ns = namespace
        self.rng = random.Random(seed)
        self.orders_t = create_managed_table(catalog, f"{namespace}.orders", ORDERS)
        self.customers_t = create_managed_table(catalog, f"{namespace}.customers", CUSTOMERS)
        self.orders: list[tuple[Any, ...]] = []
        self.customers: dict[int, tuple[Any, ...]] = {}
        self.next_order = 1
        #: Time of each mutation -> the snapshot each input got, noted right after writing it.
        self.recorded: dict[int, dict[str, int]] = {}

    def mutate(self, time: int) -> None:
        rng = self.rng
        for cid in range(1, 9):
            if cid not in self.customers or rng.random() < 0.3:
                region = rng.choice(["eu", "us", None])
                self.customers[cid] = (cid, f"cust{cid}", region)
        if rng.random() < 0.5 and self.customers:
            self.customers.pop(rng.choice(sorted(self.customers)))
        kept = [o for o in self.orders if rng.random() > 0.2]  # deletes
        updated = [
            (o[0], o[1], (o[2] or 0) + rng.randint(1, 50), o[3]) if rng.random() < 0.2 else o
            for o in kept
        ]
        for _ in range(rng.randint(3, 8)):  # inserts, some duplicated, some NULL
            row = (
                self.next_order,
                rng.randint(1, 10),
                rng.choice([rng.randint(1, 999), None]),
                rng.choice(["gift", None, "rush"]),
            )
            self.next_order += 1
            updated.append(row)
            if rng.random() < 0.4:
                updated.append(row)
        self.orders = updated
        orders_snapshot = replace_contents(
            self.orders_t,
            time,
            pa.Table.from_pylist(
                [dict(zip(ORDERS.names, o, strict=True)) for o in self.orders], ORDERS
            ),
        )
        customers_snapshot = replace_contents(
            self.customers_t,
            time,
            pa.Table.from_pylist(
                [dict(zip(CUSTOMERS.names, c, strict=True)) for c in self.customers.values()],
                CUSTOMERS,
            ),
        )
        self.recorded[time] = {
            f"{self.ns}.orders": orders_snapshot,
            f"{self.ns}.customers": customers_snapshot,
        }

    def seal(self, time: int) -> None:
        advance(self.orders_t, time)
        advance(self.customers_t, time)

    def snapshots_at(self, time: int) -> dict[str, int | None]:
        """Each input's snapshot as of ``time`` by the test's own record (None: not written yet)."""
        done = [t for t in self.recorded if t <= time]
        if not done:
            return {f"{self.ns}.orders": None, f"{self.ns}.customers": None}
        return dict(self.recorded[max(done)])


def _sql(sql: str, ns: str) -> str:
    return sql.replace("shop.", f"{ns}.")


def tick(spark: Any, config: CatalogConfig, target: str, sql: str, time: int) -> dict[str, Any]:
    """Mint, write (in-process Spark) and append one tick; returns the append's XCom."""
    catalog = config.load()
    decision = mint_view_tick(catalog, target, sql, time)
    assert decision.description is not None, decision.reason
    report = run_write(spark, config, sql, decision.description)
    append = AppendOperator(task_id="append", report=report.to_json(), iceberg_conn_id=CONN)
    out = append.execute({})
    out["description"] = decision.description
    out["report"] = report
    return out


@pytest.mark.parametrize("sql_template", [DETAIL_SQL, REVENUE_SQL], ids=["detail", "revenue"])
def test_view_equals_independent_engine_at_every_tick(
    spark: Any, spark_catalog_config: CatalogConfig, sql_template: str
) -> None:
    ns = f"shop_{'d' if sql_template is DETAIL_SQL else 'r'}"
    catalog = spark_catalog_config.load()
    shop = Shop(catalog, ns, seed=7)
    sql = _sql(sql_template, ns)
    target = f"{ns}.view"
    expected: dict[int, Counter[tuple[Any, ...]]] = {}
    for n in range(1, 7):
        time = 1_000 * n
        shop.mutate(time - 500)
        shop.seal(time)
        out = tick(spark, spark_catalog_config, target, sql, time)
        assert out["appended"], out
        want = oracle(catalog, sql, shop.snapshots_at(time))
        table = catalog.load_table(target)
        assert rows_of(table) == want, f"tick {n}"
        expected[time] = want
        assert sum(want.values()) > 0
    # Duplicates and NULLs really occurred (the test exercises the multiset logic).
    if sql_template is DETAIL_SQL:
        assert any(c > 1 for c in expected[6000].values())
        assert any(None in row for row in expected[6000])
    # Time travel to each tick's ct.time gives that tick's result.
    table = catalog.load_table(target)
    timeline = Timeline.of(table)
    assert [t for t, _ in timeline.data_times()] == sorted(expected)
    for time, want in expected.items():
        assert rows_of(table, timeline.snapshot_at(time)) == want
        # ...also between ticks (the view holds the last tick's contents).
        if timeline.upper.seals(time + 999):
            assert rows_of(table, timeline.snapshot_at(time + 999)) == want


def test_drift_is_corrected_exactly_touching_only_affected_files(
    spark: Any, spark_catalog_config: CatalogConfig
) -> None:
    ns = "shop_drift"
    catalog = spark_catalog_config.load()
    shop = Shop(catalog, ns, seed=11)
    sql = _sql(DETAIL_SQL, ns)
    target = f"{ns}.view"
    for n in (1, 2):
        shop.mutate(1000 * n - 500)
        shop.seal(1000 * n)
        assert tick(spark, spark_catalog_config, target, sql, 1000 * n)["appended"]
    table = catalog.load_table(target)
    before_files = {t.file.file_path for t in table.scan().plan_files()}
    good = rows_of(table)
    # Someone edits the view's table behind our back: inserts two rows, deletes some.
    schema = table.schema().as_arrow()
    bogus = pa.Table.from_pylist(
        [{"customer_id": 999, "name": "ghost", "region": None, "amount_cents": 1, "note": None}]
        * 2,
        schema,
    )
    table.append(bogus)
    victim = next(iter(good))
    table.refresh()
    table.delete(f"customer_id = {victim[0]}" if victim[0] is not None else "customer_id IS NULL")
    table.refresh()
    drifted = rows_of(table)
    assert drifted != good
    shop.seal(3000)  # inputs unchanged: the desired result is the same as before
    out = tick(spark, spark_catalog_config, target, sql, 3000)
    assert out["appended"]
    table = catalog.load_table(target)
    assert rows_of(table) == good  # corrected exactly
    report = out["report"]
    deleted_by_drift = sum((good - drifted).values())
    assert report.rows_to_insert == deleted_by_drift
    assert report.rows_to_delete == 2  # exactly the two ghosts
    # Only the files holding the ghosts are touched: a position delete on them,
    # no data file removed or rewritten.
    head = table.metadata.current_snapshot()
    assert head.summary.additional_properties.get("deleted-data-files", "0") == "0"
    ghost_files = {
        t.file.file_path
        for t in table.scan(
            snapshot_id=head.parent_snapshot_id, row_filter="customer_id = 999"
        ).plan_files()
    }
    assert ghost_files and not ghost_files & before_files
    referenced: set[str] = set()
    for manifest in head.manifests(table.io):
        if manifest.added_snapshot_id != head.snapshot_id:
            continue
        for entry in manifest.fetch_manifest_entry(table.io):
            if entry.data_file.content.name == "POSITION_DELETES":
                with table.io.new_input(entry.data_file.file_path).open() as stream:
                    referenced |= set(pq.read_table(stream).column("file_path").to_pylist())
    assert referenced == ghost_files


def test_schema_change_fails_clearly_and_leaves_the_table_untouched(
    spark: Any, spark_catalog_config: CatalogConfig
) -> None:
    ns = "shop_schema"
    catalog = spark_catalog_config.load()
    shop = Shop(catalog, ns, seed=3)
    sql = _sql(DETAIL_SQL, ns)
    target = f"{ns}.view"
    shop.mutate(500)
    shop.seal(1000)
    assert tick(spark, spark_catalog_config, target, sql, 1000)["appended"]
    head = catalog.load_table(target).metadata.current_snapshot().snapshot_id
    shop.seal(2000)
    changed = sql.replace("o.note", "CAST(o.order_id AS STRING) AS note2")
    with pytest.raises(SchemaMismatchError, match="note2"):
        tick(spark, spark_catalog_config, target, changed, 2000)
    table = catalog.load_table(target)
    assert table.metadata.current_snapshot().snapshot_id == head
    assert [read_manifest(m).batch_id for m in list_manifests(table.location())] == []


def test_racing_writers_and_a_retried_append_never_duplicate(
    spark: Any, spark_catalog_config: CatalogConfig
) -> None:
    ns = "shop_race"
    catalog = spark_catalog_config.load()
    shop = Shop(catalog, ns, seed=5)
    sql = _sql(DETAIL_SQL, ns)
    target = f"{ns}.view"
    shop.mutate(500)
    shop.seal(1000)
    assert tick(spark, spark_catalog_config, target, sql, 1000)["appended"]
    shop.mutate(1500)
    shop.seal(2000)
    # Two deployments mint and write the same tick (the same description) ...
    inputs = {n: Timeline.of(catalog.load_table(n)) for n in (f"{ns}.orders", f"{ns}.customers")}
    target_tl = Timeline.of(catalog.load_table(target))
    desc_a = mint(target=target, target_timeline=target_tl, time=2000, inputs=inputs).description
    desc_b = mint(target=target, target_timeline=target_tl, time=2000, inputs=inputs).description
    assert desc_a is not None and desc_a == desc_b
    # ... and a third one a different tick at the same lower.
    shop.seal(2500)
    later_inputs = {n: Timeline.of(catalog.load_table(n)) for n in inputs}
    desc_c = mint(
        target=target, target_timeline=target_tl, time=2500, inputs=later_inputs
    ).description
    assert desc_c is not None and desc_c.lower == desc_a.lower and desc_c.id != desc_a.id
    rep_a = run_write(spark, spark_catalog_config, sql, desc_a)
    rep_c = run_write(spark, spark_catalog_config, sql, desc_c)
    staged_c = read_manifest(rep_c.manifest).staged_files  # type: ignore[arg-type]
    assert staged_c
    first = AppendOperator(task_id="a", report=rep_a.to_json(), iceberg_conn_id=CONN).execute({})
    retry = AppendOperator(task_id="a", report=rep_a.to_json(), iceberg_conn_id=CONN).execute({})
    loser = AppendOperator(task_id="c", report=rep_c.to_json(), iceberg_conn_id=CONN).execute({})
    assert first["appended"] and not first["already_appended"]
    assert retry["appended"] and retry["already_appended"]
    assert not loser["appended"] and loser["upper"] == 2001
    for path in staged_c:
        assert not local_path(path).exists(), "a loser's staged file survived"
    # The loser's writer computing again now finds nothing (its base is outdated).
    late = run_write(spark, spark_catalog_config, sql, desc_b)
    assert late.status == "outdated"
    table = catalog.load_table(target)
    assert rows_of(table) == oracle(catalog, sql, shop.snapshots_at(2000))
    assert [t for t, _ in Timeline.of(table).data_times()] == [1000, 2000]


def test_sealed_tick_is_a_noop_and_backfill_lands_in_order(
    spark: Any, spark_catalog_config: CatalogConfig
) -> None:
    ns = "shop_backfill"
    catalog = spark_catalog_config.load()
    shop = Shop(catalog, ns, seed=9)
    sql = _sql(REVENUE_SQL, ns)
    target = f"{ns}.view"
    for n in range(1, 5):
        shop.mutate(1000 * n - 500)
    shop.seal(4000)
    # Backfill: one run per past interval, in order, inputs time-travelled to each T.
    for n in range(1, 5):
        out = tick(spark, spark_catalog_config, target, sql, 1000 * n)
        assert out["appended"]
        table = catalog.load_table(target)
        assert rows_of(table) == oracle(catalog, sql, shop.snapshots_at(1000 * n))
    timeline = Timeline.of(catalog.load_table(target))
    assert [t for t, _ in timeline.data_times()] == [1000, 2000, 3000, 4000]
    # Re-running an interval below the upper changes nothing.
    head = timeline.head_snapshot_id
    inputs = {n: Timeline.of(catalog.load_table(n)) for n in (f"{ns}.orders", f"{ns}.customers")}
    decision = mint(target=target, target_timeline=timeline, time=2000, inputs=inputs)
    assert decision.description is None
    assert "already sealed" in decision.reason
    assert catalog.load_table(target).metadata.current_snapshot().snapshot_id == head
