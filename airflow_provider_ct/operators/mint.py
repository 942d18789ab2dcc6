"""MintOperator: decide what this tick may write, as a batch description in XCom."""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol

from airflow.sdk import BaseOperator, SkipMixin
from airflow.sdk.exceptions import AirflowSkipException

from airflow_provider_ct.assets import SEALED, sealed_tick_time
from airflow_provider_ct.collections.holds import hold_collection_inputs
from airflow_provider_ct.core.definition_rules import check_target_name, check_view_query
from airflow_provider_ct.core.description import BatchDescription
from airflow_provider_ct.core.mint import mint
from airflow_provider_ct.core.owner import claim
from airflow_provider_ct.core.query import normalize_table_name, parse_query
from airflow_provider_ct.core.timeline import Timeline
from airflow_provider_ct.exceptions import DescriptionError
from airflow_provider_ct.hooks.iceberg import IcebergCatalogHook
from airflow_provider_ct.lineage import TickLineage, describe_tick, safe_lineage
from airflow_provider_ct.operators._common import (
    NOT_QUIET_FIELD,
    QUIET_REPORT_FIELD,
    RenderedSqlMixin,
    owner_of,
    read_only_default,
    tick_time,
)
from airflow_provider_ct.operators._quiet import QuietRule, ViewQuiet, load_inputs, quiet_batch
from airflow_provider_ct.operators.write import WriteOperator

log = logging.getLogger(__name__)

#: The key of a task's return value in XCom (Airflow's ``XCOM_RETURN_KEY``).
XCOM_RETURN_KEY = "return_value"


class MintOperator(RenderedSqlMixin, BaseOperator, SkipMixin):
    """Mint the batch description ``{id, target, lower, upper, time, base_snapshot_id, inputs}``.

    Skips (with the reason in the log) when T is already sealed, the target
    is closed, or read-only mode is on; downstream write and append skip too.
    The query is parsed here, so bad SQL, a missing input or a target that
    reads itself fail before any Spark job starts.

    :param target: the view's table, ``namespace.table``.
    :param sql: the view's Spark SQL SELECT.
    :param time: tick time override (epoch ms, templated); default: the run's
        ``data_interval_end``. ``"sealed"``: the latest time every input has
        sealed, from the run's triggering asset events and the inputs' tables
        (a run where that is not past the target's upper skips: nothing to do).
    :param read_only: mint nothing; default from the ``CT_READ_ONLY`` environment variable.
    :param input_upper_policies: per external input, ``wallclock[:<ms>]`` or ``summary:<key>``.
    :param iceberg_conn_id: catalog connection (default: embedded catalog).
    :param quiet_ticks: when the minted tick provably changes nothing (no
        input changed, see ``core/quiet.py``), stage its empty batch here and
        skip the downstream write task: the append lands it as usual, and a
        quiet tick costs one task instance less (the write would only repeat
        this check). The write report is in this task's XCom, beside the
        description, as ``quiet_report``.
    """

    template_fields: Sequence[str] = ("target", "sql", "time")
    template_ext: Sequence[str] = (".sql",)
    ui_color = "#d7ecf7"

    def __init__(
        self,
        *,
        target: str,
        sql: str,
        time: int | str | None = None,
        read_only: bool | None = None,
        input_upper_policies: Mapping[str, str] | None = None,
        iceberg_conn_id: str = IcebergCatalogHook.default_conn_name,
        quiet_ticks: bool = False,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.quiet_ticks = quiet_ticks
        self.target = target
        self.sql = sql
        self.time = time
        self.read_only = read_only
        self.input_upper_policies = dict(input_upper_policies or {})
        self.iceberg_conn_id = iceberg_conn_id

    def execute(self, context: Any) -> dict[str, Any]:
        hook = IcebergCatalogHook(self.iceberg_conn_id)
        description = mint_description(
            context, self, previous=self._previous(context), inputs_of=self._inputs, hook=hook
        )
        self._minted = description
        if self.quiet_ticks and self._skip_write_if_quiet(context, hook, description) is False:
            return {**description.to_json(), NOT_QUIET_FIELD: True}
        return description.to_json()

    def quiet_rule(self) -> QuietRule:
        """What "quiet" means for this tick (the write task asks the same rule)."""
        return ViewQuiet(self.sql)

    def _skip_write_if_quiet(
        self, context: Any, hook: IcebergCatalogHook, description: BatchDescription
    ) -> bool | None:
        """On a quiet tick, stage its empty batch and skip the write task (see ``quiet_ticks``).

        True: skipped; False: the tick is not quiet; None: no write task to skip, not asked.
        """
        writes = [t for t in self.downstream_list if isinstance(t, WriteOperator)]
        if not writes:
            return None
        rule = self.quiet_rule()
        staged = quiet_batch(hook, description, rule, load_inputs(hook, description, rule))
        if staged is None:
            return False
        ti = context["ti"]
        # Skipping ends execute() with an exception: the XCom is pushed here.
        minted = {**description.to_json(), QUIET_REPORT_FIELD: staged}
        ti.xcom_push(key=XCOM_RETURN_KEY, value=minted)
        self.skip(ti, writes)
        return True

    def _inputs(self, target: str, catalog_name: str) -> list[str]:
        """Tables the target is computed from (parsing fails before any Spark job)."""
        return view_inputs(self.sql, target, catalog_name)

    def _lineage_sql(self) -> str | None:
        """The query column lineage is traced from (a view's SELECT)."""
        return self.sql

    def get_openlineage_facets_on_complete(self, task_instance: Any) -> Any:
        """The pinned inputs and the planned batch (no snapshot yet): docs/lineage.md."""
        description = getattr(self, "_minted", None)
        return safe_lineage(self.task_id, lambda: self._describe(description))

    def _describe(self, description: BatchDescription | None) -> TickLineage | None:
        if description is None:  # skipped: nothing was minted
            return None
        hook = IcebergCatalogHook(self.iceberg_conn_id)
        return describe_tick(
            hook.get_config(),
            description,
            sql=self._lineage_sql(),
        )

    def _previous(self, context: Any) -> BatchDescription | None:
        """The description this task minted last (prior runs), to check lowers only rise."""
        return previous_description(context, self.task_id)


def previous_description(
    context: Any, task_id: str, key: str = XCOM_RETURN_KEY
) -> BatchDescription | None:
    """The description ``task_id`` pushed under ``key`` in an earlier run, if any."""
    ti = context.get("ti")
    if ti is None:
        return None
    try:
        value = ti.xcom_pull(task_ids=task_id, key=key, include_prior_dates=True)
    except Exception:  # XCom backends differ; the check is a safety net only
        log.debug("no previous description available", exc_info=True)
        return None
    # With prior dates, the Task SDK answers a list (one value per earlier
    # run) once there are several: the newest is the one with the latest time.
    found = []
    for item in value if isinstance(value, list) else [value] if value else []:
        try:
            found.append(BatchDescription.from_json(item))
        except DescriptionError:
            log.warning("ignoring a malformed previous description: %r", item)
    return max(found, key=lambda d: d.time, default=None)


class MintSettings(Protocol):
    """What minting reads from its operator (:class:`MintOperator` or the fused tick's)."""

    @property
    def iceberg_conn_id(self) -> str: ...
    @property
    def target(self) -> str: ...
    @property
    def time(self) -> int | str | None: ...
    @property
    def read_only(self) -> bool | None: ...
    @property
    def input_upper_policies(self) -> Mapping[str, str]: ...


def mint_description(
    context: Any,
    settings: MintSettings,
    *,
    previous: BatchDescription | None,
    inputs_of: Callable[[str, str], list[str]],
    hook: IcebergCatalogHook | None = None,
) -> BatchDescription:
    """Mint one tick's description, or skip the task (with the reason) if there is none.

    What :class:`MintOperator` runs; :class:`~.tick.ViewTickOperator` runs it
    as the first of its three steps.

    :param inputs_of: ``(target, catalog_name) -> input table names``.
    :param hook: the catalog hook of ``settings.iceberg_conn_id``, if the caller has one open.
    """
    time = settings.time
    read_only, input_upper_policies = settings.read_only, settings.input_upper_policies
    hook = hook or IcebergCatalogHook(settings.iceberg_conn_id)
    catalog_name = hook.get_config().name
    target = normalize_table_name(settings.target, catalog_name)
    names = inputs_of(target, catalog_name)  # a query that does not parse fails here
    inputs = hook.timelines(names, input_upper_policies)  # all exist
    t = _tick_time(context, time, inputs, catalog_name)
    table = hook.load_table_or_none(target)
    owner = owner_of(context)
    if table is not None and owner is not None:
        table = claim(table, owner, record=not read_only_default(read_only))
    decision = mint(
        target=target,
        target_timeline=None if table is None else Timeline.of(table),
        time=t,
        inputs=inputs,
        read_only=read_only_default(read_only),
        previous=previous,
    )
    if decision.description is None:
        log.info("not minting for %s at T=%s: %s", target, t, decision.reason)
        raise AirflowSkipException(decision.reason)
    # Before the write job reads the pinned snapshots, collection expiry
    # must learn what this reader still reads. Only once minted: a refused
    # tick (a bogus time, an input not yet complete) must change nothing,
    # and its time as a first hold would let expiry drop what later ticks read.
    held = hold_collection_inputs(hook.get_catalog(), target, inputs, since=t)
    if held:
        log.info("%s now holds snapshots of %s from T=%s on", target, held, t)
    log.info("%s: %s", target, decision.reason)
    return decision.description


def view_inputs(sql: str, target: str, catalog_name: str) -> list[str]:
    """The tables a view's query reads (parsing fails before any Spark job).

    Also where a query known only once rendered (a ``.sql`` file, Jinja) meets
    the rules the DAG import applies to the others (``core/definition_rules``).
    """
    check_target_name(normalize_table_name(target, catalog_name))
    parsed = parse_query(sql, target=target, catalog_name=catalog_name)
    check_view_query(parsed)
    return list(parsed.inputs)


def _tick_time(
    context: Any, time: int | str | None, inputs: Mapping[str, Timeline], catalog_name: str
) -> int:
    """T: the ``time`` argument or the run's interval, or what the inputs sealed."""
    if time != SEALED:
        return tick_time(context, time)
    sealed = sealed_tick_time(context, inputs, catalog_name)
    if sealed is None:
        raise AirflowSkipException("no input has sealed any time yet: nothing to tick")
    return sealed
