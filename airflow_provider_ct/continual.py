"""``continual_task``: the sensor -> mint -> write -> append group for one task."""

from __future__ import annotations

from typing import Any

from airflow.sdk import TaskGroup

from airflow_provider_ct.assets import SEALED, frontier_alias, table_asset
from airflow_provider_ct.core.continual import parse_continual_task
from airflow_provider_ct.hooks.iceberg import IcebergCatalogHook
from airflow_provider_ct.operators._common import catalog_name_of
from airflow_provider_ct.operators.continual import (
    ContinualAppendOperator,
    ContinualMintOperator,
    ContinualWriteOperator,
)
from airflow_provider_ct.operators.write import DEFAULT_LOCAL_MASTER
from airflow_provider_ct.sensors.frontier import FrontierSensor


def continual_task(
    *,
    definition: str,
    namespace: str | None = None,
    group_id: str | None = None,
    time: int | str | None = None,
    iceberg_conn_id: str = IcebergCatalogHook.default_conn_name,
    spark_conn_id: str | None = None,
    spark_master: str = DEFAULT_LOCAL_MASTER,
    deferrable: bool | None = None,
    poke_interval: float = 10.0,
    sensor_timeout: float = 3600.0,
    read_only: bool | None = None,
    catalog_name: str | None = None,
    quiet_ticks: bool = True,
    engine: str | None = None,
    warm_idle_timeout: float | None = None,
    **group_kwargs: Any,
) -> TaskGroup:
    """A TaskGroup that runs a continual task for every input time up to each tick.

    :param definition: ``CREATE CONTINUAL TASK name (col type, ...) ON INPUT input
        [WITH (SNAPSHOT = true)] AS ( stmt; ... )``, as in Materialize.
    :param namespace: namespace of unqualified table names; not needed when
        every name in the definition is qualified.
    :param time: the tick time (epoch ms, templated); default the run's
        ``data_interval_end``. ``"sealed"``: the latest time the input and
        references have sealed (triggering asset events checked against the
        tables, whose uppers bound it)
        (schedule on :func:`~airflow_provider_ct.assets.continual_task_input_assets`);
        no sensor then, see docs/pipelines.md.
    :param catalog_name: the catalog prefix of three-part names and of the
        output's Asset; default: the ``iceberg_conn_id`` connection's catalog.
    :param quiet_ticks: a tick in which the input did not change commits the
        output's frontier without starting Spark (see ``core/quiet.py``).
    :param engine: ``spark-submit`` | ``warm`` (a long-lived Spark driver per
        worker, see docs/engines.md); default: the Spark connection's choice.
    :param warm_idle_timeout: seconds a warm driver stays up without jobs.
    """
    catalog_name = catalog_name_of(iceberg_conn_id, catalog_name)
    task = parse_continual_task(definition, default_namespace=namespace, catalog_name=catalog_name)
    gid = group_id or f"ct_{task.name.replace('.', '_')}"
    with TaskGroup(group_id=gid, **group_kwargs) as group:
        mint = ContinualMintOperator(
            task_id="mint",
            definition=definition,
            namespace=namespace,
            time=time,
            read_only=read_only,
            iceberg_conn_id=iceberg_conn_id,
        )
        write = ContinualWriteOperator(
            task_id="write",
            definition=definition,
            namespace=namespace,
            description_task_id=mint.task_id,
            spark_conn_id=spark_conn_id,
            spark_master=spark_master,
            iceberg_conn_id=iceberg_conn_id,
            quiet_ticks=quiet_ticks,
            engine=engine,
            warm_idle_timeout=warm_idle_timeout,
        )
        append = ContinualAppendOperator(
            task_id="append",
            definition=definition,
            namespace=namespace,
            write_task_id=write.task_id,
            description_task_id=mint.task_id,
            iceberg_conn_id=iceberg_conn_id,
            asset=table_asset(task.name, catalog_name),
            writer_kind="continual-task",
            outlets=[frontier_alias(f"{catalog_name}.{task.name}")],
        )
        mint >> write >> append
        if time != SEALED:  # a sealed time is sealed by construction: nothing to wait for
            (
                FrontierSensor(
                    task_id="wait_for_inputs",
                    tables=[task.input, *task.references],
                    time=time,
                    iceberg_conn_id=iceberg_conn_id,
                    deferrable=deferrable,
                    poke_interval=poke_interval,
                    timeout=sensor_timeout,
                )
                >> mint
            )
    return group
