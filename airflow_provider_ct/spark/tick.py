"""What one write job works with: the tick it was asked for, the target it found, the
correction it computed, and the clock of its phases.

Kept apart from :mod:`.write_job` so the modules that compute a tick's
correction in their own way (:mod:`.in_place_tick`) and the refresh rules
(:mod:`.refresh_rules`) share these without importing the job itself.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from airflow_provider_ct.core.catalog import CatalogConfig
from airflow_provider_ct.core.description import BatchDescription
from airflow_provider_ct.core.schema_change import SchemaChange
from airflow_provider_ct.ivm.plan.planner import Plan
from airflow_provider_ct.spark.fingerprints import Correction
from airflow_provider_ct.spark.ivm.input_changes import Scratch

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession


class PhaseClock:
    """Wall time per phase of the job, for the log (where does a tick's time go?)."""

    def __init__(self) -> None:
        self._last = time.perf_counter()
        self.phases: dict[str, float] = {}

    def lap(self, name: str) -> None:
        now = time.perf_counter()
        self.phases[name] = round(now - self._last, 2)
        self._last = now

    def summary(self) -> str:
        return ", ".join(f"{k}={v}" for k, v in self.phases.items())


#: Builds a target's Spark frames: the query's rows in the table's column
#: order, and the head with ``_file`` and ``_pos`` (None: the table is empty).
Frames = Callable[[], "tuple[DataFrame, DataFrame | None]"]


@dataclass
class Target:
    """The target as the job found it, and the query's rows and columns.

    Its Spark frames are built on first use: a tick kept in place on the
    driver never asks for them, and building them loads the target twice
    through Spark's catalog and analyzes two projections (some 20 ms).
    """

    table: Any
    columns: list[str]
    frames: Frames
    #: Whether the head (the description's base) holds a snapshot to compare with.
    has_rows: bool
    #: The schema the batch is staged under and commits (None: the table's own).
    schema_change: SchemaChange | None = None
    #: The query's own schema, in its select list's order (``desired`` follows
    #: the table's column order).
    query_schema: Any = None
    _built: tuple[DataFrame, DataFrame | None] | None = field(default=None, repr=False)

    def _frames(self) -> tuple[DataFrame, DataFrame | None]:
        if self._built is None:
            self._built = self.frames()
        return self._built

    @property
    def desired(self) -> DataFrame:
        """The query's rows, columns in the table's order."""
        return self._frames()[0]

    @property
    def persisted(self) -> DataFrame | None:
        """The head with ``_file`` and ``_pos``; None: empty."""
        return self._frames()[1]


@dataclass
class Computed:
    """A correction and how it was computed (for the report)."""

    correction: Correction
    strategy: str
    reason: str
    incremental_ticks: int
    details: dict[str, Any] = field(default_factory=dict)
    #: In-place aggregates: the state to keep once the batch is staged.
    state: pa.Table | None = None


@dataclass
class Tick:
    """What the job was asked to do, and where it keeps its scratch files and times."""

    spark: SparkSession
    config: CatalogConfig
    catalog: Any
    sql: str
    desc: BatchDescription
    plan: Plan
    verify_every: int
    #: ``refresh="auto"`` runs in full over inputs of at most this many rows (0: never).
    small_rows: int
    #: ``refresh="auto"`` runs a group tick in full above this change share (0: never).
    large_change: float
    #: Holds the inputs' changes the correction's frames read: removed after staging.
    scratch: Scratch
    clock: PhaseClock
    #: When the job started (the draft materialized-view spec's refresh start).
    started_ms: int = field(default_factory=lambda: int(time.time() * 1000))
    #: ``refresh="auto"`` learns from the view's costs; incremental again after
    #: this many batches in full (0: it does not).
    retry_after: int = 0
    #: ``refresh="auto"`` runs a group tick in full when its restricted reads
    #: cover this share of the inputs' bytes (0: never; ``ivm/plan/read_estimate``).
    read_share: float = 0.0
    #: Input name -> the temp view of its pinned snapshot (registered on first lookup).
    input_views: Mapping[str, str] = field(default_factory=dict)
    #: Input name -> its PyIceberg table (None: one did not load; Spark says why).
    input_tables: dict[str, Any] | None = None
    #: What the tick's Spark analyses are kept under (:mod:`.analysis_cache`).
    analysis_key: tuple | None = None
    _loaded: dict[str, Any] = field(default_factory=dict, repr=False)

    def input_table(self, name: str) -> Any:
        """Input ``name``'s PyIceberg table, loaded once per job (every read of it is pinned)."""
        if self.input_tables is not None and name in self.input_tables:
            return self.input_tables[name]
        if name not in self._loaded:
            self._loaded[name] = self.catalog.load_table(name)
        return self._loaded[name]
