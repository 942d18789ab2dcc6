"""FrontierTrigger: wait in the triggerer until input uppers pass a time.

Runs with PyIceberg only (no JVM); the blocking catalog calls run in a
thread so the triggerer's event loop stays responsive.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Mapping, Sequence
from typing import Any

from airflow.triggers.base import BaseTrigger, TriggerEvent

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
