"""The frontier and commit core: Iceberg tables with ticking frontiers.

Nothing in this package imports Airflow: it is usable from any Python process
(the Spark driver, a notebook, a test) with only PyIceberg and PyArrow.
"""

from __future__ import annotations

from airflow_provider_ct.core.appending import land_staged
from airflow_provider_ct.core.commit import AppendResult, compare_and_append
from airflow_provider_ct.core.frontier import Frontier, check_timestamp, now_ms
from airflow_provider_ct.core.keys import SummaryKeys, TableKeys
from airflow_provider_ct.core.manifest import StagedBatch, StagedFile, StagedTime
from airflow_provider_ct.core.producers import TimedChange
from airflow_provider_ct.core.sweep import SweepReport, sweep_staged
from airflow_provider_ct.core.tables import create_managed_table
from airflow_provider_ct.core.timeline import (
    SummaryKeyUpper,
    Timeline,
    TimelineEntry,
    WallClockUpper,
)

__all__ = [
    "AppendResult",
    "Frontier",
    "StagedBatch",
    "StagedFile",
    "StagedTime",
    "SummaryKeyUpper",
    "SummaryKeys",
    "SweepReport",
    "TableKeys",
    "TimedChange",
    "Timeline",
    "TimelineEntry",
    "WallClockUpper",
    "check_timestamp",
    "compare_and_append",
    "create_managed_table",
    "land_staged",
    "now_ms",
    "sweep_staged",
]
