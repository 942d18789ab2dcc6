"""AppendOperator: compare-and-append a staged batch; losers discard their files."""

from __future__ import annotations

import logging
from collections.abc import Collection, Sequence
from typing import TYPE_CHECKING, Any

from airflow.sdk import Asset, BaseOperator

from airflow_provider_ct.assets import emit_frontier_event, first_alias
from airflow_provider_ct.core.appending import LandResult, land_staged
from airflow_provider_ct.core.commit import catalog_transport_errors
from airflow_provider_ct.core.description import BatchDescription
from airflow_provider_ct.core.frontier import Frontier
from airflow_provider_ct.core.landing import landing_of
from airflow_provider_ct.core.owner import Owner, claim
from airflow_provider_ct.core.reports import AppendOutcome, WriteReport, WriteStatus
from airflow_provider_ct.core.sealed import frontier_event_extra
from airflow_provider_ct.core.staging import batch_files_live
from airflow_provider_ct.core.sweep import sweep_staged
from airflow_provider_ct.core.timeline import Timeline
from airflow_provider_ct.exceptions import CTError, DescriptionError, ManifestMissingError
from airflow_provider_ct.hooks.iceberg import IcebergCatalogHook
from airflow_provider_ct.lineage import TickLineage, describe_tick, safe_lineage
from airflow_provider_ct.operators._common import QUIET_REPORT_FIELD, load_json_object, owner_of

if TYPE_CHECKING:
    from pyiceberg.table import Table

log = logging.getLogger(__name__)


def checked_report(value: Any) -> WriteReport:
    """A write report (an XCom: dict, JSON or a rendered dict) with every field checked."""
    return WriteReport.from_json(load_json_object(value, "write report"))


class AppendStep:
    """The commit step of a tick: land a staged batch, announce it, sweep after a loss.

    :class:`AppendOperator` runs it on the write task's report;
    :class:`~.tick.ViewTickOperator` runs it after its own write. The class
    using it sets ``iceberg_conn_id``, ``asset``, ``writer_kind``,
    ``lineage_sql`` and (as every operator has) ``task_id`` and ``outlets``.
    """

    iceberg_conn_id: str
    asset: Asset | None
    writer_kind: str
    lineage_sql: str | None
    task_id: str
    outlets: Any

    def _append_report(
        self, context: Any, report: WriteReport, description: BatchDescription | None
    ) -> dict[str, Any]:
        """Land the batch of a checked write ``report``; the outcome as the task's XCom."""
        if report.status != WriteStatus.STAGED or report.manifest is None:
            log.info("nothing to append: write status %s (%s)", report.status, report.reason)
            return AppendOutcome(
                False, report.target, status=str(report.status), reason=report.reason
            ).to_json()
        hook = IcebergCatalogHook(self.iceberg_conn_id)
        table = hook.load_table(report.target)
        allowed = None if description is None else self._allowed_times(hook, table, description)
        try:
            outcome = land_staged(
                table, report.manifest, description=description, allowed_times=allowed
            )
        except ManifestMissingError:
            # The manifest is dropped once its batch lands; a retry after that
            # (or after cleanup) decides from the table's own history.
            result = _without_manifest(table, report)
        else:
            if not outcome.result.landed:
                self._sweep_after_loss(table)
            result = _outcome(outcome, quiet=report.quiet)
        self._lineage_result = result.to_json()
        if result.appended:
            self._announce(context, result, report, description)
            owner = owner_of(context)
            if owner is not None and Owner.of(table) is None:
                claim(table, owner)  # a target this tick created: the mint could not yet
        return result.to_json()

    def _allowed_times(
        self, hook: IcebergCatalogHook, table: Table, description: BatchDescription
    ) -> Collection[int] | None:
        """The times a manifest answering ``description`` may stage; None: a view's rule.

        A view's batch stages at most the tick's time. A continual task's
        operator overrides this with its batch's input times.
        """
        return None

    def _announce(
        self,
        context: Any,
        result: AppendOutcome,
        report: WriteReport,
        description: BatchDescription | None,
    ) -> None:
        """Emit the target's asset event: its upper moved (see ``assets.py`` for why an alias)."""
        alias = first_alias(self.outlets)
        if self.asset is None or alias is None:
            return
        snapshots = result.snapshot_ids
        refresh = "quiet" if report.quiet else report.extra.get("strategy")
        extra = frontier_event_extra(
            table=result.target,
            upper=Frontier.from_json(result.upper),
            lower=None if description is None else description.lower,
            time=None if description is None else description.time,
            snapshot_id=snapshots[-1] if snapshots else None,
            batch_id=result.batch_id,
            rows_inserted=result.rows_inserted,
            rows_retracted=result.rows_deleted,
            refresh=refresh,
            kind=self.writer_kind,
        )
        emit_frontier_event(context, alias, self.asset, extra)

    @staticmethod
    def _sweep_after_loss(table: Table) -> None:
        """Sweep leftovers of earlier losers; a failure here never changes the outcome.

        Losing a race is when such leftovers are likeliest; the default grace
        protects anything a live writer may still own.
        """
        expected: tuple[type[BaseException], ...] = (CTError, *catalog_transport_errors())
        try:
            sweep_staged(table)
        except expected as exc:
            log.warning("sweeping %s after a lost append failed: %s", ".".join(table.name()), exc)

    def get_openlineage_facets_on_complete(self, task_instance: Any) -> Any:
        """Pinned inputs and the batch's new snapshot on the target: docs/lineage.md."""
        description = getattr(self, "_lineage_description", None)
        result = getattr(self, "_lineage_result", None)
        return safe_lineage(self.task_id, lambda: self._describe_append(description, result))

    def _describe_append(
        self, description: BatchDescription | None, result: dict[str, Any] | None
    ) -> TickLineage | None:
        """Nothing without the description (no pinned inputs to report) or a landed batch."""
        if description is None or result is None or not result.get("appended"):
            return None
        snapshots = [int(s) for s in result.get("snapshot_ids") or []]
        facts = {
            "snapshotId": snapshots[-1] if snapshots else None,
            "snapshotIds": snapshots,
            "alreadyAppended": result.get("already_appended"),
            "rowsInserted": result.get("rows_inserted"),
            "rowsDeleted": result.get("rows_deleted"),
        }
        hook = IcebergCatalogHook(self.iceberg_conn_id)
        return describe_tick(
            hook.get_config(),
            description,
            sql=self.lineage_sql,
            output_facts=facts,
            rows_inserted=result.get("rows_inserted"),
        )


class AppendOperator(AppendStep, BaseOperator):
    """Commit a staged batch with compare-and-append on the target's frontier.

    Succeeds in every ordinary outcome and says which in its XCom:
    ``{"appended": true}`` when the batch is on the table (including a retry,
    or a second attempt of the same batch, that finds it already there; a
    second attempt's own staged files are removed), ``{"appended": false,
    "upper": ...}`` when another writer got there first (its staged files are
    deleted; the next tick corrects). A malformed report, a manifest that is
    not completely staged, not the target's or not the description's fails
    the task and changes nothing; so does an unknown commit outcome, so that
    Airflow's retry settles it.

    :param write_task_id: the WriteOperator whose report to append.
    :param report: the write report itself (dict or JSON) instead.
    :param description_task_id: the task whose XCom is the batch description
        the write was given (the mint); the manifest must answer exactly it.
        Also what OpenLineage reports as the pinned inputs (docs/lineage.md).
    :param lineage_sql: the view's query, for OpenLineage column lineage only.
    :param asset: the target's Asset. When the batch is on the table (the
        upper moved), the task announces it: one asset event for ``asset``,
        through the first :class:`AssetAlias` of ``outlets``, with the new
        upper, time, snapshot and batch ids, rows and refresh strategy in its
        ``extra``. A loser, or a write that staged nothing, announces nothing.
    :param writer_kind: the ``kind`` of that event (``view``, ``continual-task``).
    """

    template_fields: Sequence[str] = ("report",)
    ui_color = "#d9f2d0"

    def __init__(
        self,
        *,
        write_task_id: str | None = None,
        report: dict[str, Any] | str | None = None,
        description_task_id: str | None = None,
        iceberg_conn_id: str = IcebergCatalogHook.default_conn_name,
        lineage_sql: str | None = None,
        asset: Asset | None = None,
        writer_kind: str = "view",
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.lineage_sql = lineage_sql
        if write_task_id is None and report is None:
            raise ValueError("pass write_task_id= or report=")
        self.asset = asset
        self.writer_kind = writer_kind
        self.write_task_id = write_task_id
        self.report = report
        self.description_task_id = description_task_id
        self.iceberg_conn_id = iceberg_conn_id

    def _minted(self, context: Any) -> dict[str, Any] | None:
        """The mint's XCom (the description), or ``None`` without ``description_task_id``."""
        if self.description_task_id is None:
            return None
        value = context["ti"].xcom_pull(task_ids=self.description_task_id)
        if value is None:
            raise DescriptionError(f"task {self.description_task_id} returned no description")
        return load_json_object(value, "batch description")

    def _report_value(self, context: Any, minted: dict[str, Any] | None) -> Any:
        """The write report: given, the write task's, or (a quiet tick) the one the mint staged.

        A mint that found the tick quiet staged its empty batch, put the
        report beside its description (``quiet_report``) and skipped the write.
        """
        if self.report is not None:
            return self.report
        value = context["ti"].xcom_pull(task_ids=self.write_task_id)
        if value is None and minted is not None:
            value = minted.get(QUIET_REPORT_FIELD)
        if value is None:
            raise DescriptionError(
                f"task {self.write_task_id} returned no write report"
                + (f" and {self.description_task_id} staged no quiet batch" if minted else "")
            )
        return value

    def execute(self, context: Any) -> dict[str, Any]:
        minted = self._minted(context)
        report = checked_report(self._report_value(context, minted))
        description = None if minted is None else BatchDescription.from_json(minted)
        self._lineage_description = description
        if description is not None and report.description_id != description.id:
            raise DescriptionError(
                f"write report is for description {report.description_id}, not for "
                f"{description.id} minted by {self.description_task_id}"
            )
        return self._append_report(context, report, description)


def _outcome(outcome: LandResult, *, quiet: bool) -> AppendOutcome:
    """The append's XCom for what :func:`land_staged` did, logged."""
    batch, result = outcome.batch, outcome.result
    if result.landed:
        log.info(
            "batch %s %s; upper of %s is now %s%s",
            batch.batch_id,
            "was already appended" if result.already_landed else "appended",
            batch.target,
            result.upper.to_summary(),
            ""
            if outcome.landed_by_this_attempt
            else f" (by attempt {outcome.landed_attempt}; this attempt's "
            f"{outcome.files_deleted} staged file(s) removed)",
        )
    else:
        log.info(
            "batch %s lost (%s): deleted %d staged file(s); upper of %s is %s; the "
            "next tick corrects",
            batch.batch_id,
            result.reason,
            outcome.files_deleted,
            batch.target,
            result.upper.to_summary(),
        )
    mine = outcome.landed_by_this_attempt
    return AppendOutcome(
        appended=result.landed,
        target=batch.target,
        batch_id=batch.batch_id,
        already_appended=result.already_landed,
        attempt=batch.attempt,
        landed_attempt=outcome.landed_attempt,
        upper=result.upper.to_json(),
        snapshot_ids=list(result.snapshot_ids),
        rows_inserted=batch.added_record_count if mine else 0,
        rows_deleted=batch.deleted_record_count if mine else 0,
        files_deleted=outcome.files_deleted,
        reason=result.reason,
        quiet=quiet,
    )


def _without_manifest(table: Table, report: WriteReport) -> AppendOutcome:
    """A retried append whose manifest is gone: the table's own history says if it landed."""
    batch_id, target = report.description_id, report.target
    timeline = Timeline.of(table)
    landed = landing_of(
        timeline, batch_id, files_live=lambda: batch_files_live(table, batch_id)
    ).on_table
    if landed:
        log.info("batch %s is already on %s (manifest gone); reporting success", batch_id, target)
    else:
        log.warning(
            "batch %s is not on %s and its manifest %s is gone (cleaned up); "
            "the next tick corrects",
            batch_id,
            target,
            report.manifest,
        )
    return AppendOutcome(
        appended=landed,
        target=target,
        batch_id=batch_id,
        already_appended=landed,
        upper=timeline.upper.to_json(),
        snapshot_ids=[e.snapshot_id for e in timeline.entries if e.batch_id == batch_id],
        reason="batch already on main" if landed else "staged batch vanished",
    )
