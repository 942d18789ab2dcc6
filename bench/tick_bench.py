r"""Benchmark: ticks of the 22 TPC-H views in one DAG through ``dag.test()``, per engine.

Run on demand, never in ``make test`` (see docs/views.md, "Benchmarks")::

    python bench/tick_bench.py --views 1,6 --sf 0.001          # a smoke run (minutes)
    python bench/tick_bench.py --engines warm                  # 22 views at SF 0.01
    python bench/tick_bench.py --engines spark-submit,warm --ticks 2
    python bench/tick_bench.py --engines warm,warm-fused --ticks 2   # also one task per tick
    python bench/tick_bench.py --engines default,default-fused,spark-submit --ticks 2

``default`` builds the views with no engine at all (no ``engine=``, no
Spark connection): what a new user gets; the bench prints which engine the
write tasks chose and why (their "Spark engine:" log lines). An engine name
ending in ``-fused`` builds the views with ``fuse_steps=True`` (mint, write
and append as one task ``tick``, whose duration the tables show in the
``write`` column).

What it does (data, queries, changes and oracle: bench/tick_bench_tpch.py):

1. generates TPC-H at ``--sf`` with DuckDB's ``tpch`` extension (in a
   throwaway environment) and loads the 8 tables into Iceberg (a SQLite
   catalog in a folder under /tmp, removed at the end);
2. per engine, one DAG holding the chosen queries as views
   (bench/dags/tick_bench_dag.py), targets in their own namespace; measures
   a cold Spark start (a fresh JVM's new session and its first query, in a
   subprocess), then ticks the DAG with ``dag.test(logical_date=T)``: an
   initial tick (creates the views), then ``--ticks`` times a busy tick
   (after 0.1% of orders deleted, 0.1% inserted and a few updates) and a
   quiet tick (no input changed);
3. after every tick checks each view against DuckDB running the original
   query over the input snapshots the bench recorded at ``T``, and that the
   view's head is the tick at ``T``;
4. prints per tick the DAG run's wall time and per view the strategy, the
   tasks' durations and the write job's phases, then a summary, and as its
   last line one JSON object: ``quiet_over_cold`` and ``busy_over_cold`` per
   engine (the median quiet and busy tick's wall time over that engine's
   cold start), ``exact`` and every mismatch.

Airflow's task logs go to stdout as well; ``grep -E '^(\||###|==|\{)'`` keeps
the bench's own lines.

``dag.test()`` runs the tasks one after the other in this process, so the
per-task overhead measured here is Airflow's in-process task runner, not a
scheduler's (which adds a process and a DAG parse per task).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench" / "dags"))
_WORK = Path(tempfile.mkdtemp(prefix="ct-tickbench-"))
_HOME = _WORK / "airflow"
_HOME.mkdir()
os.environ.setdefault("AIRFLOW_HOME", str(_HOME))
os.environ.setdefault("AIRFLOW__DATABASE__SQL_ALCHEMY_CONN", f"sqlite:///{_HOME}/airflow.db")
os.environ.setdefault("AIRFLOW__CORE__LOAD_EXAMPLES", "False")
os.environ.setdefault("AIRFLOW__CORE__DAGS_FOLDER", str(ROOT / "bench" / "dags"))
os.environ.setdefault("AIRFLOW__CORE__UNIT_TEST_MODE", "True")
os.environ["CT_TICK_BENCH_SPEC"] = str(_WORK / "spec.json")

from airflow_provider_ct.core.catalog import CatalogConfig  # noqa: E402
from airflow_provider_ct.core.timeline import Timeline  # noqa: E402
from airflow_provider_ct.engine import protocol  # noqa: E402
from airflow_provider_ct.engine.client import DEFAULT_IDLE_TIMEOUT  # noqa: E402
from airflow_provider_ct.operators.tick import WRITE_REPORT_KEY  # noqa: E402
from bench import tick_bench_tpch as tpch  # noqa: E402
from tests.helpers import rows_of  # noqa: E402

log = logging.getLogger("tick_bench")
TASKS = ("wait_for_inputs", "mint", "write", "append")
#: ``--engines warm-fused``: the engine with mint, write and append fused into one task.
FUSED = "-fused"
#: ``--engines default``: no engine configured, as a new user's DAG.
DEFAULT = "default"
#: The line a write task logs once with its engine and the reason (hooks/spark_job.py).
CHOSEN = "Spark engine: "

#: A fresh interpreter and JVM: a new local session and its first query (the unit).
COLD_START = """
import json, sys, time
t0 = time.perf_counter()
from airflow_provider_ct.core.catalog import CatalogConfig
from airflow_provider_ct.spark.conf import local_session
spark = local_session(CatalogConfig(uri=sys.argv[1], warehouse=sys.argv[2]), app_name="cold")
t1 = time.perf_counter()
spark.sql("SELECT count(*) FROM ct.tpch.lineitem").collect()
t2 = time.perf_counter()
spark.stop()
print(json.dumps({"session_s": t1 - t0, "first_query_s": t2 - t1, "cold_s": t2 - t0}))
"""


@dataclass
class Tick:
    """One DAG run: what it cost, per view, and whether every view was exact."""

    engine: str
    kind: str
    time_ms: int
    wall_s: float
    load: str
    changes: dict[str, int] = field(default_factory=dict)
    views: dict[str, dict[str, Any]] = field(default_factory=dict)
    mismatches: list[dict[str, Any]] = field(default_factory=list)

    def task_sum(self) -> float:
        return sum(sum(v["tasks"].values()) for v in self.views.values())


def load_average() -> str:
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


def cold_start(config: CatalogConfig) -> dict[str, float]:
    """Seconds of a cold Spark start: interpreter, JVM, session, first query (a subprocess)."""
    out = subprocess.run(
        [sys.executable, "-c", COLD_START, config.uri, config.warehouse],
        check=True,
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    result: dict[str, float] = json.loads(out.stdout.strip().splitlines()[-1])
    return {k: round(v, 2) for k, v in result.items()}


def write_spec(engines: list[str], queries: list[tpch.TpchQuery]) -> None:
    specs = [
        {
            "dag_id": dag_id(engine),
            "engine": configured_engine(engine),
            "fuse_steps": engine.endswith(FUSED),
            "namespace": namespace(engine),
            "views": {q.name: q.spark_sql for q in queries},
            # For ``default`` the value a task without one gets: nothing configured.
            "warm_idle_timeout": DEFAULT_IDLE_TIMEOUT if configured_engine(engine) is None else 600,
        }
        for engine in engines
    ]
    Path(os.environ["CT_TICK_BENCH_SPEC"]).write_text(json.dumps(specs, indent=1))


def configured_engine(engine: str) -> str | None:
    """The ``engine=`` of the views of ``--engines`` name ``engine`` (``None`` for the default)."""
    base = engine.removesuffix(FUSED)
    return None if base == DEFAULT else base


class EngineLines(logging.Handler):
    """Counts the engines the write tasks chose (their "Spark engine: X (why)" lines)."""

    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.chosen: dict[str, int] = {}
        self.reasons: dict[str, str] = {}

    def emit(self, record: logging.LogRecord) -> None:
        message = record.getMessage()
        if message.startswith(CHOSEN):
            engine, _, reason = message.removeprefix(CHOSEN).partition(" ")
            self.chosen[engine] = self.chosen.get(engine, 0) + 1
            self.reasons.setdefault(engine, reason.strip("()"))

    def reset(self) -> None:
        self.chosen, self.reasons = {}, {}


#: Installed on the hook's logger by :func:`main`.
ENGINE_LINES = EngineLines()


def dag_id(engine: str) -> str:
    return f"tick_bench_{engine.replace('-', '_')}"


def namespace(engine: str) -> str:
    return f"tpch_{engine.replace('-', '_')}"


# --- one tick ---------------------------------------------------------------------------------


def _run_details(dag_id_: str, run_id: str) -> tuple[dict[str, float], dict[str, Any]]:
    """Task durations and write reports (the write tasks' XComs) of one DAG run."""
    from airflow.models import TaskInstance
    from airflow.models.xcom import XComModel
    from airflow.utils.session import create_session
    from sqlalchemy import select

    with create_session() as session:
        tis = session.scalars(
            select(TaskInstance).where(
                TaskInstance.dag_id == dag_id_, TaskInstance.run_id == run_id
            )
        ).all()
        durations = {ti.task_id: float(ti.duration or 0.0) for ti in tis}
        xcoms = session.scalars(
            select(XComModel).where(
                XComModel.dag_id == dag_id_,
                XComModel.run_id == run_id,
                XComModel.key.in_(("return_value", WRITE_REPORT_KEY)),
            )
        ).all()
        # A write task's return value; a fused tick task's report under its own key.
        reports = {
            x.task_id.rsplit(".", 1)[0] + ".write": XComModel.deserialize_value(x)
            for x in xcoms
            if (x.task_id.endswith(".write") and x.key == "return_value")
            or (x.task_id.endswith(".tick") and x.key == WRITE_REPORT_KEY)
        }
    return durations, reports


def run_tick(dag: Any, engine: str, kind: str, queries: list[tpch.TpchQuery]) -> Tick:
    """``dag.test()`` at ``T`` = now (after the inputs' last commit); only the run is timed.

    The inputs are external tables sealed 1 s behind the wall clock, so the
    bench waits 1.2 s before starting the run: the sensors pass at once.
    """
    t_ms = int(time.time() * 1000)
    time.sleep(1.2)
    load = load_average()
    started = time.perf_counter()
    run = dag.test(logical_date=datetime.fromtimestamp(t_ms / 1000, UTC))
    wall = time.perf_counter() - started
    if run.state != "success":
        raise SystemExit(f"{engine} {kind} tick at {t_ms} ended {run.state}")
    durations, reports = _run_details(dag.dag_id, run.run_id)
    tick = Tick(engine, kind, t_ms, round(wall, 2), load)
    for q in queries:
        report = reports.get(f"{q.name}.write") or {}
        tasks = {t: round(durations.get(f"{q.name}.{t}", 0.0), 2) for t in TASKS}
        if f"{q.name}.tick" in durations:  # fused: mint, write and append in one task
            tasks["write"] = round(durations[f"{q.name}.tick"], 2)
        tick.views[q.name] = {
            "tasks": tasks,
            "strategy": "quiet" if report.get("quiet") else report.get("strategy", "?"),
            "reason": report.get("reason", ""),
            "phases": report.get("phases", {}),
            "rows": (report.get("rows_to_insert", 0), report.get("rows_to_delete", 0)),
        }
    return tick


def check_tick(
    tick: Tick, catalog: Any, oracle: tpch.Oracle, queries: list[tpch.TpchQuery], pinned: Any
) -> None:
    """Every view's head must be the tick at ``T`` and equal DuckDB over the pinned inputs."""
    for q in queries:
        table = catalog.load_table(f"{namespace(tick.engine)}.{q.name}")
        head = Timeline.of(table).entries[-1]
        verdict = tpch.compare(oracle.rows(q, pinned), rows_of(table))
        if head.time != tick.time_ms:
            verdict = {**verdict, "equal": False, "head_time": head.time}
        tick.views[q.name]["exact"] = verdict["equal"]
        if not verdict["equal"]:
            tick.mismatches.append(
                {"engine": tick.engine, "tick": tick.kind, "view": q.name, **verdict}
            )
            log.error(
                "%s %s tick: %s differs from DuckDB: %s",
                tick.engine,
                tick.kind,
                q.name,
                json.dumps(verdict),
            )


# --- one engine -------------------------------------------------------------------------------


@dataclass
class EngineRun:
    engine: str
    cold: dict[str, float]
    ticks: list[Tick] = field(default_factory=list)
    #: Write tasks per engine they ran on (from their log lines), and one reason each.
    chosen: dict[str, int] = field(default_factory=dict)
    reasons: dict[str, str] = field(default_factory=dict)

    def median(self, kind: str) -> float | None:
        walls = [t.wall_s for t in self.ticks if t.kind == kind]
        return statistics.median(walls) if walls else None

    def ratio(self, kind: str) -> float | None:
        wall = self.median(kind)
        return None if wall is None else round(wall / self.cold["cold_s"], 2)


def bench_engine(
    engine: str, args: argparse.Namespace, ctx: dict[str, Any], queries: list[tpch.TpchQuery]
) -> EngineRun:
    """Cold start, initial tick, then ``--ticks`` x (busy, quiet), each checked and printed."""
    import tick_bench_dag

    dag = tick_bench_dag.DAGS[dag_id(engine)]
    catalog, spark = ctx["catalog"], ctx["spark"]
    result = EngineRun(engine, cold_start(ctx["config"]))
    print(f"\n== {engine}: cold Spark start {result.cold} (load {load_average()})", flush=True)
    ENGINE_LINES.reset()
    kinds = ["initial"]
    for _ in range(args.ticks):
        kinds += [] if args.quiet_only else ["busy"]
        kinds += [] if args.busy_only else ["quiet"]
    for kind in kinds:
        changes = {}
        if kind == "busy":
            ctx["seed"] += 10
            changes = tpch.change_inputs(spark, ctx["seed"])
        pinned = tpch.pins(catalog)  # the bench's own record of what T must read
        tick = run_tick(dag, engine, kind, queries)
        tick.changes = changes
        check_tick(tick, catalog, ctx["oracle"], queries, pinned)
        result.ticks.append(tick)
        print_tick(tick)
    result.chosen, result.reasons = dict(ENGINE_LINES.chosen), dict(ENGINE_LINES.reasons)
    print(f"== {engine}: write tasks ran on {json.dumps(result.chosen)}", flush=True)
    for chosen, reason in result.reasons.items():
        print(f"== {engine}: {chosen} because {reason}", flush=True)
    return result


# --- output -----------------------------------------------------------------------------------


def _phases(phases: dict[str, float]) -> str:
    return " ".join(f"{k}={v:.2f}" for k, v in phases.items()) or "-"


def print_tick(tick: Tick) -> None:
    n = len(tick.views)
    tasks = tick.task_sum()
    print(
        f"\n### {tick.engine} {tick.kind} tick at {tick.time_ms}: DAG run {tick.wall_s:.1f} s "
        f"({n} views, {tick.wall_s / max(1, n):.2f} s per view; tasks {tasks:.1f} s, "
        f"between tasks {tick.wall_s - tasks:.1f} s); load {tick.load}"
        + (f"; changes {json.dumps(tick.changes)}" if tick.changes else ""),
        flush=True,
    )
    print(
        "| view | strategy | +rows | -rows | sensor s | mint s | write s | write phases s "
        "| outside phases s | append s | exact |"
    )
    print("|---" * 11 + "|")
    for name, v in tick.views.items():
        t, phases = v["tasks"], v["phases"]
        outside = t["write"] - sum(phases.values())
        print(
            f"| {name} | {v['strategy']} | {v['rows'][0]} | {v['rows'][1]} "
            f"| {t['wait_for_inputs']:.2f} | {t['mint']:.2f} | {t['write']:.2f} "
            f"| {_phases(phases)} | {outside:.2f} | {t['append']:.2f} | {v.get('exact')} |",
            flush=True,
        )


def print_summary(runs: list[EngineRun]) -> None:
    print("\n## summary\n")
    print(
        "| engine | cold start s | tick | DAG run s | s per view | tasks s | between tasks s "
        "| write tasks s | Σ write phases s | x cold | load |"
    )
    print("|---" * 11 + "|")
    for r in runs:
        for t in r.ticks:
            writes = sum(v["tasks"]["write"] for v in t.views.values())
            phases = sum(sum(v["phases"].values()) for v in t.views.values())
            tasks = t.task_sum()
            print(
                f"| {r.engine} | {r.cold['cold_s']:.1f} | {t.kind} | {t.wall_s:.1f} "
                f"| {t.wall_s / max(1, len(t.views)):.2f} | {tasks:.1f} | {t.wall_s - tasks:.1f} "
                f"| {writes:.1f} | {phases:.1f} | {t.wall_s / r.cold['cold_s']:.1f} | {t.load} |"
            )


def summary_json(runs: list[EngineRun], args: argparse.Namespace, views: int) -> dict[str, Any]:
    mismatches = [m for r in runs for t in r.ticks for m in t.mismatches]
    return {
        "sf": args.sf,
        "views": views,
        "cold_s": {r.engine: r.cold["cold_s"] for r in runs},
        "quiet_over_cold": {r.engine: r.ratio("quiet") for r in runs},
        "busy_over_cold": {r.engine: r.ratio("busy") for r in runs},
        "write_tasks_ran_on": {r.engine: r.chosen for r in runs},
        "exact": not mismatches,
        "mismatches": mismatches,
    }


# --- main -------------------------------------------------------------------------------------


def setup(args: argparse.Namespace) -> tuple[dict[str, Any], list[tpch.TpchQuery]]:
    """Data, catalog, the DAGs' spec, Airflow's database and the session that changes inputs."""
    from airflow.utils import db

    from airflow_provider_ct.spark.conf import local_session

    config = CatalogConfig(
        uri=f"sqlite:///{_WORK / 'catalog.db'}", warehouse=(_WORK / "warehouse").as_uri()
    )
    catalog = config.load()
    texts = tpch.generate(args.sf, _WORK / "data")
    numbers = [int(v) for v in args.views.split(",")] if args.views else None
    queries = tpch.tpch_queries(texts, numbers)
    tpch.load_tables(catalog, _WORK / "data")
    engines = args.engines.split(",")
    for engine in engines:
        catalog.create_namespace_if_not_exists(namespace(engine))
    write_spec(engines, queries)
    os.environ["AIRFLOW_CONN_ICEBERG_CATALOG_DEFAULT"] = json.dumps(
        {
            "conn_type": "iceberg_catalog",
            "extra": {"uri": config.uri, "warehouse": config.warehouse},
        }
    )
    db.resetdb()
    spark = local_session(
        config, app_name="tick-bench-changes", **{"spark.sql.shuffle.partitions": "4"}
    )
    spark.sparkContext.setLogLevel("ERROR")
    ctx = {
        "config": config,
        "catalog": catalog,
        "spark": spark,
        "seed": 100,
        "oracle": tpch.Oracle(catalog),
    }
    return ctx, queries


def stop_drivers(folder: Path) -> None:
    """SIGTERM the warm drivers this run started (only those under its own CT_WARM_DIR)."""
    import signal

    pids = []
    for pid_file in folder.glob(f"*/{protocol.PID_FILE}"):
        try:
            pids.append(int(pid_file.read_text()))
            os.kill(pids[-1], signal.SIGTERM)
        except (OSError, ValueError):
            continue
    deadline = time.monotonic() + 60
    while any(Path(f"/proc/{pid}").exists() for pid in pids) and time.monotonic() < deadline:
        time.sleep(0.5)


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--sf", type=float, default=0.01, help="TPC-H scale factor")
    parser.add_argument("--ticks", type=int, default=1, help="busy+quiet pairs per engine")
    parser.add_argument("--engines", default="spark-submit,warm")
    parser.add_argument("--views", default="", help="query numbers, e.g. 1,3,6 (default all 22)")
    parser.add_argument("--quiet-only", action="store_true", help="no busy ticks")
    parser.add_argument("--busy-only", action="store_true", help="no quiet ticks")
    parser.add_argument("--keep", action="store_true", help=f"keep {_WORK}")
    args = parser.parse_args()
    if args.quiet_only and args.busy_only:
        parser.error("--quiet-only and --busy-only exclude each other")
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(name)s %(message)s")
    hook_log = logging.getLogger("airflow_provider_ct.hooks.spark_job")
    hook_log.setLevel(logging.INFO)
    hook_log.addHandler(ENGINE_LINES)
    warm_dir = Path(tempfile.mkdtemp(prefix="ctw-", dir="/tmp"))
    os.environ[protocol.WARM_DIR_ENV] = str(warm_dir)
    print(f"tick bench in {_WORK} (load {load_average()})", flush=True)
    runs: list[EngineRun] = []
    ctx: dict[str, Any] = {}
    try:
        ctx, queries = setup(args)
        for engine in args.engines.split(","):
            runs.append(bench_engine(engine, args, ctx, queries))
    finally:
        stop_drivers(warm_dir)
        if ctx:
            ctx["spark"].stop()
        if not args.keep:
            shutil.rmtree(_WORK, ignore_errors=True)
        shutil.rmtree(warm_dir, ignore_errors=True)
    # py4j logs its shutdown at exit: keep the JSON the last line.
    logging.getLogger("py4j").setLevel(logging.ERROR)
    print_summary(runs)
    summary = summary_json(runs, args, len(queries))
    print(json.dumps(summary))
    return 0 if summary["exact"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
