"""Small helpers shared by our operators and sensors (triggers must not import operators)."""

from __future__ import annotations

import ast
import json
import logging
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from airflow_provider_ct.core.catalog import DEFAULT_CATALOG_NAME
from airflow_provider_ct.core.frontier import parse_timestamp, timestamp_from_datetime
from airflow_provider_ct.core.owner import Owner
from airflow_provider_ct.core.query import parse_query
from airflow_provider_ct.core.settings import read_only as deployment_read_only
from airflow_provider_ct.exceptions import ConfigurationError, DescriptionError, QueryError
from airflow_provider_ct.hooks.iceberg import IcebergCatalogHook

if TYPE_CHECKING:
    pass

log = logging.getLogger(__name__)

#: The XCom key of the fused tick's write report.
WRITE_REPORT_KEY = "write_report"
#: The field of a mint's XCom holding the write report of the quiet batch it
#: staged (it then skipped the write task): beside the description, so the
#: append gets both in one XCom read.
QUIET_REPORT_FIELD = "quiet_report"
#: The field of a mint's XCom saying it asked the quiet rule and the tick is not
#: quiet: the write task then starts its job without asking again (the
#: description pins the same inputs; running the job is never wrong).
NOT_QUIET_FIELD = "not_quiet"

#: Deployment-wide read-only switch (0dt upgrades, incident response).


def tick_time(context: Mapping[str, Any], override: Any = None) -> int:
    """The tick's logical time T in epoch ms.

    ``override`` (a templated argument) wins; otherwise the run's
    ``data_interval_end``, falling back to the logical date, then ``run_after``
    for manual runs that have neither. A malformed override (``"-5"``, ``"²"``,
    out of range) raises :class:`FrontierError` naming it.
    """
    if override not in (None, ""):
        return parse_timestamp(override, "time")
    for key in ("data_interval_end", "logical_date"):
        value = context.get(key)
        if value is not None:
            return timestamp_from_datetime(value)
    dag_run = context.get("dag_run")
    run_after = getattr(dag_run, "run_after", None)
    if run_after is not None:
        return timestamp_from_datetime(run_after)
    raise ConfigurationError("cannot tell the tick time: no data interval, logical date or time=")


def read_only_default(read_only: bool | None) -> bool:
    """The operator's ``read_only``, else the deployment's ``CT_READ_ONLY``."""
    return deployment_read_only() if read_only is None else read_only


def load_json_object(value: Any, what: str) -> dict[str, Any]:
    """An XCom value as a dict: a dict, JSON text, or a rendered Python dict literal.

    Hostile text (deep nesting, ``{[1]: 2}``) raises :class:`DescriptionError`,
    never the parsers' own ``RecursionError`` or ``TypeError``.
    """
    if isinstance(value, dict):
        return value
    if isinstance(value, str):
        try:
            parsed = json.loads(value)
        except (json.JSONDecodeError, RecursionError):
            try:
                parsed = ast.literal_eval(value)
            except (ValueError, SyntaxError, TypeError, RecursionError, MemoryError):
                raise DescriptionError(
                    f"{what} is neither JSON nor a dict: {value!r:.200}"
                ) from None
        if isinstance(parsed, dict):
            return parsed
    raise DescriptionError(
        f"{what} must be a JSON object, got {type(value).__name__}: {value!r:.200}"
    )


def owner_of(context: Any) -> Owner | None:
    """The definition a task belongs to: its DAG and task group.

    ``None`` outside a task group (an operator used on its own has no
    definition to own a table) or outside a DAG run.
    """
    ti = context.get("ti")
    dag_id, task_id = getattr(ti, "dag_id", None), getattr(ti, "task_id", None)
    if not isinstance(dag_id, str) or not isinstance(task_id, str) or "." not in task_id:
        return None
    return Owner(dag_id, task_id.rsplit(".", 1)[0])


def is_templated_sql(sql: str) -> bool:
    """Whether ``sql`` is only known after rendering: a ``.sql`` file or Jinja text."""
    return sql.strip().endswith(".sql") or "{{" in sql or "{%" in sql


def catalog_name_of(iceberg_conn_id: str, explicit: str | None = None) -> str:
    """The catalog name to qualify table names with: ``explicit``, else the connection's.

    Called at DAG-parse time by the TaskGroup factories; the operators read
    the connection again at run time. A connection that cannot be read here
    (a secrets backend only reachable from workers) falls back to ``ct``.
    """
    if explicit:
        return explicit
    try:
        return IcebergCatalogHook(iceberg_conn_id).get_config().name
    except Exception as exc:  # parse time: never break the DAG import for it
        log.warning("catalog name of %r unknown at parse time (%s): using ct", iceberg_conn_id, exc)
        return DEFAULT_CATALOG_NAME


class RenderedSqlMixin:
    """Parses the rendered ``sql`` right after rendering, naming the template in errors.

    A ``.sql`` file or Jinja text cannot be parsed when the DAG is parsed;
    this is its first check, so a bad query fails the task at render time
    with the file's name instead of later inside Spark.
    """

    def render_template_fields(self, context: Any, jinja_env: Any = None) -> None:
        source = getattr(self, "sql", None)
        super().render_template_fields(context, jinja_env)  # type: ignore[misc]
        fields = getattr(self, "template_fields", ())
        if "sql" not in fields or not isinstance(source, str) or not is_templated_sql(source):
            return
        where = source.strip() if source.strip().endswith(".sql") else "the view's SQL template"
        try:
            conn_id = getattr(self, "iceberg_conn_id", IcebergCatalogHook.default_conn_name)
            parse_query(str(getattr(self, "sql", "")), catalog_name=catalog_name_of(conn_id))
        except QueryError as exc:
            raise QueryError(f"{where}, as rendered: {exc}") from None
