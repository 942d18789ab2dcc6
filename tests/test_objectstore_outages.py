"""Outages of the S3 store and the REST catalog: fail within the bound, typed; retry exact.

A SeaweedFS server of this module's own (``weed mini``: S3 plus the Iceberg
REST catalog in one process) is killed (``SIGKILL``) or frozen
(``SIGSTOP``: what a network partition looks like to a client) at a moment
the product names with a failpoint:

* during a Spark job (after the attempt's manifest is written, before its
  files): an in-place view, a view Spark computes (a window function) and a
  continual task, through ``dag.test()`` on ``spark-submit`` and on the warm
  engine. The write task fails within the bound with
  :class:`StoreUnavailableError` (or :class:`CatalogUnavailableError` when
  the catalog was the first to be asked) naming the endpoint, and while it
  waits the task log says so;
* during a mint (the catalog killed, then frozen): :class:`CatalogUnavailableError`;
* during an append's catalog commit (frozen): :class:`CommitStateUnknownError`
  (the request may have reached the catalog), within the bound.

After the restart (``SIGCONT``) the tick runs again, as Airflow's retry
would, and lands exactly: the tables equal a Python model of the rows the
test wrote, and after the product's sweep no file under any table's
``data/`` folder (the view's state table included) is unreferenced by every
snapshot, listed from the store itself.

The bounds are the product's, set small here (3 s per request, 1 retry)
so the module stays short; the defaults (10 s, 1 retry) are what a
deployment gets (docs/deployment.md, "Outages").
"""

from __future__ import annotations

import logging
import os
import re
import signal
import sys
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from airflow_provider_ct.core import outages
from airflow_provider_ct.core.faults import ENV as FAILPOINTS
from airflow_provider_ct.core.settings import (
    CATALOG_TIMEOUT_ENV,
    STORE_RETRIES_ENV,
    STORE_TIMEOUT_ENV,
)
from airflow_provider_ct.core.storage import files_under, io_properties
from airflow_provider_ct.core.sweep import sweep_staged
from airflow_provider_ct.core.tables import STATE_TABLE_SUFFIX as STATE_SUFFIX
from tests.helpers import rows_of
from tests.objectstore import ObjectStore, iceberg_connection, running_object_store

pytestmark = [
    pytest.mark.objectstore,
    pytest.mark.faults,
    pytest.mark.spark,
    pytest.mark.airflow,
    pytest.mark.slow,
]

EVENTS = pa.schema([("id", pa.int64()), ("kind", pa.string()), ("amount", pa.int64())])
ROWS = [(1, "a", 10), (2, "b", 5), (3, "a", 7), (4, "c", 1)]
ROOT = Path(__file__).resolve().parent.parent
#: The bounds of this module: seconds per request, retries of a failed request.
TIMEOUT_S, RETRIES = 3, 1
#: How long a failing tick may take from the fault to the task's failure: one
#: call's worst case (2 x 3 s + backoff) several times over (a job asks the
#: store again while it fails: its error file, its cleanup), plus the JVM.
BOUND_S = 60.0
#: Where the failpoint pauses a write job: its manifest written, its files not yet.
PAUSE = "staging.after-begin"
#: ... or as it begins its input scan: the inputs opened, none of their data read.
SCAN = "write.input-scan"


def _marker(marker: Path, failpoint: str) -> Path:
    """The marker file that arms ``failpoint`` (beside the module's first one)."""
    return marker if failpoint == PAUSE else marker.with_name(f"{failpoint}-paused")


# -- the server, the connection, the inputs -------------------------------------------------
@pytest.fixture(scope="module")
def outage_store(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[ObjectStore, Path]]:
    """A server of this module's own, and the marker that arms the job failpoint.

    The environment is set for the module, so the warm driver this module
    starts inherits it (its settings, hence its identity, differ from every
    other test's). The failpoint fires only while its marker is absent: a
    test deletes it to pause the next job, the job recreates it.
    """
    folder = tmp_path_factory.mktemp("outages")
    marker = folder / "job-paused"
    marker.touch()  # disarmed
    _marker(marker, SCAN).touch()
    with pytest.MonkeyPatch.context() as env:
        env.setenv(STORE_TIMEOUT_ENV, str(TIMEOUT_S))
        env.setenv(STORE_RETRIES_ENV, str(RETRIES))
        env.setenv(CATALOG_TIMEOUT_ENV, str(TIMEOUT_S))
        env.setenv(FAILPOINTS, f"{PAUSE}=sleep:3@{marker},{SCAN}=sleep:3@{_marker(marker, SCAN)}")
        with running_object_store(folder / "store") as store:
            yield store, marker


@pytest.fixture
def lake(
    airflow_db: None, outage_store: tuple[ObjectStore, Path], monkeypatch: pytest.MonkeyPatch
) -> Iterator[tuple[ObjectStore, Path]]:
    store, marker = outage_store
    monkeypatch.setenv(
        "AIRFLOW_CONN_ICEBERG_CATALOG_DEFAULT", iceberg_connection(store.rest_config())
    )
    monkeypatch.delenv("CT_READ_ONLY", raising=False)
    yield store, marker
    if store.process is not None and store.process.poll() is None:
        os.kill(store.process.pid, signal.SIGCONT)  # never leave it frozen
    else:
        store.start()


def _inputs(store: ObjectStore, ns: str) -> Any:
    """A fresh namespace with ``events`` holding :data:`ROWS`; the catalog."""
    catalog = store.rest_config().load()
    if ns in {n[0] for n in catalog.list_namespaces()}:
        for ident in catalog.list_tables(ns):
            catalog.drop_table(ident)
    else:
        catalog.create_namespace(ns)
    events = catalog.create_table(f"{ns}.events", EVENTS)
    events.append(
        pa.Table.from_pylist([dict(zip(EVENTS.names, r, strict=True)) for r in ROWS], EVENTS)
    )
    return catalog


def _sealed_time(catalog: Any, ns: str) -> int:
    """A tick time the plain input has sealed (its wall clock minus the 1 s allowance)."""
    from airflow_provider_ct.core.frontier import now_ms

    last = catalog.load_table(f"{ns}.events").metadata.current_snapshot().timestamp_ms
    while now_ms() < last + 1_100:
        time.sleep(0.05)
    return now_ms() - 1_050


# -- the oracles (Python models of the rows the test wrote) --------------------------------
def _in_place_model() -> Counter[tuple[Any, ...]]:
    groups: dict[str, list[int]] = {}
    for _, kind, amount in ROWS:
        groups.setdefault(kind, []).append(amount)
    return Counter((k, len(a), sum(a)) for k, a in groups.items())


def _spark_model() -> Counter[tuple[Any, ...]]:
    out: Counter[tuple[Any, ...]] = Counter()
    for kind in {k for _, k, _ in ROWS}:
        ranked = sorted(r for r in ROWS if r[1] == kind)
        out.update((i, k, a, n) for n, (i, k, a) in enumerate(ranked, start=1))
    return out


def _continual_model() -> Counter[tuple[Any, ...]]:
    return Counter((i, k, a * 2) for i, k, a in ROWS)


# -- faults ------------------------------------------------------------------------------------
def _kill(store: ObjectStore) -> Callable[[], None]:
    assert store.process is not None
    store.process.kill()
    store.process.wait(15)
    return store.start


def _freeze(store: ObjectStore) -> Callable[[], None]:
    assert store.process is not None
    pid = store.process.pid
    os.kill(pid, signal.SIGSTOP)
    return lambda: os.kill(pid, signal.SIGCONT)


FAULTS = {"killed": _kill, "frozen": _freeze}


class _AtMarker:
    """Injects a fault once ``marker`` appears (the job paused at the failpoint)."""

    def __init__(self, store: ObjectStore, marker: Path, fault: str) -> None:
        self.store, self.marker, self.fault = store, marker, fault
        self.at: float | None = None
        self.restore: Callable[[], None] | None = None
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> _AtMarker:
        self.marker.unlink()  # arm the failpoint
        self._thread.start()
        return self

    def _run(self) -> None:
        deadline = time.monotonic() + 240
        while not self.marker.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        if self.marker.exists():
            self.restore = FAULTS[self.fault](self.store)
            self.at = time.monotonic()

    def __exit__(self, *exc: object) -> None:
        self._thread.join(10)
        self.marker.touch()  # disarmed, whatever happened


# -- what must hold afterwards ------------------------------------------------------------------
def _referenced(table: Any) -> set[str]:
    """Every data and delete file any snapshot of ``table`` references."""
    files: set[str] = set()
    for snapshot in table.metadata.snapshots:
        for manifest in snapshot.manifests(io=table.io):
            for entry in manifest.fetch_manifest_entry(io=table.io, discard_deleted=True):
                files.add(entry.data_file.file_path)
    return files


def _orphans(table: Any) -> set[str]:
    """Files under the table's ``data/`` in the store that no snapshot references."""
    listed = {
        f"s3://{i.path}" for i in files_under(f"{table.location()}/data", io_properties(table))
    }
    return listed - _referenced(table)


def _swept_orphans(catalog: Any, name: str) -> set[str]:
    """The product's sweep (no grace) of ``name``, then what is still orphaned."""
    table = catalog.load_table(name)
    sweep_staged(table, grace_ms=0)
    table.refresh()
    return _orphans(table)


def _failed_task(run: Any) -> tuple[str, Any]:
    failed = [ti for ti in run.get_task_instances() if ti.state == "failed"]
    assert len(failed) == 1, [(ti.task_id, ti.state) for ti in run.get_task_instances()]
    return failed[0].task_id, failed[0]


def _dag(name: str) -> Any:
    sys.path.insert(0, str(ROOT / "tests" / "dags"))
    import objectstore_outages

    return getattr(objectstore_outages, name)


CASES = [
    # (DAG, namespace, output, model, fault, where the job pauses)
    ("outage_in_place_submit", "out_ips", "view", _in_place_model, "killed", PAUSE),
    ("outage_in_place_warm", "out_ipw", "view", _in_place_model, "frozen", PAUSE),
    ("outage_spark_submit", "out_sps", "view", _spark_model, "frozen", PAUSE),
    ("outage_spark_warm", "out_spw", "view", _spark_model, "killed", PAUSE),
    ("outage_continual_submit", "out_cts", "out", _continual_model, "killed", PAUSE),
    ("outage_continual_warm", "out_ctw", "out", _continual_model, "frozen", PAUSE),
    # Issue 59: the store killed as the write job begins its input scan.
    ("outage_in_place_warm", "out_ipw", "view", _in_place_model, "killed", SCAN),
]


@pytest.mark.parametrize(
    ("dag_name", "ns", "output", "model", "fault", "failpoint"),
    CASES,
    ids=[
        f"{c[0].removeprefix('outage_')}-{c[4]}{'-at-scan' if c[5] == SCAN else ''}" for c in CASES
    ],
)
def test_an_outage_during_a_spark_job_fails_within_the_bound_and_the_retry_is_exact(
    lake: tuple[ObjectStore, Path],
    capfd: pytest.CaptureFixture[str],
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
    dag_name: str,
    ns: str,
    output: str,
    model: Callable[[], Counter[tuple[Any, ...]]],
    fault: str,
    failpoint: str,
) -> None:
    store, marker = lake
    marker = _marker(marker, failpoint)
    dag = _dag(dag_name)
    catalog = _inputs(store, ns)
    tick = _sealed_time(catalog, ns)
    monkeypatch.setattr(outages, "HEARTBEAT_S", 2.0)  # the 30 s line, sooner
    # The heartbeat is an INFO line of the task's own process: captured here whatever
    # logging configuration earlier tests of this process left (an e2e run's, or none).
    caplog.set_level(logging.INFO, logger=outages.__name__)
    capfd.readouterr()
    with _AtMarker(store, marker, fault) as injected:
        run = dag.test(run_conf={"time": tick})
        ended = time.monotonic()
    logged = "".join(capfd.readouterr())
    assert injected.at is not None and injected.restore is not None, "the job never paused"
    waited = ended - injected.at
    print(f"{dag_name} store {fault}: the tick failed {waited:.1f} s after the fault")
    assert run.state == "failed"
    task_id, _ = _failed_task(run)
    assert task_id.endswith(".write"), task_id
    assert waited < BOUND_S
    typed = re.search(r"(StoreUnavailableError|CatalogUnavailableError): (.*)", logged)
    assert typed is not None, logged[-3000:]
    print(f"  {typed.group(1)}: {typed.group(2)[:400]}")
    endpoint = store.s3_endpoint if typed.group(1) == "StoreUnavailableError" else store.rest_uri
    assert endpoint in typed.group(2) and "did not answer during" in typed.group(2)
    heartbeat = rf"still waiting for the [\w-]+ job for {ns}\.{output}: "
    assert re.search(heartbeat, logged + caplog.text)
    # The documented connection names the token endpoint: no OAuth2 fallback warning.
    assert "will be removed in a future Iceberg release" not in logged

    injected.restore()
    again = dag.test(run_conf={"time": tick})  # Airflow's retry, the store back
    assert again.state == "success", [(t.task_id, t.state) for t in again.get_task_instances()]
    catalog = store.rest_config().load()
    assert rows_of(catalog.load_table(f"{ns}.{output}")) == model()
    assert _swept_orphans(catalog, f"{ns}.{output}") == set()
    state = f"{ns}.{output}{STATE_SUFFIX}"
    if catalog.table_exists(state):  # an in-place view's aggregate state
        print(f"  state table {state}: {len(_referenced(catalog.load_table(state)))} files kept")
        assert _swept_orphans(catalog, state) == set(), "state table"


# -- the catalog during a mint and an append (no JVM) -----------------------------------------
@pytest.mark.parametrize("fault", ["killed", "frozen"])
def test_the_catalog_down_during_a_mint_fails_within_the_bound(
    lake: tuple[ObjectStore, Path], fault: str
) -> None:
    from airflow_provider_ct import MintOperator
    from airflow_provider_ct.exceptions import CatalogUnavailableError, ConfigurationError

    store, _ = lake
    ns = f"out_mint_{uuid.uuid4().hex[:6]}"
    catalog = _inputs(store, ns)
    tick = _sealed_time(catalog, ns)
    mint = MintOperator(
        task_id="mint", target=f"{ns}.v", sql=f"SELECT id FROM {ns}.events", time=tick
    )
    restore = FAULTS[fault](store)
    started = time.monotonic()
    with pytest.raises(CatalogUnavailableError) as down:
        mint.execute({})
    waited = time.monotonic() - started
    print(f"mint, catalog {fault}: failed after {waited:.1f} s")
    restore()
    assert not isinstance(down.value, ConfigurationError)
    assert waited < (RETRIES + 1) * TIMEOUT_S * 2 + 5
    assert store.rest_uri in str(down.value) and "did not answer during" in str(down.value)
    assert down.value.endpoint == store.rest_uri and down.value.operation
    description = mint.execute({})  # the retry, the catalog back
    assert description["target"] == f"{ns}.v"


def test_the_catalog_frozen_during_an_append_fails_within_the_bound_and_the_retry_lands_once(
    lake: tuple[ObjectStore, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from airflow_provider_ct.core.appending import land_staged
    from airflow_provider_ct.exceptions import CommitStateUnknownError
    from tests.test_objectstore_faults import _stage, _view

    store, _ = lake
    _, target, description = _view(store)
    rows = [(1, "a"), (2, "b")]
    manifest = _stage(target, description, rows)
    marker = tmp_path / "committing"
    monkeypatch.setenv(FAILPOINTS, f"commit.before-catalog-commit=sleep:2@{marker}")
    failure: list[BaseException] = []
    ended: list[float] = []

    def land() -> None:
        try:
            land_staged(target, manifest)
        except BaseException as exc:  # the thread's outcome, checked below
            failure.append(exc)
        ended.append(time.monotonic())

    thread = threading.Thread(target=land)
    thread.start()
    deadline = time.monotonic() + 30
    while not marker.exists():
        assert time.monotonic() < deadline, "the commit never started"
        time.sleep(0.02)
    restore = _freeze(store)
    frozen_at = time.monotonic()
    thread.join(120)
    restore()
    assert not thread.is_alive()
    waited = ended[0] - frozen_at
    print(f"append, catalog frozen mid-commit: failed after {waited:.1f} s")
    assert [type(e) for e in failure] == [CommitStateUnknownError], failure
    assert waited < 2 + (RETRIES + 1) * TIMEOUT_S * 2 + 5  # the failpoint's 2 s, then the bound
    monkeypatch.delenv(FAILPOINTS)
    table = store.rest_config().load().load_table(".".join(target.name()))
    again = land_staged(table, manifest)
    assert again.result.landed or again.result.already_landed
    table.refresh()
    assert rows_of(table) == Counter(rows)
    assert _swept_orphans(store.rest_config().load(), ".".join(target.name())) == set()
