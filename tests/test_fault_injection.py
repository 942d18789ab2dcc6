"""Faults injected into real processes, each followed by the invariant check.

A spark-submit tree killed with ``kill -9`` mid-write, an append process that
dies right after the catalog commit, a commit whose response is lost, the
catalog's PostgreSQL stopped during a tick, a writer that dies while writing
its manifest. After each: the retry lands, and :class:`Invariants` finds no
row lost or duplicated against an oracle the test computed (DuckDB over the
inputs it chose, or a Python model of the rows it wrote), uppers only
forward, sealed times unchanged, every snapshot readable, and no orphan file
after the sweep. Each test prints one ``[faults]`` line (run with ``-s``).
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from airflow_provider_ct.core.appending import land_staged
from airflow_provider_ct.core.catalog import CatalogConfig
from airflow_provider_ct.core.faults import ENV as FAILPOINTS
from airflow_provider_ct.core.manifest import STATE_WRITING, read_manifest
from airflow_provider_ct.core.staging import list_manifests, staging_root
from airflow_provider_ct.core.sweep import sweep_staged
from airflow_provider_ct.core.tables import create_managed_table
from airflow_provider_ct.exceptions import (
    CatalogUnavailableError,
    CommitStateUnknownError,
    ConfigurationError,
    StagingError,
)
from airflow_provider_ct.hooks.iceberg import IcebergCatalogHook
from airflow_provider_ct.operators.append import AppendOperator
from airflow_provider_ct.operators.write import WriteOperator
from tests.conftest import connection_json, sqlite_config
from tests.faults_support import (
    FaultLog,
    Invariants,
    Ledger,
    batch_snapshots,
    child_env,
    json_arg,
    kill_9_tree,
    ledger_rows,
    run_child,
    start_child,
    wait_for_file,
    write_report,
)
from tests.helpers import advance, local_path, mint_view_tick, oracle, replace_contents
from tests.pgserver import running_postgres

pytestmark = [pytest.mark.faults, pytest.mark.slow]

EVENTS = pa.schema([("id", pa.int64()), ("kind", pa.string()), ("amount", pa.int64())])
VIEW_SQL = "SELECT kind, COUNT(*) AS n, SUM(amount) AS total FROM {ns}.events GROUP BY kind"
T1, T2 = 1_700_000_000_000, 1_700_000_060_000
#: Exit status of a process that died as ``kill -9`` would (a failpoint's ``exit``).
CRASHED = 137

#: A write task in a process of its own: WriteOperator.execute, report to a file.
WRITE_TASK = """
import json, sys
from airflow_provider_ct.operators.write import WriteOperator
args = json.loads(open(sys.argv[1]).read())
report = WriteOperator(task_id="write", **args).execute({})
open(sys.argv[2], "w").write(json.dumps(report))
"""

#: An append task in a process of its own; its XCom (the result) goes to a file.
APPEND_TASK = """
import json, sys
from airflow_provider_ct.operators.append import AppendOperator
report = json.loads(open(sys.argv[1]).read())
out = AppendOperator(task_id="append", report=report, iceberg_conn_id=sys.argv[2]).execute({})
open(sys.argv[3], "w").write(json.dumps(out))
"""

#: A writer in a process of its own that arms the manifest failpoint for its
#: first manifest write ("begin", the write-ahead one) or its last ("finish").
STAGE_TASK = """
import json, os, sys
from airflow_provider_ct.core.catalog import CatalogConfig
from airflow_provider_ct.core.description import BatchDescription
from tests.faults_support import stage_ledger_tick
args = json.loads(open(sys.argv[1]).read())
table = CatalogConfig(**args["catalog"]).load().load_table(args["target"])
arm = lambda: os.environ.__setitem__("CT_FAILPOINTS", "staging.manifest-written=exit")
if args["crash"] == "begin":
    arm()
desc = BatchDescription.from_json(args["description"])
rows = [tuple(r) for r in args["rows"]]
stage_ledger_tick(table, desc, rows, before_finish=arm if args["crash"] == "finish" else None)
raise SystemExit("the failpoint did not fire")
"""

#: Every fault injected by this module, by kind (printed once at the end).
INJECTED: Counter[str] = Counter()


@pytest.fixture(scope="module", autouse=True)
def fault_totals(request: pytest.FixtureRequest) -> Iterator[None]:
    """Write the module's faults by kind to the terminal once every test ran."""
    yield
    kinds = ", ".join(f"{k}={v}" for k, v in sorted(INJECTED.items())) or "none"
    line = f"[faults] module total: {sum(INJECTED.values())} fault(s) injected: {kinds}"
    capture = request.config.pluginmanager.get_plugin("capturemanager")
    if capture is None:
        print(line)
        return
    with capture.global_and_fixture_disabled():  # what capsys.disabled() does
        print(f"\n{line}")


@pytest.fixture
def faults(
    request: pytest.FixtureRequest, capsys: pytest.CaptureFixture[str]
) -> Iterator[FaultLog]:
    """The test's fault log; its one-line summary goes to the terminal even without ``-s``."""
    log = FaultLog(request.node.name)
    yield log
    INJECTED.update(log.kinds)
    with capsys.disabled():
        print(f"\n{log.line()}")


def _files(folder: str) -> set[Path]:
    return {p for p in local_path(folder).rglob("*") if p.is_file()}


def _append(conn: str, report: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = AppendOperator(
        task_id="append", report=report, iceberg_conn_id=conn
    ).execute({})
    return out


def _events(table: Any, time_ms: int, rows: list[tuple[int, str, int]]) -> int:
    """Make the input hold exactly ``rows`` at ``time_ms``; the snapshot the oracle reads."""
    data = pa.Table.from_pylist([dict(zip(EVENTS.names, r, strict=True)) for r in rows], EVENTS)
    replace_contents(table, time_ms, data)
    snapshot: int = table.metadata.current_snapshot_id
    advance(table, time_ms)
    return snapshot


def _ledger(config: CatalogConfig, conn: str, identifier: str) -> tuple[Ledger, str]:
    """A ledger whose first tick (T1) landed; returns it and tick 1's data file."""
    ledger = Ledger(config, identifier)
    desc = ledger.describe(T1)
    manifest, path = ledger.stage(desc, ledger_rows(seed=1, n=8))
    assert _append(conn, write_report(desc, manifest))["appended"]
    ledger.landed(desc, path)
    return ledger, path


@pytest.mark.spark
def test_kill_9_of_spark_submit_mid_write_then_retry_lands(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, faults: FaultLog
) -> None:
    """A write killed with its files staged leaves debris the retry and the sweep handle.

    The retry is a new attempt (a folder of its own) and lands; the sweep
    keeps the crashed attempt's files while its batch may still land, and
    removes them once another attempt landed it. The view equals DuckDB.
    """
    conn, ns = "ct_fault_kill", "killed"
    config = sqlite_config(tmp_path)
    monkeypatch.setenv(f"AIRFLOW_CONN_{conn.upper()}", connection_json(config))
    catalog = config.load()
    events = create_managed_table(catalog, f"{ns}.events", EVENTS)
    target, sql = f"{ns}.totals", VIEW_SQL.format(ns=ns)
    write_args: dict[str, Any] = {
        "target": target,
        "sql": sql,
        "iceberg_conn_id": conn,
        "driver_memory": "1g",
        "engine": "spark-submit",
    }

    def write(desc: Any) -> dict[str, Any]:
        op = WriteOperator(task_id="write", description=desc.to_json(), **write_args)
        report: dict[str, Any] = op.execute({})
        return report

    pin1 = _events(events, T1, [(1, "a", 10), (2, "b", 5), (3, "a", 7)])
    desc1 = mint_view_tick(catalog, target, sql, T1).description
    assert _append(conn, write(desc1))["appended"]
    expected1 = oracle(catalog, sql, {f"{ns}.events": pin1})
    invariants = Invariants(config, target)
    before = invariants.before_fault()
    assert before.sealed == {T1: expected1}

    pin2 = _events(events, T2, [(1, "a", 10), (3, "a", 8), (4, "c", 1), (4, "c", 1), (5, "b", 2)])
    desc2 = mint_view_tick(catalog, target, sql, T2).description
    # The write task runs in a session of its own and pauses with its files written,
    # its manifest still saying "writing": the middle of the write.
    marker, log = tmp_path / "mid-write", tmp_path / "write-task.log"
    args = json_arg(tmp_path / "args.json", {**write_args, "description": desc2.to_json()})
    env = child_env(**{FAILPOINTS: f"staging.before-finish=sleep:600@{marker}"})
    proc = start_child(WRITE_TASK, args, str(tmp_path / "report.json"), env=env, log=log)
    try:
        wait_for_file(marker, proc, 300, log)
    finally:
        killed = kill_9_tree(proc)
    faults.inject("kill -9 of spark-submit's process tree mid-write")
    assert proc.returncode == -9
    # Killed: the task, spark-submit's JVM and the job's Python driver.
    commands = list(killed.values())
    assert any("org.apache.spark.deploy.SparkSubmit" in c for c in commands), commands
    assert any(c.endswith("job_main.py") or "job_main.py " in c for c in commands), commands
    assert not (tmp_path / "report.json").exists()

    table = catalog.load_table(target)
    (crashed_manifest,) = list_manifests(table.location(), table.metadata.properties)
    crashed = read_manifest(crashed_manifest)
    assert crashed.state == STATE_WRITING and crashed.batch_id == desc2.id
    crashed_files = _files(crashed.data_dir)
    assert any(p.suffix == ".parquet" for p in crashed_files), crashed_files
    # A sweep while the batch may still land keeps the crashed attempt's files.
    assert desc2.id in sweep_staged(table, grace_ms=0).kept
    assert all(p.exists() for p in crashed_files)

    retry = write(desc2)  # Airflow's retry: a new attempt, a folder of its own
    assert retry["manifest"] != crashed_manifest
    out = _append(conn, retry)
    assert out["appended"] and not out["already_appended"], out

    expected2 = oracle(catalog, sql, {f"{ns}.events": pin2})
    assert expected2 != expected1
    result = invariants.check(before, expected2, {T1: expected1, T2: expected2}, log=faults)
    sweep = result.sweep
    assert sweep is not None and desc2.id in sweep.discarded
    assert sweep.files_deleted == len(crashed_files)
    assert not any(p.exists() for p in crashed_files)
    assert not local_path(crashed_manifest).exists()


@pytest.mark.parametrize("then", ["retry", "sweep-then-retry"])
def test_crash_after_the_catalog_commit_before_the_xcom_push(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, faults: FaultLog, then: str
) -> None:
    """The commit landed but its task died: the retry says so and writes nothing twice.

    Also when maintenance runs first and drops the landed batch's manifest.
    """
    conn = "ct_fault_xcom"
    config = sqlite_config(tmp_path)
    monkeypatch.setenv(f"AIRFLOW_CONN_{conn.upper()}", connection_json(config))
    ledger, first = _ledger(config, conn, "xcom.ledger")
    invariants = Invariants(config, ledger.identifier)
    before = invariants.before_fault()
    desc = ledger.describe(T2)
    rows = ledger_rows(seed=2, n=8)
    manifest, path = ledger.stage(desc, rows, remove=first)
    report = write_report(desc, manifest)

    # The append task dies right after the catalog accepted its commit.
    crash = {FAILPOINTS: "commit.after-catalog-commit=exit"}
    xcom = tmp_path / "xcom.json"
    args = (json_arg(tmp_path / "report.json", report), conn, str(xcom))
    done = run_child(APPEND_TASK, *args, env=child_env(**crash))
    assert done.returncode == CRASHED, done.stderr[-3000:]
    assert "failpoint commit.after-catalog-commit: crashing" in done.stderr
    assert not xcom.exists(), "the task pushed its result before it died"
    faults.inject("crash after the catalog commit, before the XCom push")
    table = ledger.table()
    assert len(batch_snapshots(table, desc.id)) == 1, "the commit did not land"
    assert local_path(manifest).exists() and local_path(path).exists()

    if then == "sweep-then-retry":  # maintenance runs before Airflow's retry
        swept = sweep_staged(table, grace_ms=0)
        assert desc.id in swept.landed and swept.files_deleted == 0
        assert not local_path(manifest).exists() and local_path(path).exists()
    out = _append(conn, report)  # Airflow's retry: same report, same batch id
    assert out["appended"] and out["already_appended"], out
    if then == "retry":  # the lost XCom's numbers, reported once by the same attempt
        assert out["landed_attempt"] == out["attempt"] and out["rows_inserted"] == len(rows)
    assert not local_path(manifest).exists()
    assert len(batch_snapshots(ledger.table(), desc.id)) == 1, "the batch landed twice"
    expected = ledger.landed(desc, path, remove=first)
    invariants.check(before, expected, dict(ledger.at), log=faults)


@pytest.mark.parametrize("where", ["after", "before"])
def test_lost_commit_response_is_unknown_and_the_retry_settles_it(
    catalog_config: CatalogConfig,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    faults: FaultLog,
    where: str,
) -> None:
    """No answer from the catalog: unknown outcome, files kept, the retry settles it.

    ``after``: the commit landed (its files are live); ``before``: it did
    not. Either way the retry leaves the table exact.
    """
    conn = "ct_fault_lost"
    monkeypatch.setenv(f"AIRFLOW_CONN_{conn.upper()}", connection_json(catalog_config))
    ledger, first = _ledger(catalog_config, conn, "lost.ledger")
    invariants = Invariants(catalog_config, ledger.identifier)
    before = invariants.before_fault()
    head_before = ledger.table().metadata.current_snapshot_id
    desc = ledger.describe(T2)
    manifest, path = ledger.stage(desc, ledger_rows(seed=3, n=8), remove=first)
    report = write_report(desc, manifest)

    # The connection drops after (or before) the catalog commit: no answer either way.
    monkeypatch.setenv(FAILPOINTS, f"commit.{where}-catalog-commit=raise")
    with pytest.raises(CommitStateUnknownError, match="unknown outcome") as lost:
        _append(conn, report)
    faults.inject(f"commit response lost ({where} the catalog commit)")
    monkeypatch.delenv(FAILPOINTS)
    assert desc.id in str(lost.value)
    table = ledger.table()
    # Nothing was deleted: the staged file and the manifest are kept (they may be live).
    assert local_path(manifest).exists() and local_path(path).exists()
    if where == "after":
        assert len(batch_snapshots(table, desc.id)) == 1
        live = {t.file.file_path for t in table.scan().plan_files()}
        assert path in live
    else:
        assert table.metadata.current_snapshot_id == head_before
        assert batch_snapshots(table, desc.id) == []

    out = _append(conn, report)
    assert out["appended"] and out["already_appended"] == (where == "after"), out
    assert len(batch_snapshots(ledger.table(), desc.id)) == 1
    expected = ledger.landed(desc, path, remove=first)
    invariants.check(before, expected, dict(ledger.at), log=faults)


@pytest.mark.postgres
def test_catalog_postgres_stopped_during_a_tick(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, faults: FaultLog
) -> None:
    """The catalog's database stops mid-commit: our errors, nothing half-written, retry lands."""
    conn = "ct_fault_pg"
    with running_postgres() as server:
        url = server.create_database("cat_stopped")
        config = CatalogConfig(name="ct", uri=url, warehouse=(tmp_path / "warehouse").as_uri())
        monkeypatch.setenv(f"AIRFLOW_CONN_{conn.upper()}", connection_json(config))
        ledger, first = _ledger(config, conn, "pg.ledger")
        invariants = Invariants(config, ledger.identifier)
        before = invariants.before_fault()
        table = ledger.table()
        head_before, metadata_before = table.metadata.current_snapshot_id, table.metadata_location
        desc = ledger.describe(T2)
        manifest, path = ledger.stage(desc, ledger_rows(seed=4, n=8), remove=first)
        report = write_report(desc, manifest)
        # A long-lived worker's catalog and table, opened before the outage.
        worker_hook = IcebergCatalogHook(conn)
        worker_table = worker_hook.load_table(ledger.identifier)

        # The append pauses just before its catalog commit; the database stops meanwhile.
        marker = tmp_path / "about-to-commit"
        monkeypatch.setenv(FAILPOINTS, f"commit.before-catalog-commit=sleep:5@{marker}")
        raised: list[BaseException] = []

        def tick() -> None:
            try:
                _append(conn, report)
            except BaseException as exc:
                raised.append(exc)

        thread = threading.Thread(target=tick)
        thread.start()
        deadline = time.monotonic() + 120
        while not marker.exists():
            assert thread.is_alive() and time.monotonic() < deadline, raised
            time.sleep(0.05)
        server.stop()
        faults.inject("catalog PostgreSQL stopped mid-commit")
        thread.join(timeout=120)
        assert not thread.is_alive()
        (error,) = raised
        assert isinstance(error, CommitStateUnknownError), repr(error)
        assert desc.id in str(error)
        # Airflow's retry while the database is still down fails just as clearly.
        # An outage, not a configuration mistake: the typed error names the catalog.
        with pytest.raises(
            CatalogUnavailableError, match=r"the JDBC catalog 'ct' at .* did not answer during "
        ) as down:
            _append(conn, report)
        assert not isinstance(down.value, ConfigurationError | CommitStateUnknownError)
        assert "opening the catalog" in str(down.value) and down.value.endpoint in str(down.value)
        # So does a worker whose catalog was opened before the outage.
        with pytest.raises(CatalogUnavailableError, match="did not answer during loading table"):
            worker_hook.load_table(ledger.identifier)
        with pytest.raises(CommitStateUnknownError, match="nothing was committed"):
            land_staged(worker_table, manifest)
        assert local_path(manifest).exists() and local_path(path).exists()

        server.start()
        table = ledger.table()  # nothing half-written: the table is as before the tick
        assert table.metadata_location == metadata_before
        assert table.metadata.current_snapshot_id == head_before
        out = _append(conn, report)
        assert out["appended"] and not out["already_appended"], out
        expected = ledger.landed(desc, path, remove=first)
        invariants.check(before, expected, dict(ledger.at), log=faults)


def test_crash_while_the_manifest_is_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, faults: FaultLog
) -> None:
    """Writers that die mid-manifest: a "writing" manifest is refused, the debris is swept."""
    conn = "ct_fault_torn"
    config = sqlite_config(tmp_path)
    monkeypatch.setenv(f"AIRFLOW_CONN_{conn.upper()}", connection_json(config))
    ledger, _ = _ledger(config, conn, "torn.ledger")
    invariants = Invariants(config, ledger.identifier)
    before = invariants.before_fault()
    desc = ledger.describe(T2)
    rows = ledger_rows(seed=5, n=8)

    # Two writers die with a temp manifest written but not yet renamed: one at
    # the write-ahead manifest (no data yet), one at the final one (data written).
    for crash in ("begin", "finish"):
        args = {
            "catalog": {"name": config.name, "uri": config.uri, "warehouse": config.warehouse},
            "target": ledger.identifier,
            "description": desc.to_json(),
            "rows": rows,
            "crash": crash,
        }
        done = run_child(STAGE_TASK, json_arg(tmp_path / f"{crash}.json", args), env=child_env())
        assert done.returncode == CRASHED, done.stderr[-3000:]
        assert "failpoint staging.manifest-written: crashing" in done.stderr
        faults.inject(f"crash while writing the manifest ({crash})")
    table = ledger.table()
    root = local_path(staging_root(table.location(), table.metadata.properties))
    torn = [p for p in root.iterdir() if ".json.tmp-" in p.name]
    assert len(torn) == 2, sorted(root.iterdir())
    (writing_manifest,) = list_manifests(table.location(), table.metadata.properties)
    writing = read_manifest(writing_manifest)
    assert writing.state == STATE_WRITING
    crashed_files = _files(writing.data_dir)
    assert len(crashed_files) == 1

    # Appending the manifest that still says "writing" is refused and changes nothing.
    metadata_before = table.metadata_location
    with pytest.raises(StagingError, match="'writing'"):
        _append(conn, write_report(desc, writing_manifest))
    table = ledger.table()
    assert table.metadata_location == metadata_before
    assert local_path(writing_manifest).exists() and all(p.exists() for p in crashed_files)

    manifest, path = ledger.stage(desc, rows)  # the retry: a new attempt
    out = _append(conn, write_report(desc, manifest))
    assert out["appended"] and not out["already_appended"], out
    expected = ledger.landed(desc, path)
    result = invariants.check(before, expected, dict(ledger.at), log=faults)
    sweep = result.sweep
    assert sweep is not None and desc.id in sweep.discarded
    assert sweep.files_deleted == 1 and sweep.orphans_deleted == 2  # the torn temp manifests
    assert not any(p.exists() for p in [*torn, *crashed_files])
