"""The customers input both pipeline tests change by key, and the inputs' last commit time."""

from __future__ import annotations

from typing import Any

import pyarrow as pa
from pyiceberg.expressions import EqualTo

CUSTOMERS = pa.schema([("customer_id", pa.int64()), ("region", pa.string())])


class CustomersInput:
    """A mixin of a test's model: ``customers_table`` and ``raw_table`` (PyIceberg tables),
    ``customers`` (the model's ``customer_id -> region``)."""

    customers_table: Any
    raw_table: Any
    customers: dict[int, str]

    def customer(self, customer_id: int, region: str | None) -> None:
        """Insert, update (overwrite by key) or, with ``None``, delete one customer."""
        key = EqualTo("customer_id", customer_id)
        if region is None:
            self.customers_table.delete(key)
            del self.customers[customer_id]
            return
        row = pa.Table.from_pylist([{"customer_id": customer_id, "region": region}], CUSTOMERS)
        if customer_id in self.customers:
            self.customers_table.overwrite(row, overwrite_filter=key)
        else:
            self.customers_table.append(row)
        self.customers[customer_id] = region

    def last_commit_ms(self) -> int:
        """The newest commit time of the two inputs (0 before any)."""
        stamps = [0]
        for table in (self.raw_table, self.customers_table):
            table.refresh()
            head = table.metadata.current_snapshot()
            stamps.append(0 if head is None else head.timestamp_ms)
        return max(stamps)
