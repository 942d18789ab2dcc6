"""Benchmark: a continual task's tick costs what changed, not what exists.

Run on demand (``python bench/ct_bench.py``). Builds an input of 1M and of
10M rows, starts an UPSERT task on each, appends the same 1,000 new rows, and
times one tick (mint + continual job + compare-and-append) in the same warm
SparkSession. Prints the 10M/1M time ratio (target: under 1.2).
"""

from __future__ import annotations

import argparse
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
from airflow_provider_ct.core.continual import parse_continual_task  # noqa: E402
from airflow_provider_ct.core.manifest import read_manifest  # noqa: E402
from airflow_provider_ct.core.mint import mint  # noqa: E402
from airflow_provider_ct.core.staging import forget  # noqa: E402
from airflow_provider_ct.core.timeline import Timeline, WallClockUpper  # noqa: E402
from airflow_provider_ct.spark.conf import local_session  # noqa: E402
from airflow_provider_ct.spark.continual_job import run_continual  # noqa: E402

TASK = """
CREATE CONTINUAL TASK upsert_{n} (key BIGINT, val BIGINT) ON INPUT events_{n}
WITH (SNAPSHOT = false) AS (
    DELETE FROM upsert_{n} WHERE key IN (SELECT key FROM events_{n});
    INSERT INTO upsert_{n} SELECT key, max(val) FROM events_{n} GROUP BY key;
)
"""


def tick(spark: Any, config: CatalogConfig, task_sql: str) -> tuple[float, dict]:
    t = int(time.time() * 1000)
    time.sleep(0.01)
    start = time.perf_counter()
    catalog = config.load()
    task = parse_continual_task(task_sql, default_namespace="bench")
    try:
        out = Timeline.of(catalog.load_table(task.name))
    except Exception:
        out = None
    inputs = {task.input: Timeline.of(catalog.load_table(task.input), policy=WallClockUpper(0))}
    decision = mint(target=task.name, target_timeline=out, time=t, inputs=inputs)
    assert decision.description is not None, decision.reason
    report = run_continual(spark, config, task_sql, "bench", decision.description)
    batch = read_manifest(report.manifest) if report.manifest else None
    if batch is not None:
        result = append_batch(catalog.load_table(batch.target), batch)
        assert result.landed, result
        forget(report.manifest)  # type: ignore[arg-type]
    return time.perf_counter() - start, report.to_json()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", default="1000000,10000000")
    parser.add_argument("--new-rows", type=int, default=1000)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="ct-bench-"))
    config = CatalogConfig(uri=f"sqlite:///{root / 'catalog.db'}", warehouse=(root / "wh").as_uri())
    config.load()
    spark = local_session(
        config,
        master="local[2]",
        app_name="ct-bench-continual",
        **{"spark.driver.memory": "6g", "spark.sql.shuffle.partitions": "8"},
    )
    spark.sparkContext.setLogLevel("ERROR")
    spark.sql("CREATE NAMESPACE IF NOT EXISTS ct.bench")
    sizes = [int(s) for s in args.sizes.split(",")]
    timings: dict[int, list[float]] = {}
    try:
        for n in sizes:
            spark.sql(
                f"CREATE TABLE ct.bench.events_{n} USING iceberg AS SELECT /*+ REPARTITION(8) */ "
                f"id % 100000 AS key, id AS val FROM range({n})"
            )
            task_sql = TASK.format(n=n)
            tick(spark, config, task_sql)  # the task's as-of: nothing written
            timings[n] = []
            for round_no in range(args.repeat):
                spark.sql(
                    f"INSERT INTO ct.bench.events_{n} SELECT id % 5000 AS key, "
                    f"id + {round_no} AS val FROM range({args.new_rows})"
                )
                seconds, report = tick(spark, config, task_sql)
                assert report["input_times"], report
                timings[n].append(seconds)
                print(
                    f"input {n:,} rows, tick {round_no + 1}: {seconds:.2f}s "
                    f"(+{report['rows_to_insert']} -{report['rows_to_delete']})",
                    flush=True,
                )
    finally:
        spark.stop()
        shutil.rmtree(root, ignore_errors=True)
    best = {n: min(ts) for n, ts in timings.items()}
    print()
    print("| input rows | new rows | best tick s | all ticks s |")
    print("|---|---|---|---|")
    for n in sizes:
        print(
            f"| {n:,} | {args.new_rows:,} | {best[n]:.2f} | "
            f"{', '.join(f'{t:.2f}' for t in timings[n])} |"
        )
    if len(sizes) >= 2:
        ratio = best[sizes[-1]] / best[sizes[0]]
        print(f"\nrehydration ratio {sizes[-1]:,}/{sizes[0]:,} rows: {ratio:.2f} (target < 1.2)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
