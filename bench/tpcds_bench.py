"""The 99 TPC-DS queries as views: which are accepted, exact, incremental, and why not.

Issue 58's second measure of generality (the first is tests/test_sqlgen.py).
Run from the repository root::

    .venv/bin/python bench/tpcds_bench.py --sf 0.01 --ticks 3 [--queries 1,2,3] [--out FILE]
        [--refresh full]   # what parse accepts must also run when every tick is full

* **Data and queries** from DuckDB's ``tpcds`` extension (bench/tpcds_gen.py,
  run in a throwaway environment with DuckDB 1.5.5, created on first use
  under ``~/.cache/airflow-provider-ct/tpcds-venv``), loaded into Iceberg
  tables ``tpcds.<table>`` of a SQLite catalog in a temporary folder, the
  fact tables and ``item``/``customer`` merge-on-read.
* **Views**: each query without its top-level ``ORDER BY``/``LIMIT`` (a view
  is a multiset), unnamed or repeated output columns named ``c<i>`` (a
  table's columns need names), translated from DuckDB to Spark SQL by
  sqlglot. Each is accepted by the view factory (``materialized_view``)
  or refused with its reason, then ticked in-process: mint,
  ``run_write(refresh="auto")``, the append operator, as a DAG's tasks do.
* **Ticks**: the first creates every view; each later one follows the
  bench's changes, as upstream jobs would commit them with Spark SQL:
  deletes and re-inserted copies of sales and returns, merge-on-read
  updates of ``store_sales``, ``item`` and ``customer``.
* **Oracle**: right after its changes the bench notes every input's snapshot
  id (never the product's pins); DuckDB runs the query's own DuckDB text over
  those snapshots, read by PyIceberg. Numbers compare rounded to 6
  significant digits (Spark's decimal averages against DuckDB's doubles); a
  tick that differs is the product's only if Spark's own result over the
  same inputs agrees with DuckDB.
* **Settings**: the size rules of ``auto`` (``CT_FULL_BELOW_ROWS`` and the
  others) are off, as in the tests: at SF 0.01 they would send every tick in
  full, and this bench measures which shapes are maintained incrementally.

It prints the numbers of tests/test_sqlgen.py (share incremental on every
busy tick, every reason a busy tick ran in full, views accepted at parse
whose tick failed) and writes them, per query, to ``--out``.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
for _name in (
    "CT_FULL_BELOW_ROWS",
    "CT_RETRY_INCREMENTAL_AFTER",
    "CT_FULL_ABOVE_CHANGE",
    "CT_FULL_ABOVE_READ_SHARE",
):
    os.environ.setdefault(_name, "0")
os.environ.setdefault("AIRFLOW__CORE__LOAD_EXAMPLES", "False")

import sqlglot  # noqa: E402

from bench.tpcds_views import Inputs, TpcdsView, views  # noqa: E402
from tests.sqlgen.report import (  # noqa: E402
    ENGINES_DIFFER,
    ORACLE_REFUSED,
    PARSE_REFUSED,
    SPARK_REFUSED,
    TICK_FAILED,
    WRONG,
    Outcome,
    Summary,
)

GENERATOR = ROOT / "bench" / "tpcds_gen.py"
VENV = Path.home() / ".cache" / "airflow-provider-ct" / "tpcds-venv"
PACKAGES = ("duckdb==1.5.5", "duckdb-extension-tpcds==1.5.5")
CONN = "ct_tpcds_bench"


def tpcds_python() -> Path:
    """The throwaway environment's interpreter, created (with ``uv``) on first use."""
    python = VENV / "bin" / "python"
    probe = [str(python), "-c", "import duckdb, duckdb_extension_tpcds"]
    if python.exists() and subprocess.run(probe, capture_output=True).returncode == 0:
        return python
    uv = Path(sys.executable).parent / "uv"
    subprocess.run([str(uv), "venv", "-q", "--python", sys.executable, str(VENV)], check=True)
    subprocess.run(
        [str(uv), "pip", "install", "-q", "--python", str(python), *PACKAGES], check=True
    )
    return python


def generate(sf: float, folder: Path) -> dict[str, str]:
    """The tables as Parquet in ``folder``; the 99 queries by number."""
    cmd = [str(tpcds_python()), str(GENERATOR), "--sf", str(sf), "--out", str(folder)]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True)
    print(f"tpcds: generated at sf={sf}: {out.stdout.strip()}", flush=True)
    queries: dict[str, str] = json.loads((folder / "queries.json").read_text())
    return queries


def _first_line(exc: BaseException) -> str:
    """The error's first line; for an error of the JVM, the line naming Spark's error."""
    lines = str(exc).strip().splitlines() or [""]
    named = [line for line in lines if "Exception: " in line or "Error: " in line]
    return f"{type(exc).__name__}: {(named or lines)[0].strip()}"[:1000]


class Bench:
    """The views of one run over one history of the inputs."""

    def __init__(
        self, spark: Any, inputs: Inputs, queries: list[TpcdsView], refresh: str = "auto"
    ) -> None:
        self.refresh = refresh
        self.spark, self.inputs = spark, inputs
        self.views = queries
        self.outcomes = {v.number: Outcome(0, v.number, v.spark_sql, ()) for v in queries}

    def accept(self, view: TpcdsView) -> bool:
        """The view factory accepts the query, and Spark and DuckDB agree on its rows."""
        from airflow.sdk import DAG

        from airflow_provider_ct import materialized_view
        from airflow_provider_ct.exceptions import QueryError
        from airflow_provider_ct.views import explain_view

        out = self.outcomes[view.number]
        try:
            with DAG(f"tpcds_{view.number}", schedule=None):
                materialized_view(target=view.target, sql=view.spark_sql, iceberg_conn_id=CONN)
            strategy, why = explain_view(view.spark_sql, target=view.target)[:2]
        except (QueryError, sqlglot.errors.SqlglotError) as exc:
            out.status, out.error = PARSE_REFUSED, _first_line(exc)
            return False
        out.plan, out.plan_reason = strategy[10:], why[5:]
        return self.engines_agree(view)

    def engines_agree(self, view: TpcdsView) -> bool:
        out = self.outcomes[view.number]
        try:
            spark_rows = self.inputs.spark_rows(self.spark, view)
        except Exception as exc:
            out.status, out.error = SPARK_REFUSED, _first_line(exc)
            return False
        try:
            want = self.inputs.oracle(view)
        except Exception as exc:
            out.status, out.error = ORACLE_REFUSED, _first_line(exc)
            return False
        if spark_rows != want:
            only_spark, only_duckdb = spark_rows - want, want - spark_rows
            out.status = ENGINES_DIFFER
            out.error = f"Spark only {list(only_spark)[:3]}; DuckDB only {list(only_duckdb)[:3]}"
            return False
        return True

    def tick(self, view: TpcdsView, tick_time: int, busy: bool) -> None:
        out = self.outcomes[view.number]
        started = time.monotonic()
        try:
            report = self.inputs.tick(self.spark, view, tick_time, CONN, self.refresh)
        except Exception as exc:
            out.status, out.failed_tick, out.error = (
                TICK_FAILED,
                len(out.strategies),
                _first_line(exc),
            )
            return
        out.seconds.append(round(time.monotonic() - started, 3))
        out.record(report.extra, str(report.reason), busy)
        if self.inputs.view_rows(view) != self.inputs.oracle(view):
            out.status, out.failed_tick = WRONG, len(out.strategies) - 1
            out.error = f"strategy {out.strategies[-1]}: {out.reasons[-1]}"
            if not self.engines_agree(view):
                out.status = ENGINES_DIFFER

    def run(self, ticks: int) -> list[Outcome]:
        self.inputs.seal(1_000)
        live = [v for v in self.views if self.accept(v)]
        print(f"tpcds: {len(live)} of {len(self.views)} views accepted and agreed", flush=True)
        for step in range(ticks):
            tick_time = 1_000 * (step + 1)
            if step:
                self.inputs.change(self.spark, step)
                self.inputs.seal(tick_time)
            started = time.monotonic()
            for view in live:
                self.tick(view, tick_time, busy=step > 0 and view.reads_changed())
            live = [v for v in live if self.outcomes[v.number].failed_tick is None]
            print(
                f"tpcds: tick {step + 1} of {ticks} in {time.monotonic() - started:.0f}s",
                flush=True,
            )
        return list(self.outcomes.values())


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--sf", type=float, default=0.01)
    parser.add_argument(
        "--ticks", type=int, default=3, help="ticks per view, the first creating it"
    )
    parser.add_argument("--queries", default="", help="comma-separated numbers (default all 99)")
    parser.add_argument(
        "--refresh", default="auto", choices=("auto", "full"), help="the views' refresh mode"
    )
    parser.add_argument("--out", type=Path, default=ROOT / "test-artifacts" / "tpcds-bench.json")
    args = parser.parse_args()
    from airflow_provider_ct.core.catalog import CatalogConfig
    from airflow_provider_ct.spark.conf import local_session, spark_jars

    folder = Path(tempfile.mkdtemp(prefix="tpcds-bench-"))
    texts = generate(args.sf, folder / "data")
    config = CatalogConfig(
        name="ct", uri=f"sqlite:///{folder / 'catalog.db'}", warehouse=(folder / "wh").as_uri()
    )
    os.environ[f"AIRFLOW_CONN_{CONN.upper()}"] = json.dumps(
        {
            "conn_type": "iceberg_catalog",
            "extra": {"uri": config.uri, "warehouse": config.warehouse, "catalog_name": "ct"},
        }
    )
    inputs = Inputs(config, folder / "data")
    numbers = [int(n) for n in args.queries.split(",") if n] or None
    spark = local_session(
        config,
        master="local[2]",
        app_name="tpcds-bench",
        **{"spark.sql.shuffle.partitions": "4", "spark.jars": ",".join(spark_jars(config))},
    )
    spark.sparkContext.setLogLevel("ERROR")
    started = time.monotonic()
    bench = Bench(spark, inputs, views(texts, numbers, set(inputs.tables)), args.refresh)
    outcomes = bench.run(args.ticks)
    summary = Summary(outcomes, time.monotonic() - started)
    print(summary.text(), flush=True)
    summary.write(args.out)
    print(f"tpcds: written to {args.out}", flush=True)
    spark.stop()


if __name__ == "__main__":
    main()
