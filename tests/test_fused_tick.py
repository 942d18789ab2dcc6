"""A view ticked by one fused task (mint, write, append) through ``dag.test()``.

The inputs are written by the test, which records the snapshot of each
write; the oracle is DuckDB over those snapshots. A quiet tick must not run
a Spark job: the warm engine's job call and ``subprocess.Popen`` of a JVM
are replaced by refusals for it, so any job fails the task.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from airflow_provider_ct.core.catalog import CatalogConfig
from airflow_provider_ct.core.frontier import timestamp_from_datetime
from airflow_provider_ct.core.tables import create_managed_table
from airflow_provider_ct.core.timeline import Timeline
from airflow_provider_ct.engine import client
from tests.conftest import SCHEMA
from tests.helpers import advance, oracle, replace_contents, rows_of
from tests.warm import private_warm_dir

ROOT = Path(__file__).resolve().parent.parent
GROUP = "view_fz_view"

pytestmark = [pytest.mark.spark, pytest.mark.airflow]


def _rows(*pairs: tuple[int, str | None]) -> pa.Table:
    return pa.Table.from_pylist([{"k": k, "v": v} for k, v in pairs], SCHEMA)


def _run_record(dag_id: str, run_id: str) -> tuple[dict[str, str], dict[str, Any]]:
    """Each task's state, and the tick task's XComs by key, as Airflow recorded them."""
    from airflow.models import TaskInstance
    from airflow.models.xcom import XComModel
    from airflow.utils.session import create_session
    from sqlalchemy import select

    with create_session() as session:
        tis = session.scalars(
            select(TaskInstance).where(TaskInstance.dag_id == dag_id, TaskInstance.run_id == run_id)
        ).all()
        xcoms = session.scalars(
            select(XComModel).where(
                XComModel.dag_id == dag_id,
                XComModel.run_id == run_id,
                XComModel.task_id == f"{GROUP}.tick",
            )
        ).all()
        return (
            {ti.task_id: str(ti.state) for ti in tis},
            {x.key: XComModel.deserialize_value(x) for x in xcoms},
        )


def _refuse(*args: Any, **kwargs: Any) -> Any:
    raise AssertionError("a quiet tick ran a Spark job")


@pytest.fixture
def warm_dir() -> Iterator[Path]:
    """A private folder for this test's warm driver, stopped after."""
    with private_warm_dir() as folder:
        yield folder


def test_a_fused_view_ticks_busy_and_quiet_in_one_task(
    airflow_db: None,
    default_catalog: CatalogConfig,
    monkeypatch: pytest.MonkeyPatch,
    warm_dir: Path,
) -> None:
    sys.path.insert(0, str(ROOT / "tests" / "dags"))
    import fused_view

    catalog = default_catalog.load()
    a = create_managed_table(catalog, "fz.a", SCHEMA)
    b = create_managed_table(catalog, "fz.b", SCHEMA)
    written = {
        "fz.a": replace_contents(a, 500, _rows((1, None), (2, None), (2, None), (5, None))),
        "fz.b": replace_contents(b, 500, _rows((1, "x"), (2, "y"), (5, "x"), (7, None))),
    }
    hours = [datetime(2026, 3, 1, h, tzinfo=UTC) for h in (1, 2, 3)]
    ticks = [timestamp_from_datetime(h) for h in hours]

    def tick(n: int) -> tuple[dict[str, str], dict[str, Any]]:
        run = fused_view.dag.test(logical_date=hours[n])
        assert run.state == "success", run.state
        return _run_record("fused_view", run.run_id)

    # Busy: the first tick creates the view, the second follows a change of b.
    for n in (0, 1):
        if n == 1:
            written["fz.b"] = replace_contents(b, ticks[0] + 10, _rows((1, "x"), (2, "x")))
        for name in ("fz.a", "fz.b"):
            advance(catalog.load_table(name), ticks[n])
        states, xcoms = tick(n)
        assert states == {f"{GROUP}.wait_for_inputs": "success", f"{GROUP}.tick": "success"}
        table = catalog.load_table("fz.view")
        assert Timeline.of(table).entries[-1].time == ticks[n]
        assert rows_of(table) == oracle(catalog, fused_view.SQL, written)
        assert xcoms["return_value"]["appended"] is True
        assert xcoms["write_report"]["quiet"] is False
        assert xcoms["description"]["time"] == ticks[n]
    # Quiet: nothing changed; no Spark job may run, the frontier still moves.
    for name in ("fz.a", "fz.b"):
        advance(catalog.load_table(name), ticks[2])
    before = len(catalog.load_table("fz.view").metadata.snapshots)
    monkeypatch.setattr(client, "run_warm_job", _refuse)
    monkeypatch.setattr(subprocess, "Popen", _refuse)
    states, xcoms = tick(2)
    assert states[f"{GROUP}.tick"] == "success"
    table = catalog.load_table("fz.view")
    assert Timeline.of(table).entries[-1].time == ticks[2]
    assert len(table.metadata.snapshots) == before + 1
    assert rows_of(table) == oracle(catalog, fused_view.SQL, written)
    assert xcoms["write_report"]["quiet"] is True
    # The same tick again: mint refuses T (already sealed), so the task skips, nothing lands.
    run = fused_view.dag.test(logical_date=hours[2])
    states, _ = _run_record("fused_view", run.run_id)
    assert states[f"{GROUP}.tick"] == "skipped", states
    assert len(catalog.load_table("fz.view").metadata.snapshots) == before + 1
