"""The ticks of bench/tick_bench.py: its DAGs run through ``dag.test()``, timed and checked.

A column's tick is one DAG run of every view (:func:`run_tick`) or, with
``--paired``, one DAG run per view with each view's columns back to back
(:func:`paired_ticks`); either way each view's tasks' seconds and write
report are read back from Airflow's database, and every view is checked
against DuckDB (:func:`check_tick`).
"""

from __future__ import annotations

import json
import logging
import os
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from airflow_provider_ct.core.timeline import Timeline
from airflow_provider_ct.engine import protocol
from airflow_provider_ct.operators._common import QUIET_REPORT_FIELD
from airflow_provider_ct.operators.tick import WRITE_REPORT_KEY
from bench import tick_bench_compare as cmp
from bench import tick_bench_tpch as tpch
from bench.bench_env import driver_processes, peak_memory_mb, reset_peak_memory, run_records
from bench.tick_bench_compare import Column, ColumnRun, Tick, load_average
from tests.helpers import rows_of

log = logging.getLogger("tick_bench")
TASKS = cmp.TASKS
#: The line a write task logs once with its engine and the reason (hooks/spark_job.py).
CHOSEN = "Spark engine: "


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

    def add_to(self, run: ColumnRun) -> None:
        """Count this tick's lines into ``run``'s."""
        for engine, n in self.chosen.items():
            run.chosen[engine] = run.chosen.get(engine, 0) + n
        for engine, reason in self.reasons.items():
            run.reasons.setdefault(engine, reason)


#: Installed on the hook's logger by :func:`main`.
ENGINE_LINES = EngineLines()


def dag_id(column: Column) -> str:
    return f"tick_bench_{column.slug}"


def dags() -> dict[str, Any]:
    """The bench's DAGs (their module reads the spec :func:`write_spec` wrote)."""
    import tick_bench_dag

    return dict(tick_bench_dag.DAGS)


def view_dag_id(column: Column, view: str) -> str:
    """``--paired``: the DAG of one view of a column."""
    return f"{dag_id(column)}__{view}"


def namespace(column: Column) -> str:
    return f"tpch_{column.slug}"


# --- one tick ---------------------------------------------------------------------------------


def _run_details(dag_id_: str, run_id: str) -> tuple[dict[str, float], dict[str, Any]]:
    """Task durations and write reports (from the tasks' XComs) of one DAG run."""
    durations, values = run_records(dag_id_, run_id, ("return_value", WRITE_REPORT_KEY))
    return durations, _write_reports(values)


def _write_reports(xcoms: list[tuple[str, str, Any]]) -> dict[str, Any]:
    """Per ``<view>.write``: its write report.

    A write task's return value; a fused tick task's report under its own
    key; on a quiet tick whose mint skipped the write task, the report the
    mint put beside its description (``quiet_report``).
    """
    reports: dict[str, Any] = {}
    for task_id, key, value in xcoms:
        group, _, task = task_id.rpartition(".")
        if (task, key) in (("write", "return_value"), ("tick", WRITE_REPORT_KEY)):
            reports[f"{group}.write"] = value
        elif task == "mint" and isinstance(value, dict) and QUIET_REPORT_FIELD in value:
            reports.setdefault(f"{group}.write", value[QUIET_REPORT_FIELD])
    return reports


def _tick_time() -> int:
    """``T`` = now (after the inputs' last commit), once it may run.

    The inputs are external tables sealed 1 s behind the wall clock, so the
    bench waits 1.2 s before starting a run at ``T``: the sensors pass at once.
    """
    t_ms = int(time.time() * 1000)
    time.sleep(1.2)
    return t_ms


def _dag_run(dag: Any, t_ms: int) -> tuple[float, dict[str, float], dict[str, Any], Any]:
    """``dag.test()`` at ``T``, timed: its wall seconds, task durations, reports, driver peak."""
    drivers = driver_processes(Path(os.environ[protocol.WARM_DIR_ENV]), protocol.PID_FILE)
    reset_peak_memory(drivers)
    started = time.perf_counter()
    run = dag.test(logical_date=datetime.fromtimestamp(t_ms / 1000, UTC))
    wall = time.perf_counter() - started
    if run.state != "success":
        raise SystemExit(f"{dag.dag_id} tick at {t_ms} ended {run.state}")
    durations, reports = _run_details(dag.dag_id, run.run_id)
    # Drivers started by this run count from their start.
    drivers |= driver_processes(Path(os.environ[protocol.WARM_DIR_ENV]), protocol.PID_FILE)
    return wall, durations, reports, peak_memory_mb(drivers)


def _view_entry(name: str, durations: dict[str, float], reports: dict[str, Any]) -> dict[str, Any]:
    """One view's line of a tick: its tasks' seconds and its write report's strategy and phases."""
    report = reports.get(f"{name}.write") or {}
    tasks = {t: round(durations.get(f"{name}.{t}", 0.0), 2) for t in TASKS}
    if f"{name}.tick" in durations:  # fused: mint, write and append in one task
        tasks["write"] = round(durations[f"{name}.tick"], 2)
    return {
        "tasks": tasks,
        "strategy": "quiet" if report.get("quiet") else report.get("strategy", "?"),
        "reason": report.get("reason", ""),
        "phases": report.get("phases", {}),
        "rows": (report.get("rows_to_insert", 0), report.get("rows_to_delete", 0)),
        "diffed_on": report.get("diffed_on") or "-",
    }


def run_tick(dag: Any, column: str, kind: str, queries: list[tpch.TpchQuery]) -> Tick:
    """One column's DAG of every view, run at ``T``; only the run is timed."""
    t_ms = _tick_time()
    load = load_average()
    wall, durations, reports, peak = _dag_run(dag, t_ms)
    tick = Tick(column, kind, t_ms, round(wall, 2), load)
    tick.driver_peak_mb = peak
    for q in queries:
        tick.views[q.name] = _view_entry(q.name, durations, reports)
    return tick


def paired_ticks(
    runs: list[ColumnRun], kind: str, queries: list[tpch.TpchQuery], first: int
) -> list[Tick]:
    """``--paired``: each view's DAG of every column, back to back, before the next view.

    Over the same inputs at the same ``T``, each view's columns run one
    after the other (which goes first alternates from view to view and,
    through ``first``, from tick to tick), so what the machine does
    meanwhile (the JVM's collections, the file cache, the page cache, the
    other views' jobs) falls on both columns of a view alike.
    """
    t_ms = _tick_time()
    load = load_average()
    ticks = [Tick(run.column.label, kind, t_ms, 0.0, load) for run in runs]
    indexed = list(enumerate(runs))
    for i, q in enumerate(queries):
        for index, run in indexed if (i + first) % 2 == 0 else indexed[::-1]:
            ENGINE_LINES.reset()
            dag = dags()[view_dag_id(run.column, q.name)]
            wall, durations, reports, peak = _dag_run(dag, t_ms)
            ENGINE_LINES.add_to(run)
            tick = ticks[index]
            tick.wall_s = round(tick.wall_s + wall, 2)
            tick.driver_peak_mb = cmp.peak_of([tick.driver_peak_mb, peak])
            tick.views[q.name] = _view_entry(q.name, durations, reports)
    return ticks


def check_tick(
    tick: Tick, ctx: dict[str, Any], queries: list[tpch.TpchQuery], pinned: Any, column: Column
) -> None:
    """Every view must equal DuckDB over the pinned inputs, and its head be the tick at ``T``.

    The overwrite's plain tables have no timeline: only their rows are checked.
    """
    for q in queries:
        table = ctx["catalog"].load_table(f"{namespace(column)}.{q.name}")
        verdict = tpch.compare(ctx["oracle"].rows(q, pinned), rows_of(table))
        head = None if column.overwrite else Timeline.of(table).entries[-1]
        if head is not None and head.time != tick.time_ms:
            verdict = {**verdict, "equal": False, "head_time": head.time}
        tick.views[q.name]["exact"] = verdict["equal"]
        if not verdict["equal"]:
            tick.mismatches.append(
                {"column": tick.column, "tick": tick.kind, "view": q.name, **verdict}
            )
            log.error(
                "%s %s tick: %s differs from DuckDB: %s",
                tick.column,
                tick.kind,
                q.name,
                json.dumps(verdict),
            )
