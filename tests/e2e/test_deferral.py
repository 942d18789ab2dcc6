"""A deferrable FrontierSensor really waits in the triggerer of a real Airflow.

The sensor's input lags behind the run's tick time: the task instance must sit
in the ``deferred`` state (no worker slot held) for as long as it lags, and
resume and succeed, with its downstream task, once the input advances.
"""

from __future__ import annotations

import time

import pytest

from airflow_provider_ct.core.tables import create_managed_table
from airflow_provider_ct.core.timeline import Timeline
from tests.conftest import SCHEMA
from tests.e2e.checks import FROM_DATE, TICKS, iso
from tests.e2e.conftest import Stack
from tests.e2e_dags.e2e_dags import DEFERRAL_DAG, DEFERRAL_INPUT
from tests.helpers import advance

pytestmark = [pytest.mark.timeout(2400), pytest.mark.e2e, pytest.mark.slow]

SENSOR = "wait_for_events"


def _states(stack: Stack, run_id: str) -> dict[str, str | None]:
    return {ti["task_id"]: ti["state"] for ti in stack.api.task_instances(DEFERRAL_DAG, run_id)}


def _wait_for(stack: Stack, run_id: str, task_id: str, state: str, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while (seen := _states(stack, run_id).get(task_id)) != state:
        assert seen not in ("failed", "upstream_failed"), stack.log_tail()
        assert time.monotonic() < deadline, f"{task_id} is {seen}, not {state}"
        time.sleep(1)


def test_deferrable_sensor_waits_in_the_triggerer_until_the_input_advances(stack: Stack) -> None:
    catalog = stack.embedded.load()
    tick = TICKS[0]
    table = create_managed_table(catalog, DEFERRAL_INPUT, SCHEMA)
    advance(table, tick - 60_000)  # complete through a minute before the tick: lagging
    stack.api.set_paused(DEFERRAL_DAG, False)
    run_id = stack.api.trigger(DEFERRAL_DAG, iso(FROM_DATE))["dag_run_id"]

    _wait_for(stack, run_id, SENSOR, "deferred", timeout=300)
    time.sleep(10)  # several trigger polls later, still waiting and still deferred
    assert _states(stack, run_id)[SENSOR] == "deferred"
    assert not Timeline.of(catalog.load_table(DEFERRAL_INPUT)).upper.seals(tick)

    advance(catalog.load_table(DEFERRAL_INPUT), tick)
    runs = stack.api.wait_for_runs(DEFERRAL_DAG, 1, timeout=300, poll=2)
    assert [r["state"] for r in runs] == ["success"], stack.log_tail()
    assert _states(stack, run_id) == {SENSOR: "success", "after_inputs": "success"}
