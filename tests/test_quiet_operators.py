"""Quiet ticks through the operators: no JVM for a quiet tick, Spark for anything else.

A quiet tick must not start Spark: every test runs its quiet ticks with the
Spark master pointed at a port nothing listens on and with ``subprocess.Popen``
replaced by a recorder that refuses to start anything, so any ``spark-submit``
(and with it any JVM) fails the tick and is on record. The positive control
(a tick that is not quiet) shows the recorder does see the submit.
"""

from __future__ import annotations

import subprocess
import time as _time
from collections.abc import Callable, Iterator
from typing import Any

import pyarrow as pa
import pytest

from airflow_provider_ct.core.catalog import CatalogConfig
from airflow_provider_ct.core.frontier import Frontier
from airflow_provider_ct.core.keys import SummaryKeys, TableKeys
from airflow_provider_ct.core.query import query_hash
from airflow_provider_ct.core.tables import create_managed_table
from airflow_provider_ct.core.timeline import Timeline
from airflow_provider_ct.exceptions import DescriptionError
from airflow_provider_ct.operators._common import NOT_QUIET_FIELD
from airflow_provider_ct.operators.append import AppendOperator, checked_report
from airflow_provider_ct.operators.continual import (
    ContinualAppendOperator,
    ContinualMintOperator,
    ContinualWriteOperator,
)
from airflow_provider_ct.operators.mint import MintOperator
from airflow_provider_ct.operators.write import WriteOperator
from airflow_provider_ct.spark.exchange import arg_text
from airflow_provider_ct.spark.jobs import JobSpec
from tests.conftest import SCHEMA
from tests.helpers import XComTI, advance, oracle, replace_contents, rows_of
from tests.test_quiet import SQL, TARGET, heads, land_view, seal, shop

#: A Spark master nothing listens on: a job submitted there cannot run.
DEAD_MASTER = "spark://127.0.0.1:9"


class SubmitRecorder:
    """Stands in for ``subprocess.Popen``: refuses to start Spark or Java, records everything.

    Other commands (libraries probe the platform with ``file`` or ``ldconfig``
    on first import) run as usual.
    """

    def __init__(self) -> None:
        self.commands: list[str] = []
        self._popen = subprocess.Popen

    @property
    def jvm_commands(self) -> list[str]:
        return [c for c in self.commands if _starts_a_jvm(c)]

    def __call__(self, args: Any, *rest: Any, **kwargs: Any) -> Any:
        command = " ".join(map(str, args)) if isinstance(args, list | tuple) else str(args)
        self.commands.append(command)
        if _starts_a_jvm(command):
            raise OSError(f"test: refusing to start Spark: {command:.200}")
        return self._popen(args, *rest, **kwargs)


def _starts_a_jvm(command: str) -> bool:
    return any(word in command for word in ("spark-submit", "spark-class", "java"))


@pytest.fixture
def no_process(monkeypatch: pytest.MonkeyPatch) -> Iterator[SubmitRecorder]:
    recorder = SubmitRecorder()
    monkeypatch.setattr(subprocess, "Popen", recorder)
    yield recorder


def timed(call: Callable[[], Any]) -> tuple[Any, float]:
    started = _time.perf_counter()
    value = call()
    return value, _time.perf_counter() - started


def view_write(desc: dict[str, Any], **kwargs: Any) -> WriteOperator:
    return WriteOperator(
        task_id="write",
        target=TARGET,
        sql=SQL,
        description=desc,
        driver_memory="1g",
        engine="spark-submit",
        **kwargs,
    )


def append(
    report: dict[str, Any], desc: dict[str, Any], task: dict[str, Any] | None = None
) -> dict[str, Any]:
    """Append a write report, checking its manifest answers the minted ``desc``.

    With ``task`` (a continual task's definition and namespace), the continual append.
    """
    operator = (
        AppendOperator(task_id="append", report=report, description_task_id="mint")
        if task is None
        else ContinualAppendOperator(
            task_id="append", report=report, description_task_id="mint", **task
        )
    )
    out: dict[str, Any] = operator.execute({"ti": XComTI({"mint": desc})})
    return out


def test_a_quiet_view_tick_starts_no_jvm_and_the_table_still_equals_the_oracle(
    default_catalog: CatalogConfig, no_process: SubmitRecorder
) -> None:
    catalog = default_catalog.load()
    written = heads(shop(catalog))  # the test's own record of its inputs
    seal(catalog, 1000)
    land_view(catalog, TARGET, SQL, 1000, written)  # the last batch (DuckDB standing in for Spark)
    before = rows_of(catalog.load_table(TARGET))
    seal(catalog, 2000)
    desc = MintOperator(task_id="mint", target=TARGET, sql=SQL, time=2000).execute({})
    assert desc["inputs"] == written  # unchanged inputs: the same snapshots as at 1000
    report, seconds = timed(lambda: view_write(desc, spark_master=DEAD_MASTER).execute({}))
    assert no_process.jvm_commands == []
    assert seconds < 10
    assert report["status"] == "staged" and report["quiet"] is True
    assert report["reason"].startswith("no input changed")
    assert (report["rows_to_insert"], report["rows_to_delete"], report["staged_bytes"]) == (0, 0, 0)
    assert checked_report(report).to_json() == report
    out = append(report, desc)
    assert out["appended"] and out["quiet"] is True
    table = catalog.load_table(TARGET)
    timeline = Timeline.of(table)
    assert timeline.upper == Frontier.sealing(2000)
    assert rows_of(table) == oracle(catalog, SQL, written) == before
    # Time travel to the quiet tick's time gives the previous contents.
    assert rows_of(table, timeline.snapshot_at(2000)) == rows_of(table, timeline.snapshot_at(1999))
    assert timeline.entries[-1].time == 2000
    assert timeline.entries[-1].summary[SummaryKeys.QUERY_HASH] == query_hash(SQL)

    # Positive control: the next tick's input changed, so it submits Spark,
    # which the recorder refuses (and records).
    replace_contents(catalog.load_table("q.b"), 2500, pa.table({"k": [1], "v": ["z"]}, SCHEMA))
    seal(catalog, 3000)
    desc = MintOperator(task_id="mint", target=TARGET, sql=SQL, time=3000).execute({})
    with pytest.raises(OSError, match="refusing to start Spark"):
        view_write(desc, spark_master=DEAD_MASTER).execute({})
    assert len(no_process.jvm_commands) == 1 and "spark-submit" in no_process.jvm_commands[0]
    # ... and so does a quiet tick whose operator has quiet ticks turned off.
    with pytest.raises(OSError, match="refusing to start Spark"):
        view_write(desc, spark_master=DEAD_MASTER, quiet_ticks=False).execute({})


def test_a_write_report_with_a_bad_quiet_field_is_refused() -> None:
    report = {"status": "staged", "description_id": "d", "target": "a.b", "manifest": "m"}
    assert checked_report({**report, "quiet": False}).quiet is False
    with pytest.raises(DescriptionError, match="'quiet' must be a bool"):
        checked_report({**report, "quiet": "yes"})


UPSERT = """
CREATE CONTINUAL TASK upsert (key INT, val INT) ON INPUT append_only AS (
    DELETE FROM upsert WHERE key IN (SELECT key FROM append_only);
    INSERT INTO upsert SELECT key, max(val) FROM append_only GROUP BY key;
)
"""
KV = pa.schema([("key", pa.int32()), ("val", pa.int32())])


def test_a_quiet_continual_tick_starts_no_jvm_and_only_advances_the_upper(
    default_catalog: CatalogConfig, no_process: SubmitRecorder
) -> None:
    catalog = default_catalog.load()
    src = create_managed_table(catalog, "cq.append_only", KV)
    replace_contents(src, 3, pa.table({"key": [1], "val": [7]}, KV))
    # The output's first tick was at 5 (its as-of, its snapshot sealed); nothing reached
    # the input since.
    output = create_managed_table(catalog, "cq.upsert", KV, properties={TableKeys.AS_OF: "5"})
    advance(output, 5)
    advance(src, 10)
    task = {"definition": UPSERT, "namespace": "cq"}
    desc = ContinualMintOperator(task_id="mint", time=10, **task).execute({})
    write = ContinualWriteOperator(
        task_id="write",
        description=desc,
        spark_master=DEAD_MASTER,
        engine="spark-submit",
        **task,
    )
    report = write.execute({})
    assert no_process.jvm_commands == []
    assert report["quiet"] is True and report["reason"].startswith("no input changed")
    out = append(report, desc, task)
    assert out["appended"] and out["quiet"] is True
    output = catalog.load_table("cq.upsert")
    timeline = Timeline.of(output)
    assert timeline.upper == Frontier.sealing(10)
    assert timeline.data_times() == []  # as its job does: the upper moves, no time is written
    assert rows_of(output) == {}
    # Positive control: a new input time makes the next tick submit Spark.
    replace_contents(src, 15, pa.table({"key": [1, 2], "val": [7, 8]}, KV))
    advance(src, 20)
    desc = ContinualMintOperator(task_id="mint", time=20, **task).execute({})
    with pytest.raises(OSError, match="refusing to start Spark"):
        ContinualWriteOperator(
            task_id="write",
            description=desc,
            spark_master=DEAD_MASTER,
            engine="spark-submit",
            **task,
        ).execute({})
    assert len(no_process.jvm_commands) == 1 and "job_main.py" in no_process.jvm_commands[0]
    words = no_process.jvm_commands[0].split()
    spec = JobSpec.from_json(arg_text(words[words.index("--job") + 1]))
    assert spec.kind == "continual" and "upsert" in spec.to_text()


# -- with Spark: a busy tick, a quiet one, a drifted one --------------------------------------
@pytest.mark.spark
@pytest.mark.slow
def test_busy_quiet_and_drifted_ticks_through_the_operators(
    default_catalog: CatalogConfig, monkeypatch: pytest.MonkeyPatch
) -> None:
    catalog = default_catalog.load()
    written = heads(shop(catalog))  # the test's own record of its inputs
    seal(catalog, 1000)
    # A busy tick: Spark computes the first contents.
    desc1 = MintOperator(task_id="mint", target=TARGET, sql=SQL, time=1000).execute({})
    assert desc1["inputs"] == written
    busy, busy_s = timed(lambda: view_write(desc1).execute({}))
    assert busy["status"] == "staged" and busy["quiet"] is False and busy["rows_to_insert"] == 3
    assert append(busy, desc1)["appended"]
    table = catalog.load_table(TARGET)
    first = rows_of(table)
    assert first == oracle(catalog, SQL, written)

    # A quiet tick: no input changed; nothing may start a process.
    seal(catalog, 2000)
    desc2 = MintOperator(task_id="mint", target=TARGET, sql=SQL, time=2000).execute({})
    assert desc2["inputs"] == written  # no input changed since the test wrote them
    recorder = SubmitRecorder()
    with monkeypatch.context() as patch:
        patch.setattr(subprocess, "Popen", recorder)
        quiet, quiet_s = timed(lambda: view_write(desc2, spark_master=DEAD_MASTER).execute({}))
    assert recorder.jvm_commands == [] and quiet["quiet"] is True
    assert append(quiet, desc2)["appended"]
    table = catalog.load_table(TARGET)
    timeline = Timeline.of(table)
    assert timeline.upper == Frontier.sealing(2000)
    assert rows_of(table) == oracle(catalog, SQL, written) == first
    assert rows_of(table, timeline.snapshot_at(2000)) == first

    # Drift: a foreign append to the target. The next tick is not quiet, runs
    # Spark and corrects exactly.
    table.append(pa.table({"k": [99], "v": ["ghost"]}, SCHEMA))
    seal(catalog, 3000)
    desc3 = MintOperator(task_id="mint", target=TARGET, sql=SQL, time=3000).execute({})
    assert desc3["inputs"] == written  # the drift is in the target, not the inputs
    fixed, fixed_s = timed(lambda: view_write(desc3).execute({}))
    assert fixed["quiet"] is False and (fixed["rows_to_insert"], fixed["rows_to_delete"]) == (0, 1)
    assert append(fixed, desc3)["appended"]
    table = catalog.load_table(TARGET)
    assert rows_of(table) == oracle(catalog, SQL, written) == first
    # The corrected batch carries the hash again: the next unchanged tick is quiet.
    seal(catalog, 4000)
    desc4 = MintOperator(task_id="mint", target=TARGET, sql=SQL, time=4000).execute({})
    with monkeypatch.context() as patch:
        patch.setattr(subprocess, "Popen", SubmitRecorder())
        assert view_write(desc4, spark_master=DEAD_MASTER).execute({})["quiet"] is True
    print(
        f"\nwrite task seconds: busy (Spark) {busy_s:.2f}, quiet {quiet_s:.3f}, "
        f"drift correction (Spark) {fixed_s:.2f}"
    )
    assert quiet_s < busy_s / 5


def test_a_write_whose_mint_found_the_tick_busy_does_not_ask_again(
    default_catalog: CatalogConfig, no_process: SubmitRecorder, caplog: pytest.LogCaptureFixture
) -> None:
    """The mint asks the quiet rule before the write (``quiet_ticks``); when the tick
    is not quiet it says so in its XCom and the write starts its job at once."""
    from datetime import datetime

    from airflow.sdk import DAG

    catalog = default_catalog.load()
    written = heads(shop(catalog))
    seal(catalog, 1000)
    land_view(catalog, TARGET, SQL, 1000, written)
    replace_contents(catalog.load_table("q.b"), 1500, pa.table({"k": [1], "v": ["z"]}, SCHEMA))
    seal(catalog, 2000)
    with DAG("busy_mint", schedule=None, start_date=datetime(2026, 1, 1)):
        mint = MintOperator(task_id="mint", target=TARGET, sql=SQL, time=2000, quiet_ticks=True)
        mint >> view_write({}, spark_master=DEAD_MASTER)
    busy = mint.execute({})
    assert busy[NOT_QUIET_FIELD] is True and busy["inputs"] != written
    # The flag is what the write goes by: over unchanged inputs (a quiet tick
    # for the rule) it still starts Spark, which the recorder refuses.
    seal(catalog, 3000)
    quiet = MintOperator(task_id="mint", target=TARGET, sql=SQL, time=3000).execute({})
    assert NOT_QUIET_FIELD not in quiet
    with caplog.at_level("INFO"), pytest.raises(OSError, match="refusing to start Spark"):
        view_write({**quiet, NOT_QUIET_FIELD: True}, spark_master=DEAD_MASTER).execute({})
    assert "its mint asked the quiet rule" in caplog.text
    assert len(no_process.jvm_commands) == 1
