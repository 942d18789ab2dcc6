"""Generated queries as views, ticked over random changes and compared with DuckDB every tick.

Issue 58's measure of generality (point 5): not a list of shapes met
before, but queries composed at random (:mod:`tests.sqlgen.generator`) over
a fact table and two dimensions with NULLs, duplicates, skew and empty
groups. Each query Spark accepts becomes a view the way a user makes one:

1. the view factory (``materialized_view`` in a DAG) must accept it at
   parse, and ``explain_view`` says the planner's strategy and reason;
2. its first tick creates the target over the inputs' first rows; every
   later tick follows random inserts (Spark and PyIceberg), deletes and
   updates (merge-on-read and copy-on-write), sometimes a table emptied
   (the inputs of :mod:`tests.sqlgen.world`);
3. each tick (mint, ``run_write(refresh="auto")``, append) is checked: the
   target's rows, read by PyIceberg, equal DuckDB's over the test's own
   model of the inputs (the query transpiled by sqlglot), as multisets.

Outcomes are kept apart (:mod:`tests.sqlgen.report`): SQL Spark or DuckDB
refuses (the generator's, not counted against the product), a definition
the factory refuses, one it accepts whose tick then fails (issue 59), a
wrong result, and exact views, with the share incremental on every busy
tick and every reason a busy tick ran in full. The run prints its numbers
and writes them, with every query, to
``test-artifacts/sqlgen-<seed>-<first>-<queries>x<ticks>.json``.

A wrong result or a failed tick fails the test with the query and its
seed: either is a product bug (regenerate the query with
``tests.sqlgen.generator.generate(seed, index)``).

Environment: ``CT_SQLGEN_QUERIES`` (default 12), ``CT_SQLGEN_TICKS`` (ticks
per view, the first creating it; default 3), ``CT_SQLGEN_SEED``,
``CT_SQLGEN_REFRESH`` (``auto``, or ``full``). A long
run: ``CT_SQLGEN_QUERIES=2000 CT_SQLGEN_TICKS=5``; queries run 25 to a
namespace of inputs of their own, so inputs stay small.
"""

from __future__ import annotations

import os
import time as _time
import traceback
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import sqlglot
from airflow.sdk import DAG

from airflow_provider_ct import materialized_view
from airflow_provider_ct.core.catalog import CatalogConfig
from airflow_provider_ct.exceptions import QueryError
from airflow_provider_ct.operators.append import AppendOperator
from airflow_provider_ct.spark.write_job import run_write
from airflow_provider_ct.views import explain_view
from tests.conftest import SPARK_CATALOG_CONN as CONN
from tests.helpers import mint_view_tick, rows_of
from tests.sqlgen.generator import Generated, generate
from tests.sqlgen.report import (
    ENGINES_DIFFER,
    ORACLE_REFUSED,
    PARSE_REFUSED,
    SPARK_REFUSED,
    TICK_FAILED,
    WRONG,
    Outcome,
    Summary,
)
from tests.sqlgen.schema import TABLES
from tests.sqlgen.world import Inputs, normalized

pytestmark = [pytest.mark.spark, pytest.mark.slow]

QUERIES = int(os.environ.get("CT_SQLGEN_QUERIES", "12"))
#: The first query's index (to run again one query a long run reported).
FIRST = int(os.environ.get("CT_SQLGEN_FIRST", "0"))
TICKS = max(2, int(os.environ.get("CT_SQLGEN_TICKS", "3")))
SEED = int(os.environ.get("CT_SQLGEN_SEED", "20261207"))
#: The views' refresh mode: ``auto`` (the default), or ``full`` to check that what
#: parse accepts also runs when every tick recomputes in full (issue 59).
REFRESH = os.environ.get("CT_SQLGEN_REFRESH", "auto")
#: Queries that share one namespace of inputs (and its history of changes).
PER_NAMESPACE = 25
ARTIFACTS = Path(os.environ.get("CT_TEST_ARTIFACTS", Path(__file__).parents[1] / "test-artifacts"))


def _first_line(exc: BaseException) -> str:
    """The error's first line; for an error of the JVM, the line naming Spark's error."""
    lines = str(exc).strip().splitlines() or [""]
    named = [line for line in lines if "Exception: " in line or "Error: " in line]
    return f"{type(exc).__name__}: {(named or lines)[0].strip()}"[:1000]


class Views:
    """The views of one namespace's queries over one history of its inputs."""

    def __init__(self, spark: Any, config: CatalogConfig, start: int, count: int) -> None:
        self.spark, self.config = spark, config
        self.ns = f"sqlgen_{SEED}_{start}"
        self.inputs = Inputs(spark, config, self.ns, SEED)
        self.queries = [generate(SEED, i) for i in range(start, start + count)]
        self.outcomes = {
            g.index: Outcome(SEED, g.index, g.sql(self.inputs.names()), g.features)
            for g in self.queries
        }

    def target(self, g: Generated) -> str:
        return f"{self.ns}.v{g.index}"

    def accept(self, g: Generated, con: Any) -> bool:
        """Spark and DuckDB run the query to the same rows, and the view factory accepts it.

        Spark runs it, not only analyzes it: some queries fail only when run
        (a correlated scalar subquery Spark decorrelates into many rows).
        """
        out = self.outcomes[g.index]
        try:
            spark_rows = self.spark_rows(g)
        except Exception as exc:
            out.status, out.error = SPARK_REFUSED, _first_line(exc)
            return False
        try:
            want = self.oracle(g, con)
        except Exception as exc:
            out.status, out.error = ORACLE_REFUSED, _first_line(exc)
            return False
        if spark_rows != want:
            out.status, out.error = ENGINES_DIFFER, _diff(spark_rows, want)
            return False
        try:
            with DAG(f"sqlgen_{self.ns}_{g.index}", schedule=None):
                materialized_view(
                    target=self.target(g), sql=out.sql, iceberg_conn_id=CONN, catalog_name="ct"
                )
            strategy, why = explain_view(out.sql, target=self.target(g))[:2]
        except QueryError as exc:
            out.status, out.error = PARSE_REFUSED, _first_line(exc)
            return False
        out.plan = strategy.removeprefix("strategy: ")
        out.plan_reason = why.removeprefix("why: ")
        return True

    def spark_rows(self, g: Generated) -> Counter[Any]:
        """Spark's own rows of the query over the inputs' heads (which hold the model)."""
        names = {k: f"{self.config.name}.{v}" for k, v in self.inputs.names().items()}
        return normalized([tuple(r) for r in self.spark.sql(g.sql(names)).collect()])

    def oracle(self, g: Generated, con: Any) -> Counter[Any]:
        duck_sql = sqlglot.transpile(self.outcomes[g.index].sql, read="spark", write="duckdb")[0]
        return normalized([tuple(r) for r in con.execute(duck_sql).fetchall()])

    def tick(self, g: Generated, time: int, busy: bool, con: Any) -> None:
        """One tick of the view, checked against DuckDB; a failure or difference recorded."""
        out = self.outcomes[g.index]
        step = len(out.strategies)
        try:
            report = self._write(g, time)
        except Exception as exc:
            out.status, out.failed_tick = TICK_FAILED, step
            out.error = _first_line(exc) + "\n" + _product_frames(exc)
            self.blame_spark(g, con)
            return
        out.record(report.extra, str(report.reason), busy)
        want = self.oracle(g, con)
        got = normalized(rows_of(self.inputs.catalog.load_table(self.target(g))))
        if got != want:
            out.status, out.failed_tick = WRONG, step
            out.error = f"strategy {out.strategies[-1]} ({out.reasons[-1]}): {_diff(got, want)}"
            self.blame_spark(g, con)

    def blame_spark(self, g: Generated, con: Any) -> None:
        """A failed or wrong tick is the product's unless Spark itself, run on the same
        inputs, fails the query or disagrees with DuckDB (then the generator's SQL is)."""
        out = self.outcomes[g.index]
        try:
            differ = self.spark_rows(g) != self.oracle(g, con)
        except Exception as exc:
            out.status, out.error = SPARK_REFUSED, f"at tick {out.failed_tick}: {_first_line(exc)}"
            return
        if differ:
            out.status = ENGINES_DIFFER

    def _write(self, g: Generated, time: int) -> Any:
        catalog = self.config.load()
        sql = self.outcomes[g.index].sql
        decision = mint_view_tick(catalog, self.target(g), sql, time)
        if decision.description is None:
            raise AssertionError(f"the mint refused the tick: {decision.reason}")
        report = run_write(self.spark, self.config, sql, decision.description, refresh=REFRESH)
        out = AppendOperator(task_id="append", report=report.to_json(), iceberg_conn_id=CONN)
        appended = out.execute({})
        if not appended.get("appended"):
            raise AssertionError(f"the append did not land: {appended}")
        return report

    def run(self) -> list[Outcome]:
        self.inputs.first_rows()
        changed = {t.name for t in TABLES}
        self.inputs.declare(1_000, changed)
        con = self.inputs.duckdb()
        live = [g for g in self.queries if self.accept(g, con)]
        for step in range(TICKS):
            time = 1_000 * (step + 1)
            if step:
                changed = self.inputs.change()
                self.inputs.declare(time, changed)
                con = self.inputs.duckdb()
            for g in live:
                self.tick(g, time, busy=bool(changed & g.tables), con=con)
            live = [g for g in live if self.outcomes[g.index].failed_tick is None]
        return list(self.outcomes.values())


def _product_frames(exc: BaseException, limit: int = 6) -> str:
    """Where in the product the exception came from: its last frames under the package."""
    frames = [
        f for f in traceback.extract_tb(exc.__traceback__) if "airflow_provider_ct" in f.filename
    ]
    return "".join(traceback.format_list(frames[-limit:]))


def _diff(got: Counter[Any], want: Counter[Any], limit: int = 6) -> str:
    extra = sorted((got - want).items(), key=repr)[:limit]
    missing = sorted((want - got).items(), key=repr)[:limit]
    return (
        f"{sum((got - want).values())} unexpected row(s) {extra}; "
        f"{sum((want - got).values())} missing {missing}"
    )


def test_generated_views_equal_duckdb_on_every_tick(
    spark: Any, spark_catalog_config: CatalogConfig
) -> None:
    started = _time.monotonic()
    outcomes: list[Outcome] = []
    for start in range(FIRST, FIRST + QUERIES, PER_NAMESPACE):
        count = min(PER_NAMESPACE, FIRST + QUERIES - start)
        outcomes += Views(spark, spark_catalog_config, start, count).run()
        print(f"sqlgen: {len(outcomes)} of {QUERIES} queries in {_time.monotonic() - started:.0f}s")
    summary = Summary(outcomes, _time.monotonic() - started)
    print("\n" + summary.text())
    summary.write(ARTIFACTS / f"sqlgen-{SEED}-{FIRST}-{QUERIES}x{TICKS}.json")
    bad = [o for o in outcomes if o.status in (WRONG, TICK_FAILED)]
    assert not bad, "\n".join(
        f"{o.status}: seed={o.seed} query={o.index} tick={o.failed_tick}: {o.error}\n{o.sql}"
        for o in bad
    )
