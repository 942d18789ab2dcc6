"""What one write job works with: the tick it was asked for, the target it found, the
correction it computed, and the clock of its phases.

Kept apart from :mod:`.write_job` so the modules that compute a tick's
correction in their own way (:mod:`.ivm.in_place_tick`) share these without
importing the job itself.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from airflow_provider_ct.core.catalog import CatalogConfig
from airflow_provider_ct.core.description import BatchDescription
from airflow_provider_ct.core.query import query_hash
from airflow_provider_ct.core.schema_change import SchemaChange
from airflow_provider_ct.ivm.plan.decision import RefreshSettings, TickDecision
from airflow_provider_ct.ivm.plan.planner import Plan
from airflow_provider_ct.ivm.plan.sizes import Pinned
from airflow_provider_ct.spark.fingerprints import Correction
from airflow_provider_ct.spark.ivm.input_changes import Scratch

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from airflow_provider_ct.spark.composed import ComposedQuery


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


@dataclass(frozen=True)
class Computed:
    """A correction and how it was computed (for the report and the batch's summary)."""

    correction: Correction
    strategy: str
    reason: str
    incremental_ticks: int
    details: Mapping[str, Any] = field(default_factory=dict)
    #: In-place aggregates: the state to keep once the batch is staged.
    state: Any = None  # a pa.Table, or an ivm.driver.kept_state.StateDelta
    #: The plan that ran, as ``EXPLAIN`` lines (a fallback's, if the tick fell back).
    explain: tuple[str, ...] = ()

    @classmethod
    def of(
        cls,
        decision: TickDecision,
        correction: Correction,
        details: Mapping[str, Any] | None = None,
        state: Any = None,
    ) -> Computed:
        """What carrying ``decision`` out computed, as the decision describes it."""
        notes = {**decision.details, **(details or {})}
        if decision.considered:
            notes["fallbacks"] = list(decision.considered)
        return cls(
            correction,
            decision.strategy,
            decision.reason,
            decision.incremental_ticks,
            notes,
            state,
            tuple(decision.plan.explain()),
        )


@dataclass(frozen=True)
class Tick:
    """What the job was asked to do: frozen once the job has loaded and bound its inputs.

    The decisions of the tick (:mod:`airflow_provider_ct.ivm.plan.decision`)
    carry the plan they run; ``plan`` here is the query's plan under the
    tick's refresh mode, before any fallback.
    """

    spark: SparkSession
    config: CatalogConfig
    catalog: Any
    sql: str
    desc: BatchDescription
    plan: Plan
    settings: RefreshSettings
    #: Holds the inputs' changes the correction's frames read: removed after staging.
    scratch: Scratch
    clock: PhaseClock
    #: Input name -> the temp view of its pinned snapshot (registered on first lookup).
    input_views: Mapping[str, str]
    #: Input name -> its PyIceberg table (None: one did not load; Spark says why).
    input_tables: Mapping[str, Any] | None
    #: What the tick's Spark analyses are kept under (:mod:`.ivm.analysis_cache`).
    analysis_key: tuple | None
    #: When the job started (the draft materialized-view spec's refresh start).
    started_ms: int = field(default_factory=lambda: int(time.time() * 1000))
    #: A composed tick's parts (:mod:`.composed`): the query ran over them.
    composed: ComposedQuery | None = None
    #: The description the batch answers, when ``desc`` pins more: a composed tick whose
    #: query over the parts is incremental computes over the parts' snapshots too, but
    #: stages what was minted (the append checks its pins).
    minted: BatchDescription | None = None
    _loaded: dict[str, Any] = field(default_factory=dict, repr=False)

    @property
    def answers(self) -> BatchDescription:
        """The description the staged batch answers."""
        return self.minted or self.desc

    def input_table(self, name: str) -> Any:
        """Input ``name``'s PyIceberg table, loaded once per job (every read of it is pinned)."""
        if self.input_tables is not None and name in self.input_tables:
            return self.input_tables[name]
        if name not in self._loaded:
            self._loaded[name] = self.catalog.load_table(name)
        return self._loaded[name]

    def inputs(self) -> dict[str, Any]:
        """Every input's PyIceberg table, by name."""
        return {name: self.input_table(name) for name in self.desc.inputs}

    def pinned(self) -> Pinned:
        """What the refresh rules read of this tick (metadata only)."""
        return Pinned(self.inputs(), self.desc.inputs, query_hash(self.sql), self.settings)
