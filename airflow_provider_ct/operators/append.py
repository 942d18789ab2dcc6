"""AppendOperator: compare-and-append a staged batch; losers discard their files."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

from airflow.sdk import BaseOperator

from airflow_provider_ct.core.staging import append_batch, discard, forget, read_manifest
from airflow_provider_ct.core.timeline import Timeline
from airflow_provider_ct.exceptions import DescriptionError, StagingError
from airflow_provider_ct.hooks.iceberg import IcebergCatalogHook
from airflow_provider_ct.operators._common import load_json_object
from airflow_provider_ct.spark.write_job import STATUS_STAGED

log = logging.getLogger(__name__)


class AppendOperator(BaseOperator):
    """Commit a staged batch with compare-and-append on the target's frontier.

    Succeeds in every ordinary outcome and says which in its XCom:
    ``{"appended": true}`` when the batch is on the table (including a retry
    that finds it already there), ``{"appended": false, "upper": ...}`` when
    another writer got there first (its staged files are deleted; the next
    tick corrects). Only an unknown commit outcome fails the task, so that
    Airflow's retry settles it.

    :param write_task_id: the WriteOperator whose report to append.
    :param report: the write report itself (dict or JSON) instead.
    """

    template_fields: Sequence[str] = ("report",)
    ui_color = "#d9f2d0"

    def __init__(
        self,
        *,
        write_task_id: str | None = None,
        report: dict[str, Any] | str | None = None,
        iceberg_conn_id: str = IcebergCatalogHook.default_conn_name,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        if write_task_id is None and report is None:
            raise ValueError("pass write_task_id= or report=")
        self.write_task_id = write_task_id
        self.report = report
        self.iceberg_conn_id = iceberg_conn_id

    def execute(self, context: Any) -> dict[str, Any]:
        value = self.report
        if value is None:
            value = context["ti"].xcom_pull(task_ids=self.write_task_id)
            if value is None:
                raise DescriptionError(f"task {self.write_task_id} returned no write report")
        report = load_json_object(value, "write report")
        if report.get("status") != STATUS_STAGED:
            log.info(
                "nothing to append: write status %s (%s)",
                report.get("status"),
                report.get("reason", ""),
            )
            return {
                "appended": False,
                "status": report.get("status"),
                "reason": report.get("reason", ""),
            }
        if not isinstance(report.get("manifest"), str):
            raise DescriptionError(f"write report has no manifest path: {report!r:.200}")
        manifest = report["manifest"]
        hook = IcebergCatalogHook(self.iceberg_conn_id)
        try:
            batch = read_manifest(manifest)
        except StagingError:
            # The manifest is dropped once its batch lands; a retry after that
            # (or after cleanup) decides from the table's own history.
            return self._without_manifest(hook, report, manifest)
        table = hook.load_table(batch.target)
        result = append_batch(table, batch)
        if result.landed:
            forget(manifest)
            log.info(
                "batch %s %s; upper of %s is now %s",
                batch.batch_id,
                "was already appended" if result.already_landed else "appended",
                batch.target,
                result.upper.to_summary(),
            )
        else:
            deleted = discard(batch, manifest)
            log.info(
                "batch %s lost (%s): deleted %d staged file(s); upper of %s is %s; the "
                "next tick corrects",
                batch.batch_id,
                result.reason,
                deleted,
                batch.target,
                result.upper.to_summary(),
            )
        return {
            "appended": result.landed,
            "already_appended": result.already_landed,
            "batch_id": batch.batch_id,
            "target": batch.target,
            "upper": result.upper.to_json(),
            "snapshot_ids": list(result.snapshot_ids),
            "rows_inserted": batch.added_record_count if result.landed else 0,
            "rows_deleted": batch.deleted_record_count if result.landed else 0,
            "reason": result.reason,
        }

    def _without_manifest(
        self, hook: IcebergCatalogHook, report: dict[str, Any], manifest: str
    ) -> dict[str, Any]:
        batch_id, target = report.get("description_id"), report.get("target")
        if not isinstance(batch_id, str) or not isinstance(target, str):
            raise DescriptionError(f"write report lacks description_id/target: {report!r:.200}")
        timeline = Timeline.of(hook.load_table(target))
        landed = timeline.find_batch(batch_id) is not None
        if landed:
            log.info(
                "batch %s is already on %s (manifest gone); reporting success", batch_id, target
            )
        else:
            log.warning(
                "batch %s is not on %s and its manifest %s is gone (cleaned up); "
                "the next tick corrects",
                batch_id,
                target,
                manifest,
            )
        return {
            "appended": landed,
            "already_appended": landed,
            "batch_id": batch_id,
            "target": target,
            "upper": timeline.upper.to_json(),
            "snapshot_ids": [e.snapshot_id for e in timeline.entries if e.batch_id == batch_id],
            "rows_inserted": 0,
            "rows_deleted": 0,
            "reason": "batch already on main" if landed else "staged batch vanished",
        }
