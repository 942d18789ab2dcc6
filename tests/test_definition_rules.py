"""Definitions that cannot be maintained are refused at DAG parse, and again at mint.

Each refusal is a :class:`QueryError` whose message names the problem, and
nothing was created: no task in the DAG, no table or namespace in the
catalog, every existing table exactly as it was (metadata file, head, rows).
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pyarrow as pa
import pytest

from airflow_provider_ct.core.catalog import CatalogConfig
from airflow_provider_ct.core.definition_rules import check_output_names, check_view_query
from airflow_provider_ct.core.query import parse_query
from airflow_provider_ct.core.tables import STATE_TABLE_SUFFIX as SUFFIX
from airflow_provider_ct.exceptions import QueryError
from tests.helpers import rows_of

SCHEMA = pa.schema([("k", pa.int64()), ("v", pa.string())])
START = datetime(2026, 1, 1, tzinfo=UTC)

#: (target, query, what the message says) for views refused at parse.
REFUSED_VIEWS = [
    ("a.v", "SELECT k AS x, k AS x FROM a.t", "more than one output column named 'x'"),
    ("a.v", "SELECT k, v AS K FROM a.t", "more than one output column named 'k'"),
    ("a.v", "SELECT t.k, u.k FROM a.t t JOIN a.t u ON t.k = u.k", "output column named 'k'"),
    ("a.v", "SELECT k, v AS k FROM a.t UNION ALL SELECT k, v FROM a.t", "named 'k'"),
    ("a.v", "SELECT rand() AS r FROM a.t", "calls nondeterministic rand()"),
    ("a.v", "SELECT k, random() AS r FROM a.t", "calls nondeterministic rand()"),  # an alias
    ("a.v", "SELECT uuid() AS id, k FROM a.t", "calls nondeterministic uuid()"),
    ("a.v", "SELECT k, current_timestamp() AS ts FROM a.t", "current_timestamp()"),
    ("a.v", "SELECT k, now() AS ts FROM a.t", "calls nondeterministic now()"),
    ("a.v", "SELECT k FROM a.t WHERE current_date() > DATE'2020-01-01'", "current_date()"),
    ("a.v", "SELECT k FROM a.t TABLESAMPLE (10 PERCENT)", "nondeterministic tablesample"),
    (f"a.t{SUFFIX}", "SELECT k, count(*) AS n FROM a.t GROUP BY k", f"ends in '{SUFFIX}'"),
    (f"ct.a.T{SUFFIX.upper()}", "SELECT k FROM a.t", f"ends in '{SUFFIX}'"),
]
IDS = [
    "dup-alias",
    "dup-case",
    "dup-join",
    "dup-union",
    "rand",
    "random",
    "uuid",
    "current_timestamp",
    "now",
    "current_date",
    "tablesample",
    "state-table",
    "state-table-qualified",
]


def _world(config: CatalogConfig) -> tuple[Any, dict[str, Any]]:
    """One input ``a.t`` with two rows; returns the catalog and its state."""
    catalog = config.load()
    catalog.create_namespace("a")
    table = catalog.create_table("a.t", schema=SCHEMA)
    table.append(pa.table({"k": [1, 2], "v": ["x", "y"]}, schema=SCHEMA))
    return catalog, _state(catalog)


def _state(catalog: Any) -> dict[str, Any]:
    """Every table of every namespace: its metadata file, head and rows."""
    out: dict[str, Any] = {}
    for ns in catalog.list_namespaces():
        for ident in catalog.list_tables(ns):
            table = catalog.load_table(ident)
            head = table.metadata.current_snapshot()
            out[".".join(ident)] = (
                table.metadata_location,
                None if head is None else head.snapshot_id,
                rows_of(table),
            )
    return out


@pytest.mark.parametrize(("target", "sql", "message"), REFUSED_VIEWS, ids=IDS)
def test_a_view_that_cannot_be_maintained_breaks_the_dag_import(
    default_catalog: CatalogConfig, target: str, sql: str, message: str
) -> None:
    from airflow.sdk import DAG

    from airflow_provider_ct import materialized_view

    catalog, before = _world(default_catalog)
    with (
        DAG("refused_view", schedule=None, start_date=START) as dag,
        pytest.raises(QueryError, match=message.replace("(", r"\(").replace(")", r"\)")),
    ):
        materialized_view(target=target, sql=sql)
    assert dag.task_ids == []  # nothing of the view was added
    assert _state(catalog) == before  # nothing created, nothing changed


@pytest.mark.parametrize(("target", "sql", "message"), REFUSED_VIEWS, ids=IDS)
def test_the_mint_refuses_it_too_before_any_table_exists(
    default_catalog: CatalogConfig, target: str, sql: str, message: str
) -> None:
    """A query known only once rendered (a .sql file, Jinja) meets the same rules at mint."""
    from airflow_provider_ct import MintOperator

    catalog, before = _world(default_catalog)
    with pytest.raises(QueryError, match=message.replace("(", r"\(").replace(")", r"\)")):
        MintOperator(task_id="m", target=target, sql=sql, time=50).execute({})
    assert _state(catalog) == before


def test_the_nondeterministic_message_names_the_deterministic_way() -> None:
    with pytest.raises(QueryError) as refused:
        check_view_query(parse_query("SELECT k, rand() AS r, uuid() AS u FROM a.t"))
    text = str(refused.value)
    assert "rand(), uuid()" in text
    assert "mz_now() or ct_time()" in text and "continual task" in text


@pytest.mark.parametrize(
    "sql",
    [
        "SELECT k, v FROM a.t",
        "SELECT k, count(*), sum(k) FROM a.t GROUP BY k",  # unaliased: Spark names them
        "SELECT *, k AS k2 FROM a.t",
        "SELECT t.*, u.v AS v2 FROM a.t t JOIN a.u u ON t.k = u.k",
        "SELECT k AS x FROM a.t UNION ALL SELECT k AS x FROM a.u",  # one name per position
        "SELECT k, hash(v) AS h, date_add(DATE'2020-01-01', k) AS d FROM a.t",
    ],
)
def test_deterministic_queries_with_distinct_names_are_accepted(sql: str) -> None:
    check_view_query(parse_query(sql))


def test_a_continual_task_named_like_a_state_table_is_refused(
    default_catalog: CatalogConfig,
) -> None:
    from airflow.sdk import DAG

    from airflow_provider_ct import continual_task

    catalog, before = _world(default_catalog)
    definition = (
        f"CREATE CONTINUAL TASK a.t{SUFFIX} (k BIGINT, v STRING) ON INPUT a.t AS ("
        "INSERT INTO a.out SELECT k, v FROM a.t)"
    ).replace("a.out", f"a.t{SUFFIX}")
    with (
        DAG("refused_task", schedule=None, start_date=START) as dag,
        pytest.raises(QueryError, match=f"target 'a.t{SUFFIX}' ends in '{SUFFIX}'"),
    ):
        continual_task(definition=definition)
    assert dag.task_ids == []
    assert _state(catalog) == before


def test_duplicates_are_listed_once_each() -> None:
    with pytest.raises(QueryError, match=r"named 'a', 'b': a table's columns need distinct"):
        check_output_names(
            parse_query("SELECT k AS a, k AS b, v AS A, v AS b, k AS a FROM x.t").expression
        )
