"""``continual_task``: the sensor -> mint -> write -> append group for one task."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from airflow.sdk import TaskGroup

from airflow_provider_ct._groups import Step, tick_group
from airflow_provider_ct.core.continual import parse_continual_task
from airflow_provider_ct.core.definition_rules import check_target_name
from airflow_provider_ct.core.layout import TableLayout, TargetSettings
from airflow_provider_ct.factory_settings import SparkSettings, WaitSettings
from airflow_provider_ct.hooks.iceberg import IcebergCatalogHook
from airflow_provider_ct.operators._common import catalog_name_of
from airflow_provider_ct.operators.continual import (
    ContinualAppendOperator,
    ContinualMintOperator,
    ContinualWriteOperator,
)
from airflow_provider_ct.operators.waiting_mint import WaitingContinualMintOperator


def continual_task(
    *,
    definition: str,
    namespace: str | None = None,
    group_id: str | None = None,
    time: int | str | None = None,
    iceberg_conn_id: str = IcebergCatalogHook.default_conn_name,
    spark: SparkSettings | None = None,
    spark_conn_id: str | None = None,
    spark_master: str | None = None,
    spark_conf: Mapping[str, str] | None = None,
    engine: str | None = None,
    warm_idle_timeout: float | None = None,
    wait: WaitSettings | None = None,
    deferrable: bool | None = None,
    poke_interval: float | None = None,
    sensor_timeout: float | None = None,
    sensor_mode: str | None = None,
    read_only: bool | None = None,
    catalog_name: str | None = None,
    quiet_ticks: bool = True,
    partition_by: Sequence[str] | str | None = None,
    sort_by: Sequence[str] | str | None = None,
    table_properties: Mapping[str, str] | None = None,
    **group_kwargs: Any,
) -> TaskGroup:
    """A TaskGroup that runs a continual task for every input time up to each tick.

    :param definition: ``CREATE CONTINUAL TASK name [(col type, ...)] ON INPUT input
        [WITH (SNAPSHOT = false)] AS ( stmt; ... )`` (or Materialize's ``FROM
        TRANSFORM`` / ``FROM RETAIN`` shorthands), as written for Materialize;
        what the text shows to be wrong is refused here, at DAG parse.
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
    :param spark: how the write task runs Spark (:class:`~.factory_settings.SparkSettings`,
        whose fields are also accepted one by one: ``spark_conn_id`` ... ``warm_idle_timeout``).
    :param wait: how the mint waits for the inputs (:class:`~.factory_settings.WaitSettings`,
        also accepted one by one: ``deferrable`` ... ``sensor_mode``). A loose
        keyword given next to ``spark=``/``wait=`` must agree with it.
    :param quiet_ticks: a tick in which the input did not change commits the
        output's frontier without starting Spark (see ``core/quiet.py``).
    :param partition_by: the output's partitioning when its first tick creates
        it, as Spark SQL spells it: ``["day(ts)", "country", "bucket(16, id)"]``
        (docs/views.md, "Partitioning"); an existing output keeps its own.
    :param sort_by: its sort order: ``["ts DESC", "country"]``.
    :param table_properties: more Iceberg table properties for it.
    """
    catalog_name = catalog_name_of(iceberg_conn_id, catalog_name)
    task = parse_continual_task(definition, default_namespace=namespace, catalog_name=catalog_name)
    check_target_name(task.name)
    ct = {"definition": definition, "namespace": namespace}
    target = TargetSettings(TableLayout.parse(partition_by, sort_by, table_properties), "fail")
    return tick_group(
        group_id=group_id or f"ct_{task.name.replace('.', '_')}",
        output=task.name,
        catalog_name=catalog_name,
        time=time,
        read_only=read_only,
        iceberg_conn_id=iceberg_conn_id,
        spark=SparkSettings.resolve(
            spark,
            spark_conn_id=spark_conn_id,
            spark_master=spark_master,
            spark_conf=spark_conf,
            engine=engine,
            warm_idle_timeout=warm_idle_timeout,
        ),
        wait=WaitSettings.resolve(
            wait,
            deferrable=deferrable,
            poke_interval=poke_interval,
            sensor_timeout=sensor_timeout,
            sensor_mode=sensor_mode,
        ),
        waits_on={"tables": [task.input, *task.references]},
        mint=Step(
            ContinualMintOperator,
            {**ct, "quiet_ticks": quiet_ticks},
            waiting=WaitingContinualMintOperator,
        ),
        write=Step(
            ContinualWriteOperator,
            {**ct, "quiet_ticks": quiet_ticks, "target_settings": target.to_json()},
        ),
        append=Step(ContinualAppendOperator, {**ct, "writer_kind": "continual-task"}),
        group_kwargs=group_kwargs,
    )
