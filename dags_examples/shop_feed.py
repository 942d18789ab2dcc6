"""A small generator that keeps the example shop's inputs changing.

Each call for an interval ending at ``time`` commits one snapshot per input at
``time`` (new orders, some duplicated, some with NULL amounts; a few orders
deleted or re-priced; customers renamed, moved or dropped) and seals the
inputs through ``time``. It is deterministic per interval and idempotent, so
retries and backfills replay exactly the same history.
"""

from __future__ import annotations

import random
import uuid
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from airflow_provider_ct.core.commit import compare_and_append
from airflow_provider_ct.core.frontier import Frontier
from airflow_provider_ct.core.staging import batch_data_dir
from airflow_provider_ct.core.tables import create_managed_table
from airflow_provider_ct.core.timeline import Timeline

ORDERS = pa.schema(
    [
        ("order_id", pa.int64()),
        ("customer_id", pa.int64()),
        ("amount_cents", pa.int64()),
        ("channel", pa.string()),
    ]
)
CUSTOMERS = pa.schema([("id", pa.int64()), ("name", pa.string()), ("country", pa.string())])
NAMES = ["Ada", "Grace", "Edsger", "Barbara", "Donald", "Frances", "Ken", "Radia", "Tim", "Leslie"]


def _read(table: Any) -> pa.Table:
    if table.metadata.current_snapshot() is None:
        return table.schema().as_arrow().empty_table()
    return table.scan().to_arrow()


def _replace(table: Any, time: int, data: pa.Table, batch_id: str) -> None:
    """Commit ``data`` as the input's full contents at ``time`` (idempotent per batch id)."""
    table.refresh()
    timeline = Timeline.of(table)
    if timeline.find_batch(batch_id) is not None or timeline.upper.seals(time):
        return  # this interval was already fed
    files: list[str] = []
    if data.num_rows:
        folder = batch_data_dir(table.location(), batch_id)
        path = f"{folder}/part-{uuid.uuid4().hex}.parquet"
        with table.io.new_output(path).create(overwrite=True) as out:
            pq.write_table(data, out)
        files.append(path)
    live = [task.file.file_path for task in table.scan().plan_files()]
    result = compare_and_append(
        table,
        expected_upper=timeline.upper,
        new_upper=Frontier.sealing(time),
        batch_id=batch_id,
        add_files=files,
        remove_files=live,
        time=time,
    )
    if not result.landed:
        raise RuntimeError(f"feeding {batch_id} lost a race: {result.reason}")


def feed_shop(catalog: Any, namespace: str, time: int) -> dict[str, int]:
    """Change the shop's inputs at ``time``; returns the new row counts."""
    orders_t = create_managed_table(catalog, f"{namespace}.orders", ORDERS)
    customers_t = create_managed_table(catalog, f"{namespace}.customers", CUSTOMERS)
    rng = random.Random(time)
    customers = {r["id"]: r for r in _read(customers_t).to_pylist()}
    for cid in range(1, 11):
        if cid not in customers or rng.random() < 0.2:
            customers[cid] = {
                "id": cid,
                "name": NAMES[cid - 1] + rng.choice(["", " Jr."]),
                "country": rng.choice(["NL", "DE", "US", None]),
            }
    if rng.random() < 0.3:
        customers.pop(rng.randint(1, 10), None)
    orders = [o for o in _read(orders_t).to_pylist() if rng.random() > 0.1]
    for order in orders:
        if rng.random() < 0.1:
            order["amount_cents"] = rng.randint(100, 20_000)
    next_id = max((o["order_id"] for o in orders), default=0) + 1
    for _ in range(rng.randint(5, 15)):
        order = {
            "order_id": next_id,
            "customer_id": rng.randint(1, 12),  # 11 and 12 have no customer row
            "amount_cents": rng.choice([rng.randint(100, 20_000), None]),
            "channel": rng.choice(["web", "store", None]),
        }
        next_id += 1
        orders.append(order)
        if rng.random() < 0.2:
            orders.append(dict(order))  # an exact duplicate row
    _replace(orders_t, time, pa.Table.from_pylist(orders, ORDERS), f"feed-orders-{time}")
    _replace(
        customers_t,
        time,
        pa.Table.from_pylist(list(customers.values()), CUSTOMERS),
        f"feed-customers-{time}",
    )
    return {"orders": len(orders), "customers": len(customers)}
