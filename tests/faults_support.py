"""Support for fault-injection tests: the invariant check, a model writer, real processes.

Every fault test ends with :meth:`Invariants.check`, which asserts what no
fault may break, reading the table on its own (plain PyIceberg and the
filesystem, not the product's timeline or sweep bookkeeping):

* no row lost or duplicated: the head, and the contents at each time the
  test expects something for, equal the oracle the test computed;
* uppers only forward: ``ct.upper`` along the head's history (the snapshot
  log) never goes back, and is at or past the upper before the fault;
* sealed times unchanged: the contents at every ``ct.time`` sealed before the
  fault, read by time travel, equal what they were before it;
* time travel intact: every snapshot is readable and every file it
  references exists;
* no orphan files after maintenance: after ``sweep_staged(grace_ms=0)`` no
  file under ``data/ct_batch=*`` is unreferenced by every snapshot, and the
  staging folder holds no manifest (nor half-written one).

Faults are counted by kind (:class:`FaultLog`) so each test can print one
line: faults injected, rows lost/duplicated, orphan files left.
"""

from __future__ import annotations

import itertools
import json
import os
import posixpath
import signal
import subprocess
import sys
import time
import uuid
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from airflow_provider_ct.core.catalog import CatalogConfig
from airflow_provider_ct.core.frontier import Frontier
from airflow_provider_ct.core.keys import SummaryKeys
from airflow_provider_ct.core.manifest import StagedFile, StagedTime
from airflow_provider_ct.core.staging import begin_batch, finish_batch, staging_root
from airflow_provider_ct.core.sweep import SweepReport, sweep_staged
from tests.helpers import local_path, rows_of

REPO = Path(__file__).resolve().parent.parent
Rows = Counter[tuple[Any, ...]]


# -- reading the table on our own ------------------------------------------------
def _summary(snapshot: Any) -> dict[str, str]:
    return dict(snapshot.summary.additional_properties) if snapshot.summary else {}


def _ancestry(metadata: Any) -> list[Any]:
    """``main``'s snapshots, oldest first, by following parent ids from the head."""
    by_id = {s.snapshot_id: s for s in metadata.snapshots}
    out = []
    current = metadata.current_snapshot()
    while current is not None:
        out.append(current)
        current = by_id.get(current.parent_snapshot_id)
    return list(reversed(out))


def _upper(snapshot: Any) -> Frontier:
    return Frontier.from_summary(_summary(snapshot)[SummaryKeys.UPPER])


def sealed_snapshots(table: Any) -> dict[int, int]:
    """``ct.time`` -> the snapshot on ``main`` that holds the contents at that time."""
    return {
        int(s[SummaryKeys.TIME]): snap.snapshot_id
        for snap in _ancestry(table.metadata)
        if SummaryKeys.TIME in (s := _summary(snap))
    }


def batch_snapshots(table: Any, batch_id: str) -> list[int]:
    """The snapshots on ``main`` that carry ``batch_id`` (one per time of a landed batch)."""
    return [
        snap.snapshot_id
        for snap in _ancestry(table.metadata)
        if _summary(snap).get(SummaryKeys.BATCH_ID) == batch_id
    ]


def _referenced(table: Any, snapshot: Any) -> set[str]:
    """Data and delete files one snapshot references (read from its manifests)."""
    files = set()
    for manifest in snapshot.manifests(io=table.io):
        for entry in manifest.fetch_manifest_entry(io=table.io, discard_deleted=True):
            files.add(entry.data_file.file_path)
    return files


@dataclass(frozen=True)
class BeforeFault:
    """What the table held before a fault: it must still hold it after."""

    upper: Frontier | None
    sealed: dict[int, Rows]


@dataclass
class CheckResult:
    rows_lost: int = 0
    rows_duplicated: int = 0
    orphans_left: int = 0
    snapshots_read: int = 0
    sweep: SweepReport | None = None


class Invariants:
    """The invariant check of every fault test, for one table of one catalog."""

    def __init__(self, config: CatalogConfig, identifier: str) -> None:
        self.config = config
        self.identifier = identifier

    def table(self) -> Any:
        """The table as the catalog has it now (a fresh catalog: no cached state)."""
        return self.config.load().load_table(self.identifier)

    def before_fault(self) -> BeforeFault:
        """Record the upper and the contents at every sealed time (time travel)."""
        table = self.table()
        head = table.metadata.current_snapshot()
        upper = None if head is None else _upper(head)
        sealed = {t: rows_of(table, sid) for t, sid in sealed_snapshots(table).items()}
        return BeforeFault(upper, sealed)

    def check(
        self,
        before: BeforeFault,
        expected: Rows,
        expected_at: Mapping[int, Rows] | None = None,
        *,
        log: FaultLog | None = None,
    ) -> CheckResult:
        """Assert every invariant (see the module docstring); sweeps the staging first.

        The counts go into ``log`` before anything is asserted, so a failing
        test's summary line still says how many rows and files were wrong.
        """
        result = CheckResult()
        if log is not None:
            log.result = result
        table = self.table()
        result.sweep = sweep_staged(table, grace_ms=0)
        table = self.table()
        actual = rows_of(table)
        result.rows_lost = sum((expected - actual).values())
        result.rows_duplicated = sum((actual - expected).values())
        orphans, manifests = self._leftovers(table)
        result.orphans_left = len(orphans) + len(manifests)
        assert actual == expected, (
            f"{result.rows_lost} row(s) lost, {result.rows_duplicated} duplicated: "
            f"missing {expected - actual}, extra {actual - expected}"
        )
        self._check_uppers(table, before)
        sealed = sealed_snapshots(table)
        for t, rows in {**before.sealed, **(expected_at or {})}.items():
            assert t in sealed, f"time {t} is no longer sealed on main ({sorted(sealed)})"
            got = rows_of(table, sealed[t])
            assert got == rows, f"contents at time {t} changed: {got} != {rows}"
        result.snapshots_read = self._check_time_travel(table)
        assert not orphans, f"{len(orphans)} orphan file(s) after the sweep: {orphans}"
        assert not manifests, f"manifest(s) left after the sweep: {manifests}"
        return result

    @staticmethod
    def _check_uppers(table: Any, before: BeforeFault) -> None:
        by_id = {s.snapshot_id: s for s in table.metadata.snapshots}
        history = [
            by_id[e.snapshot_id] for e in table.metadata.snapshot_log if e.snapshot_id in by_id
        ]
        uppers = [_upper(s) for s in history]
        for earlier, later in itertools.pairwise(uppers):
            assert earlier <= later, f"the head's upper went back: {uppers}"
        ancestry = [_upper(s) for s in _ancestry(table.metadata)]
        for earlier, later in itertools.pairwise(ancestry):
            assert earlier < later, f"main's uppers do not strictly increase: {ancestry}"
        if before.upper is not None:
            assert uppers and uppers[-1] >= before.upper, (
                f"upper {uppers[-1:]} is behind the upper before the fault {before.upper}"
            )

    @staticmethod
    def _check_time_travel(table: Any) -> int:
        for snapshot in table.metadata.snapshots:
            missing = [f for f in _referenced(table, snapshot) if not local_path(f).exists()]
            assert not missing, f"snapshot {snapshot.snapshot_id} references missing {missing}"
            rows_of(table, snapshot.snapshot_id)  # readable
        return len(table.metadata.snapshots)

    @staticmethod
    def _leftovers(table: Any) -> tuple[list[str], list[str]]:
        """Staged files (``data/ct_batch=*``, and the older ``ct-batch=*``) no snapshot
        references; files in the staging folder."""
        referenced: set[str] = set()
        for snapshot in table.metadata.snapshots:
            referenced |= {local_path(f).as_posix() for f in _referenced(table, snapshot)}
        data = local_path(posixpath.join(table.location(), "data"))
        staged = {
            p.as_posix()
            for pattern in ("ct_batch=*", "ct-batch=*")
            for folder in data.glob(pattern)
            for p in folder.rglob("*")
            if p.is_file()
        }
        root = local_path(staging_root(table.location(), table.metadata.properties))
        manifests = sorted(p.as_posix() for p in root.rglob("*") if p.is_file())
        return sorted(staged - referenced), manifests


@dataclass
class FaultLog:
    """The faults one test injected, by kind, and what its invariant check found."""

    test: str
    kinds: Counter[str] = field(default_factory=Counter)
    result: CheckResult | None = None

    def inject(self, kind: str, count: int = 1) -> None:
        """Count a fault once it really happened (the process died, the server stopped)."""
        self.kinds[kind] += count

    def line(self) -> str:
        """One line: faults injected by kind, rows lost/duplicated, orphan files left."""
        kinds = ", ".join(f"{k}={v}" for k, v in sorted(self.kinds.items())) or "none"
        if self.result is None:
            return f"[faults] {self.test}: injected {kinds}; invariant check not reached"
        r = self.result
        return (
            f"[faults] {self.test}: injected {kinds}; rows lost={r.rows_lost} "
            f"duplicated={r.rows_duplicated}; orphan files left={r.orphans_left}; "
            f"snapshots read={r.snapshots_read}"
        )


# -- a model table the test fills with rows of its own choosing --------------------
LEDGER = pa.schema([("k", pa.int64()), ("v", pa.string())])


class Ledger:
    """A table the test fills with rows of its own choosing, and its Python model.

    Each tick adds rows and may take back an earlier tick's rows (its file
    removed). The model is the multiset the test wrote, per time: the oracle.
    """

    def __init__(self, config: CatalogConfig, identifier: str) -> None:
        from airflow_provider_ct.core.tables import create_managed_table

        self.config = config
        self.identifier = identifier
        create_managed_table(config.load(), identifier, LEDGER)
        self.rows: Rows = Counter()
        self.at: dict[int, Rows] = {}
        self._chunks: dict[str, Rows] = {}

    def table(self) -> Any:
        return self.config.load().load_table(self.identifier)

    def describe(self, time_ms: int) -> Any:
        """Mint the tick at ``time_ms`` from the table's current upper and head."""
        from airflow_provider_ct.core.mint import mint
        from airflow_provider_ct.core.timeline import Timeline

        decision = mint(
            target=self.identifier,
            target_timeline=Timeline.of(self.table()),
            time=time_ms,
            inputs={},
        )
        assert decision.description is not None, decision.reason
        return decision.description

    def stage(
        self, description: Any, rows: list[tuple[int | None, str | None]], remove: str | None = None
    ) -> tuple[str, str]:
        """Stage a tick (see :func:`stage_ledger_tick`); ``remove``: an earlier tick's file."""
        manifest, path = stage_ledger_tick(
            self.table(), description, rows, () if remove is None else (remove,)
        )
        self._chunks[path] = Counter(rows)
        return manifest, path

    def landed(self, description: Any, path: str, remove: str | None = None) -> Rows:
        """Tell the model a tick landed; returns the contents expected at its time."""
        self.rows = self.rows + self._chunks[path]
        if remove is not None:
            self.rows = self.rows - self._chunks[remove]
        self.at[description.time] = Counter(self.rows)
        return self.at[description.time]


def ledger_rows(seed: int, n: int) -> list[tuple[int | None, str | None]]:
    """Rows with duplicates and NULLs (the multiset logic must keep both)."""
    import random

    rng = random.Random(seed)
    rows: list[tuple[int | None, str | None]] = []
    for _ in range(n):
        row = (rng.choice([rng.randint(1, 9), None]), rng.choice(["a", "b", None]))
        rows.extend([row] * rng.choice([1, 1, 2]))
    return rows


def stage_ledger_tick(
    table: Any,
    description: Any,
    rows: list[tuple[int | None, str | None]],
    remove: tuple[str, ...] = (),
    before_finish: Callable[[], None] | None = None,
) -> tuple[str, str]:
    """Stage one tick the way every writer does: write-ahead manifest, files, staged manifest.

    A PyArrow writer (the small-batch path) instead of Spark: the faults under
    test are in staging and the append, not in the query. ``before_finish``
    runs between the data file and the final manifest (a test arms a
    failpoint there). Returns the manifest and the data file.
    """
    batch, manifest = begin_batch(table, description)
    path = posixpath.join(batch.data_dir, f"part-{uuid.uuid4().hex}.parquet")
    local = local_path(path)
    local.parent.mkdir(parents=True, exist_ok=True)
    data = pa.Table.from_pylist([dict(zip(LEDGER.names, r, strict=True)) for r in rows], LEDGER)
    pq.write_table(data, local)
    staged = StagedFile(path, data.num_rows, local.stat().st_size)
    if before_finish is not None:
        before_finish()
    finish_batch(batch, manifest, [StagedTime(description.time, (staged,), remove)])
    return manifest, path


def write_report(description: Any, manifest: str) -> dict[str, Any]:
    """The XCom a write task returns for a staged batch (what AppendOperator reads)."""
    return {
        "status": "staged",
        "description_id": description.id,
        "target": description.target,
        "manifest": manifest,
    }


# -- real processes ---------------------------------------------------------------
def child_env(**extra: str) -> dict[str, str]:
    """This process's environment (Airflow home, connections) plus ``extra``."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH", "")]))
    env.update(extra)
    return env


def run_child(code: str, *args: str, env: Mapping[str, str], timeout: float = 300) -> Any:
    """Run ``python -c code args`` to the end (a crash included); the completed process."""
    return subprocess.run(
        [sys.executable, "-c", code, *args],
        cwd=REPO,
        env=dict(env),
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def start_child(code: str, *args: str, env: Mapping[str, str], log: Path) -> subprocess.Popen[Any]:
    """Start ``python -c code args`` in a session of its own (so its tree can be killed)."""
    with log.open("w") as out:
        return subprocess.Popen(
            [sys.executable, "-c", code, *args],
            cwd=REPO,
            env=dict(env),
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )


def wait_for_file(path: Path, proc: subprocess.Popen[Any], timeout: float, log: Path) -> None:
    """Wait until ``path`` exists; fail at once if ``proc`` ends first."""
    deadline = time.monotonic() + timeout
    while not path.exists():
        if proc.poll() is not None:
            raise AssertionError(
                f"the child ended ({proc.returncode}) before {path.name}: {log.read_text()[-3000:]}"
            )
        assert time.monotonic() < deadline, f"{path.name} never appeared: {log.read_text()[-3000:]}"
        time.sleep(0.2)


def process_tree(pid: int) -> dict[int, str]:
    """``pid`` and every live process below it, with their command lines."""
    import psutil

    root = psutil.Process(pid)
    tree = {}
    for proc in [root, *root.children(recursive=True)]:
        try:
            tree[proc.pid] = " ".join(proc.cmdline())
        except psutil.NoSuchProcess:
            continue
    return tree


def kill_9_tree(proc: subprocess.Popen[Any]) -> dict[int, str]:
    """``kill -9`` a child's whole tree (its process group and any stray descendant).

    Returns the processes killed (pid: command line); asserts none survived.
    """
    import psutil

    tree = process_tree(proc.pid)
    os.killpg(proc.pid, signal.SIGKILL)  # the child leads its own session and group
    for pid in tree:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            continue
    proc.wait(timeout=30)
    deadline = time.monotonic() + 30
    while True:
        alive = []
        for pid in tree:
            try:
                if psutil.Process(pid).status() != psutil.STATUS_ZOMBIE:
                    alive.append(pid)
            except psutil.NoSuchProcess:
                continue
        if not alive or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    assert not alive, f"processes survived kill -9: {[tree[p] for p in alive]}"
    return tree


def json_arg(path: Path, value: Any) -> str:
    path.write_text(json.dumps(value))
    return str(path)
