"""The Airflow side of a constant dataset (``spark.range``): one task per tick, in its group.

The rule is :func:`~airflow_provider_ct.pipelines.constant.tick_constant`
(no Airflow); this module only runs it at the run's tick time, through the
pipeline's catalog connection, in a group named like every other
dataset's, so readers are wired after it and the run's params select it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from airflow.sdk import BaseOperator, TaskGroup
from airflow.sdk.exceptions import AirflowSkipException

from airflow_provider_ct.hooks.iceberg import IcebergCatalogHook
from airflow_provider_ct.operators._common import read_only_default, tick_time
from airflow_provider_ct.pipelines.constant import range_rows, tick_constant


class ConstantTickOperator(BaseOperator):
    """Seal a constant dataset's table through the tick's time (its rows written once).

    :param table: ``namespace.table``.
    :param bounds: ``spark.range``'s ``(start, end, step)``.
    :param time: the tick time (templated); default the run's ``data_interval_end``.
    """

    template_fields: Sequence[str] = ("time",)

    def __init__(
        self,
        *,
        table: str,
        bounds: tuple[int, int, int],
        iceberg_conn_id: str,
        time: int | str | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.table, self.bounds, self.time = table, tuple(bounds), time
        self.iceberg_conn_id = iceberg_conn_id
        #: Set by the pipeline's selection hook like every group's tasks (a constant is
        #: never quiet: it has no input to be quiet about).
        self.quiet_ticks = False

    def execute(self, context: Any) -> dict[str, Any]:
        if read_only_default(None):
            raise AirflowSkipException("read-only mode (CT_READ_ONLY): nothing is written")
        catalog = IcebergCatalogHook(self.iceberg_conn_id).get_catalog()
        time = tick_time(context, self.time)
        bounds = (int(self.bounds[0]), int(self.bounds[1]), int(self.bounds[2]))
        return tick_constant(catalog, self.table, range_rows(bounds), time).to_json()


def constant_group(
    *,
    group_id: str,
    table: str,
    bounds: tuple[int, int, int],
    iceberg_conn_id: str,
    time: int | str | None,
) -> TaskGroup:
    """The dataset's group: one ``tick`` task."""
    with TaskGroup(group_id=group_id) as group:
        ConstantTickOperator(
            task_id="tick", table=table, bounds=bounds, iceberg_conn_id=iceberg_conn_id, time=time
        )
    return group
