r"""Benchmark: what object storage costs a tick, S3 + a REST catalog against a local folder.

Run on demand, never in ``make test``::

    python bench/objectstore_bench.py                      # 3 ticks of each kind, 4000 rows
    python bench/objectstore_bench.py --ticks 5 --rows 20000 --changed 400

In ONE run, the same two DAGs (bench/dags/objectstore_bench_dag.py, both on
the warm engine, so the comparison is about storage and not JVM starts) tick
on two storages, one after the other:

* ``local``: a SQLite catalog whose warehouse is a local folder;
* ``s3``: SeaweedFS's ``weed mini`` on 127.0.0.1 (started by
  ``tests/objectstore.py``), its Iceberg REST catalog with the tables in its
  table bucket and the staged batches' manifests under ``ct.staging-root``
  in its plain bucket (what docs/deployment.md describes).

Per storage: an ``events`` input of ``--rows`` rows and the view
``SELECT kind, COUNT(*), SUM(amount) ... GROUP BY kind``; a continual task
(Materialize's stream-table join of ``big`` with ``small``). Warm-up ticks
(the view's creation, the warm driver's start, the task's as-of and first
batch) are not measured. Then ``--ticks`` times: a **busy** view tick (one
merge-on-read snapshot of the input deleting ``--changed``/2 rows by
position and appending as many), a **quiet** view tick (nothing changed:
the mint's quiet rule, no Spark job) and a **continual** tick (``--changed``
keys appended to ``big``). Every tick is checked against a Python model of
the rows the bench wrote. ``CT_FULL_BELOW_ROWS=0`` and
``CT_FULL_ABOVE_CHANGE=0``: the busy tick is incremental, as on a table too
large to recompute (at a few thousand rows ``refresh="auto"`` would
recompute it in full).

A tick's seconds are the wall time of its ``dag.test()`` run (sensor, mint,
write on the warm driver, append), after the inputs are sealed.

**Requests are counted on the server**, from the Prometheus counters of
``weed mini -metricsPort`` (``SeaweedFS_s3_request_total`` by request type,
``SeaweedFS_s3_bucket_traffic_{received,sent}_bytes_total``), read before
and after each tick. Why the server and not the clients: a tick's requests
come from two processes, this one (PyIceberg and pyarrow: the mint, the
quiet rule, the append and its manifest) and the warm driver's JVM (Spark
through Hadoop S3A); only the server sees both, without hooks in either.
What the counters say: ``GET`` includes ``HEAD`` (SeaweedFS counts them
alike); ``POST`` is the start and end of multipart uploads (pyarrow and
S3A write through them) and multi-object deletes; the REST catalog's own
calls (load table, commit) are not S3 requests and are not counted, and
the metadata JSON the catalog writes on a commit is written inside the
server. ``received`` is what clients uploaded, ``sent`` what they downloaded.

Airflow's task logs go to stdout as well; ``grep -E '^(\||##|\{)'`` keeps
the bench's own lines. The last line is one JSON object.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import re
import shutil
import statistics
import sys
import tempfile
import time
import urllib.request
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench" / "dags"))
_HOME = tempfile.mkdtemp(prefix="ct-osbench-airflow-")
os.environ.setdefault("AIRFLOW_HOME", _HOME)
os.environ.setdefault("AIRFLOW__DATABASE__SQL_ALCHEMY_CONN", f"sqlite:///{_HOME}/airflow.db")
os.environ.setdefault("AIRFLOW__CORE__LOAD_EXAMPLES", "False")
os.environ.setdefault("AIRFLOW__CORE__DAGS_FOLDER", str(ROOT / "bench" / "dags"))
os.environ.setdefault("AIRFLOW__CORE__UNIT_TEST_MODE", "True")
os.environ.setdefault("CT_FULL_BELOW_ROWS", "0")
os.environ.setdefault("CT_FULL_ABOVE_CHANGE", "0")
os.environ.pop("CT_READ_ONLY", None)

import pyarrow as pa  # noqa: E402

from airflow_provider_ct.core.catalog import CatalogConfig  # noqa: E402
from airflow_provider_ct.core.frontier import now_ms  # noqa: E402

EVENTS = pa.schema([("id", pa.int64()), ("kind", pa.string()), ("amount", pa.int64())])
BIG = pa.schema([("key", pa.int32())])
SMALL = pa.schema([("key", pa.int32()), ("val", pa.string())])
KINDS = ("busy", "quiet", "continual")
#: The request types SeaweedFS counts (``GET`` includes ``HEAD``).
REQUESTS = ("LIST", "GET", "PUT", "POST", "DELETE")
#: Keys of ``small`` (the join matches a ``big`` key below this).
SMALL_KEYS = 100
DEFAULT_CONN = "AIRFLOW_CONN_ICEBERG_CATALOG_DEFAULT"


# -- requests, read from the server -----------------------------------------------------
_SAMPLE = re.compile(r"^(SeaweedFS_s3_[a-z_]+)\{([^}]*)\} (\S+)$")
_LABEL = re.compile(r'(\w+)="([^"]*)"')


def read_counters(url: str) -> Counter[str]:
    """The server's S3 request counts by type and its bytes in and out (Prometheus text)."""
    with urllib.request.urlopen(url, timeout=10) as response:
        text = response.read().decode()
    counts: Counter[str] = Counter()
    for line in text.splitlines():
        match = _SAMPLE.match(line)
        if match is None:
            continue
        name, labels, value = match[1], dict(_LABEL.findall(match[2])), float(match[3])
        if name == "SeaweedFS_s3_request_total":
            counts[labels.get("type", "?")] += int(value)
        elif name == "SeaweedFS_s3_bucket_traffic_received_bytes_total":
            counts["bytes up"] += int(value)
        elif name == "SeaweedFS_s3_bucket_traffic_sent_bytes_total":
            counts["bytes down"] += int(value)
    return counts


@dataclass
class Sample:
    """One measured tick: its seconds and the S3 requests and bytes it made (none locally)."""

    seconds: float
    requests: Counter[str] = field(default_factory=Counter)


# -- the inputs and their model -----------------------------------------------------------
class Inputs:
    """The bench's input tables on one catalog, and the rows it wrote (the oracle's source)."""

    def __init__(self, config: CatalogConfig, ns: str, rows: int) -> None:
        self.catalog = config.load()
        self.ns = ns
        self.catalog.create_namespace(ns)
        self.events = self.catalog.create_table(
            f"{ns}.events",
            EVENTS,
            properties={"format-version": "2", "write.delete.mode": "merge-on-read"},
        )
        self.rows: list[dict[str, Any]] = [
            {"id": i, "kind": f"k{i % 10}", "amount": (i * 37) % 101} for i in range(rows)
        ]
        self.events.append(pa.Table.from_pylist(self.rows, schema=EVENTS))
        self.events.refresh()
        (self.first_file,) = [t.file for t in self.events.scan().plan_files()]
        self.deleted_positions = 0
        self.next_id = rows
        self.big = self.catalog.create_table(f"{ns}.big", BIG)
        self.small = self.catalog.create_table(f"{ns}.small", SMALL)
        refs = [{"key": k, "val": f"v{k}"} for k in range(SMALL_KEYS)]
        self.small.append(pa.Table.from_pylist(refs, schema=SMALL))
        self.next_key = 0

    def location(self) -> str:
        return str(self.events.location())

    def change_events(self, count: int) -> int:
        """Delete ``count`` rows of the first file by position and append ``count``: one snapshot.

        Returns the snapshot's commit time.
        """
        from tests.test_changes import commit_deletes, position_delete

        start = self.deleted_positions
        positions = [(self.first_file.file_path, p) for p in range(start, start + count)]
        deleted = position_delete(self.events, positions, self.first_file)
        gone = {p for _, p in positions}
        self.rows = [r for r in self.rows if r["id"] not in gone]  # ids are the positions
        self.deleted_positions += count
        added = [
            {"id": i, "kind": f"k{i % 7}", "amount": i % 53}
            for i in range(self.next_id, self.next_id + count)
        ]
        self.next_id += count
        commit_deletes(self.events, [deleted], pa.Table.from_pylist(added, schema=EVENTS))
        self.rows += added
        return _committed(self.events)

    def totals(self) -> Counter[tuple[Any, ...]]:
        """The view's rows, from the model."""
        groups: dict[str, list[int]] = {}
        for row in self.rows:
            groups.setdefault(row["kind"], []).append(row["amount"])
        return Counter((kind, len(a), sum(a)) for kind, a in groups.items())

    def insert_big(self, count: int) -> tuple[int, int]:
        """Append ``count`` keys to ``big``: (commit time, how many of them join ``small``)."""
        keys = [(self.next_key + i) % (2 * SMALL_KEYS) for i in range(count)]
        self.next_key += count
        self.big.append(pa.Table.from_pylist([{"key": k} for k in keys], schema=BIG))
        return _committed(self.big), sum(k < SMALL_KEYS for k in keys)

    def last_commit(self) -> int:
        """The newest commit time of the inputs (a tick must come after it)."""
        times = [0]
        for table in (self.events, self.big, self.small):
            table.refresh()
            snapshot = table.metadata.current_snapshot()
            if snapshot is not None:
                times.append(int(snapshot.timestamp_ms))
        return max(times)


def _committed(table: Any) -> int:
    """The commit time of ``table``'s head (refreshed)."""
    table.refresh()
    snapshot = table.metadata.current_snapshot()
    if snapshot is None:
        raise AssertionError(f"{table.name()} has no snapshot")
    return int(snapshot.timestamp_ms)


# -- ticking --------------------------------------------------------------------------------
def tick(dag: Any, last_commit_ms: int, counters: Callable[[], Counter[str]] | None) -> Sample:
    """One ``dag.test()`` run at a time its inputs sealed (after ``last_commit_ms``), measured.

    The wait for the seal is outside the measurement: it is the 1 s
    allowance plain inputs get for late commits, not storage.
    """
    while now_ms() < last_commit_ms + 1_100:
        time.sleep(0.05)
    at = now_ms() - 1_050
    before = counters() if counters else Counter()
    started = time.perf_counter()
    run = dag.test(run_conf={"time": at})
    seconds = time.perf_counter() - started
    after = counters() if counters else Counter()
    if run.state != "success":
        raise RuntimeError(f"{dag.dag_id} at {at}: the run ended {run.state}")
    return Sample(seconds, after - before)


def check_view(inputs: Inputs) -> None:
    from tests.helpers import rows_of

    totals = inputs.catalog.load_table(f"{inputs.ns}.totals")
    got, want = rows_of(totals), inputs.totals()
    if got != want:
        raise AssertionError(f"the view differs from the model: {got - want} / {want - got}")


def output_rows(inputs: Inputs) -> int:
    from pyiceberg.exceptions import NoSuchTableError

    try:
        table = inputs.catalog.load_table(f"{inputs.ns}.stj")
    except NoSuchTableError:
        return 0
    return 0 if table.current_snapshot() is None else len(table.scan().to_arrow())


def run_storage(
    name: str,
    config: CatalogConfig,
    args: argparse.Namespace,
    counters: Callable[[], Counter[str]] | None,
) -> dict[str, list[Sample]]:
    """Warm up, then ``args.ticks`` busy, quiet and continual ticks on one storage."""
    import objectstore_bench_dag as dags

    from tests.objectstore import iceberg_connection
    from tests.warm import private_warm_dir

    os.environ[DEFAULT_CONN] = iceberg_connection(config)
    inputs = Inputs(config, dags.NAMESPACE, args.rows)
    print(f"## {name}: tables at {inputs.location()}", flush=True)
    view, task = dags.objectstore_bench_view, dags.objectstore_bench_continual
    samples: dict[str, list[Sample]] = {kind: [] for kind in KINDS}
    with private_warm_dir():  # this storage's warm driver, stopped at the end
        tick(view, inputs.last_commit(), None)  # creates the view, starts the driver
        check_view(inputs)
        tick(task, inputs.last_commit(), None)  # the task's as-of
        inputs.insert_big(args.changed)
        tick(task, inputs.last_commit(), None)  # its first batch (creates the output)
        for number in range(args.ticks):
            samples["busy"].append(tick(view, inputs.change_events(args.changed // 2), counters))
            check_view(inputs)
            samples["quiet"].append(tick(view, inputs.last_commit(), counters))
            check_view(inputs)
            before = output_rows(inputs)
            committed, joined = inputs.insert_big(args.changed)
            samples["continual"].append(tick(task, committed, counters))
            if output_rows(inputs) != before + joined:
                raise AssertionError(f"the task wrote {output_rows(inputs) - before}, not {joined}")
            print(f"## {name} tick {number + 1}/{args.ticks}: " + _line(samples), flush=True)
    return samples


def _line(samples: dict[str, list[Sample]]) -> str:
    """The last tick of each kind: seconds, and S3 requests if any were counted."""
    parts = []
    for kind, taken in samples.items():
        if taken:
            requests = sum(taken[-1].requests[r] for r in REQUESTS)
            counted = f" {requests} req" if requests else ""
            parts.append(f"{kind} {taken[-1].seconds:.2f}s{counted}")
    return ", ".join(parts)


# -- the report -------------------------------------------------------------------------------
def per_tick(samples: list[Sample], key: str) -> float:
    return statistics.mean(s.requests[key] for s in samples) if samples else 0.0


def report(local: dict[str, list[Sample]], s3: dict[str, list[Sample]], args: Any) -> None:
    """The table (median seconds, S3/local, requests and bytes per tick on S3) and a JSON line."""
    head = "| tick | local s | S3+REST s | S3/local | " + " | ".join(REQUESTS)
    print(f"\n{head} | requests | KB up | KB down |")
    print("|" + "---|" * (len(REQUESTS) + 7))
    summary: dict[str, Any] = {"rows": args.rows, "changed": args.changed, "ticks": args.ticks}
    for kind in KINDS:
        lo = statistics.median(s.seconds for s in local[kind])
        hi = statistics.median(s.seconds for s in s3[kind])
        reqs = {r: per_tick(s3[kind], r) for r in REQUESTS}
        up, down = per_tick(s3[kind], "bytes up"), per_tick(s3[kind], "bytes down")
        cells = " | ".join(f"{reqs[r]:.0f}" for r in REQUESTS)
        print(
            f"| {kind} | {lo:.2f} | {hi:.2f} | {hi / lo:.2f} | {cells} | "
            f"{sum(reqs.values()):.0f} | {up / 1024:.0f} | {down / 1024:.0f} |"
        )
        summary[kind] = {
            "local_s": round(lo, 3),
            "s3_s": round(hi, 3),
            "s3_over_local": round(hi / lo, 3),
            "requests": {r: round(v, 1) for r, v in reqs.items()},
            "bytes_up": round(up),
            "bytes_down": round(down),
        }
    print(
        f"\nSeconds: median of {args.ticks} ticks (dag.test() wall time, warm engine); "
        "requests and bytes: mean per tick, from SeaweedFS's counters (GET includes HEAD; "
        "REST catalog calls not counted)."
    )
    print(json.dumps({"objectstore_bench": summary}))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--ticks", type=int, default=3, help="measured ticks of each kind")
    parser.add_argument("--rows", type=int, default=4000, help="rows of the view's input")
    parser.add_argument("--changed", type=int, default=100, help="input rows a busy tick changes")
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    from airflow.utils import db

    from tests.objectstore import running_object_store

    db.resetdb()
    work = Path(tempfile.mkdtemp(prefix="ct-osbench-"))
    local_config = CatalogConfig(
        name="ct", uri=f"sqlite:///{work / 'catalog.db'}", warehouse=(work / "lake").as_uri()
    )
    try:
        local = run_storage("local", local_config, args, None)
        with running_object_store(work / "seaweedfs", metrics=True) as store:
            config = store.rest_config()
            s3 = run_storage("s3", config, args, lambda: read_counters(store.metrics_url))
            location = config.load().load_table("osbench.events").location()
            if not location.startswith("s3://"):
                raise AssertionError(f"the S3 run's tables are at {location}")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    report(local, s3, args)


if __name__ == "__main__":
    main()
