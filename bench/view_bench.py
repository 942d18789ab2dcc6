"""Benchmark: one tick of a self-correcting view against the alternatives.

Run on demand (``make bench`` runs the default mode), never in ``make test``::

    python bench/view_bench.py --rows 200000 --rates 0.01   # quick look, both views
    python bench/view_bench.py --acceptance [--scale 0.01]  # JSON summary as its last line
    python bench/view_bench.py --full-table [--scale 0.001] # both views, 1M/5M/10M x 0.1/1/10%
    python bench/view_bench.py --tiny-only                  # the 100-row tick's phases

Two views (see bench/view_bench_data.py): a projection, and ``orders JOIN
customers GROUP BY customer`` with ``SUM``/``COUNT``/``MAX``. Inputs are
merge-on-read Iceberg tables changed by Spark ``UPDATE``/``DELETE``/``INSERT``
at random keys over the whole table. In one warm SparkSession, every method
gets its own target built from the same starting state, then the same input
change, and only its tick is timed (in the order a, b, c, e, d, after a
warm-up that runs the query once for all):

* (a) ``INSERT OVERWRITE target <query>``;
* (b) ``MERGE INTO target USING (<query>)`` on the view's key, updating changed
  rows, inserting new ones, deleting the rest (``NOT MATCHED BY SOURCE``): the
  correct, drift-handling alternative;
* (c) the dbt-incremental idiom: recompute the groups the change touched and
  ``MERGE`` them on the key. It needs the change set in advance (the bench
  made the change, so it knows the keys; collecting them is not timed) and
  is not self-correcting;
* (d) ours, ``refresh="full"``: mint + write job + compare-and-append;
* (e) ours, ``refresh="auto"`` (incremental where the write job can).

After the tick every target must equal the query's result, else the bench
fails: a timing of a wrong answer means nothing. Bytes are what the tick
wrote: our staged bytes, and the files (data and delete files) added by each
baseline's snapshot. Ratios compare methods measured in the same run.
"""

from __future__ import annotations

import argparse
import json
import logging
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from airflow_provider_ct.core.appending import append_batch  # noqa: E402
from airflow_provider_ct.core.catalog import CatalogConfig  # noqa: E402
from airflow_provider_ct.core.manifest import read_manifest  # noqa: E402
from airflow_provider_ct.core.mint import mint  # noqa: E402
from airflow_provider_ct.core.query import parse_query  # noqa: E402
from airflow_provider_ct.core.staging import forget  # noqa: E402
from airflow_provider_ct.core.timeline import Timeline, WallClockUpper  # noqa: E402
from airflow_provider_ct.spark.conf import local_session  # noqa: E402
from airflow_provider_ct.spark.write_job import run_write  # noqa: E402
from bench.view_bench_data import JOIN_AGG, MOR, TOUCHED, VIEWS, ViewCase  # noqa: E402
from bench.view_bench_output import (  # noqa: E402
    LABELS,
    METHODS,
    TINY_TICKS,
    CaseResult,
    acceptance_summary,
    print_table,
    print_tiny,
)

NS = "bench"
#: Data files of each baseline target (ours are laid out by the write job).
TARGET_FILES = 8
MILLION = 1_000_000
#: --acceptance: orders at 1M/5M/10M, 50k changed (1% of 5M).
ACCEPTANCE_ROWS = (1 * MILLION, 5 * MILLION, 10 * MILLION)
ACCEPTANCE_CHANGED = 50_000
FULL_TABLE_ROWS = ACCEPTANCE_ROWS
FULL_TABLE_RATES: tuple[float, ...] = (0.001, 0.01, 0.1)


# --- helpers ----------------------------------------------------------------------------------


def drop_namespace_tables(spark: Any, ns: str) -> None:
    spark.sql(f"CREATE NAMESPACE IF NOT EXISTS ct.{ns}")
    for row in spark.sql(f"SHOW TABLES IN ct.{ns}").collect():
        spark.sql(f"DROP TABLE IF EXISTS ct.{ns}.{row.tableName} PURGE")


def snapshot_added_bytes(spark: Any, table: str) -> int:
    """Bytes of every file (data and delete files) the table's newest snapshot added.

    From the ``entries`` metadata table (status 1 = added), which also lists
    delete files; the summary's ``added-files-size`` should agree.
    """
    row = spark.sql(
        f"SELECT coalesce(sum(data_file.file_size_in_bytes), 0) AS b FROM {table}.entries "
        f"WHERE status = 1 AND snapshot_id = (SELECT snapshot_id FROM {table}.snapshots "
        "ORDER BY committed_at DESC LIMIT 1)"
    ).collect()[0]
    return int(row.b)


def timed(fn: Any) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def changed_condition(view: ViewCase) -> str:
    return " OR ".join(f"NOT (t.`{c}` <=> s.`{c}`)" for c in view.values)


# --- the methods ------------------------------------------------------------------------------


def overwrite(spark: Any, view: ViewCase, target: str) -> None:
    spark.sql(f"INSERT OVERWRITE {target} {view.sql(NS)}")


def merge_full(spark: Any, view: ViewCase, target: str) -> None:
    spark.sql(
        f"MERGE INTO {target} t USING ({view.sql(NS)}) s ON t.`{view.key}` = s.`{view.key}` "
        f"WHEN MATCHED AND ({changed_condition(view)}) THEN UPDATE SET * "
        "WHEN NOT MATCHED THEN INSERT * "
        "WHEN NOT MATCHED BY SOURCE THEN DELETE"
    )


def merge_touched(spark: Any, view: ViewCase, target: str) -> None:
    """The dbt-incremental idiom: recompute the touched keys, merge them on the key.

    A touched key without a row in the recomputation (a group that vanished)
    is deleted; everything else is left alone, which is why this needs the
    change set and cannot correct drift.
    """
    cols = ", ".join(f"`{c}`" for c in view.columns)
    spark.sql(
        f"MERGE INTO {target} t USING ("
        f"SELECT k.k AS __key, r.* FROM ct.{NS}.touched k "
        f"LEFT JOIN ({view.touched_sql(NS)}) r ON k.k = r.`{view.key}`"
        f") s ON t.`{view.key}` = s.__key "
        f"WHEN MATCHED AND s.`{view.key}` IS NULL THEN DELETE "
        f"WHEN MATCHED AND ({changed_condition(view)}) THEN UPDATE SET "
        + ", ".join(f"t.`{c}` = s.`{c}`" for c in view.values)
        + f" WHEN NOT MATCHED AND s.`{view.key}` IS NOT NULL THEN INSERT ({cols}) "
        f"VALUES ({', '.join(f's.`{c}`' for c in view.columns)})"
    )


def now_after_commits() -> int:
    """A tick time after every commit so far, already sealed by a zero-allowance clock."""
    t = int(time.time() * 1000)
    time.sleep(0.01)
    return t


def our_tick(
    spark: Any, config: CatalogConfig, sql: str, target: str, refresh: str, t: int
) -> dict[str, Any]:
    """One tick of our view at ``t``: mint, write job, compare-and-append (what the DAG runs).

    Returns the write report as JSON, plus ``tick_s`` (the whole tick).
    """
    from pyiceberg.exceptions import NoSuchTableError

    start = time.perf_counter()
    catalog = config.load()
    inputs = {
        name: Timeline.of(catalog.load_table(name), policy=WallClockUpper(0))
        for name in parse_query(sql, target=target).inputs
    }
    try:
        target_timeline: Timeline | None = Timeline.of(catalog.load_table(target))
    except NoSuchTableError:
        target_timeline = None
    decision = mint(target=target, target_timeline=target_timeline, time=t, inputs=inputs)
    if decision.description is None:
        raise SystemExit(f"mint refused tick {t} of {target}: {decision.reason}")
    report = run_write(spark, config, sql, decision.description, refresh=refresh)
    if report.status != "staged":
        raise SystemExit(f"write job for {target} did not stage: {report.to_json()}")
    if report.manifest is not None:
        batch = read_manifest(report.manifest)
        result = append_batch(catalog.load_table(batch.target), batch)
        if not result.landed:
            raise SystemExit(f"append to {target} did not land: {result}")
        forget(report.manifest)
    out = {k: v for k, v in report.to_json().items() if k not in ("manifest", "description_id")}
    out["tick_s"] = round(time.perf_counter() - start, 3)
    return out


# --- one case ---------------------------------------------------------------------------------


def target_name(view: ViewCase, method: str) -> str:
    return f"{NS}.{view.name}_{method}"


def check_equal(spark: Any, view: ViewCase, expected: str) -> None:
    """Every method's target must hold exactly the query's rows; fail loudly otherwise."""
    cols = ", ".join(f"`{c}`" for c in view.columns)
    wrong = {}
    for method in METHODS:
        table = f"ct.{target_name(view, method)}"
        diff = spark.sql(
            f"SELECT count(*) AS n FROM ((SELECT {cols} FROM {expected} EXCEPT ALL "
            f"SELECT {cols} FROM {table}) UNION ALL (SELECT {cols} FROM {table} "
            f"EXCEPT ALL SELECT {cols} FROM {expected}))"
        ).collect()[0]
        if diff.n:
            wrong[LABELS[method]] = int(diff.n)
    if wrong:
        raise SystemExit(
            f"{view.name}: methods disagree with the query after the tick "
            f"(rows differing per method: {wrong}); the timings are void"
        )


def prior_round(
    spark: Any, config: CatalogConfig, view: ViewCase, rows: int, changed: int, seed: int
) -> float:
    """One untimed change and tick of every method, before the timed one; (e)'s seconds.

    A view on a schedule ticks after a tick: our warm driver has decoded the
    inputs' unchanged files before (its file cache), Spark has planned the
    baselines' statements before. The timed round measures that steady
    state; (e)'s seconds here (the first incremental tick after the build)
    are printed beside it.
    """
    view.change(spark, NS, rows, changed, seed)
    for method, run in {"a": overwrite, "b": merge_full, "c": merge_touched}.items():
        run(spark, view, f"ct.{target_name(view, method)}")
    t = now_after_commits()
    first = our_tick(spark, config, view.sql(NS), target_name(view, "e"), "auto", t)
    our_tick(spark, config, view.sql(NS), target_name(view, "d"), "full", t)
    for name in (TOUCHED, f"{TOUCHED}_raw"):
        spark.sql(f"DROP TABLE IF EXISTS ct.{NS}.{name} PURGE")
    return float(first["tick_s"])


def run_case(
    spark: Any,
    config: CatalogConfig,
    view: ViewCase,
    rows: int,
    changed: int,
    seed: int,
    prior: int = 1,
) -> CaseResult:
    """Build, change and tick ``prior`` times untimed, then once timed; check every method.

    Only the last round's ticks are timed. Each round's change inserts keys
    past the rounds' before it, so no key is inserted twice.
    """
    drop_namespace_tables(spark, NS)
    sql = view.sql(NS)
    view.build(spark, NS, rows, seed)
    # Starting state: ours materialize the view at tick 1, the baselines by CTAS.
    t1 = now_after_commits()
    for method, refresh in (("d", "full"), ("e", "auto")):
        our_tick(spark, config, sql, target_name(view, method), refresh, t1)
    for method in ("a", "b", "c"):
        spark.sql(
            f"CREATE TABLE ct.{target_name(view, method)} USING iceberg TBLPROPERTIES ({MOR}) "
            f"AS SELECT /*+ REPARTITION({TARGET_FILES}) */ * FROM ({sql}) q"
        )
    cold = [
        prior_round(spark, config, view, rows + n * changed, changed, seed + 100 * (n + 1))
        for n in range(prior)
    ]
    timed_rows = rows + prior * changed  # keys past every earlier round's inserts
    result = CaseResult(view.name, rows, view.change(spark, NS, timed_rows, changed, seed))
    result.prior_e = cold
    # The expected result (also warms caches and the JIT for every method alike).
    expected = f"ct.{NS}.expected"
    spark.sql(f"CREATE TABLE {expected} USING iceberg AS {sql}")
    t2 = now_after_commits()
    baselines = {"a": overwrite, "b": merge_full, "c": merge_touched}
    for method, run in baselines.items():
        target = f"ct.{target_name(view, method)}"
        result.seconds[method] = timed(lambda run=run, target=target: run(spark, view, target))
        result.bytes[method] = snapshot_added_bytes(spark, target)
    # (e) before (d): the headline ratios are (e)'s, so (e) must not run on what (d) warmed.
    for method, refresh in (("e", "auto"), ("d", "full")):
        report = our_tick(spark, config, sql, target_name(view, method), refresh, t2)
        result.seconds[method] = report["tick_s"]
        result.bytes[method] = int(report["staged_bytes"])
        result.reports[method] = report
    check_equal(spark, view, expected)
    return result


# --- the tiny tick ----------------------------------------------------------------------------


def tiny_tick(spark: Any, config: CatalogConfig) -> dict[str, Any]:
    """100 orders, one changed, the GROUP BY view, through run_write on the warm session.

    What a tick costs when almost nothing changed: the fixed cost per tick.
    """
    ns = "tiny"
    drop_namespace_tables(spark, ns)
    JOIN_AGG.build(spark, ns, 100, 7)
    sql, target = JOIN_AGG.sql(ns), f"{ns}.join_agg"
    our_tick(spark, config, sql, target, "auto", now_after_commits())
    first: dict[str, Any] = {}
    for n in range(TINY_TICKS):
        update = "UPDATE ct.{}.orders SET o_totalprice = o_totalprice + 1 WHERE o_orderkey = {}"
        spark.sql(update.format(ns, 42 + n))
        report = our_tick(spark, config, sql, target, "auto", now_after_commits())
        first = first or report
        expected = spark.sql(sql).collect()
        actual = spark.table(f"ct.{target}").collect()
        if sorted(map(tuple, expected)) != sorted(map(tuple, actual)):
            raise SystemExit(f"tiny tick: {target} does not equal its query")
    drop_namespace_tables(spark, ns)
    # The first incremental tick of a session also pays Spark's first planning
    # and code generation for the query's shapes; a warm driver pays it once.
    report["first_tick_phases"] = first.get("phases", {})
    return report


# --- main -------------------------------------------------------------------------------------


def warm_up(spark: Any, config: CatalogConfig, scale: float, prior: int) -> None:
    """One untimed case at a tenth of the smallest size before the acceptance cases.

    Without it the first case (1M) also pays the session's first planning,
    code generation and JIT of every method's plans, which later cases do
    not, and ``growth_10x`` (10M over 1M) comes out flattered.
    """
    rows = max(1, round(ACCEPTANCE_ROWS[0] * scale / 10))
    changed = max(1, round(ACCEPTANCE_CHANGED * scale / 10))
    started = time.perf_counter()
    run_case(spark, config, JOIN_AGG, rows, changed, 1, prior)
    took = time.perf_counter() - started
    print(f"warm-up {JOIN_AGG.name} rows={rows:,}: {took:.1f}s", flush=True)


def plan(args: argparse.Namespace) -> list[tuple[ViewCase, int, int]]:
    """(view, input rows, changed rows) per case, sizes multiplied by ``--scale``."""

    def scaled(n: float) -> int:
        return max(1, round(n * args.scale))

    if args.acceptance:
        return [(JOIN_AGG, scaled(r), scaled(ACCEPTANCE_CHANGED)) for r in ACCEPTANCE_ROWS]
    if args.full_table:
        rows_list, rates = [scaled(r) for r in FULL_TABLE_ROWS], FULL_TABLE_RATES
        views = list(VIEWS.values())
    else:
        rows_list = [scaled(int(r)) for r in args.rows.split(",")]
        rates = tuple(float(r) for r in args.rates.split(","))
        views = [VIEWS[v] for v in args.views.split(",")]
    return [
        (view, rows, max(3, round(rows * rate)))
        for view in views
        for rows in rows_list
        for rate in rates
    ]


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--rows", default="1000000,5000000", help="input rows (orders), a list")
    parser.add_argument("--rates", default="0.001,0.01,0.1", help="changed share, a list")
    parser.add_argument("--views", default=",".join(VIEWS), help=f"of {', '.join(VIEWS)}")
    parser.add_argument(
        "--acceptance",
        action="store_true",
        help="join_agg at 5M orders/1%% changed and 50k changed over 1M and 10M; "
        "last line: JSON with incr_over_b, incr_over_c, growth_10x, staged_over_a",
    )
    parser.add_argument(
        "--full-table", action="store_true", help="both views, 1M/5M/10M x 0.1/1/10%%"
    )
    parser.add_argument("--scale", type=float, default=1.0, help="multiply every size (try 0.01)")
    parser.add_argument("--tiny-only", action="store_true", help="only the 100-row tick")
    parser.add_argument("--no-tiny", action="store_true", help="skip the 100-row tick")
    parser.add_argument(
        "--prior-ticks",
        type=int,
        default=1,
        help="untimed change-and-tick rounds before the timed one (0: time the first tick)",
    )
    args = parser.parse_args()
    if args.acceptance and args.full_table:
        parser.error("--acceptance and --full-table are separate runs")

    logging.basicConfig(level=logging.WARNING)
    logging.getLogger("airflow_provider_ct.write_job").setLevel(logging.INFO)
    root = Path(tempfile.mkdtemp(prefix="ct-bench-"))
    config = CatalogConfig(uri=f"sqlite:///{root / 'catalog.db'}", warehouse=(root / "wh").as_uri())
    config.load()
    spark = local_session(
        config,
        master="local[2]",
        app_name="ct-bench",
        **{
            "spark.driver.memory": "6g",
            "spark.sql.shuffle.partitions": "8",
            "spark.sql.catalog.ct.read.split.target-size": str(32 * 1024 * 1024),
        },
    )
    spark.sparkContext.setLogLevel("ERROR")
    results: list[CaseResult] = []
    tiny: dict[str, Any] | None = None
    try:
        if args.acceptance:
            warm_up(spark, config, args.scale, args.prior_ticks)
        for index, (view, rows, changed) in enumerate([] if args.tiny_only else plan(args)):
            r = run_case(spark, config, view, rows, changed, index + 3, args.prior_ticks)
            results.append(r)
            print(
                f"done {view.name} rows={rows:,} changed={r.changed}: "
                + ", ".join(f"{m} {r.seconds[m]:.2f}s" for m in METHODS)
                + f" (e before: {r.prior_e})",
                flush=True,
            )
            for method in ("d", "e"):
                print(f"  {LABELS[method]} report: {json.dumps(r.reports[method])}", flush=True)
        if not args.no_tiny:
            tiny = tiny_tick(spark, config)
    finally:
        spark.stop()
        shutil.rmtree(root, ignore_errors=True)
    if results:
        print_table(results)
    if tiny is not None:
        print_tiny(tiny)
    if args.acceptance:
        print(json.dumps(acceptance_summary(results)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
