"""The quiet path of a tick, shared by the write task and the mint that may skip it.

Why here and not on the write operator only: in the three-task layout a
quiet tick's write task would run for ~0.1 s of metadata reads inside an
Airflow task instance that costs more than that on its own (about 0.1 s in
``dag.test()``, most of a second under the real scheduler). The mint has
the description and the catalog open already, so with ``quiet_ticks`` it
runs the same check, stages the same empty batch, and skips the write task;
the append lands the batch as it lands any other. One rule object per kind
(a view, a continual task) says which tables the check reads and what
"quiet" means for it, so the mint and the write can never disagree.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, NamedTuple, Protocol

from airflow_provider_ct.core.continual import (
    CONTINUAL_TASK_KIND,
    ContinualTaskDef,
    parse_continual_task,
)
from airflow_provider_ct.core.frontier import now_ms
from airflow_provider_ct.core.keys import SummaryKeys
from airflow_provider_ct.core.query import parse_query, query_hash
from airflow_provider_ct.core.quiet import (
    Quiet,
    continual_tick_is_quiet,
    stage_empty_batch,
    view_tick_is_quiet,
)
from airflow_provider_ct.core.refresh_state import view_batch_summary
from airflow_provider_ct.core.reports import WriteReport, WriteStatus
from airflow_provider_ct.exceptions import DescriptionError

if TYPE_CHECKING:
    from pyiceberg.table import Table

    from airflow_provider_ct.core.description import BatchDescription
    from airflow_provider_ct.hooks.iceberg import IcebergCatalogHook

log = logging.getLogger(__name__)


class Loaded(NamedTuple):
    """The tables a quiet check reads, loaded once per task."""

    #: The target, ``None`` before its first tick.
    target: Table | None
    inputs: dict[str, Table]


class QuietRule(Protocol):
    """What differs between a view's quiet check and a continual task's."""

    @property
    def records_time(self) -> bool:
        """Whether a quiet batch records the tick's time (a view) or only
        advances the upper (a continual task whose input did not change)."""

    def tables_read(self, catalog_name: str, target: str) -> list[str]:
        """The tables the job reads (a definition that does not parse fails here)."""

    def check(self, desc: BatchDescription, loaded: Loaded, catalog_name: str) -> Quiet:
        """Whether the tick provably changes nothing (metadata reads only)."""

    def query_hash(self) -> str:
        """The hash the quiet batch records, as the job's batch would."""


@dataclass(frozen=True)
class ViewQuiet:
    """A view's tick is quiet when no input changed since its last batch of the same query."""

    sql: str
    records_time: bool = True

    def tables_read(self, catalog_name: str, target: str) -> list[str]:
        return list(parse_query(self.sql, target=target, catalog_name=catalog_name).inputs)

    def check(self, desc: BatchDescription, loaded: Loaded, catalog_name: str) -> Quiet:
        return view_tick_is_quiet(
            loaded.target, desc, sql=self.sql, inputs=loaded.inputs, catalog_name=catalog_name
        )

    def query_hash(self) -> str:
        return query_hash(self.sql)


@dataclass(frozen=True)
class ContinualQuiet:
    """A continual task's tick is quiet when its job would process no input time."""

    definition: str
    namespace: str | None
    records_time: bool = False

    def tables_read(self, catalog_name: str, target: str) -> list[str]:
        task = self._task(catalog_name)
        return [task.input, *task.references]

    def check(self, desc: BatchDescription, loaded: Loaded, catalog_name: str) -> Quiet:
        task = self._task(catalog_name)
        return continual_tick_is_quiet(
            loaded.target,
            desc,
            input_name=task.input,
            input_table=loaded.inputs[task.input],
            snapshot=task.snapshot,
        )

    def query_hash(self) -> str:
        return query_hash(self.definition, CONTINUAL_TASK_KIND)

    def _task(self, catalog_name: str) -> ContinualTaskDef:
        return parse_continual_task(
            self.definition, default_namespace=self.namespace, catalog_name=catalog_name
        )


def load_inputs(
    hook: IcebergCatalogHook, desc: BatchDescription, rule: QuietRule
) -> dict[str, Table]:
    """The tables ``rule`` reads, loaded; each must exist and be pinned by ``desc``."""
    names = rule.tables_read(hook.get_config().name, desc.target)
    inputs = {name: hook.load_table(name) for name in names}  # all exist
    _require_pins(desc, names)
    return inputs


def check_pins(hook: IcebergCatalogHook, desc: BatchDescription, rule: QuietRule) -> None:
    """Every table ``rule`` reads must be pinned by ``desc`` (checked before any Spark)."""
    _require_pins(desc, rule.tables_read(hook.get_config().name, desc.target))


def _require_pins(desc: BatchDescription, names: list[str]) -> None:
    missing = [t for t in names if t not in desc.inputs]
    if missing:
        raise DescriptionError(f"description {desc.id} does not pin inputs {missing}")


def quiet_batch(
    hook: IcebergCatalogHook, desc: BatchDescription, rule: QuietRule, inputs: dict[str, Table]
) -> dict[str, Any] | None:
    """Stage the empty batch of a quiet tick and return its write report; ``None`` if not quiet."""
    table = hook.load_table_or_none(desc.target)
    quiet = rule.check(desc, Loaded(table, inputs), hook.get_config().name)
    if not quiet.quiet:
        log.info("not a quiet tick, running Spark: %s", quiet.reason)
        return None
    assert table is not None  # a quiet tick has a head to stay equal to
    digest = rule.query_hash()
    summary = {SummaryKeys.QUERY_HASH: digest}
    if rule.records_time:  # a view: its result is the query over these snapshots
        sources = {n: (inputs[n], desc.inputs.get(n)) for n in inputs}
        summary = view_batch_summary(digest, sources, now_ms())
    _, manifest = stage_empty_batch(table, desc, record_time=rule.records_time, summary=summary)
    log.info("quiet tick for %s (no Spark job): %s", desc.target, quiet.reason)
    report = WriteReport(
        WriteStatus.STAGED, desc.id, desc.target, manifest=manifest, reason=quiet.reason, quiet=True
    )
    return report.to_json()
