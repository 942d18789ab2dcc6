"""The medallion pipeline on real Airflow: every layer ticks on its input's asset events.

The test blind-writes three batches of order events into bronze through the
``medallion_e2e_bronze`` DAG (triggered over REST with the rows as conf) and
does nothing else: silver (a continual task), gold (a view) and the view over
gold are scheduled on their inputs' assets only. Then:

* every downstream run was created by asset events (``asset_triggered``);
* each run ticked at exactly what its input had sealed: the new upper of its
  table's batch is the newest upper among the events that triggered it;
* no tick duplicated or missed: one batch per run, one event per batch, every
  input event consumed by exactly one downstream run, and in the end every
  layer's upper equals bronze's;
* the contents equal a Python model of the medallion over the rows the test
  wrote: silver the latest event per order, gold revenue per customer and
  day, the view over gold revenue per day; every gold snapshot equals the
  model over the first k writes for some k (k never decreasing, 3 at the end).
"""

from __future__ import annotations

import ast
import json
import time
from collections import Counter, defaultdict
from typing import Any

import pytest

from airflow_provider_ct.core.timeline import Timeline
from tests.e2e.conftest import Stack
from tests.e2e_dags.e2e_medallion import BRONZE, LAYERS, NAMESPACE
from tests.helpers import rows_of

pytestmark = [pytest.mark.timeout(900), pytest.mark.e2e, pytest.mark.slow, pytest.mark.spark]

BRONZE_TABLE = f"{NAMESPACE}.order_events"
SILVER, GOLD, BY_DAY = LAYERS  # dag ids
INPUT_OF = {SILVER: BRONZE_TABLE, GOLD: LAYERS[SILVER], BY_DAY: LAYERS[GOLD]}
D1, D2 = "2026-11-20", "2026-11-21"


def _event(
    order: int, customer: str, day: str, cents: int, status: str, seq: int
) -> dict[str, Any]:
    return {
        "order_id": order,
        "customer": customer,
        "day": day,
        "amount_cents": cents,
        "status": status,
        "seq": seq,
    }


#: The test's three bronze writes (seq grows per order across writes).
WRITES: list[list[dict[str, Any]]] = [
    [
        _event(1, "ada", D1, 1000, "placed", 1),
        _event(2, "ada", D1, 250, "placed", 2),
        _event(3, "grace", D1, 700, "placed", 3),
        _event(4, "grace", D2, 1200, "placed", 4),
    ],
    [
        _event(2, "ada", D1, 250, "shipped", 5),
        _event(3, "grace", D1, 700, "cancelled", 6),
        _event(5, "linus", D2, 90, "placed", 7),
        _event(5, "linus", D2, 95, "placed", 8),  # two events of one order in one write
    ],
    [
        _event(1, "ada", D1, 1100, "shipped", 9),
        _event(6, "ada", D2, 300, "placed", 10),
    ],
]
COLUMNS = ("order_id", "customer", "day", "amount_cents", "status", "seq")


# -- the model -----------------------------------------------------------------------------
def model_silver(events: list[dict[str, Any]]) -> Counter[tuple[Any, ...]]:
    latest: dict[int, dict[str, Any]] = {}
    for e in events:
        if e["order_id"] not in latest or e["seq"] > latest[e["order_id"]]["seq"]:
            latest[e["order_id"]] = e
    return Counter(tuple(e[c] for c in COLUMNS) for e in latest.values())


def model_gold(events: list[dict[str, Any]]) -> Counter[tuple[Any, ...]]:
    groups: dict[tuple[str, str], list[int]] = defaultdict(list)
    for _order, customer, day, cents, status, _seq in model_silver(events):
        if status != "cancelled":
            groups[customer, day].append(cents)
    return Counter((c, d, len(v), sum(v)) for (c, d), v in groups.items())


def model_by_day(events: list[dict[str, Any]]) -> Counter[tuple[Any, ...]]:
    days: dict[str, list[int]] = defaultdict(list)
    for _customer, day, _orders, revenue in model_gold(events):
        days[day].append(revenue)
    return Counter((d, len(v), sum(v)) for d, v in days.items())


# -- Airflow -------------------------------------------------------------------------------
def _write(stack: Stack, rows: list[dict[str, Any]]) -> str:
    run = stack.api.call(
        "POST", f"/dags/{BRONZE}/dagRuns", {"logical_date": None, "conf": {"rows": rows}}
    )
    return str(run["dag_run_id"])


def _wait_run(stack: Stack, dag_id: str, run_id: str, timeout: float = 300) -> None:
    deadline = time.monotonic() + timeout
    while True:
        states = {r["dag_run_id"]: r["state"] for r in stack.api.runs(dag_id)}
        if states.get(run_id) in ("success", "failed"):
            assert states[run_id] == "success", f"{dag_id} {run_id}: {states[run_id]}"
            return
        assert time.monotonic() < deadline, f"{dag_id} {run_id} did not finish\n{stack.log_tail()}"
        time.sleep(2)


def _uppers(catalog: Any) -> dict[str, int | None]:
    tables = [BRONZE_TABLE, *LAYERS.values()]
    out: dict[str, int | None] = {}
    for name in tables:
        try:
            out[name] = Timeline.of(catalog.load_table(name)).upper.time
        except Exception:  # not created yet
            out[name] = None
    return out


def _settle(stack: Stack, catalog: Any, timeout: float = 600) -> None:
    """Wait until every layer caught up with bronze and no downstream run is active."""
    deadline = time.monotonic() + timeout
    while True:
        uppers = _uppers(catalog)
        caught_up = len(set(uppers.values())) == 1
        idle = all(r["state"] in ("success", "failed") for d in LAYERS for r in stack.api.runs(d))
        if caught_up and idle:
            return
        assert time.monotonic() < deadline, f"not settled: {uppers}\n{stack.log_tail()}"
        time.sleep(3)


def _events_of(stack: Stack, table: str) -> list[dict[str, Any]]:
    name = f"ct.{table}"
    answer = stack.api.call("GET", f"/assets/events?name_pattern={name}&limit=100")
    return [e for e in answer["asset_events"] if e["name"] == name]


def _consumed(stack: Stack, dag_id: str, run_id: str) -> list[dict[str, Any]]:
    answer = stack.api.call("GET", f"/dags/{dag_id}/dagRuns/{run_id}/upstreamAssetEvents")
    return list(answer["asset_events"])


MINT_TASKS = {
    SILVER: "ct_e2e_medallion_orders_latest.mint",
    GOLD: "view_e2e_medallion_revenue_daily.mint",
    BY_DAY: "view_e2e_medallion_revenue_by_day.mint",
}


def _minted_time(stack: Stack, dag_id: str, run_id: str) -> int | None:
    """The T the run's mint minted, or ``None`` when it skipped (a no-op run)."""
    path = f"/dags/{dag_id}/dagRuns/{run_id}/taskInstances/{MINT_TASKS[dag_id]}"
    if stack.api.call("GET", path)["state"] != "success":
        return None
    value = stack.api.call("GET", f"{path}/xcomEntries/return_value?deserialize=true")["value"]
    if isinstance(value, str):
        value = json.loads(value) if value.startswith('{"') else ast.literal_eval(value)
    return int(value["time"])


def _batch_uppers(table: Any) -> list[int]:
    """The upper each of our batches left the table at, oldest first (one per batch)."""
    last: dict[str, int] = {}
    for entry in Timeline.of(table).entries:
        if entry.batch_id is not None and entry.upper is not None:
            assert entry.upper.time is not None
            last[entry.batch_id] = entry.upper.time  # a batch's last snapshot has its upper
    return list(last.values())


def test_medallion_pipeline_ticks_each_layer_on_asset_events_at_the_sealed_time(
    stack: Stack,
) -> None:
    catalog = stack.embedded.load()
    for dag_id in (BRONZE, *LAYERS):
        stack.api.set_paused(dag_id, False)
    for rows in WRITES:  # one bronze run at a time, so the writes land in this order
        _wait_run(stack, BRONZE, _write(stack, rows))
    _settle(stack, catalog)

    for dag_id, table_name in LAYERS.items():
        runs = sorted(stack.api.runs(dag_id), key=lambda r: str(r["run_after"]))
        assert runs and {(r["run_type"], r["state"]) for r in runs} == {
            ("asset_triggered", "success")
        }, runs
        inputs = _events_of(stack, INPUT_OF[dag_id])
        # One event per batch of the input, announcing exactly that batch's upper.
        input_table = catalog.load_table(INPUT_OF[dag_id])
        assert sorted(e["extra"]["upper"] for e in inputs) == _batch_uppers(input_table)
        # Each run ticked at a sealed point of its input, covering its triggering events.
        minted = []
        for run in runs:
            events = _consumed(stack, dag_id, run["dag_run_id"])
            assert events, run  # triggered by events
            t = _minted_time(stack, dag_id, run["dag_run_id"])
            if t is not None:
                assert t + 1 in _batch_uppers(input_table), (dag_id, t)
                assert t + 1 >= max(e["extra"]["upper"] for e in events), (dag_id, t, events)
                minted.append(t + 1)
        # One batch per minting run, in order; no event consumed twice.
        assert minted == sorted(set(minted)) == _batch_uppers(catalog.load_table(table_name))
        ids = [e["id"] for r in runs for e in _consumed(stack, dag_id, r["dag_run_id"])]
        assert len(ids) == len(set(ids)) and set(ids) <= {e["id"] for e in inputs}, dag_id
        # Its own events announce its batches (the next layer's input).
        own = _events_of(stack, table_name)
        assert {e["extra"]["kind"] for e in own} == {
            "continual-task" if dag_id == SILVER else "view"
        }

    everything = [e for rows in WRITES for e in rows]
    assert rows_of(catalog.load_table(LAYERS[SILVER])) == model_silver(everything)
    assert rows_of(catalog.load_table(LAYERS[BY_DAY])) == model_by_day(everything)
    gold = catalog.load_table(LAYERS[GOLD])
    prefixes = [model_gold([e for rows in WRITES[:k] for e in rows]) for k in range(4)]
    ks = []
    for entry in Timeline.of(gold).entries:
        if entry.time is not None:
            contents = rows_of(gold, entry.snapshot_id)
            assert contents in prefixes, (entry.time, contents)
            ks.append(prefixes.index(contents))
    assert ks == sorted(ks) and ks[-1] == 3, ks
