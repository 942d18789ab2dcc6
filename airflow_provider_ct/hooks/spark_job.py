"""SparkJobHook: run a job spec for a description on ``spark-submit`` or the warm engine.

The operators decide *what* to run (a :class:`~airflow_provider_ct.spark.jobs.JobSpec`)
and this hook decides *how*: which engine, which Spark settings and jars,
where the job returns its report, and which of our exceptions a failed job
raised. ``spark-submit`` goes through the Spark provider's
``SparkSubmitHook``; the warm engine through :mod:`airflow_provider_ct.engine.client`.
:meth:`on_kill` stops whichever is running.
"""

from __future__ import annotations

import contextlib
import functools
import json
import logging
import os
import posixpath
import sys
import tempfile
from collections.abc import Iterator, Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from airflow.sdk import BaseHook

from airflow_provider_ct.core.catalog import CatalogConfig
from airflow_provider_ct.core.description import BatchDescription
from airflow_provider_ct.core.outages import heartbeat
from airflow_provider_ct.core.reports import WriteReport
from airflow_provider_ct.engine import choice, client
from airflow_provider_ct.exceptions import ConfigurationError, SparkJobError
from airflow_provider_ct.spark import job_main
from airflow_provider_ct.spark.conf import JarSettings, spark_conf, spark_jars
from airflow_provider_ct.spark.exchange import (
    EXCHANGE_DIR_KEY,
    exchange_root,
    inline,
    new_job_folder,
    read_text,
    remove_folder,
)
from airflow_provider_ct.spark.job_errors import ERROR_FILE, job_error, typed_failure
from airflow_provider_ct.spark.jobs import JobSpec

log = logging.getLogger(__name__)

DEFAULT_LOCAL_MASTER = "local[2]"
REPORT_FILE = "report.json"
#: The program ``spark-submit`` runs, for every job kind.
APPLICATION = str(job_main.__file__)
#: The connection id under which a hook without a Spark connection hands its
#: local master to ``SparkSubmitHook`` (Airflow's environment secrets backend).
LOCAL_CONN_ID = "ct_local_spark"


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


@dataclass(frozen=True)
class SparkTarget:
    """Where jobs run, as the Spark connection says (or the local master without one)."""

    master: str
    deploy_mode: str | None
    extra: Mapping[str, Any]

    @property
    def cluster_mode(self) -> bool:
        """Whether the driver runs on the cluster (it cannot see this worker's files)."""
        return self.deploy_mode == "cluster"


def spark_master_of(conn: Any) -> str:
    """A Spark connection's master URL, read as the Spark provider reads it."""
    host = conn.host or ""
    if conn.conn_type == "spark" and host and ("://" in host or not conn.port):
        master = host
    else:
        master = f"{conn.conn_type}://{host}"
    return f"{master}:{conn.port}" if conn.port else master


class SparkJobHook(BaseHook):
    """Run :class:`JobSpec` s for descriptions; see the module docstring.

    :param spark_conn_id: Spark connection (standalone, YARN, k8s); ``None``
        runs locally with ``spark_master``.
    :param engine: ``spark-submit`` or ``warm``; ``None``: the connection's
        ``ct_engine`` extra, else warm where a warm driver can run and be
        reused, spark-submit elsewhere (:mod:`airflow_provider_ct.engine.choice`).
    :param warm_idle_timeout: seconds a warm driver stays up without jobs.
    """

    conn_name_attr = "spark_conn_id"
    hook_name = "Continual-table Spark job"

    def __init__(
        self,
        *,
        spark_conn_id: str | None = None,
        spark_master: str = DEFAULT_LOCAL_MASTER,
        spark_conf: Mapping[str, str] | None = None,
        driver_memory: str = "2g",
        engine: str | None = None,
        warm_idle_timeout: float | None = None,
    ) -> None:
        super().__init__()
        if engine is not None and engine not in choice.ENGINES:
            raise ConfigurationError(
                f"engine={engine!r}: expected one of {', '.join(choice.ENGINES)}"
            )
        self.spark_conn_id = spark_conn_id
        self.spark_master = spark_master
        self.spark_conf = dict(spark_conf or {})
        self.driver_memory = driver_memory
        self.engine = engine
        self.warm_idle_timeout = warm_idle_timeout
        self._running: Any = None  # the SparkSubmitHook or WarmDriver of the running job

    @functools.cached_property
    def target(self) -> SparkTarget:
        """The master, deploy mode and extra: read once per hook."""
        if self.spark_conn_id is None:
            return SparkTarget(self.spark_master, None, {})
        conn = self.get_connection(self.spark_conn_id)
        extra = dict(conn.extra_dejson or {})
        return SparkTarget(spark_master_of(conn), extra.get("deploy-mode"), extra)

    @functools.cached_property
    def engine_choice(self) -> choice.EngineChoice:
        """The engine this hook runs jobs on and why; decided (and logged) once per hook.

        A hook serves one task, so the task's log says once which engine ran
        its job and why: with no engine configured the answer depends on the
        master, the deploy mode and Airflow's executor, which a reader of a
        slow task's log should not have to guess.
        """
        configured, task_executor = airflow_executor()
        chosen = choice.choose_engine(
            self.engine,
            self.target.extra,
            self.target.deploy_mode,
            master=self.target.master,
            executor=configured,
            task_executor=task_executor,
        )
        log.info("Spark engine: %s (%s)", chosen.engine, chosen.reason)
        return chosen

    def engine_for(self) -> str:
        """The engine this hook runs jobs on."""
        return self.engine_choice.engine

    def run(
        self, spec: JobSpec, description: BatchDescription, config: CatalogConfig, *, what: str
    ) -> WriteReport:
        """Run ``spec`` for ``description``; the job's report, or the job's own exception."""
        with heartbeat(what, config):  # a line at least every 30 s while the job runs
            if self.engine_for() == choice.ENGINE_WARM:
                raw = self._run_warm(spec, description, config, what)
            else:
                raw = self._submit(spec, description, config, what)
        return WriteReport.from_json(raw)

    def on_kill(self) -> None:
        """Stop the running job: kill ``spark-submit`` (and its driver), or leave the warm one."""
        running = self._running
        if isinstance(running, client.WarmDriver):
            running.cancel()
        elif running is not None:
            running.on_kill()

    # -- the warm engine ------------------------------------------------------------------
    def _run_warm(
        self, spec: JobSpec, description: BatchDescription, config: CatalogConfig, what: str
    ) -> dict[str, Any]:
        extra = self.target.extra
        warm = client.WarmSpec.for_catalog(
            config,
            master=self.target.master,
            driver_memory=self.driver_memory,
            extra=self.spark_conf,
            idle_timeout=client.idle_timeout(self.warm_idle_timeout, extra),
            jar_settings=JarSettings.from_extra(extra, self.spark_conn_id or ""),
        )
        driver = client.WarmDriver(warm)
        self._running = driver
        try:
            return client.run_warm_job(
                driver, job=spec, config=config, description=description, what=what
            )
        finally:
            self._running = None

    # -- spark-submit ---------------------------------------------------------------------
    def _submit(
        self, spec: JobSpec, description: BatchDescription, config: CatalogConfig, what: str
    ) -> dict[str, Any]:
        with tempfile.TemporaryDirectory(prefix="ct-job-") as tmp:
            folder = Path(tmp)
            outputs = self.outputs(config, folder)
            submit = self.submit_hook(spec, description, config, folder, outputs)
            log.info("submitting %s (%s)", what, description.id)
            self._running = submit
            try:
                return _wait(submit, outputs, what, config)
            finally:
                self._running = None
                if outputs.remote:
                    remove_folder(outputs.folder, config.properties)

    def outputs(self, config: CatalogConfig, folder: Path) -> JobOutputs:
        """Where the job returns its report: the exchange folder, else the local ``folder``."""
        extra = dict(self.target.extra)
        root = exchange_root(config, extra)
        # A driver on this worker (local, client mode) answers through the
        # private temp folder unless the connection names an exchange: the
        # store being down must not hide the job's error (docs/deployment.md).
        if root is not None and (self.target.cluster_mode or extra.get(EXCHANGE_DIR_KEY)):
            return JobOutputs(new_job_folder(root), remote=True)
        if self.target.cluster_mode:
            raise ConfigurationError(
                f"Spark connection {self.spark_conn_id!r} runs the driver in cluster deploy "
                f"mode, which cannot return its report to this worker: set {EXCHANGE_DIR_KEY!r} "
                "in its extra (a URI every node reaches), or give the catalog a URI warehouse"
            )
        return JobOutputs(str(folder), remote=False)

    def submit_hook(
        self,
        spec: JobSpec,
        description: BatchDescription,
        config: CatalogConfig,
        folder: Path,
        outputs: JobOutputs | None = None,
    ) -> Any:
        """The ``SparkSubmitHook`` for one job (the secrets file, if any, goes into ``folder``)."""
        from airflow.providers.apache.spark.hooks.spark_submit import SparkSubmitHook

        outputs = outputs or JobOutputs(str(folder), remote=False)
        args = [
            "--catalog", self._catalog_arg(config, folder),
            "--description", inline(json.dumps(description.to_json())),
            "--job", inline(spec.to_text()),
            "--report", outputs.report,
            "--error", outputs.error,
        ]  # fmt: skip
        jar_settings = JarSettings.from_extra(self.target.extra, self.spark_conn_id or "")
        conf = spark_conf(config, include_jars=False, jar_settings=jar_settings)
        conf.update({"spark.sql.shuffle.partitions": "8", **self.spark_conf})
        with self._connection_id() as conn_id:
            return SparkSubmitHook(
                conn_id=conn_id,
                conf=conf,
                jars=",".join(spark_jars(config, settings=jar_settings)),
                name=f"ct-{spec.kind}-{description.target}",
                application_args=args,
                driver_memory=self.driver_memory,
                # This worker's Python means nothing on a cluster node (and
                # SparkSubmitHook refuses env_vars for a standalone cluster driver).
                env_vars=None if self.target.cluster_mode else _python_env(),
                verbose=False,
            )

    @contextlib.contextmanager
    def _connection_id(self) -> Iterator[str]:
        """The Spark connection id to hand ``SparkSubmitHook``.

        Without a Spark connection, the local master goes to it as a
        connection of its own through Airflow's environment-variable secrets
        backend, only while the hook is built (it reads the connection then):
        without any, ``SparkSubmitHook`` falls back to YARN.
        """
        if self.spark_conn_id is not None:
            yield self.spark_conn_id
            return
        name = f"AIRFLOW_CONN_{LOCAL_CONN_ID.upper()}"
        old = os.environ.get(name)
        os.environ[name] = json.dumps({"conn_type": "spark", "host": self.spark_master})
        try:
            yield LOCAL_CONN_ID
        finally:
            if old is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = old

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
        if self.target.cluster_mode:
            return inline(json.dumps(asdict(config.without_secrets())))
        _write_private(folder / "catalog.json", json.dumps(asdict(config)))
        return f"@{folder / 'catalog.json'}"


def airflow_executor() -> tuple[str, str | None]:
    """Airflow's ``[core] executor`` setting, and the running task's own ``executor=`` if any.

    Read where the task runs (a worker, a pod): that is where a warm driver
    would live. Outside a task (an operator executed by hand) there is no
    task executor; without a readable setting the executor is unknown ("").
    """
    try:
        from airflow.sdk.configuration import conf

        configured = str(conf.get("core", "executor", fallback="") or "")
    except Exception as exc:  # a broken or missing configuration must not fail the task
        log.debug("could not read [core] executor: %s", exc)
        configured = ""
    try:
        from airflow.sdk import get_current_context

        task_executor = get_current_context()["ti"].task.executor
    except Exception:  # no task is running (RuntimeError), or a context without a task
        task_executor = None
    return configured, str(task_executor) if task_executor else None


def _python_env() -> dict[str, str]:
    """This worker's Python for the driver and executors, and its ``bin`` on the PATH."""
    bin_dir = os.path.dirname(sys.executable)
    return {
        "PYSPARK_PYTHON": sys.executable,
        "PYSPARK_DRIVER_PYTHON": sys.executable,
        "PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}",
    }


def _wait(submit: Any, outputs: JobOutputs, what: str, config: CatalogConfig) -> dict[str, Any]:
    """Submit and wait; the job's report, or the job's own exception.

    ``SparkSubmitHook`` reports any failure as a bare ``AirflowException``;
    the job's error file tells which of our errors it was (see
    :mod:`~airflow_provider_ct.spark.job_errors`). An error file on a store
    that does not answer is that store's outage.
    """
    from airflow.sdk.exceptions import AirflowException

    io = config.properties
    try:
        submit.submit(application=APPLICATION)
    except AirflowException as exc:
        error = job_error(outputs.error, what, io)
        raise typed_failure(error, config, f"reading the error of {what}") from exc
    text = read_text(outputs.report, io)
    if text is None:
        raise SparkJobError(f"{what} finished without a report at {outputs.report}")
    report: dict[str, Any] = json.loads(text)
    return report


def _write_private(path: Path, text: str) -> None:
    """Write ``text`` to a new file only its owner can read (it holds secrets)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as out:
        out.write(text)
