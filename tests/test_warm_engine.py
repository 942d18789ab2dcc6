"""The warm engine: real driver processes, real Spark, real sockets; no mocks.

One driver (per catalog) serves most tests of this module, as it would
serve a worker's consecutive tasks; the tests that kill or idle out a
driver use their own or come last.
"""

from __future__ import annotations

import logging
import os
import signal
import stat
import sys
import threading
import time
from collections import Counter
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from airflow_provider_ct.core.catalog import CatalogConfig
from airflow_provider_ct.core.frontier import timestamp_from_datetime
from airflow_provider_ct.core.tables import create_managed_table
from airflow_provider_ct.core.timeline import Timeline
from airflow_provider_ct.engine import protocol
from airflow_provider_ct.engine.client import (
    DEFAULT_IDLE_TIMEOUT,
    IDLE_TIMEOUT_ENV,
    WarmDriver,
    WarmSpec,
)
from airflow_provider_ct.exceptions import SchemaMismatchError, SparkJobError
from airflow_provider_ct.operators.append import AppendOperator
from airflow_provider_ct.operators.write import WriteOperator
from tests.conftest import SCHEMA, connection_json, sqlite_config
from tests.helpers import (
    advance,
    fed_snapshots,
    mint_view_tick,
    oracle,
    replace_contents,
    rows_of,
)
from tests.test_view_correctness import DETAIL_SQL, Shop
from tests.warm import private_warm_dir

ROOT = Path(__file__).resolve().parent.parent
CONN = "ct_warm_catalog"
pytestmark = [pytest.mark.spark, pytest.mark.slow]


@pytest.fixture(scope="module")
def warm_dir() -> Iterator[Path]:
    """A short private base folder for this module's drivers; stops them all after.

    Its drivers keep the product's default idle timeout (the session's is a
    minute, tests/conftest.py): tests here count on one driver across ticks
    with a spark-submit job between them.
    """
    old = os.environ.get(IDLE_TIMEOUT_ENV)
    os.environ[IDLE_TIMEOUT_ENV] = str(DEFAULT_IDLE_TIMEOUT)
    try:
        with private_warm_dir() as folder:
            yield folder
    finally:
        if old is None:
            os.environ.pop(IDLE_TIMEOUT_ENV, None)
        else:
            os.environ[IDLE_TIMEOUT_ENV] = old


@pytest.fixture(scope="module")
def warm_catalog(warm_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> CatalogConfig:
    config = sqlite_config(tmp_path_factory.mktemp("warm-catalog"))
    config.load()
    os.environ[f"AIRFLOW_CONN_{CONN.upper()}"] = connection_json(config)
    return config


@pytest.fixture(scope="module")
def spec(warm_catalog: CatalogConfig) -> WarmSpec:
    """The settings WriteOperator(engine="warm") uses by default: the same driver."""
    return WarmSpec.for_catalog(warm_catalog, master="local[2]")


def _input(catalog: Any, name: str, rows: list[dict[str, Any]], time: int) -> Any:
    table = create_managed_table(catalog, name, SCHEMA)
    replace_contents(table, time, pa.Table.from_pylist(rows, SCHEMA))
    advance(table, time)
    return table


def _write(
    config: CatalogConfig, target: str, sql: str, time: int, engine: str | None, **kwargs: Any
) -> dict[str, Any]:
    """Mint a tick of ``target`` and run WriteOperator on it (no Airflow run needed)."""
    decision = mint_view_tick(config.load(), target, sql, time)
    assert decision.description is not None, decision.reason
    kwargs.setdefault("iceberg_conn_id", CONN)
    write = WriteOperator(
        task_id=f"write_{target.replace('.', '_')}",
        target=target,
        sql=sql,
        description=decision.description.to_json(),
        engine=engine,
        **kwargs,
    )
    report: dict[str, Any] = write.execute({})
    report["_inputs"] = decision.description.inputs
    return report


def _append(report: dict[str, Any], conn: str = CONN) -> None:
    clean = {k: v for k, v in report.items() if k != "_inputs"}
    out = AppendOperator(task_id="append", report=clean, iceberg_conn_id=conn).execute({})
    assert out["appended"], out


def test_view_ticks_on_the_warm_driver_equal_spark_submit_and_duckdb(
    warm_catalog: CatalogConfig, spec: WarmSpec
) -> None:
    catalog = warm_catalog.load()
    shop = Shop(catalog, "eq", seed=7)
    sql = DETAIL_SQL.replace("shop.", "eq.")
    pids = set()
    for t in (1_000, 2_000, 3_000):
        shop.mutate(t)
        shop.seal(t)
        warm = _write(warm_catalog, "eq.by_warm", sql, t, "warm")
        pids.add(WarmDriver(spec).pid())
        _append(warm)
        written = shop.snapshots_at(t)  # the test's own record of this tick's inputs
        assert dict(warm["_inputs"]) == written  # the product pinned them
        expected = oracle(catalog, sql, written)
        got_warm = rows_of(catalog.load_table("eq.by_warm"))
        assert got_warm == expected
        if t == 2_000:  # spark-submit is slow: compare it on one tick
            submitted = _write(warm_catalog, "eq.by_submit", sql, t, "spark-submit")
            assert submitted["status"] == warm["status"] == "staged"
            _append(submitted)
            assert rows_of(catalog.load_table("eq.by_submit")) == got_warm
    assert len(pids) == 1 and None not in pids  # one driver served every tick


def test_a_failing_job_fails_only_its_task_with_the_jobs_own_error(
    warm_catalog: CatalogConfig, spec: WarmSpec
) -> None:
    catalog = warm_catalog.load()
    table = _input(catalog, "bad.inp", [{"k": 1, "v": "a"}, {"k": 2, "v": None}], 1_000)
    with pytest.raises(SparkJobError) as bad:
        _write(warm_catalog, "bad.v1", "SELECT nope FROM bad.inp", 1_000, "warm")
    message = str(bad.value)
    assert "AnalysisException" in message and "`nope` cannot be resolved" in message
    pid = WarmDriver(spec).pid()
    assert pid is not None  # the driver survived its job's failure
    report = _write(warm_catalog, "bad.v2", "SELECT k, v FROM bad.inp", 1_000, "warm")
    _append(report)
    assert rows_of(catalog.load_table("bad.v2")) == Counter({(1, "a"): 1, (2, None): 1})
    advance(table, 2_000)
    with pytest.raises(SchemaMismatchError):  # our error class crosses the socket
        _write(warm_catalog, "bad.v2", "SELECT k FROM bad.inp", 2_000, "warm")
    assert WarmDriver(spec).pid() == pid


TS_SCHEMA = pa.schema([("k", pa.int64()), ("ts", pa.timestamp("us", tz="UTC"))])


def test_concurrent_jobs_see_neither_each_others_temp_views_nor_sql_settings(
    warm_catalog: CatalogConfig, spec: WarmSpec
) -> None:
    """Two jobs at once, each with its own input (registered under the same temp
    view name ``__ct_input_0``) and its own session time zone."""
    check_concurrent_jobs_are_isolated(warm_catalog, "warm", rounds=(1_000, 2_000, 3_000))
    assert WarmDriver(spec).pid() is not None


def check_concurrent_jobs_are_isolated(
    config: CatalogConfig,
    engine: str | None,
    rounds: tuple[int, ...],
    ns: str = "tz",
    conn: str = CONN,
) -> None:
    """Per round, tick ``<ns>.hour_a`` and ``<ns>.hour_b`` at once, in different time zones.

    Each reads its own input through the same temp view name and must see
    its own rows in its own zone (New York's 22 h against UTC's 3 h).
    """
    catalog = config.load()
    at_3h = datetime(2026, 1, 5, 3, tzinfo=UTC)
    keys = {"a": range(1, 5), "b": range(101, 105)}
    for name, ks in keys.items():
        table = create_managed_table(catalog, f"{ns}.{name}", TS_SCHEMA)
        rows = [{"k": k, "ts": at_3h} for k in ks]
        replace_contents(table, rounds[0], pa.Table.from_pylist(rows, TS_SCHEMA))
        advance(table, rounds[0])
    zones = {"a": "America/New_York", "b": "UTC"}
    expected = {"a": Counter((k, 22) for k in keys["a"]), "b": Counter((k, 3) for k in keys["b"])}
    for t in rounds:
        for name in keys:
            advance(catalog.load_table(f"{ns}.{name}"), t)
        reports, spans = _concurrent_writes(config, t, zones, engine, ns, conn)
        assert max(s for s, _ in spans.values()) < min(e for _, e in spans.values())  # overlap
        for name in keys:
            _append(reports[name], conn)
            assert rows_of(catalog.load_table(f"{ns}.hour_{name}")) == expected[name], (t, name)


def _concurrent_writes(
    config: CatalogConfig,
    t: int,
    zones: dict[str, str],
    engine: str | None = "warm",
    ns: str = "tz",
    conn: str = CONN,
) -> tuple[dict[str, dict[str, Any]], dict[str, tuple[float, float]]]:
    """Tick ``<ns>.hour_<name>`` for every name at once, each in its own thread and zone."""
    spans: dict[str, tuple[float, float]] = {}
    errors: list[BaseException] = []
    reports: dict[str, dict[str, Any]] = {}
    barrier = threading.Barrier(len(zones))

    def run(name: str) -> None:
        try:
            barrier.wait()
            start = time.monotonic()
            reports[name] = _write(
                config,
                f"{ns}.hour_{name}",
                f"SELECT k, hour(ts) AS h FROM {ns}.{name}",
                t,
                engine,
                iceberg_conn_id=conn,
                quiet_ticks=False,
                spark_conf={"spark.sql.session.timeZone": zones[name]},
            )
            spans[name] = (start, time.monotonic())
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(name,)) for name in zones]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=600)
    assert not errors, errors
    return reports, spans


def _listening_tcp(pid: int) -> list[tuple[str, str]]:
    """(family, local address) of every listening TCP socket ``pid`` holds (from /proc).

    A process that has exited meanwhile (a short-lived helper) holds none.
    """
    try:
        return _listening(pid)
    except (FileNotFoundError, ProcessLookupError):
        return []


def _listening(pid: int) -> list[tuple[str, str]]:
    inodes = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        try:
            target = os.readlink(fd)
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[8:-1])
    found = []
    for family in ("tcp", "tcp6"):
        for line in Path(f"/proc/{pid}/net/{family}").read_text().splitlines()[1:]:
            fields = line.split()
            if fields[3] == "0A" and fields[9] in inodes:  # 0A: LISTEN
                found.append((family, fields[1]))
    return found


#: 127.0.0.1, ::1 and ::ffff:127.0.0.1 as /proc/net/tcp{,6} spell them.
LOOPBACK = ("0100007F:", "00000000000000000000000001000000:", "0000000000000000FFFF00000100007F:")


@pytest.mark.postgres
def test_the_driver_is_private_and_its_secrets_stay_out_of_proc(
    warm_dir: Path, tmp_path: Path, pg_server: Any
) -> None:
    """A PostgreSQL catalog with a password, as a worker has it (in AIRFLOW_CONN_*)."""
    import psutil

    url = pg_server.create_database("warm_private")
    config = CatalogConfig(name="ct", uri=url, warehouse=(tmp_path / "wh").as_uri())
    password = pg_server.password
    assert password in url
    catalog = config.load()
    os.environ["AIRFLOW_CONN_CT_WARM_PG"] = connection_json(config)
    _input(catalog, "pg.inp", [{"k": 1, "v": "x"}], 1_000)
    decision = mint_view_tick(catalog, "pg.v", "SELECT k, v FROM pg.inp", 1_000)
    report = WriteOperator(
        task_id="write",
        target="pg.v",
        sql="SELECT k, v FROM pg.inp",
        description=decision.description.to_json(),
        iceberg_conn_id="ct_warm_pg",
        engine="warm",
    ).execute({})
    assert report["status"] == "staged" and report["rows_to_insert"] == 1  # the password worked
    driver = WarmDriver(WarmSpec.for_catalog(config, master="local[2]"))
    pid = driver.pid()
    assert pid is not None
    folder = driver.folder
    token = (folder / protocol.TOKEN_FILE).read_text()
    modes = {
        name: stat.S_IMODE(os.lstat(folder / name).st_mode)
        for name in (protocol.SOCKET_FILE, protocol.TOKEN_FILE, protocol.CONF_FILE)
    }
    assert modes == {"sock": 0o600, "token": 0o600, "conf.json": 0o600}
    assert stat.S_ISSOCK(os.lstat(folder / protocol.SOCKET_FILE).st_mode)
    assert stat.S_IMODE(os.lstat(folder).st_mode) == 0o700
    assert stat.S_IMODE(os.lstat(warm_dir).st_mode) == 0o700
    jvms = psutil.Process(pid).children(recursive=True)
    assert jvms, "the driver's JVM"
    # Ours is the Unix socket; py4j (both sides) and Spark listen on loopback only.
    for proc_pid in (pid, *(j.pid for j in jvms)):
        for family, address in _listening_tcp(proc_pid):
            assert address.startswith(LOOPBACK), (proc_pid, family, address)
    for proc_pid in (pid, *(j.pid for j in jvms)):
        for what in ("cmdline", "environ"):
            try:
                raw = Path(f"/proc/{proc_pid}/{what}").read_bytes()
            except (FileNotFoundError, ProcessLookupError):  # a short-lived helper, gone
                continue
            assert token.encode() not in raw, (proc_pid, what)
            assert password.encode() not in raw, (proc_pid, what)
            assert b"AIRFLOW_CONN_" not in raw, (proc_pid, what)
    assert password not in (folder / protocol.CONF_FILE).read_text()
    assert password not in (folder / protocol.LOG_FILE).read_text()
    driver.stop()
    assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == "zombie"


def test_an_idle_driver_stops_and_unpublishes_itself(warm_dir: Path, tmp_path: Path) -> None:
    import psutil

    config = sqlite_config(tmp_path)
    catalog = config.load()
    os.environ["AIRFLOW_CONN_CT_WARM_IDLE"] = connection_json(config)
    _input(catalog, "idle.inp", [{"k": 1, "v": "x"}], 1_000)
    decision = mint_view_tick(catalog, "idle.v", "SELECT k FROM idle.inp", 1_000)
    WriteOperator(
        task_id="write",
        target="idle.v",
        sql="SELECT k FROM idle.inp",
        description=decision.description.to_json(),
        iceberg_conn_id="ct_warm_idle",
        engine="warm",
        warm_idle_timeout=3,
    ).execute({})
    driver = WarmDriver(WarmSpec.for_catalog(config, master="local[2]"))
    pid = driver.pid()
    assert pid is not None
    family = [psutil.Process(pid), *psutil.Process(pid).children(recursive=True)]
    _, alive = psutil.wait_procs(family, timeout=90)
    assert alive == []  # the driver and its JVM are gone
    left = {p.name for p in driver.folder.iterdir()}
    assert left <= {protocol.LOCK_FILE, protocol.CONF_FILE, protocol.LOG_FILE}, left


def test_a_killed_driver_fails_its_job_in_flight_and_the_next_task_starts_a_new_one(
    warm_catalog: CatalogConfig, spec: WarmSpec
) -> None:
    import psutil

    catalog = warm_catalog.load()
    _input(catalog, "kill.inp", [{"k": 1, "v": "a"}, {"k": 2, "v": "b"}], 1_000)
    sleep = "reflect('java.lang.Thread', 'sleep', CAST(60000 AS BIGINT))"
    slow = f"SELECT k, v, {sleep} AS s FROM kill.inp"
    running = threading.Event()

    class _Seen(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            if "write for kill.slow" in record.getMessage():
                running.set()

    relay = logging.getLogger("airflow_provider_ct.engine.job")
    seen = _Seen()
    relay.addHandler(seen)
    relay.setLevel(logging.INFO)
    outcome: list[BaseException] = []

    def run() -> None:
        try:
            _write(warm_catalog, "kill.slow", slow, 1_000, "warm")
        except BaseException as exc:
            outcome.append(exc)

    thread = threading.Thread(target=run)
    thread.start()
    try:
        assert running.wait(timeout=300), "the job never started on the driver"
    finally:
        relay.removeHandler(seen)
    pid = WarmDriver(spec).pid()
    assert pid is not None
    family = [psutil.Process(pid), *psutil.Process(pid).children(recursive=True)]
    time.sleep(1)
    os.kill(pid, signal.SIGKILL)
    thread.join(timeout=120)
    assert len(outcome) == 1 and type(outcome[0]) is SparkJobError, outcome
    assert "went away while running it" in str(outcome[0])
    _, alive = psutil.wait_procs(family, timeout=60)
    assert alive == []  # its JVM followed it
    report = _write(warm_catalog, "kill.after", "SELECT k, v FROM kill.inp", 1_000, "warm")
    _append(report)
    assert rows_of(catalog.load_table("kill.after")) == Counter({(1, "a"): 1, (2, "b"): 1})
    new_pid = WarmDriver(spec).pid()
    assert new_pid is not None and new_pid != pid


@pytest.mark.airflow
def test_a_dag_ticks_through_dag_test_on_the_warm_engine(
    airflow_db: None, default_catalog: CatalogConfig, warm_dir: Path
) -> None:
    sys.path.insert(0, str(ROOT / "tests" / "dags"))
    import warm_revenue

    catalog = default_catalog.load()
    sql = warm_revenue.revenue_sql("warmshop")
    driver = WarmDriver(WarmSpec.for_catalog(default_catalog, master="local[2]"))
    pids = []
    for hour in (1, 2):
        run = warm_revenue.dag.test(logical_date=datetime(2026, 3, 1, hour, tzinfo=UTC))
        assert run.state == "success", run.state
        table = catalog.load_table("warmshop.revenue")
        tick = timestamp_from_datetime(run.data_interval_end)
        head = Timeline.of(table).entries[-1]
        assert head.time == tick
        fed = fed_snapshots(catalog, "warmshop", tick)  # what the run's feed task wrote
        assert head.inputs == fed
        assert rows_of(table) == oracle(catalog, sql, fed)
        pids.append(driver.pid())
    assert pids[0] is not None and pids[0] == pids[1]  # the second tick reused the driver
