"""A composed tick: the parts of a view's query ticked first, then the query over them.

:mod:`airflow_provider_ct.ivm.plan.compose` splits a query no rule maintains
whole into parts (its CTEs and derived tables) and the query over them.
Here a tick at ``T`` brings each part's table to ``T`` (in order, a part
read by a later one first) and returns what the view's own tick then
binds: the query over the parts, and the snapshot of each part at ``T``
beside the inputs' pins.

A part's tick is a view's tick: a description of its own (its upper,
``T``, the view's pins of the inputs it reads, the snapshots of the parts
it reads), the write job for its SQL under ``refresh="auto"`` (so it is
incremental by its own plan and history), and the compare-and-append. So
each part is exactly once at each time it was ticked at, self-corrected
like any view, and never wrong for longer than a tick.

The view's correction never trusts a part it did not check: the snapshot
it reads for ``T`` must record the same part SQL (``ct.query-hash``) and
the same pins, whether this job wrote it or an earlier attempt of the same
tick did. A part that cannot serve the tick raises
:class:`~airflow_provider_ct.exceptions.CompositionError`, and the write
job runs the view's query in full as written instead. A part whose inputs
are where its last batch left them is not ticked at all: its head is the
part at ``T``.

When a view runs composed (:func:`composed_tick`): under ``refresh="auto"``,
for a real tick (a dry run writes no part), once the view has a first batch
(that tick runs in full as written, so the view's history holds what a full
correction costs; its parts are created beside it, so the next tick finds
them and reads only their inputs' changes), and while that history does
not say its composed ticks cost more than a full one (the rule incremental plans follow,
:func:`~airflow_provider_ct.ivm.plan.refresh.history_reason`: composed
ticks count as incremental ones, and after a few full ticks composing is
measured again).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from airflow_provider_ct.core.appending import land_staged
from airflow_provider_ct.core.catalog import CatalogConfig
from airflow_provider_ct.core.description import BatchDescription
from airflow_provider_ct.core.keys import SummaryKeys
from airflow_provider_ct.core.layout import TargetSettings
from airflow_provider_ct.core.mint import describe, target_upper
from airflow_provider_ct.core.query import ParsedQuery, parse_query, query_hash
from airflow_provider_ct.core.reports import WriteReport, WriteStatus
from airflow_provider_ct.core.settings import retry_incremental_after
from airflow_provider_ct.core.tables import UNKNOWN_ROWS, live_rows, load_table_or_none
from airflow_provider_ct.core.timeline import Timeline, TimelineEntry
from airflow_provider_ct.exceptions import CompositionError, ServiceUnavailableError
from airflow_provider_ct.ivm.plan.compose import Composition, Part, compose
from airflow_provider_ct.ivm.plan.modes import RefreshMode
from airflow_provider_ct.ivm.plan.refresh import history_reason
from airflow_provider_ct.ivm.plan.sizes import view_history
from airflow_provider_ct.spark.pinned_query import input_columns

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = logging.getLogger(__name__)

#: A part's table follows its SQL's columns: a new SQL is a new table (its name
#: is the SQL's digest), so only an input's evolution changes a part's schema.
PART_SETTINGS = TargetSettings(on_schema_change="recreate")

#: Why a view's first batch runs as written (its parts are created beside it).
FIRST_BATCH = (
    "the view's first batch runs in full, to measure what a full correction costs (its parts "
    "are created with it)"
)

#: ``run_write``, passed in: the write job calls this module, which calls it back.
Write = Callable[..., WriteReport]


@dataclass(frozen=True)
class ComposedQuery:
    """What the view's tick binds once its parts are at ``T``."""

    composition: Composition
    parsed: ParsedQuery
    #: The pins of what the query over the parts reads: inputs and parts.
    pins: dict[str, int | None]
    #: Part label -> how its tick went (its strategy, or ``unchanged``/``landed before``).
    ticks: dict[str, str]

    def details(self) -> dict[str, Any]:
        full = [
            p.label
            for p in self.composition.parts
            if p.reads_inputs and self.ticks.get(p.label) == "full"
        ]
        return {
            "parts": dict(self.ticks),
            #: Parts that read the view's inputs whole this tick (their own first batch, a
            #: change their plan could not follow): the tick was not incremental there.
            "parts_full": full,
            "composition": self.composition.explain(),
        }


def composed_tick(
    spark: SparkSession,
    config: CatalogConfig,
    sql: str,
    desc: BatchDescription,
    target: Any,
    dry_run: bool,
    write: Write,
    inputs: Mapping[str, Any] | None = None,
) -> ComposedQuery | None:
    """The view's parts at ``desc.time``, when this tick runs composed (module docstring).

    ``None``: the tick runs the query in full as written. A part that cannot
    serve the tick leaves it so; an unreachable store or catalog fails the
    tick, as anywhere else.

    :param target: the view's table as the job loaded it (``None``: not created yet).
    :param inputs: the inputs' tables as the job loaded them (``None``: loaded here).
    """
    columns = input_columns(inputs) if inputs is not None else None
    composition = compose(sql, desc.target, config.name, columns)
    if isinstance(composition, str):
        log.info("%s: %s", desc.target, composition)
        return None
    why_not = _why_not_now(config, sql, desc, target, dry_run, inputs)
    if why_not == FIRST_BATCH:  # the parts are created with the view: its next tick uses them
        _tick_parts_or_none(spark, config, composition, desc, write)
    if why_not:
        log.info("%s: not composed this tick (%s): %s", desc.target, why_not, composition.reason)
        return None
    return _tick_parts_or_none(spark, config, composition, desc, write)


def _tick_parts_or_none(
    spark: SparkSession,
    config: CatalogConfig,
    composition: Composition,
    desc: BatchDescription,
    write: Write,
) -> ComposedQuery | None:
    """:func:`tick_parts`, or ``None`` when a part cannot serve the tick (logged)."""
    try:
        return tick_parts(spark, config, composition, desc, write)
    except ServiceUnavailableError:
        raise
    except Exception as exc:  # any part's failure leaves the view to run in full as written
        log.warning(
            "%s: the parts of its query cannot serve this tick, so it runs in full as written: "
            "%s: %s",
            desc.target,
            type(exc).__name__,
            exc,
        )
        return None


def _why_not_now(
    config: CatalogConfig,
    sql: str,
    desc: BatchDescription,
    target: Any,
    dry_run: bool,
    inputs: Mapping[str, Any] | None = None,
) -> str:
    """Why this tick runs in full although the query splits ("" when it runs composed)."""
    if dry_run:
        return "a dry run writes no part"
    if target is None or target.current_snapshot() is None:
        return FIRST_BATCH
    if inputs is None:
        catalog = config.load()
        inputs = {name: catalog.load_table(name) for name in desc.inputs}
    rows = sum(live_rows(inputs[n], s) for n, s in desc.inputs.items())
    history = view_history(target, query_hash(sql))
    return history_reason(history, min(rows, UNKNOWN_ROWS), retry_incremental_after()) or ""


def tick_parts(
    spark: SparkSession,
    config: CatalogConfig,
    composition: Composition,
    desc: BatchDescription,
    write: Write,
) -> ComposedQuery:
    """Bring every part to ``desc.time``; the query over them, bound to their snapshots."""
    pins: dict[str, int | None] = dict(desc.inputs)
    ticks: dict[str, str] = {}
    catalog = config.load()
    for part in composition.parts:
        reads = parse_query(part.sql, target=part.table, catalog_name=config.name).inputs
        part_pins = {name: pins[name] for name in reads}
        pins[part.table], ticks[part.label] = _tick_part(
            spark, config, catalog, part, part_pins, desc.time, write
        )
    parsed = parse_query(composition.sql, target=desc.target, catalog_name=config.name)
    return ComposedQuery(composition, parsed, {n: pins[n] for n in parsed.inputs}, ticks)


def _tick_part(
    spark: SparkSession,
    config: CatalogConfig,
    catalog: Any,
    part: Part,
    pins: Mapping[str, int | None],
    time: int,
    write: Write,
) -> tuple[int | None, str]:
    """The part's snapshot at ``time`` (ticking it if needed), and how it got there."""
    table = load_table_or_none(catalog, part.table)
    timeline = Timeline.of(table) if table is not None else None
    if timeline is not None and target_upper(timeline).seals(time):
        return _checked(timeline, part, pins, time), "landed before"
    if timeline is not None and _unchanged(timeline, part, pins):
        return timeline.head_snapshot_id, "unchanged"
    desc = describe(part.table, timeline, time, pins)
    report = write(spark, config, part.sql, desc, refresh=RefreshMode.AUTO, target=PART_SETTINGS)
    if report.status is not WriteStatus.STAGED or report.manifest is None:
        raise CompositionError(
            f"the part {part.label} ({part.table}) was not staged: {report.status} "
            f"({report.reason})"
        )
    landed = land_staged(catalog.load_table(part.table), report.manifest, description=desc)
    if not landed.result.landed:
        log.info("part %s lost its append for %s: %s", part.table, time, landed.result.reason)
    timeline = Timeline.of(catalog.load_table(part.table))
    return _checked(timeline, part, pins, time), str(report.extra.get("strategy", "?"))


def _unchanged(timeline: Timeline, part: Part, pins: Mapping[str, int | None]) -> bool:
    """Whether the part's head is this SQL over exactly these pins (so it is the part now)."""
    head = timeline.entry(timeline.head_snapshot_id) if timeline.head_snapshot_id else None
    return head is not None and _ours(head, part, pins)


def _checked(
    timeline: Timeline, part: Part, pins: Mapping[str, int | None], time: int
) -> int | None:
    """The part's snapshot at ``time``, refused unless it is this SQL over these pins."""
    snapshot = timeline.snapshot_at(time)
    entry = timeline.entry(snapshot) if snapshot is not None else None
    if entry is None or not _ours(entry, part, pins):
        raise CompositionError(
            f"the part {part.label} ({part.table}) at {time} is not its SQL over the tick's "
            "input snapshots (another definition, a hand edit, or a later tick's pins)"
        )
    return snapshot


def _ours(entry: TimelineEntry, part: Part, pins: Mapping[str, int | None]) -> bool:
    recorded = entry.summary.get(SummaryKeys.QUERY_HASH)
    return recorded == query_hash(part.sql) and dict(entry.inputs or {}) == dict(pins)


def fitted_to_view(composed: ComposedQuery, schema: Any, target: Any) -> ComposedQuery | None:
    """``composed`` with the query over the parts cast to the view's decimal types, where
    they differ only in precision; ``None`` when none does.

    A ``SUM`` of the finest groups' sums (``ROLLUP``, :mod:`~..ivm.plan.grouping_sets_split`)
    has ten more digits of precision than the sum as written; its values are the same
    sums, so the view's own type holds them. A decimal that differs otherwise (an
    average's quotient has its own scale and rounding; an input's decimal widened since
    the view's column was made, which the query as written evolves the view to) raises
    :class:`~airflow_provider_ct.exceptions.CompositionError`: the tick runs as written.

    :param schema: the query over the parts as Spark analysed it; ``target``: the view's
        table (PyIceberg).
    """
    from pyiceberg.types import DecimalType as IcebergDecimal
    from pyspark.sql.types import DecimalType

    ours = {f.name.lower(): f.field_type for f in target.schema().fields}
    casts = {}
    for field in schema.fields:
        want = ours.get(field.name.lower())
        have = field.dataType
        if want is None or not (isinstance(have, DecimalType) or isinstance(want, IcebergDecimal)):
            continue
        fits = isinstance(have, DecimalType) and isinstance(want, IcebergDecimal)
        if not fits or (have.scale, have.precision) not in _fitting(want):
            raise CompositionError(f"{field.name} is {have.simpleString()} over the parts, {want}")
        if have.precision != want.precision:
            casts[field.name] = f"DECIMAL({want.precision}, {want.scale})"
    if not casts:
        return None
    items = ", ".join(
        f"CAST(`{f.name}` AS {casts[f.name]}) AS `{f.name}`" if f.name in casts else f"`{f.name}`"
        for f in schema.fields
    )
    sql = f"SELECT {items} FROM ({composed.composition.sql}) AS __ct_top"
    parsed = parse_query(sql, catalog_name=composed.parsed.catalog_name)
    return replace(composed, parsed=parsed)


def _fitting(decimal: Any) -> tuple[tuple[int, int], ...]:
    """The (scale, precision) pairs the view's column of type ``decimal`` takes: its own,
    and the one Spark gives a ``SUM`` of it (a sum of sums)."""
    return ((decimal.scale, decimal.precision), (decimal.scale, min(38, decimal.precision + 10)))
