"""Outages of the object store and the catalog: bounded waits, and errors that say so.

Every client the product drives gets a bound from here, so an outage fails
the task within about a minute instead of stalling it on a library's
defaults (Hadoop's S3A retries for minutes per call and waits 200 s for a
frozen server; PyIceberg's REST session has no timeout at all):

* the object store: S3A (Spark), pyarrow's S3 filesystem (staging,
  manifests, the sweep) and PyIceberg's FileIO wait at most
  :func:`Bounds.store_timeout_s` to connect and for each answer, and retry
  a failed request :func:`Bounds.store_retries` times (the AWS SDK's own
  retries are off, so they do not multiply);
* the catalog: the REST client on both sides (PyIceberg's session through
  :mod:`.rest_session`, Iceberg's Java ``HTTPClient``) and the JDBC
  catalog's PostgreSQL connections wait at most ``catalog_timeout_s``.

The bounds come from the catalog's connection extra (``ct.store-timeout-s``,
``ct.store-retries``, ``ct.catalog-timeout-s``), else from the environment
(``CT_STORE_TIMEOUT_S``, ``CT_STORE_RETRIES``, ``CT_CATALOG_TIMEOUT_S``,
:mod:`.settings`), else the defaults; a library's own setting given in the
extra or the Spark conf (``s3.request-timeout``, ``fs.s3a.*``,
``rest.client.*``) wins over them.

:func:`unavailable` turns what a client raised when its bound ran out
(a Python or a Java exception, the latter as text through Py4J) into a
:class:`~airflow_provider_ct.exceptions.StoreUnavailableError` or
:class:`~airflow_provider_ct.exceptions.CatalogUnavailableError` naming
the service, its endpoint and the operation.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import threading
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from airflow_provider_ct.core import settings
from airflow_provider_ct.exceptions import (
    CatalogUnavailableError,
    CTError,
    ServiceUnavailableError,
    StoreUnavailableError,
)

if TYPE_CHECKING:
    from airflow_provider_ct.core.catalog import CatalogConfig

log = logging.getLogger(__name__)

#: Connection-extra keys (catalog properties) of the bounds.
STORE_TIMEOUT_KEY = "ct.store-timeout-s"
STORE_RETRIES_KEY = "ct.store-retries"
CATALOG_TIMEOUT_KEY = "ct.catalog-timeout-s"
#: PyIceberg's (and :mod:`.storage`'s) FileIO timeout properties, in seconds.
S3_CONNECT_TIMEOUT = "s3.connect-timeout"
S3_REQUEST_TIMEOUT = "s3.request-timeout"
#: Iceberg's Java REST client settings (milliseconds; a retry count).
REST_CONNECT_TIMEOUT_MS = "rest.client.connection-timeout-ms"
REST_SOCKET_TIMEOUT_MS = "rest.client.socket-timeout-ms"
REST_MAX_RETRIES = "rest.client.max-retries"
#: How often a task waiting on a job logs that it still waits (seconds).
HEARTBEAT_S = 30.0


@dataclass(frozen=True)
class Bounds:
    """How long the product's clients wait on the store and the catalog."""

    store_timeout_s: float
    store_retries: int
    catalog_timeout_s: float

    @classmethod
    def of(cls, props: Mapping[str, str] | None = None) -> Bounds:
        """The bounds for a catalog's properties (its extra), else the environment's."""
        props = props or {}
        from_extra = {
            env: str(props[key]).strip()
            for env, key in (
                (settings.STORE_TIMEOUT_ENV, STORE_TIMEOUT_KEY),
                (settings.STORE_RETRIES_ENV, STORE_RETRIES_KEY),
                (settings.CATALOG_TIMEOUT_ENV, CATALOG_TIMEOUT_KEY),
            )
            if str(props.get(key) or "").strip()
        }
        merged = {**os.environ, **from_extra}  # the connection's extra wins
        return cls(
            store_timeout_s=settings.store_timeout_s(merged),
            store_retries=settings.store_retries(merged),
            catalog_timeout_s=settings.catalog_timeout_s(merged),
        )

    def store_worst_case_s(self) -> float:
        """The longest one store call may wait before it fails (every attempt timing out)."""
        return (self.store_retries + 1) * self.store_timeout_s + self.store_retries

    # -- what each client is given ----------------------------------------------------
    def file_io(self, props: Mapping[str, str]) -> dict[str, str]:
        """PyIceberg FileIO / pyarrow S3 timeouts ``props`` does not set itself."""
        wanted = {
            S3_CONNECT_TIMEOUT: self.store_timeout_s,
            S3_REQUEST_TIMEOUT: self.store_timeout_s,
        }
        return {k: _seconds(v) for k, v in wanted.items() if not props.get(k)}

    def s3a(self) -> dict[str, str]:
        """Hadoop S3A settings (without ``spark.hadoop.``): timeouts and retries.

        S3A retries a failed call itself (``retry.limit``, backing off from
        ``retry.interval``); the AWS SDK inside it would retry each of those
        attempts again (``attempts.maximum``, 20 in Hadoop 3.3), which is
        what multiplied a dead store into minutes: it is set to 0.
        """
        ms = str(int(self.store_timeout_s * 1000))
        retries = str(self.store_retries)
        return {
            "fs.s3a.connection.establish.timeout": ms,
            "fs.s3a.connection.timeout": ms,
            "fs.s3a.attempts.maximum": "0",
            "fs.s3a.retry.limit": retries,
            "fs.s3a.retry.interval": "500ms",
            "fs.s3a.retry.throttle.limit": retries,
            "fs.s3a.retry.throttle.interval": "500ms",
        }

    def rest_client(self, props: Mapping[str, str]) -> dict[str, str]:
        """Iceberg Java REST client settings ``props`` does not set itself."""
        ms = str(int(self.catalog_timeout_s * 1000))
        wanted = {
            REST_CONNECT_TIMEOUT_MS: ms,
            REST_SOCKET_TIMEOUT_MS: ms,
            REST_MAX_RETRIES: str(self.store_retries),
        }
        return {k: v for k, v in wanted.items() if not props.get(k)}

    def postgres_jdbc(self) -> dict[str, str]:
        """PostgreSQL JDBC driver timeouts (seconds), as ``jdbc.*`` catalog properties."""
        seconds = str(max(1, round(self.catalog_timeout_s)))
        return {
            "jdbc.connectTimeout": seconds,
            "jdbc.loginTimeout": seconds,
            # One query of the catalog (a commit's compare-and-swap) is small.
            "jdbc.socketTimeout": str(max(1, round(self.catalog_timeout_s * 2))),
        }


def _seconds(value: float) -> str:
    return f"{value:g}"


# -- recognizing an outage ---------------------------------------------------------------
#: What a client says when a service did not answer (Python, pyarrow/curl, Java).
_UNREACHABLE = re.compile(
    r"Connection refused|ConnectException|Connect(ion)? timed out|SocketTimeoutException|"
    r"ConnectTimeout|Read timed out|timed out|Unable to execute HTTP request|"
    r"NETWORK_CONNECTION|Couldn't connect to server|Timeout was reached|Connection reset|"
    r"NoHttpResponseException|failed to respond|RemoteDisconnected|Connection aborted|"
    r"Max retries exceeded|Broken pipe|could not connect to server|Connection to .* refused|"
    r"server closed the connection unexpectedly|HttpHostConnectException|"
    r"ConnectionPool|curlCode: (7|28|52|56)",
    re.IGNORECASE,
)
#: Traces of the store's clients (S3A, the AWS SDKs, pyarrow's S3).
_STORE = re.compile(
    r"org\.apache\.hadoop\.fs\.s3a|com\.amazonaws|software\.amazon\.awssdk|AWS Error|"
    r"S3AFileSystem|s3a?://|in bucket|curlCode",
)
#: Traces of the catalog's clients (Iceberg REST, PyIceberg's session, JDBC, SQLAlchemy).
_CATALOG = re.compile(
    r"org\.apache\.iceberg\.rest|RESTException|org\.apache\.iceberg\.jdbc|PSQLException|"
    r"psycopg2|sqlalchemy|/v1/(config|oauth|namespaces|[^ ]*/namespaces)|requests\.exceptions",
)
_POOL_HOST = re.compile(r"host='([^']+)', port=(\d+)")
_S3A_OPERATION = re.compile(r"\b(\w+) on (s3a?://[^\s:]+)")
_AWS_OPERATION = re.compile(r"during (\w+) operation")
_REST_OPERATION = re.compile(
    r"processing (GET|POST|PUT|DELETE|HEAD) request|(GET|POST|PUT|DELETE|HEAD) (\S*/v1/\S+)"
)


def error_text(exc: BaseException) -> str:
    """``exc`` and everything it was raised from, as text (a Java trace via Py4J included)."""
    parts: list[str] = []
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        parts.append(f"{type(current).__module__}.{type(current).__name__}: {current}")
        request = _request_line(current)
        if request:
            parts.append(request)
        current = current.__cause__ or current.__context__
    return "\n".join(parts)


def _request_line(exc: BaseException) -> str | None:
    """The HTTP request an exception of ``requests`` was raised for (``GET http://h:p/v1/...``).

    A connection the server dropped while a pooled one was reused says only
    ``('Connection aborted.', RemoteDisconnected(...))``: no host, no path.
    The request it carries names both, so the outage names its service,
    endpoint and operation like every other.
    """
    request = getattr(exc, "request", None)
    url = getattr(request, "url", None)
    if not isinstance(url, str) or not url:
        return None
    method = getattr(request, "method", None) or "GET"
    return f"while sending {method} {url}"


def _hostport(uri: str) -> str | None:
    parts = urlsplit(uri if "://" in uri else f"http://{uri}")
    if not parts.hostname:
        return None
    return f"{parts.hostname}:{parts.port}" if parts.port else parts.hostname


def store_endpoint(config: CatalogConfig) -> str:
    """The object store's endpoint as a message names it."""
    endpoint = config.properties.get("s3.endpoint")
    return endpoint or f"the default S3 endpoint (warehouse {config.warehouse})"


def catalog_endpoint(config: CatalogConfig) -> str:
    return config.redacted_uri()


def which_service(text: str, config: CatalogConfig) -> str | None:
    """``store``, ``catalog`` or None: which service ``text`` (an error) says did not answer."""
    if not _UNREACHABLE.search(text):
        return None
    text = _POOL_HOST.sub(r"\1:\2", text)  # urllib3 spells host and port apart
    store_at = _hostport(config.properties.get("s3.endpoint", ""))
    catalog_at = _hostport(config.uri) if config.kind == "rest" else None
    mentions_store = bool(store_at and store_at in text)
    mentions_catalog = bool(catalog_at and catalog_at in text)
    if mentions_store != mentions_catalog:
        return "store" if mentions_store else "catalog"
    if _CATALOG.search(text):
        return "catalog"
    if _STORE.search(text):
        return "store"
    return None


def _operation(text: str, fallback: str) -> str:
    found = _S3A_OPERATION.search(text)
    if found:
        return found.group(0)  # "getFileStatus on s3a://bucket/key"
    for pattern in (_AWS_OPERATION, _REST_OPERATION):
        found = pattern.search(text)
        if found:
            return " ".join(g for g in found.groups() if g)
    return fallback


def _detail(text: str) -> str:
    """The most telling line of an error: the first that says the service did not answer."""
    for line in text.splitlines():
        if _UNREACHABLE.search(line):
            return line.strip()[:300]
    return text.splitlines()[0][:300] if text else ""


#: Our errors that may only wrap an outage (a manifest the store did not take,
#: a job whose error file the store did not return).
_WRAPPERS = ("ConfigurationError", "SparkJobError", "StagingError")


def unavailable(
    exc: BaseException, config: CatalogConfig, operation: str
) -> ServiceUnavailableError | None:
    """The typed error for ``exc`` if it says the store or catalog did not answer, else None.

    Our own errors are left as they are (a :class:`CommitStateUnknownError`
    says more than "unavailable": a commit may have landed), except a
    :class:`ConfigurationError`, a :class:`StagingError` or a Spark job's
    error that only wraps an outage. ``operation``: what was being done, used when the error itself
    names no operation (``"the write job for ns.view"``).
    """
    if isinstance(exc, ServiceUnavailableError):
        return exc
    if isinstance(exc, CTError) and type(exc).__name__ not in _WRAPPERS:
        return None
    text = config.scrub(error_text(exc))
    service = which_service(text, config)
    if service is None:
        return None
    bounds = Bounds.of(config.properties)
    doing = _operation(text, operation)
    if service == "store":
        endpoint = store_endpoint(config)
        limit = (
            f"{bounds.store_retries + 1} attempts of at most {bounds.store_timeout_s:g} s "
            f"each ({settings.STORE_TIMEOUT_ENV}, {settings.STORE_RETRIES_ENV})"
        )
        cls: type[ServiceUnavailableError] = StoreUnavailableError
        name = "the object store"
    else:
        endpoint = catalog_endpoint(config)
        limit = (
            f"at most {bounds.catalog_timeout_s:g} s per request ({settings.CATALOG_TIMEOUT_ENV})"
        )
        cls = CatalogUnavailableError
        name = f"the {'REST' if config.kind == 'rest' else 'JDBC'} catalog {config.name!r}"
    message = (
        f"{name} at {endpoint} did not answer during {doing} within its bound ({limit}): "
        f"{_detail(text)}. Is it running and reachable? The task's retry lands the tick "
        "exactly once it is back"
    )
    return cls(message, endpoint=endpoint, operation=doing, service=name)


def raise_if_unavailable(exc: BaseException, config: CatalogConfig, operation: str) -> None:
    """Raise :func:`unavailable`'s error for ``exc`` (from ``exc``) if it is an outage."""
    typed = unavailable(exc, config, operation)
    if typed is not None and typed is not exc:
        raise typed from exc


# -- saying what a task waits for ------------------------------------------------------
def services_of(config: CatalogConfig) -> str:
    """The external services a job of ``config`` waits on, for a log line."""
    kind = "REST" if config.kind == "rest" else "JDBC"
    found = [f"the {kind} catalog at {catalog_endpoint(config)}"]
    if config.properties.get("s3.endpoint") or config.warehouse.startswith(("s3:", "s3a:")):
        found.append(f"the object store at {store_endpoint(config)}")
    return " and ".join(found)


@contextlib.contextmanager
def heartbeat(what: str, config: CatalogConfig, every: float | None = None) -> Iterator[None]:
    """Log every ``every`` seconds (:data:`HEARTBEAT_S`) that ``what`` is still running.

    A task waiting on a Spark job would otherwise log nothing while the job
    waits on a service; the line names the services, and the bounds after
    which the job fails if one of them does not answer.
    """
    interval = HEARTBEAT_S if every is None else every
    done = threading.Event()
    started = time.monotonic()
    bounds = Bounds.of(config.properties)
    depends = services_of(config)

    def beat() -> None:
        while not done.wait(interval):
            log.info(
                "still waiting for %s: %.0f s so far; it reads and writes %s (a request that "
                "gets no answer fails after %g s, %d retries)",
                what,
                time.monotonic() - started,
                depends,
                bounds.store_timeout_s,
                bounds.store_retries,
            )

    thread = threading.Thread(target=beat, name="ct-heartbeat", daemon=True)
    thread.start()
    try:
        yield
    finally:
        done.set()
        thread.join(timeout=5)
