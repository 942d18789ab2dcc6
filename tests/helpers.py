"""Test helpers that write real files and read real tables (no mocks)."""

from __future__ import annotations

import uuid
from collections import Counter
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pyarrow as pa
import pyarrow.parquet as pq

from airflow_provider_ct.core.staging import batch_data_dir


def local_path(uri: str) -> Path:
    return Path(urlsplit(uri).path) if uri.startswith("file:") else Path(uri)


def stage_rows(table: Any, batch_id: str, rows: list[tuple[int, str | None]]) -> list[str]:
    """Write ``rows`` as one Parquet file in the batch's staging folder (no field ids)."""
    folder = local_path(batch_data_dir(table.location(), batch_id))
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"part-{uuid.uuid4().hex}.parquet"
    data = pa.table(
        {
            "k": pa.array([r[0] for r in rows], pa.int64()),
            "v": pa.array([r[1] for r in rows], pa.string()),
        }
    )
    pq.write_table(data, path)
    prefix = "file://" if table.location().startswith("file:") else ""
    return [prefix + str(path)]


def rows_of(table: Any, snapshot_id: int | None = None) -> Counter[tuple[Any, ...]]:
    """The table's rows (as of a snapshot) as a multiset, read by PyIceberg."""
    if snapshot_id is None and table.metadata.current_snapshot() is None:
        return Counter()
    arrow = table.scan(snapshot_id=snapshot_id).to_arrow()
    return Counter(zip(*(arrow.column(n).to_pylist() for n in arrow.column_names), strict=True))
