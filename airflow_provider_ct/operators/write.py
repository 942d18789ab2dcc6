"""WriteOperator: run the write job (a Spark application) for one description."""

from __future__ import annotations

import functools
import json
import logging
import os
import posixpath
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

from airflow.sdk import BaseHook, BaseOperator

from airflow_provider_ct.core.catalog import CatalogConfig
from airflow_provider_ct.core.description import BatchDescription
from airflow_provider_ct.core.keys import SummaryKeys
from airflow_provider_ct.core.planner import REFRESH_MODES
from airflow_provider_ct.core.query import normalize_table_name, parse_query, query_hash
from airflow_provider_ct.core.quiet import Quiet, stage_empty_batch, view_tick_is_quiet
from airflow_provider_ct.engine.client import ENGINES
from airflow_provider_ct.exceptions import ConfigurationError, DescriptionError, SparkJobError
from airflow_provider_ct.hooks.iceberg import IcebergCatalogHook
from airflow_provider_ct.lineage import TickLineage, describe_tick, safe_lineage
from airflow_provider_ct.operators._common import (
    RenderedSqlMixin,
    load_json_object,
    load_table_or_none,
)
from airflow_provider_ct.spark import write_job
from airflow_provider_ct.spark.conf import JarSettings, spark_jars
from airflow_provider_ct.spark.exchange import (
    EXCHANGE_DIR_KEY,
    exchange_root,
    inline,
    new_job_folder,
    read_text,
    remove_folder,
)
from airflow_provider_ct.spark.job_errors import ERROR_FILE, job_error
from airflow_provider_ct.spark.write_job import STATUS_STAGED, WriteReport

if TYPE_CHECKING:
    from pyiceberg.table import Table

log = logging.getLogger(__name__)

DEFAULT_LOCAL_MASTER = "local[2]"
REPORT_FILE = "report.json"


def _spark_submit_hook(spark_conn_id: str | None, master: str, **kwargs: Any) -> Any:
    """SparkSubmitHook that never falls back to YARN: no connection means ``master``."""
    from airflow.providers.apache.spark.hooks.spark_submit import SparkSubmitHook

    class _Hook(SparkSubmitHook):
        def _resolve_connection(self) -> dict[str, Any]:
            data: dict[str, Any] = super()._resolve_connection()
            if spark_conn_id is None:
                data["master"] = master
                data["deploy_mode"] = None
            return data

    return _Hook(conn_id=spark_conn_id or "spark_default", **kwargs)


class Loaded(NamedTuple):
    """The tables a quiet check reads, loaded once per task."""

    #: The target, ``None`` before its first tick.
    target: Table | None
    inputs: dict[str, Table]


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
        ``ct_engine``, else ``spark-submit``.
    :param warm_idle_timeout: seconds a warm driver stays up without jobs
        (``None``: the connection's extra ``ct_warm_idle_timeout``, else 900).
    """

    template_fields: Sequence[str] = ("target", "sql", "description")
    template_ext: Sequence[str] = (".sql",)
    ui_color = "#f7e6c4"
    #: The job, as messages name it.
    job_kind = "write job"
    #: ``kind`` of this job's :func:`~airflow_provider_ct.core.query.query_hash`.
    query_kind = "view"
    #: Whether a quiet batch records the tick's time (a view) or only advances
    #: the upper (a continual task whose input did not change).
    quiet_records_time = True
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
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
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
        if refresh not in REFRESH_MODES:
            raise ConfigurationError(
                f"refresh={refresh!r}: expected one of {', '.join(REFRESH_MODES)}"
            )
        if not isinstance(verify_every, int) or verify_every < 0:
            raise ConfigurationError(f"verify_every={verify_every!r}: expected an integer >= 0")
        self.refresh = refresh
        self.verify_every = verify_every
        if engine is not None and engine not in ENGINES:
            raise ConfigurationError(f"engine={engine!r}: expected one of {', '.join(ENGINES)}")
        self.engine = engine
        self.warm_idle_timeout = warm_idle_timeout

    def _description(self, context: Any) -> BatchDescription:
        value = self.description
        if value is None:
            value = context["ti"].xcom_pull(task_ids=self.description_task_id)
            if value is None:
                raise DescriptionError(f"task {self.description_task_id} returned no description")
        return BatchDescription.from_json(load_json_object(value, "batch description"))

    def _tables_read(self, hook: IcebergCatalogHook, target: str) -> list[str]:
        """The tables the job reads (a query that does not parse fails here, before Spark)."""
        catalog_name = hook.get_config().name
        return list(parse_query(self.sql, target=target, catalog_name=catalog_name).inputs)

    def _check_before_spark(
        self, hook: IcebergCatalogHook, desc: BatchDescription, target: str
    ) -> dict[str, Table]:
        """Check what needs no JVM; returns the inputs, loaded (the quiet check reads them)."""
        names = self._tables_read(hook, target)
        inputs = {name: hook.load_table(name) for name in names}  # all exist
        missing = [t for t in names if t not in desc.inputs]
        if missing:
            raise DescriptionError(f"description {desc.id} does not pin inputs {missing}")
        return inputs

    def _quiet(self, hook: IcebergCatalogHook, desc: BatchDescription, loaded: Loaded) -> Quiet:
        """Whether the tick provably changes nothing (metadata reads only, no JVM)."""
        return view_tick_is_quiet(
            loaded.target,
            desc,
            sql=self.sql,
            inputs=loaded.inputs,
            catalog_name=hook.get_config().name,
        )

    def _stage_quiet(self, target: Table, desc: BatchDescription, reason: str) -> dict[str, Any]:
        """Stage the quiet tick's empty batch; the append commits it like any other."""
        _, manifest = stage_empty_batch(
            target,
            desc,
            record_time=self.quiet_records_time,
            summary={SummaryKeys.QUERY_HASH: query_hash(self.sql, self.query_kind)},
        )
        log.info("quiet tick for %s (no Spark job): %s", desc.target, reason)
        report = WriteReport(STATUS_STAGED, desc.id, desc.target, manifest=manifest, reason=reason)
        return {**report.to_json(), "quiet": True}

    def _application(self) -> str:
        """The PySpark program to submit."""
        return str(write_job.__file__)

    def _job_args(self) -> list[str]:
        """Program-specific arguments, inline (no file the driver might not see)."""
        return [
            "--sql",
            inline(self.sql),
            "--refresh",
            self.refresh,
            "--verify-every",
            str(self.verify_every),
            *(["--dry-run"] if self.report_only else []),
        ]

    def _warm_job(self) -> tuple[str, dict[str, Any]]:
        """The warm driver's job kind and arguments: what :meth:`_job_args` gives the CLI."""
        args = {"sql": self.sql, "refresh": self.refresh, "verify_every": self.verify_every}
        return "write", {**args, "dry_run": self.report_only}

    def _run_warm(
        self, hook: IcebergCatalogHook, desc: BatchDescription, target: str
    ) -> dict[str, Any] | None:
        """Run the job on this worker's warm driver, or ``None`` if the engine is spark-submit."""
        from airflow_provider_ct.engine import client

        default = self.engine is None and self.spark_conn_id is None
        if default or self.engine == client.ENGINE_SPARK_SUBMIT:
            return None  # no connection to look at
        resolved = _spark_submit_hook(self.spark_conn_id, self.spark_master)._connection
        extra = self._spark_extra
        if client.choose_engine(self.engine, extra, resolved["deploy_mode"]) != client.ENGINE_WARM:
            return None
        config = hook.get_config()
        spec = client.WarmSpec.for_catalog(
            config,
            master=resolved["master"],
            driver_memory=self.driver_memory,
            extra=self.spark_conf,
            idle_timeout=client.idle_timeout(self.warm_idle_timeout, extra),
            jar_settings=JarSettings.from_extra(extra, self.spark_conn_id or ""),
        )
        kind, args = self._warm_job()
        what = f"the {self.job_kind} for {target}"
        return client.run_warm_job(
            spec, job=kind, args=args, config=config, description=desc, what=what
        )

    def execute(self, context: Any) -> dict[str, Any]:
        return self._write(self._description(context))

    def _write(self, desc: BatchDescription) -> dict[str, Any]:
        """Stage (or, quiet, stage empty) the batch of ``desc``; the write report."""
        hook = IcebergCatalogHook(self.iceberg_conn_id)
        config = hook.get_config()
        target = normalize_table_name(self.target, config.name)
        if desc.target != target:
            raise DescriptionError(
                f"description {desc.id} is for {desc.target}, not for this task's target {target}"
            )
        # Everything checkable without a JVM is checked before Spark starts.
        inputs = self._check_before_spark(hook, desc, target)
        self._lineage_state: tuple[BatchDescription, dict[str, Any] | None] = (desc, None)
        if self.quiet_ticks and not self.report_only:
            table = load_table_or_none(hook, target)
            quiet = self._quiet(hook, desc, Loaded(table, inputs))
            if quiet.quiet:
                assert table is not None  # a quiet tick has a head to stay equal to
                staged = self._stage_quiet(table, desc, quiet.reason)
                self._lineage_state = (desc, staged)
                return staged
            log.info("not a quiet tick, running Spark: %s", quiet.reason)
        report = self._run_warm(hook, desc, target)
        if report is None:  # the engine is spark-submit
            report = self._submit(hook, desc, target)
        report.setdefault("quiet", False)
        log.info(
            "%s for %s: %s, +%s -%s rows%s",
            self.job_kind,
            target,
            report["status"],
            report["rows_to_insert"],
            report["rows_to_delete"],
            f" ({report['reason']})" if report.get("reason") else "",
        )
        self._lineage_state = (desc, report)
        return report

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

    @functools.cached_property
    def _spark_extra(self) -> dict[str, Any]:
        """The Spark connection's extra (jars, engine, exchange folder); empty without one.

        Read once per task: the engine choice, the exchange folder, the jars
        and the deploy mode all come from it.
        """
        if self.spark_conn_id is None:
            return {}
        return dict(BaseHook.get_connection(self.spark_conn_id).extra_dejson or {})

    def _cluster_mode(self) -> bool:
        """Whether the Spark connection runs the driver on the cluster (``deploy-mode``)."""
        return self._spark_extra.get("deploy-mode") == "cluster"

    def _outputs(self, config: CatalogConfig, folder: Path) -> JobOutputs:
        """Where the job returns its report: the exchange folder, else the local ``folder``."""
        extra = self._spark_extra
        root = exchange_root(config, extra)
        if root is not None:
            return JobOutputs(new_job_folder(root), remote=True)
        if self._cluster_mode():
            raise ConfigurationError(
                f"Spark connection {self.spark_conn_id!r} runs the driver in cluster deploy "
                f"mode, which cannot return its report to this worker: set {EXCHANGE_DIR_KEY!r} "
                "in its extra (a URI every node reaches), or give the catalog a URI warehouse"
            )
        return JobOutputs(str(folder), remote=False)

    def _submit(self, hook: IcebergCatalogHook, desc: BatchDescription, target: str) -> Any:
        """Run the job with ``spark-submit``; its report (see :meth:`_run_job`)."""
        with tempfile.TemporaryDirectory(prefix="ct-write-") as tmp:
            folder = Path(tmp)
            outputs = self._outputs(hook.get_config(), folder)
            submit = self.submit_hook(hook, desc, target, folder, outputs)
            log.info("submitting the %s for %s (%s)", self.job_kind, target, desc.id)
            try:
                return self._run_job(submit, outputs, f"the {self.job_kind} for {target}")
            finally:
                if outputs.remote:
                    remove_folder(outputs.folder)

    def _catalog_arg(self, config: CatalogConfig, folder: Path) -> str:
        """``--catalog``: a private local file with the secrets, or inline without them.

        In client and local mode the driver runs here: the configuration
        (password included) goes into a file only this user can read (0600,
        in the 0700 folder of ``TemporaryDirectory``) and the job sets the
        password on its own session, so ``ps`` never shows it. In cluster
        deploy mode no local file reaches the driver: the configuration goes
        inline without its secrets, which the driver takes from
        ``CT_CATALOG_SECRETS`` (docs/deployment.md).
        """
        if self._cluster_mode():
            return inline(json.dumps(asdict(config.without_secrets())))
        _write_private(folder / "catalog.json", json.dumps(asdict(config)))
        return f"@{folder / 'catalog.json'}"

    def submit_hook(
        self,
        hook: IcebergCatalogHook,
        desc: BatchDescription,
        target: str,
        folder: Path,
        outputs: JobOutputs | None = None,
    ) -> Any:
        """The SparkSubmitHook for one job (the secrets file, if any, goes into ``folder``)."""
        config = hook.get_config()
        outputs = outputs or JobOutputs(str(folder), remote=False)
        args = [
            "--catalog",
            self._catalog_arg(config, folder),
            "--description",
            inline(json.dumps(desc.to_json())),
            "--report",
            outputs.report,
            "--error",
            outputs.error,
            *self._job_args(),
        ]
        jar_settings = JarSettings.from_extra(self._spark_extra, self.spark_conn_id or "")
        conf = hook.get_spark_conf(include_jars=False, jar_settings=jar_settings)
        conf.update({"spark.sql.shuffle.partitions": "8", **self.spark_conf})
        bin_dir = os.path.dirname(sys.executable)
        env_vars = {
            "PYSPARK_PYTHON": sys.executable,
            "PYSPARK_DRIVER_PYTHON": sys.executable,
            "PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}",
        }
        return _spark_submit_hook(
            self.spark_conn_id,
            self.spark_master,
            conf=conf,
            jars=",".join(spark_jars(config, settings=jar_settings)),
            name=f"ct-write-{target}",
            application_args=args,
            driver_memory=self.driver_memory,
            # This worker's Python means nothing on a cluster node (and
            # SparkSubmitHook refuses env_vars for a standalone cluster driver).
            env_vars=None if self._cluster_mode() else env_vars,
            verbose=False,
        )

    def _run_job(self, submit: Any, outputs: JobOutputs, what: str) -> dict[str, Any]:
        """Submit and wait; the job's report, or the job's own exception.

        ``SparkSubmitHook`` reports any failure as a bare ``AirflowException``;
        the job's error file tells which of our errors it was (see
        :mod:`~airflow_provider_ct.spark.job_errors`).
        """
        from airflow.sdk.exceptions import AirflowException

        try:
            submit.submit(application=self._application())
        except AirflowException as exc:
            raise job_error(outputs.error, what) from exc
        text = read_text(outputs.report)
        if text is None:
            raise SparkJobError(f"{what} finished without a report at {outputs.report}")
        report: dict[str, Any] = json.loads(text)
        return report


@dataclass(frozen=True)
class JobOutputs:
    """The folder a submitted job writes its report or error into (local or a URI)."""

    folder: str
    remote: bool

    @property
    def report(self) -> str:
        return posixpath.join(self.folder, REPORT_FILE)

    @property
    def error(self) -> str:
        return posixpath.join(self.folder, ERROR_FILE)


def _write_private(path: Path, text: str) -> None:
    """Write ``text`` to a new file only its owner can read (it holds secrets)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as out:
        out.write(text)
