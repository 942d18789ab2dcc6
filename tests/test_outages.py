"""The bounds every client gets, and how an outage is told from other failures (no JVM, no server).

The real outages (a store killed and frozen under Spark jobs, mints and
appends) are in ``tests/test_objectstore_outages.py``; here the settings'
precedence, their translation for each client, and the recognition of the
errors those clients raise, from error texts of the kinds seen there.
"""

from __future__ import annotations

import logging
import time

import pytest
import requests

from airflow_provider_ct.core import outages
from airflow_provider_ct.core.catalog import CatalogConfig
from airflow_provider_ct.core.outages import Bounds, heartbeat, unavailable
from airflow_provider_ct.exceptions import (
    CatalogUnavailableError,
    CommitStateUnknownError,
    ConfigurationError,
    ServiceUnavailableError,
    StagingError,
    StoreUnavailableError,
    error_class,
)
from airflow_provider_ct.spark.conf import spark_conf
from airflow_provider_ct.spark.job_errors import error_from_payload, failure_payload

S3 = "http://127.0.0.1:9333"
REST = "http://127.0.0.1:8181"


def _rest(**props: str) -> CatalogConfig:
    return CatalogConfig(
        name="ct",
        kind="rest",
        uri=REST,
        warehouse="s3://lake",
        properties={"s3.endpoint": S3, "credential": "id:s3cret-value", **props},
    )


@pytest.fixture(autouse=True)
def _no_bound_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("CT_STORE_TIMEOUT_S", "CT_STORE_RETRIES", "CT_CATALOG_TIMEOUT_S"):
        monkeypatch.delenv(name, raising=False)


def test_the_extra_wins_over_the_environment_which_wins_over_the_defaults(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    assert Bounds.of({}) == Bounds(store_timeout_s=10.0, store_retries=1, catalog_timeout_s=10.0)
    monkeypatch.setenv("CT_STORE_TIMEOUT_S", "4.5")
    monkeypatch.setenv("CT_STORE_RETRIES", "0")
    assert Bounds.of({}) == Bounds(4.5, 0, 10.0)
    extra = {"ct.store-timeout-s": "7", "ct.catalog-timeout-s": "2"}
    assert Bounds.of(extra) == Bounds(7.0, 0, 2.0)
    assert Bounds(10.0, 1, 10.0).store_worst_case_s() == 21.0


@pytest.mark.parametrize(
    ("name", "value"),
    [("CT_STORE_TIMEOUT_S", "0"), ("CT_STORE_TIMEOUT_S", "soon"), ("CT_STORE_RETRIES", "-1")],
)
def test_a_bad_bound_is_refused_naming_it(
    monkeypatch: pytest.MonkeyPatch, name: str, value: str
) -> None:
    monkeypatch.setenv(name, value)
    with pytest.raises(ConfigurationError, match=f"{name} must be"):
        Bounds.of({})


def test_spark_gets_the_bounds_for_s3a_and_the_rest_client() -> None:
    conf = spark_conf(_rest(), include_jars=False)
    assert conf["spark.hadoop.fs.s3a.connection.timeout"] == "10000"
    assert conf["spark.hadoop.fs.s3a.connection.establish.timeout"] == "10000"
    assert conf["spark.hadoop.fs.s3a.attempts.maximum"] == "0"
    assert conf["spark.hadoop.fs.s3a.retry.limit"] == "1"
    assert conf["spark.sql.catalog.ct.rest.client.socket-timeout-ms"] == "10000"
    assert conf["spark.sql.catalog.ct.rest.client.connection-timeout-ms"] == "10000"
    # The connection's own setting wins; a Spark conf given by the user wins over all.
    own = spark_conf(
        _rest(**{"rest.client.socket-timeout-ms": "99000", "ct.store-timeout-s": "2"}),
        include_jars=False,
        extra={"spark.hadoop.fs.s3a.retry.limit": "5"},
    )
    assert own["spark.sql.catalog.ct.rest.client.socket-timeout-ms"] == "99000"
    assert own["spark.hadoop.fs.s3a.connection.timeout"] == "2000"
    assert own["spark.hadoop.fs.s3a.retry.limit"] == "5"


def test_a_postgres_catalog_gets_jdbc_and_connect_timeouts() -> None:
    config = CatalogConfig(uri="postgresql+psycopg2://u:pw@db:5432/cat", warehouse="file:///w")
    conf = spark_conf(config, include_jars=False)
    assert conf["spark.sql.catalog.ct.jdbc.connectTimeout"] == "10"
    assert conf["spark.sql.catalog.ct.jdbc.socketTimeout"] == "20"
    props = config.bounded_properties()
    assert props["uri"].endswith("/cat?connect_timeout=10")
    assert props["s3.request-timeout"] == "10"
    rest = _rest(**{"s3.request-timeout": "30"}).bounded_properties()
    assert rest["py-catalog-impl"].endswith("rest_session.BoundedRestCatalog")
    assert "type" not in rest and rest["s3.request-timeout"] == "30"


# -- recognizing an outage ------------------------------------------------------------
JAVA_S3A = (
    "py4j.protocol.Py4JJavaError: An error occurred while calling o123.save.\n"
    "org.apache.hadoop.fs.s3a.AWSClientIOException: getFileStatus on "
    "s3a://lake/ns/t/data/x.parquet: com.amazonaws.SdkClientException: Unable to execute "
    "HTTP request: Connect to 127.0.0.1:9333 [/127.0.0.1] failed: Connection refused"
)
JAVA_REST = (
    "py4j.protocol.Py4JJavaError: An error occurred while calling o45.sql.\n"
    "org.apache.iceberg.exceptions.RESTException: Error occurred while processing GET request\n"
    "Caused by: java.net.SocketTimeoutException: Read timed out"
)
PYARROW = (
    "When getting information for key 'ns/t/data/a.parquet' in bucket 'lake': AWS Error "
    "NETWORK_CONNECTION during HeadObject operation: curlCode: 28, Timeout was reached"
)


def test_a_store_outage_in_a_java_trace_names_the_store_and_the_operation() -> None:
    typed = unavailable(RuntimeError(JAVA_S3A), _rest(), "the write job for ns.v")
    assert isinstance(typed, StoreUnavailableError)
    assert typed.endpoint == S3 and typed.operation.startswith("getFileStatus on s3a://lake/")
    assert str(typed).startswith(f"the object store at {S3} did not answer during getFileStatus")
    assert "2 attempts of at most 10 s each" in str(typed)


def test_a_catalog_outage_in_a_java_trace_names_the_rest_catalog() -> None:
    typed = unavailable(RuntimeError(JAVA_REST), _rest(), "the write job for ns.v")
    assert isinstance(typed, CatalogUnavailableError)
    assert typed.endpoint == REST and typed.operation == "GET"
    assert f"the REST catalog 'ct' at {REST} did not answer during GET" in str(typed)


def test_pyarrow_and_requests_errors_are_recognized_and_secrets_scrubbed() -> None:
    store = unavailable(OSError(PYARROW), _rest(), "staging")
    assert isinstance(store, StoreUnavailableError) and store.operation == "HeadObject"
    timeout = requests.exceptions.ReadTimeout(
        "HTTPConnectionPool(host='127.0.0.1', port=8181): Read timed out. id:s3cret-value"
    )
    catalog = unavailable(timeout, _rest(), "loading table 'ns.t'")
    assert isinstance(catalog, CatalogUnavailableError)
    assert catalog.operation == "loading table 'ns.t'" and "s3cret-value" not in str(catalog)
    database = OSError(
        "(psycopg2.OperationalError) server closed the connection unexpectedly\n\tThis "
        "probably means the server terminated abnormally before or while processing the request."
    )
    pg = CatalogConfig(uri="postgresql+psycopg2://u:pw@db:5432/cat", warehouse="file:///w")
    lost = unavailable(database, pg, "loading table 'ns.t'")
    assert isinstance(lost, CatalogUnavailableError) and lost.operation == "loading table 'ns.t'"
    assert "JDBC catalog 'ct' at postgresql+psycopg2://u:***@db:5432/cat" in str(lost)
    wrapped = StagingError(f"cannot write the staged-batch manifest s3://lake/m.json: {PYARROW}")
    assert isinstance(unavailable(wrapped, _rest(), "staging"), StoreUnavailableError)


def test_a_connection_dropped_mid_request_names_the_catalog_from_its_request() -> None:
    """A pooled connection the killed server dropped: the error itself names no host.

    Failed before issue 59 (the text was ``('Connection aborted.', RemoteDisconnected(...))``
    alone, and the task saw a ``SparkJobError``).
    """
    from http.client import RemoteDisconnected

    from urllib3.exceptions import ProtocolError

    request = requests.Request("GET", f"{REST}/v1/namespaces/ns/tables/events").prepare()
    dropped = ProtocolError(
        "Connection aborted.", RemoteDisconnected("Remote end closed connection without response")
    )
    exc = requests.exceptions.ConnectionError(dropped, request=request)
    typed = unavailable(exc, _rest(), "the write job for ns.v")
    assert isinstance(typed, CatalogUnavailableError), typed
    assert typed.endpoint == REST and typed.operation.startswith("GET ")
    assert "/v1/namespaces/ns/tables/events" in typed.operation
    assert f"at {REST} did not answer during GET" in str(typed)


@pytest.mark.parametrize(
    "exc",
    [
        ValueError("Cannot parse column type"),
        OSError("[Errno 28] No space left on device"),
        CommitStateUnknownError(f"the catalog did not answer: {JAVA_REST}"),
        requests.exceptions.HTTPError("403 Client Error: Forbidden for url: " + REST),
    ],
    ids=["not-io", "disk-full", "commit-unknown-kept", "refused-not-down"],
)
def test_other_failures_are_not_called_outages(exc: BaseException) -> None:
    assert unavailable(exc, _rest(), "the write job") is None


def test_the_typed_error_crosses_a_job_boundary_as_itself() -> None:
    typed = unavailable(RuntimeError(JAVA_S3A), _rest(), "the job")
    assert typed is not None
    back = error_from_payload(failure_payload(typed), "the write job for ns.v")
    assert type(back) is StoreUnavailableError and str(back) == str(typed)
    assert error_class("CatalogUnavailableError") is CatalogUnavailableError
    assert issubclass(StoreUnavailableError, ServiceUnavailableError)
    assert not issubclass(ServiceUnavailableError, ConfigurationError)


def test_the_heartbeat_says_what_it_waits_for(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger=outages.__name__)
    with heartbeat("the write job for ns.v", _rest(), every=0.1):
        time.sleep(0.35)
    lines = [r.getMessage() for r in caplog.records if "still waiting" in r.getMessage()]
    assert len(lines) >= 2
    assert lines[0].startswith("still waiting for the write job for ns.v: ")
    assert f"the REST catalog at {REST} and the object store at {S3}" in lines[0]
