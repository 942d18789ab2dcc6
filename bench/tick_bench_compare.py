"""Columns, ticks (and their tables), the refresh comparison of bench/tick_bench.py.

A **column** is what one tick runs over the same inputs: the 22 views on an
engine with a ``refresh`` (``warm/auto``, ``warm/full``, one DAG each), or
the **overwrite** baseline: each query run by plain Spark as ``INSERT
OVERWRITE`` of a plain Iceberg table (``CREATE OR REPLACE TABLE ... AS`` in
the initial tick), reading the inputs at the tick's pinned snapshots
(``VERSION AS OF``), in the bench's own warm SparkSession (started with the
warm driver's settings, and each statement run with its per-job session
settings), one statement after the other, each timed.

The comparison (:func:`compare_refresh`) is per query: the write task's
seconds (the fused tick's, for a ``-fused`` engine) of ``full`` and ``auto``
summed over the busy ticks, their ratio, the strategies ``auto`` used, and
the overwrite's seconds over the same ticks.
"""

from __future__ import annotations

import json
import statistics
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench import tick_bench_tpch as tpch

#: The column of the plain-Spark baseline.
OVERWRITE = "overwrite"
#: ``auto`` slower than this times ``full`` counts as slower (``slower_than_full``).
SLOWER = 1.05
#: Strategies that are no incremental maintenance.
NOT_INCREMENTAL = ("full", "quiet", "?")
TASKS = ("wait_for_inputs", "mint", "write", "append")


def load_average() -> str:
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


@dataclass(frozen=True)
class Column:
    """The views on ``engine`` with ``refresh``, or (``engine == OVERWRITE``) the baseline."""

    engine: str
    refresh: str = "auto"

    @property
    def overwrite(self) -> bool:
        return self.engine == OVERWRITE

    @property
    def label(self) -> str:
        return OVERWRITE if self.overwrite else f"{self.engine}/{self.refresh}"

    @property
    def slug(self) -> str:
        """The label as a DAG id's and namespace's part."""
        return self.label.replace("-", "_").replace("/", "_")


@dataclass
class Tick:
    """One tick of one column: what it cost, per view, and whether every view was exact."""

    column: str
    kind: str
    time_ms: int
    wall_s: float
    load: str
    changes: dict[str, int] = field(default_factory=dict)
    views: dict[str, dict[str, Any]] = field(default_factory=dict)
    mismatches: list[dict[str, Any]] = field(default_factory=list)
    #: Peak resident memory of the warm driver's processes during the tick, MB
    #: (``python``: the job's driver program and its driver-side diff; ``jvm``: Spark's).
    driver_peak_mb: dict[str, float] = field(default_factory=dict)

    def task_sum(self) -> float:
        return sum(sum(v["tasks"].values()) for v in self.views.values())


@dataclass
class ColumnRun:
    column: Column
    #: The cold Spark start of the column's engine (none for the overwrite).
    cold: dict[str, float] | None
    ticks: list[Tick] = field(default_factory=list)
    #: Write tasks per engine they ran on (from their log lines), and one reason each.
    chosen: dict[str, int] = field(default_factory=dict)
    reasons: dict[str, str] = field(default_factory=dict)

    def median(self, kind: str) -> float | None:
        walls = [t.wall_s for t in self.ticks if t.kind == kind]
        return statistics.median(walls) if walls else None

    def ratio(self, kind: str) -> float | None:
        wall = self.median(kind)
        return None if wall is None or not self.cold else round(wall / self.cold["cold_s"], 2)

    def busy_seconds(self, view: str, task: str = "write") -> float:
        """Seconds of ``view``'s ``task`` (``all``: every task) summed over the busy ticks."""
        total = 0.0
        for tick in self.ticks:
            if tick.kind == "busy":
                tasks = tick.views[view]["tasks"]
                total += sum(tasks.values()) if task == "all" else tasks[task]
        return round(total, 2)

    def strategies(self, view: str) -> list[str]:
        """The strategies ``view`` ran with in the busy ticks, in order, each once."""
        seen = [t.views[view]["strategy"] for t in self.ticks if t.kind == "busy"]
        return list(dict.fromkeys(seen))


# --- output of ticks ------------------------------------------------------------------------


def _phases(phases: dict[str, float]) -> str:
    return " ".join(f"{k}={v:.2f}" for k, v in phases.items()) or "-"


def print_tick(tick: Tick) -> None:
    n = len(tick.views)
    tasks = tick.task_sum()
    print(
        f"\n### {tick.column} {tick.kind} tick at {tick.time_ms}: DAG run {tick.wall_s:.1f} s "
        f"({n} views, {tick.wall_s / max(1, n):.2f} s per view; tasks {tasks:.1f} s, "
        f"between tasks {tick.wall_s - tasks:.1f} s); load {tick.load}"
        + (f"; changes {json.dumps(tick.changes)}" if tick.changes else "")
        + (f"; driver peak MB {json.dumps(tick.driver_peak_mb)}" if tick.driver_peak_mb else ""),
        flush=True,
    )
    print(
        "| view | strategy | diffed on | +rows | -rows | sensor s | mint s | write s "
        "| write phases s | outside phases s | append s | exact |"
    )
    print("|---" * 12 + "|")
    for name, v in tick.views.items():
        t, phases = v["tasks"], v["phases"]
        outside = t["write"] - sum(phases.values())
        print(
            f"| {name} | {v['strategy']} | {v.get('diffed_on', '-')} | {v['rows'][0]} "
            f"| {v['rows'][1]} "
            f"| {t['wait_for_inputs']:.2f} | {t['mint']:.2f} | {t['write']:.2f} "
            f"| {_phases(phases)} | {outside:.2f} | {t['append']:.2f} | {v.get('exact')} |",
            flush=True,
        )


def print_summary(runs: list[ColumnRun]) -> None:
    print("\n## summary\n")
    print(
        "| column | cold start s | tick | DAG run s | s per view | tasks s | between tasks s "
        "| write tasks s | Σ write phases s | x cold | load |"
    )
    print("|---" * 11 + "|")
    for r in runs:
        cold = r.cold["cold_s"] if r.cold else None
        for t in r.ticks:
            writes = sum(v["tasks"]["write"] for v in t.views.values())
            phases = sum(sum(v["phases"].values()) for v in t.views.values())
            tasks = t.task_sum()
            print(
                f"| {r.column.label} | {'-' if cold is None else f'{cold:.1f}'} | {t.kind} "
                f"| {t.wall_s:.1f} | {t.wall_s / max(1, len(t.views)):.2f} | {tasks:.1f} "
                f"| {t.wall_s - tasks:.1f} | {writes:.1f} | {phases:.1f} "
                f"| {'-' if cold is None else f'{t.wall_s / cold:.1f}'} | {t.load} |"
            )


# --- the overwrite baseline -------------------------------------------------------------------


@contextmanager
def session_settings(spark: Any, settings: dict[str, str]) -> Iterator[None]:
    """``settings`` on ``spark``'s session for the block, the old values back after it."""
    old = {key: spark.conf.get(key, None) for key in settings}
    for key, value in settings.items():
        spark.conf.set(key, value)
    try:
        yield
    finally:
        for key, value in old.items():
            if value is None:
                spark.conf.unset(key)
            else:
                spark.conf.set(key, value)


def overwrite_tick(
    spark: Any,
    kind: str,
    queries: list[tpch.TpchQuery],
    pinned: dict[str, int],
    namespace: str,
    settings: dict[str, str],
) -> Tick:
    """Each query into its plain table ``namespace.<view>`` over the pinned inputs, timed."""
    tick = Tick(OVERWRITE, kind, int(time.time() * 1000), 0.0, load_average())
    started = time.perf_counter()
    with session_settings(spark, settings):
        for q in queries:
            sql, target = tpch.pinned_sql(q, pinned), f"ct.{namespace}.{q.name}"
            if kind == "initial":
                statement = f"CREATE OR REPLACE TABLE {target} USING iceberg AS {sql}"
            else:
                statement = f"INSERT OVERWRITE {target} {sql}"
            t0 = time.perf_counter()
            spark.sql(statement)
            seconds = round(time.perf_counter() - t0, 2)
            tick.views[q.name] = {
                "tasks": {t: seconds if t == "write" else 0.0 for t in TASKS},
                "strategy": OVERWRITE,
                "reason": "",
                "phases": {},
                "rows": ("-", "-"),
            }
    tick.wall_s = round(time.perf_counter() - started, 2)
    return tick


# --- auto against full ------------------------------------------------------------------------


@dataclass(frozen=True)
class QueryRow:
    """One query's busy ticks: write seconds of ``full``, ``auto``, the overwrite's."""

    view: str
    full_s: float
    auto_s: float
    strategies: list[str]
    reason: str
    full_tasks_s: float
    auto_tasks_s: float
    overwrite_s: float | None

    @property
    def speedup(self) -> float:
        return round(self.full_s / self.auto_s, 2) if self.auto_s else float("inf")

    @property
    def incremental(self) -> bool:
        return any(s not in NOT_INCREMENTAL for s in self.strategies)


def compare_refresh(runs: list[ColumnRun], engine: str) -> list[QueryRow]:
    """Per view, ``engine``'s ``full`` and ``auto`` columns (and the overwrite) side by side.

    Empty when the run lacks one of the two columns.
    """
    by_label = {r.column.label: r for r in runs}
    full = by_label.get(Column(engine, "full").label)
    auto = by_label.get(Column(engine, "auto").label)
    overwrite = by_label.get(OVERWRITE)
    if full is None or auto is None:
        return []
    rows = []
    for view in auto.ticks[0].views:
        reasons = [t.views[view]["reason"] for t in auto.ticks if t.kind == "busy"]
        rows.append(
            QueryRow(
                view=view,
                full_s=full.busy_seconds(view),
                auto_s=auto.busy_seconds(view),
                strategies=auto.strategies(view),
                reason=reasons[-1] if reasons else "",
                full_tasks_s=full.busy_seconds(view, "all"),
                auto_tasks_s=auto.busy_seconds(view, "all"),
                overwrite_s=overwrite.busy_seconds(view) if overwrite else None,
            )
        )
    return rows


def _ratio(a: float, b: float | None) -> float | None:
    return round(a / b, 2) if b else None


def _cell(value: float | None, places: int = 2) -> str:
    return "-" if value is None else f"{value:.{places}f}"


def print_comparison(rows: list[QueryRow], engine: str, busy_ticks: int) -> None:
    print(
        f"\n## auto against full ({engine}; write task seconds summed over {busy_ticks} busy "
        "ticks; overwrite: plain Spark INSERT OVERWRITE of the query)\n"
    )
    print(
        "| view | full s | auto s | speedup full/auto | auto strategy | overwrite s "
        "| auto/overwrite | full all tasks s | auto all tasks s | auto reason |"
    )
    print("|---" * 10 + "|")
    for r in rows:
        slow = " **slower**" if r.auto_s > SLOWER * r.full_s else ""
        print(
            f"| {r.view} | {r.full_s:.2f} | {r.auto_s:.2f} | {r.speedup:.2f}{slow} "
            f"| {', '.join(r.strategies)} | {_cell(r.overwrite_s)} "
            f"| {_cell(_ratio(r.auto_s, r.overwrite_s))} | {r.full_tasks_s:.2f} "
            f"| {r.auto_tasks_s:.2f} | {r.reason[:90]} |",
            flush=True,
        )


def comparison_json(rows: list[QueryRow]) -> dict[str, Any]:
    """The comparison's totals: ratios of the sums over views, slower and incremental views."""
    if not rows:
        return {}
    full, auto = sum(r.full_s for r in rows), sum(r.auto_s for r in rows)
    baseline = [r.overwrite_s for r in rows if r.overwrite_s is not None]
    overwrite = sum(baseline) if len(baseline) == len(rows) else None
    return {
        "full_s": round(full, 2),
        "auto_s": round(auto, 2),
        "overwrite_s": None if overwrite is None else round(overwrite, 2),
        "auto_over_full": _ratio(auto, full),
        "auto_over_overwrite": _ratio(auto, overwrite),
        "full_over_overwrite": _ratio(full, overwrite),
        "slower_than_full": [r.view for r in rows if r.auto_s > SLOWER * r.full_s],
        "incremental_queries": [r.view for r in rows if r.incremental],
        # The same code in both columns: how far apart the machine puts two equal runs.
        "auto_over_full_both_full": _sum_ratio([r for r in rows if r.strategies == ["full"]]),
        "auto_over_full_incremental": _sum_ratio([r for r in rows if r.incremental]),
    }


def _sum_ratio(rows: list[QueryRow]) -> float | None:
    return _ratio(sum(r.auto_s for r in rows), sum(r.full_s for r in rows)) if rows else None


def print_scale_summary(totals: dict[str, Any], sf: float, views: int, busy_ticks: int) -> None:
    print(f"\n## summary at SF {sf}\n")
    print(
        "| SF | views | busy ticks | full s | auto s | auto/full | overwrite s | auto/overwrite "
        "| full/overwrite | incremental | slower than full |"
    )
    print("|---" * 11 + "|")
    print(
        f"| {sf} | {views} | {busy_ticks} | {totals['full_s']:.1f} | {totals['auto_s']:.1f} "
        f"| {_cell(totals['auto_over_full'])} | {_cell(totals['overwrite_s'], 1)} "
        f"| {_cell(totals['auto_over_overwrite'])} | {_cell(totals['full_over_overwrite'])} "
        f"| {len(totals['incremental_queries'])}: {' '.join(totals['incremental_queries'])} "
        f"| {len(totals['slower_than_full'])}: {' '.join(totals['slower_than_full'])} |",
    )
    print(
        f"\nauto/full over the queries auto ran in full too (the same code: the noise): "
        f"{_cell(totals['auto_over_full_both_full'])}; over the incremental ones: "
        f"{_cell(totals['auto_over_full_incremental'])}",
        flush=True,
    )


def peak_of(peaks: Any) -> dict[str, float]:
    """The largest peak per process role over ticks (each a ``{role: MB}``)."""
    out: dict[str, float] = {}
    for peak in peaks:
        for role, mb in peak.items():
            out[role] = max(out.get(role, 0.0), mb)
    return out
