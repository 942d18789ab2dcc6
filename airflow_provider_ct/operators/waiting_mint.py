"""The mint of a tick group, waiting first until its inputs are complete through T.

Why not a sensor task before the mint: every task instance costs Airflow's
bookkeeping whatever it does (about 0.1 s in ``dag.test()``, most of a
second under the real scheduler), and on a quiet tick the tasks do almost
nothing else. Waiting inside the mint makes a quiet tick two task instances
(mint, which stages the quiet batch and skips the write, and append), as a
fused tick is, while keeping mint, write and append apart for retries and
the grid. The wait is a sensor's (``poke``, ``reschedule`` or deferrable in
the triggerer, with its timeout), run by Airflow's own sensor machinery; the
mint runs once the inputs are complete, at most once per successful wait.
:class:`~airflow_provider_ct.sensors.frontier.FrontierSensor` stays for DAGs
that wait without minting.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from airflow.sdk import BaseSensorOperator, PokeReturnValue

from airflow_provider_ct.core.query import normalize_table_name
from airflow_provider_ct.hooks.iceberg import IcebergCatalogHook
from airflow_provider_ct.operators._common import tick_time
from airflow_provider_ct.operators.continual import ContinualMintOperator
from airflow_provider_ct.operators.mint import MintOperator
from airflow_provider_ct.triggers.frontier import (
    completed_time,
    defer_until_complete,
    deferrable_default,
    lagging_inputs,
)

log = logging.getLogger(__name__)


class _WaitsFirst(BaseSensorOperator):
    """Wait until the mint's inputs are complete through T, then mint (see the module docstring).

    Mixed in before a mint class: ``self._inputs`` and ``self._mint_now``
    come from it. ``deferrable`` waits in the triggerer, holding no slot.
    """

    target: str
    time: Any
    iceberg_conn_id: str
    input_upper_policies: dict[str, str]

    def _init_wait(self, deferrable: bool | None) -> None:
        self.deferrable = deferrable_default(deferrable)

    #: The mint's own: the tables it reads (before this class in the MRO).
    _inputs: Callable[[str, str], list[str]]

    def _mint_now(self, context: Any) -> Any:
        """Mint (the mint class's ``execute``, which this class's ``execute`` shadows)."""
        return MintOperator.execute(self, context)  # type: ignore[arg-type]

    def _wait_tables(self) -> list[str]:
        catalog_name = IcebergCatalogHook(self.iceberg_conn_id).get_config().name
        return self._inputs(normalize_table_name(self.target, catalog_name), catalog_name)

    def poke(self, context: Any) -> bool | PokeReturnValue:
        time = tick_time(context, self.time)
        names = self._wait_tables()
        lagging = lagging_inputs(self.iceberg_conn_id, names, time, self.input_upper_policies)
        if lagging:
            log.info("inputs not yet complete through %s: %s", time, lagging)
            return False
        log.info("all inputs are complete through %s: minting", time)
        return PokeReturnValue(True, self._mint_now(context))

    def execute(self, context: Any) -> Any:
        if not self.deferrable:
            return super().execute(context)
        done = self.poke(context)
        if done:
            return done.xcom_value if isinstance(done, PokeReturnValue) else None
        defer_until_complete(
            self,
            tables=self._wait_tables(),
            time=tick_time(context, self.time),
            iceberg_conn_id=self.iceberg_conn_id,
            policies=self.input_upper_policies,
        )
        return None

    def execute_complete(self, context: Any, event: dict[str, Any] | None = None) -> Any:
        log.info("inputs complete through %s (from the triggerer): minting", completed_time(event))
        return self._mint_now(context)


class WaitingMintOperator(MintOperator, _WaitsFirst):
    """A view's :class:`~.mint.MintOperator` that first waits for its inputs (sensor arguments:
    ``poke_interval``, ``timeout``, ``mode``, ``deferrable``)."""

    def __init__(self, *, deferrable: bool | None = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._init_wait(deferrable)

    def execute(self, context: Any) -> Any:
        return _WaitsFirst.execute(self, context)


class WaitingContinualMintOperator(ContinualMintOperator, _WaitsFirst):
    """A continual task's mint that first waits for its input and references."""

    def __init__(self, *, deferrable: bool | None = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._init_wait(deferrable)

    def execute(self, context: Any) -> Any:
        return _WaitsFirst.execute(self, context)
