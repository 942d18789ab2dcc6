"""The one shape of a managed table's TaskGroup: ``mint >> write >> append``, mint waiting first.

Why one builder: :func:`~airflow_provider_ct.views.materialized_view` and
:func:`~airflow_provider_ct.continual.continual_task` build the same group
(the same task ids, the same wiring of XComs between the tasks, the same
Asset and frontier alias on the append, no sensor for ``time="sealed"``)
and differ only in their operators' classes and the few arguments only
those take. Built twice, the two copies drifted; built here, a factory says
only what differs, as one :class:`Step` per task.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from airflow.sdk import BaseOperator, TaskGroup, TriggerRule

from airflow_provider_ct.assets import SEALED, frontier_alias, table_asset
from airflow_provider_ct.factory_settings import SparkSettings, WaitSettings
from airflow_provider_ct.sensors.frontier import FrontierSensor


@dataclass(frozen=True)
class Step:
    """One task of the group: its operator class and the arguments only it takes.

    The builder adds what every group passes alike (task ids, the catalog
    connection, the tick time, the XCom sources, the Spark settings of the
    write, the Asset of the append).
    """

    operator: type[BaseOperator]
    kwargs: Mapping[str, Any] = field(default_factory=dict)
    #: The mint's class that first waits for its inputs (a sensor's arguments),
    #: used in the three-task layout instead of a ``wait_for_inputs`` task.
    waiting: type[BaseOperator] | None = None


def tick_group(
    *,
    group_id: str,
    output: str,
    catalog_name: str,
    time: int | str | None,
    read_only: bool | None,
    iceberg_conn_id: str,
    spark: SparkSettings,
    wait: WaitSettings,
    waits_on: Mapping[str, Any],
    mint: Step,
    write: Step,
    append: Step | None,
    fused: type[BaseOperator] | None = None,
    group_kwargs: Mapping[str, Any],
) -> TaskGroup:
    """Build the group (call inside a DAG); the mint waits for the inputs unless ``time`` is sealed.

    A fused group (``fused``) keeps a ``wait_for_inputs`` sensor before its ``tick``.

    :param output: the normalized name of the table the group keeps; its
        Asset and frontier alias are the append's outlets.
    :param waits_on: the sensor's own arguments: its inputs (``tables=`` or
        ``sql=``) and their ``input_upper_policies``.
    :param append: ``None`` for a dry run: nothing is appended or announced.
    :param fused: an operator running mint, write and append as one task
        ``tick``, taking ``mint``'s and ``write``'s arguments together.
    """
    announce: dict[str, Any] = {
        "asset": table_asset(output, catalog_name),
        "outlets": [frontier_alias(f"{catalog_name}.{output}")],
    }
    mint_args: dict[str, Any] = {"time": time, "read_only": read_only, **mint.kwargs}
    write_args: dict[str, Any] = {**spark.write_kwargs(), **write.kwargs}
    with TaskGroup(group_id=group_id, **group_kwargs) as group:
        first: BaseOperator
        if fused is not None:  # one dict: mint and write share some arguments (target, sql)
            fused_args = {**mint_args, **write_args, **(announce if append else {})}
            first = fused(task_id="tick", iceberg_conn_id=iceberg_conn_id, **fused_args)
        else:
            waits = time != SEALED and mint.waiting is not None
            if waits:  # the mint waits for its inputs itself: no sensor task
                assert mint.waiting is not None
                mint = Step(mint.waiting, mint.kwargs)
                mint_args = {**mint_args, **wait.sensor_kwargs()}
            steps = (mint, mint_args), (write, write_args), append, announce
            first = _three_tasks(*steps, iceberg_conn_id=iceberg_conn_id)
            if waits:
                return group
        if time != SEALED:  # a sealed time is sealed by construction: nothing to wait for
            sensor = FrontierSensor(
                task_id="wait_for_inputs",
                time=time,
                iceberg_conn_id=iceberg_conn_id,
                **waits_on,
                **wait.sensor_kwargs(),
            )
            sensor >> first
    return group


def _three_tasks(
    mint: tuple[Step, dict[str, Any]],
    write: tuple[Step, dict[str, Any]],
    append: Step | None,
    announce: dict[str, Any],
    *,
    iceberg_conn_id: str,
) -> BaseOperator:
    """``mint >> write >> append`` (no append for a dry run); returns the mint task."""
    (mint_step, mint_args), (write_step, write_args) = mint, write
    first = mint_step.operator(task_id="mint", iceberg_conn_id=iceberg_conn_id, **mint_args)
    write_task = write_step.operator(
        task_id="write",
        description_task_id=first.task_id,
        iceberg_conn_id=iceberg_conn_id,
        **write_args,
    )
    first >> write_task
    if append is not None:
        appended = append.operator(
            task_id="append",
            trigger_rule=TriggerRule.NONE_FAILED_MIN_ONE_SUCCESS,
            write_task_id=write_task.task_id,
            description_task_id=first.task_id,
            iceberg_conn_id=iceberg_conn_id,
            **append.kwargs,
            **announce,
        )
        # A quiet tick's mint skips the write and hands the append its batch:
        # the append runs when the mint succeeded and nothing upstream failed.
        [first, write_task] >> appended
    return first
