"""Continual-task definitions as Materialize users write them, checked at DAG parse.

No JVM: everything here is what the text alone shows (issue 43), plus the
mint's refusal of an input that is not an Iceberg table. The
definitions are those of Materialize's own continual-task tests and docs;
the expected refusals use Materialize's words for the same mistakes.
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pytest
import sqlglot

from airflow_provider_ct.continual import continual_task
from airflow_provider_ct.core.catalog import CatalogConfig
from airflow_provider_ct.core.continual import parse_continual_task
from airflow_provider_ct.core.continual_now import now_stamps, with_time
from airflow_provider_ct.core.tables import create_managed_table
from airflow_provider_ct.exceptions import ConfigurationError, QueryError


def test_a_column_list_is_optional_when_the_task_does_not_read_its_output() -> None:
    task = parse_continual_task(
        "CREATE CONTINUAL TASK ct ON INPUT input AS (\n    INSERT INTO ct SELECT * FROM input;\n)",
        default_namespace="ns",
    )
    assert (task.name, task.input, task.columns, task.declared) == ("ns.ct", "ns.input", (), False)
    assert [s.kind for s in task.statements] == ["insert"]


def test_the_snapshot_is_taken_by_default_and_can_be_switched_off() -> None:
    base = "CREATE CONTINUAL TASK ct (key INT) ON INPUT i {}AS (INSERT INTO ct SELECT key FROM i)"
    assert parse_continual_task(base.format(""), default_namespace="ns").snapshot is True
    off = parse_continual_task(base.format("WITH (SNAPSHOT = false) "), default_namespace="ns")
    assert off.snapshot is False
    on = parse_continual_task(base.format("WITH (SNAPSHOT = TRUE) "), default_namespace="ns")
    assert on.snapshot is True


# Materialize's ct_errors scenarios that need no catalog, with its words.
@pytest.mark.parametrize(
    ("sql", "message"),
    [
        (
            "CREATE CONTINUAL TASK nope (key INT) ON INPUT foo AS (\n"
            "    INSERT INTO nope SELECT FROM foo;\n)",
            r"^statement 1 \(INSERT INTO nope SELECT FROM foo\): INSERT has more target "
            r"columns than expressions \(0 expression\(s\) for 1 target column\(s\): key\)$",
        ),
        (
            "CREATE CONTINUAL TASK nope (key INT) ON INPUT foo AS (\n"
            "    INSERT INTO nope SELECT *, 'nope' FROM foo;\n)",
            r"^statement 1 \(INSERT INTO nope SELECT \*, 'nope' FROM foo\): INSERT has more "
            r"expressions than target columns",
        ),
        (
            "CREATE CONTINUAL TASK nope ON INPUT foo AS (\n    DELETE FROM nope;\n"
            "    INSERT INTO nope SELECT *, 'bar' FROM foo;\n)",
            r"^statement 1 \(DELETE FROM nope\) reads the task's own output ns\.nope, so the "
            r"task must declare its columns",
        ),
        (
            "CREATE CONTINUAL TASK nope ON INPUT foo AS (\n"
            "    INSERT INTO nope SELECT key FROM foo WHERE key NOT IN (SELECT key FROM nope);\n)",
            r"^statement 1 .* reads the task's own output ns\.nope",
        ),
        (
            "CREATE CONTINUAL TASK nope ON INPUT foo AS (\n    INSERT INTO nope SELECT a FROM foo;"
            "\n    INSERT INTO nope SELECT a, b FROM foo;\n)",
            r"^statement 2 \(INSERT INTO nope SELECT a, b FROM foo\): INSERT has more "
            r"expressions than target columns",
        ),
        (
            "CREATE CONTINUAL TASK nope ON INPUT foo AS (INSERT INTO nope SELECT FROM foo)",
            r"^statement 1 .* selects no columns",
        ),
        (
            "CREATE CONTINUAL TASK nope (a INT, b INT) ON INPUT foo AS (\n"
            "    DELETE FROM nope;\n    INSERT INTO nope (a) SELECT a, b FROM foo;\n)",
            r"^statement 2 .*: INSERT has more expressions than target columns \(2 expression"
            r"\(s\) for 1 target column\(s\): a\)",
        ),
        (
            "CREATE CONTINUAL TASK nope ON INPUT foo AS (INSERT INTO nope (a) SELECT a FROM foo)",
            r"^statement 1 .* names target columns, but the task declares none",
        ),
        (
            "CREATE CONTINUAL TASK nope (a INT) ON INPUT foo AS (SELECT a FROM foo)",
            r"^statement 1 \(SELECT a FROM foo\) must be DELETE FROM ns\.nope",
        ),
    ],
)
def test_definition_errors_are_refused_at_parse_naming_the_statement(
    sql: str, message: str
) -> None:
    with pytest.raises(QueryError, match=message) as caught:
        parse_continual_task(sql, default_namespace="ns")
    assert "__ct" not in str(caught.value)  # never the job's rewritten query


def test_a_star_leaves_the_width_to_the_first_tick() -> None:
    """``SELECT *`` into one column may fit: only the schema can tell."""
    task = parse_continual_task(
        "CREATE CONTINUAL TASK nope (key STRING) ON INPUT foo AS (INSERT INTO nope SELECT * "
        "FROM foo;)",
        default_namespace="ns",
    )
    assert task.column_names == ["key"]


def test_the_factory_refuses_at_dag_parse() -> None:
    """The refusal happens when the DAG file builds the group: no task, no tick."""
    with pytest.raises(QueryError, match="INSERT has more target columns than expressions"):
        continual_task(
            definition="CREATE CONTINUAL TASK nope (key INT) ON INPUT foo AS "
            "(INSERT INTO nope SELECT FROM foo;)",
            namespace="ns",
            catalog_name="ct",
        )


def test_materializes_sugar_desugars_to_statements() -> None:
    retain = parse_continual_task(
        "CREATE CONTINUAL TASK retain\n    FROM RETAIN append_only\n"
        "    WHILE (ts_col + INTERVAL '2s' > mz_now())",
        default_namespace="ns",
    )
    assert [s.kind for s in retain.statements] == ["delete", "insert"]
    assert retain.input == "ns.append_only" and not retain.declared
    transform = parse_continual_task(
        "CREATE CONTINUAL TASK t FROM TRANSFORM i USING (SELECT a FROM i WHERE a > 1)",
        default_namespace="ns",
    )
    assert [s.kind for s in transform.statements] == ["insert"]
    options = parse_continual_task(
        "CREATE CONTINUAL TASK r FROM RETAIN i WHILE ((a + 1) > mz_now()) WITH (SNAPSHOT = false)",
        default_namespace="ns",
    )
    assert options.snapshot is False
    assert options.statements[1].expression.sql(dialect="spark") == (
        "INSERT INTO ns.r SELECT * FROM ns.i WHERE ((a + 1) > MZ_NOW())"
    )
    assert transform.statements[0].expression.sql(dialect="spark") == (
        "INSERT INTO ns.t SELECT a FROM ns.i WHERE a > 1"
    )


@pytest.mark.parametrize(
    ("where", "temporal", "expected"),
    [
        # Materialize's retention idiom: compared with a timestamp.
        ("ts + INTERVAL '2s' > mz_now()", (), "ts + INTERVAL '2' SECOND > TIMESTAMP_MILLIS(7)"),
        ("mz_now() - INTERVAL '1' HOUR <= ts", (), "TIMESTAMP_MILLIS(7) - INTERVAL '1' HOUR <= ts"),
        ("ts > mz_now()", ("ts",), "ts > TIMESTAMP_MILLIS(7)"),
        ("mz_now() BETWEEN ts AND ts2", ("ts2",), "TIMESTAMP_MILLIS(7) BETWEEN ts AND ts2"),
        # ... and with epoch ms, as before.
        ("ts < mz_now() - 3600000", (), "ts < 7 - 3600000"),
        ("ts > mz_now()", (), "ts > 7"),
        ("ct_time() = ts", ("other",), "7 = ts"),
    ],
)
def test_mz_now_takes_the_type_its_comparison_needs(
    where: str, temporal: tuple[str, ...], expected: str
) -> None:
    tree = sqlglot.parse_one(f"SELECT * FROM t WHERE {where}", read="spark")
    got = with_time(tree, 7, temporal).args["where"].this.sql(dialect="spark")
    assert got == expected


def test_an_input_that_is_not_an_iceberg_table_is_refused_with_nothing_created(
    default_catalog: CatalogConfig,
) -> None:
    """Materialize's ``ct_errors``: a view cannot be an input. Here anything that is not an
    Iceberg table of the catalog (a view, a mistyped name) is refused by the first tick's
    mint, before any job, naming the input."""
    from airflow_provider_ct.operators.continual import ContinualMintOperator

    catalog = default_catalog.load()
    create_managed_table(catalog, "mzview.foo", pa.schema([("key", pa.int32())]))
    definition = (
        "CREATE CONTINUAL TASK nope (key INT, val STRING) ON INPUT some_view AS (\n"
        "    INSERT INTO nope SELECT * FROM foo;\n)"
    )
    mint = ContinualMintOperator(task_id="m", definition=definition, namespace="mzview", time=10)
    with pytest.raises(ConfigurationError, match=r"'mzview\.some_view' does not exist"):
        mint.execute({})
    assert not catalog.table_exists("mzview.nope")


@pytest.mark.parametrize(
    ("where", "kinds", "expected"),
    [
        # Spark says the operand is a number: the words (ts_col) no longer decide.
        ("unix_millis(ts_col) + 10000 > mz_now()", {"other"}, "> 7"),
        ("unix_millis(ts_col) > mz_now() - 2000", {"other"}, "> 7 - 2000"),
        # ... or a timestamp, whatever its name says.
        ("event_at > mz_now()", {"temporal"}, "> TIMESTAMP_MILLIS(7)"),
        ("mz_now() + x < event_at", {"interval", "temporal"}, "TIMESTAMP_MILLIS(7) + x"),
        # Spark could not type it: the words decide, as before.
        ("ts_col > mz_now()", {None}, "> TIMESTAMP_MILLIS(7)"),
    ],
)
def test_mz_now_takes_the_type_spark_gives_its_operand(
    where: str, kinds: set[str | None], expected: str
) -> None:
    tree = sqlglot.parse_one(f"SELECT * FROM t WHERE {where}", read="spark")
    seen: list[str] = []

    def kind_of(node: Any) -> str | None:
        seen.append(node.sql(dialect="spark"))
        return next(iter(kinds)) if len(kinds) == 1 else _kind_by_name(node, kinds)

    stamps = now_stamps(tree, ("ts_col",), kind_of)
    got = with_time(tree, 7, stamps=stamps).args["where"].this.sql(dialect="spark")
    assert expected in got, (got, seen)


def _kind_by_name(node: Any, kinds: set[str | None]) -> str | None:
    """``x`` is an interval, anything else a timestamp (the test's own typing)."""
    return "interval" if node.sql() == "x" else "temporal"
