"""End-to-end freshness of a pipeline of managed tables, from their timelines.

For each write into the first table (a snapshot with ``ct.time`` and a batch
id), and each later layer: how long after that write's commit the layer
committed the first snapshot that contains it (whose upper is past the
write's time). Read from the tables alone (Iceberg commit timestamps), so
it measures what a reader of the catalog saw, Airflow's scheduling included.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from airflow_provider_ct.core.timeline import Timeline, TimelineEntry


@dataclass(frozen=True)
class Freshness:
    write_time: int  # the write's ct.time
    committed_at_ms: int  # when the write committed
    lag_ms: dict[str, int | None]  # per layer: commit of the first snapshot containing it


def _first_sealing(entries: Sequence[TimelineEntry], time: int) -> TimelineEntry | None:
    for entry in entries:
        if entry.upper is not None and entry.upper.seals(time):
            return entry
    return None


def pipeline_freshness(catalog: Any, source: str, layers: Sequence[str]) -> list[Freshness]:
    """One :class:`Freshness` per write into ``source`` (oldest first); a layer not
    caught up yet with a write has ``None``."""
    timelines = {name: Timeline.of(catalog.load_table(name)).entries for name in layers}
    out = []
    for write in Timeline.of(catalog.load_table(source)).entries:
        if write.time is None or not (write.batch_id or "").startswith("blind-"):
            continue  # ticks and checkpoints are not writes
        lag: dict[str, int | None] = {}
        for name in layers:
            entry = _first_sealing(timelines[name], write.time)
            lag[name] = None if entry is None else entry.committed_at_ms - write.committed_at_ms
        out.append(Freshness(write.time, write.committed_at_ms, lag))
    return out
