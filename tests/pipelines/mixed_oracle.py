"""DuckDB's answer for each dataset of the ``mixed`` folder, over rows a test chose.

Written from the datasets' meaning, not from the folder's code: ``events``
is the raw events that are not tests (each processed once, so a raw row
deleted later stays; after a full refresh, the raw rows of that time plus
those inserted since), ``large_events`` every raw event of 50 or more ever
inserted, ``customer_spend`` the events joined with the customers now,
``region_big`` its customers over 100 counted and summed per region.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import duckdb
import pyarrow as pa

RAW = pa.schema(
    [
        ("event_id", pa.int64()),
        ("customer_id", pa.int64()),
        ("amount", pa.int64()),
        ("kind", pa.string()),
    ]
)
CUSTOMERS = pa.schema([("customer_id", pa.int64()), ("region", pa.string())])
DATASETS = ("events", "customer_spend", "region_big", "large_events")

_SPEND = (
    "SELECT e.customer_id, c.region, SUM(e.amount)::BIGINT AS spend, COUNT(*)::BIGINT AS n "
    "FROM events AS e JOIN customers AS c USING (customer_id) GROUP BY ALL"
)
ORACLE = {
    "events": "SELECT event_id, customer_id, amount FROM events",
    "customer_spend": _SPEND,
    "region_big": (
        f"SELECT region, COUNT(*)::BIGINT, SUM(spend)::BIGINT FROM ({_SPEND}) "
        "WHERE spend > 100 GROUP BY ALL"
    ),
    "large_events": "SELECT event_id, amount FROM inserted WHERE amount >= 50",
}


def expected(
    events: pa.Table, inserted: pa.Table, customers: pa.Table, dataset: str
) -> Counter[tuple[Any, ...]]:
    """``events``: the stream's processed rows (RAW, tests already out); ``inserted``: every
    raw row ever inserted; ``customers``: the customers now."""
    con = duckdb.connect()
    con.register("events", events)
    con.register("inserted", inserted)
    con.register("customers", customers)
    return Counter(tuple(r) for r in con.execute(ORACLE[dataset]).fetchall())
