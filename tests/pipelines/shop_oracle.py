"""DuckDB's answer for each dataset of the ``shop`` folder, over input rows a test chose.

Written from the datasets' meaning, not from the folder's SQL text: the
streaming table is every raw order that is not a test order (each processed
once); ``customer_revenue`` joins it with the customers; ``region_revenue``
sums the customers with more than one order per region.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import duckdb
import pyarrow as pa

RAW = pa.schema(
    [
        ("order_id", pa.int64()),
        ("customer_id", pa.int64()),
        ("amount", pa.int64()),
        ("status", pa.string()),
    ]
)
CUSTOMERS = pa.schema([("customer_id", pa.int64()), ("region", pa.string())])
DATASETS = ("orders", "customer_revenue", "region_revenue")

_PER_CUSTOMER = (
    "SELECT o.customer_id, c.region, SUM(o.amount) AS revenue, COUNT(*) AS n "
    "FROM raw AS o JOIN customers AS c ON o.customer_id = c.customer_id "
    "WHERE o.status <> 'test' GROUP BY ALL"
)
ORACLE = {
    "orders": "SELECT order_id, customer_id, amount FROM raw WHERE status <> 'test'",
    "customer_revenue": (
        f"SELECT customer_id, region, revenue::BIGINT, n::BIGINT FROM ({_PER_CUSTOMER})"
    ),
    "region_revenue": (
        f"SELECT region, SUM(revenue)::BIGINT, COUNT(*)::BIGINT FROM ({_PER_CUSTOMER}) "
        "WHERE n > 1 GROUP BY ALL"
    ),
}


def expected(raw: pa.Table, customers: pa.Table, dataset: str) -> Counter[tuple[Any, ...]]:
    """The dataset's rows over ``raw`` and ``customers`` (Arrow tables of the schemas above)."""
    con = duckdb.connect()
    con.register("raw", raw)
    con.register("customers", customers)
    return Counter(tuple(r) for r in con.execute(ORACLE[dataset]).fetchall())
