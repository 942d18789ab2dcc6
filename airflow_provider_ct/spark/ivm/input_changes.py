"""The inputs of an incremental tick, bound to Spark temp views, and their changes.

An incremental tick evaluates the query's blocks over each input as it is
now (``new``), as the target's last batch pinned it (``old``), and over the
rows it gained (``plus``) and lost (``minus``) in between
(:mod:`.incremental`). This module makes those four views: it reads the
pinned snapshots, reads the changes from the files the snapshot range
touched (:func:`~airflow_provider_ct.ivm.changes.table_changes.table_changes`, never a
scan of the input) and writes them where Spark can read them
(:class:`Scratch`). Kept apart from the correction's arithmetic, which only
sees view names and frames, so each can be read on its own.
"""

from __future__ import annotations

import logging
import shutil
import tempfile
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from airflow_provider_ct.core.settings import rows_on_driver
from airflow_provider_ct.exceptions import KeyedReadError
from airflow_provider_ct.ivm.changes.table_changes import TableChanges, table_changes
from airflow_provider_ct.ivm.driver.keyed_fetch import KeyedFetch
from airflow_provider_ct.ivm.plan.columns import referenced_columns
from airflow_provider_ct.ivm.plan.planner import Plan
from airflow_provider_ct.ivm.plan.sizes import ReadCheck
from airflow_provider_ct.spark.frames import changes_to_spark
from airflow_provider_ct.spark.ivm.bindings import MINUS, NEW, OLD, PLUS
from airflow_provider_ct.spark.ivm.keyed import KeyedBlock, keyed_blocks
from airflow_provider_ct.spark.ivm.keyed_local import LocalKeyed
from airflow_provider_ct.spark.ivm.subquery_terms import SubqueryBlock, subquery_blocks
from airflow_provider_ct.spark.snapshots import read_at

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from airflow_provider_ct.core.catalog import CatalogConfig

log = logging.getLogger(__name__)


@dataclass
class InputChange:
    """One input's change between two snapshots, as Spark frames."""

    plus: DataFrame
    minus: DataFrame
    inserted_rows: int
    deleted_rows: int
    files_read: int = 0
    bytes_read: int = 0
    files_cached: int = 0
    #: The same rows as Arrow tables on the driver (``plus``, ``minus``), which
    #: ``plus``/``minus`` read back: questions about them need no Spark job.
    arrow: tuple[pa.Table, pa.Table] | None = None


@dataclass
class Bindings:
    """The temp views of every input, per binding (``new``, ``old``, ``plus``, ``minus``)."""

    views: dict[str, dict[str, str]]
    #: Inputs whose rows changed.
    changed: set[str]
    changes: dict[str, InputChange] = field(default_factory=dict)
    #: Block index -> the block restricted to the keys its changes hold, for blocks whose
    #: keyed subqueries read a changed table (:mod:`.keyed`).
    keyed: dict[int, KeyedBlock] = field(default_factory=dict)
    #: Block index -> the brackets of its other subqueries' changed tables
    #: (:mod:`.subquery_terms`).
    subqueries: dict[int, SubqueryBlock] = field(default_factory=dict)

    def report(self) -> dict[str, Any]:
        keyed = {"keyed_rows_on": sorted({b.rows_on for b in self.keyed.values()})}
        subqueries = {str(i): b.notes for i, b in self.subqueries.items()}
        return {
            **(keyed if self.keyed else {}),
            **({"subquery_changes": subqueries} if subqueries else {}),
            "input_changes": {
                name: {"inserted": c.inserted_rows, "deleted": c.deleted_rows}
                for name, c in sorted(self.changes.items())
            },
            "files_read": sum(c.files_read for c in self.changes.values()),
            "bytes_read": sum(c.bytes_read for c in self.changes.values()),
            "files_cached": sum(c.files_cached for c in self.changes.values()),
        }

    def release_arrow(self) -> None:
        """Drop the changes' Arrow tables (driver memory) and what keyed blocks cached
        (a warm driver outlives the job) once the correction is known."""
        for change in self.changes.values():
            change.arrow = None
        for keyed in self.keyed.values():
            for frame in keyed.cached:
                frame.unpersist()
            keyed.cached.clear()


def read_pinned(
    spark: SparkSession, config: CatalogConfig, name: str, snapshot: int | None
) -> DataFrame:
    """``name`` as of ``snapshot``; ``None``: the input was empty then (no rows, today's schema)."""
    return read_at(spark, f"{config.name}.{name}", snapshot)


class Scratch:
    """Where the inputs' changes are written for Spark to read, removed after the job.

    Local mode: a local temporary folder. Otherwise the executors must read
    the files, so they go under the target's location (``ct-scratch/``),
    written and deleted through the table's FileIO.
    """

    def __init__(self, spark: SparkSession, target: Any) -> None:
        self.io: Any = None
        self.paths: list[str] = []
        if (spark.sparkContext.master or "").startswith("local"):
            self.folder = tempfile.mkdtemp(prefix="ct-changes-")
            self.local = True
        else:
            base = target.location().rstrip("/")
            self.folder = f"{base}/ct-scratch/{uuid.uuid4().hex}"
            self.io = target.io
            self.local = False

    def frame(self, spark: SparkSession, rows: Any, schema: Any) -> DataFrame:
        frame = changes_to_spark(spark, rows, schema, folder=self.folder, io=self.io)
        self.paths.extend(frame.inputFiles())
        return frame

    def remove(self) -> None:
        if self.local:
            shutil.rmtree(self.folder, ignore_errors=True)
            return
        for path in self.paths:
            try:
                self.io.delete(path)
            except OSError:  # best effort: a leftover scratch file is never referenced
                log.warning("could not remove scratch file %s", path)


def input_change(
    spark: SparkSession,
    table: Any,
    before: int | None,
    after: DataFrame,
    after_id: int,
    scratch: Scratch,
    columns: list[str],
    known: TableChanges | None = None,
) -> InputChange:
    """The rows the input gained and lost between ``before`` and ``after``, on ``columns``.

    Read by :func:`~airflow_provider_ct.ivm.changes.table_changes.table_changes` from the
    files the range touched (not a scan of the input), and only the columns
    the view reads; raises
    :class:`~airflow_provider_ct.exceptions.ChangesUnavailableError` when the
    metadata cannot tell (an expired snapshot, a schema change).

    :param after: the input at ``after_id``, as Spark reads it (for its types).
    :param known: the same change, already read (on these columns).
    """
    from pyspark.sql.types import StructType

    changes = known or table_changes(table, before, after_id, columns=columns)
    wanted = set(columns)
    schema = StructType([f for f in after.schema.fields if f.name in wanted])
    plus = scratch.frame(spark, changes.inserted, schema)
    minus = scratch.frame(spark, changes.deleted, schema)
    return InputChange(
        plus,
        minus,
        changes.inserted.num_rows,
        changes.deleted.num_rows,
        changes.files_read,
        changes.bytes_read,
        changes.files_cached,
        arrow=(changes.inserted, changes.deleted),
    )


def bind_inputs(
    spark: SparkSession,
    config: CatalogConfig,
    plan: Plan,
    tables: Mapping[str, Any],
    before: Mapping[str, int | None],
    after: Mapping[str, int | None],
    scratch: Scratch,
    known: Mapping[str, TableChanges] | None = None,
    check_reads: ReadCheck | None = None,
) -> Bindings:
    """Register every input's views; compute the changes of those that moved.

    :param tables: the inputs as PyIceberg loaded them for the history check.
    :param known: changes already read (on the columns the plan reads), by input.
    :param check_reads: prices a keyed block's restricted reads (:mod:`.keyed`).
    """
    views: dict[str, dict[str, str]] = {}
    changed: set[str] = set()
    changes: dict[str, InputChange] = {}
    frames = {name: read_pinned(spark, config, name, after[name]) for name in after}
    schemas = {name: frame.schema.fieldNames() for name, frame in frames.items()}
    columns = referenced_columns(plan, schemas, config.name)
    for index, name in enumerate(sorted(after)):
        names = {b: f"__ct_{b}_{index}" for b in (NEW, OLD, PLUS, MINUS)}
        frames[name].createOrReplaceTempView(names[NEW])
        read_pinned(spark, config, name, before[name]).createOrReplaceTempView(names[OLD])
        new = after[name]
        if before[name] != new and new is not None:
            change = input_change(
                spark,
                tables[name],
                before[name],
                frames[name],
                new,
                scratch,
                columns[name],
                (known or {}).get(name),
            )
            change.plus.createOrReplaceTempView(names[PLUS])
            change.minus.createOrReplaceTempView(names[MINUS])
            changes[name] = change
            if change.inserted_rows or change.deleted_rows:
                changed.add(name)
        views[name] = names
    bindings = Bindings(views, changed, changes)
    fetch = KeyedFetch(tables, before, after, columns, rows_on_driver())
    local = LocalKeyed(fetch, scratch)
    try:
        bindings.keyed = keyed_blocks(plan, bindings, schemas, config.name, check_reads, local)
        others = {
            i: b
            for i, b in enumerate(plan.blocks)
            if i not in bindings.keyed and set(b.fixed) & changed
        }
        bindings.subqueries = subquery_blocks(spark, others, bindings, schemas, config.name)
    except KeyedReadError:
        bindings.release_arrow()
        raise
    return bindings
