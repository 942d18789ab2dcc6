r"""Benchmark: ticks of the 22 TPC-H views in one DAG through ``dag.test()``, per column.

Run on demand, never in ``make test`` (see docs/views.md, "Benchmarks")::

    python bench/tick_bench.py --views 1,6 --sf 0.001          # a smoke run (minutes)
    python bench/tick_bench.py --engines warm                  # 22 views at SF 0.01
    python bench/tick_bench.py --engines spark-submit,warm --ticks 2
    python bench/tick_bench.py --engines warm,warm-fused --ticks 2   # also one task per tick
    python bench/tick_bench.py --engines default,default-fused,spark-submit --ticks 2
    # refresh="auto" against refresh="full" and a plain-Spark INSERT OVERWRITE:
    python bench/tick_bench.py --engines warm --refresh auto,full --overwrite --sf 0.1 --ticks 2
    # ... with one busy tick first that no sum counts (first plans, first changes):
    python bench/tick_bench.py --engines warm --refresh auto,full --overwrite --sf 1 --warmup 1
    # ... each view's auto and full back to back (the comparison the issue's numbers use):
    python bench/tick_bench.py --engines warm --refresh auto,full --overwrite --sf 1 \
        --ticks 2 --warmup 1 --busy-only --paired

A **column** is one DAG of the views: an engine of ``--engines`` with a
``refresh`` of ``--refresh`` (``materialized_view(refresh=...)``; every
pair, ``warm/auto``, ``warm/full``...), plus with ``--overwrite`` the
baseline: each query run by plain Spark as ``INSERT OVERWRITE`` of a plain
Iceberg table over the same pinned inputs (bench/tick_bench_compare.py).
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
2. measures a cold Spark start per engine (a fresh JVM's new session and
   its first query, in a subprocess); one DAG per column holding the
   chosen queries as views (bench/dags/tick_bench_dag.py), targets in the
   column's own namespace; then ticks every column: an initial tick
   (creates the views), then ``--ticks`` times a busy tick and a quiet tick
   (no input changed; the overwrite sits those out). Before a busy tick
   the bench changes the shared inputs once, so every column reads the
   same changes: TPC-H's refresh streams (RF2 deletes ``--rf-share``,
   default 0.1%, of the orders with their line items, RF1 inserts as many)
   and merge-on-read updates of ``--update-share`` (default 1%) of
   ``customer``, ``part``, ``partsupp`` and of a few line items and orders.
   Each column ticks with ``dag.test(logical_date=T)``, one after the
   other, ``T`` after the inputs' last commit; the views' columns in
   reverse order every other tick of a kind (the first column after a
   change runs slower: use an even ``--ticks``), the overwrite last.
   With ``--paired`` each view of each column is a DAG of its own and a
   tick runs the views one after the other, each view's columns back to
   back (which goes first alternating from view to view and tick to tick):
   a paired comparison, in which what the machine does meanwhile (the
   JVM's collections, caches, the other views' jobs) falls on both
   columns of a view alike. Without it a column's 22 views run as one DAG
   and the same view's two columns run a minute apart; views that run the
   same code in both columns then differed by up to 30% on this machine.
   The DAG run's wall time of a paired tick is the sum of its views' runs;
3. after every tick checks each view against DuckDB running the original
   query over the input snapshots the bench recorded before the tick, and
   that the view's head is the tick at ``T`` (the overwrite's tables: DuckDB only);
4. prints per tick and column the DAG run's wall time and per view the
   strategy (``quiet`` also from the mint's report when it skipped the
   write task), where it diffed, the tasks' durations and the write job's
   phases, then a
   summary; with both ``auto`` and ``full`` columns (of the first engine)
   per query the write task's seconds of ``full`` and ``auto`` summed over
   the busy ticks, their ratio, ``auto``'s strategies and reason and the
   overwrite's seconds, and a summary of the scale; as its last line one
   JSON object: ``quiet_over_cold`` and ``busy_over_cold`` per column (the
   median quiet and busy tick's wall time over the engine's cold start),
   ``auto_over_full``, ``auto_over_overwrite``, ``full_over_overwrite``
   (ratios of the sums over the views), ``slower_than_full`` (views whose
   ``auto`` took over 1.05x their ``full``), ``incremental_queries`` (views
   ``auto`` maintained incrementally in some busy tick),
   ``auto_over_full_both_full`` (over the views ``auto`` ran in full too:
   the same code, so the machine's noise) and ``auto_over_full_incremental``,
   ``exact`` (every view of every column, every tick) and every mismatch.

Airflow's task logs go to stdout as well; ``grep -E '^(\||##|==|\{)'`` keeps
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
import subprocess
import sys
import tempfile
from collections import Counter
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench" / "dags"))
from bench.bench_env import (  # noqa: E402
    catalog_connection_and_session,
    isolated_airflow,
    stop_drivers,
)

_WORK = isolated_airflow("ct-tickbench-", "CT_TICK_BENCH_SPEC")

from airflow_provider_ct.core.catalog import CatalogConfig  # noqa: E402
from airflow_provider_ct.engine import protocol  # noqa: E402
from airflow_provider_ct.engine.client import DEFAULT_IDLE_TIMEOUT  # noqa: E402
from bench import tick_bench_compare as cmp  # noqa: E402
from bench import tick_bench_tpch as tpch  # noqa: E402
from bench.tick_bench_compare import Column, ColumnRun, Tick, load_average  # noqa: E402
from bench.tick_bench_runs import (  # noqa: E402
    ENGINE_LINES,
    check_tick,
    dag_id,
    dags,
    namespace,
    paired_ticks,
    run_tick,
    view_dag_id,
)

#: What the views' write tasks give the warm driver (``WriteOperator``'s default
#: ``driver_memory``; the bench's DAGs set none): its JVM heap.
DRIVER_MEMORY = "2g"
TASKS = cmp.TASKS
#: ``--engines warm-fused``: the engine with mint, write and append fused into one task.
FUSED = "-fused"
#: ``--engines default``: no engine configured, as a new user's DAG.
DEFAULT = "default"
#: The line a write task logs once with its engine and the reason (hooks/spark_job.py).
CHOSEN = "Spark engine: "
#: ``refresh=`` values a column may have (``materialized_view``).
REFRESH = ("auto", "incremental", "full")

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


def columns_of(args: argparse.Namespace) -> list[Column]:
    """Every engine with every refresh, then (``--overwrite``) the plain-Spark baseline."""
    columns = [
        Column(engine, refresh)
        for engine in args.engines.split(",")
        for refresh in args.refresh.split(",")
    ]
    return columns + ([Column(cmp.OVERWRITE, "")] if args.overwrite else [])


def write_spec(columns: list[Column], queries: list[tpch.TpchQuery], paired: bool) -> None:
    """The DAGs' spec: per view column one DAG of every view, or (``paired``) one per view."""
    specs = []
    for column in columns:
        if column.overwrite:
            continue
        spec = {
            "dag_id": dag_id(column),
            "engine": configured_engine(column.engine),
            "refresh": column.refresh,
            "fuse_steps": column.engine.endswith(FUSED),
            "namespace": namespace(column),
            "views": {q.name: q.spark_sql for q in queries},
            # For ``default`` the value a task without one gets: nothing configured.
            "warm_idle_timeout": DEFAULT_IDLE_TIMEOUT
            if configured_engine(column.engine) is None
            else 600,
        }
        if not paired:
            specs.append(spec)
            continue
        for q in queries:
            one = {q.name: q.spark_sql}
            specs.append({**spec, "dag_id": view_dag_id(column, q.name), "views": one})
    Path(os.environ["CT_TICK_BENCH_SPEC"]).write_text(json.dumps(specs, indent=1))


def configured_engine(engine: str) -> str | None:
    """The ``engine=`` of the views of ``--engines`` name ``engine`` (``None`` for the default)."""
    base = engine.removesuffix(FUSED)
    return None if base == DEFAULT else base


# --- one tick ---------------------------------------------------------------------------------


def column_tick(
    run: ColumnRun,
    kind: str,
    ctx: dict[str, Any],
    queries: list[tpch.TpchQuery],
    pinned: dict[str, int],
) -> Tick:
    """One column's tick over the inputs at ``pinned``, checked."""
    column = run.column
    if column.overwrite:
        tick = cmp.overwrite_tick(
            ctx["spark"], kind, queries, pinned, namespace(column), ctx["job_settings"]
        )
    else:
        ENGINE_LINES.reset()
        tick = run_tick(dags()[dag_id(column)], column.label, kind, queries)
        ENGINE_LINES.add_to(run)
    check_tick(tick, ctx, queries, pinned, column)
    return tick


# --- the ticks of every column ----------------------------------------------------------------


def tick_kinds(args: argparse.Namespace) -> list[str]:
    kinds = ["initial"] + ["warmup"] * args.warmup
    for _ in range(args.ticks):
        kinds += [] if args.quiet_only else ["busy"]
        kinds += [] if args.busy_only else ["quiet"]
    return kinds


def _keep(run: ColumnRun, tick: Tick, changes: dict[str, int]) -> None:
    tick.changes = changes
    run.ticks.append(tick)
    cmp.print_tick(tick)


def bench_columns(
    columns: list[Column], args: argparse.Namespace, ctx: dict[str, Any], queries: list[Any]
) -> list[ColumnRun]:
    """Every tick: the inputs changed once (busy), pinned, then every column over them.

    The first column after a change runs measurably slower (the warm
    driver's first look at the new snapshots, Spark's code generation), so
    the view columns' order is reversed from one tick of a kind to the next:
    over an even ``--ticks`` each is first as often (``--paired``: each
    view's columns back to back, :func:`paired_ticks`). The overwrite, in
    the bench's own session, runs last.
    """
    catalog, seen = ctx["catalog"], Counter[str]()
    runs = [ColumnRun(c, None if c.overwrite else ctx["cold"][c.engine]) for c in columns]
    views = [r for r in runs if not r.column.overwrite]
    baseline = [r for r in runs if r.column.overwrite]
    for kind in tick_kinds(args):
        changes = {}
        if kind in ("busy", "warmup"):
            ctx["seed"] += 10
            changes = tpch.change_inputs(
                ctx["spark"], ctx["seed"], args.rf_share, args.update_share
            )
        pinned = tpch.pins(catalog)  # the bench's own record of what T must read
        order = views if seen[kind] % 2 == 0 else views[::-1]
        seen[kind] += 1
        if args.paired:
            for run, tick in zip(
                views, paired_ticks(views, kind, queries, seen[kind]), strict=True
            ):
                check_tick(tick, ctx, queries, pinned, run.column)
                _keep(run, tick, changes)
            order = []
        for run in order + ([] if kind == "quiet" else baseline):
            _keep(run, column_tick(run, kind, ctx, queries, pinned), changes)
        if tpch.pins(catalog) != pinned:
            raise SystemExit(f"the inputs changed during a {kind} tick: {pinned} -> now")
    for run in runs:
        print(f"== {run.column.label}: write tasks ran on {json.dumps(run.chosen)}", flush=True)
        for chosen, reason in run.reasons.items():
            print(f"== {run.column.label}: {chosen} because {reason}", flush=True)
    return runs


# --- output -----------------------------------------------------------------------------------


def summary_json(
    runs: list[ColumnRun], args: argparse.Namespace, views: int, colds: dict[str, Any]
) -> dict[str, Any]:
    mismatches = [m for r in runs for t in r.ticks for m in t.mismatches]
    views_wrong = [m for m in mismatches if m["column"] != cmp.OVERWRITE]
    return {
        "sf": args.sf,
        "views": views,
        "cold_s": {engine: cold["cold_s"] for engine, cold in colds.items()},
        "quiet_over_cold": {r.column.label: r.ratio("quiet") for r in runs if r.cold},
        "busy_over_cold": {r.column.label: r.ratio("busy") for r in runs if r.cold},
        "write_tasks_ran_on": {r.column.label: r.chosen for r in runs if r.cold},
        "driver_peak_mb": {
            r.column.label: cmp.peak_of(t.driver_peak_mb for t in r.ticks) for r in runs if r.cold
        },
        "driver_memory": DRIVER_MEMORY,
        "exact": not views_wrong,
        "overwrite_exact": len(mismatches) == len(views_wrong),
        "mismatches": mismatches,
    }


def print_comparison(runs: list[ColumnRun], args: argparse.Namespace) -> dict[str, Any]:
    """``auto`` against ``full`` on the first engine (nothing without both); its JSON."""
    engine = args.engines.split(",")[0]
    rows = cmp.compare_refresh(runs, engine)
    if not rows:
        return {}
    busy = args.ticks if not args.quiet_only else 0
    totals = cmp.comparison_json(rows)
    cmp.print_comparison(rows, engine, busy)
    cmp.print_scale_summary(totals, args.sf, len(rows), busy)
    return totals


# --- main -------------------------------------------------------------------------------------


def setup(
    args: argparse.Namespace, columns: list[Column]
) -> tuple[dict[str, Any], list[tpch.TpchQuery]]:
    """Data, catalog, the DAGs' spec, Airflow's database and the session that changes inputs.

    That session, in this process, also runs the overwrite baseline; it is
    started with the warm driver's settings (``WarmSpec``: master, driver
    memory, catalog) and the overwrite runs with a warm job's session settings.
    """

    config = CatalogConfig(
        uri=f"sqlite:///{_WORK / 'catalog.db'}", warehouse=(_WORK / "warehouse").as_uri()
    )
    catalog = config.load()
    texts = tpch.generate(args.sf, _WORK / "data")
    numbers = [int(v) for v in args.views.split(",")] if args.views else None
    queries = tpch.tpch_queries(texts, numbers)
    tpch.load_tables(catalog, _WORK / "data")
    for column in columns:
        catalog.create_namespace_if_not_exists(namespace(column))
    write_spec(columns, queries, args.paired)
    warm, spark = catalog_connection_and_session(config, "tick-bench-changes")
    ctx = {
        "config": config,
        "catalog": catalog,
        "spark": spark,
        "job_settings": warm.session_conf,
        "seed": 100,
        "oracle": tpch.Oracle(catalog),
    }
    return ctx, queries


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--sf", type=float, default=0.01, help="TPC-H scale factor")
    parser.add_argument("--ticks", type=int, default=1, help="busy+quiet pairs per column")
    parser.add_argument(
        "--warmup",
        type=int,
        default=0,
        help="busy ticks after the initial one, checked but left out of every sum: each "
        "column's first incremental plans and first look at changed inputs",
    )
    parser.add_argument("--engines", default="spark-submit,warm", help="engines, e.g. warm")
    parser.add_argument("--refresh", default="auto", help="refresh= per column, e.g. auto,full")
    parser.add_argument(
        "--overwrite", action="store_true", help="add plain Spark INSERT OVERWRITE as a column"
    )
    parser.add_argument(
        "--views",
        default="",
        help="query numbers, e.g. 1,3,6 (default all 22; 23: top customers, 24: a window)",
    )
    parser.add_argument(
        "--rf-share", type=float, default=0.001, help="share of orders RF2 deletes, RF1 inserts"
    )
    parser.add_argument(
        "--update-share", type=float, default=0.01, help="share of customer, part, partsupp updated"
    )
    parser.add_argument(
        "--paired",
        action="store_true",
        help="one DAG per view and column; each view's columns run back to back (see above)",
    )
    parser.add_argument("--quiet-only", action="store_true", help="no busy ticks")
    parser.add_argument("--busy-only", action="store_true", help="no quiet ticks")
    parser.add_argument("--keep", action="store_true", help=f"keep {_WORK}")
    args = parser.parse_args()
    if args.quiet_only and args.busy_only:
        parser.error("--quiet-only and --busy-only exclude each other")
    wrong = set(args.refresh.split(",")) - set(REFRESH)
    if wrong:
        parser.error(f"--refresh: {', '.join(sorted(wrong))} not in {', '.join(REFRESH)}")
    return args


def main() -> int:
    args = parse_args()
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(name)s %(message)s")
    hook_log = logging.getLogger("airflow_provider_ct.hooks.spark_job")
    hook_log.setLevel(logging.INFO)
    hook_log.addHandler(ENGINE_LINES)
    warm_dir = Path(tempfile.mkdtemp(prefix="ctw-", dir="/tmp"))
    os.environ[protocol.WARM_DIR_ENV] = str(warm_dir)
    print(f"tick bench in {_WORK} (load {load_average()})", flush=True)
    columns = columns_of(args)
    runs: list[ColumnRun] = []
    ctx: dict[str, Any] = {}
    try:
        ctx, queries = setup(args, columns)
        ctx["cold"] = {}
        for engine in dict.fromkeys(c.engine for c in columns if not c.overwrite):
            ctx["cold"][engine] = cold_start(ctx["config"])
            print(f"\n== {engine}: cold Spark start {ctx['cold'][engine]}", flush=True)
        runs = bench_columns(columns, args, ctx, queries)
    finally:
        stop_drivers(warm_dir, protocol.PID_FILE)
        if ctx:
            ctx["spark"].stop()
        if not args.keep:
            shutil.rmtree(_WORK, ignore_errors=True)
        shutil.rmtree(warm_dir, ignore_errors=True)
    # py4j logs its shutdown at exit: keep the JSON the last line.
    logging.getLogger("py4j").setLevel(logging.ERROR)
    cmp.print_summary(runs)
    summary = summary_json(runs, args, len(queries), ctx["cold"])
    summary = {**print_comparison(runs, args), **summary}
    print(json.dumps(summary))
    return 0 if summary["exact"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
