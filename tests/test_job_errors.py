"""A Spark job's error reaches Airflow as the same exception class, with the job's message."""

from __future__ import annotations

import json
import os
import signal
import threading
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from airflow_provider_ct.core.catalog import CatalogConfig
from airflow_provider_ct.core.keys import TableKeys
from airflow_provider_ct.core.tables import create_managed_table
from airflow_provider_ct.exceptions import (
    ConfigurationError,
    CTError,
    QueryError,
    SchemaMismatchError,
    SparkJobError,
    error_class,
)
from airflow_provider_ct.spark import job_main
from airflow_provider_ct.spark.job_errors import job_error, report_failure
from tests.conftest import SCHEMA
from tests.helpers import mint_view_tick, replace_contents
from tests.test_secrets import descendants

WHAT = "the write job for ns.view"


def _error_file(tmp_path: Path, payload: Any) -> Path:
    path = tmp_path / "error.json"
    path.write_text(json.dumps(payload))
    return path


def test_a_job_main_writes_its_error_and_exits_non_zero(tmp_path: Path) -> None:
    error = tmp_path / "error.json"
    code = job_main.main(
        [
            "--catalog",
            "{not json",
            "--description",
            "{}",
            "--job",
            '{"kind": "write", "args": {"sql": "SELECT 1"}}',
            "--report",
            str(tmp_path / "report.json"),
            "--error",
            str(error),
        ]
    )
    assert code == 1
    assert not (tmp_path / "report.json").exists()
    assert error.stat().st_mode & 0o777 == 0o600
    payload = json.loads(error.read_text())
    assert payload["type"] == "ConfigurationError"
    raised = job_error(error, WHAT)
    assert type(raised) is ConfigurationError
    assert str(raised) == payload["message"]
    assert str(raised).startswith("--catalog is not a catalog configuration")


def test_without_an_error_path_the_job_raises(tmp_path: Path) -> None:
    argv = ["--catalog", "{}", "--description", "{}", "--job", "{}", "--report", "r"]
    with pytest.raises(ConfigurationError, match="has no uri"):
        job_main.main(argv)


@pytest.mark.parametrize("name", ["SchemaMismatchError", "QueryError", "CommitStateUnknownError"])
def test_each_of_our_errors_comes_back_as_itself(tmp_path: Path, name: str) -> None:
    cls = error_class(name)
    assert cls is not None and cls.__name__ == name
    try:
        raise cls("the job's own words")
    except CTError as exc:
        report_failure(exc, str(tmp_path / "error.json"))
    raised = job_error(tmp_path / "error.json", WHAT)
    assert type(raised) is cls
    assert str(raised) == "the job's own words"


def test_a_bug_in_the_job_becomes_a_spark_job_error_naming_its_type(tmp_path: Path) -> None:
    try:
        _ = {}["missing"]
    except KeyError as exc:
        report_failure(exc, str(tmp_path / "error.json"))
    raised = job_error(tmp_path / "error.json", WHAT)
    assert type(raised) is SparkJobError
    assert str(raised) == f"{WHAT} failed with builtins.KeyError: 'missing'"


@pytest.mark.parametrize(
    "payload",
    [
        # A name outside our hierarchy, even if the module claims to be ours.
        {"type": "Exception", "module": "airflow_provider_ct.exceptions", "message": "m"},
        {"type": "CTError", "module": "somewhere.else", "message": "m"},
        {"type": "DevStackError", "module": "airflow_provider_ct.exceptions", "message": "m"},
    ],
)
def test_only_our_own_classes_are_instantiated(tmp_path: Path, payload: dict[str, str]) -> None:
    raised = job_error(_error_file(tmp_path, payload), WHAT)
    assert type(raised) is SparkJobError
    assert payload["type"] in str(raised)


def test_a_missing_or_broken_error_file_is_a_clear_spark_job_error(tmp_path: Path) -> None:
    missing = job_error(tmp_path / "error.json", WHAT)
    assert type(missing) is SparkJobError
    assert "failed without reporting an error" in str(missing)
    (tmp_path / "error.json").write_text('{"type": "QueryE')  # cut off mid-write
    broken = job_error(tmp_path / "error.json", WHAT)
    assert type(broken) is SparkJobError
    assert "error file is unreadable" in str(broken)


def test_the_reported_error_and_its_log_hide_secrets(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    try:
        raise ConfigurationError("cannot log in as ice with s3cr3t-pw (or s3cr3t%2Dpw)")
    except CTError as exc:
        report_failure(exc, str(tmp_path / "error.json"), ["s3cr3t-pw", "s3cr3t%2Dpw"])
    message = json.loads((tmp_path / "error.json").read_text())["message"]
    assert message == "cannot log in as ice with *** (or ***)"
    assert "ConfigurationError: cannot log in as ice with *** (or ***)" in caplog.text
    assert "s3cr3t" not in caplog.text


# -- through WriteOperator and spark-submit -------------------------------------------


def _view_inputs(config: CatalogConfig, target_schema: pa.Schema | None) -> Any:
    """An input ``errs.src`` sealed at 1000 (and, optionally, an existing target)."""
    catalog = config.load()
    src = create_managed_table(catalog, "errs.src", SCHEMA)
    replace_contents(src, 1000, pa.table({"k": [1, 2], "v": ["a", "b"]}, schema=SCHEMA))
    if target_schema is not None:
        create_managed_table(catalog, "errs.view", target_schema)
    return catalog


def _write(catalog: Any, sql: str, **settings: Any) -> dict[str, Any]:
    from airflow_provider_ct.operators.write import WriteOperator

    desc = mint_view_tick(catalog, "errs.view", sql, 1000).description
    assert desc is not None
    report: dict[str, Any] = WriteOperator(
        task_id="w",
        target="errs.view",
        sql=sql,
        description=desc.to_json(),
        driver_memory="1g",
        engine="spark-submit",
        target_settings=settings or None,
    ).execute({})
    return report


@pytest.mark.spark
@pytest.mark.slow
def test_a_schema_mismatch_in_the_job_raises_schema_mismatch_error(
    default_catalog: CatalogConfig,
) -> None:
    from airflow.sdk.exceptions import AirflowException

    # The table was made by an older query that had no column v.
    catalog = _view_inputs(default_catalog, pa.schema([("k", pa.int64())]))
    with pytest.raises(SchemaMismatchError) as err:
        _write(catalog, "SELECT k, v FROM errs.src", on_schema_change="fail")
    assert str(err.value) == (
        "the query's schema no longer matches table errs.view: query has new column v "
        '(string). on_schema_change="fail": the table was left untouched.'
    )
    assert isinstance(err.value.__cause__, AirflowException)  # what spark-submit said
    assert not isinstance(err.value, AirflowException)


def _kill_the_job_when_it_starts(script: str, stop: threading.Event) -> list[int]:
    """SIGKILL the job's Python process (a child of spark-submit's JVM) once it runs.

    Returns the list the killed pid is put in, so the test knows it happened.
    """
    killed: list[int] = []

    def watch() -> None:
        while not stop.is_set() and not killed:
            for pid in descendants(os.getpid()):
                try:
                    argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
                except OSError:
                    continue
                if any(a.endswith(script.encode()) for a in argv) and b"java" not in argv[0]:
                    os.kill(pid, signal.SIGKILL)
                    killed.append(pid)
                    return
            stop.wait(0.05)

    threading.Thread(target=watch, daemon=True).start()
    return killed


@pytest.mark.spark
@pytest.mark.slow
def test_a_job_killed_without_an_error_file_fails_clearly(default_catalog: CatalogConfig) -> None:
    catalog = _view_inputs(default_catalog, None)
    stop = threading.Event()
    killed = _kill_the_job_when_it_starts("job_main.py", stop)
    try:
        with pytest.raises(SparkJobError, match="failed without reporting an error") as err:
            _write(catalog, "SELECT k, v FROM errs.src")
    finally:
        stop.set()
    assert killed, "the job's Python process was never seen"
    assert str(err.value).startswith("the write job for errs.view failed")


KV = pa.schema([("key", pa.int32()), ("val", pa.int32())])
WIDE = pa.schema([("key", pa.int32()), ("val", pa.int32()), ("note", pa.string())])
#: ``*`` yields three columns, the task declares two: only Spark can tell, so the
#: job refuses (a QueryError naming the statement), not the parser.
STAR_TASK = """CREATE CONTINUAL TASK cnt (key INT, val INT) ON INPUT csrc AS (
    INSERT INTO cnt SELECT * FROM csrc;
)"""


@pytest.mark.spark
@pytest.mark.slow
def test_a_continual_job_error_keeps_its_type_and_message(default_catalog: CatalogConfig) -> None:
    from airflow_provider_ct.operators.continual import (
        ContinualMintOperator,
        ContinualWriteOperator,
    )

    catalog = default_catalog.load()
    src = create_managed_table(catalog, "errs.csrc", WIDE)
    replace_contents(src, 10, pa.table({"key": [1], "val": [2], "note": ["n"]}, schema=WIDE))
    # The output exists since T=5, so T=10 is an input time the statements run for.
    create_managed_table(catalog, "errs.cnt", KV, properties={TableKeys.AS_OF: "5"})
    task = {"definition": STAR_TASK, "namespace": "errs"}
    desc = ContinualMintOperator(task_id="m", time=10, **task).execute({})
    write = ContinualWriteOperator(
        task_id="w", description=desc, driver_memory="1g", engine="spark-submit", **task
    )
    with pytest.raises(CTError) as err:
        write.execute({})
    assert type(err.value) is QueryError
    assert str(err.value) == (
        "statement 1 (INSERT INTO cnt SELECT * FROM csrc): INSERT has more expressions than "
        "target columns (3 expression(s) for 2 target column(s): key, val)"
    )
