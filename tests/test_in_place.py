"""In-place aggregates through ``dag.test()``: exact ticks, a kept state, rebuilt when edited.

Two views over an input ``ip.events`` created with Spark SQL, partitioned by
``days(ts)``, changed by Spark inserts and merge-on-read updates and
deletes: per day and country (``COUNT``, ``SUM``, ``AVG`` of a decimal,
``COUNT`` of a nullable column; target partitioned by ``day``) and one group
(no ``GROUP BY``). The oracle is the test's own list of events, with exact
fractions for the averages; the state table is read back with PyIceberg and
its recorded input snapshot compared with the input's head as the test
reads it.
"""

from __future__ import annotations

import datetime as dt
import json
import sys
from collections import Counter
from decimal import Decimal
from fractions import Fraction
from pathlib import Path
from typing import Any

import pytest

from airflow_provider_ct.core.catalog import CatalogConfig
from airflow_provider_ct.core.tables import iter_tables
from tests.helpers import files_by_day, fresh_events, rows_of, task_xcom

ROOT = Path(__file__).resolve().parent.parent
pytestmark = [pytest.mark.spark, pytest.mark.airflow, pytest.mark.slow]
START = dt.datetime(2026, 3, 1, 6)

Event = tuple[int, dt.datetime, str, int, Decimal | None]


@pytest.fixture
def lake(spark: Any, spark_lake: CatalogConfig) -> Any:
    columns = "id BIGINT, ts TIMESTAMP, country STRING, amount BIGINT, price DECIMAL(10, 2)"
    fresh_events(spark, "ip", columns, "days(ts)")
    sys.path.insert(0, str(ROOT / "tests" / "dags"))
    return spark_lake.load()


def _insert(spark: Any, events: list[Event], rows: list[Event]) -> None:
    values = ", ".join(
        f"({i}, TIMESTAMP '{ts:%Y-%m-%d %H:%M:%S}', '{c}', {a}, "
        f"{'NULL' if p is None else f'CAST({p} AS DECIMAL(10, 2))'})"
        for i, ts, c, a, p in rows
    )
    spark.sql(f"INSERT INTO ct.ip.events VALUES {values}")
    events.extend(rows)


def _daily(events: list[Event]) -> dict[tuple[Any, ...], tuple[Any, ...]]:
    """(day, country) -> (n, total, exact average price or None, priced)."""
    groups: dict[tuple[dt.date, str], list[Event]] = {}
    for event in events:
        groups.setdefault((event[1].date(), event[2]), []).append(event)
    out = {}
    for key, rows in groups.items():
        prices = [p for *_, p in rows if p is not None]
        average = Fraction(sum(prices, Decimal(0))) / len(prices) if prices else None
        out[key] = (len(rows), sum(r[3] for r in rows), average, len(prices))
    return out


def _assert_daily(table: Any, events: list[Event]) -> None:
    got = {}
    for (day, country, n, total, average, priced), copies in rows_of(table).items():
        assert copies == 1 and (day, country) not in got
        got[(day, country)] = (n, total, average, priced)
    want = _daily(events)
    assert set(got) == set(want)
    for key, (n, total, average, priced) in want.items():
        g = got[key]
        assert (g[0], g[1], g[3]) == (n, total, priced), key
        if average is None:
            assert g[2] is None, key
        else:  # Spark's AVG of DECIMAL(10, 2): DECIMAL(14, 6), rounded half-up
            assert g[2].as_tuple().exponent == -6
            assert abs(Fraction(g[2]) - average) <= Fraction(1, 2 * 10**6), (key, g[2])


def _total(events: list[Event]) -> Counter[tuple[Any, ...]]:
    kept = [e for e in events if e[3] > 2]
    prices = [e[4] for e in kept if e[4] is not None]
    return Counter([(len(kept), sum(prices, Decimal(0)) if prices else None)])


def _tick(dag: Any, catalog: Any) -> dict[str, dict[str, Any]]:
    import time as _time

    from airflow_provider_ct.core.frontier import now_ms

    head = catalog.load_table("ip.events").metadata.current_snapshot()
    while now_ms() < head.timestamp_ms + 1_100:
        _time.sleep(0.05)
    run = dag.test(run_conf={"time": now_ms() - 1_050})
    assert run.state == "success", run.state
    return {g: task_xcom(dag.dag_id, run.run_id, f"{g}.write") for g in ("daily", "total")}


def _state_pins(catalog: Any, name: str) -> dict[str, Any]:
    summary = catalog.load_table(name).metadata.current_snapshot().summary
    return json.loads(summary["ct.state-inputs"])


def test_in_place_ticks_are_exact_and_keep_their_state(lake: Any, spark: Any) -> None:
    import in_place

    dag = in_place.ip_views
    events: list[Event] = []
    days = [START + dt.timedelta(days=d) for d in range(4)]
    rows: list[Event] = []
    for i, (day, country) in enumerate((d, c) for d in days for c in ("DE", "FR")):
        price = None if i % 3 == 0 else Decimal(f"{i}.{i % 7}{i % 3}")
        rows.append((i, day + dt.timedelta(minutes=7 * i), country, i, price))
    _insert(spark, events, rows)
    first = _tick(dag, lake)
    assert first["daily"]["strategy"] == "full" and first["daily"]["aggregate_state"] == "rebuilt"
    _assert_daily(lake.load_table("ip.daily"), events)
    assert rows_of(lake.load_table("ip.total")) == _total(events)
    head = lake.load_table("ip.events").metadata.current_snapshot().snapshot_id
    assert _state_pins(lake, "ip.daily__ct_state") == {"ip.events": head}
    listed = dict(iter_tables(lake, ["ip"]))  # what the demo and the registry list
    assert set(listed) == {"ip.daily", "ip.events", "ip.total"}  # not the state tables
    before = files_by_day(lake.load_table("ip.daily"))

    # An update (merge-on-read) on day 1, a delete and an insert on day 3 with a
    # NULL price, and every row of day 2 deleted: its groups disappear.
    spark.sql("UPDATE ct.ip.events SET amount = amount + 100, price = NULL WHERE id = 2")
    spark.sql(
        f"DELETE FROM ct.ip.events WHERE id = 7 OR ts >= TIMESTAMP '{days[2]:%Y-%m-%d}' "
        f"AND ts < TIMESTAMP '{days[3]:%Y-%m-%d}'"
    )
    gone = {e[0] for e in events if e[0] == 7 or e[1].date() == days[2].date()}
    events = [(i, t, c, a + 100, None) if i == 2 else (i, t, c, a, p) for i, t, c, a, p in events]
    events = [e for e in events if e[0] not in gone]
    _insert(spark, events, [(99, days[3] + dt.timedelta(hours=3), "FR", 5, None)])
    report = _tick(dag, lake)
    for name in ("daily", "total"):
        assert report[name]["strategy"] == "aggregate", report[name]
        assert report[name]["aggregate_state"] == "kept"
    _assert_daily(lake.load_table("ip.daily"), events)
    assert not [k for k in _daily(events) if k[0] == days[2].date()]
    assert rows_of(lake.load_table("ip.total")) == _total(events)
    head = lake.load_table("ip.events").metadata.current_snapshot().snapshot_id
    assert _state_pins(lake, "ip.daily__ct_state") == {"ip.events": head}
    after = files_by_day(lake.load_table("ip.daily"))
    assert after[days[0].date()] == before[days[0].date()]  # no change reached day 0
    # The driver read only the target's files of the changed days (its day partitions).
    assert report["daily"]["diffed_on"] == "driver"
    read = report["daily"]["target_files_read"]
    assert 0 < read <= sum(len(before[d.date()]) for d in days[1:]) < sum(map(len, before.values()))

    # A hand edit of the kept state: the next tick notices and rebuilds it.
    spark.sql("UPDATE ct.ip.daily__ct_state SET __ct_rows = __ct_rows + 5")
    _insert(spark, events, [(100, days[0] + dt.timedelta(hours=1), "DE", 9, Decimal("1.25"))])
    report = _tick(dag, lake)
    assert report["daily"]["strategy"] == "full", report["daily"]
    assert "rebuilt" in report["daily"]["reason"] and "edit" in report["daily"]["reason"]
    assert report["total"]["strategy"] == "aggregate"
    _assert_daily(lake.load_table("ip.daily"), events)
    assert rows_of(lake.load_table("ip.total")) == _total(events)

    # And in place again from the rebuilt state.
    spark.sql("DELETE FROM ct.ip.events WHERE id = 100")
    events = [e for e in events if e[0] != 100]
    report = _tick(dag, lake)
    assert report["daily"]["strategy"] == "aggregate", report["daily"]
    _assert_daily(lake.load_table("ip.daily"), events)
    assert rows_of(lake.load_table("ip.total")) == _total(events)
