"""Benchmark: one tick of a self-correcting view against the alternatives.

Run on demand (``make bench`` or ``python bench/view_bench.py``), never in
``make test``. For each table size and change rate, in the same run and the
same warm SparkSession, on data that does not compress away (random strings
and doubles), with updates, deletes and inserts spread over the whole table:

* ``ours``: mint + correction (signed fingerprint aggregation, position
  deletes) + compare-and-append;
* ``(a) overwrite``: ``INSERT OVERWRITE target SELECT * FROM source``;
* ``(b) merge full``: ``MERGE INTO target USING <full query result> ... WHEN NOT
  MATCHED BY SOURCE THEN DELETE`` (merge-on-read): the correct, drift-handling
  alternative;
* ``(c) merge changes``: ``MERGE`` of only the changed rows (needs the change
  set in advance; not self-correcting).

Prints seconds, bytes written, and ratios ours/(b) time and ours/(a) bytes.
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

from airflow_provider_ct.core.catalog import CatalogConfig  # noqa: E402
from airflow_provider_ct.core.mint import mint  # noqa: E402
from airflow_provider_ct.core.staging import append_batch, forget, read_manifest  # noqa: E402
from airflow_provider_ct.core.timeline import Timeline, WallClockUpper  # noqa: E402
from airflow_provider_ct.spark.conf import local_session  # noqa: E402
from airflow_provider_ct.spark.write_job import run_write  # noqa: E402

VIEW_SQL = "SELECT id, s, d FROM bench.src"
MOR = (
    "'format-version'='2', 'write.delete.mode'='merge-on-read', "
    "'write.update.mode'='merge-on-read', 'write.merge.mode'='merge-on-read'"
)


def added_bytes(spark: Any, table: str) -> int:
    row = spark.sql(
        f"SELECT summary FROM ct.{table}.snapshots ORDER BY committed_at DESC LIMIT 1"
    ).collect()[0]
    return int(row.summary.get("added-files-size", "0"))


def now_after_commits() -> int:
    """A tick time after every commit so far, already sealed by a zero-allowance clock."""
    t = int(time.time() * 1000)
    time.sleep(0.01)
    return t


def timed(fn: Any) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def run_case(spark: Any, config: CatalogConfig, rows: int, rate: float, seed: int) -> dict:
    spark.sql("CREATE NAMESPACE IF NOT EXISTS ct.bench")
    for t in ("src", "view", "a", "b", "c", "changes"):
        spark.sql(f"DROP TABLE IF EXISTS ct.bench.{t} PURGE")
    catalog = config.load()
    # Source: random 16-char strings and doubles, ~8 files.
    spark.sql(
        f"CREATE TABLE ct.bench.src USING iceberg TBLPROPERTIES ({MOR}) AS "
        f"SELECT /*+ REPARTITION(8) */ id, "
        f"substring(sha2(cast(id * {seed} + 7 AS STRING), 256), 1, 16) AS s, "
        f"rand({seed}) AS d FROM range({rows})"
    )
    # The view, materialized by us at tick 1; baselines start from the same contents.
    tick(spark, config, catalog, now_after_commits())
    for name in ("a", "b", "c"):
        spark.sql(
            f"CREATE TABLE ct.bench.{name} USING iceberg TBLPROPERTIES ({MOR}) AS "
            "SELECT /*+ REPARTITION(8) */ * FROM ct.bench.src"
        )
    # The change: updates, deletes and inserts spread over the whole table.
    third = max(1, int(rows * rate / 3))
    modulus = max(1, rows // third)
    spark.sql(
        "CREATE TABLE ct.bench.changes USING iceberg AS "
        f"SELECT id, 'U' AS op, substring(sha2(cast(id AS STRING), 224), 1, 16) AS s, "
        f"rand({seed + 1}) AS d FROM ct.bench.src WHERE pmod(id * 7919, {modulus}) = 0 "
        f"UNION ALL SELECT id, 'D' AS op, s, d FROM ct.bench.src "
        f"WHERE pmod(id * 7919, {modulus}) = 1 "
        f"UNION ALL SELECT id + {rows} AS id, 'I' AS op, "
        f"substring(sha2(cast(id AS STRING), 384), 1, 16) AS s, rand({seed + 2}) AS d "
        f"FROM range({third})"
    )
    changed = spark.table("ct.bench.changes").count()
    spark.sql(
        "MERGE INTO ct.bench.src t USING ct.bench.changes c ON t.id = c.id "
        "WHEN MATCHED AND c.op = 'D' THEN DELETE "
        "WHEN MATCHED THEN UPDATE SET t.s = c.s, t.d = c.d "
        "WHEN NOT MATCHED THEN INSERT (id, s, d) VALUES (c.id, c.s, c.d)"
    )
    t2 = now_after_commits()
    result: dict[str, Any] = {"rows": rows, "rate": rate, "changed": changed}
    result["ours_s"], result["ours_bytes"] = 0.0, 0
    start = time.perf_counter()
    staged = tick(spark, config, catalog, t2)
    result["ours_s"] = time.perf_counter() - start
    result["ours_bytes"] = staged
    result["a_s"] = timed(
        lambda: spark.sql("INSERT OVERWRITE ct.bench.a SELECT * FROM ct.bench.src")
    )
    result["a_bytes"] = added_bytes(spark, "bench.a")
    result["b_s"] = timed(
        lambda: spark.sql(
            "MERGE INTO ct.bench.b t USING (SELECT * FROM ct.bench.src) s ON t.id = s.id "
            "WHEN MATCHED AND (t.s <> s.s OR t.d <> s.d) THEN UPDATE SET * "
            "WHEN NOT MATCHED THEN INSERT * WHEN NOT MATCHED BY SOURCE THEN DELETE"
        )
    )
    result["b_bytes"] = added_bytes(spark, "bench.b")
    result["c_s"] = timed(
        lambda: spark.sql(
            "MERGE INTO ct.bench.c t USING ct.bench.changes c ON t.id = c.id "
            "WHEN MATCHED AND c.op = 'D' THEN DELETE "
            "WHEN MATCHED THEN UPDATE SET t.s = c.s, t.d = c.d "
            "WHEN NOT MATCHED THEN INSERT (id, s, d) VALUES (c.id, c.s, c.d)"
        )
    )
    result["c_bytes"] = added_bytes(spark, "bench.c")
    # Every strategy must end with the same contents (else the timing means nothing).
    for name in ("a", "b", "c"):
        diff = spark.sql(
            f"(SELECT * FROM ct.bench.view EXCEPT ALL SELECT * FROM ct.bench.{name}) UNION ALL "
            f"(SELECT * FROM ct.bench.{name} EXCEPT ALL SELECT * FROM ct.bench.view)"
        ).count()
        if diff:
            raise SystemExit(f"strategy {name} disagrees with the view on {diff} rows")
    return result


def tick(spark: Any, config: CatalogConfig, catalog: Any, t: int) -> int:
    """One view tick at ``t``: mint, write, append. Returns bytes staged."""
    src = Timeline.of(catalog.load_table("bench.src"), policy=WallClockUpper(0))
    try:
        target = Timeline.of(catalog.load_table("bench.view"))
    except Exception:
        target = None
    decision = mint(target="bench.view", target_timeline=target, time=t, inputs={"bench.src": src})
    assert decision.description is not None, decision.reason
    report = run_write(spark, config, VIEW_SQL, decision.description)
    if report.manifest is None:
        return 0
    batch = read_manifest(report.manifest)
    result = append_batch(catalog.load_table(batch.target), batch)
    assert result.landed, result
    forget(report.manifest)
    return report.staged_bytes


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rows", default="1000000,5000000")
    parser.add_argument("--rates", default="0.001,0.01,0.1")
    args = parser.parse_args()
    import logging

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
    results = []
    try:
        for rows in [int(r) for r in args.rows.split(",")]:
            for rate in [float(r) for r in args.rates.split(",")]:
                results.append(run_case(spark, config, rows, rate, seed=len(results) + 3))
                r = results[-1]
                print(f"done rows={rows} rate={rate}: ours {r['ours_s']:.1f}s", flush=True)
    finally:
        spark.stop()
        shutil.rmtree(root, ignore_errors=True)
    print()
    print(
        "| rows | changed | ours s | (a) overwrite s | (b) merge full s | (c) merge changes s "
        "| ours/(b) time | ours MB | (a) MB | (b) MB | (c) MB | ours/(a) bytes |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for r in results:
        mb = 1024 * 1024
        print(
            f"| {r['rows']:,} | {r['rate']:.1%} ({r['changed']:,}) | {r['ours_s']:.1f} | "
            f"{r['a_s']:.1f} | {r['b_s']:.1f} | {r['c_s']:.1f} | {r['ours_s'] / r['b_s']:.2f}x | "
            f"{r['ours_bytes'] / mb:.2f} | {r['a_bytes'] / mb:.1f} | {r['b_bytes'] / mb:.2f} | "
            f"{r['c_bytes'] / mb:.2f} | {r['ours_bytes'] / max(1, r['a_bytes']):.2%} |"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
