"""``materialized_view``: the sensor -> mint -> write -> append group for one view."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from airflow.sdk import Asset, TaskGroup

from airflow_provider_ct._groups import Step, tick_group
from airflow_provider_ct.assets import table_asset
from airflow_provider_ct.core.definition_rules import check_target_name, check_view_query
from airflow_provider_ct.core.layout import TableLayout, TargetSettings
from airflow_provider_ct.core.policies import parse_policies
from airflow_provider_ct.core.query import normalize_table_name, parse_query
from airflow_provider_ct.factory_settings import SparkSettings, WaitSettings
from airflow_provider_ct.hooks.iceberg import IcebergCatalogHook
from airflow_provider_ct.ivm.plan.compose import COMPOSED, compose
from airflow_provider_ct.ivm.plan.modes import RefreshMode
from airflow_provider_ct.ivm.plan.planner import InputColumns, choose_plan
from airflow_provider_ct.operators._common import catalog_name_of, is_templated_sql
from airflow_provider_ct.operators.append import AppendOperator
from airflow_provider_ct.operators.mint import MintOperator
from airflow_provider_ct.operators.tick import ViewTickOperator
from airflow_provider_ct.operators.waiting_mint import WaitingMintOperator
from airflow_provider_ct.operators.write import WriteOperator


def view_asset(target: str, catalog_name: str = "ct") -> Asset:
    """The Airflow Asset a view's append task updates (schedule other DAGs on it)."""
    return table_asset(target, catalog_name)


def explain_view(
    sql: str,
    *,
    target: str,
    catalog_name: str = "ct",
    refresh: str = "auto",
    columns: InputColumns | None = None,
) -> list[str]:
    """How a view of ``sql`` refreshes, as ``EXPLAIN`` would say: the strategy, why, the steps.

    A query no strategy maintains whole is said as its parts
    (:mod:`~airflow_provider_ct.ivm.plan.compose`): each with its own
    strategy, and the query over them in full; or why it does not split.

    The same shape decision :func:`materialized_view` checks at DAG-parse
    time and the write job starts from (a tick may still go full for its
    history or sizes, see docs/views.md). A query a view cannot be raises
    :class:`~airflow_provider_ct.exceptions.QueryError`. Nothing is read or written.

    :param columns: the inputs' column names (``ns.table`` -> names), which the
        job reads from the catalog: with them an outer join's bare ``ON``
        columns are placed as the ticks will place them.
    """
    parsed = parse_query(sql, target=target, catalog_name=catalog_name)
    mode = RefreshMode.parse(refresh)
    plan = choose_plan(parsed, mode, columns)
    if plan.incremental or mode is not RefreshMode.AUTO:
        return plan.explain()
    composition = compose(sql, target, catalog_name)
    if isinstance(composition, str):
        return [*plan.explain(), composition]
    return [f"strategy: {COMPOSED}", f"why: {plan.reason}", *composition.explain()]


def materialized_view(
    *,
    target: str,
    sql: str,
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
    report_only: bool = False,
    input_upper_policies: Mapping[str, str] | None = None,
    catalog_name: str | None = None,
    quiet_ticks: bool = True,
    refresh: str = "auto",
    verify_every: int = 0,
    fuse_steps: bool = False,
    partition_by: Sequence[str] | str | None = None,
    sort_by: Sequence[str] | str | None = None,
    table_properties: Mapping[str, str] | None = None,
    on_schema_change: str = "evolve",
    **group_kwargs: Any,
) -> TaskGroup:
    """A TaskGroup that keeps ``target`` equal to ``sql`` at every tick.

    Call it inside a DAG (use ``max_active_runs=1`` so ticks land in order).
    The query and ``input_upper_policies`` are checked at DAG-parse time, so
    a bad query, one no table can be kept equal to (duplicate column names,
    ``rand()`` and the like: ``core/definition_rules.py``), a reserved target
    name or a policy for a table the query does not read breaks the DAG
    import with a clear message rather than a task at run time. A query
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
    :param spark: how the write task runs Spark (:class:`~.factory_settings.SparkSettings`,
        whose fields are also accepted one by one: ``spark_conn_id`` ... ``warm_idle_timeout``).
    :param wait: how the mint waits for the inputs (:class:`~.factory_settings.WaitSettings`,
        also accepted one by one: ``deferrable`` ... ``sensor_mode``). A loose
        keyword given next to ``spark=``/``wait=`` must agree with it.
    :param report_only: a dry run: write reports how far the table is from its
        definition; nothing is staged or appended.
    :param input_upper_policies: per external input (``ns.t`` or
        ``<catalog>.ns.t``), ``wallclock[:<ms>]`` or ``summary:<key>``.
    :param quiet_ticks: a tick that provably changes nothing (no input changed,
        see ``core/quiet.py``) commits its frontier without starting Spark;
        in the three-task layout ``mint`` stages that empty batch itself and
        skips ``write`` (the grid shows which ticks ran a Spark job).
    :param refresh: ``auto`` | ``incremental`` | ``full`` (see docs/views.md).
    :param verify_every: every N-th tick runs the full correction (0: never).
    :param fuse_steps: mint, write and append as one task ``tick``
        (:class:`~airflow_provider_ct.operators.tick.ViewTickOperator`):
        a third of the task instances per tick, at the price of per-step
        durations and retries in the UI (docs/engines.md).
    :param partition_by: the target's partitioning when the first tick creates
        it, as Spark SQL spells it: ``["day(ts)", "country", "bucket(16, id)",
        "truncate(4, name)"]`` (docs/views.md, "Partitioning"). A target that
        exists (created by the user first) keeps its own spec.
    :param sort_by: its sort order: ``["day DESC", "country ASC NULLS LAST"]``.
    :param table_properties: more Iceberg table properties for it.
    :param on_schema_change: when the query's columns no longer match the
        target's: ``"evolve"`` (add new columns, widen types), ``"fail"``, or
        ``"recreate"`` (also drop and replace columns Iceberg cannot evolve);
        see docs/views.md, "Definitions that change".
    """
    catalog_name = catalog_name_of(iceberg_conn_id, catalog_name)
    mode = RefreshMode.parse(refresh)  # the one check of refresh=; the job trusts its spec
    name = normalize_table_name(target, catalog_name)
    check_target_name(name)
    if not is_templated_sql(sql):  # a template is checked when rendered (its mint)
        parsed = parse_query(sql, target=target, catalog_name=catalog_name)
        check_view_query(parsed)
        parse_policies(input_upper_policies, parsed.inputs, catalog_name)
        choose_plan(parsed, mode)  # refresh="incremental" fails here for a query it cannot do
    view = {"target": target, "sql": sql}
    settings = TargetSettings(
        TableLayout.parse(partition_by, sort_by, table_properties), on_schema_change
    )
    write = {
        "report_only": report_only,
        "quiet_ticks": quiet_ticks,
        "refresh": mode.value,
        "target_settings": settings.to_json(),
    }
    return tick_group(
        group_id=group_id or f"view_{name.replace('.', '_')}",
        output=name,
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
        waits_on={"sql": sql, "input_upper_policies": input_upper_policies},
        mint=Step(
            MintOperator,
            {
                **view,
                "input_upper_policies": input_upper_policies,
                "quiet_ticks": quiet_ticks and not report_only,
            },
            waiting=WaitingMintOperator,
        ),
        write=Step(WriteOperator, {**view, **write, "verify_every": verify_every}),
        append=None if report_only else Step(AppendOperator, {"lineage_sql": sql}),
        fused=ViewTickOperator if fuse_steps else None,
        group_kwargs=group_kwargs,
    )
