"""``materialized_view``: the sensor -> mint -> write -> append group for one view."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from airflow.sdk import Asset, BaseOperator, TaskGroup

from airflow_provider_ct.assets import SEALED, frontier_alias, table_asset
from airflow_provider_ct.core.planner import choose_plan
from airflow_provider_ct.core.policies import parse_policies
from airflow_provider_ct.core.query import normalize_table_name, parse_query
from airflow_provider_ct.hooks.iceberg import IcebergCatalogHook
from airflow_provider_ct.operators._common import catalog_name_of, is_templated_sql
from airflow_provider_ct.operators.append import AppendOperator
from airflow_provider_ct.operators.mint import MintOperator
from airflow_provider_ct.operators.tick import ViewTickOperator
from airflow_provider_ct.operators.write import DEFAULT_LOCAL_MASTER, WriteOperator
from airflow_provider_ct.sensors.frontier import FrontierSensor


def view_asset(target: str, catalog_name: str = "ct") -> Asset:
    """The Airflow Asset a view's append task updates (schedule other DAGs on it)."""
    return table_asset(target, catalog_name)


def materialized_view(
    *,
    target: str,
    sql: str,
    group_id: str | None = None,
    time: int | str | None = None,
    iceberg_conn_id: str = IcebergCatalogHook.default_conn_name,
    spark_conn_id: str | None = None,
    spark_master: str = DEFAULT_LOCAL_MASTER,
    spark_conf: dict[str, str] | None = None,
    deferrable: bool | None = None,
    poke_interval: float = 10.0,
    sensor_timeout: float = 3600.0,
    sensor_mode: str = "poke",
    read_only: bool | None = None,
    report_only: bool = False,
    input_upper_policies: Mapping[str, str] | None = None,
    catalog_name: str | None = None,
    quiet_ticks: bool = True,
    engine: str | None = None,
    warm_idle_timeout: float | None = None,
    refresh: str = "auto",
    verify_every: int = 0,
    fuse_steps: bool = False,
    **group_kwargs: Any,
) -> TaskGroup:
    """A TaskGroup that keeps ``target`` equal to ``sql`` at every tick.

    Call it inside a DAG (use ``max_active_runs=1`` so ticks land in order).
    The query and ``input_upper_policies`` are checked at DAG-parse time, so
    a bad query or a policy for a table the query does not read breaks the
    DAG import with a clear message rather than a task at run time. A query
    given as a ``.sql`` file (relative to the DAG's folder or its
    ``template_searchpath``) or with Jinja is checked once rendered, when
    each task starts, and a parse error names the file.

    :param time: the tick time (epoch ms, templated); default the run's
        ``data_interval_end``. ``"sealed"``: the latest time every input has
        sealed (the run's triggering asset events checked against the input
        tables, whose uppers bound it; schedule the DAG on
        :func:`~airflow_provider_ct.assets.view_input_assets`); no sensor
        then, see docs/pipelines.md.
    :param catalog_name: the catalog prefix of three-part names
        (``<catalog>.ns.t``) and of the view's Asset; default: the name of
        the ``iceberg_conn_id`` connection's catalog.

    :param report_only: a dry run: write reports how far the table is from its
        definition; nothing is staged or appended.
    :param input_upper_policies: per external input (``ns.t`` or
        ``<catalog>.ns.t``), ``wallclock[:<ms>]`` or ``summary:<key>``.
    :param quiet_ticks: a tick that provably changes nothing (no input changed,
        see ``core/quiet.py``) commits its frontier without starting Spark.
    :param refresh: ``auto`` | ``incremental`` | ``full`` (see docs/views.md).
    :param verify_every: every N-th tick runs the full correction (0: never).
    :param engine: ``spark-submit`` | ``warm`` (a long-lived Spark driver per
        worker, see docs/engines.md); default: the Spark connection's choice.
    :param warm_idle_timeout: seconds a warm driver stays up without jobs.
    :param fuse_steps: mint, write and append as one task ``tick``
        (:class:`~airflow_provider_ct.operators.tick.ViewTickOperator`):
        a third of the task instances per tick, at the price of per-step
        durations and retries in the UI (docs/engines.md).
    """
    catalog_name = catalog_name_of(iceberg_conn_id, catalog_name)
    if not is_templated_sql(sql):  # a template is checked when rendered (RenderedSqlMixin)
        parsed = parse_query(sql, target=target, catalog_name=catalog_name)
        parse_policies(input_upper_policies, parsed.inputs, catalog_name)
        choose_plan(parsed, refresh)  # refresh="incremental" fails here for a query it cannot do
    gid = group_id or f"view_{normalize_table_name(target, catalog_name).replace('.', '_')}"
    name = normalize_table_name(target, catalog_name)
    write_args: dict[str, Any] = {
        "target": target,
        "sql": sql,
        "spark_conn_id": spark_conn_id,
        "spark_master": spark_master,
        "spark_conf": spark_conf,
        "report_only": report_only,
        "iceberg_conn_id": iceberg_conn_id,
        "quiet_ticks": quiet_ticks,
        "refresh": refresh,
        "verify_every": verify_every,
        "engine": engine,
        "warm_idle_timeout": warm_idle_timeout,
    }
    announce: dict[str, Any] = {
        "asset": table_asset(name, catalog_name),
        "outlets": [frontier_alias(f"{catalog_name}.{name}")],
    }
    with TaskGroup(group_id=gid, **group_kwargs) as group:
        mint_args: dict[str, Any] = {
            "time": time,
            "read_only": read_only,
            "input_upper_policies": input_upper_policies,
        }
        if fuse_steps:
            first: BaseOperator = ViewTickOperator(
                task_id="tick", **mint_args, **write_args, **({} if report_only else announce)
            )
        else:
            first = _separate_steps(mint_args, write_args, None if report_only else announce)
        if time != SEALED:  # a sealed time is sealed by construction: nothing to wait for
            (
                FrontierSensor(
                    task_id="wait_for_inputs",
                    sql=sql,
                    time=time,
                    input_upper_policies=input_upper_policies,
                    iceberg_conn_id=iceberg_conn_id,
                    deferrable=deferrable,
                    poke_interval=poke_interval,
                    timeout=sensor_timeout,
                    mode=sensor_mode,
                )
                >> first
            )
    return group


def _separate_steps(
    mint_args: dict[str, Any], write_args: dict[str, Any], announce: dict[str, Any] | None
) -> MintOperator:
    """mint >> write >> append (no append for a dry run, ``announce`` None); returns mint."""
    target, sql, conn = write_args["target"], write_args["sql"], write_args["iceberg_conn_id"]
    mint_task = MintOperator(
        task_id="mint", target=target, sql=sql, iceberg_conn_id=conn, **mint_args
    )
    write = WriteOperator(task_id="write", description_task_id=mint_task.task_id, **write_args)
    mint_task >> write
    if announce is not None:
        append = AppendOperator(
            task_id="append",
            write_task_id=write.task_id,
            description_task_id=mint_task.task_id,
            iceberg_conn_id=conn,
            lineage_sql=sql,
            **announce,
        )
        write >> append
    return mint_task
