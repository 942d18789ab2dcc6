"""WriteOperator: stage one description's batch, by a Spark job or (quiet) from metadata.

The operator decides what to run (a quiet tick's empty batch, or a
:class:`~airflow_provider_ct.spark.jobs.JobSpec`);
:class:`~airflow_provider_ct.hooks.spark_job.SparkJobHook` decides how.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

from airflow.sdk import BaseOperator

from airflow_provider_ct.core.description import BatchDescription
from airflow_provider_ct.core.layout import TargetSettings
from airflow_provider_ct.core.query import normalize_table_name
from airflow_provider_ct.engine.client import ENGINES
from airflow_provider_ct.exceptions import ConfigurationError, DescriptionError
from airflow_provider_ct.hooks.iceberg import IcebergCatalogHook
from airflow_provider_ct.hooks.spark_job import DEFAULT_LOCAL_MASTER, SparkJobHook
from airflow_provider_ct.ivm.plan.modes import RefreshMode
from airflow_provider_ct.lineage import TickLineage, describe_tick, safe_lineage
from airflow_provider_ct.operators._common import (
    NOT_QUIET_FIELD,
    RenderedSqlMixin,
    load_json_object,
)
from airflow_provider_ct.operators._quiet import (
    QuietRule,
    ViewQuiet,
    check_pins,
    load_inputs,
    quiet_batch,
)
from airflow_provider_ct.spark.jobs import JobSpec, ViewWrite

log = logging.getLogger(__name__)

__all__ = ["DEFAULT_LOCAL_MASTER", "WriteOperator"]


class WriteOperator(RenderedSqlMixin, BaseOperator):
    """Compute the correction for a description and stage it (nothing visible yet).

    :param target: the view's table.
    :param sql: the view's query.
    :param description: the batch description (dict or JSON); default: the
        XCom of ``description_task_id``.
    :param description_task_id: task whose return value is the description.
    :param spark_conn_id: Spark connection (standalone, YARN, k8s); ``None``
        runs ``spark-submit`` in local mode with ``spark_master``.
    :param spark_master: master used when there is no Spark connection.
    :param report_only: a dry run: report the rows to insert and to delete (how
        far the table is from its definition) without staging anything.
    :param spark_conf: extra Spark properties.
    :param quiet_ticks: decide from metadata first whether the tick can change
        the target at all, and if provably not, stage an empty batch without
        starting Spark (see ``core/quiet.py``). ``False`` always runs the job
        (e.g. after changing a Spark setting that changes the query's result).
    :param refresh: ``auto`` (incremental where possible, the full correction
        otherwise, with the reason in the report), ``incremental`` (never fall
        back for the query's shape) or ``full`` (see docs/views.md).
    :param verify_every: every N-th tick runs the full correction and reports
        how many rows it fixed (0: never).
    :param engine: ``spark-submit`` (a new Spark application per task) or
        ``warm`` (a long-lived driver on this worker shared by consecutive
        tasks, see docs/engines.md); ``None``: the Spark connection's extra
        ``ct_engine``, else warm where a warm driver can run and be reused and
        ``spark-submit`` elsewhere (``engine/choice.py``, logged once per task).
    :param warm_idle_timeout: seconds a warm driver stays up without jobs
        (``None``: the connection's extra ``ct_warm_idle_timeout``, else 900).
    :param target_settings: the target's layout when the job creates it and
        what to do when the query's schema changed
        (:class:`~airflow_provider_ct.core.layout.TargetSettings` as JSON).
    """

    template_fields: Sequence[str] = ("target", "sql", "description")
    template_ext: Sequence[str] = (".sql",)
    ui_color = "#f7e6c4"
    #: The job, as messages name it.
    job_kind = "write job"
    #: Whether the description comes from ``description``/``description_task_id``
    #: (not for a task that mints its own, :class:`~.tick.ViewTickOperator`).
    reads_description = True

    def __init__(
        self,
        *,
        target: str,
        sql: str,
        description: dict[str, Any] | str | None = None,
        description_task_id: str | None = None,
        spark_conn_id: str | None = None,
        spark_master: str = DEFAULT_LOCAL_MASTER,
        report_only: bool = False,
        spark_conf: dict[str, str] | None = None,
        driver_memory: str = "2g",
        iceberg_conn_id: str = IcebergCatalogHook.default_conn_name,
        quiet_ticks: bool = True,
        refresh: str = "auto",
        verify_every: int = 0,
        engine: str | None = None,
        warm_idle_timeout: float | None = None,
        target_settings: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        TargetSettings.from_json(target_settings)  # a bad one breaks the DAG import
        self.target_settings = target_settings
        if description is None and description_task_id is None and self.reads_description:
            raise ValueError("pass description= or description_task_id=")
        self.target = target
        self.sql = sql
        self.description = description
        self.description_task_id = description_task_id
        self.spark_conn_id = spark_conn_id
        self.spark_master = spark_master
        self.report_only = report_only
        self.spark_conf = dict(spark_conf or {})
        self.driver_memory = driver_memory
        self.iceberg_conn_id = iceberg_conn_id
        self.quiet_ticks = quiet_ticks
        if not isinstance(verify_every, int) or verify_every < 0:
            raise ConfigurationError(f"verify_every={verify_every!r}: expected an integer >= 0")
        self.refresh = RefreshMode.parse(refresh).value
        self.verify_every = verify_every
        if engine is not None and engine not in ENGINES:
            raise ConfigurationError(f"engine={engine!r}: expected one of {', '.join(ENGINES)}")
        self.engine = engine
        self._job_hook: SparkJobHook | None = None
        self.warm_idle_timeout = warm_idle_timeout

    def _minted(self, context: Any) -> dict[str, Any]:
        """The description as passed or as the mint returned it (with its other fields)."""
        value = self.description
        if value is None:
            value = context["ti"].xcom_pull(task_ids=self.description_task_id)
            if value is None:
                raise DescriptionError(f"task {self.description_task_id} returned no description")
        return load_json_object(value, "batch description")

    def quiet_rule(self) -> QuietRule:
        """What "quiet" means for this task's kind (shared with the mint, see ``_quiet``)."""
        return ViewQuiet(self.sql)

    def job_spec(self) -> JobSpec:
        """The job to run: what this operator differs in from the continual one."""
        return JobSpec(
            ViewWrite(
                sql=self.sql,
                refresh=RefreshMode(self.refresh),
                verify_every=self.verify_every,
                dry_run=self.report_only,
                target=self.target_settings,
            )
        )

    def job_hook(self) -> SparkJobHook:
        """The hook that runs the job (engine, settings, jars, report exchange)."""
        return SparkJobHook(
            spark_conn_id=self.spark_conn_id,
            spark_master=self.spark_master,
            spark_conf=self.spark_conf,
            driver_memory=self.driver_memory,
            engine=self.engine,
            warm_idle_timeout=self.warm_idle_timeout,
        )

    def on_kill(self) -> None:
        """Stop the running Spark job (``spark-submit``'s, or the warm driver's)."""
        hook = getattr(self, "_job_hook", None)
        if hook is not None:
            hook.on_kill()

    def execute(self, context: Any) -> dict[str, Any]:
        minted = self._minted(context)
        return self._write(BatchDescription.from_json(minted), bool(minted.get(NOT_QUIET_FIELD)))

    def _write(self, desc: BatchDescription, not_quiet: bool = False) -> dict[str, Any]:
        """Stage (or, quiet, stage empty) the batch of ``desc``; the write report.

        :param not_quiet: the mint asked the quiet rule of this description
            and the tick is not quiet: the job runs without asking again.
        """
        hook = IcebergCatalogHook(self.iceberg_conn_id)
        config = hook.get_config()
        target = normalize_table_name(self.target, config.name)
        if desc.target != target:
            raise DescriptionError(
                f"description {desc.id} is for {desc.target}, not for this task's target {target}"
            )
        # Everything checkable without a JVM is checked before Spark starts.
        rule = self.quiet_rule()
        self._lineage_state: tuple[BatchDescription, dict[str, Any] | None] = (desc, None)
        if not_quiet:
            check_pins(hook, desc, rule)
            log.info("not a quiet tick (its mint asked the quiet rule), running Spark")
        else:
            inputs = load_inputs(hook, desc, rule)
            staged = None
            if self.quiet_ticks and not self.report_only:
                staged = quiet_batch(hook, desc, rule, inputs)
            if staged is not None:
                self._lineage_state = (desc, staged)
                return staged
        self._job_hook = self.job_hook()
        what = f"the {self.job_kind} for {target}"
        report = self._job_hook.run(self.job_spec(), desc, hook.get_config(), what=what)
        log.info(
            "%s for %s: %s, +%s -%s rows%s",
            self.job_kind,
            target,
            report.status,
            report.rows_to_insert,
            report.rows_to_delete,
            f" ({report.reason})" if report.reason else "",
        )
        staged = report.to_json()
        self._lineage_state = (desc, staged)
        return staged

    def _lineage_sql(self) -> str | None:
        """The query column lineage is traced from (a view's SELECT)."""
        return self.sql

    def get_openlineage_facets_on_complete(self, task_instance: Any) -> Any:
        """The pinned inputs and the staged batch (not yet on the table): docs/lineage.md."""
        state = getattr(self, "_lineage_state", None)
        return safe_lineage(self.task_id, lambda: self._describe(state))

    def _describe(
        self, state: tuple[BatchDescription, dict[str, Any] | None] | None
    ) -> TickLineage | None:
        if state is None:
            return None
        desc, report = state
        report = report or {}
        facts = {
            "status": report.get("status"),
            "quiet": report.get("quiet"),
            "rowsToInsert": report.get("rows_to_insert"),
            "rowsToDelete": report.get("rows_to_delete"),
        }
        hook = IcebergCatalogHook(self.iceberg_conn_id)
        return describe_tick(
            hook.get_config(),
            desc,
            sql=self._lineage_sql(),
            output_facts={k: v for k, v in facts.items() if v is not None},
        )
