"""``sql_pipeline``: a folder of SQL files (SDP's format) as one Airflow DAG.

Each dataset is the group its factory builds (``materialized_view`` or
``continual_task``), with its Asset and lineage as always; a dataset that
reads another ticks after it in the same run, at the same time ``T``, so
every run is one consistent cut of the pipeline's inputs. The run's params
(the Trigger dialog) select what ticks and what refreshes in full
(:mod:`.selection`); a pre-execute hook on each group's tasks applies them.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from datetime import datetime
from pathlib import Path
from typing import Any

from airflow.sdk import DAG, BaseOperator, Param, TaskGroup, TriggerRule
from airflow.sdk.exceptions import AirflowSkipException

from airflow_provider_ct.continual import continual_task
from airflow_provider_ct.exceptions import CTError
from airflow_provider_ct.pipelines.constant_task import constant_group
from airflow_provider_ct.pipelines.load import LoadedPipeline, load_pipeline
from airflow_provider_ct.pipelines.resolve import Resolved
from airflow_provider_ct.pipelines.selection import PARAMS, select
from airflow_provider_ct.views import materialized_view

DEFAULT_START = datetime(2026, 1, 1)


def sql_pipeline(
    folder: str | Path,
    *,
    dag_id: str | None = None,
    time: int | str | None = None,
    iceberg_conn_id: str | None = None,
    catalog_name: str | None = None,
    factory_kwargs: Mapping[str, Any] | None = None,
    **dag_kwargs: Any,
) -> DAG:
    """The DAG of the pipeline in ``folder`` (relative: to the calling DAG file's folder).

    The folder is read, every name resolved against the catalog and every
    query checked now, at DAG-parse time: a broken folder raises
    :class:`~airflow_provider_ct.exceptions.PipelineError` naming the file and
    the line, which Airflow shows as the DAG file's import error.

    :param time: every dataset's tick time (default: the run's
        ``data_interval_end``); one time for the whole run.
    :param factory_kwargs: more keyword arguments for every factory call
        (``deferrable``, ``poke_interval``, ``spark=``...).
    :param dag_kwargs: more ``DAG`` arguments; ``schedule``, ``start_date``,
        ``catchup`` and ``tags`` default to the spec's ``airflow:`` keys.
    """
    loaded = load_pipeline(
        _folder(folder), iceberg_conn_id=iceberg_conn_id, catalog_name=catalog_name
    )
    return build_dag(loaded, dag_id=dag_id, time=time, factory_kwargs=factory_kwargs, **dag_kwargs)


def build_dag(
    loaded: LoadedPipeline,
    *,
    dag_id: str | None = None,
    time: int | str | None = None,
    factory_kwargs: Mapping[str, Any] | None = None,
    **dag_kwargs: Any,
) -> DAG:
    """The DAG of a loaded pipeline (every factory's parse-time checks run here)."""
    settings = loaded.spec.airflow
    params = {
        "refresh": Param([], type="array", description="datasets to tick (and what they read)"),
        "full_refresh": Param(
            [],
            type="array",
            description="datasets to recompute in full (a streaming table: truncated, reprocessed)",
        ),
        "full_refresh_all": Param(False, type="boolean", description="every dataset in full"),
    }
    assert set(params) == set(PARAMS)
    dag_args: dict[str, Any] = {
        "schedule": settings.get("schedule"),
        "start_date": settings.get("start_date") or DEFAULT_START,
        "catchup": bool(settings.get("catchup", False)),
        "max_active_runs": 1,  # ticks land in order
        "tags": list(settings.get("tags") or ["ct", "sql-pipeline"]),
        "params": params,
        "doc_md": f"SQL pipeline `{loaded.spec.name}` from `{loaded.spec.folder}`.",
        **dag_kwargs,
    }
    if isinstance(dag_args["start_date"], str):
        dag_args["start_date"] = datetime.fromisoformat(dag_args["start_date"])
    with DAG(dag_id or settings.get("dag_id") or loaded.spec.name, **dag_args) as dag:
        groups: dict[str, TaskGroup] = {}
        for name in loaded.pipeline.order:
            item = loaded.resolved[name]
            groups[name] = _group(loaded, item, time, dict(factory_kwargs or {}))
            _select_hooks(loaded, name, groups[name])
            for upstream in loaded.pipeline.upstream(name):
                groups[upstream] >> groups[name]
    return dag


def _folder(folder: str | Path) -> Path:
    path = Path(folder)
    if path.is_absolute():
        return path
    caller = sys._getframe(2).f_globals.get("__file__")
    if caller and (Path(caller).resolve().parent / path).exists():
        return Path(caller).resolve().parent / path
    return path


def group_id_of(loaded: LoadedPipeline, name: str) -> str:
    """The dataset's group: its table name, or ``ns__t`` when two namespaces share it."""
    short = name.split(".")[-1]
    same = [n for n in loaded.pipeline.datasets if n.split(".")[-1] == short]
    return short if len(same) == 1 else name.replace(".", "__")


def _group(
    loaded: LoadedPipeline, item: Resolved, time: int | str | None, extra: dict[str, Any]
) -> TaskGroup:
    settings = loaded.spec.airflow
    common: dict[str, Any] = {
        "group_id": group_id_of(loaded, item.name),
        "time": time,
        "iceberg_conn_id": loaded.iceberg_conn_id,
        "catalog_name": loaded.catalog,
        "partition_by": list(item.partition_by) or None,
        "table_properties": dict(item.properties) or None,
        **{k: settings[k] for k in ("spark_conn_id", "engine") if settings.get(k)},
        **({"spark_conf": dict(loaded.spec.configuration)} if loaded.spec.configuration else {}),
        **extra,
    }
    statement = item.dataset.statement
    if statement.constant is not None:  # reads no table: its rows written, its frontier ticked
        return constant_group(
            group_id=common["group_id"],
            table=item.name,
            bounds=statement.constant,
            iceberg_conn_id=loaded.iceberg_conn_id,
            time=time,
        )
    try:
        if item.definition is not None:
            return continual_task(
                definition=item.definition, namespace=statement.database, **common
            )
        assert item.sql is not None
        refresh = "full" if statement.full_reason else str(settings.get("refresh", "auto"))
        return materialized_view(target=item.name, sql=item.sql, refresh=refresh, **common)
    except CTError as exc:
        raise statement.error(str(exc)) from None


class _SelectionHook:
    """A pre-execute hook: skip a dataset the run's params leave out, or refresh it in full."""

    def __init__(self, loaded: LoadedPipeline, name: str) -> None:
        self.pipeline, self.name = loaded.pipeline, name

    def __call__(self, context: Mapping[str, Any]) -> None:
        action = select(self.pipeline, context.get("params") or {}).action(self.name)
        if action == "skip":
            raise AirflowSkipException(f"{self.name} is not selected by this run's params")
        task = context["task"]
        if action == "full":
            task.quiet_ticks = False  # a full refresh runs even when no input changed
            if hasattr(task, "refresh"):  # a view's write: the full correction
                task.refresh = "full"
            if hasattr(task, "full_refresh"):  # a continual task's write and append
                task.full_refresh = True


def _select_hooks(loaded: LoadedPipeline, name: str, group: TaskGroup) -> None:
    """Hook every task of the group; the first ones run when an upstream group skipped."""
    hook = _SelectionHook(loaded, name)
    for task in group.children.values():
        assert isinstance(task, BaseOperator)
        task._pre_execute_hook = hook
        if not task.upstream_list:
            # An upstream dataset this run skips is never one a ticking dataset reads
            # (selection takes the upstream closure): none_failed is safe.
            task.trigger_rule = TriggerRule.NONE_FAILED
