"""What every Airflow benchmark here sets up and tears down, in one place.

The benches run DAGs through ``dag.test()`` in a private Airflow home (its
own SQLite metadata database, the bench's DAGs folder) and describe their
DAGs in a JSON spec file named by an environment variable, which the DAG
files under ``bench/dags`` read when Airflow parses them. Warm Spark drivers
they start live under their own ``CT_WARM_DIR`` and are stopped at the end.

:func:`isolated_airflow` must run before Airflow is imported: Airflow reads
its configuration from the environment once, at import.
"""

from __future__ import annotations

import json
import os
import signal
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent


def isolated_airflow(prefix: str, spec_env: str) -> Path:
    """A fresh work folder with a private Airflow home; ``spec_env`` names its spec file."""
    work = Path(tempfile.mkdtemp(prefix=prefix))
    home = work / "airflow"
    home.mkdir()
    os.environ.setdefault("AIRFLOW_HOME", str(home))
    os.environ.setdefault("AIRFLOW__DATABASE__SQL_ALCHEMY_CONN", f"sqlite:///{home}/airflow.db")
    os.environ.setdefault("AIRFLOW__CORE__LOAD_EXAMPLES", "False")
    os.environ.setdefault("AIRFLOW__CORE__DAGS_FOLDER", str(ROOT / "bench" / "dags"))
    os.environ.setdefault("AIRFLOW__CORE__UNIT_TEST_MODE", "True")
    os.environ[spec_env] = str(work / "spec.json")
    return work


def load_dags(spec_env: str, build_dag: Callable[[dict[str, Any]], Any]) -> dict[str, Any]:
    """The DAGs a bench's spec file describes (none when the bench is not running)."""
    path = os.environ.get(spec_env)
    if not path:
        return {}
    specs = json.loads(Path(path).read_text())
    return {spec["dag_id"]: build_dag(spec) for spec in specs}


def stop_drivers(folder: Path, pid_file: str) -> None:
    """SIGTERM the warm drivers a run started (only those under its own CT_WARM_DIR)."""
    pids = []
    for found in folder.glob(f"*/{pid_file}"):
        try:
            pids.append(int(found.read_text()))
            os.kill(pids[-1], signal.SIGTERM)
        except (OSError, ValueError):
            continue
    deadline = time.monotonic() + 60
    while any(Path(f"/proc/{pid}").exists() for pid in pids) and time.monotonic() < deadline:
        time.sleep(0.5)


def driver_processes(folder: Path, pid_file: str) -> dict[int, str]:
    """The warm drivers under ``folder`` and their JVMs: pid -> ``python`` or ``jvm``.

    A warm driver is a Python process (its pid in ``pid_file``) that starts
    Spark's JVM as a child; the driver-side diff runs in the former, the
    Spark driver in the latter.
    """
    roots = set()
    for found in folder.glob(f"*/{pid_file}"):
        try:
            roots.add(int(found.read_text()))
        except (OSError, ValueError):
            continue
    out = {pid: "python" for pid in roots}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) in roots:  # the parent's pid
            out[int(stat.parent.name)] = "jvm"
    return out


def reset_peak_memory(pids: dict[int, str]) -> None:
    """Start each process's peak resident memory over (Linux: ``clear_refs`` 5)."""
    for pid in pids:
        try:
            Path(f"/proc/{pid}/clear_refs").write_text("5")
        except OSError:
            continue


def peak_memory_mb(pids: dict[int, str]) -> dict[str, float]:
    """The largest peak resident memory (``VmHWM``) per role since the last reset, in MB."""
    out: dict[str, float] = {}
    for pid, role in pids.items():
        try:
            lines = Path(f"/proc/{pid}/status").read_text().splitlines()
        except OSError:
            continue
        for line in lines:
            if line.startswith("VmHWM:"):
                mb = int(line.split()[1]) / 1024
                out[role] = round(max(out.get(role, 0.0), mb), 1)
    return out


def catalog_connection_and_session(config: Any, app_name: str) -> tuple[Any, Any]:
    """Point Airflow's default catalog connection at ``config``; a fresh metadata DB;
    the warm driver's settings and a session of the same settings for the bench itself.

    The bench's own session changes the inputs and runs its baselines with
    the warm driver's settings, so the two sides compare like for like.
    Returns ``(warm_spec, spark)``.
    """
    from airflow.utils import db

    from airflow_provider_ct.engine.client import WarmSpec
    from airflow_provider_ct.hooks.spark_job import DEFAULT_LOCAL_MASTER
    from airflow_provider_ct.spark.conf import local_session

    os.environ["AIRFLOW_CONN_ICEBERG_CATALOG_DEFAULT"] = json.dumps(
        {
            "conn_type": "iceberg_catalog",
            "extra": {"uri": config.uri, "warehouse": config.warehouse},
        }
    )
    db.resetdb()
    warm = WarmSpec.for_catalog(config, master=DEFAULT_LOCAL_MASTER)
    spark = local_session(
        config,
        master=warm.master,
        app_name=app_name,
        **{**warm.conf, "spark.sql.shuffle.partitions": "4"},
    )
    spark.sparkContext.setLogLevel("ERROR")
    return warm, spark


def run_records(
    dag_id: str, run_id: str, keys: tuple[str, ...]
) -> tuple[dict[str, float], list[tuple[str, str, Any]]]:
    """One DAG run's task durations (by task id) and its XComs under ``keys``.

    Read from Airflow's database after ``dag.test()`` returned: the seconds
    Airflow recorded for each task, and what the tasks returned or pushed.
    """
    from airflow.models import TaskInstance
    from airflow.models.xcom import XComModel
    from airflow.utils.session import create_session
    from sqlalchemy import select

    with create_session() as session:
        tis = session.scalars(
            select(TaskInstance).where(TaskInstance.dag_id == dag_id, TaskInstance.run_id == run_id)
        ).all()
        durations = {ti.task_id: float(ti.duration or 0.0) for ti in tis}
        xcoms = session.scalars(
            select(XComModel).where(
                XComModel.dag_id == dag_id,
                XComModel.run_id == run_id,
                XComModel.key.in_(keys),
            )
        ).all()
        values = [(x.task_id, x.key, XComModel.deserialize_value(x)) for x in xcoms]
    return durations, values
