"""The catalog password never shows on a command line, in a log line, an XCom or a repr."""

from __future__ import annotations

import json
import os
import secrets
import threading
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pyarrow as pa
import pytest

from airflow_provider_ct.core.catalog import CatalogConfig
from airflow_provider_ct.core.tables import create_managed_table
from tests.conftest import SCHEMA
from tests.helpers import mint_view_tick, replace_contents
from tests.pgserver import PgServer

#: URL-special characters, so both the raw and the percent-encoded form are checked.
PASSWORD_CHARS = "p@ss:w/rd%"


def _secret() -> str:
    return f"{PASSWORD_CHARS}{secrets.token_hex(8)}"


def _forms(password: str) -> list[str]:
    """Every spelling of the password a leak could use."""
    return [password, quote(password, safe="")]


def _pg_catalog_with_password(server: PgServer, root: Path, password: str) -> CatalogConfig:
    """A fresh database owned by a fresh role whose password is ``password``."""
    import psycopg2

    role, database = f"r_{uuid.uuid4().hex[:10]}", f"sec_{uuid.uuid4().hex[:10]}"
    conn = psycopg2.connect(
        host="127.0.0.1",
        port=server.port,
        user=server.user,
        password=server.password,
        dbname=server.database,
    )
    conn.autocommit = True
    with conn.cursor() as cur:
        cur.execute(f"CREATE ROLE {role} LOGIN PASSWORD %s", (password,))
        cur.execute(f"CREATE DATABASE {database} OWNER {role}")
    conn.close()
    uri = (
        f"postgresql+psycopg2://{role}:{quote(password, safe='')}@127.0.0.1:{server.port}/"
        f"{database}"
    )
    return CatalogConfig(name="ct", uri=uri, warehouse=(root / "warehouse").as_uri())


def descendants(root: int) -> list[int]:
    """Every live process below ``root`` (read from /proc, no psutil)."""
    parents: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        parents[int(entry)] = int(stat.rsplit(")", 1)[1].split()[1])
    found, frontier = [], [root]
    while frontier:
        parent = frontier.pop()
        children = [pid for pid, ppid in parents.items() if ppid == parent]
        found.extend(children)
        frontier.extend(children)
    return found


@contextmanager
def watching_processes() -> Iterator[dict[int, tuple[str, str]]]:
    """Record the command line and environment of every process this test starts.

    Polled every 20 ms while the body runs: a JVM lives for seconds, so its
    command line is always seen.
    """
    seen: dict[int, tuple[str, str]] = {}
    stop = threading.Event()

    def poll() -> None:
        while not stop.is_set():
            for pid in descendants(os.getpid()):
                try:
                    cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ")
                    environ = Path(f"/proc/{pid}/environ").read_bytes().replace(b"\0", b"\n")
                except OSError:
                    continue
                seen[pid] = (cmdline.decode(errors="replace"), environ.decode(errors="replace"))
            stop.wait(0.02)

    thread = threading.Thread(target=poll, daemon=True)
    thread.start()
    try:
        yield seen
    finally:
        stop.set()
        thread.join()


def _write_operator(conn_id: str, desc: Any, sql: str) -> Any:
    from airflow_provider_ct.operators.write import WriteOperator

    return WriteOperator(
        task_id="w",
        target="sec.view",
        sql=sql,
        description=desc.to_json(),
        iceberg_conn_id=conn_id,
        driver_memory="1g",
        engine="spark-submit",
    )


@pytest.mark.spark
@pytest.mark.postgres
@pytest.mark.slow
def test_the_password_is_on_no_command_line_log_line_or_xcom_of_a_write_job(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    pg_server: PgServer,
    capfd: pytest.CaptureFixture[str],
    caplog: pytest.LogCaptureFixture,
) -> None:
    password = _secret()
    config = _pg_catalog_with_password(pg_server, tmp_path, password)
    conn_id = "ct_secret_cat"
    monkeypatch.setenv(
        f"AIRFLOW_CONN_{conn_id.upper()}",
        json.dumps(
            {
                "conn_type": "iceberg_catalog",
                "extra": {"uri": config.uri, "warehouse": config.warehouse},
            }
        ),
    )
    catalog = config.load()
    src = create_managed_table(catalog, "sec.src", SCHEMA)
    replace_contents(src, 1000, pa.table({"k": [1, 2], "v": ["a", None]}, schema=SCHEMA))
    sql = "SELECT k, v FROM sec.src"
    desc = mint_view_tick(catalog, "sec.view", sql, 1000).description
    caplog.set_level("DEBUG")

    with watching_processes() as seen:
        report = _write_operator(conn_id, desc, sql).execute({})

    assert report["status"] == "staged" and report["rows_to_insert"] == 2, report
    commands = [cmd for cmd, _ in seen.values()]
    # The poller saw the job's processes while they ran, so the checks below can fail.
    assert any("org.apache.spark.deploy.SparkSubmit" in c for c in commands), commands
    assert any("job_main.py" in c for c in commands), commands
    out, err = capfd.readouterr()
    logged = "\n".join([out, err, caplog.text])
    assert "correction for sec.view" in logged  # the job's own log lines reached ours
    # Inherited variables (this test's own connection) are the worker's, readable by
    # its user only; nothing the operator adds to a job's environment may hold it.
    inherited = {f"{k}={v}" for k, v in os.environ.items()}
    for form in _forms(password):
        for pid, (cmdline, environ) in seen.items():
            assert form not in cmdline, f"password on the command line of {pid}: {cmdline}"
            added = [v for v in environ.splitlines() if v not in inherited]
            assert not [v for v in added if form in v], f"password added to {pid}'s environment"
        assert form not in json.dumps(report)
        assert form not in logged


def _pg_connection(monkeypatch: pytest.MonkeyPatch, conn_id: str, password: str) -> None:
    """An Airflow connection to a PostgreSQL catalog, password in the URL (no server needed)."""
    uri = f"postgresql+psycopg2://ice:{quote(password, safe='')}@127.0.0.1:5999/lake"
    monkeypatch.setenv(
        f"AIRFLOW_CONN_{conn_id.upper()}",
        json.dumps(
            {
                "conn_type": "iceberg_catalog",
                "extra": {"uri": uri, "warehouse": "file:///tmp/wh", "s3.secret-access-key": "k"},
            }
        ),
    )


def test_catalog_config_repr_and_str_hide_the_password() -> None:
    password = _secret()
    config = CatalogConfig(
        uri=f"postgresql+psycopg2://ice:{quote(password, safe='')}@db:5432/lake",
        properties={"token": "tok-123456", "s3.endpoint": "http://minio:9000"},
    )
    shown = [repr(config), str(config), f"{config}", repr([config])]
    for text in shown:
        for form in [*_forms(password), "tok-123456"]:
            assert form not in text
        assert "postgresql+psycopg2://ice:***@db:5432/lake" in text
        assert "http://minio:9000" in text  # only secrets are hidden
    assert set(config.secrets()) == {*_forms(password), "tok-123456"}
    assert config.jdbc_credentials() == ("ice", password)  # still usable
    with pytest.raises(Exception, match=r"ice:\*\*\*@") as err:
        CatalogConfig(uri=f"mysql://ice:{quote(password, safe='')}@db/lake").dialect  # noqa: B018
    assert not any(form in str(err.value) for form in _forms(password))


def test_the_hook_masks_the_password_in_task_logs(monkeypatch: pytest.MonkeyPatch) -> None:
    from airflow.sdk._shared.secrets_masker import redact

    from airflow_provider_ct.hooks.iceberg import IcebergCatalogHook

    password = _secret()
    line = f"connecting with {password} or {quote(password, safe='')}"
    assert redact(line) == line  # not known to the masker yet
    _pg_connection(monkeypatch, "ct_masked_cat", password)
    config = IcebergCatalogHook("ct_masked_cat").get_config()
    assert redact(line) == "connecting with *** or ***"
    for form in _forms(password):
        assert form not in repr(config) and form not in str(config)


def test_spark_conf_leaves_the_password_to_the_job() -> None:
    from airflow_provider_ct.spark.conf import secret_spark_conf, spark_conf

    password = _secret()
    config = CatalogConfig(
        uri=f"postgresql+psycopg2://ice:{quote(password, safe='')}@db:5432/lake",
        warehouse="file:///tmp/wh",
    )
    conf = spark_conf(config)
    assert conf["spark.sql.catalog.ct.jdbc.user"] == "ice"
    assert not any(form in json.dumps(conf) for form in _forms(password))
    secret = {"spark.sql.catalog.ct.jdbc.password": password}
    assert secret_spark_conf(config) == secret
    assert spark_conf(config, include_secrets=True).items() >= secret.items()


def test_the_spark_submit_command_carries_no_password(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from airflow_provider_ct.core.description import BatchDescription
    from airflow_provider_ct.core.frontier import Frontier
    from airflow_provider_ct.hooks.iceberg import IcebergCatalogHook

    password = _secret()
    _pg_connection(monkeypatch, "ct_cmd_cat", password)
    hook = IcebergCatalogHook("ct_cmd_cat")
    desc = BatchDescription(
        target="sec.view",
        lower=Frontier.minimum(),
        upper=Frontier.sealing(1000),
        time=1000,
        base_snapshot_id=None,
        inputs={"sec.src": 1},
    )
    folder = tmp_path / "job"
    folder.mkdir(mode=0o700)
    operator = _write_operator("ct_cmd_cat", desc, "SELECT k, v FROM sec.src")
    from airflow_provider_ct.hooks.spark_job import APPLICATION

    job = operator.job_hook()
    submit = job.submit_hook(operator.job_spec(), desc, hook.get_config(), folder)
    command = submit._build_spark_submit_command(APPLICATION)

    assert "spark.sql.catalog.ct.jdbc.user=ice" in command  # the catalog is configured
    assert f"@{folder / 'catalog.json'}" in command
    for form in _forms(password):
        assert not [arg for arg in command if form in arg]
    # The job reads the password from a file only this user can open.
    catalog_file = folder / "catalog.json"
    assert catalog_file.stat().st_mode & 0o777 == 0o600
    assert CatalogConfig(**json.loads(catalog_file.read_text())).jdbc_credentials()[1] == password
