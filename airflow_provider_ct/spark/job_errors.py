"""How a Spark job tells its operator which error stopped it.

``spark-submit`` hands back nothing but an exit code, and ``SparkSubmitHook``
turns every non-zero one into the same ``AirflowException``: a schema
mismatch, a bad query and a bug in the job would all look alike in Airflow,
and a DAG (or a person) could not react to the kind of failure. So a job's
``main()`` catches what stopped it and writes it as JSON to the file named by
its ``--error`` argument (written next to the report, in the operator's
private temporary folder)::

    {"type": "SchemaMismatchError", "module": "airflow_provider_ct.exceptions",
     "message": "the query's schema no longer matches ..."}

then exits non-zero. After a failed submit, the operator reads the file back
(:func:`job_error`) and raises the same :class:`~airflow_provider_ct.exceptions.CTError`
subclass with the job's message. Anything else (an exception from outside
our hierarchy, no file at all because the job was killed) becomes a
:class:`~airflow_provider_ct.exceptions.SparkJobError` that says what happened.
"""

from __future__ import annotations

import json
import logging
import os
import traceback
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from airflow_provider_ct.core.catalog import CatalogConfig, scrub_secrets
from airflow_provider_ct.core.outages import unavailable
from airflow_provider_ct.exceptions import CTError, SparkJobError, error_class

log = logging.getLogger("airflow_provider_ct.job_errors")

#: The error file's name in the operator's folder.
ERROR_FILE = "error.json"
_OUR_MODULE = "airflow_provider_ct.exceptions"


def failure_payload(exc: BaseException, secrets: Iterable[str] = ()) -> dict[str, str]:
    """Log ``exc`` (traceback scrubbed of ``secrets``) and describe it for the operator.

    The description (``type``, ``module``, ``message``) is what crosses
    ``spark-submit`` as the error file, or the warm driver's socket as a frame.
    """
    secrets = tuple(secrets)
    text = "".join(traceback.format_exception(exc))
    log.error("the job failed:\n%s", scrub_secrets(text, secrets))
    return {
        "type": type(exc).__name__,
        "module": type(exc).__module__,
        "message": scrub_secrets(str(exc), secrets),
    }


def typed_failure(exc: BaseException, config: CatalogConfig | None, what: str) -> BaseException:
    """``exc``, or the outage it amounts to (:func:`~airflow_provider_ct.core.outages.unavailable`).

    A job that stopped because the store or the catalog did not answer
    within its bound reports :class:`StoreUnavailableError` or
    :class:`CatalogUnavailableError` (service, endpoint, operation) instead
    of the Py4J error or ``SparkJobError`` the operator would see otherwise.
    """
    if config is None:
        return exc
    typed = unavailable(exc, config, what)
    if typed is None or typed is exc:
        return exc
    typed.__cause__ = exc
    return typed


def report_failure(
    exc: BaseException,
    error_path: str | None,
    secrets: Iterable[str] = (),
    io: Mapping[str, str] | None = None,
) -> int:
    """Log ``exc`` and write it to ``error_path``; the job's exit code (1).

    Called from a job's ``main()`` with whatever it caught. ``secrets`` are
    scrubbed from the message and the logged traceback: the job's output
    becomes the Airflow task log, and the error an Airflow exception.
    ``io``: the catalog's FileIO properties, to reach an exchange folder on S3.
    """
    payload = failure_payload(exc, secrets)
    if error_path is not None and "://" in error_path:
        from airflow_provider_ct.spark.exchange import write_text

        write_text(error_path, json.dumps(payload), io)  # the exchange folder (cluster mode)
    elif error_path is not None:
        fd = os.open(error_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as out:
            json.dump(payload, out)
    return 1


def job_error(error_path: Path | str, what: str, io: Mapping[str, str] | None = None) -> CTError:
    """The exception to raise for a failed job, from its error file (a path or a URI).

    :param what: the job, for messages (``"the write job for ns.view"``).
    """
    from airflow_provider_ct.spark.exchange import read_text

    try:
        text = read_text(str(error_path), io)
        if text is None:
            raise FileNotFoundError(str(error_path))
        payload = json.loads(text)
    except FileNotFoundError:
        return SparkJobError(
            f"{what} failed without reporting an error: it was killed (out of memory?) or "
            "died before it could; see the Spark output above"
        )
    except (OSError, ValueError) as exc:
        return SparkJobError(f"{what} failed and its error file is unreadable: {exc!r}")
    return error_from_payload(payload, what)


def error_from_payload(payload: Any, what: str) -> CTError:
    """The exception for a job's error description (see :func:`failure_payload`)."""
    try:
        name, module, message = payload["type"], payload["module"], payload["message"]
    except (TypeError, KeyError) as exc:
        return SparkJobError(f"{what} failed and its error is unreadable: {exc!r}")
    cls = error_class(str(name)) if module == _OUR_MODULE else None
    if cls is None:
        return SparkJobError(f"{what} failed with {module}.{name}: {message}")
    return cls(str(message))
