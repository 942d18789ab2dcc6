"""The write job: stage the correction that makes a view's table equal its query.

A plain PySpark program with a CLI, submitted by ``WriteOperator`` through
``spark-submit`` (local mode by default, any cluster through a Spark
connection), and callable in-process with :func:`run_write` (tests, notebooks).

Given a batch description it

1. refuses to work if the target's head is no longer the description's base
   (another writer got there first: report ``outdated``, stage nothing);
2. registers every input pinned to its snapshot from the description;
3. runs the query, creating the target from the query's schema on first use
   and refusing a query whose schema no longer matches;
4. computes ``desired - persisted`` (see :mod:`.correction`);
5. stages inserts as Parquet and retractions as a position-delete file under
   the table location, and writes the staged-batch manifest.

Nothing becomes visible until ``AppendOperator`` compare-and-appends it.
"""

from __future__ import annotations

import argparse
import json
import logging
import posixpath
import sys
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from airflow_provider_ct.core.catalog import CatalogConfig
from airflow_provider_ct.core.deletes import write_position_deletes
from airflow_provider_ct.core.description import BatchDescription
from airflow_provider_ct.core.keys import SummaryKeys
from airflow_provider_ct.core.query import INPUT_VIEW_PREFIX, parse_query, query_hash
from airflow_provider_ct.core.staging import (
    StagedFile,
    StagedTime,
    begin_batch,
    finish_batch,
    outdated_reason,
)
from airflow_provider_ct.core.tables import create_managed_table
from airflow_provider_ct.exceptions import ConfigurationError, CTError
from airflow_provider_ct.spark.conf import job_session
from airflow_provider_ct.spark.correction import check_schema, compute_correction
from airflow_provider_ct.spark.job_errors import report_failure

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

log = logging.getLogger("airflow_provider_ct.write_job")

STATUS_STAGED = "staged"
STATUS_OUTDATED = "outdated"
STATUS_DRY_RUN = "dry_run"
#: ``refresh=`` values (see :func:`run_write`).
REFRESH_MODES = ("auto", "incremental", "full")
#: Rows per staged Parquet file (roughly; Spark splits by partition).
ROWS_PER_FILE = 2_000_000


@dataclass
class WriteReport:
    """What the job did; returned to Airflow as XCom."""

    status: str
    description_id: str
    target: str
    rows_to_insert: int = 0
    rows_to_delete: int = 0
    manifest: str | None = None
    staged_bytes: int = 0
    reason: str = ""
    extra: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {
            "status": self.status,
            "description_id": self.description_id,
            "target": self.target,
            "rows_to_insert": self.rows_to_insert,
            "rows_to_delete": self.rows_to_delete,
            "manifest": self.manifest,
            "staged_bytes": self.staged_bytes,
            "reason": self.reason,
            **self.extra,
        }


class _PhaseClock:
    """Wall time per phase of the job, for the log (where does a tick's time go?)."""

    def __init__(self) -> None:
        self._last = time.perf_counter()
        self.phases: dict[str, float] = {}

    def lap(self, name: str) -> None:
        now = time.perf_counter()
        self.phases[name] = round(now - self._last, 2)
        self._last = now

    def summary(self) -> str:
        return ", ".join(f"{k}={v}" for k, v in self.phases.items())


def _qualified(config: CatalogConfig, name: str) -> str:
    return f"{config.name}.{name}"


def _register_inputs(
    spark: SparkSession, config: CatalogConfig, desc: BatchDescription, inputs: tuple[str, ...]
) -> dict[str, str]:
    views: dict[str, str] = {}
    for index, name in enumerate(inputs):
        if name not in desc.inputs:
            raise CTError(f"description {desc.id} does not pin input {name}")
        snapshot = desc.inputs[name]
        reader = spark.read
        if snapshot is None:
            df = spark.table(_qualified(config, name)).limit(0)  # empty at the tick's time
        else:
            df = reader.option("snapshot-id", str(snapshot)).table(_qualified(config, name))
        view = f"{INPUT_VIEW_PREFIX}{index}"
        df.createOrReplaceTempView(view)
        views[name] = view
    return views


def _list_parquet(uri: str) -> list[str]:
    fs, local = pafs.FileSystem.from_uri(uri)
    prefix = uri[: len(uri) - len(local)] if uri.endswith(local) else ""
    infos = fs.get_file_info(pafs.FileSelector(local, allow_not_found=True, recursive=True))
    return sorted(
        prefix + i.path
        for i in infos
        if i.type == pafs.FileType.File
        and posixpath.basename(i.path).startswith("part-")
        and i.path.endswith(".parquet")
    )


def _drop_side_files(uri: str) -> None:
    """Remove what Spark writes beside the Parquet files (``_SUCCESS``, ``.crc``) in our folder.

    The table never references them, so left in place they would be debris.
    """
    fs, local = pafs.FileSystem.from_uri(uri)
    for info in fs.get_file_info(pafs.FileSelector(local, allow_not_found=True, recursive=True)):
        name = posixpath.basename(info.path)
        if info.type == pafs.FileType.File and (name == "_SUCCESS" or name.endswith(".crc")):
            fs.delete_file(info.path)


def _staged_file(table: Any, path: str) -> StagedFile:
    input_file = table.io.new_input(path)
    with input_file.open() as stream:
        rows = pq.read_metadata(stream).num_rows
    return StagedFile(path=path, record_count=rows, size_bytes=len(input_file))


def run_write(
    spark: SparkSession,
    config: CatalogConfig,
    sql: str,
    description: BatchDescription,
    *,
    dry_run: bool = False,
    refresh: str = "auto",
    verify_every: int = 0,
) -> WriteReport:
    """Compute and stage one batch. See the module docstring.

    :param refresh: ``auto`` (incremental where the query and the target's
        history allow, else the full correction), ``incremental`` (fail rather
        than fall back for a query that cannot be maintained incrementally)
        or ``full`` (always the full correction).
    :param verify_every: run the full correction every N ticks (0: never).
    """
    from pyiceberg.exceptions import NoSuchTableError
    from pyspark.sql.pandas.types import to_arrow_schema

    desc = description
    parsed = parse_query(sql, target=desc.target, catalog_name=config.name)
    catalog = config.load()
    try:
        table = catalog.load_table(desc.target)
    except NoSuchTableError:
        table = None
    reason = outdated_reason(table, desc)
    if reason is not None:
        log.info("%s", reason)
        return WriteReport(STATUS_OUTDATED, desc.id, desc.target, reason=reason)

    clock = _PhaseClock()
    views = _register_inputs(spark, config, desc, parsed.inputs)
    desired: DataFrame = spark.sql(parsed.pinned_sql(views))
    columns = [f.name for f in desired.schema.fields]
    if len({c.lower() for c in columns}) != len(columns):
        raise CTError(f"the query for {desc.target} has duplicate column names: {columns}")

    persisted: DataFrame | None = None
    if table is None:
        if dry_run:
            count = desired.count()
            return WriteReport(
                STATUS_DRY_RUN,
                desc.id,
                desc.target,
                rows_to_insert=count,
                reason="target does not exist yet",
            )
        # Every column optional: Spark's nullability flags shift with plans
        # (joins, explode), and a required column would reject staged files.
        arrow_schema = to_arrow_schema(desired.schema)
        arrow_schema = pa.schema([f.with_nullable(True) for f in arrow_schema])
        table = create_managed_table(catalog, desc.target, arrow_schema)
        if table.metadata.current_snapshot() is not None:
            return WriteReport(
                STATUS_OUTDATED,
                desc.id,
                desc.target,
                reason="target was created and written concurrently",
            )
    current = spark.table(_qualified(config, desc.target))
    check_schema(desired, current, desc.target)
    if desc.base_snapshot_id is not None:
        persisted = (
            spark.read.option("snapshot-id", str(desc.base_snapshot_id))
            .table(_qualified(config, desc.target))
            .select(*[f"`{c.name}`" for c in current.schema.fields], "_file", "_pos")
        )
    clock.lap("prepare")
    correction = compute_correction(desired, persisted, [f.name for f in current.schema.fields])
    clock.lap("diff")
    log.info(
        "correction for %s at %s: +%d -%d rows",
        desc.target,
        desc.time,
        correction.insert_count,
        correction.retract_count,
    )
    if dry_run:
        if correction.release is not None:
            correction.release()
        return WriteReport(
            STATUS_DRY_RUN,
            desc.id,
            desc.target,
            rows_to_insert=correction.insert_count,
            rows_to_delete=correction.retract_count,
        )

    # The query's hash lands with the batch: a later tick can then prove
    # itself quiet without Spark (core/quiet.py).
    batch, manifest = begin_batch(table, desc, summary={SummaryKeys.QUERY_HASH: query_hash(sql)})
    data_dir = batch.data_dir
    added: list[StagedFile] = []
    if correction.insert_count:
        files = max(1, -(-correction.insert_count // ROWS_PER_FILE))
        correction.inserts.repartition(files).write.mode("errorifexists").parquet(
            posixpath.join(data_dir, "inserts")
        )
        added = [_staged_file(table, p) for p in _list_parquet(data_dir)]
        _drop_side_files(data_dir)
    if correction.release is not None:
        correction.release()
    clock.lap("inserts")
    deletes: list[StagedFile] = []
    if correction.retractions:
        path = posixpath.join(data_dir, f"deletes-{uuid.uuid4().hex}.parquet")
        size = write_position_deletes(table.io, path, correction.retractions)
        deletes.append(StagedFile(path, len(correction.retractions), size))
    retractions = correction.retract_count
    finish_batch(
        batch, manifest, [StagedTime(desc.time, tuple(added), (), tuple(deletes), retractions)]
    )
    clock.lap("deletes+manifest")
    log.info("write job phases (s): %s", clock.summary())
    return WriteReport(
        STATUS_STAGED,
        desc.id,
        desc.target,
        rows_to_insert=correction.insert_count,
        rows_to_delete=correction.retract_count,
        manifest=manifest,
        staged_bytes=sum(f.size_bytes for f in (*added, *deletes)),
        extra={"strategy": "full", "phases": dict(clock.phases)},
    )


#: ``--error`` of both jobs (see :mod:`.job_errors`).
ERROR_HELP = "where to write the error that stopped the job, as JSON (else it is raised)"


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="ct-write-job", description=__doc__.split("\n")[0])
    parser.add_argument("--catalog", required=True, help="CatalogConfig as JSON")
    parser.add_argument("--description", required=True, help="batch description JSON or @file")
    parser.add_argument("--sql", required=True, help="the view's query, or @file")
    parser.add_argument("--report", required=True, help="where to write the JSON report")
    parser.add_argument("--error", help=ERROR_HELP)
    parser.add_argument("--dry-run", action="store_true")
    parser.add_argument("--refresh", default="auto", choices=REFRESH_MODES)
    parser.add_argument("--verify-every", type=int, default=0)
    return parser


def arg_text(value: str) -> str:
    """A CLI value, or the text of the file it names with a leading ``@``."""
    return Path(value[1:]).read_text() if value.startswith("@") else value


def job_inputs(catalog_arg: str, description_arg: str) -> tuple[CatalogConfig, BatchDescription]:
    """The catalog and description every job CLI receives (JSON or ``@file``).

    The operator passes ``@file`` for the catalog: it holds the password,
    which must not be on the command line.
    """
    try:
        config = CatalogConfig(**json.loads(arg_text(catalog_arg)))
    except (TypeError, ValueError) as exc:
        raise ConfigurationError(f"--catalog is not a catalog configuration: {exc}") from None
    return config, BatchDescription.from_json(arg_text(description_arg))


def run_job(
    args: argparse.Namespace,
    app_prefix: str,
    body: Callable[[SparkSession, CatalogConfig, BatchDescription], WriteReport],
) -> int:
    """The common ``main()`` of our jobs: inputs, session, report, or the error.

    A failure is written to ``--error`` (see :mod:`.job_errors`) and makes the
    exit code 1, so the operator can raise the job's own exception class;
    without ``--error`` it propagates.
    """
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s %(message)s")
    secrets: tuple[str, ...] = ()
    try:
        config, description = job_inputs(args.catalog, args.description)
        secrets = config.secrets()
        spark = job_session(config, f"{app_prefix}-{description.target}")
        try:
            report = body(spark, config, description)
        finally:
            spark.stop()
        Path(args.report).write_text(json.dumps(report.to_json()))
        log.info("report: %s", json.dumps(report.to_json()))
    except Exception as exc:
        if args.error is None:
            raise
        return report_failure(exc, args.error, secrets)
    return 0


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    return run_job(
        args,
        "ct-write",
        lambda spark, config, desc: run_write(
            spark,
            config,
            arg_text(args.sql),
            desc,
            dry_run=args.dry_run,
            refresh=args.refresh,
            verify_every=args.verify_every,
        ),
    )


if __name__ == "__main__":
    sys.exit(main())
