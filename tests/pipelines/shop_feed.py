"""The inputs of the ``shop`` folder for the e2e backfill: created empty, fed per tick.

``feed`` changes the inputs at a tick time: new raw orders appended (some
test orders), customers replaced (moved, some dropped). Each feed commits
once per input and tick, stamped ``ct.time`` = the tick and batch id
``feed-<input>-<time>``, so the test finds each tick's inputs in their
history itself. Kept out of the DAG file: importing this module builds no DAG.
"""

from __future__ import annotations

import random
import sys
from datetime import datetime
from pathlib import Path
from typing import Any

import pyarrow as pa

from airflow_provider_ct.core.tables import create_managed_table
from tests.pipelines.shop_oracle import CUSTOMERS, RAW

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "dags_examples"))

from sql_pipeline_landing import commit_at  # noqa: E402

SQL_PIPELINE_DAG = "sql_pipeline_backfill"
SHOP = ROOT / "tests" / "pipelines" / "shop"
NAMESPACE = "sqlp"
#: The backfill's hours, as e2e_dags.py's views (not imported: it defines DAGs).
START = datetime(2026, 2, 1)
INTERVALS = 3


def create_inputs(catalog: Any) -> None:
    """The folder's external inputs, empty (managed tables: the feed stamps their times)."""
    create_managed_table(catalog, f"{NAMESPACE}.raw_orders", RAW)
    create_managed_table(catalog, f"{NAMESPACE}.customers", CUSTOMERS)


def feed(catalog: Any, time: int) -> None:
    """Deterministic per tick: new orders appended, the customers replaced."""
    rng = random.Random(time)
    raw = catalog.load_table(f"{NAMESPACE}.raw_orders")
    base = (time // 1000) % 10_000_000 * 100
    orders = [
        {
            "order_id": base + i,
            "customer_id": rng.randint(1, 6),  # 6 has no customer row
            "amount": rng.randint(1, 500),
            "status": rng.choice(["placed", "placed", "shipped", "test"]),
        }
        for i in range(rng.randint(6, 12))
    ]
    commit_at(raw, time, pa.Table.from_pylist(orders, RAW), f"feed-raw_orders-{time}", False)
    customers = [
        {"customer_id": c, "region": rng.choice(["eu", "us", "apac"])}
        for c in range(1, 6)
        if rng.random() > 0.15
    ]
    customers_t = catalog.load_table(f"{NAMESPACE}.customers")
    data = pa.Table.from_pylist(customers, CUSTOMERS)
    commit_at(customers_t, time, data, f"feed-customers-{time}", True)
