"""Operators for continual tasks: mint and write, reusing the view machinery.

The append is the ordinary :class:`~airflow_provider_ct.operators.append.AppendOperator`:
a continual task's batch is a manifest with one change per input time, all
landing in one compare-and-append.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from airflow_provider_ct.core.continual import (
    CONTINUAL_TASK_KIND,
    ContinualTaskDef,
    parse_continual_task,
)
from airflow_provider_ct.core.description import BatchDescription
from airflow_provider_ct.core.quiet import Quiet, continual_tick_is_quiet
from airflow_provider_ct.exceptions import QueryError
from airflow_provider_ct.hooks.iceberg import IcebergCatalogHook
from airflow_provider_ct.operators.mint import MintOperator
from airflow_provider_ct.operators.write import Loaded, WriteOperator
from airflow_provider_ct.spark import continual_job
from airflow_provider_ct.spark.exchange import inline

if TYPE_CHECKING:
    pass


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


class ContinualWriteOperator(WriteOperator):
    """Run the continual-task Spark job for a description (stages every input time).

    :param definition: ``CREATE CONTINUAL TASK ...`` text.
    :param namespace: namespace of unqualified table names in the definition.
    """

    template_fields = ("definition", "namespace", "description")
    job_kind = "continual-task job"
    query_kind = CONTINUAL_TASK_KIND
    quiet_records_time = False

    def __init__(self, *, definition: str, namespace: str | None = None, **kwargs: Any) -> None:
        self.definition = definition
        self.namespace = namespace
        task = parse_continual_task(definition, default_namespace=namespace)
        super().__init__(target=task.name, sql=definition, **kwargs)

    def _tables_read(self, hook: IcebergCatalogHook, target: str) -> list[str]:
        task = self._task(hook)
        return [task.input, *task.references]

    def _quiet(self, hook: IcebergCatalogHook, desc: BatchDescription, loaded: Loaded) -> Quiet:
        """Quiet when the job would process no input time (the input did not change)."""
        name = self._task(hook).input
        table = loaded.inputs[name]
        return continual_tick_is_quiet(loaded.target, desc, input_name=name, input_table=table)

    def _task(self, hook: IcebergCatalogHook) -> ContinualTaskDef:
        return parse_continual_task(
            self.definition, default_namespace=self.namespace, catalog_name=hook.get_config().name
        )

    def _lineage_sql(self) -> str | None:
        """None: sqlglot cannot trace columns through a continual-task definition."""
        return None

    def _application(self) -> str:
        return str(continual_job.__file__)

    def _warm_job(self) -> tuple[str, dict[str, Any]]:
        return "continual", {"task": self.definition, "namespace": self.namespace}

    def _job_args(self) -> list[str]:
        namespace = ["--namespace", self.namespace] if self.namespace else []
        return ["--task", inline(self.definition), *namespace]
