"""Benchmark: a small view's tick through ``dag.test()``, spark-submit against the warm engine.

Run on demand (``python bench/engine_bench.py``), never in ``make test``.
For each engine it ticks the same small view (the example shop: a dozen
customers, a few dozen orders, a join and an aggregation; the inputs change
every tick) ``--ticks`` times through ``dag.test()`` on a real Airflow
metadata database, and prints per tick the whole DAG run's wall time and
the write task's own duration (from its task instance). The warm engine's
first tick includes starting its driver; later ticks reuse it.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests" / "dags"))
_HOME = tempfile.mkdtemp(prefix="ct-bench-airflow-")
os.environ.setdefault("AIRFLOW_HOME", _HOME)
os.environ.setdefault("AIRFLOW__DATABASE__SQL_ALCHEMY_CONN", f"sqlite:///{_HOME}/airflow.db")
os.environ.setdefault("AIRFLOW__CORE__LOAD_EXAMPLES", "False")
os.environ.setdefault("AIRFLOW__CORE__DAGS_FOLDER", str(ROOT / "tests" / "dags"))
os.environ.setdefault("AIRFLOW__CORE__UNIT_TEST_MODE", "True")

from airflow_provider_ct.core.catalog import CatalogConfig  # noqa: E402
from airflow_provider_ct.engine import protocol  # noqa: E402
from bench.bench_env import stop_drivers  # noqa: E402


def _durations(dag_id: str, run_id: str) -> dict[str, float]:
    from airflow.models import TaskInstance
    from airflow.utils.session import create_session
    from sqlalchemy import select

    with create_session() as session:
        tis = session.scalars(
            select(TaskInstance).where(TaskInstance.dag_id == dag_id, TaskInstance.run_id == run_id)
        ).all()
        return {ti.task_id: float(ti.duration or 0.0) for ti in tis}


def bench(engine: str, ticks: int) -> list[tuple[float, float]]:
    """(run seconds, write-task seconds) per tick of a fresh view ticked with ``engine``."""
    import warm_revenue  # dag.test() needs DAGs its bundle (tests/dags) defines

    name = engine.replace("-", "_")
    dag = getattr(warm_revenue, f"bench_{name}")
    times = []
    for hour in range(ticks):
        started = time.perf_counter()
        run = dag.test(logical_date=datetime(2026, 3, 1, hour, tzinfo=UTC))
        elapsed = time.perf_counter() - started
        if run.state != "success":
            raise SystemExit(f"{engine} tick {hour} ended {run.state}")
        write = _durations(dag.dag_id, run.run_id)[f"view_bench_{name}_revenue.write"]
        times.append((elapsed, write))
        print(f"{engine:13s} tick {hour + 1}: dag run {elapsed:6.1f} s, write task {write:6.1f} s")
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--ticks", type=int, default=4)
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="ct-bench-"))
    warm_dir = Path(tempfile.mkdtemp(prefix="ctw-", dir="/tmp"))
    os.environ[protocol.WARM_DIR_ENV] = str(warm_dir)
    config = CatalogConfig(
        uri=f"sqlite:///{root / 'catalog.db'}", warehouse=(root / "warehouse").as_uri()
    )
    config.load()
    extra = {"uri": config.uri, "warehouse": config.warehouse}
    os.environ["AIRFLOW_CONN_ICEBERG_CATALOG_DEFAULT"] = json.dumps(
        {"conn_type": "iceberg_catalog", "extra": extra}
    )
    from airflow.utils import db

    db.resetdb()
    try:
        results = {engine: bench(engine, args.ticks) for engine in ("spark-submit", "warm")}
    finally:
        stop_drivers(warm_dir, protocol.PID_FILE)
    print("\nmedian of ticks 2..N (the warm driver already up):")
    for engine, times in results.items():
        later = sorted(times[1:])
        if later:
            run, write = later[len(later) // 2]
            print(f"  {engine:13s} dag run {run:6.1f} s, write task {write:6.1f} s")
    shutil.rmtree(root, ignore_errors=True)
    shutil.rmtree(warm_dir, ignore_errors=True)
    shutil.rmtree(_HOME, ignore_errors=True)


if __name__ == "__main__":
    main()
