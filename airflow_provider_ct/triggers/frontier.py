"""FrontierTrigger: wait in the triggerer until input uppers pass a time.

Runs with PyIceberg only (no JVM); the blocking catalog calls run in a
thread so the triggerer's event loop stays responsive.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Mapping, Sequence
from datetime import timedelta
from typing import Any

from airflow.sdk import BaseSensorOperator, conf
from airflow.triggers.base import BaseTrigger, TriggerEvent

from airflow_provider_ct.exceptions import CTError
from airflow_provider_ct.hooks.iceberg import IcebergCatalogHook


def lagging_inputs(
    iceberg_conn_id: str,
    tables: Sequence[str],
    time: int,
    policies: Mapping[str, str] | None = None,
) -> dict[str, int | None]:
    """Inputs whose upper does not yet seal ``time``, with their uppers.

    Reads the catalog through the hook only: the triggerer runs this, and
    triggers sit below the operators (which defer to them), so they depend
    on the hook and ``core/``, never on ``operators/``.
    """
    hook = IcebergCatalogHook(iceberg_conn_id)
    lagging: dict[str, int | None] = {}
    for name, timeline in hook.timelines(tables, policies).items():
        if not timeline.upper.seals(time):
            lagging[name] = timeline.upper.time
    return lagging


class FrontierTrigger(BaseTrigger):
    """Fires once every table in ``tables`` has an upper beyond ``time``.

    :param tables: ``namespace.table`` names.
    :param time: the tick time (epoch ms) the inputs must seal.
    :param policies: per external table, ``wallclock[:<ms>]`` or ``summary:<key>``.
    :param poll_interval: seconds between catalog reads.
    """

    def __init__(
        self,
        *,
        tables: Sequence[str],
        time: int,
        iceberg_conn_id: str = IcebergCatalogHook.default_conn_name,
        policies: Mapping[str, str] | None = None,
        poll_interval: float = 5.0,
    ) -> None:
        super().__init__()
        self.tables = list(tables)
        self.time = time
        self.iceberg_conn_id = iceberg_conn_id
        self.policies = dict(policies or {})
        self.poll_interval = poll_interval

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return (
            f"{type(self).__module__}.{type(self).__qualname__}",
            {
                "tables": self.tables,
                "time": self.time,
                "iceberg_conn_id": self.iceberg_conn_id,
                "policies": self.policies,
                "poll_interval": self.poll_interval,
            },
        )

    async def run(self) -> AsyncIterator[TriggerEvent]:
        while True:
            try:
                lagging = await asyncio.to_thread(
                    lagging_inputs, self.iceberg_conn_id, self.tables, self.time, self.policies
                )
            except Exception as exc:  # report to the task instead of dying silently
                yield TriggerEvent({"status": "error", "message": f"{type(exc).__name__}: {exc}"})
                return
            if not lagging:
                yield TriggerEvent({"status": "success", "time": self.time})
                return
            self.log.info("waiting for %s to pass %s", lagging, self.time)
            await asyncio.sleep(self.poll_interval)


def deferrable_default(deferrable: bool | None) -> bool:
    """``deferrable=`` as given, else ``[operators] default_deferrable`` (Airflow's convention)."""
    if deferrable is None:
        return conf.getboolean("operators", "default_deferrable", fallback=False)
    return deferrable


def defer_until_complete(
    sensor: BaseSensorOperator,
    *,
    tables: Sequence[str],
    time: int,
    iceberg_conn_id: str,
    policies: Mapping[str, str],
) -> None:
    """Hand ``sensor``'s wait to the triggerer; it resumes in ``execute_complete``.

    One place for the deferral both waiting tasks share (the standalone
    sensor and the mint that waits first): the poll interval and timeout are
    the sensor's own, so ``poke_interval=`` and ``timeout=`` mean the same in
    every mode.
    """
    sensor.defer(
        trigger=FrontierTrigger(
            tables=list(tables),
            time=time,
            iceberg_conn_id=iceberg_conn_id,
            policies=dict(policies),
            poll_interval=float(sensor.poke_interval),
        ),
        method_name="execute_complete",
        timeout=timedelta(seconds=float(sensor.timeout)) if sensor.timeout else None,
    )


def completed_time(event: dict[str, Any] | None) -> Any:
    """The time a :class:`FrontierTrigger` event says the inputs sealed; raise if it failed."""
    if not event or event.get("status") != "success":
        message = (event or {}).get("message", "no event")
        raise CTError(f"waiting for input frontiers failed: {message}")
    return event.get("time")
