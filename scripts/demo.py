"""`make demo`: the example DAGs on a real, local Airflow.

Starts Airflow (scheduler, dag-processor, triggerer, API server; SQLite and
LocalExecutor) under ``.demo/airflow-home`` with ``dags_examples/`` as its
DAGs folder, then, as a person would through the UI or REST API:

1. backfills the last hour and the current one of the ``revenue_per_customer``
   view (``--backfill-hours``; one run per hour, in order, each pinned to its
   own hour's inputs), and ticks the continual tasks and the managed
   collections once meanwhile;
2. triggers a few more ticks, at now, of all four example DAGs;
3. meanwhile (with step 1, so it adds little time) writes order events into
   the medallion's bronze collection; silver, gold and the view over gold
   follow on their own, triggered by asset events (docs/pipelines.md); and
   ticks the SQL folder ``dags_examples/pipelines/shop_sql`` (one DAG:
   bronze streaming table -> silver view -> gold view through a temporary
   view), which lands a few order events at each of its ticks;
4. prints, as it goes, every table's frontier and the view's rows, then the
   medallion's end-to-end freshness per layer, and the UI address with its
   login.

It never waits for the clock: the example DAGs' time schedules are off
(``CT_EXAMPLE_SCHEDULES=off``) except the view's, which a backfill needs;
the view is unpaused only once its backfill holds the runs up to the
current hour, so no scheduled run can tick it at a later time and seal the
hours being backfilled. Asset-triggered runs need the scheduler's own run
creation (``[scheduler] use_job_schedule``), so that stays on. The write
jobs run on the warm engine (one long-lived Spark driver,
``CT_EXAMPLE_ENGINE=warm``), so a tick costs seconds, not a JVM start.

Everything it started is stopped at the end or on Ctrl-C; ``--keep-running``
leaves Airflow up for a person to explore until Ctrl-C, ticking every DAG
every few minutes itself.
"""

from __future__ import annotations

import argparse
import importlib.util
import shutil
import signal
import sys
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from airflow_provider_ct.core.catalog import CatalogConfig  # noqa: E402
from airflow_provider_ct.core.frontier import (  # noqa: E402
    format_timestamp,
    timestamp_from_datetime,
)
from airflow_provider_ct.core.tables import iter_tables  # noqa: E402
from airflow_provider_ct.core.timeline import Timeline  # noqa: E402
from devtools.devstack import Api, LocalAirflow  # noqa: E402
from devtools.freshness import pipeline_freshness  # noqa: E402

VIEW_DAG = "revenue_per_customer"
CT_DAG = "continual_tasks"
#: The medallion (dags_examples/medallion.py): the demo triggers bronze writes,
#: the layers follow on asset events.
BRONZE_DAG = "medallion_bronze"
LAYER_DAGS = ["medallion_silver", "medallion_gold", "medallion_by_day"]
BRONZE_TABLE = "medallion.order_events"
LAYER_TABLES = ["medallion.orders_latest", "medallion.revenue_daily", "medallion.revenue_by_day"]
#: The SQL folder dags_examples/pipelines/shop_sql as one DAG (dags_examples/sql_pipeline.py).
SQL_DAG = "shop_sql_pipeline"
EXAMPLE_DAGS = [
    VIEW_DAG,
    CT_DAG,
    "ops_service_status",
    "ct_collections",
    BRONZE_DAG,
    *LAYER_DAGS,
    SQL_DAG,
]
#: DAGs the demo ticks besides the view (each run at "now").
SIDE_DAGS = [CT_DAG, "ops_service_status", "ct_collections", SQL_DAG]
VIEW_TABLE = "shop.revenue_per_customer"
NAMESPACES = ("shop", "events", "ops", "medallion", "shop_sql")
#: The demo's Airflow: no time schedules but the view's (the demo triggers
#: every run), and the example DAGs' write jobs on the warm engine.
DEMO_ENV = {
    "CT_EXAMPLE_SCHEDULES": "off",
    "CT_EXAMPLE_ENGINE": "warm",
}
#: With --keep-running, the demo ticks every example DAG this often.
KEEP_RUNNING_TICK = timedelta(minutes=5)


def say(text: str = "") -> None:
    print(text, flush=True)


def live_rows(summary: Any) -> int:
    """Rows a reader sees: records minus position-deleted ones (we write no equality deletes)."""
    return int(summary.get("total-records", "0")) - int(summary.get("total-position-deletes", "0"))


class Watcher:
    """Prints each table's frontier when it moves, and the view's rows when they change."""

    def __init__(self, config: CatalogConfig) -> None:
        self.config = config
        self.seen: dict[str, tuple[str, int]] = {}
        self.view_rows: list[tuple[Any, ...]] | None = None

    def tables(self) -> dict[str, Any]:
        namespaces = [(namespace,) for namespace in NAMESPACES]
        return dict(sorted(iter_tables(self.config.load(), namespaces)))

    def frontier_rows(self) -> list[tuple[str, str, str, int, int]]:
        rows = []
        for name, table in self.tables().items():
            timeline = Timeline.of(table)
            times = timeline.data_times()
            newest = format_timestamp(times[-1][0]) if times else "-"
            snapshot = table.metadata.current_snapshot()
            count = live_rows(snapshot.summary) if snapshot else 0
            upper = "closed" if timeline.upper.is_empty else timeline.upper.to_summary()
            if upper == "0":
                upper = "0 (nothing sealed yet)"
            elif upper.isdigit():
                upper = format_timestamp(int(upper))
            rows.append((name, upper, newest, count, len(timeline.entries)))
        return rows

    def print_frontiers(self) -> None:
        rows = self.frontier_rows()
        say(f"{'table':<28} {'upper (exclusive)':<26} {'newest ct.time':<26} rows  snaps")
        for name, upper, newest, count, snaps in rows:
            say(f"{name:<28} {upper:<26} {newest:<26} {count:>4}  {snaps:>5}")

    def poll(self) -> None:
        """Prints what moved since the last poll (best effort: a table may be mid-commit)."""
        try:
            rows = self.frontier_rows()
        except Exception as exc:
            say(f"  (could not read the catalog this time: {exc})")
            return
        for name, upper, newest, count, _ in rows:
            if self.seen.get(name) == (upper, count):
                continue
            self.seen[name] = (upper, count)
            clock = datetime.now(UTC).strftime("%H:%M:%S")
            say(f"  {clock}  {name:<28} upper -> {upper:<25} ct.time {newest}  rows {count}")
            if name == VIEW_TABLE:
                self.print_view()

    def print_view(self) -> None:
        table = self.config.load().load_table(VIEW_TABLE)
        data = table.scan().to_arrow().sort_by([("revenue_cents", "descending")])
        rows = [tuple(r.values()) for r in data.to_pylist()]
        if rows == self.view_rows:
            return
        self.view_rows = rows
        say(f"           {VIEW_TABLE} (top 5 of {len(rows)}):")
        for row in rows[:5]:
            say("             " + "  ".join(str(v) for v in row))


def iso(moment: datetime) -> str:
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


def wait(watcher: Watcher, done: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not done():
        watcher.poll()
        if time.monotonic() > deadline:
            raise TimeoutError(f"gave up waiting for {what} after {timeout:.0f} s")
        time.sleep(5)
    watcher.poll()


def finished(api: Api, dag_id: str, run_ids: list[str]) -> Callable[[], bool]:
    def check() -> bool:
        states = {r["dag_run_id"]: r["state"] for r in api.runs(dag_id)}
        return all(states.get(run_id) in ("success", "failed") for run_id in run_ids)

    return check


def backfill_view(api: Api, watcher: Watcher, hours: int) -> bool:
    """Backfills the ``hours`` hours before the current one and the current one.

    The range is fully in the past and no scheduled run exists (schedules are
    off), so nothing can tick the view at a later time while it fills: no
    waiting for the clock. The other example DAGs tick once meanwhile.
    """
    latest = datetime.now(UTC).replace(minute=0, second=0, microsecond=0)
    first = latest - timedelta(hours=hours)
    say(f"== backfill {VIEW_DAG} from {iso(first)} to {iso(latest)} (POST /api/v2/backfills)")
    api.create_backfill(VIEW_DAG, first.isoformat(), latest.isoformat())
    deadline = time.monotonic() + 60
    while len(runs := [r for r in api.runs(VIEW_DAG) if r["run_type"] == "backfill"]) < hours + 1:
        if time.monotonic() > deadline:
            raise TimeoutError("the scheduler did not create the backfill's runs")
        time.sleep(2)
    # Now the backfill holds every hour up to the current one: unpausing lets
    # its runs start and leaves the scheduler no earlier run to create.
    api.set_paused(VIEW_DAG, False)
    side = trigger_at_now(api, [*SIDE_DAGS, BRONZE_DAG])
    run_ids = [r["dag_run_id"] for r in runs]
    wait(watcher, finished(api, VIEW_DAG, run_ids), 1800, "the backfill")
    # Each backfilled hour must be its own snapshot, at its own time.
    table = watcher.config.load().load_table(VIEW_TABLE)
    landed = [tick_ms for tick_ms, _ in Timeline.of(table).data_times()]
    wanted = [timestamp_from_datetime(first + timedelta(hours=h)) for h in range(hours + 1)]
    for dag_id, run_id in side:
        wait(watcher, finished(api, dag_id, [run_id]), 900, f"{dag_id} {run_id}")
    if landed[: len(wanted)] != wanted:
        say(f"   the backfill did not land one snapshot per hour: {landed} (wanted {wanted})")
        return False
    say(f"   backfill done: one snapshot per hour, ct.time {iso(first)} ... {iso(latest)}")
    return True


def trigger_at_now(api: Api, dag_ids: list[str]) -> list[tuple[str, str]]:
    """Triggers one run of each DAG at now (a tick at now); returns (dag, run id) pairs."""
    now = datetime.now(UTC).replace(microsecond=0)
    started = [(dag_id, api.trigger(dag_id, iso(now))["dag_run_id"]) for dag_id in dag_ids]
    say(f"== tick at {iso(now)}: triggered {', '.join(d for d, _ in started)}")
    return started


def tick(api: Api, watcher: Watcher, dag_ids: list[str]) -> list[tuple[str, str]]:
    """Triggers one run of each DAG at now (a tick at now) and waits for them."""
    started = trigger_at_now(api, dag_ids)
    for dag_id, run_id in started:
        wait(watcher, finished(api, dag_id, [run_id]), 900, f"{dag_id} {run_id}")
    return started


def wait_for_medallion(watcher: Watcher, timeout: float = 600) -> None:
    """Waits until every medallion layer's upper caught up with bronze's."""

    def caught_up() -> bool:
        catalog = watcher.config.load()
        try:
            tables = [catalog.load_table(t) for t in [BRONZE_TABLE, *LAYER_TABLES]]
        except Exception:  # a layer's first tick has not created its table yet
            return False
        return len({Timeline.of(t).upper for t in tables}) == 1

    wait(watcher, caught_up, timeout, "the medallion layers to catch up with bronze")


def print_freshness(watcher: Watcher) -> None:
    """Per bronze write, how long until each layer committed a snapshot containing it."""
    say("== medallion: end-to-end freshness (bronze write committed -> layer snapshot with it)")
    names = [t.split(".")[1] for t in LAYER_TABLES]
    say(f"   {'bronze write ct.time':<26} " + "  ".join(f"{n:>16}" for n in names))
    for row in pipeline_freshness(watcher.config.load(), BRONZE_TABLE, LAYER_TABLES):
        lags = [row.lag_ms[t] for t in LAYER_TABLES]
        cells = ["-" if lag is None else f"+{lag / 1000:.1f} s" for lag in lags]
        say(f"   {format_timestamp(row.write_time):<26} " + "  ".join(f"{c:>16}" for c in cells))


def summarize(api: Api) -> bool:
    ok = True
    say("== runs")
    for dag_id in EXAMPLE_DAGS:
        runs = api.runs(dag_id)
        states = [r["state"] for r in runs]
        ok = ok and all(s == "success" for s in states if s in ("success", "failed"))
        say(f"   {dag_id:<22} {len(runs)} run(s): {', '.join(states) or '-'}")
    return ok


def screenshot(airflow: LocalAirflow, path: Path) -> None:
    """Saves the view DAG's grid as a person sees it (headless Chromium).

    Chromium and selenium come with the tests' set-up (``make setup``), not
    the demo's, which installs only what every demo run needs.
    """
    if importlib.util.find_spec("selenium") is None or shutil.which("chromedriver") is None:
        say("   no screenshot: needs selenium and chromedriver (`make setup` installs them)")
        return
    from devtools.devbrowser import chromium, log_in

    with chromium(1600, 900) as driver:
        log_in(driver, airflow.url, airflow.username, airflow.password)
        driver.get(f"{airflow.url}/dags/{VIEW_DAG}")
        time.sleep(8)
        path.parent.mkdir(parents=True, exist_ok=True)
        driver.save_screenshot(str(path))
    say(f"   screenshot: {path}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--home", type=Path, default=ROOT / ".demo" / "airflow-home")
    parser.add_argument("--port", type=int, default=0, help="API/UI port (default: a free one)")
    parser.add_argument("--backfill-hours", type=int, default=1, help="past hours to backfill")
    parser.add_argument("--ticks", type=int, default=1, help="ticks at now after the backfill")
    parser.add_argument("--keep-running", action="store_true", help="leave Airflow up")
    parser.add_argument("--screenshot", type=Path, help="save the view DAG's grid here")
    args = parser.parse_args()

    shutil.rmtree(args.home, ignore_errors=True)  # every demo starts from nothing
    # 6 task slots: the view's backfill runs one task at a time while the other
    # DAGs tick beside it, and their tasks mostly wait on process start-up.
    airflow = LocalAirflow(
        home=args.home, dags_folder=ROOT / "dags_examples", env=DEMO_ENV, parallelism=6
    )
    if args.port:
        airflow.port = args.port
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    started = time.monotonic()
    try:
        # The SQL pipeline's DAG file resolves its folder against the catalog when
        # parsed: its landing table exists first, as a deployment's inputs would.
        sys.path.insert(0, str(ROOT / "dags_examples"))
        from sql_pipeline_landing import create_landing

        create_landing(CatalogConfig.embedded(args.home).load())
        say(f"== starting Airflow under {args.home} (scheduler, dag-processor, triggerer, API)")
        api = airflow.start(EXAMPLE_DAGS)
        say(f"   up in {time.monotonic() - started:.0f} s")
        say(f"   UI:    {airflow.url}   login: {airflow.username} / {airflow.password}")
        say(f"   CLI:   source {airflow.env_file}; airflow dags list")
        watcher = Watcher(CatalogConfig.embedded(args.home))
        for dag_id in EXAMPLE_DAGS[1:]:  # the view after its backfill is created
            api.set_paused(dag_id, False)
        say(
            f"   unpaused {', '.join(EXAMPLE_DAGS[1:])}; {VIEW_DAG} once its backfill exists "
            "(the demo triggers every run; the medallion layers run on asset events)"
        )
        backfilled = backfill_view(api, watcher, args.backfill_hours)
        for _ in range(args.ticks):
            tick(api, watcher, [VIEW_DAG, *SIDE_DAGS])
        wait_for_medallion(watcher)
        say("== frontiers")
        watcher.print_frontiers()
        print_freshness(watcher)
        ok = summarize(api) and backfilled
        if args.screenshot:
            screenshot(airflow, args.screenshot)
        say(
            f"== done in {time.monotonic() - started:.0f} s; UI {airflow.url} "
            f"(login {airflow.username} / {airflow.password})"
        )
        if args.keep_running:
            say(
                f"   Airflow keeps running; the demo ticks every DAG every "
                f"{KEEP_RUNNING_TICK.seconds // 60} min; Ctrl-C stops it"
            )
            while True:
                trigger_at_now(api, [VIEW_DAG, *SIDE_DAGS, BRONZE_DAG])
                next_tick = time.monotonic() + KEEP_RUNNING_TICK.total_seconds()
                while time.monotonic() < next_tick:
                    time.sleep(15)
                    watcher.poll()
        return 0 if ok else 1
    except KeyboardInterrupt:
        say("\n== interrupted")
        return 130
    finally:
        say("== stopping Airflow")
        airflow.stop()
        say(f"   stopped; its files stay under {args.home} (log: {airflow.log_path})")


if __name__ == "__main__":
    sys.exit(main())
