"""A randomized, model-checked run over a small world of continual tables, with faults.

Why: every other test pins one interleaving. Here a seeded ``random.Random``
walks hundreds of interleavings of the steps a deployment takes (input
changes, view ticks split into mint / write attempts / appends, a continual
task, blind and differential collection writes, ticks, maintenance, sweeps)
with the faults the design claims to survive injected between them (retries,
duplicate and crashed attempts, unknown commit outcomes, foreign commits,
expiry, compaction). After every step the product's tables are compared with
a reference model that the test keeps from the inputs it chose itself:

* an input's rows at each of its change times (the test wrote them);
* a view's rows at each tick that landed: its query evaluated by DuckDB over
  the model's own input rows at the tick time (never the product's
  ``ct.inputs`` or its SQL rewrite); which tick lands, which append loses and
  which write is outdated is predicted from the model's count of the commits
  made to the view's table (its *generation*);
* the continual task's output: an upsert folded in Python over the rows the
  test appended at each input time, after the ones already there at its
  first tick (its snapshot, Materialize's default);
* the collections: the multiset of rows written (blind writes at the times
  their receipts name; the differential collection's desired states).

Invariants after every step, on every table: uppers only move forward (and
equal the model's where the model decides them); the contents at every
sealed time stay what they were when first sealed (the snapshot
``Timeline.snapshot_at`` picks never changes, the rows are scanned and
compared once when the time is sealed and again at random later); the
product's data times are the model's change times; every kept snapshot is
readable (every file it needs exists); a batch id forms one run of snapshots
on main; expiry never raises ``ct.since`` past what retention and read holds
allow. At the end: final ticks, maintenance and a sweep of every table, every
readable time rescanned, and no orphan: no file under ``data/ct_batch=*`` (or
the older ``ct-batch=*``) that no kept snapshot references, no manifest, no half-written manifest.

Step kinds (``STEP_WEIGHTS``; the clock advances 0.2-1.5 virtual seconds per
step): ``items`` / ``groups`` (inserts, deletes, updates, duplicates, NULLs;
one overwrite snapshot at the time), ``events`` (an append), ``seal``
(``advance``); ``mint`` a view tick, ``write`` one or two attempts of a
pending description in the shared Spark session (or a crash at one of three
staging failpoints, or an attempt staged and never appended; a quarter of the
writes run beside a sweep of the same table), ``append`` an attempt (maybe
with an unknown outcome before or after the catalog commit, maybe a retry,
maybe two attempts at once), ``abandon`` an attempt, ``tamper`` (a foreign
PyIceberg append to a view); ``continual`` (mint, one or two writers, one of
them maybe crashed or never appended, appends and retries); ``blind``
(writes through two writers, retractions, maybe racing a tick, maybe an
unknown outcome), ``diff`` (replace / update / sync by the long-lived writer
or a fresh one, maybe an unknown outcome), ``drift`` (a foreign append to
the differential collection), ``tick``; ``maintain`` (compaction and expiry
of a random subset of tables) and ``sweep`` (``grace_ms=0``).

``CT_MODEL_SEED`` replays a run (default: a new random seed; it is in the
summary line, printed even without ``-s``, and in every failure, with the
tail of the step log); ``CT_MODEL_STEPS`` runs longer (default 300).

The storage is a parameter (the ``storage`` fixture): ``[local]`` keeps the
tables in a local folder with the SQLite catalog; ``[s3]`` (marker
``objectstore``) runs the same steps on a REST catalog with S3 storage
(SeaweedFS on 127.0.0.1, tables in its table bucket, Spark through S3A in
the test session's JVM), ``CT_MODEL_S3_STEPS`` steps (default 50, to stay
near a minute in ``make test``). Every file check (readable snapshots, no
orphan, no manifest left) lists the store instead of the local folder.
"""

from __future__ import annotations

import bisect
import contextlib
import os
import random
import threading
import time as _time
import uuid
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from airflow_provider_ct.collections import (
    AppendOnlyCollection,
    DifferentialCollection,
    MaintenanceSettings,
    Ticker,
    WriteReceipt,
    expire_snapshots,
    maintain,
    readable_since,
    register_collection,
    register_reader,
)
from airflow_provider_ct.core.appending import land_staged
from airflow_provider_ct.core.catalog import CatalogConfig
from airflow_provider_ct.core.commit import compare_and_append
from airflow_provider_ct.core.description import BatchDescription
from airflow_provider_ct.core.faults import ENV as FAILPOINTS
from airflow_provider_ct.core.faults import InjectedFault
from airflow_provider_ct.core.frontier import Frontier, now_ms
from airflow_provider_ct.core.manifest import STATE_STAGED, StagedFile, StagedTime, read_manifest
from airflow_provider_ct.core.mint import mint
from airflow_provider_ct.core.reports import WriteReport, WriteStatus
from airflow_provider_ct.core.staging import (
    BATCH_FOLDERS,
    begin_batch,
    finish_batch,
    list_manifests,
    referenced_files,
    staging_roots,
)
from airflow_provider_ct.core.storage import io_properties
from airflow_provider_ct.core.sweep import sweep_staged
from airflow_provider_ct.core.tables import create_managed_table
from airflow_provider_ct.core.timeline import Timeline
from airflow_provider_ct.exceptions import CommitStateUnknownError
from airflow_provider_ct.spark.continual_job import run_continual
from airflow_provider_ct.spark.write_job import run_write
from tests.conftest import SCHEMA as KV
from tests.conftest import SPARK_CATALOG_CONN as CONN
from tests.helpers import (
    XComTI,
    advance,
    file_exists,
    file_key,
    files_present,
    local_path,
    mint_view_tick,
    replace_contents,
    rows_of,
    stage_arrow,
)
from tests.objectstore import iceberg_connection, in_process_session

pytestmark = [pytest.mark.faults, pytest.mark.spark, pytest.mark.slow]

Row = tuple[Any, ...]
Rows = Counter[Row]

ITEMS = pa.schema([("id", pa.int64()), ("grp", pa.string()), ("amount", pa.int64())])
GROUPS = pa.schema([("grp", pa.string()), ("label", pa.string())])
EVENTS = pa.schema([("key", pa.int32()), ("val", pa.int32())])
GRPS = ["a", "b", "c", "d", None]

TOTALS_SQL = "SELECT grp, COUNT(*) AS n, SUM(amount) AS total FROM {ns}.items GROUP BY grp"
DETAIL_SQL = (
    "SELECT i.id, i.amount, g.label FROM {ns}.items AS i "
    "LEFT JOIN {ns}.groups AS g ON i.grp = g.grp"
)
TASK_SQL = """CREATE CONTINUAL TASK {ns}.latest (key INT, val INT) ON INPUT {ns}.events AS (
    DELETE FROM {ns}.latest WHERE key IN (SELECT key FROM {ns}.events);
    INSERT INTO {ns}.latest SELECT key, max(val) FROM {ns}.events GROUP BY key;
)"""

#: Virtual milliseconds of history expiry keeps (a step advances the clock 0.2-1.5 s).
RETENTION_MS = 20_000
CHECKPOINT_MS = 5_000
#: Step kinds and their weights: Spark runs only in "write" (and only when the
#: description is current) and "continual"; everything else is PyIceberg.
STEP_WEIGHTS = {
    "items": 10,
    "groups": 4,
    "seal": 6,
    "events": 7,
    "mint": 5,
    "write": 12,
    "append": 12,
    "abandon": 2,
    "tamper": 3,
    "continual": 3,
    "blind": 10,
    "diff": 8,
    "drift": 2,
    "tick": 6,
    "maintain": 4,
    "sweep": 6,
}
#: Write modes: a plain attempt, two attempts of one description, an attempt
#: staged and never appended, and crashes at three points of the staging.
WRITE_MODES = {
    "plain": 50,
    "twice": 12,
    "abandon": 8,
    "staging.after-begin": 10,
    "staging.before-finish": 12,
    "staging.manifest-written": 8,
}


# -- the model ------------------------------------------------------------------------------
class History:
    """What a table holds over time, as the test decided it: (time, rows) change points."""

    def __init__(self) -> None:
        self.times: list[int] = []
        self.rows: list[Rows] = []

    def record(self, time: int, rows: Rows) -> None:
        if self.times and time <= self.times[-1]:
            raise AssertionError(f"model: change at {time} after one at {self.times[-1]}")
        self.times.append(time)
        self.rows.append(+rows)

    def at(self, time: int) -> Rows:
        index = bisect.bisect_right(self.times, time)
        return Counter() if index == 0 else self.rows[index - 1]

    @property
    def latest(self) -> Rows:
        return self.rows[-1] if self.rows else Counter()


@dataclass
class Tracked:
    """One product table and what the model says about it."""

    name: str
    #: The PyIceberg table; ``None`` until a view's first write creates it.
    table: Any
    history: History = field(default_factory=History)
    #: The model's upper (``exact``) or a lower bound the product must have reached.
    upper: int = 0
    #: Product data times are exactly the model's change times, the upper is the model's.
    exact: bool = True
    #: Each batch id is exactly one snapshot (views).
    single_snapshot_batches: bool = False
    #: The highest ``ct.since`` expiry was allowed to set so far.
    allowed_floor: int = 0
    seen_upper: int = 0
    #: time -> snapshot holding the contents there, as first observed once sealed.
    sealed: dict[int, int | None] = field(default_factory=dict)
    #: A foreign commit changed the head; exact again after the next tick.
    tampered: bool = False


@dataclass
class Attempt:
    report: WriteReport
    #: Appended once already: appending it again is a retry.
    consumed: bool = False


@dataclass
class Pending:
    """A minted description and its staged attempts."""

    desc: BatchDescription
    #: The view's generation when minted: the description lands only if unchanged.
    generation: int
    attempts: list[Attempt] = field(default_factory=list)
    landed: bool = False


@dataclass
class View:
    tracked: Tracked
    sql: str
    #: Commits made to the view's table (ticks, foreign commits, compactions).
    generation: int = 0
    pending: list[Pending] = field(default_factory=list)


def upsert(state: Rows, rows: list[Row]) -> Rows:
    """The continual task, in Python: a key's rows replaced by the max of its new values."""
    keys = {k for k, _ in rows if k is not None}
    out = Counter({r: n for r, n in state.items() if r[0] not in keys})
    groups: dict[Any, list[Any]] = {}
    for key, val in rows:
        groups.setdefault(key, []).append(val)
    for key, vals in groups.items():
        present = [v for v in vals if v is not None]
        out[(key, max(present) if present else None)] += 1
    return out


def duck(sql: str, ns: str, inputs: dict[str, pa.Table]) -> Rows:
    """Evaluate ``sql`` in DuckDB over the model's input rows (tables named ``ns.name``)."""
    import duckdb

    con = duckdb.connect()
    con.execute(f"CREATE SCHEMA {ns}")
    for name, data in inputs.items():
        con.register(f"__model_{name}", data)
        con.execute(f"CREATE VIEW {ns}.{name} AS SELECT * FROM __model_{name}")
    rows = con.execute(sql).fetchall()
    con.close()
    return Counter(tuple(r) for r in rows)


def arrow(schema: pa.Schema, rows: list[Row]) -> pa.Table:
    return pa.Table.from_pylist([dict(zip(schema.names, r, strict=True)) for r in rows], schema)


def sample(rows: Rows) -> str:
    return repr(sorted(rows.items(), key=repr)[:4])


def upper_time(timeline: Timeline) -> int:
    assert timeline.upper.time is not None, f"{timeline.table} is closed"
    return int(timeline.upper.time)


def snapshot_at(data: list[tuple[int, int]], times: list[int], time: int) -> int | None:
    """``Timeline.snapshot_at`` over its ``data_times()`` (without the sealing check)."""
    index = bisect.bisect_right(times, time)
    return None if index == 0 else data[index - 1][1]


@contextlib.contextmanager
def failpoint(spec: str | None) -> Iterator[None]:
    """Set ``CT_FAILPOINTS`` for the duration (this process only; no other writer runs)."""
    if spec is None:
        yield
        return
    os.environ[FAILPOINTS] = spec
    try:
        yield
    finally:
        os.environ.pop(FAILPOINTS, None)


# -- the invariants -------------------------------------------------------------------------
class Checker:
    """The invariants, checked against the product's tables after every step."""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng
        self.rows_compared = 0
        self.lost = 0
        self.duplicated = 0
        self.scans = 0
        self._lists: dict[str, list[Any]] = {}
        self._live: dict[str, set[str]] = {}

    def compare(self, where: str, expected: Rows, actual: Rows) -> None:
        lost, duplicated = expected - actual, actual - expected
        self.rows_compared += sum(expected.values())
        self.lost += sum(lost.values())
        self.duplicated += sum(duplicated.values())
        assert not lost and not duplicated, (
            f"{where}: {sum(lost.values())} row(s) lost {sample(lost)}, "
            f"{sum(duplicated.values())} extra {sample(duplicated)} "
            f"(model: {sum(expected.values())} rows)"
        )

    def scan(self, tracked: Tracked, snapshot_id: int | None, time: int) -> None:
        self.scans += 1
        actual = Counter() if snapshot_id is None else rows_of(tracked.table, snapshot_id)
        where = f"{tracked.name} at {time} (snapshot {snapshot_id})"
        self.compare(where, tracked.history.at(time), actual)

    def check(self, tracked: Tracked) -> None:
        table = tracked.table
        table.refresh()
        timeline = Timeline.of(table)  # itself refuses an upper that went back
        upper = upper_time(timeline)
        assert upper >= tracked.seen_upper, (
            f"{tracked.name}: upper went back from {tracked.seen_upper} to {upper}"
        )
        tracked.seen_upper = upper
        if tracked.exact:
            assert upper == tracked.upper, f"{tracked.name}: upper {upper}, model {tracked.upper}"
        else:
            assert upper >= tracked.upper, f"{tracked.name}: upper {upper} < {tracked.upper}"
        floor = readable_since(table)
        assert floor <= tracked.allowed_floor, (
            f"{tracked.name}: ct.since {floor} is beyond what expiry may drop "
            f"({tracked.allowed_floor})"
        )
        self._times(tracked, timeline.data_times(), floor, upper)
        self.readable(tracked.name, table)
        self.batches(tracked, timeline)

    def _times(self, tracked: Tracked, data: list[tuple[int, int]], floor: int, upper: int) -> None:
        times = [t for t, _ in data]
        assert times == sorted(set(times)), f"{tracked.name}: data times not increasing {times}"
        product = set(times[bisect.bisect_left(times, floor) :])
        history = tracked.history.times
        model = set(
            history[bisect.bisect_left(history, floor) : bisect.bisect_left(history, upper)]
        )
        if tracked.exact:
            assert product == model, (
                f"{tracked.name}: data times only in the product {sorted(product - model)}, "
                f"only in the model {sorted(model - product)} (since {floor}, upper {upper})"
            )
        else:
            assert model <= product, f"{tracked.name}: no snapshot at {sorted(model - product)}"
        points = product | model | ({floor} if 0 < floor < upper else set())
        for time in [t for t in tracked.sealed if t < floor]:
            del tracked.sealed[time]  # expired: no longer promised
        for time in sorted(points):
            snapshot = snapshot_at(data, times, time)
            if time not in tracked.sealed:
                self.scan(tracked, snapshot, time)
                tracked.sealed[time] = snapshot
            assert tracked.sealed[time] == snapshot, (
                f"{tracked.name}: the contents at sealed time {time} moved from snapshot "
                f"{tracked.sealed[time]} to {snapshot}"
            )

    def rescan(self, tracked: Tracked) -> None:
        """Scan one sealed time again (snapshot ids are compared every step anyway)."""
        floor = readable_since(tracked.table)
        times = sorted(t for t in tracked.sealed if t >= floor)
        if times:
            time = self.rng.choice(times)
            self.scan(tracked, tracked.sealed[time], time)

    def rescan_all(self, tracked: Tracked) -> None:
        floor = readable_since(tracked.table)
        for time in sorted(t for t in tracked.sealed if t >= floor):
            self.scan(tracked, tracked.sealed[time], time)

    def readable(self, name: str, table: Any) -> None:
        """Every file some kept snapshot needs to be read exists.

        One listing of the table's location answers for every file in it (on
        S3 a request per file would be hundreds per step); a file elsewhere
        is looked up on its own.
        """
        io = io_properties(table)
        present = files_present(table.location(), io)

        def exists(path: str) -> bool:
            return file_key(path) in present or file_exists(path, io)

        needed: set[str] = set()
        manifests: dict[str, Any] = {}
        for snapshot in table.metadata.snapshots:
            path = snapshot.manifest_list
            assert exists(path), f"{name}: manifest list {path} is gone"
            if path not in self._lists:
                self._lists[path] = list(snapshot.manifests(table.io))
            needed.add(path)
            manifests.update((m.manifest_path, m) for m in self._lists[path])
        for path, manifest in manifests.items():
            needed.add(path)
            if path not in self._live:
                assert exists(path), f"{name}: manifest {path} is gone"
                entries = manifest.fetch_manifest_entry(table.io, discard_deleted=True)
                self._live[path] = {e.data_file.file_path for e in entries}
            needed |= self._live[path]
        missing = sorted(p for p in needed if not exists(p))
        assert not missing, (
            f"{name}: {len(missing)} file(s) a kept snapshot needs are gone: {missing[:3]}"
        )

    def batches(self, tracked: Tracked, timeline: Timeline) -> None:
        """A batch id is one run of snapshots on main (a view's: exactly one snapshot)."""
        runs: list[str] = []
        for entry in timeline.entries:
            if entry.batch_id is None:
                continue
            if runs and runs[-1] == entry.batch_id:
                assert not tracked.single_snapshot_batches, (
                    f"{tracked.name}: batch {entry.batch_id} landed twice"
                )
                continue
            runs.append(entry.batch_id)
        twice = sorted(b for b, n in Counter(runs).items() if n > 1)
        assert not twice, f"{tracked.name}: batch id(s) {twice} on main more than once"


def orphans(table: Any) -> tuple[list[str], list[str], list[str], int]:
    """Files in batch folders no kept snapshot references; manifests; half-written ones.

    Batch folders are ``data/ct_batch=*`` and the older ``data/ct-batch=*``;
    manifests are looked for in every staging root (``ct.staging-root`` on S3).
    Last, how many batch files were looked at (a check that found none proves nothing).
    """
    table.refresh()
    io, location, props = io_properties(table), table.location(), table.metadata.properties
    live = {file_key(p) for p in referenced_files(table)}
    data = file_key(f"{location.rstrip('/')}/data")
    folders = tuple(f"{data}/{name}=" for name in BATCH_FOLDERS)
    staged = [p for p in files_present(f"{location.rstrip('/')}/data", io) if p.startswith(folders)]
    unreferenced = sorted(p for p in staged if p not in live)
    manifests = list(list_manifests(location, props, io))
    half = sorted(
        p
        for root in staging_roots(location, props, io)
        for p in files_present(root, io)
        if ".tmp-" in p.rsplit("/", 1)[-1]
    )
    return unreferenced, manifests, half, len(staged)


# -- where the run keeps its tables ---------------------------------------------------------
#: The Airflow connection of the run on S3 (the local run uses the Spark session's, CONN).
S3_CONN = "ct_model_s3"
#: Steps of the run on S3 in ``make test`` (each step there costs several times a local one).
S3_STEPS_DEFAULT = "50"


@dataclass(frozen=True)
class Storage:
    """Where a run keeps its tables: the Spark session, the catalog, its connection, its length.

    ``local``: the test session's SQLite catalog on a local folder.
    ``s3``: the REST catalog of a SeaweedFS server with its tables in the
    server's table bucket and the manifests under ``ct.staging-root``, Spark
    reaching it through S3A (:func:`tests.objectstore.in_process_session`).
    The run itself is the same: only the storage differs.
    """

    kind: str
    spark: Any
    config: CatalogConfig
    conn_id: str
    steps: int


@pytest.fixture(params=["local", pytest.param("s3", marks=pytest.mark.objectstore)])
def storage(
    request: pytest.FixtureRequest, spark: Any, monkeypatch: pytest.MonkeyPatch
) -> Iterator[Storage]:
    """The run's storage: ``CT_MODEL_STEPS`` steps locally, ``CT_MODEL_S3_STEPS`` on S3."""
    from airflow_provider_ct.spark.conf import s3a_jars

    if request.param == "local":
        config = request.getfixturevalue("spark_catalog_config")
        yield Storage("local", spark, config, CONN, int(os.environ.get("CT_MODEL_STEPS", "300")))
        return
    if not s3a_jars():
        pytest.skip("Hadoop's S3A jars are not fetched (make setup)")
    config = request.getfixturevalue("object_store").rest_config("ctmodel")
    monkeypatch.setenv(f"AIRFLOW_CONN_{S3_CONN.upper()}", iceberg_connection(config))
    steps = int(os.environ.get("CT_MODEL_S3_STEPS", S3_STEPS_DEFAULT))
    with in_process_session(spark, config) as session:
        yield Storage("s3", session, config, S3_CONN, steps)


# -- the world ------------------------------------------------------------------------------
class World:
    """The product's tables, the model beside them, and one method per step kind."""

    def __init__(self, storage: Storage, seed: int, scratch: Path) -> None:
        self.spark, self.config = storage.spark, storage.config
        self.seed, self.scratch = seed, scratch
        self.conn_id = storage.conn_id
        #: The catalog's FileIO settings, for files read outside a table (manifests).
        self.io = storage.config.pyiceberg_properties()
        self.rng = random.Random(seed)
        self.checker = Checker(random.Random(seed + 1))
        self.catalog = self.config.load()
        self.ns = f"mc{seed % 1_000_000}_{uuid.uuid4().hex[:6]}"
        # Virtual time, far ahead of the wall clock: expiry's "committed within the
        # retention" rule (by wall clock) then never masks what holds and times keep.
        self.clock = now_ms() + 30 * 86_400_000
        self.steps: list[str] = []
        self.faults: Counter[str] = Counter()
        self.seconds: dict[str, float] = {}
        self.items_rows: list[Row] = []
        self.event_batches: list[tuple[int, list[Row]]] = []
        self.next_id = 1
        self._inputs()
        self._views()
        self._collections()

    def _now(self) -> int:
        return self.clock

    def _inputs(self) -> None:
        ns, catalog = self.ns, self.catalog
        self.items = Tracked(f"{ns}.items", create_managed_table(catalog, f"{ns}.items", ITEMS))
        self.groups = Tracked(f"{ns}.groups", create_managed_table(catalog, f"{ns}.groups", GROUPS))
        self.events = Tracked(f"{ns}.events", create_managed_table(catalog, f"{ns}.events", EVENTS))

    def _views(self) -> None:
        ns = self.ns
        self.views = [
            View(Tracked(f"{ns}.totals", None, single_snapshot_batches=True), TOTALS_SQL),
            View(Tracked(f"{ns}.detail", None, single_snapshot_batches=True), DETAIL_SQL),
        ]
        for view in self.views:
            view.sql = view.sql.format(ns=ns)
            register_reader(self.catalog, view.tracked.name, [self.items.name, self.groups.name])
        self.task = Tracked(f"{ns}.latest", None)
        self.task_sql = TASK_SQL.format(ns=ns)
        self.task_as_of: int | None = None
        self.task_state: Rows = Counter()
        register_reader(self.catalog, self.task.name, [self.events.name])

    def _collections(self) -> None:
        ns, catalog = self.ns, self.catalog
        register_collection(catalog, f"{ns}.log", KV, "append-only")
        register_collection(catalog, f"{ns}.state", KV, "differential")
        self.log = Tracked(f"{ns}.log", catalog.load_table(f"{ns}.log"), exact=False)
        self.state = Tracked(f"{ns}.state", catalog.load_table(f"{ns}.state"), exact=False)
        self.writers = [
            AppendOnlyCollection(
                catalog.load_table(self.log.name),
                batch_interval_ms=0,
                read_only=False,
                clock=self._now,
            )
            for _ in range(2)
        ]
        self.log_rows: Rows = Counter()
        self.next_serial = 1
        self.differential = DifferentialCollection(
            catalog.load_table(self.state.name), read_only=False, clock=self._now
        )
        self.remembered: Rows | None = None  # what `differential` remembers as desired
        self.state_drift: Rows = Counter()  # rows foreign commits added since its last write
        # Steps move the clock 200..1,500 ms: some ticks find an upper moved within
        # the last half interval (500 ms) and leave it, the others advance it.
        self.ticker = Ticker(
            catalog,
            namespaces=[ns],
            read_only=False,
            clock=self._now,
            checkpoint_ms=CHECKPOINT_MS,
            interval_ms=1_000,
        )

    def close(self) -> None:
        for writer in self.writers:
            writer.shutdown()

    # -- bookkeeping ----------------------------------------------------------------------
    def tables(self) -> list[Tracked]:
        """Every product table that exists (a view's is created by its first write)."""
        out = [self.items, self.groups, self.events, self.log, self.state]
        from pyiceberg.exceptions import NoSuchTableError

        for tracked in [*(v.tracked for v in self.views), self.task]:
            if tracked.table is None:
                with contextlib.suppress(NoSuchTableError):
                    tracked.table = self.catalog.load_table(tracked.name)
            if tracked.table is not None:
                out.append(tracked)
        return out

    def step(self, number: int) -> None:
        self.clock += self.rng.randint(200, 1_500)
        kinds = list(STEP_WEIGHTS)
        kind = self.rng.choices(kinds, weights=[STEP_WEIGHTS[k] for k in kinds])[0]
        self.steps.append(f"{number:5d} {kind} ...")
        started = _time.monotonic()
        note = getattr(self, f"step_{kind}")()
        if note is None:  # not applicable now: seal the inputs instead
            kind, note = "seal", self.step_seal()
        self.steps[-1] = f"{number:5d} {kind}: {note}"
        self._spent(kind, started)
        self.check_all()

    def check_all(self) -> None:
        started = _time.monotonic()
        tables = self.tables()
        for tracked in tables:
            self.checker.check(tracked)
        self.checker.rescan(self.rng_check.choice(tables))
        head = self.rng_check.choice([t for t in tables if not t.tampered])
        self.checker.compare(f"{head.name} head", head.history.latest, rows_of(head.table))
        self._spent("(checks)", started)

    def _spent(self, kind: str, started: float) -> None:
        self.seconds[kind] = self.seconds.get(kind, 0.0) + _time.monotonic() - started

    @property
    def rng_check(self) -> random.Random:
        return self.checker.rng

    def failure(self, exc: BaseException) -> str:
        tail = "\n".join(self.steps[-40:])
        return (
            f"model-checked run failed: seed {self.seed} (replay with CT_MODEL_SEED={self.seed}), "
            f"step {len(self.steps) - 1}: {type(exc).__name__}: {exc}\nlast steps:\n{tail}"
        )

    # -- inputs ---------------------------------------------------------------------------
    def _replace(self, tracked: Tracked, schema: pa.Schema, rows: list[Row]) -> int:
        time = max(self.clock, tracked.upper)
        replace_contents(tracked.table, time, arrow(schema, rows))
        tracked.history.record(time, Counter(rows))
        tracked.upper = time + 1
        return time

    def _seal(self, tracked: Tracked, time: int) -> None:
        if tracked.upper > time:
            return
        advance(tracked.table, time)
        tracked.upper = time + 1

    def step_items(self) -> str:
        rng, out = self.rng, []
        drop = 0.1 if len(self.items_rows) < 30 else 0.3
        for row in self.items_rows:
            roll = rng.random()
            if roll < drop:
                continue  # a delete
            if roll < drop + 0.12:  # an update
                row = (row[0], rng.choice(GRPS), rng.choice([rng.randint(1, 99), None]))
            out.append(row)
        for _ in range(rng.randint(0, 4)):  # inserts: some duplicated, some NULL
            row = (self.next_id, rng.choice(GRPS), rng.choice([rng.randint(1, 99), None]))
            self.next_id += 1
            out += [row, row] if rng.random() < 0.2 else [row]
        self.items_rows = out
        return f"{len(out)} rows at {self._replace(self.items, ITEMS, out)}"

    def step_groups(self) -> str:
        rng, out = self.rng, []
        for grp in GRPS:
            if rng.random() < 0.8:
                row = (grp, rng.choice(["x", "y", "z", None]))
                out += [row, (grp, "dup")] if rng.random() < 0.15 else [row]
        return f"{len(out)} rows at {self._replace(self.groups, GROUPS, out)}"

    def step_seal(self) -> str:
        chosen = [t for t in (self.items, self.groups, self.events) if self.rng.random() < 0.7]
        for tracked in chosen:
            self._seal(tracked, self.clock)
        return f"{[t.name.split('.')[-1] for t in chosen]} through {self.clock}"

    def step_events(self) -> str:
        rng, tracked = self.rng, self.events
        rows: list[Row] = [
            (rng.choice([0, 1, 2, 3, 4, 5, None]), rng.choice([rng.randint(0, 50), None]))
            for _ in range(rng.randint(1, 4))
        ]
        time = max(self.clock, tracked.upper)
        batch = f"ev-{time}-{uuid.uuid4().hex[:8]}"
        result = compare_and_append(
            tracked.table,
            expected_upper=Frontier.at(tracked.upper),  # the model's upper must be the table's
            new_upper=Frontier.sealing(time),
            batch_id=batch,
            add_files=stage_arrow(tracked.table, batch, arrow(EVENTS, rows)),
            time=time,
        )
        assert result.landed, result
        self.event_batches.append((time, rows))
        tracked.history.record(time, tracked.history.latest + Counter(rows))
        tracked.upper = time + 1
        return f"{len(rows)} rows at {time}"

    # -- views ----------------------------------------------------------------------------
    def view_model(self, view: View, time: int) -> Rows:
        """The view's query in DuckDB over the model's input rows at ``time``."""
        inputs = {
            "items": arrow(ITEMS, list(self.items.history.at(time).elements())),
            "groups": arrow(GROUPS, list(self.groups.history.at(time).elements())),
        }
        return duck(view.sql, self.ns, inputs)

    def _mint(self, view: View) -> Pending | None:
        low = view.tracked.upper
        if min(self.items.upper, self.groups.upper) - 1 < low:
            self._seal(self.items, self.clock)
            self._seal(self.groups, self.clock)
        high = min(self.items.upper, self.groups.upper) - 1
        if high < low:
            return None
        time = high if self.rng.random() < 0.6 else self.rng.randint(max(low, high - 8_000), high)
        decision = mint_view_tick(self.catalog, view.tracked.name, view.sql, time)
        desc = decision.description
        assert desc is not None, decision.reason
        assert desc.lower == Frontier.at(low) and desc.time == time, desc
        for pending in view.pending:
            if pending.desc.id == desc.id:  # minted again: the same description
                assert pending.generation == view.generation
                return pending
        pending = Pending(desc, view.generation)
        view.pending.append(pending)
        if len(view.pending) > 3:  # the oldest run was given up: its attempts crashed
            self.faults["abandoned"] += len(view.pending.pop(0).attempts)
        return pending

    def step_mint(self) -> str | None:
        view = self.rng.choice(self.views)
        pending = self._mint(view)
        if pending is None:
            return None
        return f"{view.tracked.name} at {pending.desc.time} ({len(view.pending)} pending)"

    def _current(self, view: View, pending: Pending) -> bool:
        return not pending.landed and pending.generation == view.generation

    def _write(self, view: View, pending: Pending, crash: str | None, sweep: bool) -> Any:
        """One write attempt (a ``WriteReport``, or the injected crash), maybe beside a sweep."""
        errors: list[BaseException] = []
        thread = None
        if sweep and view.tracked.table is not None:
            thread = threading.Thread(target=self._sweep_in_thread, args=(view, errors))
            thread.start()
        try:
            with failpoint(None if crash is None else f"{crash}=raise"):
                return run_write(self.spark, self.config, view.sql, pending.desc)
        except InjectedFault as exc:
            return exc
        finally:
            if thread is not None:
                thread.join()
                self.faults["sweep-during-write"] += 1
            assert not errors, f"the concurrent sweep failed: {errors}"

    def _sweep_in_thread(self, view: View, errors: list[BaseException]) -> None:
        try:
            sweep_staged(self.config.load().load_table(view.tracked.name), grace_ms=0)
        except BaseException as exc:
            errors.append(exc)

    def step_write(self) -> str | None:
        view = self.rng.choice(self.views)
        pending = self.rng.choice(view.pending) if view.pending else self._mint(view)
        if pending is None:
            return None
        modes = list(WRITE_MODES)
        mode = self.rng.choices(modes, weights=[WRITE_MODES[m] for m in modes])[0]
        sweep = self.rng.random() < 0.25
        current = self._current(view, pending)
        crash = mode if mode.startswith("staging.") else None
        outcome = self._write(view, pending, crash, sweep)
        name = f"{view.tracked.name} at {pending.desc.time}"
        if not current:
            assert isinstance(outcome, WriteReport), outcome
            assert outcome.status == WriteStatus.OUTDATED, outcome
            return f"{name}: outdated, as predicted"
        if crash is not None:
            assert isinstance(outcome, InjectedFault), f"expected the crash at {crash}: {outcome}"
            self.faults[f"crash:{crash}"] += 1
            return f"{name}: crashed at {crash}"
        reports = [outcome] + ([self._write(view, pending, None, False)] if mode == "twice" else [])
        for report in reports:
            self._check_staged(report)
        if mode == "twice":
            self.faults["duplicate-attempt"] += 1
        if mode == "abandon" or (mode == "twice" and self.rng.random() < 0.3):
            reports.pop()
            self.faults["abandoned"] += 1
        pending.attempts += [Attempt(r) for r in reports]
        return f"{name}: {mode}, {len(pending.attempts)} attempt(s) staged"

    def _check_staged(self, report: Any) -> None:
        assert isinstance(report, WriteReport) and report.status == WriteStatus.STAGED, report
        assert report.manifest is not None
        assert read_manifest(report.manifest, self.io).state == STATE_STAGED

    def _append(
        self, report: WriteReport, desc: BatchDescription, *, continual: bool = False
    ) -> dict[str, Any]:
        """The append task, checking the manifest against the minted ``desc`` (as a DAG does)."""
        from airflow_provider_ct.operators.append import AppendOperator
        from airflow_provider_ct.operators.continual import ContinualAppendOperator

        common: dict[str, Any] = {
            "task_id": f"append_{uuid.uuid4().hex[:8]}",
            "report": report.to_json(),
            "iceberg_conn_id": self.conn_id,
            "description_task_id": "mint",
        }
        op = (
            ContinualAppendOperator(definition=self.task_sql, namespace=self.ns, **common)
            if continual
            else AppendOperator(**common)
        )
        out: dict[str, Any] = op.execute({"ti": XComTI({"mint": desc.to_json()})})
        return out

    def _land(self, view: View, pending: Pending) -> None:
        """The model's side of a tick that landed."""
        time = pending.desc.time
        view.tracked.history.record(time, self.view_model(view, time))
        view.tracked.upper = time + 1
        view.generation += 1
        view.tracked.tampered = False
        pending.landed = True

    def step_append(self) -> str | None:
        choices = [(v, p, a) for v in self.views for p in v.pending for a in p.attempts]
        if not choices:
            return None
        view, pending, attempt = self.rng.choice(choices)
        fresh = [a for a in pending.attempts if not a.consumed]
        if self._current(view, pending) and len(fresh) > 1 and self.rng.random() < 0.4:
            return self._append_concurrently(view, pending, self.rng.sample(fresh, 2))
        known = self._known_bug(view, pending, attempt)
        if known is not None:  # covered by the dedicated test above, not modelled here
            pending.attempts.remove(attempt)
            self.faults["skipped: retry after expiry (not modelled)"] += 1
            return f"{view.tracked.name} at {pending.desc.time}: skipped ({known})"
        fault = self.rng.choices(
            [None, "commit.before-catalog-commit", "commit.after-catalog-commit"], [70, 15, 15]
        )[0]
        current = self._current(view, pending)
        name = f"{view.tracked.name} at {pending.desc.time}"
        try:
            with failpoint(None if fault is None else f"{fault}=raise"):
                out = self._append(attempt.report, pending.desc)
        except CommitStateUnknownError:
            assert fault is not None and current, f"{name}: unexpected unknown outcome"
            self.faults[f"unknown-outcome:{fault}"] += 1
            if fault == "commit.after-catalog-commit":
                self._land(view, pending)
            return f"{name}: unknown outcome at {fault} (attempt kept for a retry)"
        assert not (fault is not None and current), f"{name}: {fault} did not fire: {out}"
        was_landed = pending.landed
        expected = (True, True) if was_landed else (True, False) if current else (False, False)
        got = (out["appended"], out["already_appended"])
        assert got == expected, f"{name}: append gave {got}, model {expected}: {out}"
        if current:
            self._land(view, pending)
        if attempt.consumed:
            self.faults["retry"] += 1
        attempt.consumed = True
        if self.rng.random() < 0.7:
            pending.attempts.remove(attempt)
        self._prune(view)
        return f"{name}: appended={got[0]} already={got[1]}"

    def _known_bug(self, view: View, pending: Pending, attempt: Attempt) -> str | None:
        """Why appending ``attempt`` now is outside what the model predicts, or None.

        A landed batch whose snapshot expiry removed is recognised only by its
        files: an attempt with live files reports "already landed" (see
        test_a_landed_attempt_retried_after_its_snapshot_expired_keeps_its_files),
        but one that staged nothing, or another attempt of it, can only be told
        "lost"; the model does not predict which, so such retries are skipped.
        """
        if not pending.landed:
            return None
        view.tracked.table.refresh()
        if Timeline.of(view.tracked.table).find_batch(pending.desc.id) is not None:
            return None
        manifest = attempt.report.manifest
        if manifest is not None and file_exists(manifest, self.io):
            return "its snapshot expired, its manifest is still there"
        if not attempt.report.rows_to_insert + attempt.report.rows_to_delete:
            return "its snapshot expired and it staged no file"
        self.faults["retry after expiry"] += 1  # recognised by its live files
        return None

    def _append_concurrently(self, view: View, pending: Pending, pair: list[Attempt]) -> str:
        """Two attempts of one description appended at once: exactly one lands."""
        outcomes: list[Any] = [None, None]

        def run(index: int) -> None:
            try:
                outcomes[index] = self._append(pair[index].report, pending.desc)
            except BaseException as exc:
                outcomes[index] = exc

        threads = [threading.Thread(target=run, args=(i,)) for i in range(2)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        got = sorted(
            (
                (o["appended"], o["already_appended"]) if isinstance(o, dict) else (None, None)
                for o in outcomes
            ),
            key=repr,
        )
        name = f"{view.tracked.name} at {pending.desc.time}"
        assert got == [(True, False), (True, True)], f"{name}: concurrent appends: {outcomes}"
        self._land(view, pending)
        for attempt in pair:
            attempt.consumed = True
            pending.attempts.remove(attempt)
        self._prune(view)
        self.faults["concurrent-appends"] += 1
        return f"{name}: two attempts appended at once, one landed"

    def _prune(self, view: View) -> None:
        view.pending = [
            p for p in view.pending if p.attempts or (not p.landed and self._current(view, p))
        ]

    def step_abandon(self) -> str | None:
        choices = [(p, a) for v in self.views for p in v.pending for a in p.attempts]
        if not choices:
            return None
        pending, attempt = self.rng.choice(choices)
        pending.attempts.remove(attempt)
        self.faults["abandoned"] += 0 if attempt.consumed else 1
        return f"dropped an attempt of {pending.desc.id}"

    def step_tamper(self) -> str | None:
        views = [v for v in self.views if v.tracked.table is not None and v.tracked.upper > 0]
        if not views:
            return None
        view = self.rng.choice(views)
        table = view.tracked.table
        table.refresh()
        schema = table.schema().as_arrow()
        rows = [self._random_row(schema) for _ in range(self.rng.randint(1, 3))]
        table.append(
            pa.Table.from_pylist([dict(zip(schema.names, r, strict=True)) for r in rows], schema)
        )
        view.generation += 1
        view.tracked.tampered = True
        self.faults["tamper"] += 1
        return f"{view.tracked.name}: a foreign append of {len(rows)} row(s)"

    def _random_row(self, schema: pa.Schema) -> Row:
        values: list[Any] = []
        for f in schema:
            if pa.types.is_string(f.type) or pa.types.is_large_string(f.type):
                values.append(self.rng.choice(["a", "x", "foreign", None]))
            else:
                values.append(self.rng.choice([self.rng.randint(-5, 500), None]))
        return tuple(values)

    # -- the continual task ---------------------------------------------------------------
    def _mint_task(self, time: int) -> BatchDescription:
        from pyiceberg.exceptions import NoSuchTableError

        try:
            output: Timeline | None = Timeline.of(self.catalog.load_table(self.task.name))
        except NoSuchTableError:
            output = None
        inputs = {self.events.name: Timeline.of(self.catalog.load_table(self.events.name))}
        decision = mint(target=self.task.name, target_timeline=output, time=time, inputs=inputs)
        assert decision.description is not None, decision.reason
        assert decision.description.lower == Frontier.at(self.task.upper)
        return decision.description

    def _land_task(self, desc: BatchDescription) -> None:
        """The model's side: fold the input times of ``[lower, time]`` after the as-of.

        The first batch also folds the snapshot (``SNAPSHOT`` defaults to true, as
        in Materialize): every event up to the as-of, as one change at the as-of.
        """
        if self.task_as_of is None:
            self.task_as_of = desc.time
            snapshot = [r for t, rows in self.event_batches if t <= desc.time for r in rows]
            if snapshot:
                self.task_state = upsert(self.task_state, snapshot)
                self.task.history.record(desc.time, self.task_state)
        low = int(desc.lower.time or 0)
        for time, rows in self.event_batches:
            if low <= time <= desc.time and time > self.task_as_of:
                self.task_state = upsert(self.task_state, rows)
                self.task.history.record(time, self.task_state)
        self.task.upper = desc.time + 1

    def step_continual(self) -> str | None:
        low = self.task.upper
        if self.events.upper - 1 < low:
            self._seal(self.events, self.clock)
        high = self.events.upper - 1
        if high < low:
            return None
        time = high if self.rng.random() < 0.7 else self.rng.randint(max(low, high - 8_000), high)
        desc = self._mint_task(time)
        mode = self.rng.choices(
            ["plain", "twice", "retry", "abandon-second", "crash-first"], [50, 15, 15, 10, 10]
        )[0]
        if mode == "crash-first":  # a first writer dies mid-staging; the retry runs through
            crash = self.rng.choice(["staging.after-begin", "staging.before-finish"])
            with failpoint(f"{crash}=raise"), pytest.raises(InjectedFault):
                run_continual(self.spark, self.config, self.task_sql, self.ns, desc)
            self.faults[f"crash:{crash}"] += 1
        runs = 2 if mode in ("twice", "abandon-second") else 1
        reports = [
            run_continual(self.spark, self.config, self.task_sql, self.ns, desc)
            for _ in range(runs)
        ]
        for report in reports:
            self._check_staged(report)
        self.rng.shuffle(reports)
        if mode == "abandon-second":
            reports.pop()
            self.faults["abandoned"] += 1
        outcomes = [self._append(r, desc, continual=True) for r in reports]
        if mode == "retry":
            outcomes.append(self._append(reports[0], desc, continual=True))
            self.faults["retry"] += 1
        if mode == "twice":
            self.faults["duplicate-attempt"] += 1
        got = [(o["appended"], o["already_appended"]) for o in outcomes]
        assert got == [(True, False)] + [(True, True)] * (len(got) - 1), got
        self._land_task(desc)
        return f"{self.task.name} at {time}: {mode}"

    # -- collections ----------------------------------------------------------------------
    def step_blind(self) -> str:
        rng, held = self.rng, Counter(self.log_rows)
        futures: list[tuple[Any, Rows]] = []
        for _ in range(rng.randint(1, 4)):
            writer = rng.choice(self.writers)
            if held and rng.random() < 0.25:
                row = rng.choice(sorted(held, key=repr))
                held[row] -= 1
                held = +held
                futures.append((writer.submit([row], [-1]), Counter({row: -1})))
                continue
            rows: list[Row] = []
            for _ in range(rng.randint(1, 3)):
                row = (self.next_serial, rng.choice([f"b{self.next_serial}", None]))
                self.next_serial += 1
                rows += [row, row] if rng.random() < 0.2 else [row]
            futures.append((writer.submit(rows), Counter(rows)))
        ticked = rng.random() < 0.3
        with self._once(self._commit_fault(0.2)):
            if ticked:  # a tick racing the writers' commits
                report = self.ticker.tick()
                assert not report.errors, report.errors
                self._ticked(report.statuses(), racing=True)
            receipts = [(future.result(timeout=300), delta) for future, delta in futures]
        self._record_blind(receipts)
        times = sorted({r.time for r, _ in receipts if r.time is not None})
        return f"{len(futures)} write(s){' racing a tick' if ticked else ''}, at {times}"

    def _record_blind(self, receipts: list[tuple[WriteReceipt, Rows]]) -> None:
        by_time: dict[int, Rows] = {}
        for receipt, delta in receipts:
            assert receipt.time is not None and receipt.time >= self.clock, receipt
            by_time.setdefault(receipt.time, Counter()).update(delta)
        for time in sorted(by_time):
            self.log_rows.update(by_time[time])
            assert all(n >= 0 for n in self.log_rows.values()), "model: retracted a row twice"
            self.log_rows = +self.log_rows
            self.log.history.record(time, self.log_rows)
            self.log.upper = max(self.log.upper, time + 1)

    def _state_head(self) -> Rows:
        """What the differential collection's head holds: its contents plus any drift."""
        return self.state.history.latest + self.state_drift

    def _differential_op(self, op: str, writer: DifferentialCollection, base: Rows) -> Any:
        """Run ``op``; returns (the desired rows the model expects, the writer's result)."""
        rng = self.rng
        if op.endswith("replace"):
            wanted = [(k, rng.choice(["p", "q", None])) for k in rng.sample(range(10), 4)]
            return Counter(wanted), writer.replace(wanted)
        if op.endswith("update"):
            retract = [rng.choice(sorted(base, key=repr))] if base and rng.random() < 0.8 else []
            insert = [(rng.randint(0, 9), rng.choice(["p", "r"])) for _ in range(rng.randint(0, 2))]
            return base - Counter(retract) + Counter(insert), writer.update(
                retract=retract, insert=insert
            )
        return base, writer.sync()

    def step_diff(self) -> str:
        op = self.rng.choices(
            ["replace", "update", "sync", "fresh-update", "fresh-replace"], [30, 30, 10, 20, 10]
        )[0]
        fresh = op.startswith("fresh-")
        writer = self.differential
        if fresh:  # a new task: no remembered state, updates apply to the head
            table = self.catalog.load_table(self.state.name)
            writer = DifferentialCollection(table, read_only=False, clock=self._now)
        remembered = None if fresh else self.remembered
        base = self._state_head() if remembered is None else remembered
        with self._once(self._commit_fault(0.15)) as fault:
            new, result = self._differential_op(op, writer, base)
        changed = new != self._state_head()
        assert result.status == ("landed" if changed else "in-sync"), (op, fault, result)
        if changed:
            assert result.time is not None and result.time >= self.clock, result
            self.state.history.record(result.time, new)
            self.state.upper = max(self.state.upper, result.time + 1)
            self.state_drift = Counter()
            self.state.tampered = False
        if not fresh and (op != "sync" or self.remembered is not None):
            self.remembered = new
        return f"{op}{f' ({fault})' if fault else ''}: {result.status} at {result.time}"

    def step_drift(self) -> str:
        """A foreign commit on the differential collection: no time vouches for it."""
        table = self.state.table
        table.refresh()
        rows = [(self.rng.randint(0, 9), "foreign") for _ in range(self.rng.randint(1, 2))]
        table.append(arrow(table.schema().as_arrow(), rows))
        self.state_drift.update(rows)
        self.state.tampered = True
        self.faults["drift"] += 1
        return f"{self.state.name}: a foreign append of {rows}"

    def _commit_fault(self, probability: float) -> str | None:
        """Maybe an unknown commit outcome (raised before or after the catalog commit)."""
        if self.rng.random() >= probability:
            return None
        return self.rng.choice(["commit.before-catalog-commit", "commit.after-catalog-commit"])

    @contextlib.contextmanager
    def _once(self, fault: str | None) -> Iterator[str | None]:
        """Let ``fault`` fire at the next commit of any thread of this process, once."""
        marker = self.scratch / f"fired-{uuid.uuid4().hex}"
        with failpoint(None if fault is None else f"{fault}=raise@{marker}"):
            yield fault
        if fault is not None and marker.exists():
            self.faults[f"unknown-outcome:{fault}"] += 1

    def _ticked(self, statuses: dict[str, str], *, racing: bool = False) -> None:
        fresh = self.clock - self.ticker.fresh_ms
        for tracked in (self.log, self.state):
            status = statuses.get(tracked.name)
            if status == "current":  # left alone: moved recently (racing: by a writer)
                assert racing or tracked.upper > fresh, (tracked.name, tracked.upper, self.clock)
            elif status != "unknown":  # a tick that may not have landed
                tracked.upper = max(tracked.upper, self.clock)

    def step_tick(self) -> str:
        report = self.ticker.tick()
        assert not report.errors, report.errors
        self._ticked(report.statuses())
        return str(report.statuses())

    # -- maintenance ----------------------------------------------------------------------
    def _hold(self, tracked: Tracked) -> int | None:
        """The earliest time a registered reader of ``tracked`` may still read (model)."""
        readers = {
            self.items.name: [v.tracked for v in self.views],
            self.groups.name: [v.tracked for v in self.views],
            self.events.name: [self.task],
        }.get(tracked.name)
        if readers is None:
            return None
        return min(r.upper - 1 if r.upper > 0 else 0 for r in readers)

    def step_maintain(self) -> str:
        tables = self.tables()
        chosen = self.rng.sample(tables, self.rng.randint(1, len(tables)))
        settings = MaintenanceSettings(retention_ms=RETENTION_MS, min_files=3)
        report = maintain(
            self.catalog, [t.name for t in chosen], settings, now=self.clock, read_only=False
        )
        assert not report.errors, report.errors
        for tracked in chosen:
            hold = self._hold(tracked)
            since = max(0, self.clock - RETENTION_MS)
            allowed = since if hold is None else min(since, hold)
            tracked.allowed_floor = max(tracked.allowed_floor, allowed)
        views = {v.tracked.name: v for v in self.views}
        for compaction in report.compaction:
            if compaction.status == "compacted":
                self.faults["compaction"] += 1
                if compaction.table in views:
                    views[compaction.table].generation += 1
        expired = [e.table.split(".")[-1] for e in report.expiry if e.status == "expired"]
        self.faults["expiry"] += len(expired)
        compacted = [c.table.split(".")[-1] for c in report.compaction if c.status == "compacted"]
        return f"expired {expired}, compacted {compacted}"

    def step_sweep(self) -> str:
        tables = self.tables()
        weights = [3 if t.single_snapshot_batches or t is self.task else 1 for t in tables]
        tracked = self.rng.choices(tables, weights=weights)[0]
        report = sweep_staged(self.catalog.load_table(tracked.name), grace_ms=0)
        assert not report.skipped, report
        self.faults["sweep"] += 1
        return (
            f"{tracked.name}: landed {len(report.landed)}, discarded {len(report.discarded)}, "
            f"kept {len(report.kept)}, {report.files_deleted + report.orphans_deleted} file(s)"
        )

    # -- the end --------------------------------------------------------------------------
    def finish(self) -> None:
        """Final ticks of everything, maintenance and a sweep everywhere; nothing left over."""
        self.steps.append("final ticks, maintenance, sweeps")
        self.clock += 1_000
        for tracked in (self.items, self.groups, self.events):
            self._seal(tracked, self.clock)
        for view in self.views:
            self._final_tick(view)
        assert self.step_continual() is not None
        self.step_drift()  # one more foreign commit, which the final write must correct
        self._final_differential()
        self.step_tick()
        self.close()
        self.check_all()
        self.clock += 1_000
        tables = self.tables()
        settings = MaintenanceSettings(retention_ms=RETENTION_MS, min_files=3)
        report = maintain(
            self.catalog, [t.name for t in tables], settings, now=self.clock, read_only=False
        )
        assert not report.errors, report.errors
        for tracked in tables:
            hold = self._hold(tracked)
            allowed = max(0, self.clock - RETENTION_MS)
            tracked.allowed_floor = allowed if hold is None else min(allowed, hold)
            sweep_staged(self.catalog.load_table(tracked.name), grace_ms=0)
        self.check_all()
        for tracked in tables:
            self.checker.rescan_all(tracked)
            assert not tracked.tampered
            self.checker.compare(
                f"{tracked.name} head", tracked.history.latest, rows_of(tracked.table)
            )
        for view in self.views:  # and read by Spark (position deletes applied by Iceberg)
            rows = self.spark.table(f"{self.config.name}.{view.tracked.name}").collect()
            where = f"{view.tracked.name} read by Spark"
            self.checker.compare(
                where, view.tracked.history.latest, Counter(tuple(r) for r in rows)
            )

    def _final_differential(self) -> None:
        """The drift corrected: the writer states the model's contents once more."""
        wanted = self.state.history.latest
        result = self.differential.replace(list(wanted.elements()))
        assert result.status == ("landed" if self.state_drift else "in-sync"), result
        if self.state_drift:
            assert result.time is not None and result.time >= self.clock, result
            self.state.history.record(result.time, wanted)
            self.state.upper = max(self.state.upper, result.time + 1)
            self.state_drift = Counter()
            self.state.tampered = False
        self.remembered = wanted

    def _final_tick(self, view: View) -> None:
        pending = self._mint(view)
        assert pending is not None and self._current(view, pending)
        report = self._write(view, pending, None, False)
        self._check_staged(report)
        out = self._append(report, pending.desc)
        assert out["appended"] and not out["already_appended"], out
        self._land(view, pending)

    def leftovers(self) -> dict[str, int]:
        """Orphan files, manifests and half-written manifests per kind, over every table."""
        found: Counter[str] = Counter()
        details: list[str] = []
        for tracked in self.tables():
            unreferenced, manifests, half, seen = orphans(tracked.table)
            found["batch files seen"] += seen
            found["orphan files"] += len(unreferenced)
            found["manifests"] += len(manifests)
            found["half-written manifests"] += len(half)
            details += [*unreferenced[:2], *manifests[:2], *half[:2]]
        assert not details, f"left over after the final sweep: {dict(found)}: {details}"
        return dict(found)

    def summary(self, steps: int, seconds: float, leftovers: dict[str, int]) -> str:
        ranked = sorted(self.seconds.items(), key=lambda kv: -kv[1])[:6]
        slowest = ", ".join(f"{k} {v:.0f}s" for k, v in ranked)
        return (
            f"model-checked run: seed={self.seed} steps={steps} in {seconds:.0f}s "
            f"faults={ {k: n for k, n in sorted(self.faults.items()) if n} } "
            f"rows_compared={self.checker.rows_compared} scans={self.checker.scans} "
            f"rows_lost={self.checker.lost} rows_duplicated={self.checker.duplicated} "
            f"orphan_files={leftovers['orphan files']} manifests_left={leftovers['manifests']} "
            f"half_written_left={leftovers['half-written manifests']} "
            f"batch_files_seen={leftovers['batch files seen']} (time: {slowest})"
        )


# -- sub-scenarios the run found, replayed deterministically --------------------------------
T1, T2 = 1_700_000_000_000, 1_700_000_060_000
EXPIRY_CONN = "ct_model_expiry"


def _landed_then_expired(
    config: CatalogConfig, monkeypatch: pytest.MonkeyPatch, marker: Path | None
) -> tuple[Any, BatchDescription, WriteReport]:
    """A view batch staged by one attempt and landed at T1 (with an unknown outcome when
    ``marker`` is given); then a later batch at T2, and expiry drops T1's snapshot while
    T1's file stays live in T2's."""
    from tests.conftest import connection_json

    monkeypatch.setenv(f"AIRFLOW_CONN_{EXPIRY_CONN.upper()}", connection_json(config))
    catalog = config.load()
    table = create_managed_table(catalog, "expiry.view", KV)
    desc = BatchDescription("expiry.view", Frontier.minimum(), Frontier.sealing(T1), T1, None)
    batch, manifest = begin_batch(table, desc)
    path = f"{batch.data_dir}/part-0.parquet"
    local_path(path).parent.mkdir(parents=True)
    pq.write_table(arrow(KV, [(1, "a")]), local_path(path))
    size = local_path(path).stat().st_size
    finish_batch(batch, manifest, [StagedTime(T1, (StagedFile(path, 1, size),))])
    report = WriteReport(WriteStatus.STAGED, desc.id, desc.target, manifest=manifest)
    if marker is None:
        assert land_staged(table, manifest, description=desc).landed_by_this_attempt
    else:
        monkeypatch.setenv(FAILPOINTS, f"commit.after-catalog-commit=raise@{marker}")
        with pytest.raises(CommitStateUnknownError):
            land_staged(table, manifest, description=desc)
        monkeypatch.delenv(FAILPOINTS)
    later = compare_and_append(
        table,
        expected_upper=Frontier.sealing(T1),
        new_upper=Frontier.sealing(T2),
        batch_id="later",
        add_files=stage_arrow(table, "later", arrow(KV, [(2, "b")])),
        time=T2,
    )
    assert later.landed
    expiry = expire_snapshots(catalog, "expiry.view", retention_ms=0, now=now_ms() + 10**9)
    assert expiry.status == "expired"
    table.refresh()
    assert Timeline.of(table).find_batch(desc.id) is None  # T1's snapshot is gone ...
    assert rows_of(table) == Counter({(1, "a"): 1, (2, "b"): 1})  # ... its file is not
    return table, desc, report


def test_an_append_retried_after_expiry_reports_the_batch_that_landed(
    sqlite_catalog_config: CatalogConfig, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Seed 12: the manifest was dropped when the batch landed, expiry then dropped its
    snapshot, and the retried append said "staged batch vanished", appended false."""
    from airflow_provider_ct.operators.append import AppendOperator

    table, _desc, report = _landed_then_expired(sqlite_catalog_config, monkeypatch, None)
    op = AppendOperator(task_id="retry", report=report.to_json(), iceberg_conn_id=EXPIRY_CONN)
    out = op.execute({})
    assert out["appended"] and out["already_appended"], out
    assert rows_of(table) == Counter({(1, "a"): 1, (2, "b"): 1})


def test_a_landed_attempt_retried_after_its_snapshot_expired_keeps_its_files(
    sqlite_catalog_config: CatalogConfig, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """The commit landed but reported an unknown outcome; the retry comes after expiry."""
    table, desc, report = _landed_then_expired(
        sqlite_catalog_config, monkeypatch, tmp_path / "fired"
    )
    assert report.manifest is not None and local_path(report.manifest).exists()
    outcome = land_staged(table, report.manifest, description=desc)
    table.refresh()
    assert rows_of(table) == Counter({(1, "a"): 1, (2, "b"): 1})  # still readable
    assert outcome.result.landed, outcome.result


def test_randomized_model_checked_run(
    storage: Storage, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    seed = int(os.environ.get("CT_MODEL_SEED") or random.SystemRandom().randrange(1, 2**31))
    steps = storage.steps
    print(f"model-checked run on {storage.kind}: seed {seed}, {steps} steps")
    started = _time.monotonic()
    world = World(storage, seed, tmp_path)
    assert storage.kind != "s3" or world.items.table.location().startswith("s3://")
    try:
        for number in range(steps):
            world.step(number)
        world.finish()
        leftovers = world.leftovers()
    except Exception as exc:
        raise AssertionError(world.failure(exc)) from exc
    finally:
        world.close()
    line = f"{world.summary(steps, _time.monotonic() - started, leftovers)} [{storage.kind}]"
    with capsys.disabled():
        print(f"\n{line}")
