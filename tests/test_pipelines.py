"""Frontier-driven ticks: asset events that announce uppers, and ticks at the sealed time.

The writes, ticks and mints run through real Airflow (``dag.test()``): their
asset events are rows of Airflow's metadata database, and the mint's
triggering events are real events attached to its run the way the
scheduler attaches them (``DagRun.consumed_asset_events``). Expected values
come from the tables themselves (their timelines) and from the rule written
in docs/pipelines.md, never from the events under test.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from airflow_provider_ct.core.catalog import CatalogConfig
from airflow_provider_ct.core.frontier import Frontier
from airflow_provider_ct.core.sealed import (
    event_upper,
    frontier_event_extra,
    newest_upper,
    sealed_time,
)
from airflow_provider_ct.core.tables import create_managed_table
from airflow_provider_ct.core.timeline import Timeline
from airflow_provider_ct.exceptions import AssetEventError, CTError, FrontierRegressionError
from tests.conftest import SCHEMA
from tests.helpers import advance

ROOT = Path(__file__).resolve().parent.parent
U = Frontier.at


# -- the rule, without Airflow ------------------------------------------------------------
def test_several_events_of_one_input_mean_the_newest_and_backwards_is_refused() -> None:
    extras = [(f"e{i}", {"table": "ns.a", "upper": u}) for i, u in enumerate([5, 9, 9, 12])]
    assert newest_upper("ns.a", extras) == U(12)
    with pytest.raises(AssetEventError, match="behind the upper 12 of an earlier event"):
        newest_upper("ns.a", [*extras, ("late", {"upper": 7})])


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        ({}, "has no 'upper'"),
        (None, "must be an object"),
        ({"upper": "soon"}, "bad 'upper'"),
        ({"upper": -1}, "bad 'upper'"),
        ({"upper": True}, "bad 'upper'"),
        ({"upper": 1.5}, "bad 'upper'"),
        ({"upper": 5, "table": "ns.other"}, "about 'ns.other', not 'ns.a'"),
    ],
)
def test_a_malformed_event_is_a_clear_ct_error(extra: Any, message: str) -> None:
    with pytest.raises(AssetEventError, match=message) as caught:
        event_upper(extra, "ns.a", "event 1")
    assert isinstance(caught.value, CTError)


def test_sealed_time_is_the_meet_of_the_tables_uppers_minus_one_events_checked() -> None:
    tables = {"a": U(100), "b": U(40)}
    assert sealed_time({"a": U(60)}, tables) == 39  # b has no event: its table's upper bounds
    assert sealed_time({"a": U(30), "b": U(40)}, tables) == 39  # the tables, not older events
    assert sealed_time({"a": U(100), "b": U(40)}, tables) == 39
    assert sealed_time({"a": U(100)}, {"a": U(100)}) == 99
    assert sealed_time({}, {"a": U(0)}) is None  # nothing sealed yet
    assert sealed_time({"a": U(70)}, {"a": U(70), "c": Frontier.empty()}) == 69  # closed: no bound
    with pytest.raises(AssetEventError, match="every input is closed"):
        sealed_time({}, {"c": Frontier.empty()})
    with pytest.raises(FrontierRegressionError, match="the table's upper is 40"):
        sealed_time({"b": U(41)}, tables)  # an event ahead of its table
    with pytest.raises(AssetEventError, match="not inputs"):
        sealed_time({"z": U(1)}, tables)


def test_event_extra_leaves_out_what_the_writer_does_not_know() -> None:
    extra = frontier_event_extra(table="ns.a", upper=U(8), time=7, batch_id="b1", kind="x")
    assert extra == {"table": "ns.a", "upper": 8, "time": 7, "batch_id": "b1", "kind": "x"}
    assert json.loads(json.dumps(extra)) == extra


# -- through Airflow ----------------------------------------------------------------------
def _dags() -> Any:
    sys.path.insert(0, str(ROOT / "tests" / "dags"))
    import pipeline_assets

    return pipeline_assets


_DATES: Iterator[datetime] = (
    datetime(2026, 7, 1, tzinfo=UTC) + timedelta(minutes=i) for i in range(10_000)
)


def _plain(row: Any) -> SimpleNamespace:
    """An AssetEvent row as plain values (usable after its session closed)."""
    return SimpleNamespace(
        id=row.id,
        asset_id=row.asset_id,
        asset=SimpleNamespace(name=row.asset.name, uri=row.asset.uri),
        extra=dict(row.extra or {}),
        timestamp=row.timestamp,
        source_task_id=row.source_task_id,
        source_dag_id=row.source_dag_id,
        source_run_id=row.source_run_id,
        source_map_index=row.source_map_index,
    )


def _events(table: str) -> list[SimpleNamespace]:
    """The asset events of ``table`` (``ns.t``) in Airflow's database, oldest first."""
    from airflow.models.asset import AssetEvent, AssetModel
    from airflow.utils.session import create_session
    from sqlalchemy import select

    with create_session() as session:
        rows = session.scalars(
            select(AssetEvent)
            .join(AssetModel, AssetEvent.asset_id == AssetModel.id)
            .where(AssetModel.name == f"ct.{table}")
            .order_by(AssetEvent.id)
        ).all()
        return [_plain(row) for row in rows]


def _run(dag: Any, conf: dict[str, Any] | None = None) -> Any:
    run = dag.test(logical_date=next(_DATES), run_conf=conf)
    assert run.state == "success", run.state
    return run


def _mint_with_events(events: list[Any]) -> int | None:
    """The sealed mint's T for a run whose triggering asset events are ``events``.

    ``events`` are rows of Airflow's database; the context is built from them
    exactly as the task runner builds it from the run's consumed events
    (``dag.test()`` recreates its run, so it cannot carry consumed events).
    ``None``: the mint skipped.
    """
    from airflow.sdk.api.datamodels._generated import AssetReferenceAssetEventDagRun
    from airflow.sdk.exceptions import AirflowSkipException
    from airflow.sdk.execution_time.comms import AssetEventDagRunReferenceResult
    from airflow.sdk.execution_time.context import TriggeringAssetEventsAccessor

    from airflow_provider_ct.assets import SEALED
    from airflow_provider_ct.operators.mint import MintOperator

    refs = [
        AssetEventDagRunReferenceResult(
            asset=AssetReferenceAssetEventDagRun(name=e.asset.name, uri=e.asset.uri, extra={}),
            extra=e.extra,
            source_task_id=e.source_task_id,
            source_dag_id=e.source_dag_id,
            source_run_id=e.source_run_id,
            source_map_index=e.source_map_index,
            source_aliases=[],
            timestamp=e.timestamp,
        )
        for e in events
    ]
    context = {"triggering_asset_events": TriggeringAssetEventsAccessor.build(refs)}
    mint = MintOperator(task_id="mint", target="pipe.view", sql=_dags().SEALED_SQL, time=SEALED)
    try:
        return int(mint.execute(context)["time"])
    except AirflowSkipException:
        return None


def _copy(event: Any, **changes: Any) -> Any:
    """Another event of the same asset (a new row of Airflow's database), with ``changes``."""
    from airflow.models.asset import AssetEvent
    from airflow.utils.session import create_session

    with create_session() as session:
        row = AssetEvent(asset_id=event.asset_id, **changes)
        session.add(row)
        session.flush()
        session.refresh(row)
        return _plain(row)


def _upper(catalog: Any, table: str) -> int:
    upper = Timeline.of(catalog.load_table(table)).upper.time
    assert upper is not None
    return upper


@pytest.mark.airflow
def test_writes_and_ticks_announce_the_new_upper_only_when_it_moved(
    airflow_db: None, default_catalog: CatalogConfig
) -> None:
    dags, catalog = _dags(), default_catalog.load()
    _run(dags.write_a)
    _run(dags.write_b)
    (event,) = _events("pipe.a")
    timeline = Timeline.of(catalog.load_table("pipe.a"))
    newest = timeline.entries[-1]
    assert event.extra["upper"] == timeline.upper.time
    assert event.extra["time"] == newest.time == timeline.upper.time - 1
    assert event.extra["batch_id"] == newest.batch_id
    assert (event.extra["rows_inserted"], event.extra["rows_retracted"]) == (1, 0)
    assert (event.extra["table"], event.extra["kind"]) == ("pipe.a", "blind-write")

    _run(dags.cancelled_a)  # +1 -1: nothing committed
    assert len(_events("pipe.a")) == 1
    assert _upper(catalog, "pipe.a") == event.extra["upper"]

    tick_at = max(_upper(catalog, "pipe.a"), _upper(catalog, "pipe.b")) + 60_000
    _run(dags.tick, {"time": tick_at})
    for table in ("pipe.a", "pipe.b"):
        assert _upper(catalog, table) == tick_at
        assert _events(table)[-1].extra == {"table": table, "upper": tick_at, "kind": "tick"}
    _run(dags.tick, {"time": tick_at})  # already there: nothing moved, nothing announced
    assert [len(_events(t)) for t in ("pipe.a", "pipe.b")] == [2, 2]


@pytest.mark.airflow
def test_a_sealed_tick_is_at_what_the_triggering_events_and_tables_sealed(
    airflow_db: None, default_catalog: CatalogConfig
) -> None:

    dags, catalog = _dags(), default_catalog.load()
    # Writes in this order: a1 < b1 < a2 < a3 (each lands at >= the wall clock).
    uppers: dict[str, list[int]] = {"pipe.a": [], "pipe.b": []}
    for table, dag in [
        ("pipe.a", dags.write_a),
        ("pipe.b", dags.write_b),
        ("pipe.a", dags.write_a),
        ("pipe.a", dags.write_a),
    ]:
        _run(dag)
        uppers[table].append(_upper(catalog, table))  # the table's own record
    (a1, a2, a3), (b1,) = uppers["pipe.a"], uppers["pipe.b"]
    assert a1 < b1 < a2 < a3
    ev_a, ev_b = _events("pipe.a")[-3:], _events("pipe.b")[-1:]

    # Three queued events of a, none of b: b's table bounds the tick.
    assert _mint_with_events(ev_a) == b1 - 1
    # a's oldest event only: the tables bound it (an event another run did not
    # get must not be left behind), so again b1 - 1, not a1 - 1.
    assert _mint_with_events([ev_a[0], *ev_b]) == b1 - 1
    # b moves past a: a's table (its newest write) bounds the tick.
    _run(dags.write_b)
    b2 = _upper(catalog, "pipe.b")
    ev_b = _events("pipe.b")[-2:]
    assert _mint_with_events([*ev_a, *ev_b]) == min(a3, b2) - 1 == a3 - 1
    # The DAG's own run (dag.test(): no triggering events): every input's table bounds it.
    assert _run(dags.sealed).state == "success"
    assert _mint_with_events([]) == min(a3, b2) - 1

    # The view already sealed that time (its upper is exactly a3): a no-op (the mint skips).
    view = create_managed_table(catalog, "pipe.view", SCHEMA)
    advance(view, a3 - 1)
    assert _upper(catalog, "pipe.view") == a3
    assert _mint_with_events([*ev_a, *ev_b]) is None
    assert _upper(catalog, "pipe.view") == a3

    # A malformed event, an upper that goes backwards, one ahead of its table: refused.
    later = ev_a[0].timestamp + timedelta(hours=1)
    bad = _copy(ev_a[0], extra={"table": "pipe.a", "upper": "soon"}, timestamp=later)
    with pytest.raises(AssetEventError, match="bad 'upper'"):
        _mint_with_events([*ev_b, bad])
    late = _copy(ev_a[0], extra=dict(ev_a[0].extra), timestamp=later)  # a1's upper, after a3
    with pytest.raises(AssetEventError, match="uppers never go backwards"):
        _mint_with_events([*ev_a, late, *ev_b])
    ahead = _copy(ev_b[-1], extra={**ev_b[-1].extra, "upper": b2 + 10**6}, timestamp=later)
    with pytest.raises(FrontierRegressionError, match="the table's upper is"):
        _mint_with_events([*ev_a, ahead])


def test_a_landed_append_announces_its_batch_and_the_loser_announces_nothing(
    default_catalog: CatalogConfig,
) -> None:
    """Two quiet ticks minted at the same lower: the first appended lands, the other loses.

    Quiet ticks need no Spark (docs/views.md); the write reports are real,
    and the outlet events are Airflow's own accessor, as in a task run.
    """
    from airflow.sdk.execution_time.context import OutletEventAccessors

    from airflow_provider_ct.assets import frontier_alias, table_asset
    from airflow_provider_ct.operators.append import AppendOperator
    from airflow_provider_ct.operators.mint import MintOperator
    from tests.helpers import XComTI
    from tests.test_quiet import SQL, TARGET, heads, land_view, seal, shop
    from tests.test_quiet_operators import view_write

    catalog = default_catalog.load()
    written = heads(shop(catalog))
    seal(catalog, 1000)
    land_view(catalog, TARGET, SQL, 1000, written)
    seal(catalog, 3000)
    asset, alias = table_asset(TARGET), frontier_alias(f"ct.{TARGET}")

    def staged(time: int) -> tuple[dict[str, Any], dict[str, Any]]:
        """A minted description and its write report (quiet: no Spark), not appended yet."""
        desc = dict(MintOperator(task_id="mint", target=TARGET, sql=SQL, time=time).execute({}))
        return desc, view_write(desc, spark_master="spark://127.0.0.1:9").execute({})

    def append(desc: dict[str, Any], report: dict[str, Any]) -> tuple[dict[str, Any], list[Any]]:
        events = OutletEventAccessors()
        operator = AppendOperator(
            task_id="append",
            report=report,
            description_task_id="mint",
            asset=asset,
            outlets=[alias],
        )
        out = operator.execute({"ti": XComTI({"mint": desc}), "outlet_events": events})
        return out, list(events[alias].asset_alias_events)

    # Two ticks race from the same lower: both staged before either appends.
    (at_2000, report_2000), (at_3000, report_3000) = staged(2000), staged(3000)
    out, (event,) = append(at_3000, report_3000)
    assert out["appended"]
    timeline = Timeline.of(catalog.load_table(TARGET))
    newest = timeline.entries[-1]
    assert event.dest_asset_key.name == asset.name
    assert event.extra == {
        "table": TARGET,
        "upper": timeline.upper.time,
        "lower": 1001,
        "time": 3000,
        "snapshot_id": newest.snapshot_id,
        "batch_id": newest.batch_id,
        "rows_inserted": 0,
        "rows_retracted": 0,
        "refresh": "quiet",
        "kind": "view",
    }
    assert timeline.upper == Frontier.at(3001)
    # The other description minted at the same lower now loses: no event.
    assert at_2000["lower"] == at_3000["lower"] == 1001
    lost, events = append(at_2000, report_2000)
    assert not lost["appended"] and events == []
    assert Timeline.of(catalog.load_table(TARGET)).upper == Frontier.at(3001)
