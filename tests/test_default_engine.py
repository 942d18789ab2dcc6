"""The engine of a write task nobody chose one for (issue 29), and the warm driver as a default.

The decision (``engine/choice.py``) is checked without Spark; then the
routing through a real ``WriteOperator`` with ``subprocess.Popen`` refusing
to start anything; then, with real drivers, what tests/test_warm_engine.py
checks with ``engine="warm"``, here on the default path (no ``engine=``, no
``ct_engine``): drivers shared across tasks, one per catalog and settings,
memory from the task's settings, no port and no secret in ``/proc``, a killed
driver replaced, idle shutdown, and jobs that do not see each other's session.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from airflow_provider_ct.core.catalog import CatalogConfig
from airflow_provider_ct.engine import protocol
from airflow_provider_ct.engine.choice import (
    ENGINE_SPARK_SUBMIT,
    ENGINE_WARM,
    EngineChoice,
    choose_engine,
    shares_host,
    task_executor_entry,
)
from airflow_provider_ct.engine.client import (
    DEFAULT_IDLE_TIMEOUT,
    IDLE_TIMEOUT_ENV,
    WarmDriver,
    WarmSpec,
    idle_timeout,
)
from airflow_provider_ct.exceptions import ConfigurationError
from airflow_provider_ct.hooks.spark_job import SparkJobHook, airflow_executor
from tests.conftest import connection_json, sqlite_config
from tests.helpers import mint_view_tick, oracle, rows_of
from tests.test_view_correctness import DETAIL_SQL, Shop
from tests.test_warm_engine import (
    LOOPBACK,
    _append,
    _input,
    _listening_tcp,
    _write,
    check_concurrent_jobs_are_isolated,
)
from tests.warm import private_warm_dir

K8S = "airflow.providers.cncf.kubernetes.executors.kubernetes_executor.KubernetesExecutor"
ECS = "airflow.providers.amazon.aws.executors.ecs.ecs_executor.AwsEcsExecutor"
LOCAL = "local[2]"
#: The log line every write task that runs a job writes once.
CHOSEN = "Spark engine: "


def _choose(
    engine: str | None = None,
    extra: dict[str, Any] | None = None,
    deploy_mode: str | None = None,
    master: str = LOCAL,
    executor: str = "LocalExecutor",
    task_executor: str | None = None,
    environ: dict[str, str] | None = None,
) -> EngineChoice:
    return choose_engine(
        engine,
        extra or {},
        deploy_mode,
        master=master,
        executor=executor,
        task_executor=task_executor,
        environ=environ or {},
    )


# -- the decision, no Spark ---------------------------------------------------------------------
@pytest.mark.parametrize(
    ("executor", "task_executor", "expected"),
    [
        ("LocalExecutor", None, ENGINE_WARM),
        ("CeleryExecutor", None, ENGINE_WARM),
        ("airflow.providers.edge3.executors.EdgeExecutor", None, ENGINE_WARM),
        ("", None, ENGINE_WARM),  # unknown: a local master still runs here
        ("KubernetesExecutor", None, ENGINE_SPARK_SUBMIT),
        (K8S, None, ENGINE_SPARK_SUBMIT),
        ("CeleryKubernetesExecutor", None, ENGINE_SPARK_SUBMIT),  # may route to a pod: no
        (ECS, None, ENGINE_SPARK_SUBMIT),
        ("AwsBatchExecutor", None, ENGINE_SPARK_SUBMIT),
        # Airflow 3's list: the first entry runs tasks that name none.
        ("LocalExecutor,KubernetesExecutor", None, ENGINE_WARM),
        ("KubernetesExecutor,LocalExecutor", None, ENGINE_SPARK_SUBMIT),
        ("LocalExecutor,KubernetesExecutor", "KubernetesExecutor", ENGINE_SPARK_SUBMIT),
        (f"LocalExecutor,k8s:{K8S}", "k8s", ENGINE_SPARK_SUBMIT),  # an alias
        (f"k8s:{K8S},LocalExecutor", "LocalExecutor", ENGINE_WARM),
    ],
)
def test_the_default_is_warm_unless_the_executor_gives_each_task_a_host_of_its_own(
    executor: str, task_executor: str | None, expected: str
) -> None:
    chosen = _choose(executor=executor, task_executor=task_executor)
    assert chosen.engine == expected, chosen.reason
    assert chosen.reason.startswith("default: no engine= and no ct_engine")
    running = task_executor_entry(executor, task_executor)
    assert running in chosen.reason or not running


@pytest.mark.parametrize(
    ("master", "deploy_mode", "phrase"),
    [
        (LOCAL, "cluster", "deploy-mode cluster"),
        ("spark://127.0.0.1:7077", None, "is a cluster manager"),
        ("spark://127.0.0.1:7077", "client", "is a cluster manager"),
        ("yarn", "client", "is a cluster manager"),
        ("k8s://https://kube:6443", None, "is a cluster manager"),
    ],
)
def test_the_default_keeps_spark_submit_where_a_warm_driver_cannot_or_should_not_stay(
    master: str, deploy_mode: str | None, phrase: str
) -> None:
    """Cluster mode cannot; a cluster manager's executors would be held while the driver idles."""
    for environ in ({}, {"CT_TASKS_SHARE_HOST": "1"}):  # the override does not change that
        chosen = _choose(master=master, deploy_mode=deploy_mode, environ=environ)
        assert chosen.engine == ENGINE_SPARK_SUBMIT and phrase in chosen.reason, chosen


def test_engine_and_the_connections_ct_engine_still_win() -> None:
    extra = {"ct_engine": "spark-submit"}
    on_task = _choose("warm", extra=extra, executor="KubernetesExecutor")
    assert on_task == EngineChoice(ENGINE_WARM, "engine='warm' on the task")
    by_conn = _choose(extra=extra)
    assert by_conn == EngineChoice(
        ENGINE_SPARK_SUBMIT, "the Spark connection's extra ct_engine='spark-submit'"
    )
    warm_conn = _choose(extra={"ct_engine": "warm"}, master="spark://h:7077")
    assert warm_conn.engine == ENGINE_WARM  # asked for: a cluster manager's client mode is fine
    for engine, extra_ in (("warm", {}), (None, {"ct_engine": "warm"})):
        with pytest.raises(ConfigurationError, match="deploy-mode cluster"):
            _choose(engine, extra=extra_, deploy_mode="cluster")
    for engine, extra_ in (("hot", {}), (None, {"ct_engine": "hot"})):
        with pytest.raises(ConfigurationError, match="engine 'hot': expected one of"):
            _choose(engine, extra=extra_)


def test_ct_tasks_share_host_overrides_the_executor_and_the_connection_beats_the_environment() -> (
    None
):
    pods = {"executor": "KubernetesExecutor"}
    assert _choose(environ={"CT_TASKS_SHARE_HOST": "1"}, **pods).engine == ENGINE_WARM
    assert _choose(environ={"CT_TASKS_SHARE_HOST": "true"}, **pods).engine == ENGINE_WARM
    no = _choose(environ={"CT_TASKS_SHARE_HOST": "0"})
    assert no.engine == ENGINE_SPARK_SUBMIT and "CT_TASKS_SHARE_HOST=0" in no.reason
    conn = _choose(extra={"ct_tasks_share_host": False}, environ={"CT_TASKS_SHARE_HOST": "yes"})
    assert conn.engine == ENGINE_SPARK_SUBMIT and "ct_tasks_share_host=False" in conn.reason
    assert shares_host({}, {"CT_TASKS_SHARE_HOST": ""}) is None  # empty: not set
    assert shares_host({"ct_tasks_share_host": "On"}, {}) == (
        True,
        "the Spark connection's extra ct_tasks_share_host=On",
    )
    with pytest.raises(ConfigurationError, match=r"CT_TASKS_SHARE_HOST='maybe': expected a bool"):
        _choose(environ={"CT_TASKS_SHARE_HOST": "maybe"})


def test_the_idle_timeout_comes_from_the_task_the_connection_the_environment_or_15_minutes() -> (
    None
):
    extra = {"ct_warm_idle_timeout": "120"}
    env = {IDLE_TIMEOUT_ENV: "30"}
    assert idle_timeout(5, extra, env) == 5
    assert idle_timeout(None, extra, env) == 120
    assert idle_timeout(None, {}, env) == 30
    assert idle_timeout(None, {}, {}) == DEFAULT_IDLE_TIMEOUT == 900
    assert idle_timeout(None, {}, {IDLE_TIMEOUT_ENV: ""}) == DEFAULT_IDLE_TIMEOUT
    for bad in ("soon", "0", "-1", "inf", "nan"):
        with pytest.raises(ConfigurationError, match=f"{IDLE_TIMEOUT_ENV}='{bad}'"):
            idle_timeout(None, {}, {IDLE_TIMEOUT_ENV: bad})


def test_the_hook_logs_its_engine_and_why_once(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="airflow_provider_ct.hooks.spark_job")
    monkeypatch.delenv("CT_TASKS_SHARE_HOST", raising=False)
    monkeypatch.setenv("AIRFLOW__CORE__EXECUTOR", "LocalExecutor")
    hook = SparkJobHook()
    assert [hook.engine_for() for _ in range(3)] == [ENGINE_WARM] * 3
    lines = [r for r in caplog.records if r.getMessage().startswith(CHOSEN)]
    assert len(lines) == 1
    assert lines[0].msg == "Spark engine: %s (%s)"  # %-style, formatted by logging
    assert "local master local[2] and executor LocalExecutor" in lines[0].getMessage()
    monkeypatch.setenv("AIRFLOW__CORE__EXECUTOR", "KubernetesExecutor")
    assert SparkJobHook().engine_for() == ENGINE_SPARK_SUBMIT
    monkeypatch.setenv(
        "AIRFLOW_CONN_CT_CLUSTER_ENGINE",
        json.dumps({"conn_type": "spark", "host": "local[2]", "extra": {"deploy-mode": "cluster"}}),
    )
    monkeypatch.setenv("AIRFLOW__CORE__EXECUTOR", "LocalExecutor")
    assert SparkJobHook(spark_conn_id="ct_cluster_engine").engine_for() == ENGINE_SPARK_SUBMIT


def test_the_hook_reads_the_running_tasks_own_executor(monkeypatch: pytest.MonkeyPatch) -> None:
    from airflow.sdk.execution_time.context import set_current_context

    monkeypatch.setenv("AIRFLOW__CORE__EXECUTOR", f"LocalExecutor,k8s:{K8S}")
    assert airflow_executor() == (f"LocalExecutor,k8s:{K8S}", None)  # no task running
    for named, expected in ((None, ENGINE_WARM), ("k8s", ENGINE_SPARK_SUBMIT)):
        ti = SimpleNamespace(task=SimpleNamespace(executor=named))
        with set_current_context({"ti": ti}):  # type: ignore[typeddict-item]
            assert airflow_executor() == (f"LocalExecutor,k8s:{K8S}", named)
            assert SparkJobHook().engine_for() == expected


# -- the routing through a real WriteOperator, nothing started ------------------------------------
class _Refuse:
    """Stands in for ``subprocess.Popen``: records every command, refuses Spark and warm drivers."""

    def __init__(self) -> None:
        self.commands: list[str] = []
        self._popen = subprocess.Popen

    def __call__(self, args: Any, *rest: Any, **kwargs: Any) -> Any:
        command = " ".join(map(str, args)) if isinstance(args, list | tuple) else str(args)
        self.commands.append(command)
        if any(w in command for w in ("spark-submit", "engine.server", "java")):
            raise OSError(f"test: refusing to start {command:.120}")
        return self._popen(args, *rest, **kwargs)


@pytest.mark.parametrize(
    ("executor", "engine", "started"),
    [
        ("LocalExecutor", ENGINE_WARM, "airflow_provider_ct.engine.server"),
        ("KubernetesExecutor", ENGINE_SPARK_SUBMIT, "spark-submit"),
    ],
)
def test_a_write_task_without_an_engine_starts_what_the_executor_allows(
    default_catalog: CatalogConfig,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    executor: str,
    engine: str,
    started: str,
) -> None:
    from airflow_provider_ct.operators.write import WriteOperator

    caplog.set_level(logging.INFO, logger="airflow_provider_ct.hooks.spark_job")
    monkeypatch.setenv("AIRFLOW__CORE__EXECUTOR", executor)
    monkeypatch.delenv("CT_TASKS_SHARE_HOST", raising=False)
    catalog = default_catalog.load()
    _input(catalog, "route.inp", [{"k": 1, "v": "a"}], 1_000)
    desc = mint_view_tick(catalog, "route.v", "SELECT k, v FROM route.inp", 1_000).description
    recorder = _Refuse()
    monkeypatch.setattr(subprocess, "Popen", recorder)
    write = WriteOperator(
        task_id="w", target="route.v", sql="SELECT k, v FROM route.inp", description=desc.to_json()
    )
    with pytest.raises(OSError, match="test: refusing to start"):
        write.execute({})
    assert len([c for c in recorder.commands if started in c]) == 1, recorder.commands
    (line,) = [r.getMessage() for r in caplog.records if r.getMessage().startswith(CHOSEN)]
    assert line.startswith(f"Spark engine: {engine} (default") and executor in line


# -- real drivers on the default path -------------------------------------------------------------
CONN = "ct_default_engine"
#: The write helper's connection: this module's catalog.
_ON = {"iceberg_conn_id": CONN}


@pytest.fixture(scope="module")
def warm_dir() -> Iterator[Path]:
    """This module's drivers in their own folder, stopped after; 10 min idle timeout meanwhile."""
    old = os.environ.get(IDLE_TIMEOUT_ENV)
    os.environ[IDLE_TIMEOUT_ENV] = "600"
    try:
        with private_warm_dir() as folder:
            yield folder
    finally:
        if old is None:
            os.environ.pop(IDLE_TIMEOUT_ENV, None)
        else:
            os.environ[IDLE_TIMEOUT_ENV] = old


@pytest.fixture(scope="module")
def default_config(warm_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> CatalogConfig:
    config = sqlite_config(tmp_path_factory.mktemp("default-engine"))
    config.load()
    os.environ[f"AIRFLOW_CONN_{CONN.upper()}"] = connection_json(config)
    return config


@pytest.fixture
def local_executor(monkeypatch: pytest.MonkeyPatch) -> None:
    """The executor of a worker that runs many tasks; no override of the host question."""
    monkeypatch.setenv("AIRFLOW__CORE__EXECUTOR", "LocalExecutor")
    monkeypatch.delenv("CT_TASKS_SHARE_HOST", raising=False)


def _default_driver(config: CatalogConfig, **settings: Any) -> WarmDriver:
    """The driver a write task with these settings and no engine reaches (local[2], 2g)."""
    return WarmDriver(WarmSpec.for_catalog(config, master=LOCAL, **settings))


def _jvm_of(pid: int) -> Any:
    import psutil

    (jvm,) = [c for c in psutil.Process(pid).children(recursive=True) if "java" in c.name()]
    return jvm


@pytest.mark.spark
@pytest.mark.slow
def test_default_write_tasks_share_one_warm_driver_and_equal_duckdb(
    default_config: CatalogConfig, local_executor: None, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="airflow_provider_ct.hooks.spark_job")
    catalog = default_config.load()
    shop = Shop(catalog, "dshop", seed=11)
    sql = DETAIL_SQL.replace("shop.", "dshop.")
    pids = []
    for t in (1_000, 2_000):
        shop.mutate(t)
        shop.seal(t)
        report = _write(default_config, "dshop.view", sql, t, None, **_ON)
        assert report["status"] == "staged" and report["quiet"] is False
        pids.append(_default_driver(default_config).pid())
        _append(report, CONN)
        expected = oracle(catalog, sql, shop.snapshots_at(t))
        assert rows_of(catalog.load_table("dshop.view")) == expected
    assert pids[0] is not None and pids == [pids[0]] * 2  # the second task reused the driver
    lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith(CHOSEN)]
    assert len(lines) == 2 and all(line.startswith("Spark engine: warm (default") for line in lines)
    assert "-Xmx2g" in _jvm_of(pids[0]).cmdline()  # the task's driver_memory (default 2g)


@pytest.mark.spark
@pytest.mark.slow
def test_default_jobs_see_neither_each_others_temp_views_nor_sql_settings(
    default_config: CatalogConfig, local_executor: None
) -> None:
    check_concurrent_jobs_are_isolated(default_config, None, (1_000, 2_000), ns="dtz", conn=CONN)
    assert _default_driver(default_config).pid() is not None


@pytest.mark.spark
@pytest.mark.postgres
@pytest.mark.slow
def test_each_catalog_and_memory_gets_its_own_private_driver_without_port_or_secret_in_proc(
    default_config: CatalogConfig, local_executor: None, tmp_path: Path, pg_server: Any
) -> None:
    """A PostgreSQL catalog with a password, as a worker has it, and ``driver_memory="1g"``."""
    import psutil

    url = pg_server.create_database("default_private")
    config = CatalogConfig(name="ct", uri=url, warehouse=(tmp_path / "wh").as_uri())
    password = pg_server.password
    catalog = config.load()
    os.environ["AIRFLOW_CONN_CT_DEFAULT_PG"] = connection_json(config)
    _input(catalog, "pg.inp", [{"k": 1, "v": "x"}], 1_000)
    report = _write(
        config, "pg.v", "SELECT k, v FROM pg.inp", 1_000, None,
        iceberg_conn_id="ct_default_pg", driver_memory="1g",
    )  # fmt: skip
    assert report["status"] == "staged" and report["rows_to_insert"] == 1  # the password worked
    driver = _default_driver(config, driver_memory="1g")
    pid = driver.pid()
    assert pid is not None
    others = {_default_driver(default_config).pid(), _default_driver(config).pid()}
    assert pid not in others and driver.folder.parent == _default_driver(config).folder.parent
    assert "-Xmx1g" in _jvm_of(pid).cmdline()  # memory from the task's Spark settings
    token = (driver.folder / protocol.TOKEN_FILE).read_text()
    family = [pid, *(c.pid for c in psutil.Process(pid).children(recursive=True))]
    for proc_pid in family:
        for _family, address in _listening_tcp(proc_pid):
            assert address.startswith(LOOPBACK), (proc_pid, address)
        for what in ("cmdline", "environ"):
            try:
                raw = Path(f"/proc/{proc_pid}/{what}").read_bytes()
            except (FileNotFoundError, ProcessLookupError):
                continue
            assert token.encode() not in raw and password.encode() not in raw, (proc_pid, what)
            assert b"AIRFLOW_CONN_" not in raw, (proc_pid, what)
    assert password not in (driver.folder / protocol.CONF_FILE).read_text()
    assert password not in (driver.folder / protocol.LOG_FILE).read_text()
    driver.stop()


@pytest.mark.spark
@pytest.mark.slow
def test_a_killed_default_driver_is_replaced_by_the_next_task(
    default_config: CatalogConfig, local_executor: None
) -> None:
    import psutil

    catalog = default_config.load()
    _input(catalog, "dkill.inp", [{"k": 1, "v": "a"}, {"k": 2, "v": "b"}], 1_000)
    driver = _default_driver(default_config)
    _append(_write(default_config, "dkill.a", "SELECT k FROM dkill.inp", 1_000, None, **_ON), CONN)
    pid = driver.pid()
    assert pid is not None
    family = [psutil.Process(pid), *psutil.Process(pid).children(recursive=True)]
    os.kill(pid, signal.SIGKILL)  # the OOM killer, while idle
    _, alive = psutil.wait_procs(family, timeout=60)
    assert alive == []  # its JVM followed it
    report = _write(default_config, "dkill.b", "SELECT k, v FROM dkill.inp", 1_000, None, **_ON)
    _append(report, CONN)
    assert rows_of(catalog.load_table("dkill.b")) == Counter({(1, "a"): 1, (2, "b"): 1})
    new_pid = driver.pid()
    assert new_pid is not None and new_pid != pid


@pytest.mark.spark
@pytest.mark.slow
def test_an_idle_default_driver_stops_after_the_environments_idle_timeout(
    warm_dir: Path, local_executor: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A new catalog gets a driver of its own, which retires after ``$CT_WARM_IDLE_TIMEOUT``."""
    import psutil

    monkeypatch.setenv(IDLE_TIMEOUT_ENV, "3")
    config = sqlite_config(tmp_path)
    catalog = config.load()
    monkeypatch.setenv("AIRFLOW_CONN_CT_DEFAULT_IDLE", connection_json(config))
    _input(catalog, "didle.inp", [{"k": 1, "v": "x"}], 1_000)
    started = time.monotonic()
    _write(
        config, "didle.v", "SELECT k FROM didle.inp", 1_000, None, iceberg_conn_id="ct_default_idle"
    )
    driver = _default_driver(config)
    pid = driver.pid()
    assert pid is not None and driver.folder.parent == warm_dir
    family = [psutil.Process(pid), *psutil.Process(pid).children(recursive=True)]
    _, alive = psutil.wait_procs(family, timeout=90)
    assert alive == []  # the driver and its JVM are gone, well before the 10 min of this module
    assert time.monotonic() - started < 300
    left = {p.name for p in driver.folder.iterdir()}
    assert left <= {protocol.LOCK_FILE, protocol.CONF_FILE, protocol.LOG_FILE}, left
