"""Operators for continual tasks: mint and write, reusing the view machinery.

A continual task's batch is a manifest with one change per input time, all
landing in one compare-and-append; :class:`ContinualAppendOperator` is the
ordinary append, told which times such a batch may stage.
"""

from __future__ import annotations

from collections.abc import Collection
from typing import TYPE_CHECKING, Any

from airflow_provider_ct.core.continual import (
    as_of_of,
    batch_times,
    parse_continual_task,
)
from airflow_provider_ct.core.description import BatchDescription
from airflow_provider_ct.core.timeline import Timeline
from airflow_provider_ct.exceptions import QueryError
from airflow_provider_ct.hooks.iceberg import IcebergCatalogHook
from airflow_provider_ct.operators._quiet import ContinualQuiet, QuietRule
from airflow_provider_ct.operators.append import AppendOperator
from airflow_provider_ct.operators.mint import MintOperator
from airflow_provider_ct.operators.write import WriteOperator
from airflow_provider_ct.spark.jobs import ContinualWrite, JobSpec

if TYPE_CHECKING:
    from pyiceberg.table import Table


class ContinualMintOperator(MintOperator):
    """Mint a continual task's batch: from the output's upper to T + 1.

    The input and every reference must be complete through T.

    :param definition: ``CREATE CONTINUAL TASK ...`` text.
    :param namespace: namespace of unqualified table names in the definition.
    """

    template_fields = ("definition", "namespace", "time")

    def __init__(self, *, definition: str, namespace: str | None = None, **kwargs: Any) -> None:
        self.definition = definition
        self.namespace = namespace
        task = parse_continual_task(definition, default_namespace=namespace)
        super().__init__(target=task.name, sql=definition, **kwargs)

    def _inputs(self, target: str, catalog_name: str) -> list[str]:
        task = parse_continual_task(
            self.definition, default_namespace=self.namespace, catalog_name=catalog_name
        )
        if task.name != target:
            raise QueryError(f"the definition's output {task.name} is not {target}")
        return [task.input, *task.references]

    def _lineage_sql(self) -> str | None:
        """None: sqlglot cannot trace columns through a continual-task definition."""
        return None

    def quiet_rule(self) -> QuietRule:
        """Quiet when the job would process no input time (the write task asks the same)."""
        return ContinualQuiet(self.definition, self.namespace)


class ContinualWriteOperator(WriteOperator):
    """Run the continual-task Spark job for a description (stages every input time).

    :param definition: ``CREATE CONTINUAL TASK ...`` text.
    :param namespace: namespace of unqualified table names in the definition.
    """

    template_fields = ("definition", "namespace", "description")
    job_kind = "continual-task job"

    def __init__(
        self,
        *,
        definition: str,
        namespace: str | None = None,
        full_refresh: bool = False,
        **kwargs: Any,
    ) -> None:
        self.definition = definition
        self.namespace = namespace
        #: Truncate the output and process the input as it is at the tick's time
        #: (a pipeline run's ``full_refresh``, set by its pre-execute hook).
        self.full_refresh = full_refresh
        task = parse_continual_task(definition, default_namespace=namespace)
        super().__init__(target=task.name, sql=definition, **kwargs)

    def quiet_rule(self) -> QuietRule:
        """Quiet when the job would process no input time (the input did not change)."""
        return ContinualQuiet(self.definition, self.namespace)

    def _lineage_sql(self) -> str | None:
        """None: sqlglot cannot trace columns through a continual-task definition."""
        return None

    def job_spec(self) -> JobSpec:
        return JobSpec(
            ContinualWrite(
                task=self.definition,
                namespace=self.namespace,
                target=self.target_settings,
                full_refresh=self.full_refresh,
            )
        )


class ContinualAppendOperator(AppendOperator):
    """Append a continual task's batch: its times must be the batch's input times.

    A view's manifest stages the tick's time; a continual task's stages one
    entry per input time in ``[lower, upper)`` (each below the tick's time,
    and the as-of for ``SNAPSHOT = true``), so the append checks them against
    the same rule the job ran, :func:`~airflow_provider_ct.core.continual.batch_times`,
    over the input's history.

    :param definition: ``CREATE CONTINUAL TASK ...`` text.
    :param namespace: namespace of unqualified table names in the definition.
    :param full_refresh: the batch is a full refresh: its one time is the
        description's, at which the input's contents were processed.
    """

    template_fields = (*AppendOperator.template_fields, "definition", "namespace")

    def __init__(
        self,
        *,
        definition: str,
        namespace: str | None = None,
        full_refresh: bool = False,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.definition = definition
        self.namespace = namespace
        self.full_refresh = full_refresh

    def _allowed_times(
        self, hook: IcebergCatalogHook, table: Table, description: BatchDescription
    ) -> Collection[int]:
        task = parse_continual_task(
            self.definition, default_namespace=self.namespace, catalog_name=hook.get_config().name
        )
        source = Timeline.of(hook.load_table(task.input))
        if self.full_refresh:  # the job's rule for a full refresh: the tick's time alone
            return batch_times(source, description, as_of=description.time, snapshot=True)
        as_of = as_of_of(table.metadata.properties, description.time)
        return batch_times(source, description, as_of=as_of, snapshot=task.snapshot)
