"""The program ``spark-submit`` runs: one CLI for every job kind.

::

    job_main.py --catalog @catalog.json --description <json> --job <spec> \\
                --report <path or URI> [--error <path or URI>]

``--job`` is a :class:`~airflow_provider_ct.spark.jobs.JobSpec` (the same
JSON the warm driver receives); ``--catalog``, ``--description`` and
``--job`` take inline text, ``b64:<base64>`` or ``@file``. The report goes to
``--report``; a failure to ``--error`` (see :mod:`.job_errors`), so the
operator raises the job's own exception class.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys

from airflow_provider_ct.core.catalog import CatalogConfig
from airflow_provider_ct.core.description import BatchDescription
from airflow_provider_ct.exceptions import ConfigurationError
from airflow_provider_ct.spark.conf import job_session
from airflow_provider_ct.spark.exchange import arg_text, write_text
from airflow_provider_ct.spark.job_errors import report_failure, typed_failure
from airflow_provider_ct.spark.jobs import JobSpec

log = logging.getLogger("airflow_provider_ct.job")

ARG_FORMS = "inline, b64:<base64> or @file"
#: Environment variable with the catalog's secrets as JSON (``{"password": ...,
#: "properties": {...}}``), for a job whose catalog argument carries none
#: (cluster deploy mode: give it to the driver as a Kubernetes or YARN secret).
SECRETS_ENV = "CT_CATALOG_SECRETS"


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="ct-job", description=__doc__.split("\n")[0])
    parser.add_argument("--catalog", required=True, help=f"CatalogConfig as JSON, {ARG_FORMS}")
    parser.add_argument("--description", required=True, help=f"batch description, {ARG_FORMS}")
    parser.add_argument("--job", required=True, help=f"the job spec (kind, args), {ARG_FORMS}")
    parser.add_argument(
        "--report", required=True, help="where to write the JSON report: a path or a URI"
    )
    parser.add_argument(
        "--error",
        help="where to write the error that stopped the job, as JSON (else it is raised): "
        "a path or a URI (s3://, hdfs://, file://)",
    )
    return parser


def with_secrets(config: CatalogConfig) -> CatalogConfig:
    """``config`` completed from :data:`SECRETS_ENV` when that is set."""
    raw = os.environ.get(SECRETS_ENV)
    if not raw:
        return config
    try:
        secrets = json.loads(raw)
        password = secrets.get("password")
        properties = {str(k): str(v) for k, v in dict(secrets.get("properties") or {}).items()}
    except (ValueError, TypeError, AttributeError) as exc:
        raise ConfigurationError(f"{SECRETS_ENV} is not a JSON object of secrets: {exc}") from None
    return config.with_secrets(str(password) if password else None, properties)


def job_inputs(catalog_arg: str, description_arg: str) -> tuple[CatalogConfig, BatchDescription]:
    """The catalog and description every job receives (JSON, ``b64:`` or ``@file``).

    In client and local mode the operator passes ``@file`` for the catalog:
    it holds the password, which must not be on the command line. In cluster
    deploy mode it passes the catalog without its secrets (``b64:``), which
    the job completes from ``CT_CATALOG_SECRETS`` (see :func:`with_secrets`).
    """
    try:
        config = with_secrets(CatalogConfig(**json.loads(arg_text(catalog_arg))))
    except (TypeError, ValueError) as exc:
        raise ConfigurationError(f"--catalog is not a catalog configuration: {exc}") from None
    return config, BatchDescription.from_json(arg_text(description_arg))


def run(args: argparse.Namespace) -> int:
    """Inputs, session, job, report; or the error, written for the operator.

    A failure is written to ``--error`` and makes the exit code 1; without
    ``--error`` it propagates.
    """
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s %(message)s")
    secrets: tuple[str, ...] = ()
    io: dict[str, str] = {}
    config: CatalogConfig | None = None
    what = "the job"
    try:
        config, description = job_inputs(args.catalog, args.description)
        what = f"the job for {description.target}"
        secrets, io = config.secrets(), dict(config.properties)
        spec = JobSpec.from_json(arg_text(args.job))
        spark = job_session(config, f"ct-{spec.kind}-{description.target}")
        try:
            report = spec.run(spark, config, description)
        finally:
            spark.stop()
        # A local path or a URI of the exchange folder (see spark/exchange.py).
        write_text(args.report, json.dumps(report.to_json()), io)
        log.info("report: %s", json.dumps(report.to_json()))
    except Exception as exc:
        if args.error is None:
            raise
        return report_failure(typed_failure(exc, config, what), args.error, secrets, io)
    return 0


def main(argv: list[str] | None = None) -> int:
    return run(_parser().parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
