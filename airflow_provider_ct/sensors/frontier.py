"""FrontierSensor: wait until every input is complete through the tick time."""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Any

from airflow.sdk import BaseSensorOperator

from airflow_provider_ct.core.query import parse_query
from airflow_provider_ct.hooks.iceberg import IcebergCatalogHook
from airflow_provider_ct.operators._common import RenderedSqlMixin, tick_time
from airflow_provider_ct.triggers.frontier import (
    completed_time,
    defer_until_complete,
    deferrable_default,
    lagging_inputs,
)

log = logging.getLogger(__name__)


class FrontierSensor(RenderedSqlMixin, BaseSensorOperator):
    """Wait until each input's upper is beyond T (its contents at T are final).

    Inputs are given by name, or discovered from a view's ``sql``. Works in
    ``poke`` and ``reschedule`` modes, and deferrable: the wait then happens in
    the triggerer (:class:`FrontierTrigger`), holding no worker slot.

    :param tables: input tables (``namespace.table``).
    :param sql: alternatively, a query whose tables are the inputs.
    :param time: tick time override (epoch ms, templated).
    :param input_upper_policies: per external input, ``wallclock[:<ms>]`` or ``summary:<key>``.
    :param deferrable: wait in the triggerer; default from ``[operators] default_deferrable``.
    """

    template_fields: Sequence[str] = ("tables", "sql", "time")
    template_ext: Sequence[str] = (".sql",)
    ui_color = "#e8e0f5"

    def __init__(
        self,
        *,
        tables: Sequence[str] | None = None,
        sql: str | None = None,
        time: int | str | None = None,
        input_upper_policies: Mapping[str, str] | None = None,
        iceberg_conn_id: str = IcebergCatalogHook.default_conn_name,
        deferrable: bool | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        if not tables and not sql:
            raise ValueError("pass tables= or sql=")
        self.tables = list(tables or [])
        self.sql = sql
        self.time = time
        self.input_upper_policies = dict(input_upper_policies or {})
        self.iceberg_conn_id = iceberg_conn_id
        self.deferrable = deferrable_default(deferrable)

    def _inputs(self) -> list[str]:
        if self.tables:
            return list(self.tables)
        assert self.sql is not None
        catalog_name = IcebergCatalogHook(self.iceberg_conn_id).get_config().name
        return list(parse_query(self.sql, catalog_name=catalog_name).inputs)

    def poke(self, context: Any) -> bool:
        time = tick_time(context, self.time)
        lagging = lagging_inputs(
            self.iceberg_conn_id, self._inputs(), time, self.input_upper_policies
        )
        if lagging:
            log.info("inputs not yet complete through %s: %s", time, lagging)
            return False
        log.info("all inputs are complete through %s", time)
        return True

    def execute(self, context: Any) -> Any:
        if not self.deferrable:
            return super().execute(context)
        if self.poke(context):
            return None
        defer_until_complete(
            self,
            tables=self._inputs(),
            time=tick_time(context, self.time),
            iceberg_conn_id=self.iceberg_conn_id,
            policies=self.input_upper_policies,
        )
        return None

    def execute_complete(self, context: Any, event: dict[str, Any] | None = None) -> None:
        log.info("inputs complete through %s (from the triggerer)", completed_time(event))
