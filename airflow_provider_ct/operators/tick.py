"""ViewTickOperator: mint, write and append of one view tick in a single task.

Why one task: each Airflow task instance has a fixed cost whatever it does
(a process that parses the DAG file, and requests to the API server to
start, render, push and pull XComs and finish: about 1 s per task under the
real scheduler here, about 50 ms in ``dag.test()``). A quiet tick does only
metadata work, so for it those costs are nearly all of the tick; three task
instances become one. The three steps are the same code as
:class:`~.mint.MintOperator`, :class:`~.write.WriteOperator` and
:class:`~.append.AppendOperator` run in order, and each is safe to repeat,
so a retry of the whole task is a retried tick: a batch the failed attempt
already landed is found by mint (it refuses to mint ``T`` again, and the
task is skipped as a separate mint would be), and a batch it only staged is
an attempt of its own, swept like any loser's.

What is lost against three tasks: per-step durations, logs and retries in
the UI (the task log still names each step), and the write report as its own
task's XCom (it is under the key ``write_report`` here, the description
under ``description``). See docs/engines.md.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from airflow.sdk import Asset

from airflow_provider_ct.core.description import BatchDescription
from airflow_provider_ct.operators._common import WRITE_REPORT_KEY
from airflow_provider_ct.operators.append import AppendStep, checked_report
from airflow_provider_ct.operators.mint import mint_description, previous_description, view_inputs
from airflow_provider_ct.operators.write import WriteOperator

#: XCom keys of the fused task's intermediate results (its return value is the append's).
DESCRIPTION_KEY = "description"
__all__ = ["DESCRIPTION_KEY", "WRITE_REPORT_KEY", "ViewTickOperator"]


class ViewTickOperator(AppendStep, WriteOperator):
    """One view tick (mint, write, append) as one task; see the module docstring.

    Takes :class:`~.write.WriteOperator`'s parameters (except the
    description's source), :class:`~.mint.MintOperator`'s ``time``,
    ``read_only`` and ``input_upper_policies``, and
    :class:`~.append.AppendOperator`'s ``asset`` and ``writer_kind``. With
    ``report_only=True`` it mints and reports, and appends nothing.
    """

    template_fields: Sequence[str] = ("target", "sql", "time")
    ui_color = "#e4ecd2"
    reads_description = False

    def __init__(
        self,
        *,
        time: int | str | None = None,
        read_only: bool | None = None,
        input_upper_policies: Mapping[str, str] | None = None,
        asset: Asset | None = None,
        writer_kind: str = "view",
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.time = time
        self.read_only = read_only
        self.input_upper_policies = dict(input_upper_policies or {})
        self.asset = asset
        self.writer_kind = writer_kind
        self.lineage_sql = self.sql

    def execute(self, context: Any) -> dict[str, Any]:
        desc = self._mint(context)
        ti = context["ti"]
        ti.xcom_push(key=DESCRIPTION_KEY, value=desc.to_json())
        self._lineage_description = desc
        report = self._write(desc)
        ti.xcom_push(key=WRITE_REPORT_KEY, value=report)
        if self.report_only:
            return {"appended": False, "status": report.get("status"), "reason": "report_only"}
        return self._append_report(context, checked_report(report), desc)

    def _mint(self, context: Any) -> BatchDescription:
        """The tick's description; skips the task when there is nothing to mint."""
        return mint_description(
            context,
            self,
            previous=previous_description(context, self.task_id, DESCRIPTION_KEY),
            inputs_of=lambda target, catalog_name: view_inputs(self.sql, target, catalog_name),
        )
