"""A blind writer, a differential writer and two tickers (one also maintaining) at once.

Real threads on a real catalog (SQLite and PostgreSQL), a few hundred
operations. Checked: no row lost or duplicated (contents equal a model, at
the end and at the times the writers were told), uppers only move forward
(a watcher reads both timelines throughout; ``Timeline`` itself refuses a
history whose upper went back or whose ``ct.lower`` skips), and nobody saw
an error.
"""

from __future__ import annotations

import random
import threading
import time as _time
from collections import Counter
from collections.abc import Callable
from typing import Any

import pytest

from airflow_provider_ct.collections import (
    AppendOnlyCollection,
    DifferentialCollection,
    MaintenanceSettings,
    Ticker,
    WriteReceipt,
    readable_since,
    register_collection,
)
from airflow_provider_ct.core.catalog import CatalogConfig
from airflow_provider_ct.core.timeline import Timeline
from tests.conftest import SCHEMA
from tests.helpers import rows_of

LOG, STATE = "conc.log", "conc.state"
pytestmark = pytest.mark.slow


class _Actors:
    def __init__(self) -> None:
        self.errors: list[str] = []
        self.threads: list[threading.Thread] = []

    def start(self, name: str, target: Callable[[], None]) -> None:
        def run() -> None:
            try:
                target()
            except BaseException as exc:
                self.errors.append(f"{name}: {type(exc).__name__}: {exc}")
                raise

        thread = threading.Thread(target=run, name=name)
        thread.start()
        self.threads.append(thread)


def test_blind_writer_differential_writer_and_two_tickers(catalog_config: CatalogConfig) -> None:
    setup = catalog_config.load()
    register_collection(setup, LOG, SCHEMA, "append-only")
    register_collection(setup, STATE, SCHEMA, "differential")
    rng = random.Random(5)
    actors = _Actors()
    stop = threading.Event()

    # -- blind writer: 150 writes in bursts (batched), every 7th a retraction ---------------
    receipts: list[tuple[WriteReceipt, Counter[tuple[Any, ...]]]] = []

    def blind() -> None:
        live: list[tuple[int, str]] = []
        with AppendOnlyCollection.open(catalog_config.load(), LOG, batch_interval_ms=20) as writer:
            serial = 0
            while serial < 150:
                burst = []
                for _ in range(5):
                    serial += 1
                    if serial % 7 == 0 and live:
                        row = live.pop(rng.randrange(len(live)))
                        burst.append((writer.submit([row], [-1]), Counter({row: -1})))
                    else:
                        row = (serial, f"blind-{serial}")
                        live.append(row)
                        burst.append((writer.submit([row]), Counter({row: 1})))
                receipts.extend((future.result(timeout=120), delta) for future, delta in burst)

    # -- differential writer: 60 operations, each checked right after it landed ------------
    desired_log: list[tuple[int | None, Counter[tuple[Any, ...]]]] = []

    def differential() -> None:
        catalog = catalog_config.load()
        writer = DifferentialCollection.open(catalog, STATE)
        reader = catalog.load_table(STATE)
        model: Counter[tuple[Any, ...]] = Counter()
        for op in range(60):
            if op % 3 == 0 or not model:
                model = Counter({(k, f"v{op}"): 1 for k in rng.sample(range(20), 6)})
                result = writer.replace(list(model.elements()))
            else:
                old = rng.choice(sorted(model))
                new = (old[0], f"v{op}")
                model = model - Counter({old: 1}) + Counter({new: 1})
                result = writer.update(retract=[old], insert=[new])
            assert result.status in ("landed", "in-sync"), result
            if result.landed:
                reader.refresh()
                timeline = Timeline.of(reader)
                assert rows_of(reader, timeline.snapshot_at(int(result.time))) == model
            desired_log.append((result.time, Counter(model)))

    # -- tickers ------------------------------------------------------------------------------
    tickers = [
        Ticker(
            catalog_config.load(),
            interval_ms=400,
            maintenance=MaintenanceSettings(retention_ms=1_500, min_files=6),
            maintenance_every=4,
            checkpoint_ms=300,
        ),
        Ticker(catalog_config.load(), interval_ms=600, checkpoint_ms=300),
    ]

    # -- watcher: uppers only move forward ---------------------------------------------------
    seen: dict[str, list[int]] = {LOG: [], STATE: []}

    def watch() -> None:
        catalog = catalog_config.load()
        while not stop.is_set():
            for name in (LOG, STATE):
                timeline = Timeline.of(catalog.load_table(name))  # refuses regressions
                seen[name].append(int(timeline.upper.time))
            _time.sleep(0.03)

    started = _time.monotonic()
    for index, ticker in enumerate(tickers):
        actors.start(f"ticker-{index}", lambda t=ticker: t.run(stop))
    actors.start("watcher", watch)
    actors.start("blind", blind)
    actors.start("differential", differential)
    for thread in actors.threads[-2:]:
        thread.join(timeout=300)
    _time.sleep(0.3)  # a few more ticks after the writers
    stop.set()
    for thread in actors.threads:
        thread.join(timeout=120)
    elapsed = _time.monotonic() - started

    assert actors.errors == []
    catalog = catalog_config.load()
    log_table, state_table = catalog.load_table(LOG), catalog.load_table(STATE)

    # No lost or duplicated rows.
    expected_log: Counter[tuple[Any, ...]] = Counter()
    for _, delta in receipts:
        expected_log.update(delta)
    assert len(receipts) == 150
    assert rows_of(log_table) == +expected_log
    assert rows_of(state_table) == desired_log[-1][1]
    # At every time still readable (expiry ran), the contents are the writes up to it.
    log_timeline = Timeline.of(log_table)
    times = sorted({r.time for r, _ in receipts if r.time is not None})
    assert len(times) < 150  # bursts were batched into shared commits
    since = readable_since(log_table)
    for time in [since, *[t for t in times if t >= since][-5:]]:
        model: Counter[tuple[Any, ...]] = Counter()
        for receipt, delta in receipts:
            if receipt.time is not None and receipt.time <= time:
                model.update(delta)
        snapshot = log_timeline.snapshot_at(time)
        assert (Counter() if snapshot is None else rows_of(log_table, snapshot)) == +model
    # Uppers only moved forward, as every observer saw them.
    for name, uppers in seen.items():
        assert uppers == sorted(uppers), name
    blind_times = [r.time for r, _ in receipts if r.time is not None]
    assert blind_times == sorted(blind_times)  # the writer's commits are in time order
    # The tickers really raced (both advanced collections), and nothing errored.
    for ticker in tickers:
        assert any(o.status == "advanced" for r in ticker.reports for o in r.outcomes)
        assert all(not r.errors for r in ticker.reports)
    # Maintenance ran alongside and expired snapshots of both collections.
    expired = {
        e.table
        for r in tickers[0].reports
        if r.maintenance is not None
        for e in r.maintenance.expiry
        if e.status == "expired"
    }
    assert expired == {LOG, STATE}
    assert elapsed < 240
