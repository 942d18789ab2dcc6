"""Landing for the SQL pipeline example: order events appended at a tick's time.

The folder ``pipelines/shop_sql`` reads ``shop_sql.landed_events``, which
this module creates (``create_landing``, before the DAG file is parsed:
the folder is resolved against the catalog then) and appends to
(``land_events``, the DAG's first task): one commit per tick, stamped with
the tick's time, so the tick reads exactly what landed up to it. Idempotent
per tick (a retry or a backfill lands the same rows once). Importing this
module builds no DAG.
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

LANDED = "shop_sql.landed_events"
EVENTS = pa.schema(
    [
        ("order_id", pa.int64()),
        ("customer", pa.string()),
        ("day", pa.string()),
        ("amount_cents", pa.int64()),
        ("status", pa.string()),
    ]
)


def create_landing(catalog: Any) -> Any:
    """The landing table (a managed table: each landing commits at its tick's time)."""
    return create_managed_table(catalog, LANDED, EVENTS)


def commit_at(table: Any, time: int, data: pa.Table, batch_id: str, replace: bool = False) -> bool:
    """``data`` appended (``replace``: as the whole contents) at ``time``, once per batch id.

    Returns False when the batch had landed already (or ``time`` is sealed).
    """
    table.refresh()
    timeline = Timeline.of(table)
    if timeline.find_batch(batch_id) is not None or timeline.upper.seals(time):
        return False
    path = f"{batch_data_dir(table.location(), batch_id)}/part-{uuid.uuid4().hex}.parquet"
    with table.io.new_output(path).create(overwrite=True) as out:
        pq.write_table(data, out)
    live = [t.file.file_path for t in table.scan().plan_files()] if replace else []
    result = compare_and_append(
        table,
        expected_upper=timeline.upper,
        new_upper=Frontier.sealing(time),
        batch_id=batch_id,
        add_files=[path],
        remove_files=live,
        time=time,
    )
    if not result.landed:
        raise RuntimeError(f"landing {batch_id} lost a race: {result.reason}")
    return True


def land_events(catalog: Any, time: int, count: int = 8) -> int:
    """A small deterministic batch of order events for ``time``; the rows landed."""
    rng = random.Random(time)
    rows = [
        {
            "order_id": rng.randint(1, 40),
            "customer": rng.choice(["ada", "grace", "linus", "radia"]),
            "day": f"2026-11-{rng.randint(20, 26)}",
            "amount_cents": rng.choice([rng.randint(100, 9_999), 0]),
            "status": rng.choice(["placed", "placed", "shipped", "cancelled"]),
        }
        for _ in range(count)
    ]
    table = create_landing(catalog)
    landed = commit_at(table, time, pa.Table.from_pylist(rows, EVENTS), f"land-{time}")
    return len(rows) if landed else 0
